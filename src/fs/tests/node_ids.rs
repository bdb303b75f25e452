//! Inode numbers as the kernel's node ids: lookup counting, generations, open directories.

use crate::device::MemDevice;
use crate::fs::*;
use crate::mkfs::{mkfs, MkfsParams};

const ROOT: u64 = crate::format::ROOT_INO;
use super::U;

/// A fresh file system on memory devices (the devices too, for remounts).
pub(in crate::fs) fn fresh() -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>, Arc<Fs>) {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(16 << 20));
    let data: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(16 << 20));
    let params = MkfsParams {
        segment_blocks: 64,
        ..MkfsParams::default()
    };
    mkfs(meta.clone(), data.clone(), &params).unwrap();
    let fs = Fs::mount(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    (meta, data, fs)
}

#[test]
fn a_number_the_kernel_holds_is_not_reused_until_it_forgets() {
    let (_m, _d, fs) = fresh();
    fs.begin_kernel_session(false);
    let a = fs.mkdir(&U, ROOT, b"a", 0o755).unwrap();
    let again = fs.lookup(ROOT, b"a").unwrap();
    assert_eq!(again.ino, a.ino);
    fs.rmdir(&U, ROOT, b"a").unwrap();
    fs.sync_log().unwrap(); // the free is applied: an unheld number would be reusable now
    assert_eq!(fs.kernel_references(), (1, 1));
    let b = fs.mkdir(&U, ROOT, b"b", 0o755).unwrap();
    assert_ne!(b.ino, a.ino, "a number the kernel holds came back");
    fs.forget(a.ino, 1);
    let c = fs.mkdir(&U, ROOT, b"c", 0o755).unwrap();
    assert_ne!(c.ino, a.ino, "one of two references is still held");
    fs.forget(a.ino, 1);
    assert_eq!(
        fs.kernel_references(),
        (2, 0),
        "b and c are held, nothing freed"
    );
    let d = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    assert_eq!(d.ino, a.ino, "forgotten, the lowest free number is reused");
    assert!(d.generation > a.generation);
    fs.unmount().unwrap();
}

