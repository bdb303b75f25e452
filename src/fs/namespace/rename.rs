//! rename(2) and renameat2(2) with RENAME_NOREPLACE and RENAME_EXCHANGE.
//!
//! Renames between two directories are serialized by `rename_lock` (as Linux's
//! s_vfs_rename_mutex, which `lock_rename` takes only when the parents differ): that keeps the
//! "not into its own subtree" walk up the '..' chain stable, since only such renames change a
//! directory's ancestors. A rename within one directory changes no ancestry and needs only the
//! op locks. The directories and the inodes involved are locked in ascending order and every
//! entry re-checked.

use super::dir::check_name;
use crate::betree::DirValue;
use crate::format::ROOT_INO;
use crate::fs::clean::Admit;
use crate::fs::inode::to_disk_time;
use crate::fs::inode::InodeEntry;
use crate::fs::intent::records::IntentOp;
use crate::fs::types::*;
use crate::fs::{lock_ops, Fs, OpGuard};
use crate::{FsError, Result};
use std::sync::Arc;

const DIR: u8 = FileKind::Directory as u8;

impl Fs {
    /// Is `dir` (a directory) `anc` or below it?
    fn is_within(&self, mut dir: u64, anc: u64) -> Result<bool> {
        for _ in 0..100_000 {
            if dir == anc {
                return Ok(true);
            }
            if dir == ROOT_INO {
                return Ok(false);
            }
            dir = self.inode(dir)?.state.read().d.parent;
        }
        Err(FsError::corrupt(
            "directory",
            "'..' chain does not reach the root",
        ))
    }

    pub fn rename(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        self.write_back_replacement(parent, name, new_parent, new_name, flags)?;
        self.rename_in_memory(caller, parent, name, new_parent, new_name, flags)?;
        self.record(IntentOp::Rename {
            parent,
            name: name.to_vec(),
            new_parent,
            new_name: new_name.to_vec(),
            flags,
        });
        self.commit_dir_change()
    }

    /// A file renamed over another is written back first (ext4's `auto_da_alloc` does the
    /// same): the write-a-new-copy-then-rename idiom, used without fsync, must not leave
    /// the name pointing at a file whose data a crash lost while the old file is gone.
    fn write_back_replacement(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if !self.cache.enabled()
            || flags.noreplace
            || check_name(name).is_err()
            || check_name(new_name).is_err()
        {
            return Ok(());
        }
        let (Ok(Some(from)), Ok(Some(_))) = (
            self.lookup_entry(parent, name),
            self.lookup_entry(new_parent, new_name),
        ) else {
            // Errors are the rename's to report.
            return Ok(());
        };
        match self.inode(from.ino) {
            Ok(e) => self.writeback_file(&e),
            Err(_) => Ok(()),
        }
    }

    fn rename_in_memory(
        &self,
        _caller: &Caller,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        let _admitted = self.admit(Admit::Change)?;
        check_name(name)?;
        check_name(new_name)?;
        if flags.noreplace && flags.exchange {
            return Err(FsError::Errno(libc::EINVAL));
        }
        for n in [name, new_name] {
            if n == b"." || n == b".." {
                return Err(FsError::Errno(libc::EBUSY));
            }
        }
        let _serial = (parent != new_parent).then(|| self.ns.lock_renames());
        let r = self.lock_rename(parent, name, new_parent, new_name, flags)?;
        if r.target.as_ref().is_some_and(|t| t.entry.ino == r.src.ino) {
            return Ok(()); // two names of one inode: nothing to do
        }
        let dropped_attrs = self.check_rename(&r)?;
        // What the tree changes below will read is loaded before the gate.
        let mut messages = match &r.target {
            Some(t) if flags.exchange => vec![
                self.ns.tree.insert_message(parent, name, t.entry)?,
                self.ns.tree.insert_message(new_parent, new_name, r.src)?,
            ],
            _ => vec![
                self.ns.tree.remove_message(parent, name)?,
                self.ns.tree.insert_message(new_parent, new_name, r.src)?,
            ],
        };
        messages.extend(dropped_attrs);
        let _pre = self.ns.tree.preload(&self.nodes(), &messages)?;
        let _g = self.gate_shared();
        self.apply_rename(&r)
    }

