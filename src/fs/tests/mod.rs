//! Core tests through the plain Rust API (no FUSE): everything persists across unmount.

use super::*;
use crate::device::MemDevice;
use crate::mkfs::{mkfs, MkfsParams};

mod locks;
pub(super) mod node_ids;
mod readahead;

pub(super) const ROOT: u64 = crate::format::ROOT_INO;

pub(super) fn devices(meta_mb: u64, data_mb: u64) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(meta_mb << 20));
    let data: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(data_mb << 20));
    mkfs(
        meta.clone(),
        data.clone(),
        &MkfsParams {
            segment_blocks: 64,
            ..MkfsParams::default()
        },
    )
    .unwrap();
    (meta, data)
}

/// A device that counts the bytes written to it, the write requests, and the reads.
pub(super) struct Counting {
    inner: Arc<dyn BlockDevice>,
    pub(super) written: std::sync::atomic::AtomicU64,
    pub(super) requests: std::sync::atomic::AtomicU64,
    pub(super) reads: std::sync::atomic::AtomicU64,
}

impl Counting {
    pub(super) fn over(inner: Arc<dyn BlockDevice>) -> Arc<Counting> {
        Arc::new(Counting {
            inner,
            written: Default::default(),
            requests: Default::default(),
            reads: Default::default(),
        })
    }
}

impl BlockDevice for Counting {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.written
            .fetch_add(buf.len() as u64, std::sync::atomic::Ordering::AcqRel);
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

pub(super) fn mount(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) -> Arc<Fs> {
    Fs::mount(meta.clone(), data.clone(), MountOptions::default()).unwrap()
}

/// A mount whose writes go to the data device at once (no delayed allocation): for tests of
/// the block map and the allocator as each write leaves them.
pub(super) fn mount_write_through(
    meta: &Arc<dyn BlockDevice>,
    data: &Arc<dyn BlockDevice>,
) -> Arc<Fs> {
    let opts = MountOptions {
        data_cache_bytes: 0,
        ..MountOptions::default()
    };
    Fs::mount(meta.clone(), data.clone(), opts).unwrap()
}

fn names(fs: &Fs, dir: u64) -> Vec<String> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, &mut |e| {
        v.push(String::from_utf8(e.name.clone()).unwrap());
        true
    })
    .unwrap();
    v.sort();
    v
}

pub(super) const U: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: 0,
    umask: 0,
    holds_fsetid: None,
};

#[test]
fn fresh_file_system_has_root_and_lost_found() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    assert_eq!(names(&fs, ROOT), vec![".", "..", "lost+found"]);
    let a = fs.getattr(ROOT).unwrap();
    assert_eq!(a.kind, FileKind::Directory);
    assert_eq!(a.nlink, 3);
    let lf = fs.lookup(ROOT, b"lost+found").unwrap();
    assert_eq!(lf.ino, 2);
    assert_eq!(lf.perm, 0o700);
    fs.unmount().unwrap();
}

