//! POSIX attributes: lookup/getattr, chmod, chown, truncate, utimensat, and the time stamp
//! rules (what each operation must update, and what it must leave alone).

#[macro_use]
mod common;

use common::user::{as_user, as_user_groups, ALICE, BOB};
use common::*;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};

/// Time stamps must be "now": no earlier than `before` (minus coarse-clock slack) and no later
/// than `after`.
fn assert_recent(what: &str, t: Ts, before: Ts, after: Ts) {
    assert!(
        ts_diff(before, t) >= -0.1 && ts_diff(t, after) >= -0.001,
        "{what} = {t:?} is not within [{before:?}, {after:?}]"
    );
}

#[test]
fn lookup_and_getattr() {
    let fs = TestFs::new();
    let umask = current_umask();
    let f = fs.join("file");
    let mut h = open(&f, libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o664).unwrap();
    h.write_all(b"hello").unwrap();
    drop(h);
    sys::mkdir(fs.join("dir"), 0o750).unwrap();
    sys::symlink("file", fs.join("link")).unwrap();

    let m = lstat(&f);
    assert!(m.is_file());
    assert_eq!(m.len(), 5);
    assert_eq!(m.nlink(), 1);
    assert_eq!((m.uid(), m.gid()), (0, 0));
    assert_eq!(perm(&m), 0o664 & !umask);
    assert!(m.blksize() > 0);
    assert!(m.ino() != 0);

    let d = lstat(fs.join("dir"));
    assert!(d.is_dir());
    assert_eq!(perm(&d), 0o750 & !umask);
    assert_eq!(d.nlink(), 2);

    let l = lstat(fs.join("link"));
    assert!(l.file_type().is_symlink());
    assert_eq!(l.len(), 4, "symlink size is its target length");
    assert_eq!(
        stat(fs.join("link")).ino(),
        m.ino(),
        "stat follows the link"
    );

    // The same inode every time, and the same device for every entry.
    assert_eq!(lstat(&f).ino(), m.ino());
    assert_eq!(d.dev(), m.dev());
    assert_eq!(lstat(fs.path()).dev(), m.dev());
    assert!(lstat(fs.path()).is_dir());

    assert_errno!(fs::symlink_metadata(fs.join("nope")), libc::ENOENT);
    assert_errno!(fs::symlink_metadata(fs.join("nope/x")), libc::ENOENT);
    assert_errno!(fs::symlink_metadata(fs.join("file/x")), libc::ENOTDIR);
    assert_errno!(fs::symlink_metadata(fs.join("dir/nope")), libc::ENOENT);
}

#[test]
fn chmod_sets_all_permission_bits_and_only_ctime() {
    let fs = TestFs::new();
    let f = fs.join("f");
    fs::write(&f, b"x").unwrap();
    utimens(
        &f,
        SetTs::At(1_000_000_000, 1),
        SetTs::At(1_000_000_100, 2),
        false,
    )
    .unwrap();
    for mode in [0o600, 0o000, 0o4755, 0o2750, 0o1644, 0o7777, 0o644] {
        let before = lstat(&f);
        tick();
        chmod(&f, mode).unwrap();
        let m = lstat(&f);
        assert_eq!(perm(&m), mode, "chmod {mode:o}");
        assert!(m.is_file(), "chmod must keep the file type");
        assert!(ctime(&m) > ctime(&before), "chmod must update ctime");
        assert_eq!(mtime(&m), (1_000_000_100, 2), "chmod must not touch mtime");
        assert_eq!(atime(&m), (1_000_000_000, 1), "chmod must not touch atime");
    }
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    chmod(fs.join("d"), 0o3777).unwrap();
    let d = lstat(fs.join("d"));
    assert!(d.is_dir());
    assert_eq!(perm(&d), 0o3777);
    // fchmod on an open descriptor too.
    let h = fs::File::open(&f).unwrap();
    h.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o640))
        .unwrap();
    assert_eq!(perm(&lstat(&f)), 0o640);
    assert_errno!(chmod(fs.join("missing"), 0o644), libc::ENOENT);
}

