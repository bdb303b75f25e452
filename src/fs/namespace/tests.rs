//! How long a removed inode lives: while it has an open handle, and — where the kernel opens
//! it without telling DualFS (no OPEN, no OPENDIR) — while the kernel holds references.

use crate::format::inode::{FLAG_APPEND, FLAG_IMMUTABLE};
use crate::fs::tests::node_ids::fresh;
use crate::fs::tests::{crash_copy, U};
use crate::fs::*;

const ROOT: u64 = crate::format::ROOT_INO;

fn errno<T: std::fmt::Debug>(r: Result<T>) -> i32 {
    match r {
        Err(FsError::Errno(e)) => e,
        other => panic!("expected an errno, got {other:?}"),
    }
}

fn free_blocks(fs: &Fs) -> u64 {
    fs.sync_log().unwrap();
    fs.statfs().unwrap().bfree
}

fn assert_clean(m: &Arc<dyn BlockDevice>, d: &Arc<dyn BlockDevice>) {
    let r = crate::check::check(&**m, &**d).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// A file the kernel created and opened unseen (as the adapter does with no-open support:
/// the create's handle goes at once), with `len` bytes written through `NO_HANDLE`.
fn unseen_file(fs: &Fs, name: &[u8], len: usize) -> u64 {
    let (f, fh) = fs.create(&U, ROOT, name, 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    let data = vec![7u8; len];
    assert_eq!(
        fs.write_as(f.ino, NO_HANDLE, libc::O_WRONLY, 0, &data, None)
            .unwrap() as usize,
        len
    );
    f.ino
}

#[test]
fn a_removed_file_the_kernel_opened_unseen_lives_until_its_last_forget() {
    let (m, d, fs) = fresh();
    fs.begin_kernel_session(false);
    fs.kernel_opens_unseen(true, false);
    let before = free_blocks(&fs);
    let ino = unseen_file(&fs, b"f", 40_000);
    fs.lookup(ROOT, b"f").unwrap(); // a second reference: the kernel holds two
    let used = free_blocks(&fs);
    assert!(used < before);
    fs.unlink(&U, ROOT, b"f").unwrap();
    assert_eq!(errno(fs.lookup(ROOT, b"f")), libc::ENOENT);
    // Still readable and writable through the kernel's descriptor, and its blocks held.
    assert_eq!(fs.read(ino, NO_HANDLE, 0, 100).unwrap(), vec![7u8; 100]);
    fs.write_as(ino, NO_HANDLE, libc::O_WRONLY, 0, b"x", None)
        .unwrap();
    assert_eq!(fs.getattr(ino).unwrap().nlink, 0);
    assert_eq!(free_blocks(&fs), used, "an orphan's blocks stay allocated");
    fs.forget(ino, 1);
    assert_eq!(fs.getattr(ino).unwrap().size, 40_000, "one reference left");
    fs.forget(ino, 1);
    assert_eq!(
        errno(fs.getattr(ino)),
        libc::ENOENT,
        "freed at the last FORGET"
    );
    assert_eq!(free_blocks(&fs), before, "and its blocks with it");
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&m, &d);
}

#[test]
fn with_opens_seen_a_removed_file_goes_at_its_last_close_whatever_the_kernel_holds() {
    let (m, d, fs) = fresh();
    fs.begin_kernel_session(false);
    let before = free_blocks(&fs);
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.write(f.ino, fh, 0, &[1u8; 20_000]).unwrap();
    fs.unlink(&U, ROOT, b"f").unwrap();
    assert_eq!(
        fs.read(f.ino, fh, 0, 3).unwrap(),
        [1, 1, 1],
        "open: readable"
    );
    fs.release(f.ino, fh).unwrap();
    assert_eq!(
        errno(fs.getattr(f.ino)),
        libc::ENOENT,
        "freed at the close though the kernel still holds it"
    );
    assert_eq!(free_blocks(&fs), before, "at once: df right after rm");
    assert_eq!(
        fs.kernel_references(),
        (1, 1),
        "the number waits for FORGET"
    );
    assert_eq!(
        errno(fs.write_as(f.ino, NO_HANDLE, libc::O_WRONLY, 0, b"x", None)),
        libc::EBADF,
        "no unseen handles while the kernel sends OPEN"
    );
    fs.forget(f.ino, 1);
    assert_eq!(fs.kernel_references(), (0, 0));
    // And a file removed with no handle and no reference goes at its unlink.
    let (g, fh) = fs.create(&U, ROOT, b"g", 0o644, libc::O_RDWR).unwrap();
    fs.release(g.ino, fh).unwrap();
    fs.forget(g.ino, 1);
    fs.unlink(&U, ROOT, b"g").unwrap();
    assert_eq!(errno(fs.getattr(g.ino)), libc::ENOENT);
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&m, &d);
}

