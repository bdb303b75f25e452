//! Permissions as other users (mounted with allow_other,default_permissions): access(2),
//! reading, creating, searching, the sticky bit, ownership of new files, setgid directories,
//! time-stamp permissions, and setuid clearing on write.

#[macro_use]
mod common;

use common::user::{as_user, as_user_groups, ALICE, BOB};
use common::*;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// A directory owned by `owner` with `mode`.
fn dir_of(p: &Path, (uid, gid): (u32, u32), mode: u32) {
    sys::mkdir(p, 0o700).unwrap();
    chown(p, uid, gid).unwrap();
    chmod(p, mode).unwrap();
}

/// Open `p` for writing and write `bytes` (as whoever calls it).
fn write_to(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    fs::OpenOptions::new().write(true).open(p)?.write_all(bytes)
}

/// A file owned by `owner` with `mode` and some content.
fn file_of(p: &Path, (uid, gid): (u32, u32), mode: u32) {
    fs::write(p, b"content").unwrap();
    chown(p, uid, gid).unwrap();
    chmod(p, mode).unwrap();
}

#[test]
fn access_as_root_and_as_another_user() {
    let fs = TestFs::new();
    let root = (0, 0);
    let none = fs.join("none");
    file_of(&none, root, 0o000);
    let exec = fs.join("exec");
    file_of(&exec, root, 0o100);
    let public = fs.join("public");
    file_of(&public, root, 0o644);

    // Root reads and writes anything, but executes only what has some x bit.
    access(&none, libc::R_OK | libc::W_OK).unwrap();
    assert_errno!(access(&none, libc::X_OK), libc::EACCES);
    access(&exec, libc::X_OK).unwrap();
    access(&public, libc::F_OK).unwrap();
    assert_errno!(access(fs.join("missing"), libc::F_OK), libc::ENOENT);

    let (u, g) = ALICE;
    as_user(u, g, || {
        access(&public, libc::R_OK).unwrap();
        assert_errno!(access(&public, libc::W_OK), libc::EACCES);
        assert_errno!(access(&public, libc::X_OK), libc::EACCES);
        assert_errno!(access(&none, libc::R_OK), libc::EACCES);
        assert_errno!(access(&exec, libc::X_OK), libc::EACCES);
        access(&none, libc::F_OK).unwrap();
    });
    // Group and other classes: the group class applies to members, even if "other" allows more.
    let g_file = fs.join("grp");
    file_of(&g_file, (0, 500), 0o604);
    as_user(u, g, || access(&g_file, libc::R_OK)).unwrap();
    assert_errno!(
        as_user(u, 500, || access(&g_file, libc::R_OK)),
        libc::EACCES
    );
}

#[test]
fn reading_and_writing_others_files() {
    let fs = TestFs::new();
    let secret = fs.join("secret");
    file_of(&secret, ALICE, 0o600);
    let shared = fs.join("shared");
    file_of(&shared, ALICE, 0o644);
    let (a, ag) = ALICE;
    let (b, bg) = BOB;
    assert_eq!(as_user(a, ag, || fs::read(&secret)).unwrap(), b"content");
    assert_errno!(as_user(b, bg, || fs::read(&secret)), libc::EACCES);
    assert_errno!(
        as_user(b, bg, || open(&secret, libc::O_WRONLY, 0)),
        libc::EACCES
    );
    assert_eq!(as_user(b, bg, || fs::read(&shared)).unwrap(), b"content");
    assert_errno!(
        as_user(b, bg, || open(&shared, libc::O_WRONLY, 0)),
        libc::EACCES
    );
    assert_errno!(
        as_user(b, bg, || open(&shared, libc::O_WRONLY | libc::O_TRUNC, 0)),
        libc::EACCES
    );
    assert_errno!(as_user(b, bg, || truncate(&shared, 0)), libc::EACCES);
    assert_eq!(
        fs::read(&shared).unwrap(),
        b"content",
        "nothing was changed"
    );
    // Root may do all of it.
    assert_eq!(fs::read(&secret).unwrap(), b"content");
}