#[test]
fn chown_as_root() {
    let fs = TestFs::new();
    let f = fs.join("f");
    fs::write(&f, b"x").unwrap();
    let before = lstat(&f);
    tick();
    chown(&f, 1001, 2002).unwrap();
    let m = lstat(&f);
    assert_eq!((m.uid(), m.gid()), (1001, 2002));
    assert!(ctime(&m) > ctime(&before), "chown must update ctime");
    assert_eq!(mtime(&m), mtime(&before), "chown must not touch mtime");
    // -1 leaves a field alone.
    chown(&f, u32::MAX, 3003).unwrap();
    assert_eq!((lstat(&f).uid(), lstat(&f).gid()), (1001, 3003));
    chown(&f, 4004, u32::MAX).unwrap();
    assert_eq!((lstat(&f).uid(), lstat(&f).gid()), (4004, 3003));
    // Linux clears setuid and setgid (with group exec) on chown of a regular file.
    chmod(&f, 0o6755).unwrap();
    chown(&f, 5, 5).unwrap();
    assert_eq!(perm(&lstat(&f)), 0o755, "chown must clear setuid/setgid");
    // lchown changes the link, not its target.
    sys::symlink("f", fs.join("l")).unwrap();
    lchown(fs.join("l"), 7, 8).unwrap();
    let (l, t) = (lstat(fs.join("l")), lstat(&f));
    assert_eq!((l.uid(), l.gid()), (7, 8));
    assert_eq!((t.uid(), t.gid()), (5, 5));
    // Directories.
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    chown(fs.join("d"), 9, 10).unwrap();
    assert_eq!(
        (lstat(fs.join("d")).uid(), lstat(fs.join("d")).gid()),
        (9, 10)
    );
}

#[test]
fn chown_and_chmod_as_non_root() {
    let fs = TestFs::new();
    let (a, ag) = ALICE;
    let (b, bg) = BOB;
    let f = fs.join("alices");
    fs::write(&f, b"x").unwrap();
    chown(&f, a, ag).unwrap();
    // Giving a file away is reserved to root, even for its owner.
    assert_errno!(as_user(a, ag, || chown(&f, b, u32::MAX)), libc::EPERM);
    // Owner may change the group only to one she is a member of.
    assert_errno!(as_user(a, ag, || chown(&f, u32::MAX, bg)), libc::EPERM);
    as_user_groups(a, ag, &[ag, 4242], || chown(&f, u32::MAX, 4242)).unwrap();
    assert_eq!(lstat(&f).gid(), 4242);
    // chown to oneself is allowed (a no-op on the uid).
    as_user(a, ag, || chown(&f, a, u32::MAX)).unwrap();
    // Others may not chown or chmod at all.
    assert_errno!(as_user(b, bg, || chown(&f, u32::MAX, bg)), libc::EPERM);
    assert_errno!(as_user(b, bg, || chmod(&f, 0o777)), libc::EPERM);
    // The owner may chmod.
    as_user(a, ag, || chmod(&f, 0o600)).unwrap();
    assert_eq!(perm(&lstat(&f)), 0o600);
    assert_eq!((lstat(&f).uid(), lstat(&f).gid()), (a, 4242));
}

#[test]
fn truncate_down_and_up() {
    let fs = TestFs::new();
    let f = fs.join("t");
    let data = content(1, 10_000);
    fs::write(&f, &data).unwrap();

    truncate(&f, 3000).unwrap();
    assert_eq!(lstat(&f).len(), 3000);
    assert_eq!(fs::read(&f).unwrap(), &data[..3000]);

    // Growing again must show zeros, not the old bytes past 3000.
    truncate(&f, 20_000).unwrap();
    let r = fs::read(&f).unwrap();
    assert_eq!(r.len(), 20_000);
    assert_eq!(&r[..3000], &data[..3000]);
    assert!(
        r[3000..].iter().all(|&b| b == 0),
        "truncate up must read as zeros"
    );

    // Inside one block: cut at 5000, grow to 8192: 5000..8192 are zeros.
    fs::write(&f, &data).unwrap();
    let h = fs::OpenOptions::new().write(true).open(&f).unwrap();
    h.set_len(5000).unwrap(); // ftruncate
    h.set_len(8192).unwrap();
    drop(h);
    let r = fs::read(&f).unwrap();
    assert_eq!(&r[..5000], &data[..5000]);
    assert!(r[5000..].iter().all(|&b| b == 0));

    // To zero: no blocks left.
    truncate(&f, 0).unwrap();
    let m = lstat(&f);
    assert_eq!((m.len(), m.blocks()), (0, 0));
    assert_eq!(fs::read(&f).unwrap(), b"");

    // Far up: sparse, cheap, zeros at the end.
    truncate(&f, 5 << 30).unwrap();
    let m = lstat(&f);
    assert_eq!(m.len(), 5 << 30);
    assert!(
        m.blocks() < 64,
        "a 5 GiB truncate allocated {} sectors",
        m.blocks()
    );
    let mut tail = [1u8; 4096];
    let h = fs::File::open(&f).unwrap();
    h.read_exact_at(&mut tail, (5 << 30) - 4096).unwrap();
    assert!(tail.iter().all(|&b| b == 0));

    // Truncate updates mtime and ctime.
    let before = lstat(&f);
    tick();
    truncate(&f, 100).unwrap();
    let m = lstat(&f);
    assert!(mtime(&m) > mtime(&before) && ctime(&m) > ctime(&before));

    // Errors.
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    assert_errno!(truncate(fs.join("d"), 0), libc::EISDIR);
    assert_errno!(truncate(fs.join("missing"), 0), libc::ENOENT);
}

