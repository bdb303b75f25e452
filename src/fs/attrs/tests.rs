//! Inode flags through the core API: the checks other operations (xattrs, fallocate) call,
//! who may set what, and the write-back cache's own time stamps.

use crate::format::inode::{FLAG_APPEND, FLAG_IMMUTABLE, FLAG_NODUMP};
use crate::fs::tests::node_ids::fresh;
use crate::fs::*;

const ROOT: u64 = crate::format::ROOT_INO;
use crate::fs::tests::U;

fn eperm<T: std::fmt::Debug>(r: Result<T>) {
    assert!(matches!(r, Err(FsError::Errno(libc::EPERM))), "{r:?}");
}

#[test]
fn the_checks_follow_the_flags() {
    let (m, d, fs) = fresh();
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    fs.check_mutable(f.ino).unwrap();
    fs.check_appendable(f.ino).unwrap();
    fs.set_inode_flags(&Caller::ROOT, f.ino, FLAG_APPEND)
        .unwrap();
    eperm(fs.check_mutable(f.ino));
    fs.check_appendable(f.ino).unwrap();
    fs.set_inode_flags(&Caller::ROOT, f.ino, FLAG_IMMUTABLE)
        .unwrap();
    eperm(fs.check_mutable(f.ino));
    eperm(fs.check_appendable(f.ino));
    // Kept across a remount.
    fs.unmount().unwrap();
    let fs = Fs::mount(m, d, MountOptions::default()).unwrap();
    assert_eq!(fs.inode_flags(f.ino).unwrap(), FLAG_IMMUTABLE);
    eperm(fs.unlink(&U, ROOT, b"f"));
    fs.set_inode_flags(&Caller::ROOT, f.ino, 0).unwrap();
    fs.unlink(&U, ROOT, b"f").unwrap();
    fs.unmount().unwrap();
}