#[test]
fn creating_and_removing_in_others_directories() {
    let fs = TestFs::new();
    let (a, ag) = ALICE;
    let (b, bg) = BOB;
    let home = fs.join("alice");
    dir_of(&home, ALICE, 0o755);
    file_of(&home.join("f"), ALICE, 0o666);
    as_user(b, bg, || {
        assert_errno!(
            open(home.join("new"), libc::O_CREAT | libc::O_WRONLY, 0o644),
            libc::EACCES
        );
        assert_errno!(sys::mkdir(home.join("sub"), 0o755), libc::EACCES);
        assert_errno!(sys::symlink("x", home.join("sl")), libc::EACCES);
        assert_errno!(mkfifo(home.join("p"), 0o644), libc::EACCES);
        assert_errno!(sys::unlink(home.join("f")), libc::EACCES);
        assert_errno!(rename(home.join("f"), home.join("g")), libc::EACCES);
        assert_errno!(sys::link(home.join("f"), home.join("h")), libc::EACCES);
        // Writing the 0666 file itself is fine: the directory does not matter for that.
        fs::OpenOptions::new()
            .write(true)
            .open(home.join("f"))
            .unwrap()
            .write_all(b"b")
            .unwrap();
    });
    assert_eq!(names(&home), vec![b"f".to_vec()]);
    // The owner may.
    as_user(a, ag, || {
        fs::write(home.join("new"), b"").unwrap();
        rename(home.join("new"), home.join("renamed")).unwrap();
        sys::unlink(home.join("renamed")).unwrap();
    });
    // Search permission: a 0700 directory hides its entries, 0711 allows lookups but not
    // listing.
    chmod(&home, 0o700).unwrap();
    assert_errno!(
        as_user(b, bg, || fs::symlink_metadata(home.join("f"))),
        libc::EACCES
    );
    chmod(&home, 0o711).unwrap();
    as_user(b, bg, || fs::symlink_metadata(home.join("f"))).unwrap();
    assert_errno!(
        as_user(b, bg, || fs::read_dir(&home).map(|_| ())),
        libc::EACCES
    );
    // A world-writable directory accepts anyone.
    let open_dir = fs.join("open");
    dir_of(&open_dir, (0, 0), 0o777);
    as_user(b, bg, || fs::write(open_dir.join("bobs"), b"")).unwrap();
}

#[test]
fn sticky_directory() {
    let fs = TestFs::new();
    let carol = (1003, 1003);
    let tmp = fs.join("tmp");
    dir_of(&tmp, carol, 0o1777);
    let (a, ag) = ALICE;
    let (b, bg) = BOB;
    as_user(a, ag, || {
        fs::write(tmp.join("alices"), b"a").unwrap();
        fs::write(tmp.join("alices2"), b"a").unwrap();
        fs::write(tmp.join("alices3"), b"a").unwrap();
        chmod(tmp.join("alices"), 0o666).unwrap();
    });
    as_user(b, bg, || {
        // Others' files cannot be removed or renamed away, even when writable.
        assert_errno!(sys::unlink(tmp.join("alices")), libc::EPERM);
        assert_errno!(rename(tmp.join("alices"), tmp.join("mine")), libc::EPERM);
        fs::write(tmp.join("bobs"), b"b").unwrap();
        // Nor replaced by a rename onto them.
        assert_errno!(rename(tmp.join("bobs"), tmp.join("alices")), libc::EPERM);
        // Own files are fine.
        rename(tmp.join("bobs"), tmp.join("bobs2")).unwrap();
        sys::unlink(tmp.join("bobs2")).unwrap();
    });
    as_user(a, ag, || sys::unlink(tmp.join("alices"))).unwrap();
    // The directory's owner and root may remove anyone's files.
    as_user(carol.0, carol.1, || sys::unlink(tmp.join("alices2"))).unwrap();
    sys::unlink(tmp.join("alices3")).unwrap();
    assert_eq!(names(&tmp), Vec::<Vec<u8>>::new());
    assert_eq!(perm(&lstat(&tmp)), 0o1777);
}

