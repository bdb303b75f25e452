//! Regular files: create/open flags, read/write at every kind of offset, holes, indirect block
//! boundaries, open-but-unlinked files, fsync, special files, statfs accounting, and a random
//! I/O workload checked against an in-memory model.

#[macro_use]
mod common;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::time::{Duration, Instant};

#[test]
fn write_then_read_back_at_all_offsets() {
    let fs = TestFs::new();
    let f = fs.join("f");
    let data = content(2, 300_000);
    // Sequential writes of odd sizes.
    {
        let mut h = open(&f, libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o644).unwrap();
        for c in data.chunks(7_777) {
            h.write_all(c).unwrap();
        }
    }
    assert_eq!(lstat(&f).len(), data.len() as u64);
    assert_eq!(fs::read(&f).unwrap(), data);
    // Reads of every alignment, and across block edges.
    let h = fs::File::open(&f).unwrap();
    for (off, len) in [
        (0, 1),
        (4095, 2),
        (4096, 4096),
        (8191, 10_000),
        (12_345, 65_536),
        (299_990, 10),
    ] {
        let mut b = vec![0u8; len];
        h.read_exact_at(&mut b, off as u64).unwrap();
        assert_eq!(b, &data[off..off + len], "read {len} at {off}");
    }
    // Short read at EOF, nothing past it.
    let mut b = vec![0u8; 100];
    assert_eq!(h.read_at(&mut b, 299_950).unwrap(), 50);
    assert_eq!(&b[..50], &data[299_950..]);
    assert_eq!(h.read_at(&mut b, 300_000).unwrap(), 0);
    assert_eq!(h.read_at(&mut b, 10_000_000).unwrap(), 0);
    // Overwrite in the middle, across a block edge, without changing the size.
    let w = fs::OpenOptions::new().write(true).open(&f).unwrap();
    w.write_all_at(b"XYZXYZXYZ", 4092).unwrap();
    let mut expect = data.clone();
    expect[4092..4101].copy_from_slice(b"XYZXYZXYZ");
    assert_eq!(fs::read(&f).unwrap(), expect);
    assert_eq!(lstat(&f).len(), 300_000);
    // A write extending the file from a new descriptor.
    w.write_all_at(b"end", 300_000).unwrap();
    expect.extend_from_slice(b"end");
    assert_eq!(fs::read(&f).unwrap(), expect);
    // Allocated blocks cover the data.
    assert!(lstat(&f).blocks() * 512 >= 300_003);
}

