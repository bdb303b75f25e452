//! Thin wrappers over the system calls the tests make that std does not offer, all returning
//! `io::Result` so that errno can be asserted with [`assert_errno!`].

use std::ffi::{CStr, CString, OsStr};
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

pub fn cstr(p: impl AsRef<OsStr>) -> CString {
    CString::new(p.as_ref().as_bytes()).expect("NUL in path")
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The errno of a failed call; panics (with what succeeded) if the call succeeded.
pub fn errno_of<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, the call succeeded with {v:?}"),
        Err(e) => e
            .raw_os_error()
            .unwrap_or_else(|| panic!("error without errno: {e}")),
    }
}

pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ESTALE => "ESTALE",
        libc::ENODATA => "ENODATA",
        libc::ERANGE => "ERANGE",
        libc::E2BIG => "E2BIG",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => "",
    };
    format!("{name}({e}: {})", io::Error::from_raw_os_error(e))
}

/// `assert_errno!(call, libc::EEXIST)`: the call fails with exactly that errno.
#[macro_export]
macro_rules! assert_errno {
    ($call:expr, $errno:expr $(,)?) => {{
        let got = match $call {
            Ok(v) => panic!(
                "{}: expected {}, but it succeeded ({:?})",
                stringify!($call),
                $crate::common::sys::errno_name($errno),
                v
            ),
            Err(e) => {
                let e: std::io::Error = e;
                e.raw_os_error().unwrap_or(-1)
            }
        };
        assert!(
            got == $errno,
            "{}: expected {}, got {}",
            stringify!($call),
            $crate::common::sys::errno_name($errno),
            $crate::common::sys::errno_name(got)
        );
    }};
}

/// `lstat`, panicking with the path on error.
pub fn lstat(p: impl AsRef<Path>) -> Metadata {
    let p = p.as_ref();
    fs::symlink_metadata(p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.display()))
}

/// `stat` (follows symlinks), panicking with the path on error.
pub fn stat(p: impl AsRef<Path>) -> Metadata {
    let p = p.as_ref();
    fs::metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
}

/// A time stamp as (seconds, nanoseconds).
pub type Ts = (i64, i64);

pub fn atime(m: &Metadata) -> Ts {
    (m.atime(), m.atime_nsec())
}
pub fn mtime(m: &Metadata) -> Ts {
    (m.mtime(), m.mtime_nsec())
}
pub fn ctime(m: &Metadata) -> Ts {
    (m.ctime(), m.ctime_nsec())
}

/// The wall clock as (seconds, nanoseconds).
pub fn now() -> Ts {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (d.as_secs() as i64, d.subsec_nanos() as i64)
}

/// Seconds between two stamps (b - a), as f64.
pub fn ts_diff(a: Ts, b: Ts) -> f64 {
    (b.0 - a.0) as f64 + (b.1 - a.1) as f64 * 1e-9
}

/// What to set a time stamp to in [`utimens`].
#[derive(Clone, Copy, Debug)]
pub enum SetTs {
    Now,
    Omit,
    At(i64, i64),
}

fn timespec(t: SetTs) -> libc::timespec {
    match t {
        SetTs::Now => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        SetTs::Omit => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        SetTs::At(s, n) => libc::timespec {
            tv_sec: s,
            tv_nsec: n,
        },
    }
}

/// `utimensat(AT_FDCWD, path, [atime, mtime], nofollow ? AT_SYMLINK_NOFOLLOW : 0)`.
pub fn utimens(p: impl AsRef<Path>, atime: SetTs, mtime: SetTs, nofollow: bool) -> io::Result<()> {
    let c = cstr(p.as_ref());
    let ts = [timespec(atime), timespec(mtime)];
    let flags = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), flags) })
}

/// `futimens(fd, [atime, mtime])`.
pub fn futimens(f: &impl AsRawFd, atime: SetTs, mtime: SetTs) -> io::Result<()> {
    let ts = [timespec(atime), timespec(mtime)];
    cvt(unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) })
}

pub const RENAME_NOREPLACE: u32 = libc::RENAME_NOREPLACE;
pub const RENAME_EXCHANGE: u32 = libc::RENAME_EXCHANGE;