#[test]
fn new_files_belong_to_the_caller() {
    let mut fs = TestFs::new();
    let d = fs.join("pub");
    dir_of(&d, (0, 0), 0o777);
    let (a, _) = ALICE;
    let g = 3000; // a primary group different from the uid
    as_user(a, g, || {
        fs::write(d.join("file"), b"").unwrap();
        sys::mkdir(d.join("dir"), 0o755).unwrap();
        sys::symlink("file", d.join("link")).unwrap();
        mkfifo(d.join("fifo"), 0o644).unwrap();
        sys::link(d.join("file"), d.join("hard")).unwrap();
    });
    let check = |fs: &TestFs| {
        for n in ["file", "dir", "link", "fifo", "hard"] {
            let m = lstat(fs.join("pub").join(n));
            assert_eq!((m.uid(), m.gid()), (a, g), "owner of {n}");
        }
        assert!(lstat(fs.join("pub/fifo")).file_type().is_fifo());
    };
    check(&fs);
    fs.remount();
    check(&fs);
}

#[test]
fn setgid_directory_passes_its_group_on() {
    let mut fs = TestFs::new();
    let team = 4000;
    let d = fs.join("team");
    dir_of(&d, (0, team), 0o2775);
    let (a, ag) = ALICE;
    as_user_groups(a, ag, &[ag, team], || {
        fs::write(d.join("f"), b"").unwrap();
        sys::mkdir(d.join("sub"), 0o755).unwrap();
        sys::mkdir(d.join("sub/deeper"), 0o700).unwrap();
        fs::write(d.join("sub/deeper/g"), b"").unwrap();
        mkfifo(d.join("p"), 0o644).unwrap();
    });
    // And as root.
    fs::write(d.join("rootfile"), b"").unwrap();
    let check = |fs: &TestFs| {
        let d = fs.join("team");
        for f in ["f", "sub/deeper/g", "p", "rootfile"] {
            let m = lstat(d.join(f));
            assert_eq!(m.gid(), team, "group of {f}");
            assert_eq!(
                m.mode() & libc::S_ISGID,
                0,
                "{f} must not get the setgid bit"
            );
        }
        assert_eq!(lstat(d.join("f")).uid(), a);
        for sub in ["sub", "sub/deeper"] {
            let m = lstat(d.join(sub));
            assert_eq!(m.gid(), team, "group of {sub}");
            assert_ne!(
                m.mode() & libc::S_ISGID,
                0,
                "{sub} must inherit the setgid bit"
            );
        }
    };
    check(&fs);
    fs.remount();
    check(&fs);
    // Without setgid the caller's group is used.
    chmod(&d, 0o775).unwrap();
    as_user_groups(a, ag, &[ag, team], || fs::write(d.join("plain"), b"")).unwrap();
    assert_eq!(lstat(d.join("plain")).gid(), ag);
}

#[test]
fn time_stamp_permissions() {
    let fs = TestFs::new();
    let (b, bg) = BOB;
    let rw = fs.join("rw");
    file_of(&rw, ALICE, 0o666);
    let ro = fs.join("ro");
    file_of(&ro, ALICE, 0o644);
    as_user(b, bg, || {
        // Explicit times: owner only.
        assert_errno!(
            utimens(&rw, SetTs::At(1, 0), SetTs::At(1, 0), false),
            libc::EPERM
        );
        // "Now": anyone who may write.
        utimens(&rw, SetTs::Now, SetTs::Now, false).unwrap();
        assert_errno!(utimens(&ro, SetTs::Now, SetTs::Now, false), libc::EACCES);
    });
    let (a, ag) = ALICE;
    as_user(a, ag, || {
        utimens(&ro, SetTs::At(5, 6), SetTs::At(7, 8), false)
    })
    .unwrap();
    assert_eq!(mtime(&lstat(&ro)), (7, 8));
}

