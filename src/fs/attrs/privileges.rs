//! What changing a file takes away, as Linux does it: set-user-ID and set-group-ID go when a
//! caller without CAP_FSETID changes a regular file's contents (write, truncate, fallocate in
//! every mode, copy_file_range into it: the kernel's `file_modified`), and from every file but
//! a directory when anyone changes its owner or group (`chown_common`).
//!
//! Set-group-ID without group execute marks mandatory locking, not a privilege: it stays when
//! the caller is a member of the file's group (or holds CAP_FSETID), and goes otherwise, as
//! Linux 6.2 on decides it (`setattr_should_drop_sgid`). The protocol's comment for
//! FUSE_HANDLE_KILLPRIV_V2 still describes the older rule (group execute alone decides); a
//! file system conformance suite checks the newer one.
//!
//! The FUSE adapter negotiates FUSE_HANDLE_KILLPRIV_V2, which leaves all of this to DualFS. In
//! return the kernel marks the super block SB_NOSEC: once it has found that an inode has no
//! `security.capability` it stops asking for it before each write (without the capability
//! every write(2) cost one more request, GETXATTR). File capabilities the kernel still takes
//! away itself, with a REMOVEXATTR, whenever it finds one; setting a `security.` attribute
//! makes it look again. The kernel tells DualFS whether a writer lacks CAP_FSETID
//! (FUSE_WRITE_KILL_SUIDGID, on buffered and direct writes alike; FATTR_KILL_SUIDGID on a
//! truncating SETATTR, FUSE_OPEN_KILL_SUIDGID on an O_TRUNC open, which the adapter passes
//! on as `Caller::holds_fsetid`); for fallocate, copy_file_range and chown, whose requests
//! carry no such flag, the core asks /proc about the caller itself (`capable`, here). Group
//! membership is asked of /proc only for a set-group-ID file without group execute. Without
//! the capability negotiated, the kernel sends these mode changes itself, and what is done
//! here finds nothing left to do.
//!
//! What the core knows of a caller's privileges is here too, asked of /proc: its supplementary
//! groups (`groups_of`) and its capabilities (`capable`), which the attribute checks share.

use crate::fs::inode::{to_disk_time, InodeEntry};
use crate::fs::types::{Caller, Timespec};
use crate::fs::Fs;
use std::sync::Arc;

/// Supplementary groups of a process, from /proc (empty when unknown).
pub(crate) fn groups_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Groups:")).map(|l| {
                l[7..]
                    .split_whitespace()
                    .filter_map(|g| g.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// CAP_SYS_ADMIN and CAP_FSETID, as capability numbers.
pub(crate) const CAP_SYS_ADMIN: u32 = 21;
pub(crate) const CAP_FSETID: u32 = 4;

/// Does the caller hold capability `cap`? From its effective set in /proc (a FUSE request
/// names the calling thread); none when that cannot be read, or for the core's own callers
/// (pid 0) other than root.
/// Root is taken as privileged without asking (a root process without the capability could
/// only see `trusted.` names it cannot read).
pub(crate) fn capable(caller: &Caller, cap: u32) -> bool {
    if caller.uid == 0 || caller.pid == 0 {
        return caller.uid == 0;
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", caller.pid));
    let eff = status.ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    });
    eff.is_some_and(|bits| bits & (1 << cap) != 0)
}

const SET_IDS: u32 = libc::S_ISUID | libc::S_ISGID;

/// The set-ID bits of a file of `mode` that a change takes away: set-user-ID always;
/// set-group-ID where group members may execute, or else unless `keeps_lock_mark`. None from
/// a directory (its set-group-ID is how new files get their group).
fn set_ids_taken(mode: u32, keeps_lock_mark: impl FnOnce() -> bool) -> u32 {
    if mode & libc::S_IFMT == libc::S_IFDIR || mode & SET_IDS == 0 {
        return 0;
    }
    let mut taken = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !keeps_lock_mark()) {
        taken |= libc::S_ISGID;
    }
    taken
}

/// Is `caller` a member of group `gid` (its file-system group or a supplementary one)?
fn in_group(caller: &Caller, gid: u32) -> bool {
    caller.gid == gid || groups_of(caller.pid).contains(&gid)
}