/// `renameat2(AT_FDCWD, from, AT_FDCWD, to, flags)`.
pub fn rename2(from: impl AsRef<Path>, to: impl AsRef<Path>, flags: u32) -> io::Result<()> {
    let (a, b) = (cstr(from.as_ref()), cstr(to.as_ref()));
    cvt(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    })
}

/// `rename(2)` through libc (std's rename is the same call; this keeps the errno path obvious).
pub fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    rename2(from, to, 0)
}

/// `statvfs(2)`.
pub fn statvfs(p: impl AsRef<Path>) -> libc::statvfs {
    let c = cstr(p.as_ref());
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::statvfs(c.as_ptr(), &mut s) })
        .unwrap_or_else(|e| panic!("statvfs {}: {e}", p.as_ref().display()));
    s
}

/// fsync(2) of a directory (reaches a FUSE file system as FSYNCDIR, unlike syncfs).
pub fn fsync_dir(p: impl AsRef<Path>) {
    let d = open(p.as_ref(), libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    cvt(unsafe { libc::fsync(d.as_raw_fd()) }).expect("fsync of a directory");
}

/// Push everything of the file system at `root` out: syncfs(2) (a no-op for plain FUSE
/// file systems) and an fsync of the root directory (FSYNCDIR reaches the daemon).
pub fn sync_fs(root: impl AsRef<Path>) {
    syncfs(root.as_ref());
    fsync_dir(root.as_ref());
}

/// `syncfs(2)` on the file system holding `p` (a no-op for plain FUSE file systems).
pub fn syncfs(p: impl AsRef<Path>) {
    let f = fs::File::open(p.as_ref()).unwrap();
    cvt(unsafe { libc::syncfs(f.as_raw_fd()) }).expect("syncfs");
}

pub fn mkfifo(p: impl AsRef<Path>, mode: u32) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) })
}

pub fn mknod(p: impl AsRef<Path>, mode: u32, dev: u64) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::mknod(c.as_ptr(), mode as libc::mode_t, dev as libc::dev_t) })
}

/// `access(2)` with R_OK/W_OK/X_OK/F_OK.
pub fn access(p: impl AsRef<Path>, mode: i32) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::access(c.as_ptr(), mode) })
}

/// Path-based `truncate(2)`.
pub fn truncate(p: impl AsRef<Path>, len: u64) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::truncate(c.as_ptr(), len as libc::off_t) })
}

pub fn chmod(p: impl AsRef<Path>, mode: u32) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::chmod(c.as_ptr(), mode as libc::mode_t) })
}

/// `chown(2)`; `u32::MAX` leaves a field alone (as -1 does).
pub fn chown(p: impl AsRef<Path>, uid: u32, gid: u32) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::chown(c.as_ptr(), uid, gid) })
}

pub fn lchown(p: impl AsRef<Path>, uid: u32, gid: u32) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::lchown(c.as_ptr(), uid, gid) })
}

/// `mkdir(2)` with an explicit mode (the process umask applies, as always).
pub fn mkdir(p: impl AsRef<Path>, mode: u32) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::mkdir(c.as_ptr(), mode as libc::mode_t) })
}

pub fn rmdir(p: impl AsRef<Path>) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::rmdir(c.as_ptr()) })
}

pub fn unlink(p: impl AsRef<Path>) -> io::Result<()> {
    let c = cstr(p.as_ref());
    cvt(unsafe { libc::unlink(c.as_ptr()) })
}

pub fn link(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    let (a, b) = (cstr(from.as_ref()), cstr(to.as_ref()));
    cvt(unsafe { libc::link(a.as_ptr(), b.as_ptr()) })
}

pub fn symlink(target: impl AsRef<OsStr>, p: impl AsRef<Path>) -> io::Result<()> {
    let (a, b) = (cstr(target), cstr(p.as_ref()));
    cvt(unsafe { libc::symlink(a.as_ptr(), b.as_ptr()) })
}

/// `open(2)` with raw flags and mode.
pub fn open(p: impl AsRef<Path>, flags: i32, mode: u32) -> io::Result<fs::File> {
    use std::os::unix::io::FromRawFd;
    let c = cstr(p.as_ref());
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(unsafe { fs::File::from_raw_fd(fd) })
    }
}