#[test]
fn files_persist_across_remount() {
    let (m, d) = devices(32, 64);
    let fs = mount(&m, &d);
    let dir = fs.mkdir(&U, ROOT, b"dir", 0o755).unwrap();
    let (f, fh) = fs
        .create(&U, dir.ino, b"file", 0o644, libc::O_WRONLY)
        .unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(fs.write(f.ino, fh, 0, &data).unwrap(), data.len() as u32);
    fs.release(f.ino, fh).unwrap();
    fs.symlink(&U, dir.ino, b"short", b"file").unwrap();
    let long = vec![b'x'; 4095];
    fs.symlink(&U, dir.ino, b"long", &long).unwrap();
    fs.link(&U, f.ino, ROOT, b"hard").unwrap();
    fs.unmount().unwrap();

    let fs = mount(&m, &d);
    let dir2 = fs.lookup(ROOT, b"dir").unwrap();
    assert_eq!(dir2.ino, dir.ino);
    assert_eq!(dir2.uid, 1000);
    let f2 = fs.lookup(dir.ino, b"file").unwrap();
    assert_eq!(f2.size, data.len() as u64);
    assert_eq!(f2.nlink, 2);
    let fh = fs.open(&U, f2.ino, libc::O_RDONLY).unwrap();
    assert_eq!(
        fs.read(f2.ino, fh, 0, data.len() as u32 + 10).unwrap(),
        data
    );
    assert_eq!(fs.read(f2.ino, fh, 4000, 200).unwrap(), &data[4000..4200]);
    fs.release(f2.ino, fh).unwrap();
    let s = fs.lookup(dir.ino, b"short").unwrap();
    assert_eq!(fs.readlink(s.ino).unwrap(), b"file");
    let l = fs.lookup(dir.ino, b"long").unwrap();
    assert_eq!(fs.readlink(l.ino).unwrap(), long);
    assert_eq!(
        names(&fs, dir.ino),
        vec![".", "..", "file", "long", "short"]
    );
    fs.unmount().unwrap();
}

#[test]
fn unlink_frees_space_and_sparse_files_hold_no_blocks() {
    let (m, d) = devices(32, 64);
    let fs = mount(&m, &d);
    let free0 = fs.statfs().unwrap().bfree;
    let (f, fh) = fs.create(&U, ROOT, b"big", 0o644, libc::O_WRONLY).unwrap();
    let chunk = vec![0xabu8; 1 << 20];
    for i in 0..8 {
        fs.write(f.ino, fh, i << 20, &chunk).unwrap();
    }
    assert_eq!(fs.statfs().unwrap().bfree, free0 - 2048);
    // A hole of 10 GiB costs nothing.
    fs.write(f.ino, fh, 10 << 30, b"end").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, (10 << 30) + 3);
    assert_eq!(fs.read(f.ino, fh, 5 << 30, 4096).unwrap(), vec![0u8; 4096]);
    fs.release(f.ino, fh).unwrap();
    fs.sync().unwrap();
    fs.unlink(&U, ROOT, b"big").unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.statfs().unwrap().bfree, free0);
    assert_eq!(fs.lookup(ROOT, b"big").unwrap_err().errno(), libc::ENOENT);
    fs.unmount().unwrap();
    let fs = mount(&m, &d);
    assert_eq!(fs.statfs().unwrap().bfree, free0);
    fs.unmount().unwrap();
}

#[test]
fn rename_and_errors() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let a = fs.mkdir(&U, ROOT, b"a", 0o755).unwrap();
    let b = fs.mkdir(&U, ROOT, b"b", 0o755).unwrap();
    let sub = fs.mkdir(&U, a.ino, b"sub", 0o755).unwrap();
    fs.create(&U, a.ino, b"f", 0o644, 0)
        .map(|(x, h)| fs.release(x.ino, h))
        .unwrap()
        .unwrap();
    assert_eq!(
        fs.rmdir(&U, ROOT, b"a").unwrap_err().errno(),
        libc::ENOTEMPTY
    );
    assert_eq!(
        fs.rename(&U, ROOT, b"a", sub.ino, b"x", RenameFlags::default())
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    fs.rename(&U, a.ino, b"sub", b.ino, b"sub2", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.lookup(sub.ino, b"..").unwrap().ino, b.ino);
    fs.rename(
        &U,
        a.ino,
        b"f",
        b.ino,
        b"sub2",
        RenameFlags {
            exchange: true,
            noreplace: false,
        },
    )
    .unwrap();
    assert_eq!(fs.lookup(a.ino, b"f").unwrap().ino, sub.ino);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(fs.lookup(sub.ino, b"..").unwrap().ino, a.ino);
    assert_eq!(
        fs.mkdir(&U, ROOT, &[b'n'; 256], 0o755).unwrap_err().errno(),
        libc::ENAMETOOLONG
    );
    fs.mkdir(&U, ROOT, &[b'n'; 255], 0o755).unwrap();
    fs.unmount().unwrap();
    let fs = mount(&m, &d);
    assert_eq!(fs.lookup(b.ino, b"sub2").unwrap().kind, FileKind::Regular);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    fs.unmount().unwrap();
}