/// The bits a change of the contents of a file of `mode` and group `gid` takes away, made
/// by `caller`, who is known to lack CAP_FSETID (the kernel's FUSE_WRITE_KILL_SUIDGID).
pub(crate) fn taken_by_unprivileged_change(caller: &Caller, mode: u32, gid: u32) -> u32 {
    if mode & libc::S_IFMT != libc::S_IFREG {
        return 0;
    }
    set_ids_taken(mode, || in_group(caller, gid))
}

/// The bits a change of the contents of a file of `mode` and group `gid` by `caller` takes
/// away: none if the caller holds CAP_FSETID (asked of /proc only when there is something to
/// take).
pub(crate) fn taken_by_change(caller: &Caller, mode: u32, gid: u32) -> u32 {
    let taken = taken_by_unprivileged_change(caller, mode, gid);
    if taken == 0 || caller.fsetid() {
        return 0;
    }
    taken
}

/// The bits a chown by `caller` of a file of `mode` and (old) group `gid` takes away, whoever
/// makes it: set-group-ID without group execute stays for a member of the group or a caller
/// with CAP_FSETID.
pub(crate) fn taken_by_chown(caller: &Caller, mode: u32, gid: u32) -> u32 {
    set_ids_taken(mode, || in_group(caller, gid) || caller.fsetid())
}

impl Fs {
    /// Take set-ID bits `taken` away from `e` (the caller holds its op lock, so the mode they
    /// were decided on has not changed, and was admitted for the operation that changes the
    /// file).
    pub(crate) fn take_set_ids_locked(&self, e: &Arc<InodeEntry>, taken: u32) {
        if taken == 0 {
            return;
        }
        debug_assert_eq!(taken & !SET_IDS, 0);
        let _g = self.gate_shared();
        let mut st = e.state.write();
        st.d.mode &= !taken;
        st.d.ctime = to_disk_time(Timespec::now());
        self.mark_dirty(e, &mut st);
    }

    /// A change of the contents of `e` by `caller`: take away the set-ID bits it takes (the
    /// caller holds `e`'s op lock; /proc is read here, before any state lock).
    pub(crate) fn contents_changed_by(&self, caller: &Caller, e: &Arc<InodeEntry>) {
        let (mode, gid) = {
            let st = e.state.read();
            (st.d.mode, st.d.gid)
        };
        self.take_set_ids_locked(e, taken_by_change(caller, mode, gid));
    }
}

impl Caller {
    /// Does the caller hold CAP_FSETID? As the request said, else from /proc.
    pub(crate) fn fsetid(&self) -> bool {
        self.holds_fsetid
            .unwrap_or_else(|| capable(self, CAP_FSETID))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTSIDER: Caller = Caller {
        uid: 1002,
        gid: 1002,
        pid: 0,
        umask: 0,
        holds_fsetid: None,
    };

    #[test]
    fn set_ids_go_as_linux_takes_them() {
        let f = libc::S_IFREG;
        let change = |mode, gid| taken_by_unprivileged_change(&OUTSIDER, mode, gid);
        assert_eq!(change(f | 0o6755, 1001), 0o6000);
        // Set-group-ID without group execute is a locking mark: a member keeps it.
        assert_eq!(change(f | 0o6745, 1002), 0o4000);
        assert_eq!(change(f | 0o6745, 1001), 0o6000, "a non-member does not");
        assert_eq!(change(f | 0o644, 1001), 0);
        assert_eq!(
            change(libc::S_IFIFO | 0o6755, 1001),
            0,
            "only files are written"
        );
        // Root holds CAP_FSETID: a change keeps everything, a chown takes set-user-ID.
        assert_eq!(taken_by_change(&Caller::ROOT, f | 0o6755, 1001), 0);
        for kind in [
            f,
            libc::S_IFIFO,
            libc::S_IFSOCK,
            libc::S_IFCHR,
            libc::S_IFBLK,
        ] {
            assert_eq!(taken_by_chown(&Caller::ROOT, kind | 0o6555, 1001), 0o6000);
            assert_eq!(taken_by_chown(&Caller::ROOT, kind | 0o6545, 1001), 0o4000);
            assert_eq!(taken_by_chown(&OUTSIDER, kind | 0o6545, 1001), 0o6000);
        }
        let d = libc::S_IFDIR;
        assert_eq!(taken_by_chown(&Caller::ROOT, d | 0o2775, 1001), 0);
        assert_eq!(taken_by_chown(&OUTSIDER, d | 0o6775, 1001), 0);
    }
}