pub fn fsync(f: &impl AsRawFd) -> io::Result<()> {
    cvt(unsafe { libc::fsync(f.as_raw_fd()) })
}

pub fn fdatasync(f: &impl AsRawFd) -> io::Result<()> {
    cvt(unsafe { libc::fdatasync(f.as_raw_fd()) })
}

/// `umask(2)`: set and return the old mask.
pub fn umask(m: u32) -> u32 {
    unsafe { libc::umask(m as libc::mode_t) as u32 }
}

pub fn mount(
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = src.map(cstr);
    let fstype = fstype.map(cstr);
    let data = data.map(cstr);
    let t = cstr(target);
    let p = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    cvt(unsafe {
        libc::mount(
            p(&src),
            t.as_ptr(),
            p(&fstype),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |c| c.as_ptr() as *const libc::c_void),
        )
    })
}

pub fn umount2(target: &Path, flags: i32) -> io::Result<()> {
    let t = cstr(target);
    cvt(unsafe { libc::umount2(t.as_ptr(), flags) })
}

/// One entry of `getdents64`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dirent {
    pub ino: u64,
    pub off: i64,
    pub dtype: u8,
    pub name: Vec<u8>,
}

/// Read entries with one `getdents64` call into a buffer of `bufsize` bytes; empty at the end.
pub fn getdents(dir: &fs::File, bufsize: usize) -> io::Result<Vec<Dirent>> {
    let mut buf = vec![0u8; bufsize];
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            dir.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < n as usize {
        let b = &buf[pos..];
        let ino = u64::from_ne_bytes(b[0..8].try_into().unwrap());
        let off = i64::from_ne_bytes(b[8..16].try_into().unwrap());
        let reclen = u16::from_ne_bytes(b[16..18].try_into().unwrap()) as usize;
        let dtype = b[18];
        let name = CStr::from_bytes_until_nul(&b[19..reclen])
            .expect("dirent name not terminated")
            .to_bytes()
            .to_vec();
        out.push(Dirent {
            ino,
            off,
            dtype,
            name,
        });
        pos += reclen;
    }
    Ok(out)
}

/// Every entry of a directory through `getdents64` (including "." and "..").
pub fn list_dir(p: impl AsRef<Path>) -> Vec<Dirent> {
    let p = p.as_ref();
    let d = open(p, libc::O_RDONLY | libc::O_DIRECTORY, 0)
        .unwrap_or_else(|e| panic!("open dir {}: {e}", p.display()));
    let mut all = Vec::new();
    loop {
        let v = getdents(&d, 64 << 10).unwrap_or_else(|e| panic!("getdents {}: {e}", p.display()));
        if v.is_empty() {
            return all;
        }
        all.extend(v);
    }
}

/// Names in a directory, without "." and "..", sorted.
pub fn names(p: impl AsRef<Path>) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = list_dir(p)
        .into_iter()
        .map(|d| d.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    v.sort();
    v
}

/// A libc `DIR*` stream for telldir/seekdir tests.
pub struct DirStream(*mut libc::DIR);

impl DirStream {
    pub fn open(p: impl AsRef<Path>) -> io::Result<DirStream> {
        let c = cstr(p.as_ref());
        let d = unsafe { libc::opendir(c.as_ptr()) };
        if d.is_null() {
            Err(io::Error::last_os_error())
        } else {
            Ok(DirStream(d))
        }
    }
    /// The next name, or None at the end.
    pub fn next_name(&mut self) -> Option<Vec<u8>> {
        unsafe {
            *libc::__errno_location() = 0;
            let e = libc::readdir64(self.0);
            if e.is_null() {
                let err = *libc::__errno_location();
                assert_eq!(err, 0, "readdir: {}", io::Error::from_raw_os_error(err));
                return None;
            }
            Some(CStr::from_ptr((*e).d_name.as_ptr()).to_bytes().to_vec())
        }
    }
    pub fn tell(&mut self) -> i64 {
        let t = unsafe { libc::telldir(self.0) };
        assert!(t >= 0, "telldir: {}", io::Error::last_os_error());
        t as i64
    }
    pub fn seek(&mut self, pos: i64) {
        unsafe { libc::seekdir(self.0, pos as libc::c_long) }
    }
    pub fn rewind(&mut self) {
        unsafe { libc::rewinddir(self.0) }
    }
}