#[test]
fn many_symlinks_of_every_length_survive() {
    let (m, d) = devices(64, 16);
    let fs = mount(&m, &d);
    let dir = fs.mkdir(&U, ROOT, b"links", 0o755).unwrap();
    let target = |i: usize| -> Vec<u8> {
        (0..(i * 37) % 4095 + 1)
            .map(|j| b'a' + ((i + j) % 26) as u8)
            .collect()
    };
    for i in 0..600 {
        fs.symlink(&U, dir.ino, format!("l{i}").as_bytes(), &target(i))
            .unwrap();
        if i % 97 == 0 {
            fs.sync().unwrap();
        }
    }
    let check = |fs: &Fs| {
        for i in 0..600 {
            let a = fs.lookup(dir.ino, format!("l{i}").as_bytes()).unwrap();
            assert_eq!(fs.readlink(a.ino).unwrap(), target(i), "link {i}");
        }
    };
    check(&fs);
    fs.sync().unwrap();
    check(&fs);
    fs.unmount().unwrap();
    let fs = mount(&m, &d);
    check(&fs);
    fs.unmount().unwrap();
}

#[test]
fn removing_long_symlinks_frees_no_data_blocks() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let free0 = fs.statfs().unwrap().bfree;
    for i in 0..20 {
        fs.symlink(
            &U,
            ROOT,
            format!("l{i}").as_bytes(),
            &vec![b'x'; 300 + i * 150],
        )
        .unwrap();
    }
    fs.sync().unwrap();
    for i in 0..20 {
        fs.unlink(&U, ROOT, format!("l{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    assert_eq!(fs.statfs().unwrap().bfree, free0);
    fs.unmount().unwrap();
}

/// Copies of both devices as they are now (a power cut right here, with every write done).
pub(super) fn crash_copy(
    m: &Arc<dyn BlockDevice>,
    d: &Arc<dyn BlockDevice>,
) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
    let copy = |dev: &Arc<dyn BlockDevice>| -> Arc<dyn BlockDevice> {
        let mut b = vec![0u8; dev.size() as usize];
        dev.read_at(&mut b, 0).unwrap();
        Arc::new(MemDevice::from_bytes(b))
    };
    (copy(m), copy(d))
}

#[test]
fn roll_forward_recovers_fsynced_work_after_a_crash() {
    let (m, d) = devices(32, 32);
    let fs = mount(&m, &d);
    let dir = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    let (f, fh) = fs.create(&U, dir.ino, b"f", 0o644, libc::O_RDWR).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    fs.write(f.ino, fh, 0, &data).unwrap();
    fs.fsync(f.ino, false).unwrap();
    for i in 0..300 {
        fs.create(&U, dir.ino, format!("n{i}").as_bytes(), 0o644, 0)
            .map(|(a, h)| fs.release(a.ino, h))
            .unwrap()
            .unwrap();
    }
    fs.unlink(&U, dir.ino, b"n7").unwrap();
    fs.rename(&U, dir.ino, b"n8", ROOT, b"moved", RenameFlags::default())
        .unwrap();
    fs.fsyncdir(dir.ino, false).unwrap();
    // Crash: the log since the mount-time checkpoint must be rolled forward.
    let (m2, d2) = crash_copy(&m, &d);
    // More work that is never synced, then the crash copy is mounted.
    fs.unlink(&U, dir.ino, b"n9").unwrap();
    let fs2 = mount(&m2, &d2);
    let f2 = fs2.lookup(dir.ino, b"f").unwrap();
    let h = fs2.open(&U, f2.ino, libc::O_RDONLY).unwrap();
    assert_eq!(fs2.read(f2.ino, h, 0, 200_000).unwrap(), data);
    fs2.release(f2.ino, h).unwrap();
    assert_eq!(names(&fs2, dir.ino).len(), 2 + 1 + 300 - 2);
    assert!(fs2.lookup(dir.ino, b"n7").is_err());
    assert!(
        fs2.lookup(dir.ino, b"n9").is_ok(),
        "unsynced unlink after the crash point"
    );
    assert_eq!(fs2.lookup(ROOT, b"moved").unwrap().kind, FileKind::Regular);
    assert_eq!(fs2.getattr(dir.ino).unwrap().nlink, 2);
    fs2.unmount().unwrap();
    fs.unmount().unwrap();
    let fs3 = mount(&m2, &d2);
    assert_eq!(names(&fs3, dir.ino).len(), 2 + 1 + 300 - 2);
    fs3.unmount().unwrap();
}

#[test]
fn reads_update_access_time_like_relatime() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.write(f.ino, fh, 0, b"hello").unwrap();
    let old = Timespec {
        sec: 1_000_000,
        nsec: 0,
    };
    let set = SetAttr {
        atime: Some(SetTime::At(old)),
        ..SetAttr::default()
    };
    fs.setattr(&U, f.ino, &set).unwrap();
    fs.read(f.ino, fh, 0, 5).unwrap();
    let a1 = fs.getattr(f.ino).unwrap();
    assert!(
        a1.atime > old && a1.atime >= a1.mtime,
        "a read after a change sets atime"
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs.read(f.ino, fh, 0, 5).unwrap();
    assert_eq!(
        fs.getattr(f.ino).unwrap().atime,
        a1.atime,
        "a second read does not"
    );
    fs.release(f.ino, fh).unwrap();
    fs.unmount().unwrap();
    let fs = Fs::mount(
        m.clone(),
        d.clone(),
        MountOptions {
            noatime: true,
            ..MountOptions::default()
        },
    )
    .unwrap();
    let fh = fs.open(&U, f.ino, libc::O_RDONLY).unwrap();
    fs.setattr(&U, f.ino, &set).unwrap();
    fs.read(f.ino, fh, 0, 5).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().atime, old, "noatime leaves it");
    fs.release(f.ino, fh).unwrap();
    fs.unmount().unwrap();
}

