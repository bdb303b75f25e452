//! Workload operations: what they are, how they print, and how they run on DualFS's core API.

use std::fmt;

use dualfs::fs::{Caller, Fs, SetAttr, XattrFlags};
use dualfs::FsError;

use super::model::split;

/// A persistence call. The path is where the workload aims it; when that name is gone the call
/// goes to the nearest existing ancestor (as a program would fsync the parent directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Persist {
    Fsync(String),
    Fdatasync(String),
    /// fsync of a directory.
    Fsyncdir(String),
    Sync,
}

impl Persist {
    pub fn path(&self) -> &str {
        match self {
            Persist::Fsync(p) | Persist::Fdatasync(p) | Persist::Fsyncdir(p) => p,
            Persist::Sync => "",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// open(O_CREAT | O_TRUNC | O_WRONLY, 0644): makes the file or truncates it.
    Creat(String),
    Mkdir(String),
    /// pwrite of `len` pattern bytes at `off`.
    Write {
        path: String,
        off: u64,
        len: u64,
    },
    /// O_APPEND write of `len` pattern bytes.
    Append {
        path: String,
        len: u64,
    },
    Truncate {
        path: String,
        size: u64,
    },
    Link {
        from: String,
        to: String,
    },
    Unlink(String),
    Rmdir(String),
    Rename {
        from: String,
        to: String,
    },
    Symlink {
        path: String,
        target: Vec<u8>,
    },
    Chmod {
        path: String,
        perm: u16,
    },
    /// fallocate(2) of [off, off + len) through a read-write handle.
    Fallocate {
        path: String,
        mode: Falloc,
        off: u64,
        len: u64,
    },
    /// Open the file (read-only) and keep it open (closing the one held before), so that an
    /// unlink makes it an orphan that a crash leaves for the next mount to free.
    Hold(String),
    /// Close the held file.
    Release,
    Persist(Persist),
    /// `fs.clean_pass(Greedy, 4)`: clean segments and checkpoint.
    Clean,
    /// Mount of the recorded devices (its checkpoint is part of the record).
    Mount,
    /// Clean unmount at the end (its checkpoint is part of the record).
    Unmount,
    /// setxattr of `name` to `len` pattern bytes (inline up to 256 bytes, else value blocks).
    SetXattr {
        path: String,
        name: String,
        len: u64,
    },
    RemoveXattr {
        path: String,
        name: String,
    },
    /// open(O_TMPFILE | O_WRONLY, 0644) in the directory of `path`, a pwrite of `len` pattern
    /// bytes at 0 through that handle, linkat to `path`, close: the file gets its name only
    /// once its data is written. A failed link fails the op; the file, closed unnamed, is freed.
    Tmpfile {
        path: String,
        len: u64,
    },
}

/// The fallocate modes the workloads use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Falloc {
    /// Mode 0: allocate, extend the size.
    Allocate,
    KeepSize,
    /// PUNCH_HOLE | KEEP_SIZE.
    PunchHole,
    ZeroRange,
    ZeroRangeKeepSize,
}

impl Falloc {
    pub const ALL: [Falloc; 5] = [
        Falloc::Allocate,
        Falloc::KeepSize,
        Falloc::PunchHole,
        Falloc::ZeroRange,
        Falloc::ZeroRangeKeepSize,
    ];

    pub fn mode(self) -> i32 {
        let keep = libc::FALLOC_FL_KEEP_SIZE;
        match self {
            Falloc::Allocate => 0,
            Falloc::KeepSize => keep,
            Falloc::PunchHole => libc::FALLOC_FL_PUNCH_HOLE | keep,
            Falloc::ZeroRange => libc::FALLOC_FL_ZERO_RANGE,
            Falloc::ZeroRangeKeepSize => libc::FALLOC_FL_ZERO_RANGE | keep,
        }
    }

    pub fn keeps_size(self) -> bool {
        self.mode() & libc::FALLOC_FL_KEEP_SIZE != 0
    }

    fn name(self) -> &'static str {
        match self {
            Falloc::Allocate => "fallocate",
            Falloc::KeepSize => "fallocate -n",
            Falloc::PunchHole => "punch",
            Falloc::ZeroRange => "zero-range",
            Falloc::ZeroRangeKeepSize => "zero-range -n",
        }
    }
}