impl Drop for DirStream {
    fn drop(&mut self) {
        unsafe { libc::closedir(self.0) };
    }
}

/// File type bits of a metadata.
pub fn fmt(m: &Metadata) -> u32 {
    m.mode() & libc::S_IFMT
}

/// Permission bits (with setuid/setgid/sticky).
pub fn perm(m: &Metadata) -> u32 {
    m.mode() & 0o7777
}

/// The process umask, read without changing it (other test threads may be creating files).
pub fn current_umask() -> u32 {
    let s = fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(l.split_whitespace().nth(1).unwrap(), 8).unwrap()
}

/// Sleep long enough for any clock a file system may use (coarse kernel time included) to tick.
pub fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(30));
}

/// `makedev(3)`.
pub fn makedev(major: u32, minor: u32) -> u64 {
    libc::makedev(major, minor) as u64
}

/// setxattr(2), or lsetxattr(2) with `nofollow`. `flags`: 0, XATTR_CREATE or XATTR_REPLACE.
pub fn setxattr(
    p: impl AsRef<Path>,
    name: &str,
    value: &[u8],
    flags: i32,
    nofollow: bool,
) -> io::Result<()> {
    let p = cstr(p.as_ref());
    let n = CString::new(name).unwrap();
    let r = unsafe {
        let f = if nofollow {
            libc::lsetxattr
        } else {
            libc::setxattr
        };
        f(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    cvt(r)
}

fn size_result(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// getxattr(2) / lgetxattr(2) into a buffer of `size` bytes (0: the size probe, which
/// returns the length and no bytes).
pub fn getxattr_sized(
    p: impl AsRef<Path>,
    name: &str,
    size: usize,
    nofollow: bool,
) -> io::Result<(usize, Vec<u8>)> {
    let p = cstr(p.as_ref());
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; size];
    let r = unsafe {
        let f = if nofollow {
            libc::lgetxattr
        } else {
            libc::getxattr
        };
        f(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size)
    };
    let len = size_result(r)?;
    buf.truncate(len.min(size));
    Ok((len, buf))
}

/// The whole value of attribute `name` (probe, then read).
pub fn getxattr(p: impl AsRef<Path>, name: &str) -> io::Result<Vec<u8>> {
    let (len, _) = getxattr_sized(p.as_ref(), name, 0, false)?;
    Ok(getxattr_sized(p, name, len.max(1), false)?.1)
}

/// listxattr(2) / llistxattr(2) into a buffer of `size` bytes: (length, the names).
pub fn listxattr_sized(
    p: impl AsRef<Path>,
    size: usize,
    nofollow: bool,
) -> io::Result<(usize, Vec<Vec<u8>>)> {
    let p = cstr(p.as_ref());
    let mut buf = vec![0u8; size];
    let r = unsafe {
        let f = if nofollow {
            libc::llistxattr
        } else {
            libc::listxattr
        };
        f(p.as_ptr(), buf.as_mut_ptr().cast(), size)
    };
    let len = size_result(r)?;
    buf.truncate(len.min(size));
    let names = buf
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| n.to_vec())
        .collect();
    Ok((len, names))
}

/// The names of `p`'s attributes, sorted.
pub fn listxattr(p: impl AsRef<Path>) -> io::Result<Vec<String>> {
    let (len, _) = listxattr_sized(p.as_ref(), 0, false)?;
    let mut names: Vec<String> = listxattr_sized(p, len.max(1), false)?
        .1
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect();
    names.sort();
    Ok(names)
}

/// removexattr(2) / lremovexattr(2).
pub fn removexattr(p: impl AsRef<Path>, name: &str, nofollow: bool) -> io::Result<()> {
    let p = cstr(p.as_ref());
    let n = CString::new(name).unwrap();
    let r = unsafe {
        if nofollow {
            libc::lremovexattr(p.as_ptr(), n.as_ptr())
        } else {
            libc::removexattr(p.as_ptr(), n.as_ptr())
        }
    };
    cvt(r)
}
