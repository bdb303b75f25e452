//! Attributes: getattr, setattr, access, statfs.

use super::flags::Change;
use crate::format::NAME_MAX;
use crate::fs::clean::Admit;
use crate::fs::inode::to_disk_time;
use crate::fs::intent::records::IntentOp;
use crate::fs::types::*;
use crate::fs::Fs;
use crate::{FsError, Result};

impl Fs {
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        self.alive()?;
        let e = self.inode(ino)?;
        let a = self.attr_of(&e.state.read().d);
        Ok(a)
    }

    pub fn setattr(&self, caller: &Caller, ino: u64, set: &SetAttr) -> Result<Attr> {
        // A size change is a truncate, which frees space: it may use the deletes' reserve.
        let _admitted = self.admit(if set.size.is_some() {
            Admit::Delete
        } else {
            Admit::Change
        })?;
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        self.check_entry(&e, self.setattr_change(&e, set))?;
        if let Some(size) = set.size {
            match e.state.read().d.mode & libc::S_IFMT {
                libc::S_IFREG => {}
                libc::S_IFDIR => return Err(FsError::Errno(libc::EISDIR)),
                _ => return Err(FsError::Errno(libc::EINVAL)),
            }
            self.truncate_locked(&e, size)?;
        }
        // A truncate by a caller without CAP_FSETID takes set-ID bits away, and so does a
        // change of owner or group, whoever makes it (privileges.rs; decided here, under the
        // op lock, so that /proc is not read under the state lock).
        let set_ids_taken = {
            let (mode, gid) = {
                let st = e.state.read();
                (st.d.mode, st.d.gid)
            };
            let mut taken = 0;
            if set.size.is_some() {
                taken |= super::privileges::taken_by_change(caller, mode, gid);
            }
            if set.uid.is_some() || set.gid.is_some() {
                taken |= super::privileges::taken_by_chown(caller, mode, gid);
            }
            taken
        };
        // chmod of a file with an access ACL changes the ACL too (read before the gate).
        let acl = match set.mode {
            Some(m) => self.acl_for_chmod(&e, m)?,
            None => None,
        };
        let _pre = self.preload_chmod_acl(&e, &acl)?;
        let _g = self.gate_shared();
        if let Some(value) = acl {
            self.store_chmod_acl(&e, value)?;
        }
        let mut st = e.state.write();
        let now = Timespec::now();
        if let Some(m) = set.mode {
            st.d.mode = (st.d.mode & libc::S_IFMT) | (m & 0o7777);
        }
        if let Some(u) = set.uid {
            st.d.uid = u;
        }
        if let Some(g) = set.gid {
            st.d.gid = g;
        }
        st.d.mode &= !set_ids_taken;
        match set.atime {
            Some(SetTime::Now) => st.d.atime = to_disk_time(now),
            Some(SetTime::At(t)) => st.d.atime = to_disk_time(t),
            None => {}
        }
        match set.mtime {
            Some(SetTime::Now) => st.d.mtime = to_disk_time(now),
            Some(SetTime::At(t)) => st.d.mtime = to_disk_time(t),
            None => {}
        }
        st.d.ctime = to_disk_time(set.ctime.unwrap_or(now));
        self.mark_dirty(&e, &mut st);
        let attr = self.attr_of(&st.d);
        let (mode, generation) = (st.d.mode, st.d.generation);
        drop(st);
        drop(_g);
        self.record(IntentOp::SetAttr {
            ino,
            generation,
            set: *set,
            mode,
            uid: attr.uid,
            gid: attr.gid,
            mtime: attr.mtime,
            ctime: attr.ctime,
        });
        Ok(attr)
    }

    /// What a setattr does, as the immutable and append-only flags judge it. Setting times to
    /// now is an append (as `touch` of an append-only file is allowed); so is the mtime/ctime
    /// the kernel's write-back cache keeps for a regular file and pushes, which reaches
    /// DualFS as an explicit time.
    fn setattr_change(&self, e: &crate::fs::inode::InodeEntry, set: &SetAttr) -> Change {
        let kernel_times =
            self.ns.writeback_cache() && e.state.read().d.mode & libc::S_IFMT == libc::S_IFREG;
        let explicit = |t: Option<SetTime>| matches!(t, Some(SetTime::At(_)));
        if set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.size.is_some()
            || explicit(set.atime)
            || (explicit(set.mtime) && !kernel_times)
        {
            Change::Modify
        } else {
            Change::Append
        }
    }

    /// What df shows, from both devices (docs/DESIGN.md, "What statfs says"): the data
    /// device's blocks, of which as many are available as are free *and* the log can still
    /// describe; inodes in use now, and as many more as the log can still take.
    pub fn statfs(&self) -> Result<StatFs> {
        self.alive()?;
        let in_use = self.ns.inos_in_use();
        let room = self
            .log_room_bytes(in_use)
            .saturating_sub(self.op_headroom_bytes());
        let bs = self.sb.block_size as u64;
        let ffree = (room / self.file_log_bytes()).min((u32::MAX as u64).saturating_sub(in_use));
        // Blocks freed by transactions still pending are free: a write that needs them
        // writes the log first. So are blocks in files' reservation windows: a write short
        // of blocks takes them back first (data/alloc.rs).
        let free =
            self.alloc.free_blocks() + self.pending_data_frees() + self.alloc.windowed_blocks();
        // A log block of pointers maps ppb data blocks (and its ancestors take 1/ppb more).
        let describable = (room / bs).saturating_mul(self.ppb - 1);
        Ok(StatFs {
            blocks: self.sb.data_blocks,
            bfree: free,
            bavail: free.min(describable),
            files: in_use + ffree,
            ffree,
            bsize: self.sb.block_size,
            namelen: NAME_MAX as u32,
            frsize: self.sb.block_size,
        })
    }
}