#[test]
fn an_immutable_directory_still_finds_existing_names_first() {
    // The kernel sends CREATE for a name that appeared after its LOOKUP said it was absent:
    // the existing file is opened, as open(O_CREAT) of an existing name does.
    let (_m, _d, fs) = fresh();
    let dir = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    let (f, fh) = fs.create(&U, dir.ino, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    fs.set_inode_flags(&Caller::ROOT, dir.ino, FLAG_IMMUTABLE)
        .unwrap();
    let (again, fh) = fs.create(&U, dir.ino, b"f", 0o644, libc::O_RDWR).unwrap();
    assert_eq!(again.ino, f.ino);
    fs.release(f.ino, fh).unwrap();
    assert!(matches!(
        fs.mkdir(&U, dir.ino, b"f", 0o755),
        Err(FsError::Errno(libc::EEXIST))
    ));
    eperm(fs.mkdir(&U, dir.ino, b"g", 0o755));
    eperm(fs.create(&U, dir.ino, b"g", 0o644, libc::O_RDWR));
    fs.unmount().unwrap();
}

#[test]
fn who_may_set_which_flags() {
    let (_m, _d, fs) = fresh();
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    eperm(fs.set_inode_flags(&U, f.ino, FLAG_IMMUTABLE));
    eperm(fs.set_inode_flags(&U, f.ino, FLAG_APPEND));
    fs.set_inode_flags(&U, f.ino, FLAG_NODUMP).unwrap();
    let other = Caller { uid: 1001, ..U };
    eperm(fs.set_inode_flags(&other, f.ino, 0));
    assert!(matches!(
        fs.set_inode_flags(&Caller::ROOT, f.ino, 0x4),
        Err(FsError::Errno(libc::EOPNOTSUPP))
    ));
    assert_eq!(fs.inode_flags(f.ino).unwrap(), FLAG_NODUMP);
    fs.unmount().unwrap();
}

#[test]
fn the_write_back_cache_may_push_times_of_an_append_only_file() {
    let (_m, _d, fs) = fresh();
    fs.begin_kernel_session(true);
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    fs.set_inode_flags(&Caller::ROOT, f.ino, FLAG_APPEND)
        .unwrap();
    let t = SetTime::At(Timespec { sec: 5, nsec: 0 });
    let pushed = SetAttr {
        mtime: Some(t),
        ctime: Some(Timespec { sec: 5, nsec: 0 }),
        ..SetAttr::default()
    };
    fs.setattr(&U, f.ino, &pushed).unwrap();
    let atime = SetAttr {
        atime: Some(t),
        ..SetAttr::default()
    };
    eperm(fs.setattr(&U, f.ino, &atime));
    // O_APPEND opens are allowed and positioned by the kernel, others refused.
    eperm(fs.open(&U, f.ino, libc::O_RDWR));
    let fh = fs.open(&U, f.ino, libc::O_RDWR | libc::O_APPEND).unwrap();
    fs.write(f.ino, fh, 0, b"abc").unwrap();
    fs.write(f.ino, fh, 1, b"X").unwrap();
    assert_eq!(
        fs.read(f.ino, fh, 0, 10).unwrap(),
        b"aXc",
        "the kernel's offset is used"
    );
    fs.release(f.ino, fh).unwrap();
    fs.unmount().unwrap();
}

#[test]
fn fallocate_and_copies_follow_the_flags() {
    // As vfs_fallocate: an append-only file may be allocated (with or without KEEP_SIZE),
    // never punched or zeroed; an immutable one not at all; no copy lands in either.
    let (_m, _d, fs) = fresh();
    let (src, sfh) = fs.create(&U, ROOT, b"src", 0o644, libc::O_RDWR).unwrap();
    fs.write(src.ino, sfh, 0, &[7u8; 8192]).unwrap();
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.set_inode_flags(&Caller::ROOT, f.ino, FLAG_APPEND)
        .unwrap();
    fs.fallocate(f.ino, fh, 0, 4096, 0).unwrap();
    fs.fallocate(f.ino, fh, 4096, 4096, libc::FALLOC_FL_KEEP_SIZE)
        .unwrap();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    eperm(fs.fallocate(f.ino, fh, 0, 4096, punch));
    eperm(fs.fallocate(f.ino, fh, 0, 4096, libc::FALLOC_FL_ZERO_RANGE));
    eperm(fs.copy_file_range(src.ino, sfh, 0, f.ino, fh, 0, 8192, 0));
    fs.set_inode_flags(&Caller::ROOT, f.ino, FLAG_IMMUTABLE)
        .unwrap();
    eperm(fs.fallocate(f.ino, fh, 0, 8192, 0));
    eperm(fs.copy_file_range(src.ino, sfh, 0, f.ino, fh, 0, 8192, 0));
    fs.set_inode_flags(&Caller::ROOT, f.ino, 0).unwrap();
    assert_eq!(
        fs.copy_file_range(src.ino, sfh, 0, f.ino, fh, 0, 8192, 0)
            .unwrap(),
        8192
    );
    fs.release(f.ino, fh).unwrap();
    fs.release(src.ino, sfh).unwrap();
    fs.unmount().unwrap();
}

#[test]
fn extended_attributes_follow_the_flags() {
    // As xattr_permission: neither an immutable nor an append-only file's attributes change.
    let (_m, _d, fs) = fresh();
    let (f, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh).unwrap();
    let flags = crate::fs::XattrFlags::default();
    fs.setxattr(&U, f.ino, b"user.a", b"1", flags).unwrap();
    for flag in [FLAG_APPEND, FLAG_IMMUTABLE] {
        fs.set_inode_flags(&Caller::ROOT, f.ino, flag).unwrap();
        eperm(fs.setxattr(&U, f.ino, b"user.b", b"2", flags));
        eperm(fs.removexattr(&U, f.ino, b"user.a"));
    }
    fs.set_inode_flags(&Caller::ROOT, f.ino, 0).unwrap();
    fs.removexattr(&U, f.ino, b"user.a").unwrap();
    fs.unmount().unwrap();
}