#[test]
fn utimensat_exact_now_and_omit() {
    let fs = TestFs::new();
    let f = fs.join("f");
    fs::write(&f, b"x").unwrap();

    utimens(
        &f,
        SetTs::At(1_000_000_000, 123_456_789),
        SetTs::At(1_100_000_000, 987_654_321),
        false,
    )
    .unwrap();
    let m = lstat(&f);
    assert_eq!(
        atime(&m),
        (1_000_000_000, 123_456_789),
        "atime with nanoseconds"
    );
    assert_eq!(
        mtime(&m),
        (1_100_000_000, 987_654_321),
        "mtime with nanoseconds"
    );

    // OMIT leaves a stamp alone; setting either updates ctime.
    let c0 = ctime(&m);
    tick();
    utimens(&f, SetTs::Omit, SetTs::At(1_200_000_000, 5), false).unwrap();
    let m = lstat(&f);
    assert_eq!(atime(&m), (1_000_000_000, 123_456_789), "UTIME_OMIT atime");
    assert_eq!(mtime(&m), (1_200_000_000, 5));
    assert!(ctime(&m) > c0, "utimensat must update ctime");
    utimens(&f, SetTs::At(1_300_000_000, 6), SetTs::Omit, false).unwrap();
    let m = lstat(&f);
    assert_eq!(atime(&m), (1_300_000_000, 6));
    assert_eq!(mtime(&m), (1_200_000_000, 5), "UTIME_OMIT mtime");

    // Both OMIT: nothing changes, not even ctime.
    let c1 = ctime(&lstat(&f));
    tick();
    utimens(&f, SetTs::Omit, SetTs::Omit, false).unwrap();
    assert_eq!(ctime(&lstat(&f)), c1, "UTIME_OMIT for both must be a no-op");

    // NOW.
    let before = now();
    utimens(&f, SetTs::Now, SetTs::Omit, false).unwrap();
    let after = now();
    let m = lstat(&f);
    assert_recent("atime after UTIME_NOW", atime(&m), before, after);
    assert_eq!(mtime(&m), (1_200_000_000, 5));
    let before = now();
    utimens(&f, SetTs::Omit, SetTs::Now, false).unwrap();
    let after = now();
    assert_recent("mtime after UTIME_NOW", mtime(&lstat(&f)), before, after);

    // Before the epoch, and far in the future.
    utimens(
        &f,
        SetTs::At(-86_400, 500),
        SetTs::At(4_102_444_800, 0),
        false,
    )
    .unwrap();
    let m = lstat(&f);
    assert_eq!(atime(&m), (-86_400, 500), "a time before 1970");
    assert_eq!(mtime(&m), (4_102_444_800, 0), "the year 2100");

    // On a symlink itself (AT_SYMLINK_NOFOLLOW), leaving the target alone.
    sys::symlink("f", fs.join("l")).unwrap();
    let target_before = mtime(&lstat(&f));
    utimens(fs.join("l"), SetTs::At(1, 2), SetTs::At(3, 4), true).unwrap();
    assert_eq!(mtime(&lstat(fs.join("l"))), (3, 4));
    assert_eq!(mtime(&lstat(&f)), target_before);

    // futimens on a descriptor; invalid nanoseconds are EINVAL.
    let h = fs::File::open(&f).unwrap();
    futimens(&h, SetTs::At(10, 11), SetTs::At(12, 13)).unwrap();
    assert_eq!(mtime(&lstat(&f)), (12, 13));
    assert_errno!(
        utimens(&f, SetTs::At(1, 1_000_000_000), SetTs::Omit, false),
        libc::EINVAL
    );
}