    /// The rename's directories and inodes, their op locks held: entries can only change
    /// under the directories' op locks, which need the inodes first, so look up, lock, and
    /// look again until they agree.
    fn lock_rename<'a>(
        &self,
        parent: u64,
        name: &'a [u8],
        new_parent: u64,
        new_name: &'a [u8],
        flags: RenameFlags,
    ) -> Result<Rename<'a>> {
        let pe = self.inode(parent)?;
        let npe = self.inode(new_parent)?;
        for d in [&pe, &npe] {
            if d.state.read().d.mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(FsError::Errno(libc::ENOTDIR));
            }
        }
        loop {
            let src = self
                .lookup_entry(parent, name)?
                .ok_or(FsError::Errno(libc::ENOENT))?;
            let dst = self.lookup_entry(new_parent, new_name)?;
            let se = self.inode(src.ino)?;
            let target = match dst {
                Some(entry) => Some(Target {
                    entry,
                    inode: self.inode(entry.ino)?,
                }),
                None => None,
            };
            let mut all = vec![&pe, &npe, &se];
            if let Some(t) = &target {
                all.push(&t.inode);
            }
            let ops = lock_ops(&all);
            if self.lookup_entry(parent, name)? == Some(src)
                && self.lookup_entry(new_parent, new_name)? == dst
            {
                return Ok(Rename {
                    parent,
                    name,
                    new_parent,
                    new_name,
                    flags,
                    pe,
                    npe,
                    src,
                    se,
                    target,
                    _ops: ops,
                });
            }
        }
    }

    /// May `r` be done? Returns the message that drops the attributes of a target the
    /// rename frees (they go in the same transaction).
    fn check_rename(&self, r: &Rename<'_>) -> Result<Option<crate::betree::Message>> {
        let flags = r.flags;
        if flags.exchange && r.target.is_none() {
            return Err(FsError::Errno(libc::ENOENT));
        }
        if flags.noreplace && r.target.is_some() {
            return Err(FsError::Errno(libc::EEXIST));
        }
        // The source's name goes; the target's too if there is one (with an exchange, both
        // move), or the new directory gains one.
        self.check_removal(&r.pe, &r.se)?;
        match &r.target {
            Some(t) => self.check_removal(&r.npe, &t.inode)?,
            None => self.check_entry(&r.npe, crate::fs::attrs::flags::Change::Append)?,
        }
        // A directory may not move below itself.
        if r.src_dir() && r.across() && self.is_within(r.new_parent, r.src.ino)? {
            return Err(FsError::Errno(libc::EINVAL));
        }
        if let Some(t) = &r.target {
            if flags.exchange
                && r.dst_dir()
                && r.across()
                && self.is_within(r.parent, t.entry.ino)?
            {
                return Err(FsError::Errno(libc::EINVAL));
            }
        }
        let mut dropped_attrs = None;
        if let (Some(t), false) = (&r.target, flags.exchange) {
            match (r.src_dir(), r.dst_dir()) {
                (true, false) => return Err(FsError::Errno(libc::ENOTDIR)),
                (false, true) => return Err(FsError::Errno(libc::EISDIR)),
                (true, true) if t.inode.state.read().d.size > 0 => {
                    return Err(FsError::Errno(libc::ENOTEMPTY))
                }
                _ => {}
            }
            let last = {
                let st = t.inode.state.read();
                !r.dst_dir() && st.d.nlink <= 1 && st.opens == 0
            };
            if last {
                self.preload_all(&t.inode, 0)?;
                dropped_attrs = self.attrs_drop_message(&t.inode);
            }
        }
        if r.src_dir()
            && !flags.exchange
            && r.target.is_none()
            && r.across()
            && r.npe.state.read().d.nlink >= 65000
        {
            return Err(FsError::Errno(libc::EMLINK));
        }
        Ok(dropped_attrs)
    }

    /// Carry out `r` in memory, under the gate: the entries, directory link counts and '..'
    /// of a directory that changes parents, entry counts, times; a replaced target loses its
    /// link.
    fn apply_rename(&self, r: &Rename<'_>) -> Result<()> {
        let (parent, new_parent, exchange) = (r.parent, r.new_parent, r.flags.exchange);
        let ld = self.nodes();
        let now = to_disk_time(Timespec::now());
        match &r.target {
            Some(t) if exchange => {
                self.ns.tree.insert(&ld, parent, r.name, t.entry)?;
                self.ns.tree.insert(&ld, new_parent, r.new_name, r.src)?;
            }
            _ => {
                self.ns.tree.remove(&ld, parent, r.name)?;
                self.ns.tree.insert(
                    &ld,
                    new_parent,
                    r.new_name,
                    DirValue {
                        ino: r.src.ino,
                        kind: r.src.kind,
                    },
                )?;
            }
        }
        // Directory link counts and '..' follow a directory that changes parents.
        let mut moves: Vec<(&Arc<InodeEntry>, u64, u64)> = Vec::new();
        if r.src_dir() && r.across() {
            moves.push((&r.se, parent, new_parent));
        }
        if let Some(t) = &r.target {
            if exchange && r.dst_dir() && r.across() {
                moves.push((&t.inode, new_parent, parent));
            }
        }
        for (child, from, to) in moves {
            let mut st = child.state.write();
            st.d.parent = to;
            self.mark_dirty(child, &mut st);
            drop(st);
            for (dir, delta) in [(from, -1i64), (to, 1)] {
                let dentry = if dir == parent { &r.pe } else { &r.npe };
                let mut ds = dentry.state.write();
                ds.d.nlink = (ds.d.nlink as i64 + delta) as u32;
                self.mark_dirty(dentry, &mut ds);
            }
        }
        // Entry counts.
        if !exchange && r.across() {
            r.pe.state.write().d.size -= 1;
            if r.target.is_none() {
                r.npe.state.write().d.size += 1;
            }
        } else if !exchange && r.target.is_some() {
            r.pe.state.write().d.size -= 1;
        }
        for d in [&r.pe, &r.npe] {
            let mut st = d.state.write();
            st.d.mtime = now;
            st.d.ctime = now;
            self.mark_dirty(d, &mut st);
        }
        {
            let mut st = r.se.state.write();
            st.d.ctime = now;
            self.mark_dirty(&r.se, &mut st);
        }
        let Some(t) = &r.target else {
            return Ok(());
        };
        if exchange {
            let mut st = t.inode.state.write();
            st.d.ctime = now;
            self.mark_dirty(&t.inode, &mut st);
            return Ok(());
        }
        if r.dst_dir() {
            // The replaced directory was empty; its '..' link to new_parent goes too.
            let mut ns = r.npe.state.write();
            ns.d.nlink -= 1;
            self.mark_dirty(&r.npe, &mut ns);
        }
        self.drop_link(&t.inode, now)
    }
}

/// The entry a rename replaces (or exchanges with), and its inode.
struct Target {
    entry: DirValue,
    inode: Arc<InodeEntry>,
}

/// One rename with its directories and inodes, their op locks held.
struct Rename<'a> {
    parent: u64,
    name: &'a [u8],
    new_parent: u64,
    new_name: &'a [u8],
    flags: RenameFlags,
    pe: Arc<InodeEntry>,
    npe: Arc<InodeEntry>,
    src: DirValue,
    se: Arc<InodeEntry>,
    target: Option<Target>,
    _ops: Vec<OpGuard>,
}

impl Rename<'_> {
    /// Between two directories.
    fn across(&self) -> bool {
        self.parent != self.new_parent
    }

    fn src_dir(&self) -> bool {
        self.src.kind == DIR
    }

    fn dst_dir(&self) -> bool {
        self.target.as_ref().is_some_and(|t| t.entry.kind == DIR)
    }
}