/// Regression: tree nodes made after the last checkpoint and rolled forward at mount have ids
/// at or above the checkpoint's next node id. Mount used to take that id as is, so the
/// recovered tree handed the same ids out again: new nodes overwrote the node map entries of
/// live ones (and the next checkpoint said those ids were never used).
#[test]
fn node_ids_rolled_forward_are_not_handed_out_again() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let dir = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    fs.sync().unwrap();
    let name = |i: usize| format!("{i:04}-{}", "n".repeat(100)).into_bytes();
    // Enough long names to split the root leaf, made durable by a log write (no checkpoint).
    for i in 0..200 {
        fs.create(&U, dir.ino, &name(i), 0o644, 0)
            .map(|(a, h)| fs.release(a.ino, h))
            .unwrap()
            .unwrap();
    }
    fs.fsyncdir(dir.ino, false).unwrap();
    let (m2, d2) = crash_copy(&m, &d);
    fs.unmount().unwrap();
    let fs = mount(&m2, &d2);
    assert!(fs.recovery().report.transactions > 0);
    // More splits after recovery: new nodes need new ids.
    for i in 200..400 {
        fs.create(&U, dir.ino, &name(i), 0o644, 0)
            .map(|(a, h)| fs.release(a.ino, h))
            .unwrap()
            .unwrap();
    }
    fs.sync().unwrap();
    for i in 0..400 {
        fs.lookup(dir.ino, &name(i))
            .unwrap_or_else(|e| panic!("entry {i} lost after recovery: {e}"));
    }
    fs.unmount().unwrap();
    let r = crate::check::check(&*m2, &*d2).unwrap();
    assert!(r.is_clean(), "{r}");
    let fs = mount(&m2, &d2);
    assert_eq!(names(&fs, dir.ino).len(), 2 + 400);
    fs.unmount().unwrap();
}