#[test]
fn timestamps_follow_posix() {
    let fs = TestFs::new();
    let dir = fs.join("d");
    sys::mkdir(&dir, 0o755).unwrap();
    let old = SetTs::At(1_000_000_000, 0);
    let f = dir.join("f");

    // create: a/m/ctime of the new file are now; the parent's mtime and ctime move.
    utimens(&dir, old, old, false).unwrap();
    let before = now();
    fs::write(&f, b"").unwrap();
    let after = now();
    let m = lstat(&f);
    assert_recent("atime of a new file", atime(&m), before, after);
    assert_recent("mtime of a new file", mtime(&m), before, after);
    assert_recent("ctime of a new file", ctime(&m), before, after);
    let d = lstat(&dir);
    assert_recent("parent mtime after create", mtime(&d), before, after);
    assert_recent("parent ctime after create", ctime(&d), before, after);

    // write: mtime and ctime.
    utimens(&f, old, old, false).unwrap();
    let c0 = ctime(&lstat(&f));
    tick();
    let before = now();
    fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .write_all(b"data")
        .unwrap();
    let after = now();
    let m = lstat(&f);
    assert_recent("mtime after write", mtime(&m), before, after);
    assert!(ctime(&m) > c0, "write must update ctime");
    assert_eq!(atime(&m), (1_000_000_000, 0), "write must not touch atime");

    // read: never mtime or ctime; atime only loosely (FUSE leaves atime to the file system).
    let m0 = lstat(&f);
    tick();
    assert_eq!(fs::read(&f).unwrap(), b"data");
    let m = lstat(&f);
    assert_eq!(mtime(&m), mtime(&m0), "read must not touch mtime");
    assert_eq!(ctime(&m), ctime(&m0), "read must not touch ctime");
    assert!(atime(&m) >= atime(&m0) && ts_diff(atime(&m), now()) > -1.0);

    // chmod/chown: ctime only (covered in depth above); rename: ctime of the moved inode
    // (Linux does this), mtime and ctime of both parents.
    let d2 = fs.join("d2");
    sys::mkdir(&d2, 0o755).unwrap();
    utimens(&dir, old, old, false).unwrap();
    utimens(&d2, old, old, false).unwrap();
    let before = now();
    rename(&f, d2.join("g")).unwrap();
    let after = now();
    let g = d2.join("g");
    assert_eq!(
        mtime(&lstat(&g)),
        mtime(&m),
        "rename must not touch the file's mtime"
    );
    for p in [&dir, &d2] {
        assert_recent("parent mtime after rename", mtime(&lstat(p)), before, after);
        assert_recent("parent ctime after rename", ctime(&lstat(p)), before, after);
    }

    // link: ctime of the file, mtime of the new parent.
    utimens(&dir, old, old, false).unwrap();
    let c0 = ctime(&lstat(&g));
    tick();
    let before = now();
    sys::link(&g, dir.join("h")).unwrap();
    let after = now();
    assert!(ctime(&lstat(&g)) > c0, "link must update the file's ctime");
    assert_recent(
        "parent mtime after link",
        mtime(&lstat(&dir)),
        before,
        after,
    );

    // unlink of one name: ctime of the inode (still linked), parent mtime.
    utimens(&dir, old, old, false).unwrap();
    let c0 = ctime(&lstat(&g));
    tick();
    let before = now();
    sys::unlink(dir.join("h")).unwrap();
    let after = now();
    assert!(
        ctime(&lstat(&g)) > c0,
        "unlink must update the remaining inode's ctime"
    );
    assert_recent(
        "parent mtime after unlink",
        mtime(&lstat(&dir)),
        before,
        after,
    );

    // mkdir/rmdir/symlink: parent mtime.
    for op in 0..3 {
        utimens(&dir, old, old, false).unwrap();
        let before = now();
        match op {
            0 => sys::mkdir(dir.join("sub"), 0o755).unwrap(),
            1 => sys::rmdir(dir.join("sub")).unwrap(),
            _ => sys::symlink("x", dir.join("sl")).unwrap(),
        }
        let after = now();
        assert_recent(
            "parent mtime after mkdir/rmdir/symlink",
            mtime(&lstat(&dir)),
            before,
            after,
        );
    }

    // O_TRUNC of a non-empty file: mtime and ctime.
    utimens(&g, old, old, false).unwrap();
    let before = now();
    drop(open(&g, libc::O_WRONLY | libc::O_TRUNC, 0).unwrap());
    let after = now();
    assert_recent("mtime after O_TRUNC", mtime(&lstat(&g)), before, after);
}