#[test]
fn writing_clears_setuid_and_setgid() {
    let fs = TestFs::new();
    let d = fs.join("d");
    dir_of(&d, ALICE, 0o755);
    let f = d.join("prog");
    file_of(&f, ALICE, 0o6777);
    let (b, bg) = BOB;
    as_user(b, bg, || write_to(&f, b"x")).unwrap();
    assert_eq!(
        perm(&lstat(&f)),
        0o777,
        "a write by another user clears setuid/setgid"
    );
    // Truncation by a non-owner too.
    chmod(&f, 0o4777).unwrap();
    as_user(b, bg, || truncate(&f, 0)).unwrap();
    assert_eq!(perm(&lstat(&f)), 0o777, "truncate clears setuid");
}

#[test]
fn what_a_change_takes_away_depends_on_who_makes_it() {
    // DualFS takes set-ID bits away itself (FUSE_HANDLE_KILLPRIV_V2): each way a file
    // changes, by a caller without CAP_FSETID and by root, which keeps them.
    let fs = TestFs::new();
    let d = fs.join("d");
    dir_of(&d, ALICE, 0o777);
    let f = d.join("prog");
    file_of(&f, ALICE, 0o6777);
    let (b, bg) = BOB;
    as_user(b, bg, || {
        fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&f)
            .map(drop)
    })
    .unwrap();
    assert_eq!(perm(&lstat(&f)), 0o777, "open(O_TRUNC) by another user");

    // Root holds CAP_FSETID: its writes and truncates keep them.
    chmod(&f, 0o6777).unwrap();
    write_to(&f, b"root").unwrap();
    truncate(&f, 1).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&f)
        .unwrap();
    assert_eq!(
        perm(&lstat(&f)),
        0o6777,
        "root's write, truncate and O_TRUNC"
    );

    // Set-group-ID without group execute (a mandatory-locking mark) stays through a write
    // by a member of the file's group, and goes with one by anybody else (Linux 6.2 on:
    // setattr_should_drop_sgid).
    chmod(&f, 0o6767).unwrap();
    as_user_groups(b, bg, &[bg, ALICE.1], || write_to(&f, b"x")).unwrap();
    assert_eq!(
        perm(&lstat(&f)),
        0o2767,
        "a group member's write keeps setgid without group exec"
    );
    as_user(b, bg, || write_to(&f, b"x")).unwrap();
    assert_eq!(
        perm(&lstat(&f)),
        0o767,
        "a non-member's write takes setgid without group exec"
    );

    // Even a chown by root to the same owner takes them away (Linux's chown).
    chmod(&f, 0o6777).unwrap();
    chown(&f, ALICE.0, ALICE.1).unwrap();
    assert_eq!(perm(&lstat(&f)), 0o777, "chown by root");
    // Directories keep setgid through a chown (it is how new files get their group).
    chmod(&d, 0o2777).unwrap();
    chown(&d, BOB.0, BOB.1).unwrap();
    assert_eq!(perm(&lstat(&d)), 0o2777, "chown of a directory");
}