impl Op {
    /// After this call returns successfully, everything before it is durable (DualFS writes
    /// everything dirty on any of them; a cleaning pass and an unmount end with a checkpoint).
    pub fn persists(&self) -> bool {
        matches!(self, Op::Persist(_) | Op::Clean | Op::Mount | Op::Unmount)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Creat(p) => write!(f, "creat {p}"),
            Op::Mkdir(p) => write!(f, "mkdir {p}"),
            Op::Write { path, off, len } => write!(f, "write {path} @{off}+{len}"),
            Op::Append { path, len } => write!(f, "append {path} +{len}"),
            Op::Truncate { path, size } => write!(f, "truncate {path} {size}"),
            Op::Link { from, to } => write!(f, "link {from} {to}"),
            Op::Unlink(p) => write!(f, "unlink {p}"),
            Op::Rmdir(p) => write!(f, "rmdir {p}"),
            Op::Rename { from, to } => write!(f, "rename {from} {to}"),
            Op::Symlink { path, target } => write!(f, "symlink {path} ({} bytes)", target.len()),
            Op::Chmod { path, perm } => write!(f, "chmod {path} {perm:o}"),
            Op::Fallocate {
                path,
                mode,
                off,
                len,
            } => write!(f, "{} {path} @{off}+{len}", mode.name()),
            Op::Hold(p) => write!(f, "hold {p} open"),
            Op::Release => write!(f, "close the held file"),
            Op::Persist(Persist::Fsync(p)) => write!(f, "fsync {p}"),
            Op::Persist(Persist::Fdatasync(p)) => write!(f, "fdatasync {p}"),
            Op::Persist(Persist::Fsyncdir(p)) => write!(f, "fsyncdir {p}"),
            Op::Persist(Persist::Sync) => write!(f, "sync"),
            Op::Clean => write!(f, "clean_pass"),
            Op::Mount => write!(f, "mount"),
            Op::Unmount => write!(f, "unmount"),
            Op::SetXattr { path, name, len } => write!(f, "setxattr {path} {name} ({len} bytes)"),
            Op::RemoveXattr { path, name } => write!(f, "removexattr {path} {name}"),
            Op::Tmpfile { path, len } => write!(f, "tmpfile +{len}, link as {path}"),
        }
    }
}

