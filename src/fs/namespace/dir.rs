//! Names: lookup, making and removing nodes, hard links, symlinks, readdir.
//!
//! Every entry lives in the one B-epsilon tree, keyed by (directory, name). A directory's
//! `op` lock serializes changes to its entries; the existence check and the change happen
//! under it, the change itself under the gate so it lands in one transaction.

use super::kernel_refs::Forgot;
use crate::betree::DirValue;
use crate::format::inode::DiskInode;
use crate::format::meta::{decode_symlink_block, symlink_bytes_per_block};
use crate::format::summary::Record;
use crate::format::{INLINE_SYMLINK_MAX, NAME_MAX, SYMLINK_MAX};
use crate::fs::attrs::flags::Change;
use crate::fs::clean::Admit;
use crate::fs::inode::{from_disk_time, to_disk_time, InodeEntry};
use crate::fs::intent::records::IntentOp;
use crate::fs::types::*;
use crate::fs::{lock_ops, Fs};
use crate::{FsError, Result};
use std::sync::Arc;

/// Most links one inode may have.
const LINK_MAX: u32 = 65000;
/// Directory entries fetched from the tree per batch while listing.
const SCAN_BATCH: usize = 256;
/// The cookie after a directory's last entry (ext4's EOF cookie for 64-bit hashes too):
/// above every `3 + hash` (hashes have 62 bits) and a valid `loff_t`.
const READDIR_EOF: u64 = i64::MAX as u64;

pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(FsError::Errno(libc::ENAMETOOLONG));
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::Errno(libc::EINVAL));
    }
    Ok(())
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl Fs {
    pub(crate) fn attr_of(&self, d: &DiskInode) -> Attr {
        let bs = self.sb.block_size;
        let kind = FileKind::from_mode(d.mode).expect("decoded inodes have a known type");
        // Saturating: the fields come from disk and a damaged inode must not overflow here.
        let size = if kind == FileKind::Directory {
            (d.size.saturating_add(2).saturating_mul(32))
                .div_ceil(bs as u64)
                .max(1)
                .saturating_mul(bs as u64)
        } else {
            d.size
        };
        Attr {
            ino: d.ino,
            generation: d.generation,
            kind,
            perm: (d.mode & 0o7777) as u16,
            nlink: d.nlink,
            uid: d.uid,
            gid: d.gid,
            rdev: d.rdev,
            size,
            blocks: d.blocks.saturating_mul(bs as u64 / 512),
            atime: from_disk_time(d.atime),
            mtime: from_disk_time(d.mtime),
            ctime: from_disk_time(d.ctime),
            crtime: from_disk_time(d.crtime),
            blksize: bs,
            flags: d.flags & crate::format::inode::CHATTR_FLAGS,
        }
    }

    /// The directory `ino` (ENOTDIR if it is something else).
    fn dir(&self, ino: u64) -> Result<Arc<InodeEntry>> {
        let e = self.inode(ino)?;
        if e.state.read().d.mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(FsError::Errno(libc::ENOTDIR));
        }
        Ok(e)
    }

    pub(crate) fn lookup_entry(&self, parent: u64, name: &[u8]) -> Result<Option<DirValue>> {
        self.ns.tree.lookup(&self.nodes(), parent, name)
    }

    /// The entry `name` in `parent`, counted as a kernel reference (`forget`). "." is `parent`
    /// itself, of any type: the kernel asks for it to find an inode from a file handle (and
    /// ".." for the parent of a directory found so); ENOENT, which it turns into ESTALE, once
    /// the number is free, and once it has no name: a removed inode still kept (open, or held
    /// by the kernel, "Removed but open" in docs/DESIGN.md) is stale to a file handle too.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        self.alive()?;
        if name.len() > NAME_MAX {
            return Err(FsError::Errno(libc::ENAMETOOLONG));
        }
        let ino = match name {
            b"." => parent,
            b".." => self.dir(parent)?.state.read().d.parent,
            _ => {
                self.dir(parent)?;
                self.lookup_entry(parent, name)?
                    .ok_or(FsError::Errno(libc::ENOENT))?
                    .ino
            }
        };
        let e = self.inode(ino)?;
        if name == b"." && e.state.read().d.nlink == 0 {
            return Err(FsError::Errno(libc::ENOENT));
        }
        self.kernel_entry(&e)
    }

    /// The attributes of `e` handed out as an entry: one kernel reference, taken while `e` is
    /// seen alive (kernel_refs.rs). ENOENT if it was freed meanwhile.
    fn kernel_entry(&self, e: &InodeEntry) -> Result<Attr> {
        let st = e.state.read();
        if st.deleted {
            return Err(FsError::Errno(libc::ENOENT));
        }
        self.ns.kernel_refs.take(e.ino);
        Ok(self.attr_of(&st.d))
    }

    /// The kernel is the caller from now on (a FUSE session): the entries handed out are
    /// references it gives back with `forget`, and numbers it holds are not reused
    /// (kernel_refs.rs). With `writeback_cache` its page cache positions O_APPEND writes (the
    /// core only checks that an append-only file is opened with O_APPEND) and keeps regular
    /// files' mtime and ctime, which it pushes with SETATTR.
    pub fn begin_kernel_session(&self, writeback_cache: bool) {
        self.ns.kernel_refs.enable();
        self.ns.set_writeback_cache(writeback_cache);
    }

    /// The kernel dropped `n` references to `ino` (entries it was handed). A freed inode's
    /// number becomes reusable with the last one.
    pub fn forget(&self, ino: u64, n: u64) {
        match self.ns.kernel_refs.forget(ino, n) {
            Forgot::FreedNumber => self.ns.unpark_ino(ino),
            Forgot::LastReference => {
                // A successor may find an inode removed by its predecessor only on the device.
                let inherited = self.ns.kernel_refs.is_inherited();
                let entry = match self.ns.inodes.get(ino) {
                    Some(e) => Some(e),
                    None if inherited => self.inode(ino).ok(),
                    None => None,
                };
                let Some(entry) = entry else {
                    self.ns.kernel_refs.settle(ino);
                    return;
                };
                if let Err(e) = self.free_if_forgotten(&entry) {
                    log::warn!("cannot free removed inode {ino} at its last FORGET: {e}");
                }
                if entry.state.read().d.nlink > 0 {
                    self.ns.kernel_refs.settle(ino);
                }
            }
            Forgot::StillHeld => {}
        }
    }

    /// From now on the kernel opens regular files (`files`: it was answered ENOSYS to OPEN)
    /// or directories (`dirs`: to OPENDIR) without telling DualFS: its references then keep
    /// removed ones alive, and file operations come with handle `NO_HANDLE`.
    pub fn kernel_opens_unseen(&self, files: bool, dirs: bool) {
        self.ns.kernel_refs.keep_while_held(files, dirs);
    }

    /// The kernel's last reference to `ino` went: free it if it was removed and kept only for
    /// the kernel. A removed inode stays cached until it is freed (`inode::evictable`).
    fn free_if_forgotten(&self, e: &Arc<InodeEntry>) -> Result<()> {
        if !self.removed_and_unused(e.ino, &e.state.read()) {
            return Ok(());
        }
        let _op = e.op.lock_arc();
        self.free_if_unused_locked(e)
    }

    /// (inode numbers the kernel holds, of which freed ones waiting for its FORGET)
    pub fn kernel_references(&self) -> (usize, usize) {
        self.ns.kernel_refs.counts()
    }

    /// Take a free inode number, with the generation it gets next and its home group: a new
    /// directory's is picked near `parent_group` (ext2's spreading), anything else's is its
    /// parent's.
    pub(crate) fn allocate_inode(&self, parent_group: u32, dir: bool) -> Result<(u64, u32, u32)> {
        let forced = crate::fs::intent::take_forced_inode();
        let ino = match forced {
            // A replayed create makes the number the operation made.
            Some((ino, _)) if self.ns.claim_exact_ino(ino) => ino,
            Some((ino, _)) => {
                return Err(FsError::corrupt(
                    "intent log",
                    format!("a replayed create made inode {ino}, which is in use"),
                ))
            }
            None => self.ns.alloc_ino().ok_or(FsError::Errno(libc::ENOSPC))?,
        };
        let generation = self
            .log
            .lock_ifile()
            .imap
            .get(ino as usize)
            .map(|e| e.generation)
            .unwrap_or(0)
            .wrapping_add(1)
            .max(1);
        let generation = forced.map_or(generation, |(_, g)| g);
        let group = if dir {
            self.alloc.pick_dir_group(parent_group as u64) as u32
        } else {
            parent_group
        };
        Ok((ino, generation, group))
    }

    /// Make a new inode named `name` in `parent` (opened once when `open`) and return its
    /// attributes as a kernel entry. Both happen before the parent is unlocked, so nobody can
    /// remove the new name first. Without a name (O_TMPFILE) the inode has no link: an orphan
    /// from birth, made as if in `parent` (its group, its default ACL, its set-group-ID).
    #[allow(clippy::too_many_arguments)]
    fn make_node(
        &self,
        caller: &Caller,
        parent: u64,
        name: Option<&[u8]>,
        mode: u32,
        rdev: u32,
        target: Option<&[u8]>,
        open: bool,
    ) -> Result<(Arc<InodeEntry>, Attr)> {
        let _admitted = self.admit(Admit::Change)?;
        if let Some(name) = name {
            check_name(name)?;
        }
        let kind = FileKind::from_mode(mode).ok_or(FsError::Errno(libc::EINVAL))?;
        let pe = self.dir(parent)?;
        let _op = pe.op.lock_arc();
        let (pgid, pmode, pgroup, pnlink) = {
            let st = pe.state.read();
            if st.deleted || st.d.nlink == 0 {
                return Err(FsError::Errno(libc::ENOENT));
            }
            (st.d.gid, st.d.mode, st.d.group, st.d.nlink)
        };
        if let Some(name) = name {
            if is_dot(name) || self.lookup_entry(parent, name)?.is_some() {
                return Err(FsError::Errno(libc::EEXIST));
            }
        }
        // After EEXIST: create(2) of an existing name in an immutable directory opens it.
        self.check_entry(&pe, Change::Append)?;
        if kind == FileKind::Directory && pnlink >= LINK_MAX {
            return Err(FsError::Errno(libc::EMLINK));
        }
        // The directory's default ACL, or else the caller's umask, limits the mode.
        let (mode, inherited) = self.inherit_acl(caller, &pe, mode)?;
        let (ino, generation, group) = self.allocate_inode(pgroup, kind == FileKind::Directory)?;
        let setgid_dir = pmode & libc::S_ISGID != 0;
        let mut perm = mode & 0o7777;
        if kind == FileKind::Directory && setgid_dir {
            perm |= libc::S_ISGID;
        }
        let now = to_disk_time(Timespec::now());
        let mut d = DiskInode {
            ino,
            generation,
            mode: kind.mode_bits() | perm,
            uid: caller.uid,
            gid: if setgid_dir { pgid } else { caller.gid },
            nlink: match (name, kind) {
                (None, _) => 0,
                (Some(_), FileKind::Directory) => 2,
                (Some(_), _) => 1,
            },
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            parent: if kind == FileKind::Directory {
                parent
            } else {
                0
            },
            rdev,
            group,
            ..Default::default()
        };
        let mut long_target = None;
        if let Some(t) = target {
            d.size = t.len() as u64;
            if t.len() <= INLINE_SYMLINK_MAX {
                d.inline = Some(t.to_vec());
            } else {
                d.meta_blocks = t
                    .len()
                    .div_ceil(symlink_bytes_per_block(self.sb.block_size))
                    as u64;
                long_target = Some(Arc::new(t.to_vec()));
            }
        }
        // What the tree changes under the gate will read is loaded before it.
        let entry = DirValue {
            ino,
            kind: kind.code(),
        };
        let mut messages = Vec::new();
        if let Some(name) = name {
            messages.push(self.ns.tree.insert_message(parent, name, entry)?);
        }
        for (attr, value) in &inherited {
            let key = self.ns.tree.attr_key(ino, generation, attr);
            messages.push(self.ns.tree.attr_set_message(key, value));
        }
        let _pre = match self.ns.tree.preload(&self.nodes(), &messages) {
            Ok(p) => p,
            Err(err) => {
                let _g = self.log.gate.read();
                self.ns.give_back_ino(ino);
                return Err(err);
            }
        };
        let _g = self.gate_shared();
        let e = self.new_inode_entry(d);
        let undo = |err| {
            if let Some(name) = name {
                let _ = self.ns.tree.remove(&self.nodes(), parent, name);
            }
            self.ns.inodes.remove(ino);
            self.ns.give_back_ino(ino);
            Err(err)
        };
        if let Some(name) = name {
            if let Err(err) = self.ns.tree.insert(&self.nodes(), parent, name, entry) {
                return undo(err);
            }
        }
        match self.store_inherited(ino, generation, &inherited) {
            Ok(flags) => e.state.write().d.flags |= flags,
            Err(err) => return undo(err),
        }
        if let Some(t) = &long_target {
            self.charge_log_blocks(
                t.len()
                    .div_ceil(symlink_bytes_per_block(self.sb.block_size)) as u64,
            );
        }
        let attr = {
            let mut st = e.state.write();
            if let Some(t) = long_target {
                st.set_dirty_target(t);
            }
            if open {
                st.opens += 1;
            }
            self.mark_dirty(&e, &mut st);
            self.ns.kernel_refs.take(ino);
            self.attr_of(&st.d)
        };
        if name.is_some() {
            let mut pst = pe.state.write();
            pst.d.size += 1;
            if kind == FileKind::Directory {
                pst.d.nlink += 1;
            }
            pst.d.mtime = now;
            pst.d.ctime = now;
            self.mark_dirty(&pe, &mut pst);
        }
        if kind == FileKind::Directory {
            self.push_record(Record::GroupDirs {
                group: group as u64,
                delta: 1,
            });
        }
        drop(_g);
        let (mode, uid, gid) = {
            let st = e.state.read();
            (st.d.mode, st.d.uid, st.d.gid)
        };
        self.record(match name {
            Some(name) => IntentOp::Make {
                parent,
                name: name.to_vec(),
                ino,
                generation,
                mode,
                uid,
                gid,
                rdev,
                target: target.map(<[u8]>::to_vec),
            },
            None => IntentOp::MakeUnnamed {
                parent,
                ino,
                generation,
                mode,
                uid,
                gid,
            },
        });
        Ok((e, attr))
    }

    /// `mode` includes the file type bits. The caller's umask applies unless the directory
    /// has a default ACL (as for every node made: mkdir, create, symlink take neither).
    pub fn mknod(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
    ) -> Result<Attr> {
        if mode & libc::S_IFMT == libc::S_IFDIR || mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(FsError::Errno(libc::EINVAL));
        }
        let mode = if mode & libc::S_IFMT == 0 {
            mode | libc::S_IFREG
        } else {
            mode
        };
        let (_, attr) = self.make_node(caller, parent, Some(name), mode, rdev, None, false)?;
        self.entry_committed(attr, None)
    }

    pub fn mkdir(&self, caller: &Caller, parent: u64, name: &[u8], mode: u32) -> Result<Attr> {
        let (_, attr) = self.make_node(
            caller,
            parent,
            Some(name),
            libc::S_IFDIR | (mode & 0o7777),
            0,
            None,
            false,
        )?;
        self.entry_committed(attr, None)
    }

    pub fn symlink(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        target: &[u8],
    ) -> Result<Attr> {
        if target.is_empty() {
            return Err(FsError::Errno(libc::ENOENT));
        }
        if target.len() > SYMLINK_MAX {
            return Err(FsError::Errno(libc::ENAMETOOLONG));
        }
        let mode = libc::S_IFLNK | 0o777;
        let (_, attr) = self.make_node(caller, parent, Some(name), mode, 0, Some(target), false)?;
        self.entry_committed(attr, None)
    }

    /// Create and open a regular file (`mode` with the umask applied). With O_EXCL an existing
    /// name is EEXIST; without it an existing file is opened (and truncated with O_TRUNC).
    pub fn create(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> Result<(Attr, u64)> {
        match self.make_node(
            caller,
            parent,
            Some(name),
            libc::S_IFREG | (mode & 0o7777),
            0,
            None,
            true,
        ) {
            Ok((e, attr)) => {
                let fh = self.ns.new_handle(e.ino, flags);
                Ok((self.entry_committed(attr, Some(fh))?, fh))
            }
            Err(FsError::Errno(libc::EEXIST)) if flags & libc::O_EXCL == 0 => {
                let v = self
                    .lookup_entry(parent, name)?
                    .ok_or(FsError::Errno(libc::ENOENT))?;
                let fh = self.open(caller, v.ino, flags)?;
                // Open, it cannot be freed: the entry is always there to hand out.
                match self.inode(v.ino).and_then(|e| self.kernel_entry(&e)) {
                    Ok(attr) => Ok((attr, fh)),
                    Err(e) => {
                        let _ = self.release(v.ino, fh);
                        Err(e)
                    }
                }
            }
            Err(e) => Err(e),
        }
    }

    /// open(2) with O_TMPFILE: a regular file with no name, open (`mode` with the umask
    /// applied), made as if in `parent`. It is an orphan from birth: freed at its last close
    /// and the kernel's last FORGET, or by the next mount after a crash, unless `link` names
    /// it first, which it may once, if `flags` lack O_EXCL.
    pub fn tmpfile(
        &self,
        caller: &Caller,
        parent: u64,
        mode: u32,
        flags: i32,
    ) -> Result<(Attr, u64)> {
        let (e, attr) = self.make_unnamed(caller, parent, mode, true, flags & libc::O_EXCL == 0)?;
        let fh = self.ns.new_handle(e.ino, flags);
        Ok((attr, fh))
    }

    /// The inode of `tmpfile`, opened once when `open`.
    pub(crate) fn make_unnamed(
        &self,
        caller: &Caller,
        parent: u64,
        mode: u32,
        open: bool,
        linkable: bool,
    ) -> Result<(Arc<InodeEntry>, Attr)> {
        let mode = libc::S_IFREG | (mode & 0o7777);
        let (e, attr) = self.make_node(caller, parent, None, mode, 0, None, open)?;
        e.state.write().linkable = linkable;
        Ok((e, attr))
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.alive()?;
        let e = self.inode(ino)?;
        let (size, addrs) = {
            let st = e.state.read();
            if !st.d.is_symlink() {
                return Err(FsError::Errno(libc::EINVAL));
            }
            if let Some(t) = &st.d.inline {
                return Ok(t.clone());
            }
            if let Some(t) = &st.long_target {
                return Ok(t.to_vec());
            }
            (st.d.size as usize, st.d.direct)
        };
        let per = symlink_bytes_per_block(self.sb.block_size);
        let mut out = Vec::with_capacity(size);
        for (k, &a) in addrs.iter().enumerate().take(size.div_ceil(per)) {
            let raw = self.read_log_block(a)?;
            let body = decode_symlink_block(&raw, ino, k as u64)?;
            out.extend_from_slice(&body[..(size - out.len()).min(per)]);
        }
        // Targets never change: keep it for the next readlink.
        let mut st = e.state.write();
        if st.long_target.is_none() {
            st.long_target = Some(Arc::new(out.clone()));
        }
        Ok(out)
    }

    pub fn link(
        &self,
        caller: &Caller,
        ino: u64,
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<Attr> {
        let attr = self.link_in_memory(caller, ino, new_parent, new_name)?;
        self.entry_committed(attr, None)
    }

    fn link_in_memory(
        &self,
        _caller: &Caller,
        ino: u64,
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<Attr> {
        let _admitted = self.admit(Admit::Change)?;
        check_name(new_name)?;
        let ce = self.inode(ino)?;
        if ce.state.read().d.mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(FsError::Errno(libc::EPERM));
        }
        let pe = self.dir(new_parent)?;
        let _ops = lock_ops(&[&pe, &ce]);
        if pe.state.read().d.nlink == 0 {
            return Err(FsError::Errno(libc::ENOENT));
        }
        self.check_entry(&ce, Change::Modify)?;
        self.check_entry(&pe, Change::Append)?;
        if is_dot(new_name) || self.lookup_entry(new_parent, new_name)?.is_some() {
            return Err(FsError::Errno(libc::EEXIST));
        }
        {
            let st = ce.state.read();
            if st.deleted || (st.d.nlink == 0 && !st.linkable) {
                return Err(FsError::Errno(libc::ENOENT));
            }
            if st.d.nlink >= LINK_MAX {
                return Err(FsError::Errno(libc::EMLINK));
            }
        }
        let kind = FileKind::from_mode(ce.state.read().d.mode).unwrap();
        let entry = DirValue {
            ino,
            kind: kind.code(),
        };
        let message = self.ns.tree.insert_message(new_parent, new_name, entry)?;
        let _pre = self.ns.tree.preload(&self.nodes(), &[message])?;
        let _g = self.gate_shared();
        self.ns
            .tree
            .insert(&self.nodes(), new_parent, new_name, entry)?;
        let now = to_disk_time(Timespec::now());
        let attr = {
            let mut st = ce.state.write();
            st.d.nlink += 1;
            st.linkable = false;
            st.d.ctime = now;
            self.mark_dirty(&ce, &mut st);
            self.ns.kernel_refs.take(ino);
            self.attr_of(&st.d)
        };
        let mut pst = pe.state.write();
        pst.d.size += 1;
        pst.d.mtime = now;
        pst.d.ctime = now;
        self.mark_dirty(&pe, &mut pst);
        drop(pst);
        drop(_g);
        self.record(IntentOp::Link {
            ino,
            parent: new_parent,
            name: new_name.to_vec(),
        });
        Ok(attr)
    }

    /// Look `name` up in `parent` and lock both (ascending inode order), re-checking the entry
    /// once locked. Returns the child and the guards.
    fn lock_child(
        &self,
        pe: &Arc<InodeEntry>,
        name: &[u8],
    ) -> Result<(Arc<InodeEntry>, DirValue, Vec<crate::fs::OpGuard>)> {
        loop {
            let v = self
                .lookup_entry(pe.ino, name)?
                .ok_or(FsError::Errno(libc::ENOENT))?;
            let ce = self.inode(v.ino)?;
            let guards = lock_ops(&[pe, &ce]);
            if self.lookup_entry(pe.ino, name)? == Some(v) {
                return Ok((ce, v, guards));
            }
        }
    }

    pub fn unlink(&self, caller: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        self.unlink_in_memory(caller, parent, name)?;
        self.commit_dir_change()
    }

    fn unlink_in_memory(&self, _caller: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        let _admitted = self.admit(Admit::Delete)?;
        check_name(name)?;
        let pe = self.dir(parent)?;
        if is_dot(name) {
            return Err(FsError::Errno(libc::EISDIR));
        }
        let (ce, v, _ops) = self.lock_child(&pe, name)?;
        if v.kind == FileKind::Directory.code() {
            return Err(FsError::Errno(libc::EISDIR));
        }
        self.check_removal(&pe, &ce)?;
        let last = {
            let st = ce.state.read();
            st.d.nlink <= 1 && st.opens == 0
        };
        let mut messages = vec![self.ns.tree.remove_message(parent, name)?];
        if last {
            self.preload_all(&ce, 0)?;
            messages.extend(self.attrs_drop_message(&ce));
        }
        let _pre = self.ns.tree.preload(&self.nodes(), &messages)?;
        let _g = self.gate_shared();
        self.ns.tree.remove(&self.nodes(), parent, name)?;
        let now = to_disk_time(Timespec::now());
        self.entry_removed(&pe, false, now);
        let dropped = self.drop_link(&ce, now);
        drop(_g);
        self.record(IntentOp::Unlink {
            parent,
            name: name.to_vec(),
        });
        dropped
    }

    /// May `ce`'s name in `pe` go (unlink, rmdir, a rename away or over it)? Not if either is
    /// immutable or append-only.
    pub(crate) fn check_removal(&self, pe: &InodeEntry, ce: &InodeEntry) -> Result<()> {
        self.check_entry(pe, Change::Modify)?;
        self.check_entry(ce, Change::Modify)
    }

    /// Directory `pe` lost an entry (a subdirectory's when `subdir`, taking its '..' link).
    fn entry_removed(
        &self,
        pe: &Arc<InodeEntry>,
        subdir: bool,
        now: crate::format::inode::DiskTime,
    ) {
        let mut pst = pe.state.write();
        pst.d.size = pst.d.size.saturating_sub(1);
        if subdir {
            pst.d.nlink = pst.d.nlink.saturating_sub(1);
        }
        pst.d.mtime = now;
        pst.d.ctime = now;
        self.mark_dirty(pe, &mut pst);
    }

    /// One name of `ce` went away: count it, and free the inode when nothing uses it.
    /// (The caller holds `ce`'s op lock and the gate, with indirect blocks preloaded if last.)
    pub(crate) fn drop_link(
        &self,
        ce: &Arc<InodeEntry>,
        now: crate::format::inode::DiskTime,
    ) -> Result<()> {
        let mut st = ce.state.write();
        let is_dir = st.d.mode & libc::S_IFMT == libc::S_IFDIR;
        st.d.nlink = if is_dir {
            0
        } else {
            st.d.nlink.saturating_sub(1)
        };
        st.d.ctime = now;
        if self.removed_and_unused(ce.ino, &st) {
            let dropped = self.destroy(ce, &mut st);
            drop(st);
            return self.drop_attrs(dropped);
        }
        self.mark_dirty(ce, &mut st);
        Ok(())
    }

    pub fn rmdir(&self, caller: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        self.rmdir_in_memory(caller, parent, name)?;
        self.commit_dir_change()
    }

    fn rmdir_in_memory(&self, _caller: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        let _admitted = self.admit(Admit::Delete)?;
        check_name(name)?;
        match name {
            b"." => return Err(FsError::Errno(libc::EINVAL)),
            b".." => return Err(FsError::Errno(libc::ENOTEMPTY)),
            _ => {}
        }
        let pe = self.dir(parent)?;
        let (ce, v, _ops) = self.lock_child(&pe, name)?;
        if v.kind != FileKind::Directory.code() {
            return Err(FsError::Errno(libc::ENOTDIR));
        }
        self.check_removal(&pe, &ce)?;
        if ce.state.read().d.size > 0 {
            return Err(FsError::Errno(libc::ENOTEMPTY));
        }
        let mut messages = vec![self.ns.tree.remove_message(parent, name)?];
        if ce.state.read().opens == 0 {
            messages.extend(self.attrs_drop_message(&ce));
        }
        let _pre = self.ns.tree.preload(&self.nodes(), &messages)?;
        let _g = self.gate_shared();
        self.ns.tree.remove(&self.nodes(), parent, name)?;
        let now = to_disk_time(Timespec::now());
        self.entry_removed(&pe, true, now);
        let dropped = self.drop_link(&ce, now);
        drop(_g);
        self.record(IntentOp::Rmdir {
            parent,
            name: name.to_vec(),
        });
        dropped
    }

    /// Open a directory. Like an open file, an open directory outlives its last name (rmdir,
    /// or a rename over it): fstat still shows it, with no links, until it is closed.
    pub fn opendir(&self, _caller: &Caller, ino: u64) -> Result<u64> {
        self.alive()?;
        let e = self.dir(ino)?;
        self.count_open(&e)?;
        Ok(self.ns.new_handle(ino, 0))
    }

    pub fn releasedir(&self, ino: u64, fh: u64) -> Result<()> {
        let handle = self.ns.remove_handle(fh); // not held through `closed`
        match handle {
            Some(_) => self.closed(ino),
            None => Ok(()),
        }
    }

    /// List entries after `offset` (0 = from the start; else a cookie returned earlier),
    /// "." and ".." included. `add` returns false when the caller's buffer is full; the entry
    /// it refused is returned again by the next call.
    ///
    /// Cookies are positions of the *next* entry, as ext4's are: 1 after ".", 2 after "..",
    /// `3 + h` after an entry when the next one's hash is `h`, and `READDIR_EOF` after the
    /// last; offset `o >= 2` lists the entries with hash >= `o - 3`. So a listing resumes at
    /// the next hash even when entries were added or removed meanwhile, and also from an
    /// offset a little below a cookie: GlusterFS's DHT drops the low bits of large offsets
    /// (it stores its subvolume's index there) and seeks to the rounded-down value, which
    /// must not list the entry before it again (it did, for ever, when the cookie was the
    /// entry's own hash). Entries whose names share a hash all carry the cookie of the
    /// group's start except the last.
    pub fn readdir(
        &self,
        ino: u64,
        offset: u64,
        add: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()> {
        self.alive()?;
        let e = self.dir(ino)?;
        // A listing is one access (Linux counts every getdents call with strictatime).
        if offset == 0 || self.opts.strictatime {
            self.touch_atime(&e);
        }
        let parent = e.state.read().d.parent;
        let mut emit = |ent: DirEntry| add(&ent);
        if offset == 0
            && !emit(DirEntry {
                ino,
                kind: FileKind::Directory,
                name: b".".to_vec(),
                cookie: 1,
            })
        {
            return Ok(());
        }
        if offset <= 1
            && !emit(DirEntry {
                ino: parent,
                kind: FileKind::Directory,
                name: b"..".to_vec(),
                cookie: 2,
            })
        {
            return Ok(());
        }
        if offset >= READDIR_EOF {
            return Ok(());
        }
        // The entry waiting for its cookie: the position of the entry after it.
        let mut pending: Option<crate::betree::ScanItem> = None;
        let mut start = offset.saturating_sub(3);
        loop {
            let items = self.ns.tree.scan(&self.nodes(), ino, start, SCAN_BATCH)?;
            let Some(last) = items.last() else { break };
            start = last.hash + 1;
            for it in items {
                if let Some(p) = pending.take() {
                    // Inside a group of one hash, resume at the group's start (a listing
                    // cannot resume in the middle of a group).
                    let next = if it.hash == p.hash { p.hash } else { it.hash };
                    if !emit(self.entry_of(&p, 3 + next)?) {
                        return Ok(());
                    }
                }
                pending = Some(it);
            }
        }
        if let Some(p) = pending {
            emit(self.entry_of(&p, READDIR_EOF)?);
        }
        Ok(())
    }

    fn entry_of(&self, it: &crate::betree::ScanItem, cookie: u64) -> Result<DirEntry> {
        let kind = FileKind::from_code(it.value.kind).ok_or_else(|| {
            FsError::corrupt("directory entry", format!("type {}", it.value.kind))
        })?;
        Ok(DirEntry {
            ino: it.value.ino,
            kind,
            name: it.name.clone(),
            cookie,
        })
    }

    /// readdir that also returns each entry's attributes. Every entry `add` accepts but "."
    /// and ".." is a kernel reference (`forget`). An entry whose inode went between reading
    /// its name and its inode is left out, as if listed a moment later.
    pub fn readdirplus(
        &self,
        ino: u64,
        offset: u64,
        add: &mut dyn FnMut(&DirEntry, &Attr) -> bool,
    ) -> Result<()> {
        let mut err = None;
        self.readdir(ino, offset, &mut |ent| {
            let e = match self.inode(ent.ino) {
                Ok(e) => e,
                Err(FsError::Errno(libc::ENOENT)) if !is_dot(&ent.name) => return true,
                Err(x) => {
                    err = Some(x);
                    return false;
                }
            };
            let st = e.state.read();
            if st.deleted && !is_dot(&ent.name) {
                return true;
            }
            let accepted = add(ent, &self.attr_of(&st.d));
            if accepted && !is_dot(&ent.name) {
                self.ns.kernel_refs.take(ent.ino);
            }
            accepted
        })?;
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn fsyncdir(&self, ino: u64, _datasync: bool) -> Result<()> {
        self.alive()?;
        self.dir(ino)?;
        self.writeback_all()?;
        self.sync_log()
    }
}