/// Root without CAP_FSETID is an unprivileged truncater: a truncate (SETATTR of the size) and
/// an open with O_TRUNC take set-ID bits away, as on Linux file systems. For DualFS the kernel
/// says so with each request (FATTR_KILL_SUIDGID, FUSE_OPEN_KILL_SUIDGID): asking /proc about
/// a root caller would have kept them.
#[test]
fn root_without_cap_fsetid_truncates_set_ids_away() {
    let fs = TestFs::new();
    let f = fs.join("prog");
    file_of(&f, ALICE, 0o6777);
    fs::write(&f, b"some bytes").unwrap();
    let without_fsetid = |script: &str| {
        let out = std::process::Command::new("setpriv")
            .args([
                "--inh-caps=-fsetid",
                "--bounding-set=-fsetid",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(&f)
            .output()
            .expect("setpriv (util-linux)");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    without_fsetid("truncate -s 3 \"$1\"");
    assert_eq!(fs::metadata(&f).unwrap().len(), 3);
    assert_eq!(perm(&lstat(&f)), 0o777, "truncate(2) without CAP_FSETID");
    chmod(&f, 0o6777).unwrap();
    without_fsetid(": > \"$1\"");
    assert_eq!(fs::metadata(&f).unwrap().len(), 0);
    assert_eq!(perm(&lstat(&f)), 0o777, "open(O_TRUNC) without CAP_FSETID");
    // With the capability, as before.
    chmod(&f, 0o6777).unwrap();
    std::process::Command::new("truncate")
        .args(["-s", "5"])
        .arg(&f)
        .status()
        .unwrap();
    assert_eq!(perm(&lstat(&f)), 0o6777, "root's truncate keeps them");
}

/// `security.capability` of version 2 granting CAP_NET_RAW, as setcap writes it.
fn capability_value() -> Vec<u8> {
    let mut v = 0x0200_0001u32.to_le_bytes().to_vec(); // VFS_CAP_REVISION_2 | effective
    for word in [1u32 << 13, 0, 0, 0] {
        v.extend_from_slice(&word.to_le_bytes());
    }
    v
}

#[test]
fn a_write_or_truncate_takes_file_capabilities_away() {
    // The kernel stops asking for security.capability once it found none on an inode
    // (SB_NOSEC, from FUSE_HANDLE_KILLPRIV_V2); setting one must make it look again.
    let mut fs = TestFs::new();
    let f = fs.join("prog");
    file_of(&f, (0, 0), 0o755);
    let mut w = fs::OpenOptions::new().write(true).open(&f).unwrap();
    w.write_all(b"before any capability").unwrap();
    for (round, change) in ["write", "truncate", "chown"].iter().enumerate() {
        sys::setxattr(&f, "security.capability", &capability_value(), 0, false).unwrap();
        assert_eq!(
            sys::getxattr(&f, "security.capability").unwrap(),
            capability_value()
        );
        match *change {
            "write" => w.write_all(b"x").unwrap(),
            "truncate" => truncate(&f, round as u64).unwrap(),
            _ => chown(&f, 0, 0).unwrap(),
        }
        let left = sys::getxattr(&f, "security.capability");
        assert_eq!(
            left.map_err(|e| e.raw_os_error()),
            Err(Some(libc::ENODATA)),
            "the capability after a {change}"
        );
    }
    drop(w);
    fs.remount();
    assert_errno!(sys::getxattr(&f, "security.capability"), libc::ENODATA);
}

// ---- Set-ID bits on every change of ownership or contents, as Linux takes them away.

/// A node of type `kind` at `p` with permission bits `bits` (made by root).
fn node_of(p: &Path, kind: u32, bits: u32) {
    match kind {
        libc::S_IFREG => fs::write(p, b"content").unwrap(),
        libc::S_IFDIR => sys::mkdir(p, 0o700).unwrap(),
        libc::S_IFCHR | libc::S_IFBLK => sys::mknod(p, kind | 0o600, makedev(1, 3)).unwrap(),
        _ => sys::mknod(p, kind | 0o600, 0).unwrap(),
    }
    chmod(p, bits).unwrap();
}

const KINDS: [(u32, &str); 6] = [
    (libc::S_IFREG, "regular file"),
    (libc::S_IFIFO, "FIFO"),
    (libc::S_IFSOCK, "socket"),
    (libc::S_IFCHR, "character device"),
    (libc::S_IFBLK, "block device"),
    (libc::S_IFDIR, "directory"),
];

#[test]
fn chown_takes_set_ids_from_every_kind_of_file_but_directories() {
    // Linux's chown_common kills set-user-ID, and set-group-ID where group members may
    // execute, on every chown of anything but a directory, whoever makes it (a standard
    // POSIX conformance suite checks FIFOs, sockets and devices as well as regular files).
    let fs = TestFs::new();
    let (a, ag) = ALICE;
    let team = 2001;
    for (kind, name) in KINDS {
        let p = fs.join(name.replace(' ', "-"));
        let kills = |m: u32| match kind {
            libc::S_IFDIR => m,
            _ if m & 0o010 != 0 => m & !0o6000,
            _ => m & !0o4000,
        };
        node_of(&p, kind, 0o6555);
        chown(&p, a, ag).unwrap();
        assert_eq!(perm(&lstat(&p)), kills(0o6555), "{name}: chown by root");

        // Its owner gives it to another group of hers, then "gives" it to herself.
        chmod(&p, 0o6555).unwrap();
        as_user_groups(a, ag, &[ag, team], || chown(&p, u32::MAX, team)).unwrap();
        let m = lstat(&p);
        assert_eq!(
            (perm(&m), m.gid()),
            (kills(0o6555), team),
            "{name}: chgrp by its owner"
        );
        chmod(&p, 0o6555).unwrap();
        as_user_groups(a, ag, &[ag, team], || chown(&p, a, u32::MAX)).unwrap();
        assert_eq!(
            perm(&lstat(&p)),
            kills(0o6555),
            "{name}: chown to its own owner"
        );

        // Set-group-ID without group execute marks mandatory locking: a member's chown
        // keeps it (set-user-ID still goes).
        chmod(&p, 0o6545).unwrap();
        as_user_groups(a, ag, &[ag, team], || chown(&p, u32::MAX, ag)).unwrap();
        assert_eq!(
            perm(&lstat(&p)),
            kills(0o6545),
            "{name}: chgrp, no group execute"
        );
    }
}

/// Write `len` bytes at 0 through an O_DIRECT descriptor of `p` (a buffer aligned for it).
fn direct_write(p: &Path, len: usize) -> std::io::Result<()> {
    let f = sys::open(p, libc::O_WRONLY | libc::O_DIRECT, 0)?;
    let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
    let buf = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!buf.is_null());
    let r = unsafe { libc::pwrite(std::os::fd::AsRawFd::as_raw_fd(&f), buf.cast(), len, 0) };
    let err = std::io::Error::last_os_error();
    unsafe { std::alloc::dealloc(buf, layout) };
    match r {
        r if r == len as isize => Ok(()),
        r if r < 0 => Err(err),
        r => panic!("short direct write: {r} of {len}"),
    }
}

#[test]
fn a_direct_write_takes_set_ids_away_unless_root_makes_it() {
    let fs = TestFs::new();
    let d = fs.join("d");
    dir_of(&d, ALICE, 0o777);
    let f = d.join("prog");
    file_of(&f, ALICE, 0o6777);
    let (b, bg) = BOB;
    as_user(b, bg, || direct_write(&f, 4096)).unwrap();
    assert_eq!(perm(&lstat(&f)), 0o777, "a direct write by another user");
    chmod(&f, 0o6767).unwrap();
    as_user_groups(b, bg, &[bg, ALICE.1], || direct_write(&f, 4096)).unwrap();
    assert_eq!(
        perm(&lstat(&f)),
        0o2767,
        "a group member's: setgid without group execute stays"
    );
    as_user(b, bg, || direct_write(&f, 4096)).unwrap();
    assert_eq!(
        perm(&lstat(&f)),
        0o767,
        "a non-member's: setgid without group execute goes"
    );
    chmod(&f, 0o6777).unwrap();
    direct_write(&f, 4096).unwrap();
    assert_eq!(perm(&lstat(&f)), 0o6777, "root's direct write");
}

#[test]
fn fallocate_punch_zero_and_copy_into_take_set_ids_away_unless_root_makes_them() {
    // Linux's file_modified: every change of a file's contents by a caller without
    // CAP_FSETID, preallocation included.
    let fs = TestFs::new();
    let d = fs.join("d");
    dir_of(&d, ALICE, 0o777);
    let f = d.join("prog");
    file_of(&f, ALICE, 0o6777);
    let src = d.join("src");
    file_of(&src, ALICE, 0o644);
    let (b, bg) = BOB;
    let fallocate = |mode: i32, off: i64, len: i64| -> std::io::Result<()> {
        let w = sys::open(&f, libc::O_WRONLY, 0)?;
        let r = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&w), mode, off, len) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let copy_into = || -> std::io::Result<()> {
        let r = fs::File::open(&src)?;
        let w = sys::open(&f, libc::O_WRONLY, 0)?;
        let n = unsafe {
            libc::copy_file_range(
                std::os::fd::AsRawFd::as_raw_fd(&r),
                std::ptr::null_mut(),
                std::os::fd::AsRawFd::as_raw_fd(&w),
                std::ptr::null_mut(),
                7,
                0,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    let ways: [(&str, &(dyn Fn() -> std::io::Result<()> + Sync)); 5] = [
        ("fallocate", &|| fallocate(0, 0, 1 << 20)),
        ("fallocate KEEP_SIZE", &|| {
            fallocate(libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20)
        }),
        ("punch hole", &|| {
            fallocate(
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                4096,
            )
        }),
        ("zero range", &|| {
            fallocate(libc::FALLOC_FL_ZERO_RANGE, 0, 8192)
        }),
        ("copy_file_range into it", &copy_into),
    ];
    for (way, change) in ways {
        chmod(&f, 0o6777).unwrap();
        as_user(b, bg, change).unwrap();
        assert_eq!(perm(&lstat(&f)), 0o777, "{way} by another user");
        chmod(&f, 0o6767).unwrap();
        as_user_groups(b, bg, &[bg, ALICE.1], change).unwrap();
        assert_eq!(
            perm(&lstat(&f)),
            0o2767,
            "{way} by a group member: setgid without group execute stays"
        );
        as_user(b, bg, change).unwrap();
        assert_eq!(
            perm(&lstat(&f)),
            0o767,
            "{way} by a non-member: setgid without group execute goes"
        );
        chmod(&f, 0o6777).unwrap();
        change().unwrap();
        assert_eq!(perm(&lstat(&f)), 0o6777, "{way} by root");
    }
}

/// A mount made by root without `allow_other` is open to every user, as a kernel file system
/// is (DEFAULT_MOUNT_OPTS gives allow_other; this mount does not); the permission bits still
/// decide, the kernel checking them (default_permissions is always on). `allow_root` keeps
/// every other user out.
#[test]
fn a_mount_by_root_is_open_to_every_user_unless_allow_root() {
    let fs = TestFs::builder().mount_opts("").mount();
    file_of(&fs.join("shared"), (0, 0), 0o644);
    file_of(&fs.join("private"), (0, 0), 0o600);
    as_user(ALICE.0, ALICE.1, || {
        assert_eq!(fs::metadata(fs.join("shared")).unwrap().len(), 7);
        assert_eq!(fs::read(fs.join("shared")).unwrap(), b"content");
        assert_errno!(fs::read(fs.join("private")), libc::EACCES);
    });
    if !fs.is_dualfs() {
        return;
    }
    drop(fs);
    let fs = TestFs::builder().mount_opts("allow_root").mount();
    file_of(&fs.join("shared"), (0, 0), 0o644);
    assert_eq!(fs::read(fs.join("shared")).unwrap(), b"content");
    as_user(ALICE.0, ALICE.1, || {
        assert_errno!(fs::metadata(fs.join("shared")), libc::EACCES);
    });
}
