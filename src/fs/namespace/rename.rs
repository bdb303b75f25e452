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
use crate::fs::intent::records::IntentOp;
use crate::fs::types::*;
use crate::fs::{lock_ops, Fs};
use crate::{FsError, Result};

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
        let pe = self.inode(parent)?;
        let npe = self.inode(new_parent)?;
        for d in [&pe, &npe] {
            if d.state.read().d.mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(FsError::Errno(libc::ENOTDIR));
            }
        }
        // Entries can only change under the directories' op locks, which need the inodes
        // first: look up, lock, and look again until they agree.
        let (src, dst, se, de, _ops) = loop {
            let src = self
                .lookup_entry(parent, name)?
                .ok_or(FsError::Errno(libc::ENOENT))?;
            let dst = self.lookup_entry(new_parent, new_name)?;
            let se = self.inode(src.ino)?;
            let de = match dst {
                Some(v) => Some(self.inode(v.ino)?),
                None => None,
            };
            let mut all = vec![&pe, &npe, &se];
            if let Some(d) = &de {
                all.push(d);
            }
            let guards = lock_ops(&all);
            if self.lookup_entry(parent, name)? == Some(src)
                && self.lookup_entry(new_parent, new_name)? == dst
            {
                break (src, dst, se, de, guards);
            }
        };
        if let Some(d) = dst {
            if d.ino == src.ino {
                return Ok(()); // two names of one inode: nothing to do
            }
        }
        if flags.exchange && dst.is_none() {
            return Err(FsError::Errno(libc::ENOENT));
        }
        if flags.noreplace && dst.is_some() {
            return Err(FsError::Errno(libc::EEXIST));
        }
        // The source's name goes; the target's too if there is one (with an exchange, both
        // move), or the new directory gains one.
        self.check_removal(&pe, &se)?;
        match &de {
            Some(d) => self.check_removal(&npe, d)?,
            None => self.check_entry(&npe, crate::fs::attrs::flags::Change::Append)?,
        }
        let src_dir = src.kind == DIR;
        let dst_dir = dst.is_some_and(|d| d.kind == DIR);
        // A directory may not move below itself.
        if src_dir && parent != new_parent && self.is_within(new_parent, src.ino)? {
            return Err(FsError::Errno(libc::EINVAL));
        }
        if flags.exchange
            && dst_dir
            && parent != new_parent
            && self.is_within(parent, dst.unwrap().ino)?
        {
            return Err(FsError::Errno(libc::EINVAL));
        }
        // The attributes of a target freed by the rename go in the same transaction.
        let mut dropped_attrs = None;
        if let (Some(_), false) = (dst, flags.exchange) {
            match (src_dir, dst_dir) {
                (true, false) => return Err(FsError::Errno(libc::ENOTDIR)),
                (false, true) => return Err(FsError::Errno(libc::EISDIR)),
                (true, true) if de.as_ref().unwrap().state.read().d.size > 0 => {
                    return Err(FsError::Errno(libc::ENOTEMPTY))
                }
                _ => {}
            }
            let last = {
                let st = de.as_ref().unwrap().state.read();
                !dst_dir && st.d.nlink <= 1 && st.opens == 0
            };
            if last {
                self.preload_all(de.as_ref().unwrap(), 0)?;
                dropped_attrs = self.attrs_drop_message(de.as_ref().unwrap());
            }
        }
        if src_dir
            && !flags.exchange
            && dst.is_none()
            && parent != new_parent
            && npe.state.read().d.nlink >= 65000
        {
            return Err(FsError::Errno(libc::EMLINK));
        }

        // What the tree changes below will read is loaded before the gate.
        let mut messages = if flags.exchange {
            vec![
                self.ns.tree.insert_message(parent, name, dst.unwrap())?,
                self.ns.tree.insert_message(new_parent, new_name, src)?,
            ]
        } else {
            vec![
                self.ns.tree.remove_message(parent, name)?,
                self.ns.tree.insert_message(new_parent, new_name, src)?,
            ]
        };
        messages.extend(dropped_attrs);
        let _pre = self.ns.tree.preload(&self.nodes(), &messages)?;
        let _g = self.gate_shared();
        let ld = self.nodes();
        let now = to_disk_time(Timespec::now());
        if flags.exchange {
            let d = dst.unwrap();
            self.ns.tree.insert(&ld, parent, name, d)?;
            self.ns.tree.insert(&ld, new_parent, new_name, src)?;
        } else {
            self.ns.tree.remove(&ld, parent, name)?;
            self.ns.tree.insert(
                &ld,
                new_parent,
                new_name,
                DirValue {
                    ino: src.ino,
                    kind: src.kind,
                },
            )?;
        }
        // Directory link counts and '..' follow a directory that changes parents.
        let mut moves: Vec<(&std::sync::Arc<crate::fs::inode::InodeEntry>, u64, u64)> = Vec::new();
        if src_dir && parent != new_parent {
            moves.push((&se, parent, new_parent));
        }
        if flags.exchange && dst_dir && parent != new_parent {
            moves.push((de.as_ref().unwrap(), new_parent, parent));
        }
        for (child, from, to) in moves {
            let mut st = child.state.write();
            st.d.parent = to;
            self.mark_dirty(child, &mut st);
            drop(st);
            for (dir, delta) in [(from, -1i64), (to, 1)] {
                let dentry = if dir == parent { &pe } else { &npe };
                let mut ds = dentry.state.write();
                ds.d.nlink = (ds.d.nlink as i64 + delta) as u32;
                self.mark_dirty(dentry, &mut ds);
            }
        }
        // Entry counts.
        if !flags.exchange && parent != new_parent {
            pe.state.write().d.size -= 1;
            if dst.is_none() {
                npe.state.write().d.size += 1;
            }
        } else if !flags.exchange && dst.is_some() {
            pe.state.write().d.size -= 1;
        }
        for d in [&pe, &npe] {
            let mut st = d.state.write();
            st.d.mtime = now;
            st.d.ctime = now;
            self.mark_dirty(d, &mut st);
        }
        {
            let mut st = se.state.write();
            st.d.ctime = now;
            self.mark_dirty(&se, &mut st);
        }
        if let Some(d) = &de {
            if flags.exchange {
                let mut st = d.state.write();
                st.d.ctime = now;
                self.mark_dirty(d, &mut st);
            } else {
                if dst_dir {
                    // The replaced directory was empty; its '..' link to new_parent goes too.
                    let mut ns = npe.state.write();
                    ns.d.nlink -= 1;
                    self.mark_dirty(&npe, &mut ns);
                }
                return self.drop_link(d, now);
            }
        }
        Ok(())
    }
}
