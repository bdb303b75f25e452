//! Inode flags (chattr(1), FS_IOC_GETFLAGS/SETFLAGS) and the rules of the two that restrict
//! changes, as Linux has them:
//!
//! - immutable (`FS_IMMUTABLE_FL`, `chattr +i`): nothing about the inode changes: no write,
//!   truncate, attribute or time change, extended attribute, link, rename or removal, and no
//!   entry added to or removed from it if it is a directory;
//! - append-only (`FS_APPEND_FL`, `chattr +a`): only appends: writes through descriptors
//!   opened with O_APPEND, touching its times to now, and, for a directory, new entries.
//!
//! Only the superuser (CAP_LINUX_IMMUTABLE) may set or clear either; the owner may change the
//! others (nodump, noatime). Every path that changes an inode checks `Change` under the
//! inode's op lock, so a flag set concurrently takes effect for everything after it.

use crate::format::inode::{DiskInode, CHATTR_FLAGS, FLAG_APPEND, FLAG_IMMUTABLE};
use crate::fs::inode::InodeEntry;
use crate::fs::types::*;
use crate::fs::Fs;
use crate::{FsError, Result};

/// What an operation does to an inode, as the flags judge it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Anything but appending: refused by both flags.
    Modify,
    /// Appending (data at the end, a new entry, times set to now): refused by immutable.
    Append,
}

/// EPERM if `d`'s flags forbid `change`.
pub(crate) fn check_change(d: &DiskInode, change: Change) -> Result<()> {
    let forbidding = match change {
        Change::Modify => FLAG_IMMUTABLE | FLAG_APPEND,
        Change::Append => FLAG_IMMUTABLE,
    };
    if d.flags & forbidding != 0 {
        return Err(FsError::Errno(libc::EPERM));
    }
    Ok(())
}

impl Fs {
    /// `check_change` for a cached inode.
    pub(crate) fn check_entry(&self, e: &InodeEntry, change: Change) -> Result<()> {
        check_change(&e.state.read().d, change)
    }

    /// EPERM if `ino` is immutable or append-only: for a change other than appending (an
    /// extended attribute set or removed, fallocate with any mode but FALLOC_FL_KEEP_SIZE).
    /// Call it under the inode's op lock.
    pub fn check_mutable(&self, ino: u64) -> Result<()> {
        self.check_entry(&*self.inode(ino)?, Change::Modify)
    }

    /// EPERM if `ino` is immutable: for appending to it (fallocate with FALLOC_FL_KEEP_SIZE
    /// only). Call it under the inode's op lock.
    pub fn check_appendable(&self, ino: u64) -> Result<()> {
        self.check_entry(&*self.inode(ino)?, Change::Append)
    }

    /// FS_IOC_GETFLAGS: the inode's Linux inode flags.
    pub fn inode_flags(&self, ino: u64) -> Result<u32> {
        self.alive()?;
        Ok(self.inode(ino)?.state.read().d.flags & CHATTR_FLAGS)
    }

    /// FS_IOC_SETFLAGS: set the Linux inode flags to `flags` (EOPNOTSUPP for flags DualFS does
    /// not keep). Immutable and append-only are the superuser's; the rest the owner's too.
    pub fn set_inode_flags(&self, caller: &Caller, ino: u64, flags: u32) -> Result<()> {
        let _admitted = self.admit(crate::fs::clean::Admit::Change)?;
        if flags & !CHATTR_FLAGS != 0 {
            return Err(FsError::Errno(libc::EOPNOTSUPP));
        }
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        {
            let st = e.state.read();
            if st.deleted {
                return Err(FsError::Errno(libc::ENOENT));
            }
            let changed = (st.d.flags & CHATTR_FLAGS) ^ flags;
            if caller.uid != 0
                && (caller.uid != st.d.uid || changed & (FLAG_IMMUTABLE | FLAG_APPEND) != 0)
            {
                return Err(FsError::Errno(libc::EPERM));
            }
        }
        let _g = self.gate_shared();
        let mut st = e.state.write();
        st.d.flags = (st.d.flags & !CHATTR_FLAGS) | flags;
        st.d.ctime = crate::fs::inode::to_disk_time(Timespec::now());
        self.mark_dirty(&e, &mut st);
        drop(st);
        drop(_g);
        self.record(crate::fs::intent::records::IntentOp::SetFlags { ino, flags });
        Ok(())
    }
}