/// The byte operation `gi` writes at file offset `off`: never zero, so holes and stale zeros
/// are told apart, and different for every operation and offset (as far as a byte can be).
pub fn pattern(gi: usize, off: u64) -> u8 {
    let mut z = (gi as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(off.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^= z >> 29;
    (z % 255) as u8 + 1
}

pub fn pattern_bytes(gi: usize, off: u64, len: u64) -> Vec<u8> {
    (off..off + len).map(|o| pattern(gi, o)).collect()
}

const ROOT: u64 = 1;
const WHO: Caller = Caller::ROOT;

fn errno(e: FsError) -> i32 {
    e.errno()
}

/// The inode of directory `path` ("" is the root).
pub fn lookup_path(fs: &Fs, path: &str) -> Result<u64, i32> {
    let mut cur = ROOT;
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        cur = fs.lookup(cur, comp.as_bytes()).map_err(errno)?.ino;
    }
    Ok(cur)
}

fn parent_of(fs: &Fs, path: &str) -> Result<(u64, Vec<u8>), i32> {
    let (dir, name) = split(path);
    Ok((lookup_path(fs, dir)?, name.as_bytes().to_vec()))
}

/// The deepest existing prefix of `path`, and its inode.
fn nearest(fs: &Fs, path: &str) -> (String, u64) {
    let mut p = path.to_string();
    loop {
        if p.is_empty() {
            return (p, ROOT);
        }
        if let Ok(ino) = lookup_path(fs, &p) {
            return (p, ino);
        }
        p = split(&p).0.to_string();
    }
}

/// Files the workload keeps open: (inode, handle).
pub type Held = Option<(u64, u64)>;

/// Close the held file, if any.
pub fn release_held(fs: &Fs, held: &mut Held) -> Result<(), i32> {
    match held.take() {
        Some((ino, fh)) => fs.release(ino, fh).map_err(errno),
        None => Ok(()),
    }
}

/// Run `op` (global index `gi`) on `fs`. Mount and Unmount are the runner's.
pub fn exec(fs: &Fs, op: &Op, gi: usize, held: &mut Held) -> Result<(), i32> {
    match op {
        Op::Hold(p) => {
            let ino = lookup_path(fs, p)?;
            let fh = fs.open(&WHO, ino, libc::O_RDONLY).map_err(errno)?;
            release_held(fs, held)?;
            *held = Some((ino, fh));
            Ok(())
        }
        Op::Release => release_held(fs, held),
        Op::Creat(p) => {
            let (parent, name) = parent_of(fs, p)?;
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
            let (a, fh) = fs
                .create(&WHO, parent, &name, 0o644, flags)
                .map_err(errno)?;
            fs.release(a.ino, fh).map_err(errno)
        }
        Op::Mkdir(p) => {
            let (parent, name) = parent_of(fs, p)?;
            fs.mkdir(&WHO, parent, &name, 0o755)
                .map_err(errno)
                .map(drop)
        }
        Op::Write { path, off, len } => write(fs, gi, path, Some(*off), *len),
        Op::Append { path, len } => write(fs, gi, path, None, *len),
        Op::Truncate { path, size } => {
            let ino = lookup_path(fs, path)?;
            let set = SetAttr {
                size: Some(*size),
                ..Default::default()
            };
            fs.setattr(&WHO, ino, &set).map_err(errno).map(drop)
        }
        Op::Link { from, to } => {
            let src = lookup_path(fs, from)?;
            let (parent, name) = parent_of(fs, to)?;
            fs.link(&WHO, src, parent, &name).map_err(errno).map(drop)
        }
        Op::Unlink(p) => {
            let (parent, name) = parent_of(fs, p)?;
            fs.unlink(&WHO, parent, &name).map_err(errno)
        }
        Op::Rmdir(p) => {
            let (parent, name) = parent_of(fs, p)?;
            fs.rmdir(&WHO, parent, &name).map_err(errno)
        }
        Op::Rename { from, to } => {
            let (sp, sn) = parent_of(fs, from)?;
            let (dp, dn) = parent_of(fs, to)?;
            fs.rename(&WHO, sp, &sn, dp, &dn, Default::default())
                .map_err(errno)
        }
        Op::Symlink { path, target } => {
            let (parent, name) = parent_of(fs, path)?;
            fs.symlink(&WHO, parent, &name, target)
                .map_err(errno)
                .map(drop)
        }
        Op::Chmod { path, perm } => {
            let ino = lookup_path(fs, path)?;
            let set = SetAttr {
                mode: Some(*perm as u32),
                ..Default::default()
            };
            fs.setattr(&WHO, ino, &set).map_err(errno).map(drop)
        }
        Op::Fallocate {
            path,
            mode,
            off,
            len,
        } => fallocate(fs, path, *mode, *off, *len),
        Op::Persist(p) => {
            let ino = nearest(fs, p.path()).1;
            match p {
                Persist::Fsync(_) => fs.fsync(ino, false),
                Persist::Fdatasync(_) => fs.fsync(ino, true),
                Persist::Fsyncdir(_) => {
                    let (path, ino) = nearest(fs, p.path());
                    let is_dir =
                        fs.getattr(ino).map_err(errno)?.kind == dualfs::fs::FileKind::Directory;
                    let dir = if is_dir {
                        ino
                    } else {
                        nearest(fs, split(&path).0).1
                    };
                    fs.fsyncdir(dir, false)
                }
                Persist::Sync => fs.sync(),
            }
            .map_err(errno)
        }
        Op::Clean => fs
            .clean_pass(dualfs::fs::clean::policy::Policy::Greedy, 4)
            .map_err(errno)
            .map(drop),
        Op::Mount | Op::Unmount => unreachable!("the runner mounts and unmounts"),
        Op::SetXattr { path, name, len } => {
            let ino = lookup_path(fs, path)?;
            let value = xattr_value(gi, *len);
            fs.setxattr(&WHO, ino, name.as_bytes(), &value, XattrFlags::default())
                .map_err(errno)
        }
        Op::RemoveXattr { path, name } => {
            let ino = lookup_path(fs, path)?;
            fs.removexattr(&WHO, ino, name.as_bytes()).map_err(errno)
        }
        Op::Tmpfile { path, len } => tmpfile(fs, gi, path, *len),
    }
}

/// The value operation `gi` sets.
pub fn xattr_value(gi: usize, len: u64) -> Vec<u8> {
    pattern_bytes(gi, 1 << 40, len)
}

fn write(fs: &Fs, gi: usize, path: &str, off: Option<u64>, len: u64) -> Result<(), i32> {
    let ino = lookup_path(fs, path)?;
    let flags = libc::O_WRONLY | if off.is_none() { libc::O_APPEND } else { 0 };
    let fh = fs.open(&WHO, ino, flags).map_err(errno)?;
    let at = match off {
        Some(o) => o,
        None => fs.getattr(ino).map_err(errno)?.size,
    };
    let r = fs.write(ino, fh, at, &pattern_bytes(gi, at, len));
    fs.release(ino, fh).map_err(errno)?;
    match r {
        Ok(n) if n as u64 == len => Ok(()),
        Ok(n) => panic!("short write: {n} of {len}"),
        Err(e) => Err(errno(e)),
    }
}

/// O_TMPFILE, write, link, close (see `Op::Tmpfile`).
fn tmpfile(fs: &Fs, gi: usize, path: &str, len: u64) -> Result<(), i32> {
    let (parent, name) = parent_of(fs, path)?;
    let flags = libc::O_WRONLY | libc::O_TMPFILE;
    let (a, fh) = fs.tmpfile(&WHO, parent, 0o644, flags).map_err(errno)?;
    let r = match fs.write(a.ino, fh, 0, &pattern_bytes(gi, 0, len)) {
        Ok(n) if n as u64 == len => Ok(()),
        Ok(n) => panic!("short write: {n} of {len}"),
        Err(e) => Err(errno(e)),
    };
    // Named only after its data is written; unnamed (the write or the link failed), the close
    // frees it.
    let r = r.and_then(|()| fs.link(&WHO, a.ino, parent, &name).map_err(errno));
    fs.release(a.ino, fh).map_err(errno)?;
    r.map(drop)
}

fn fallocate(fs: &Fs, path: &str, mode: Falloc, off: u64, len: u64) -> Result<(), i32> {
    let ino = lookup_path(fs, path)?;
    let fh = fs.open(&WHO, ino, libc::O_RDWR).map_err(errno)?;
    let r = fs.fallocate(ino, fh, off, len, mode.mode());
    fs.release(ino, fh).map_err(errno)?;
    r.map_err(errno)
}