/// Regression: a write past the end zeroes the rest of the file's last block on the device
/// (it is garbage there), and it did so before allocating its blocks. When the allocation
/// then failed with ENOSPC, the write had failed, yet the bytes it zeroed in place were
/// durable data of the file as of its last sync (a truncate since then not being durable):
/// after a crash the synced file showed zeros it never held.
#[test]
fn a_write_refused_for_space_changes_no_data() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8 + 1).collect();
    fs.write(f.ino, fh, 0, &data).unwrap();
    fs.sync().unwrap();
    // Not durable: the file ends inside its second block now (which it keeps: nothing is
    // freed, so the refused write below has no pending frees to make room with).
    let set = SetAttr {
        size: Some(5000),
        ..Default::default()
    };
    fs.setattr(&U, f.ino, &set).unwrap();
    // Far more than the data device holds, past the end: refused.
    let big = vec![7u8; 32 << 20];
    assert_eq!(
        fs.write(f.ino, fh, 1 << 20, &big).unwrap_err().errno(),
        libc::ENOSPC
    );
    // A power cut now: the file is as synced, every byte of it.
    let (m2, d2) = crash_copy(&m, &d);
    let fs2 = mount(&m2, &d2);
    let a = fs2.lookup(ROOT, b"f").unwrap();
    assert_eq!(a.size, 8192);
    let h = fs2.open(&U, a.ino, libc::O_RDONLY).unwrap();
    let got = fs2.read(a.ino, h, 0, 20000).unwrap();
    let bad = got.iter().zip(&data).position(|(x, y)| x != y);
    assert_eq!(bad, None, "synced data changed by a refused write");
    fs2.release(a.ino, h).unwrap();
    fs2.unmount().unwrap();
    fs.release(f.ino, fh).unwrap();
    fs.unmount().unwrap();
}

#[test]
fn a_file_without_attributes_is_answered_from_its_flags() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let root = Caller::ROOT;
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    // A record the flags do not announce (only a damaged image has one): the probe the kernel
    // makes before every write, and any getxattr, never look in the tree for it.
    let key_hash =
        crate::format::node::attr_hash(f.generation, fs.ns.tree.hash(b"security.capability"));
    fs.repair_set_attr(f.ino, key_hash, b"security.capability", b"caps")
        .unwrap();
    for name in [&b"security.capability"[..], b"user.x"] {
        assert_eq!(
            fs.getxattr_len(&root, f.ino, name).unwrap_err().errno(),
            libc::ENODATA
        );
        assert_eq!(
            fs.getxattr(&root, f.ino, name).unwrap_err().errno(),
            libc::ENODATA
        );
    }
    assert!(fs.listxattr(&root, f.ino).unwrap().is_empty());
    // Once it has an attribute of its own, its records are read.
    fs.setxattr(&root, f.ino, b"user.x", b"1", XattrFlags::default())
        .unwrap();
    assert_eq!(
        fs.getxattr(&root, f.ino, b"security.capability").unwrap(),
        b"caps"
    );
    fs.unmount().unwrap();
}