#[test]
fn entries_of_every_kind_are_counted() {
    let (_m, _d, fs) = fresh();
    fs.begin_kernel_session(false);
    let dir = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    let (f, fh) = fs.create(&U, dir.ino, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    let n = fs
        .mknod(&U, dir.ino, b"n", libc::S_IFIFO | 0o644, 0)
        .unwrap();
    let s = fs.symlink(&U, dir.ino, b"s", b"f").unwrap();
    fs.link(&U, f.ino, dir.ino, b"l").unwrap();
    let (_, fh) = fs.create(&U, dir.ino, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    // Reference counts so far: d 1, f 3 (create, link, create of an existing name), n 1, s 1.
    let mut listed = Vec::new();
    fs.readdirplus(dir.ino, 0, &mut |e, _| {
        listed.push(e.name.clone());
        true
    })
    .unwrap();
    assert_eq!(listed.len(), 2 + 4, "., .. and four names");
    // readdirplus: f twice (f, l), n, s; "." and ".." are not counted.
    for (i, (ino, n)) in [(dir.ino, 1), (f.ino, 5), (n.ino, 2), (s.ino, 2)]
        .into_iter()
        .enumerate()
    {
        fs.forget(ino, n - 1);
        assert_eq!(
            fs.kernel_references().0,
            4 - i,
            "inode {ino}: fewer than {n}"
        );
        fs.forget(ino, 1);
        assert_eq!(
            fs.kernel_references().0,
            3 - i,
            "inode {ino}: more than {n}"
        );
    }
    assert_eq!(fs.kernel_references(), (0, 0));
    fs.unmount().unwrap();
}

#[test]
fn dot_is_any_inode_and_dot_dot_its_parent() {
    let (_m, _d, fs) = fresh();
    let dir = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    let (f, fh) = fs.create(&U, dir.ino, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    assert_eq!(fs.lookup(f.ino, b".").unwrap(), fs.getattr(f.ino).unwrap());
    assert_eq!(fs.lookup(dir.ino, b"..").unwrap().ino, ROOT);
    assert!(matches!(
        fs.lookup(f.ino, b".."),
        Err(FsError::Errno(libc::ENOTDIR))
    ));
    fs.unlink(&U, dir.ino, b"f").unwrap();
    assert!(matches!(
        fs.lookup(f.ino, b"."),
        Err(FsError::Errno(libc::ENOENT))
    ));
    fs.unmount().unwrap();
}

#[test]
fn a_reused_number_gets_a_newer_generation_even_if_the_last_use_never_reached_the_log() {
    let (m, d, fs) = fresh();
    let mut last = 0;
    let mut ino = 0;
    for round in 0..3 {
        // Made and removed between two log writes: the inode itself is never written.
        let a = fs.mkdir(&U, ROOT, b"a", 0o755).unwrap();
        if round > 0 {
            assert_eq!(a.ino, ino, "the freed number is the lowest free one");
        }
        assert!(
            a.generation > last,
            "round {round}: generation {}",
            a.generation
        );
        (ino, last) = (a.ino, a.generation);
        fs.rmdir(&U, ROOT, b"a").unwrap();
        fs.sync_log().unwrap();
    }
    // ... and across a remount, which knows only what the log says.
    fs.unmount().unwrap();
    let fs = Fs::mount(m, d, MountOptions::default()).unwrap();
    let a = fs.mkdir(&U, ROOT, b"a", 0o755).unwrap();
    assert_eq!(a.ino, ino);
    assert!(
        a.generation > last,
        "after remount: generation {}",
        a.generation
    );
    fs.unmount().unwrap();
}

#[test]
fn an_open_directory_outlives_its_name() {
    let (m, d, fs) = fresh();
    let dir = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    let fh = fs.opendir(&U, dir.ino).unwrap();
    fs.rmdir(&U, ROOT, b"d").unwrap();
    let a = fs.getattr(dir.ino).unwrap();
    assert_eq!((a.kind, a.nlink), (FileKind::Directory, 0));
    assert_eq!(
        fs.getattr(ROOT).unwrap().nlink,
        3,
        "the root lost the '..' link"
    );
    assert!(matches!(
        fs.mkdir(&U, dir.ino, b"x", 0o755),
        Err(FsError::Errno(libc::ENOENT))
    ));
    // Renamed over while open: the same.
    let e = fs.mkdir(&U, ROOT, b"e", 0o755).unwrap();
    let efh = fs.opendir(&U, e.ino).unwrap();
    fs.mkdir(&U, ROOT, b"f", 0o755).unwrap();
    fs.rename(&U, ROOT, b"f", ROOT, b"e", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.getattr(e.ino).unwrap().nlink, 0);
    fs.releasedir(e.ino, efh).unwrap();
    assert!(matches!(
        fs.getattr(e.ino),
        Err(FsError::Errno(libc::ENOENT))
    ));
    // Still open at unmount: the next mount frees it, as an open-unlinked file.
    fs.unmount().unwrap();
    let fs = Fs::mount(m, d, MountOptions::default()).unwrap();
    assert_eq!(fs.recovery().orphans_freed, 1);
    assert!(fs.getattr(dir.ino).is_err());
    let _ = fh;
    fs.unmount().unwrap();
}

/// Under `dirsync` an entry is handed out only once its directory change is committed: when
/// that commit fails (ENOSPC here, through a test hook, as a full log would), the caller
/// gets the error and not the entry, so neither the kernel reference the entry carried nor
/// the handle a create opened stays behind (before, both leaked: the number could never be
/// reused, and the file could not be freed when removed).
#[test]
fn an_entry_whose_dirsync_commit_fails_leaves_no_reference_or_handle() {
    let (meta, data) = super::devices(32, 32);
    let opts = MountOptions {
        dirsync: true,
        ..MountOptions::default()
    };
    let fs = Fs::mount(meta.clone(), data.clone(), opts).unwrap();
    fs.begin_kernel_session(false);
    let caller = super::U;
    let root = super::ROOT;
    fs.log.fail_next_plan.store(true, Ordering::Release);
    let r = fs.create(&caller, root, b"f", 0o644, libc::O_RDWR);
    assert!(matches!(r, Err(FsError::Errno(libc::ENOSPC))), "{r:?}");
    fs.log.fail_next_plan.store(true, Ordering::Release);
    let r = fs.mkdir(&caller, root, b"d", 0o755);
    assert!(matches!(r, Err(FsError::Errno(libc::ENOSPC))), "{r:?}");
    assert_eq!(
        fs.kernel_references(),
        (0, 0),
        "references of entries never handed out"
    );
    // The changes themselves stay (they were made): the file is there, and not open.
    let f = fs.lookup_entry(root, b"f").unwrap().expect("the file").ino;
    fs.unlink(&caller, root, b"f").unwrap();
    assert!(
        matches!(fs.getattr(f), Err(FsError::Errno(libc::ENOENT))),
        "a removed file no handle holds is freed at once"
    );
    fs.unmount().unwrap();
    let r = crate::check::check(&*meta, &*data).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// Inodes df counts: what names a file. A removed file is gone for df at once, while its
/// transaction is written and while the kernel still holds its number (until FORGET, which
/// may come much later: df -i right after deletes counted them, under load).
#[test]
fn df_counts_a_removed_file_as_gone_before_the_kernel_forgets_it() {
    let (_m, _d, fs) = fresh();
    fs.begin_kernel_session(false);
    fn used(fs: &Fs) -> u64 {
        let s = fs.statfs().unwrap();
        s.files - s.ffree
    }
    let before = used(&fs);
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    let d = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    fs.forget(d.ino, 1);
    assert_eq!(used(&fs), before + 2);
    fs.unlink(&U, ROOT, b"f").unwrap();
    fs.rmdir(&U, ROOT, b"d").unwrap();
    assert_eq!(used(&fs), before, "removed, not yet written");
    *fs.log.after_snapshot.lock() = Some(Box::new(move |fs: &Fs| {
        assert_eq!(used(fs), before, "while the transaction is written");
    }));
    fs.sync_log().unwrap();
    assert!(fs.log.after_snapshot.lock().is_none(), "the hook ran");
    assert_eq!(
        fs.kernel_references(),
        (1, 1),
        "the kernel still holds the file's number"
    );
    assert_eq!(
        used(&fs),
        before,
        "written, the kernel has not forgotten it"
    );
    let again = fs.mkdir(&U, ROOT, b"again", 0o755).unwrap();
    assert_eq!(
        again.ino, d.ino,
        "the directory's number, not held, is reused"
    );
    assert_eq!(used(&fs), before + 1);
    fs.forget(f.ino, 1);
    assert_eq!(used(&fs), before + 1, "forgotten: free to reuse");
    let third = fs.mkdir(&U, ROOT, b"third", 0o755).unwrap();
    assert_eq!(third.ino, f.ino, "the file's number, forgotten, is reused");
    assert_eq!(used(&fs), before + 2);
    fs.unmount().unwrap();
}
