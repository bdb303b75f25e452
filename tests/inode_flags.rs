//! Inode flags through a real mount: chattr/lsattr (e2fsprogs) and the FS_IOC_GETFLAGS /
//! SETFLAGS ioctls. Immutable and append-only are enforced for every change, set and cleared
//! by root only, and kept across remounts (the checker runs at every unmount).

#[macro_use]
mod common;

use common::user::{as_user, ALICE, BOB};
use common::*;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::Command;

const IMMUTABLE: u32 = 0x10;
const APPEND: u32 = 0x20;
const NODUMP: u32 = 0x40;
const NOATIME: u32 = 0x80;

fn ioctl_fd(p: &Path) -> fs::File {
    let flags = if p.is_dir() {
        libc::O_RDONLY | libc::O_DIRECTORY
    } else {
        libc::O_RDONLY
    };
    sys::open(p, flags, 0).unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
}

/// FS_IOC_GETFLAGS, as chattr does it: an int behind a command that says long.
fn get_flags(p: &Path) -> std::io::Result<u32> {
    let f = ioctl_fd(p);
    let mut flags: libc::c_long = -1;
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The kernel copies out an int: the upper half of the long is what it was.
    assert_eq!(flags >> 32, -1, "more than an int came back");
    Ok(flags as u32)
}

fn set_flags(p: &Path, flags: u32) -> std::io::Result<()> {
    let f = ioctl_fd(p);
    let v: libc::c_int = flags as libc::c_int;
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &v) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn chattr(args: &str, p: &Path) {
    run_ok(Command::new("chattr").arg(args).arg(p));
}

fn lsattr(p: &Path) -> String {
    // The flag letters, without the dashes after the last one (their number varies).
    let out = run_ok(Command::new("lsattr").arg("-d").arg(p));
    out.split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches('-')
        .to_string()
}

/// Opening `f` with `flags` (for writing, no O_TRUNC) is refused with EPERM. With `-o noopen`
/// (`no_open`) the kernel opens files itself and cannot know DualFS's flags: the open
/// succeeds and every write through it is refused instead (docs/DESIGN.md, "FUSE levers").
fn assert_write_open_refused(no_open: bool, f: &Path, flags: i32) {
    if no_open {
        let fd = sys::open(f, flags, 0).unwrap();
        assert_errno!(fd.write_at(b"x", 0), libc::EPERM);
        assert_errno!(fd.write_at(b"x", 1 << 20), libc::EPERM);
    } else {
        assert_errno!(sys::open(f, flags, 0), libc::EPERM);
    }
}

/// Every way to change `f` (a regular file holding "abc") fails with EPERM; reading works.
fn assert_file_unchangeable(t: &TestFs, f: &Path, append_only: bool) {
    let what = if append_only {
        "append-only"
    } else {
        "immutable"
    };
    let no_open = t.mount_option("noopen");
    assert_write_open_refused(no_open, f, libc::O_WRONLY);
    assert_write_open_refused(no_open, f, libc::O_RDWR);
    assert_errno!(sys::open(f, libc::O_RDONLY | libc::O_TRUNC, 0), libc::EPERM);
    assert_errno!(sys::truncate(f, 1), libc::EPERM);
    assert_errno!(sys::chmod(f, 0o600), libc::EPERM);
    assert_errno!(sys::chown(f, ALICE.0, ALICE.1), libc::EPERM);
    assert_errno!(
        sys::utimens(f, SetTs::At(5, 0), SetTs::At(5, 0), false),
        libc::EPERM
    );
    let touch = sys::utimens(f, SetTs::Now, SetTs::Now, false);
    if append_only {
        touch.unwrap_or_else(|e| panic!("touch of an append-only file: {e}"));
    } else {
        assert_errno!(touch, libc::EPERM);
    }
    assert_errno!(sys::unlink(f), libc::EPERM);
    assert_errno!(sys::rename(f, t.join("moved")), libc::EPERM);
    fs::write(t.join("other"), b"x").unwrap();
    assert_errno!(sys::rename(t.join("other"), f), libc::EPERM);
    sys::unlink(t.join("other")).unwrap();
    assert_errno!(sys::link(f, t.join("second")), libc::EPERM);
    assert_eq!(fs::read(f).unwrap(), b"abc", "{what}: reads work");
    assert_eq!(lstat(f).nlink(), 1);
}

#[test]
fn immutable_files_refuse_every_change_until_root_clears_the_flag() {
    let mut t = TestFs::new();
    let f = t.join("f");
    fs::write(&f, b"abc").unwrap();
    let early = sys::open(&f, libc::O_WRONLY, 0).unwrap();
    chattr("+i", &f);
    assert_eq!(lsattr(&f), "----i");
    assert_eq!(get_flags(&f).unwrap(), IMMUTABLE);
    assert_file_unchangeable(&t, &f, false);
    // A descriptor opened before the flag was set cannot write either.
    let wrote = early.write_at(b"zzz", 0);
    if t.writeback_cache() {
        // The page cache takes the write; the daemon refuses it when it arrives.
        assert!(wrote.is_err() || sys::fsync(&early).is_err());
    } else {
        assert_errno!(wrote, libc::EPERM);
    }
    drop(early);
    t.remount();
    assert_eq!(get_flags(&f).unwrap(), IMMUTABLE, "kept across a remount");
    assert_eq!(fs::read(&f).unwrap(), b"abc");
    assert_file_unchangeable(&t, &f, false);
    chattr("-i", &f);
    assert_eq!(get_flags(&f).unwrap(), 0);
    fs::write(&f, b"free again").unwrap();
    sys::unlink(&f).unwrap();
    t.unmount();
}