#[test]
fn a_removed_directory_lives_until_its_last_forget_without_opendir() {
    let (m, d, fs) = fresh();
    fs.begin_kernel_session(false);
    fs.kernel_opens_unseen(false, true);
    let dir = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    fs.setxattr(&U, dir.ino, b"user.a", b"v", XattrFlags::default())
        .unwrap();
    fs.rmdir(&U, ROOT, b"d").unwrap();
    let a = fs.getattr(dir.ino).unwrap();
    assert_eq!((a.kind, a.nlink), (FileKind::Directory, 0));
    assert_eq!(errno(fs.mkdir(&U, dir.ino, b"sub", 0o755)), libc::ENOENT);
    fs.sync_log().unwrap();
    assert_eq!(
        fs.getattr(dir.ino).unwrap().nlink,
        0,
        "kept across a log write"
    );
    fs.forget(dir.ino, 1);
    assert_eq!(errno(fs.getattr(dir.ino)), libc::ENOENT);
    // A file is freed at once: the kernel sends OPEN for files.
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    fs.unlink(&U, ROOT, b"f").unwrap();
    assert_eq!(errno(fs.getattr(f.ino)), libc::ENOENT);
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&m, &d);
}

#[test]
fn an_orphan_the_kernel_held_at_a_crash_is_freed_at_the_next_mount() {
    let (m, d, fs) = fresh();
    fs.begin_kernel_session(false);
    fs.kernel_opens_unseen(true, true);
    let before = free_blocks(&fs);
    let ino = unseen_file(&fs, b"f", 30_000);
    let dir = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    fs.unlink(&U, ROOT, b"f").unwrap();
    fs.rmdir(&U, ROOT, b"d").unwrap();
    fs.sync_log().unwrap(); // the orphans reach the log
    let (m2, d2) = crash_copy(&m, &d);
    let fs2 = Fs::mount(m2.clone(), d2.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs2.recovery().orphans_freed, 2);
    assert_eq!(errno(fs2.getattr(ino)), libc::ENOENT);
    assert_eq!(errno(fs2.getattr(dir.ino)), libc::ENOENT);
    assert_eq!(free_blocks(&fs2), before);
    fs2.unmount().unwrap();
    drop(fs2);
    assert_clean(&m2, &d2);
    // The first mount, unmounted while the kernel still held them, leaves them as orphans
    // too; the next mount frees them.
    fs.unmount().unwrap();
    drop(fs);
    let fs = Fs::mount(m.clone(), d.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.recovery().orphans_freed, 2);
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&m, &d);
}

#[test]
fn writes_through_unseen_opens_check_the_flags_and_follow_o_append() {
    let (m, d, fs) = fresh();
    fs.begin_kernel_session(false);
    fs.kernel_opens_unseen(true, false);
    let ino = unseen_file(&fs, b"f", 10);
    // O_APPEND from the request: written at the end, whatever offset the kernel sent.
    fs.write_as(
        ino,
        NO_HANDLE,
        libc::O_WRONLY | libc::O_APPEND,
        0,
        b"ab",
        None,
    )
    .unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, 12);
    assert_eq!(fs.read(ino, NO_HANDLE, 10, 2).unwrap(), b"ab");
    fs.set_inode_flags(&Caller::ROOT, ino, FLAG_APPEND).unwrap();
    assert_eq!(
        errno(fs.write_as(ino, NO_HANDLE, libc::O_WRONLY, 0, b"x", None)),
        libc::EPERM,
        "append-only: only O_APPEND writes"
    );
    let size = |st: SetAttr| fs.setattr(&U, ino, &st).map(|_| ());
    assert_eq!(
        errno(size(SetAttr {
            size: Some(0),
            ..SetAttr::default()
        })),
        libc::EPERM,
        "an O_TRUNC open arrives as this truncate"
    );
    fs.write_as(
        ino,
        NO_HANDLE,
        libc::O_WRONLY | libc::O_APPEND,
        0,
        b"c",
        None,
    )
    .unwrap();
    fs.set_inode_flags(&Caller::ROOT, ino, FLAG_IMMUTABLE)
        .unwrap();
    assert_eq!(
        errno(fs.write_as(
            ino,
            NO_HANDLE,
            libc::O_WRONLY | libc::O_APPEND,
            0,
            b"x",
            None
        )),
        libc::EPERM
    );
    assert_eq!(errno(fs.fallocate(ino, NO_HANDLE, 0, 4096, 0)), libc::EPERM);
    fs.set_inode_flags(&Caller::ROOT, ino, 0).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, 13);
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&m, &d);
}