#[test]
fn open_flags_excl_trunc_append() {
    let fs = TestFs::new();
    let f = fs.join("f");
    fs::write(&f, b"abc").unwrap();

    assert_errno!(
        open(&f, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644),
        libc::EEXIST
    );
    // O_EXCL also refuses a dangling symlink's name.
    sys::symlink("nowhere", fs.join("dangling")).unwrap();
    assert_errno!(
        open(
            fs.join("dangling"),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644
        ),
        libc::EEXIST
    );
    // O_CREAT without O_EXCL opens the existing file and keeps its content.
    drop(open(&f, libc::O_CREAT | libc::O_WRONLY, 0o600).unwrap());
    assert_eq!(fs::read(&f).unwrap(), b"abc");
    assert_eq!(
        perm(&lstat(&f)),
        0o666 & !current_umask(),
        "mode of an existing file kept"
    );

    // O_APPEND: every write lands at the end, whatever the offset.
    {
        let mut a = open(&f, libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
        a.seek(SeekFrom::Start(0)).unwrap();
        a.write_all(b"def").unwrap();
        let mut b = open(&f, libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
        b.write_all(b"ghi").unwrap();
        a.write_all(b"jkl").unwrap();
        // pwrite on an O_APPEND descriptor appends too (Linux).
        a.write_at(b"mno", 0).unwrap();
    }
    assert_eq!(fs::read(&f).unwrap(), b"abcdefghijklmno");

    // O_TRUNC empties an existing file.
    drop(open(&f, libc::O_WRONLY | libc::O_TRUNC, 0).unwrap());
    assert_eq!(lstat(&f).len(), 0);
    assert_eq!(fs::read(&f).unwrap(), b"");
    // O_CREAT|O_TRUNC on an existing file: truncated, same inode.
    fs::write(&f, b"again").unwrap();
    let ino = lstat(&f).ino();
    drop(open(&f, libc::O_CREAT | libc::O_TRUNC | libc::O_RDWR, 0o600).unwrap());
    assert_eq!((lstat(&f).len(), lstat(&f).ino()), (0, ino));

    // Access modes are enforced on descriptors.
    let mut r = open(&f, libc::O_RDONLY, 0).unwrap();
    assert_errno!(r.write(b"x"), libc::EBADF);
    let mut w = open(&f, libc::O_WRONLY, 0).unwrap();
    let mut buf = [0u8; 4];
    assert_errno!(w.read(&mut buf), libc::EBADF);
    // Opening a directory for writing is EISDIR; opening a missing file is ENOENT.
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    assert_errno!(open(fs.join("d"), libc::O_WRONLY, 0), libc::EISDIR);
    assert_errno!(open(fs.join("missing"), libc::O_RDONLY, 0), libc::ENOENT);
    assert_errno!(
        open(fs.join("f/x"), libc::O_CREAT | libc::O_WRONLY, 0o644),
        libc::ENOTDIR
    );
    // O_DIRECTORY on a file.
    assert_errno!(
        open(&f, libc::O_RDONLY | libc::O_DIRECTORY, 0),
        libc::ENOTDIR
    );
}

#[test]
fn fsync_fdatasync_and_syncfs_succeed() {
    let fs = TestFs::new();
    let f = fs.join("f");
    let mut h = open(&f, libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    h.write_all(&content(3, 100_000)).unwrap();
    fsync(&h).expect("fsync");
    h.write_all(b"more").unwrap();
    fdatasync(&h).expect("fdatasync");
    h.sync_all().unwrap();
    drop(h);
    // fsync of a directory and of a read-only descriptor.
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    let d = open(fs.join("d"), libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    fsync(&d).expect("fsync of a directory");
    let r = fs::File::open(&f).unwrap();
    fsync(&r).expect("fsync of a read-only descriptor");
    sync_fs(fs.path());
    assert_eq!(lstat(&f).len(), 100_004);
}

#[test]
fn holes_read_as_zeros() {
    let fs = TestFs::new();
    let f = fs.join("sparse");
    let h = open(&f, libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    // A hole inside a block.
    h.write_all_at(b"a", 0).unwrap();
    h.write_all_at(b"b", 100).unwrap();
    let mut b = [9u8; 101];
    h.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(b[0], b'a');
    assert!(b[1..100].iter().all(|&x| x == 0), "hole inside a block");
    assert_eq!(b[100], b'b');
    // A hole of whole blocks, then data 1 MiB + 5 in.
    h.write_all_at(b"tail", (1 << 20) + 5).unwrap();
    let mut big = vec![9u8; (1 << 20) + 5 - 101];
    h.read_exact_at(&mut big, 101).unwrap();
    assert!(big.iter().all(|&x| x == 0), "hole of whole blocks");
    assert_eq!(lstat(&f).len(), (1 << 20) + 9);
    assert!(
        lstat(&f).blocks() <= 64,
        "holes must not be allocated: {} sectors",
        lstat(&f).blocks()
    );
}

#[test]
fn indirect_block_boundaries() {
    // With 4 KiB blocks DualFS maps file blocks 0..12 directly, 12..520 through the single,
    // 520..258,584 through the double and the rest through the triple indirect block
    // (docs/FORMAT.md). Write one marked block on each side of each edge, far apart, and read
    // everything back, including the holes between; then again after a remount.
    let mut fs = TestFs::new();
    let f = fs.join("edges");
    const B: u64 = 4096;
    let blocks: [u64; 10] = [
        0,
        11,
        12,
        519,
        520,
        521,
        258_583,
        258_584,
        300_000,
        131_355_095,
    ];
    let h = open(&f, libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    for &n in &blocks {
        h.write_all_at(&content(n, B as usize), n * B).unwrap();
    }
    drop(h);
    let size = (131_355_095 + 1) * B; // the largest file DualFS can hold (501 GiB)
    let check = |fs: &TestFs| {
        let h = fs::File::open(fs.join("edges")).unwrap();
        assert_eq!(h.metadata().unwrap().len(), size);
        let mut b = vec![0u8; B as usize];
        for &n in &blocks {
            h.read_exact_at(&mut b, n * B).unwrap();
            assert!(b == content(n, B as usize), "block {n} read back wrong");
            // Neighbours that were never written are holes.
            for m in [n.checked_sub(1), Some(n + 1)].into_iter().flatten() {
                if m * B >= size || blocks.contains(&m) {
                    continue;
                }
                h.read_exact_at(&mut b, m * B).unwrap();
                assert!(
                    b.iter().all(|&x| x == 0),
                    "block {m} (never written) not zero"
                );
            }
        }
        let m = h.metadata().unwrap();
        assert!(m.blocks() * 512 >= blocks.len() as u64 * B);
        assert!(
            m.blocks() * 512 < 64 * B,
            "sparse file allocated {} sectors",
            m.blocks()
        );
    };
    check(&fs);
    fs.remount();
    check(&fs);
    if fs.is_dualfs() {
        // One byte past the largest file is EFBIG (the format's limit).
        let h = fs::OpenOptions::new().write(true).open(&f).unwrap();
        if fs.writeback_cache() {
            // The page cache takes the byte; writing it back fails, and fsync says so.
            let _ = h.write_at(b"x", size);
            assert_errno!(h.sync_all(), libc::EFBIG);
            drop(h);
            fs.remount();
        } else {
            assert_errno!(h.write_at(b"x", size), libc::EFBIG);
        }
        assert_errno!(truncate(&f, size + 1), libc::EFBIG);
    }
    // Shrinking through every level frees the indirect blocks too.
    truncate(&f, 12 * B).unwrap();
    let mut b = vec![0u8; B as usize];
    fs::File::open(&f)
        .unwrap()
        .read_exact_at(&mut b, 11 * B)
        .unwrap();
    assert!(b == content(11, B as usize));
    assert!(
        lstat(&f).blocks() * 512 <= 3 * B,
        "{} sectors after truncate",
        lstat(&f).blocks()
    );
    fs.remount();
    assert_eq!(lstat(&f).len(), 12 * B);
}

#[test]
fn open_unlinked_file_stays_usable() {
    open_unlinked_file_stays_usable_on(TestFs::new());
}

/// The same with `-o noopen`: the kernel opens the file without telling DualFS, so its
/// reference to the inode, not an open count, keeps the orphan until its FORGET.
#[test]
fn open_unlinked_file_stays_usable_without_open() {
    open_unlinked_file_stays_usable_on(TestFs::builder().mount_opts("noopen").mount());
}

/// A read-only mount lets the kernel open files itself (nothing OPEN guards on a read-write
/// mount can happen there): after the first OPEN, answered ENOSYS, no open reaches DualFS, and
/// reads through the kernel's own handles see the files. `-o ro,open` sends every open. The
/// requests are counted in the session layer's debug log of each one ("OPEN flags ..."); the
/// `ro,open` mount is the control that the count sees them.
#[test]
fn a_read_only_mount_lets_the_kernel_open_files_itself() {
    dualfs_only!();
    let mut fs = TestFs::new();
    let names: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        fs::write(fs.join(name), content(i as u64, 5000 + i)).unwrap();
    }
    fs.unmount();
    let opens_on = |opts: &str| {
        let mut ro = TestFs::builder()
            .images(fs.meta_path(), fs.data_path())
            .mount_opts(opts)
            .daemon_env("RUST_LOG", "warn,dualfs::session::request=debug")
            .mount();
        for _ in 0..2 {
            for (i, name) in names.iter().enumerate() {
                assert_eq!(
                    fs::read(ro.join(name)).unwrap(),
                    content(i as u64, 5000 + i)
                );
            }
        }
        // Writing is still refused, at open.
        let e = open(ro.join("f0"), libc::O_WRONLY, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        let log = ro.daemon_log_whole();
        ro.unmount();
        log.matches(" OPEN flags ").count()
    };
    let kernel_opens = opens_on("ro");
    let sent_opens = opens_on("ro,open");
    assert!(
        sent_opens >= 40,
        "{sent_opens} OPEN requests logged with ro,open (40 opens made)"
    );
    assert!(
        kernel_opens <= 1,
        "{kernel_opens} OPEN requests reached a read-only mount"
    );
}

/// With `-o noopen` DualFS knows nothing of a file's open descriptors: one held open and
/// unlinked at a crash is an orphan on the log all the same, freed by the next mount.
#[test]
fn an_orphan_the_kernel_held_at_a_crash_is_freed_at_the_next_mount() {
    let mut fs = TestFs::builder().mount_opts("noopen").mount();
    let f = fs.join("held");
    let mut h = open(&f, libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    h.write_all(&content(5, 1 << 20)).unwrap();
    sys::unlink(&f).unwrap();
    assert_eq!(h.metadata().unwrap().nlink(), 0);
    h.sync_all().unwrap(); // the orphan reaches the log
    fs.kill_daemon_hard();
    drop(h);
    fs.mount();
    assert!(
        fs.daemon_log().contains("freeing orphan inode"),
        "{}",
        fs.daemon_log()
    );
    assert!(!names(fs.path()).contains(&b"held".to_vec()));
}

/// linkat(2) of a descriptor (AT_EMPTY_PATH): the way an O_TMPFILE file gets its name.
fn link_descriptor(h: &fs::File, to: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    let to = std::ffi::CString::new(to.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid descriptor and NUL-terminated paths.
    let r = unsafe {
        libc::linkat(
            h.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// open(2) with O_TMPFILE: a file with no name and no link, freed at its close unless
/// linkat names it first (once; never with O_EXCL); named, it is an ordinary file that a
/// remount keeps.
#[test]
fn o_tmpfile_has_no_name_until_linkat_gives_it_one() {
    let mut fs = TestFs::new();
    let listed = names(fs.path());
    let free = statvfs(fs.path());
    // Closed unnamed: nothing of it stays.
    {
        let mut h = open(fs.path(), libc::O_TMPFILE | libc::O_RDWR, 0o600).unwrap();
        h.write_all(&content(6, 500_000)).unwrap();
        h.sync_all().unwrap();
        let m = h.metadata().unwrap();
        assert_eq!((m.nlink(), m.len()), (0, 500_000));
        assert!(m.file_type().is_file());
        assert_eq!(names(fs.path()), listed, "an O_TMPFILE file has no entry");
    }
    assert!(
        wait_for(
            Duration::from_secs(10),
            || {
                let s = statvfs(fs.path());
                (s.f_ffree, s.f_bfree)
            },
            |v| v == (free.f_ffree, free.f_bfree)
        ),
        "the closed unnamed file's inode and blocks are not free again"
    );
    // Named before its close.
    let data = content(7, 300_000);
    let named = fs.join("named");
    {
        let mut h = open(fs.path(), libc::O_TMPFILE | libc::O_RDWR, 0o640).unwrap();
        h.write_all(&data).unwrap();
        link_descriptor(&h, &named).unwrap();
        assert_eq!(h.metadata().unwrap().nlink(), 1);
        assert_eq!(fs::read(&named).unwrap(), data);
        // Unnamed again, it cannot be named a second time.
        sys::unlink(&named).unwrap();
        let e = link_descriptor(&h, &fs.join("again")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    }
    {
        let mut h = open(fs.path(), libc::O_TMPFILE | libc::O_RDWR, 0o640).unwrap();
        h.write_all(&data).unwrap();
        link_descriptor(&h, &named).unwrap();
        let h = open(
            fs.path(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_EXCL,
            0o600,
        )
        .unwrap();
        let e = link_descriptor(&h, &fs.join("excl")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
    }
    fs.remount();
    assert_eq!(fs::read(&named).unwrap(), data);
    assert_eq!(lstat(&named).nlink(), 1);
    let mut want = listed.clone();
    want.push(b"named".to_vec());
    want.sort();
    let mut got = names(fs.path());
    got.sort();
    assert_eq!(got, want);
}

fn open_unlinked_file_stays_usable_on(mut fs: TestFs) {
    let f = fs.join("victim");
    let mut h = open(&f, libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let data = content(4, 4 << 20);
    h.write_all(&data).unwrap();
    h.sync_all().unwrap();
    sync_fs(fs.path());
    let free_with_file = statvfs(fs.path()).f_bfree;
    sys::unlink(&f).unwrap();

    assert_errno!(fs::symlink_metadata(&f), libc::ENOENT);
    assert!(!names(fs.path()).contains(&b"victim".to_vec()));
    assert_eq!(
        h.metadata().unwrap().nlink(),
        0,
        "fstat of an unlinked file"
    );
    // Still readable and writable through the descriptor.
    let mut back = vec![0u8; data.len()];
    h.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data, "data of an open unlinked file");
    h.write_all_at(b"still alive", 1 << 20).unwrap();
    h.read_exact_at(&mut back[..11], 1 << 20).unwrap();
    assert_eq!(&back[..11], b"still alive");
    // The name can be reused by a different inode meanwhile.
    fs::write(&f, b"new").unwrap();
    assert_ne!(lstat(&f).ino(), h.metadata().unwrap().ino());
    assert_eq!(fs::read(&f).unwrap(), b"new");
    // Closing the last descriptor frees the space.
    drop(h);
    let freed = wait_for(
        Duration::from_secs(10),
        || {
            sync_fs(fs.path());
            statvfs(fs.path()).f_bfree
        },
        |free| free >= free_with_file + (3 << 20) / statvfs(fs.path()).f_frsize,
    );
    assert!(freed, "space of the unlinked file not freed after close");
    // And nothing of it is left after a remount (the checker runs in between).
    fs.remount();
    assert_eq!(
        names(fs.path())
            .iter()
            .filter(|n| n.as_slice() == b"victim")
            .count(),
        1
    );
    assert_eq!(fs::read(&f).unwrap(), b"new");
}

/// Poll `get` until `ok` holds or `limit` passes.
fn wait_for<T: Copy + std::fmt::Debug>(
    limit: Duration,
    mut get: impl FnMut() -> T,
    ok: impl Fn(T) -> bool,
) -> bool {
    let start = Instant::now();
    loop {
        let v = get();
        if ok(v) {
            return true;
        }
        if start.elapsed() > limit {
            eprintln!("last value: {v:?}");
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn statfs_tracks_blocks_and_inodes() {
    let fs = TestFs::new();
    let s0 = statvfs(fs.path());
    assert!(s0.f_bsize > 0 && s0.f_frsize > 0);
    assert!(s0.f_blocks > 0 && s0.f_bfree <= s0.f_blocks && s0.f_bavail <= s0.f_bfree);
    assert!(s0.f_files > 0 && s0.f_ffree <= s0.f_files);
    assert_eq!(s0.f_namemax, 255);
    let unit = s0.f_frsize;
    let ten_mib = (10u64 << 20) / unit;

    // Writing 10 MiB takes at least 10 MiB of free blocks (once written out).
    let f = fs.join("big");
    let mut h = fs::File::create(&f).unwrap();
    for i in 0..10 {
        h.write_all(&content(100 + i, 1 << 20)).unwrap();
    }
    h.sync_all().unwrap();
    drop(h);
    let ok = wait_for(
        Duration::from_secs(10),
        || {
            sync_fs(fs.path());
            statvfs(fs.path()).f_bfree
        },
        |free| free + ten_mib * 99 / 100 <= s0.f_bfree,
    );
    assert!(
        ok,
        "f_bfree did not drop by 10 MiB ({} -> {})",
        s0.f_bfree,
        statvfs(fs.path()).f_bfree
    );
    let s1 = statvfs(fs.path());
    assert!(
        s1.f_bfree + ten_mib * 2 > s0.f_bfree,
        "10 MiB cost more than 20 MiB of blocks"
    );

    // Deleting gives it back.
    fs::remove_file(&f).unwrap();
    let ok = wait_for(
        Duration::from_secs(10),
        || {
            sync_fs(fs.path());
            statvfs(fs.path()).f_bfree
        },
        |free| free + 64 >= s0.f_bfree,
    );
    assert!(
        ok,
        "f_bfree did not come back after delete ({} -> {})",
        s0.f_bfree,
        statvfs(fs.path()).f_bfree
    );

    // Inodes: 200 files take at least 200 (used = files - ffree), deleting returns them.
    // FUSE sends RELEASE after close in the background, so "big" may have been unlinked while
    // still open and freed as an orphan only when its RELEASE came, after the commit the wait
    // above made: commit again, or its inode and indirect blocks die between the readings
    // below and make up for part of the creates.
    sync_fs(fs.path());
    let used = |s: &libc::statvfs| s.f_files - s.f_ffree;
    let i0 = statvfs(fs.path());
    sys::mkdir(fs.join("many"), 0o755).unwrap();
    for i in 0..200 {
        fs::write(fs.join(format!("many/{i}")), b"").unwrap();
    }
    sync_fs(fs.path());
    let i1 = statvfs(fs.path());
    // f_ffree is how many more files the log can take (its room over one file's share of an
    // INODES block and a tree leaf: docs/DESIGN.md, "What statfs says"), not a count of free
    // numbers: the commit also lets earlier copies of blocks die, which gives room back.
    // It must drop, and the count in use (f_files - f_ffree) is exact.
    assert!(
        i1.f_ffree < i0.f_ffree,
        "f_ffree {} -> {} after 200 creates",
        i0.f_ffree,
        i1.f_ffree
    );
    assert!(
        used(&i1) >= used(&i0) + 200,
        "used inodes {} -> {}",
        used(&i0),
        used(&i1)
    );
    fs::remove_dir_all(fs.join("many")).unwrap();
    // A file whose RELEASE is still on its way is freed when it comes: wait for it.
    let ok = wait_for(
        Duration::from_secs(10),
        || {
            sync_fs(fs.path());
            used(&statvfs(fs.path()))
        },
        |now| now + 200 <= used(&i1),
    );
    assert!(
        ok,
        "used inodes {} -> {} after deleting 201",
        used(&i1),
        used(&statvfs(fs.path()))
    );
}

#[test]
fn special_files_fifo_and_devices() {
    let mut fs = TestFs::new();
    let p = fs.join("fifo");
    mkfifo(&p, 0o640).unwrap();
    let m = lstat(&p);
    assert!(m.file_type().is_fifo());
    assert_eq!(perm(&m), 0o640 & !current_umask());
    assert_errno!(mkfifo(&p, 0o640), libc::EEXIST);
    // Data flows through it (the kernel's pipe, opened through this file system's inode).
    let r = open(&p, libc::O_RDONLY | libc::O_NONBLOCK, 0).unwrap();
    let mut w = open(&p, libc::O_WRONLY, 0).unwrap();
    w.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    (&r).read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    drop((r, w));
    // Device nodes keep their numbers (opening them is another matter on a nodev mount).
    mknod(fs.join("null"), libc::S_IFCHR | 0o600, makedev(1, 3)).unwrap();
    mknod(fs.join("blk"), libc::S_IFBLK | 0o600, makedev(7, 200)).unwrap();
    mknod(fs.join("reg"), libc::S_IFREG | 0o600, 0).unwrap();
    let check = |fs: &TestFs| {
        assert!(lstat(fs.join("fifo")).file_type().is_fifo());
        let c = lstat(fs.join("null"));
        assert!(c.file_type().is_char_device());
        assert_eq!(c.rdev(), makedev(1, 3));
        let b = lstat(fs.join("blk"));
        assert!(b.file_type().is_block_device());
        assert_eq!(b.rdev(), makedev(7, 200));
        assert!(lstat(fs.join("reg")).is_file());
        assert_eq!(lstat(fs.join("reg")).len(), 0);
    };
    check(&fs);
    fs.remount();
    check(&fs);
}

#[test]
fn random_io_matches_model() {
    // Seeded pwrite/truncate/pread on a few files, every read checked against a model, the
    // whole files compared at the end and again after a remount.
    let mut fs = TestFs::new();
    let mut rng = StdRng::seed_from_u64(0xD0A1);
    const FILES: usize = 3;
    let paths: Vec<_> = (0..FILES).map(|i| fs.join(format!("m{i}"))).collect();
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); FILES];
    let mut handles: Vec<fs::File> = paths
        .iter()
        .map(|p| open(p, libc::O_CREAT | libc::O_RDWR, 0o644).unwrap())
        .collect();
    for step in 0..3000u64 {
        let i = rng.gen_range(0..FILES);
        let (h, m) = (&mut handles[i], &mut model[i]);
        match rng.gen_range(0..100) {
            0..=54 => {
                let off = rng.gen_range(0..400_000usize);
                let len = if rng.gen_bool(0.8) {
                    rng.gen_range(1..9000)
                } else {
                    rng.gen_range(1..70_000)
                };
                let data = content(step, len);
                h.write_all_at(&data, off as u64).unwrap();
                if m.len() < off + len {
                    m.resize(off + len, 0);
                }
                m[off..off + len].copy_from_slice(&data);
            }
            55..=61 => {
                let len = rng.gen_range(0..420_000usize);
                h.set_len(len as u64).unwrap();
                m.resize(len, 0);
            }
            62..=97 => {
                let off = rng.gen_range(0..430_000usize);
                let len = rng.gen_range(1..50_000usize);
                let mut buf = vec![0u8; len];
                let mut got = 0;
                while got < len {
                    let n = h.read_at(&mut buf[got..], (off + got) as u64).unwrap();
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                let want = if off >= m.len() {
                    &[][..]
                } else {
                    &m[off..m.len().min(off + len)]
                };
                assert!(
                    &buf[..got] == want,
                    "step {step}: read {len} at {off} of m{i} (size {}): got {got} bytes, differing",
                    m.len()
                );
            }
            _ => {
                // close and reopen
                *h = fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&paths[i])
                    .unwrap();
            }
        }
    }
    drop(handles);
    let check = |fs: &TestFs| {
        for (i, want) in model.iter().enumerate() {
            let got = fs::read(fs.join(format!("m{i}"))).unwrap();
            assert_eq!(got.len(), want.len(), "size of m{i}");
            assert!(got == *want, "content of m{i}");
        }
    };
    check(&fs);
    fs.remount();
    check(&fs);
}

/// The mount's read-ahead window (its bdi's read_ahead_kb): 1 MiB unless `readahead=` says
/// otherwise (FUSE's own is the kernel's 128 KiB).
#[test]
fn the_read_ahead_window_is_set_at_mount() {
    if !Backend::from_env().is_dualfs() {
        return;
    }
    let window = |fs: &TestFs| {
        let dev = std::fs::metadata(fs.path()).unwrap().dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let mut fs = TestFs::new();
    assert_eq!(window(&fs), 1024);
    fs.unmount();
    let mut fs = TestFs::builder()
        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},readahead=256K"))
        .mount();
    assert_eq!(window(&fs), 256);
    fs.unmount();
}
