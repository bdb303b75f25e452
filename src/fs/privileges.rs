//! What changing a file takes away, as Linux does it: set-user-ID and set-group-ID go when a
//! caller without CAP_FSETID writes or truncates a regular file, and when anyone changes its
//! owner or group.
//!
//! The FUSE adapter negotiates FUSE_HANDLE_KILLPRIV_V2, which leaves this to DualFS. In return
//! the kernel marks the super block SB_NOSEC: once it has found that an inode has no
//! `security.capability` it stops asking for it before each write (without the capability
//! every write(2) cost one more request, GETXATTR). File capabilities the kernel still takes
//! away itself, with a REMOVEXATTR, whenever it finds one; setting a `security.` attribute
//! makes it look again. The kernel tells DualFS whether a writer lacks CAP_FSETID
//! (FUSE_WRITE_KILL_SUIDGID); for truncates and O_TRUNC, whose flags fuser 0.18 does not pass
//! on, the core asks /proc about the caller itself (`xattr::capable`). Without the capability
//! negotiated, the kernel sends these mode changes itself, and what is done here finds
//! nothing left to do.
//!
//! As the protocol defines it for this mode, set-group-ID goes only from a file that group
//! members may execute (without group execute it marks mandatory locking, not a privilege).

use super::inode::{to_disk_time, InodeEntry};
use super::types::{Caller, Timespec};
use super::xattr::{capable, CAP_FSETID};
use super::Fs;
use std::sync::Arc;

/// `mode` without the set-ID bits a change takes away from a regular file.
pub(crate) fn without_set_ids(mode: u32) -> u32 {
    if mode & libc::S_IFMT != libc::S_IFREG {
        return mode;
    }
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_IXGRP != 0 {
        m &= !libc::S_ISGID;
    }
    m
}

/// A write or truncate by `caller` takes set-ID bits away from a file of `mode`: it has some
/// to take, and the caller lacks CAP_FSETID (asked of /proc only then, and before any lock
/// that reads need is taken).
pub(crate) fn drops_set_ids(caller: &Caller, mode: u32) -> bool {
    without_set_ids(mode) != mode && !capable(caller, CAP_FSETID)
}

impl Fs {
    /// Take the set-ID bits away from regular file `e` (the caller holds its op lock and was
    /// admitted for the operation that changes the file). The write path pays one look at
    /// the mode when there is nothing to take.
    pub(crate) fn drop_set_ids_locked(&self, e: &Arc<InodeEntry>) {
        let mode = e.state.read().d.mode;
        if without_set_ids(mode) == mode {
            return;
        }
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        st.d.mode = without_set_ids(st.d.mode);
        st.d.ctime = to_disk_time(Timespec::now());
        self.mark_dirty(e, &mut st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_ids_go_from_regular_files_only() {
        let f = libc::S_IFREG;
        assert_eq!(without_set_ids(f | 0o6755), f | 0o755);
        // Set-group-ID without group execute is a locking mark, not a privilege.
        assert_eq!(without_set_ids(f | 0o6745), f | 0o2745);
        assert_eq!(without_set_ids(f | 0o644), f | 0o644);
        let d = libc::S_IFDIR;
        assert_eq!(without_set_ids(d | 0o2775), d | 0o2775);
    }
}