#[test]
fn an_unnamed_file_is_freed_at_its_last_close_unless_linked_first() {
    let (m, d, fs) = fresh();
    let before = free_blocks(&fs);
    let inodes = fs.statfs().unwrap().ffree;
    let root_size = fs.getattr(ROOT).unwrap().size;
    // Closed unnamed: gone, blocks and number.
    let (t, fh) = fs.tmpfile(&U, ROOT, 0o600, libc::O_RDWR).unwrap();
    assert_eq!(t.nlink, 0);
    fs.write(t.ino, fh, 0, &[5u8; 20_000]).unwrap();
    assert_eq!(fs.getattr(ROOT).unwrap().size, root_size, "no entry for it");
    assert!(free_blocks(&fs) < before);
    fs.release(t.ino, fh).unwrap();
    assert_eq!(errno(fs.getattr(t.ino)), libc::ENOENT);
    assert_eq!(free_blocks(&fs), before);
    assert_eq!(fs.statfs().unwrap().ffree, inodes);
    // Linked before its close: an ordinary file, with what was written.
    let (t, fh) = fs.tmpfile(&U, ROOT, 0o640, libc::O_RDWR).unwrap();
    fs.write(t.ino, fh, 0, b"kept").unwrap();
    let named = fs.link(&U, t.ino, ROOT, b"named").unwrap();
    assert_eq!((named.ino, named.nlink), (t.ino, 1));
    // Once: unlinked again, it cannot be named a second time (as Linux's I_LINKABLE).
    fs.unlink(&U, ROOT, b"named").unwrap();
    assert_eq!(errno(fs.link(&U, t.ino, ROOT, b"again")), libc::ENOENT);
    fs.release(t.ino, fh).unwrap();
    let (t, fh) = fs.tmpfile(&U, ROOT, 0o640, libc::O_RDWR).unwrap();
    fs.write(t.ino, fh, 0, b"kept").unwrap();
    fs.link(&U, t.ino, ROOT, b"kept").unwrap();
    fs.release(t.ino, fh).unwrap();
    // With O_EXCL it never gets a name.
    let (x, xfh) = fs
        .tmpfile(&U, ROOT, 0o600, libc::O_RDWR | libc::O_EXCL)
        .unwrap();
    assert_eq!(errno(fs.link(&U, x.ino, ROOT, b"excl")), libc::ENOENT);
    fs.release(x.ino, xfh).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&m, &d);
    let fs = Fs::mount(m.clone(), d.clone(), MountOptions::default()).unwrap();
    let kept = fs.lookup(ROOT, b"kept").unwrap();
    assert_eq!((kept.nlink, kept.perm), (1, 0o640));
    assert_eq!(fs.read(kept.ino, NO_HANDLE, 0, 10).unwrap(), b"kept");
    assert_eq!(errno(fs.lookup(ROOT, b"again")), libc::ENOENT);
    fs.unmount().unwrap();
    drop(fs);
    assert_clean(&m, &d);
}

#[test]
fn an_unnamed_file_open_at_a_crash_is_freed_at_the_next_mount() {
    let (m, d, fs) = fresh();
    let before = free_blocks(&fs);
    let (t, fh) = fs.tmpfile(&U, ROOT, 0o600, libc::O_RDWR).unwrap();
    fs.write(t.ino, fh, 0, &[9u8; 30_000]).unwrap();
    fs.sync_log().unwrap(); // the orphan and its blocks reach the log
    let (m2, d2) = crash_copy(&m, &d);
    let fs2 = Fs::mount(m2.clone(), d2.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs2.recovery().orphans_freed, 1);
    assert_eq!(errno(fs2.getattr(t.ino)), libc::ENOENT);
    assert_eq!(free_blocks(&fs2), before);
    fs2.unmount().unwrap();
    drop(fs2);
    assert_clean(&m2, &d2);
    fs.release(t.ino, fh).unwrap();
    fs.unmount().unwrap();
}
