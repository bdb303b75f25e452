//! The plain-Rust vocabulary of the core API: what callers pass in and get back.

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

thread_local! {
    /// (forced time, latest reading) of this thread's clock.
    static CLOCK: std::cell::Cell<(Option<Timespec>, Option<Timespec>)> =
        const { std::cell::Cell::new((None, None)) };
}

impl Timespec {
    /// The clock, as operations read it: during an intent log replay, the time the
    /// replayed operation had (`replay_clock`); the latest reading is kept for its record.
    pub fn now() -> Timespec {
        let t = CLOCK.with(|c| {
            let (forced, _) = c.get();
            forced.unwrap_or_else(|| {
                let d = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                Timespec {
                    sec: d.as_secs() as i64,
                    nsec: d.subsec_nanos(),
                }
            })
        });
        CLOCK.with(|c| c.set((c.get().0, Some(t))));
        t
    }

    /// The latest `now` this thread read (an operation's time, for its intent record).
    pub fn last_now() -> Timespec {
        CLOCK.with(|c| c.get().1).unwrap_or_else(Timespec::now)
    }

    /// Make `now` return `t` on this thread (a replay of an operation of that time); `None`
    /// gives the real clock back.
    pub fn replay_clock(t: Option<Timespec>) {
        CLOCK.with(|c| c.set((t, c.get().1)));
    }
    pub fn to_system_time(self) -> std::time::SystemTime {
        use std::time::{Duration, UNIX_EPOCH};
        if self.sec >= 0 {
            UNIX_EPOCH + Duration::new(self.sec as u64, self.nsec)
        } else {
            UNIX_EPOCH - Duration::from_secs(self.sec.unsigned_abs())
                + Duration::from_nanos(self.nsec as u64)
        }
    }
    pub fn from_system_time(t: std::time::SystemTime) -> Timespec {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Timespec {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let (mut sec, mut nsec) = (-(d.as_secs() as i64), 0u32);
                if d.subsec_nanos() > 0 {
                    sec -= 1;
                    nsec = 1_000_000_000 - d.subsec_nanos();
                }
                Timespec { sec, nsec }
            }
        }
    }
}

pub use crate::format::kind::FileKind;

/// Attributes of an inode, as `stat` shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub generation: u32,
    pub kind: FileKind,
    /// Permission bits including setuid, setgid and sticky (`mode & 0o7777`).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub size: u64,
    /// 512-byte units, as `st_blocks`.
    pub blocks: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub blksize: u32,
    /// The Linux inode flags it has (`FS_*_FL`, as FS_IOC_GETFLAGS shows them).
    pub flags: u32,
}

/// Who is asking: the credentials of the calling process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// The process's umask for the modes of new files: applied unless the directory has a
    /// default ACL (which then limits the mode instead). 0 when the caller applied it.
    pub umask: u32,
    /// Whether the caller holds CAP_FSETID, when the request says so (FUSE's KILL_SUIDGID
    /// flags of a truncating SETATTR or OPEN); `None`: asked of /proc when it matters
    /// (privileges.rs).
    pub holds_fsetid: Option<bool>,
}

impl Caller {
    pub const ROOT: Caller = Caller {
        uid: 0,
        gid: 0,
        pid: 0,
        umask: 0,
        holds_fsetid: None,
    };
}

/// `setxattr` flags (XATTR_CREATE, XATTR_REPLACE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XattrFlags {
    /// Fail with EEXIST if the attribute exists.
    pub create: bool,
    /// Fail with ENODATA if it does not.
    pub replace: bool,
}

/// A time to set: the current time, or a given one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    Now,
    At(Timespec),
}

/// What `setattr` changes; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    pub ctime: Option<Timespec>,
}

/// `renameat2` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

/// One directory entry as readdir returns it. `cookie` resumes the listing after this entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: FileKind,
    pub name: Vec<u8>,
    pub cookie: u64,
}

/// `statfs` figures, in blocks of `bsize` and inodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}