/// Renames within directories (no rename lock) race with directory moves between shared
/// directories (under it) and with creates and unlinks: every name stays exactly once, no
/// directory moves below itself, and the checker finds the tree sound.
#[test]
fn renames_in_one_directory_race_with_moves_between_directories() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (m, d) = devices(64, 64);
    let fs = mount(&m, &d);
    let shared: Vec<u64> = (0..3)
        .map(|i| {
            fs.mkdir(&U, ROOT, format!("s{i}").as_bytes(), 0o755)
                .unwrap()
                .ino
        })
        .collect();
    let stop = AtomicBool::new(false);
    let rounds = AtomicU64::new(0);
    std::thread::scope(|scope| {
        // Two threads rename files back and forth inside directories of their own and of
        // the shared ones, creating and unlinking beside it.
        for t in 0..2u64 {
            let (fs, shared, stop, rounds) = (&fs, &shared, &stop, &rounds);
            scope.spawn(move || {
                let own = fs
                    .mkdir(&U, ROOT, format!("own{t}").as_bytes(), 0o755)
                    .unwrap()
                    .ino;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for dir in [own, shared[(n % 3) as usize]] {
                        let a = format!("t{t}-a");
                        let b = format!("t{t}-b");
                        let (f, fh) = fs
                            .create(&U, dir, a.as_bytes(), 0o644, libc::O_RDWR)
                            .unwrap();
                        fs.release(f.ino, fh).unwrap();
                        fs.rename(
                            &U,
                            dir,
                            a.as_bytes(),
                            dir,
                            b.as_bytes(),
                            RenameFlags::default(),
                        )
                        .unwrap();
                        let sub = format!("t{t}-d");
                        fs.mkdir(&U, dir, sub.as_bytes(), 0o755).unwrap();
                        let sub2 = format!("t{t}-e");
                        fs.rename(
                            &U,
                            dir,
                            sub.as_bytes(),
                            dir,
                            sub2.as_bytes(),
                            RenameFlags::default(),
                        )
                        .unwrap();
                        fs.rmdir(&U, dir, sub2.as_bytes()).unwrap();
                        fs.unlink(&U, dir, b.as_bytes()).unwrap();
                    }
                    n += 1;
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // One thread moves a directory tree around the shared directories, also trying to
        // move a directory below itself (EINVAL).
        let (fs, shared, stop, rounds) = (&fs, &shared, &stop, &rounds);
        scope.spawn(move || {
            let top = fs.mkdir(&U, shared[0], b"mover", 0o755).unwrap().ino;
            let inner = fs.mkdir(&U, top, b"inner", 0o755).unwrap().ino;
            let mut at = 0usize;
            let mut moves = 0;
            while moves < 2000 || rounds.load(Ordering::Relaxed) < 2000 {
                moves += 1;
                let to = (at + 1) % 3;
                fs.rename(
                    &U,
                    shared[at],
                    b"mover",
                    shared[to],
                    b"mover",
                    RenameFlags::default(),
                )
                .unwrap();
                at = to;
                assert!(matches!(
                    fs.rename(
                        &U,
                        shared[at],
                        b"mover",
                        inner,
                        b"mover",
                        RenameFlags::default()
                    ),
                    Err(FsError::Errno(libc::EINVAL))
                ));
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    for (i, dir) in shared.iter().enumerate() {
        let listed = names(&fs, *dir);
        let movers = listed.iter().filter(|n| *n == "mover").count();
        assert!(movers <= 1, "s{i}: {listed:?}");
        assert_eq!(
            listed.len(),
            2 + movers,
            "s{i} holds only what is left: {listed:?}"
        );
    }
    fs.unmount().unwrap();
    drop(fs);
    let r = crate::check::check(&*m, &*d).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// After FS_IOC_SHUTDOWN every operation answers EIO at once, also those that need no device
/// write to succeed in memory (a create, a mkdir): with the write-back cache nothing else
/// would tell the program.
#[test]
fn after_shutdown_every_change_is_eio_at_once() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    fs.shutdown();
    let eio = |r: Result<()>| assert!(matches!(r, Err(FsError::Errno(libc::EIO))), "{r:?}");
    eio(fs
        .create(&U, ROOT, b"after", 0o644, libc::O_RDWR)
        .map(|_| ()));
    eio(fs.mkdir(&U, ROOT, b"after-dir", 0o755).map(|_| ()));
    eio(fs.lookup(ROOT, b"lost+found").map(|_| ()));
    let _ = fs.unmount();
}