#[test]
fn attributes_survive_remount() {
    let mut fs = TestFs::new();
    let f = fs.join("f");
    fs::write(&f, b"abc").unwrap();
    chown(&f, 1234, 5678).unwrap();
    chmod(&f, 0o4751).unwrap();
    utimens(
        &f,
        SetTs::At(1_111_111_111, 111),
        SetTs::At(1_222_222_222, 222),
        false,
    )
    .unwrap();
    sys::mkdir(fs.join("d"), 0o700).unwrap();
    chown(fs.join("d"), 42, 43).unwrap();
    chmod(fs.join("d"), 0o3750).unwrap();
    utimens(fs.join("d"), SetTs::At(5, 6), SetTs::At(7, 8), false).unwrap();
    sys::symlink("f", fs.join("l")).unwrap();
    lchown(fs.join("l"), 99, 98).unwrap();
    utimens(fs.join("l"), SetTs::At(9, 10), SetTs::At(11, 12), true).unwrap();
    let snap = |p: &std::path::Path| {
        let m = lstat(p);
        (
            m.mode(),
            m.uid(),
            m.gid(),
            m.len(),
            m.nlink(),
            m.ino(),
            mtime(&m),
            atime(&m),
            ctime(&m),
        )
    };
    let names = ["f", "d", "l"];
    let before: Vec<_> = names.iter().map(|n| snap(&fs.join(n))).collect();
    fs.remount();
    let after: Vec<_> = names.iter().map(|n| snap(&fs.join(n))).collect();
    assert_eq!(before, after, "attributes of f, d, l after remount");
    assert_eq!(fs::read(&f).unwrap(), b"abc");
}

/// statx's birth time (FUSE_STATX): set when the file is made, of every kind, and left alone by
/// everything after (writes, attribute changes, times set, renames, a remount).
#[test]
fn birth_time_is_the_creation_and_stays() {
    let mut fs = TestFs::new();
    let born = |p: &std::path::Path| {
        fs::symlink_metadata(p)
            .and_then(|m| m.created())
            .unwrap_or_else(|e| panic!("birth time of {}: {e}", p.display()))
    };
    let before = std::time::SystemTime::now();
    let f = fs.join("f");
    fs::write(&f, b"abc").unwrap();
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    sys::symlink("f", fs.join("l")).unwrap();
    let after = std::time::SystemTime::now();
    let names = ["f", "d", "l"];
    let first: Vec<_> = names.iter().map(|n| born(&fs.join(n))).collect();
    for (n, t) in names.iter().zip(&first) {
        // The clock is coarse-grained for the kernel's backends; 0.1 s of slack.
        let slack = std::time::Duration::from_millis(100);
        assert!(
            *t + slack >= before && *t <= after,
            "{n} born {t:?}, not within [{before:?}, {after:?}]"
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b"more")
        .unwrap();
    chmod(&f, 0o600).unwrap();
    utimens(&f, SetTs::At(5, 6), SetTs::At(7, 8), false).unwrap();
    sys::mkdir(fs.join("d/sub"), 0o755).unwrap();
    fs::rename(fs.join("l"), fs.join("d/l")).unwrap();
    fs::rename(fs.join("d/l"), fs.join("l")).unwrap();
    let later: Vec<_> = names.iter().map(|n| born(&fs.join(n))).collect();
    assert_eq!(first, later, "birth times of f, d, l after changes");
    fs.remount();
    let remounted: Vec<_> = names.iter().map(|n| born(&fs.join(n))).collect();
    assert_eq!(first, remounted, "birth times of f, d, l after remount");
}