#[test]
fn append_only_files_take_appends_only() {
    let mut t = TestFs::new();
    let f = t.join("f");
    fs::write(&f, b"abc").unwrap();
    chattr("+a", &f);
    assert_eq!(lsattr(&f), "-----a");
    assert_file_unchangeable(&t, &f, true);
    // Reads and writes through an O_APPEND descriptor work; even pwrite goes to the end.
    let mut a = sys::open(&f, libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
    a.write_all(b"def").unwrap();
    a.write_at(b"ghi", 0).unwrap();
    sys::fsync(&a).unwrap();
    drop(a);
    let mut s = String::new();
    fs::File::open(&f).unwrap().read_to_string(&mut s).unwrap();
    assert_eq!(s, "abcdefghi");
    assert_errno!(
        sys::open(&f, libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC, 0),
        libc::EPERM
    );
    t.remount();
    assert_eq!(get_flags(&f).unwrap(), APPEND);
    chattr("-a", &f);
    sys::truncate(&f, 0).unwrap();
    sys::unlink(&f).unwrap();
    t.unmount();
}

#[test]
fn flagged_directories_guard_their_entries() {
    let mut t = TestFs::new();
    let (imm, app) = (t.join("imm"), t.join("app"));
    for d in [&imm, &app] {
        sys::mkdir(d, 0o755).unwrap();
        fs::write(d.join("old"), b"x").unwrap();
    }
    chattr("+i", &imm);
    chattr("+a", &app);
    assert_eq!(lsattr(&imm), "----i");
    // Immutable: no entry comes or goes, the directory itself stays.
    assert_errno!(fs::write(imm.join("new"), b"y"), libc::EPERM);
    assert_errno!(sys::mkdir(imm.join("sub"), 0o755), libc::EPERM);
    assert_errno!(sys::symlink("old", imm.join("sym")), libc::EPERM);
    assert_errno!(sys::link(imm.join("old"), imm.join("hard")), libc::EPERM);
    assert_errno!(sys::unlink(imm.join("old")), libc::EPERM);
    assert_errno!(sys::rename(imm.join("old"), t.join("out")), libc::EPERM);
    assert_errno!(sys::rename(app.join("old"), imm.join("in")), libc::EPERM);
    assert_errno!(sys::rmdir(&imm), libc::EPERM);
    assert_errno!(sys::rename(&imm, t.join("imm2")), libc::EPERM);
    assert_errno!(sys::chmod(&imm, 0o700), libc::EPERM);
    // Files inside stay writable: the flag is the directory's.
    fs::write(imm.join("old"), b"changed").unwrap();
    // Append-only: entries come, none goes.
    fs::write(app.join("new"), b"y").unwrap();
    sys::mkdir(app.join("sub"), 0o755).unwrap();
    assert_errno!(sys::unlink(app.join("old")), libc::EPERM);
    assert_errno!(sys::rmdir(app.join("sub")), libc::EPERM);
    assert_errno!(sys::rename(app.join("new"), t.join("out")), libc::EPERM);
    fs::write(t.join("in"), b"z").unwrap();
    sys::rename(t.join("in"), app.join("in")).unwrap();
    t.remount();
    chattr("-i", &imm);
    chattr("-a", &app);
    fs::remove_dir_all(&imm).unwrap();
    fs::remove_dir_all(&app).unwrap();
    t.unmount();
}

#[test]
fn only_root_sets_immutable_and_append_only_owners_set_the_rest() {
    let t = TestFs::new();
    let no_open = t.mount_option("noopen");
    let f = t.join("f");
    fs::write(&f, b"abc").unwrap();
    sys::chown(&f, ALICE.0, ALICE.1).unwrap();
    as_user(ALICE.0, ALICE.1, || {
        assert_errno!(set_flags(&f, IMMUTABLE), libc::EPERM);
        assert_errno!(set_flags(&f, APPEND), libc::EPERM);
        set_flags(&f, NODUMP | NOATIME).unwrap();
        assert_eq!(get_flags(&f).unwrap(), NODUMP | NOATIME);
        // lsattr as the owner.
        let out = run_ok(Command::new("lsattr").arg(&f));
        assert!(out.starts_with("------dA"), "{out}");
    });
    as_user(BOB.0, BOB.1, || {
        assert_eq!(
            get_flags(&f).unwrap(),
            NODUMP | NOATIME,
            "anyone may read them"
        );
        assert_errno!(set_flags(&f, 0), libc::EPERM);
    });
    set_flags(&f, IMMUTABLE | NODUMP).unwrap();
    as_user(ALICE.0, ALICE.1, || {
        // Clearing immutable is root's.
        assert_errno!(set_flags(&f, NODUMP), libc::EPERM);
        assert_write_open_refused(no_open, &f, libc::O_WRONLY);
    });
    set_flags(&f, 0).unwrap();
    // Flags DualFS does not keep (compression, here) are refused.
    assert_errno!(set_flags(&f, 0x4), libc::EOPNOTSUPP);
    let out = Command::new("chattr").arg("+c").arg(&f).output().unwrap();
    assert!(!out.status.success());
    assert_eq!(get_flags(&f).unwrap(), 0);
    drop(t);
}

#[test]
fn noatime_flag_stops_access_time_updates() {
    let mut t = TestFs::new();
    let (f, g) = (t.join("f"), t.join("g"));
    for p in [&f, &g] {
        fs::write(p, b"abc").unwrap();
    }
    chattr("+A", &f);
    t.remount(); // nothing cached: the reads reach DualFS
    for p in [&f, &g] {
        sys::utimens(
            p,
            SetTs::At(1_000_000_000, 0),
            SetTs::At(1_000_000_010, 0),
            false,
        )
        .unwrap();
        fs::read(p).unwrap();
    }
    assert_eq!(atime(&lstat(&f)), (1_000_000_000, 0), "+A: unchanged");
    assert_ne!(
        atime(&lstat(&g)),
        (1_000_000_000, 0),
        "without it: relatime updates"
    );
    t.unmount();
}

/// `struct fsxattr` (FS_IOC_FSGETXATTR/FSSETXATTR, as xfs_io uses them).
#[repr(C)]
#[derive(Default)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

const FS_IOC_FSGETXATTR: libc::c_ulong = 0x801c_581f;
const FS_IOC_FSSETXATTR: libc::c_ulong = 0x401c_5820;
const XFLAG_IMMUTABLE: u32 = 0x08;
const XFLAG_APPEND: u32 = 0x10;

fn fsxattr(p: &Path, cmd: libc::c_ulong, x: &mut FsXattr) -> std::io::Result<()> {
    let f = ioctl_fd(p);
    if unsafe { libc::ioctl(f.as_raw_fd(), cmd, x as *mut FsXattr) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn xfs_style_fsxattr_flags_are_the_same_flags() {
    let t = TestFs::new();
    let f = t.join("f");
    fs::write(&f, b"abc").unwrap();
    chattr("+a", &f);
    let mut x = FsXattr::default();
    fsxattr(&f, FS_IOC_FSGETXATTR, &mut x).unwrap();
    assert_eq!(x.xflags, XFLAG_APPEND);
    x.xflags = XFLAG_IMMUTABLE;
    fsxattr(&f, FS_IOC_FSSETXATTR, &mut x).unwrap();
    assert_eq!(get_flags(&f).unwrap(), IMMUTABLE);
    assert_eq!(lsattr(&f), "----i");
    x.xflags = 0;
    x.projid = 7; // project ids are not kept
    assert_errno!(fsxattr(&f, FS_IOC_FSSETXATTR, &mut x), libc::EOPNOTSUPP);
    x.projid = 0;
    fsxattr(&f, FS_IOC_FSSETXATTR, &mut x).unwrap();
    assert_eq!(get_flags(&f).unwrap(), 0);
    drop(t);
}

#[test]
fn chattr_changes_ctime_at_once_and_on_disk() {
    // As xfstests' generic/277: the change time a chattr sets is what stat shows right
    // after it (the kernel caches attributes, and an ioctl does not tell it they changed),
    // and what the inode keeps on disk. With the writeback cache the kernel keeps the times
    // of regular files itself and takes none from DualFS while it holds the inode (FUSE's
    // cache mask), so there a file's new ctime shows from the next lookup on; a directory's
    // at once.
    let mut t = TestFs::new();
    let f = t.join("f");
    let d = t.join("d");
    fs::write(&f, b"x").unwrap();
    fs::create_dir(&d).unwrap();
    t.remount();
    for p in [&f, &d] {
        let at_once = !(t.writeback_cache() && p == &f);
        let before = ctime(&lstat(p));
        std::thread::sleep(std::time::Duration::from_millis(1100));
        chattr("+A", p);
        let after_set = ctime(&lstat(p));
        if at_once {
            assert!(after_set > before, "chattr +A left ctime at {before:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(1100));
        set_flags(p, 0).unwrap();
        let after_clear = ctime(&lstat(p));
        if at_once {
            assert!(
                after_clear > after_set,
                "FS_IOC_SETFLAGS left ctime at {after_set:?}"
            );
        }
        t.remount();
        let on_disk = ctime(&lstat(p));
        assert!(on_disk > before, "the ctime on disk");
        if at_once {
            assert_eq!(on_disk, after_clear, "the ctime on disk");
        }
    }
}
