//! What fsck repairs through: a file system opened on tables fsck prepared (no orphan freed,
//! no background thread, no admission control), and crate-internal operations that change
//! inodes, block maps and directory entries in memory exactly as ordinary operations do, so
//! the result is written by the ordinary log writer as transactions and a checkpoint.
//!
//! None of these operations frees data blocks or kills log blocks on its own account: a
//! pointer fsck clears named something unusable, and fsck rebuilds the allocation tables
//! (bitmaps, segment usage) from what is reachable afterwards. Only `repair_free_inode` frees
//! through the core (`destroy`), on an inode whose pointers are all valid by then.

use super::inode::bmap::Need;
use super::inode::InodeEntry;
use super::{Fs, MountOptions};
use crate::betree::{BeTree, DirValue};
use crate::device::BlockDevice;
use crate::format::bmap::PtrAt;
use crate::format::bmap::{self, BlockPath};
use crate::format::inode::DiskInode;
use crate::format::node::Key;
use crate::format::summary::Record;
use crate::format::superblock::Superblock;
use crate::fs::types::{FileKind, Timespec};
use crate::log::LogHead;
use crate::meta::Tables;
use crate::{FsError, Result};
use std::sync::Arc;

/// Metadata cache of a repair session.
const REPAIR_CACHE_BYTES: u64 = 128 << 20;

impl Fs {
    /// Open `tables` (as fsck prepared them) with the log continuing at `head` and tree node
    /// ids from `next_node_id` never used. Nothing is written until a call writes; finish with
    /// `unmount` (which writes a clean checkpoint).
    pub(crate) fn open_for_repair(
        sb: Arc<Superblock>,
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        tables: Tables,
        head: LogHead,
        next_node_id: u64,
    ) -> Arc<Fs> {
        let free_nodes = tables.nodes.free_ids(next_node_id);
        let tree = BeTree::open(
            sb.block_size,
            sb.hash_seed,
            REPAIR_CACHE_BYTES / 2,
            next_node_id,
            free_nodes,
        );
        let opts = MountOptions {
            cache_bytes: REPAIR_CACHE_BYTES,
            ..MountOptions::default()
        };
        Arc::new(Fs::assemble(
            sb,
            meta,
            data,
            opts,
            tables,
            tree,
            head,
            super::Recovery::default(),
        ))
    }

    /// Set the directory tree aside for an empty one (fsck rebuilding a damaged tree). The
    /// old tree stays what the last checkpoint holds until the new one is written whole: its
    /// node map entries are cleared here, in memory, and reach the log with the new nodes.
    /// The old nodes' blocks die; the repair's next round makes segment usage exact.
    pub(crate) fn repair_reset_tree(&self) {
        let _fl = self.log.flusher();
        let _g = self.log.gate.write();
        self.ns.tree.reset_empty();
        let mut locked = self.lock_tables();
        let t = locked.tables();
        for id in 0..t.nodes.addrs.len() as u64 {
            if t.nodes.get(id) != 0 {
                t.nodes.set(id, 0);
            }
        }
        self.tables_changed(&t);
    }

    /// Write everything done so far and a checkpoint (not marked clean).
    pub(crate) fn repair_checkpoint(&self) -> Result<()> {
        self.checkpoint(false)
    }

    /// Change inode `ino`'s fields.
    pub(crate) fn repair_inode(&self, ino: u64, f: impl FnOnce(&mut DiskInode)) -> Result<()> {
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        f(&mut st.d);
        st.d.ino = ino;
        self.mark_dirty(&e, &mut st);
        Ok(())
    }

    /// Clear the block pointer of `ino` at `at`, and forget every cached indirect block below
    /// it. Nothing it named is freed.
    pub(crate) fn repair_clear_pointer(&self, ino: u64, at: PtrAt) -> Result<()> {
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        if let PtrAt::Slot { level, index, .. } = at {
            if !self.repair_load_block(&e, level, index)? {
                return Ok(()); // the block is gone already (an ancestor was cleared)
            }
        }
        let p = self.ppb;
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        // The child the pointer named: (level, first file block), for indirect pointers.
        let child = match at {
            PtrAt::Direct(k) => {
                if let Some(slot) = st.d.direct.get_mut(k) {
                    *slot = 0;
                }
                None
            }
            PtrAt::Top(tree) => {
                if tree < 3 {
                    st.d.indirect[tree] = 0;
                    Some((tree as u8 + 1, bmap::tree_start(tree, p)))
                } else {
                    None
                }
            }
            PtrAt::Slot { level, index, slot } => {
                if slot as u64 >= p || level == 0 || level > 3 {
                    return Ok(());
                }
                let Some(b) = st.ptrs.get_mut(&(level, index)) else {
                    return Ok(());
                };
                Arc::make_mut(&mut b.ptrs)[slot] = 0;
                super::inode::bmap::mark_block_dirty(&mut st.ptrs, level, index, p);
                (level > 1).then(|| (level - 1, bmap::child_index(level, index, slot, p)))
            }
        };
        if let Some((level, first)) = child {
            let end = first.saturating_add(bmap::span(level, p));
            st.ptrs
                .retain(|&(l, i), _| !(l <= level && (first..end).contains(&i)));
        }
        if st.d.is_symlink() {
            st.drop_target();
        }
        self.mark_dirty(&e, &mut st);
        Ok(())
    }

    /// Clear every pointer of `ino` (a directory or special file that owns nothing, or a
    /// symlink about to be freed) and its block counts.
    pub(crate) fn repair_clear_all_pointers(&self, ino: u64) -> Result<()> {
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        // Under the gate: dropping dirty blocks changes what the next snapshot counts.
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        if st.d.inline.is_none() {
            st.d.direct = [0; crate::format::inode::NDIRECT];
            st.d.indirect = [0; 3];
        }
        st.d.blocks = 0;
        st.d.meta_blocks = 0;
        st.ptrs.clear();
        st.drop_target();
        self.mark_dirty(&e, &mut st);
        Ok(())
    }

    /// Make `i_blocks` and `i_meta_blocks` count what the block map holds (every pointer must
    /// be valid: clear the others first).
    pub(crate) fn repair_recount(&self, ino: u64) -> Result<()> {
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        let kind = FileKind::from_mode(e.state.read().d.mode);
        if kind == Some(FileKind::Regular) {
            self.preload_all(&e, 0)?;
        }
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        let (blocks, meta_blocks) = match kind {
            Some(FileKind::Regular) => {
                let direct = st.d.direct.iter().filter(|&&a| a != 0).count() as u64;
                let mapped: u64 = st
                    .ptrs
                    .iter()
                    .filter(|((level, _), _)| *level == 1)
                    .map(|(_, b)| b.ptrs.iter().filter(|&&a| a != 0).count() as u64)
                    .sum();
                (direct + mapped, st.ptrs.len() as u64)
            }
            Some(FileKind::Symlink) if st.d.inline.is_none() => {
                (0, st.d.direct.iter().filter(|&&a| a != 0).count() as u64)
            }
            _ => (0, 0),
        };
        if (st.d.blocks, st.d.meta_blocks) != (blocks, meta_blocks) {
            st.d.blocks = blocks;
            st.d.meta_blocks = meta_blocks;
            self.mark_dirty(&e, &mut st);
        }
        Ok(())
    }

    /// Free inode `ino` and everything it owns, as the last unlink does (its pointers must
    /// all be valid). Entries naming it must be gone.
    pub(crate) fn repair_free_inode(&self, ino: u64) -> Result<()> {
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        self.preload_all(&e, 0)?;
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        if !st.deleted {
            let dropped = self.destroy(&e, &mut st);
            drop(st);
            self.drop_attrs(dropped)?;
        }
        Ok(())
    }

    /// Put an attribute record back under its key (a tree rebuild), its value stored anew.
    pub(crate) fn repair_set_attr(
        &self,
        ino: u64,
        hash: u64,
        name: &[u8],
        value: &[u8],
    ) -> Result<()> {
        let _g = self.log.gate.read();
        let key = crate::betree::Key::new(ino, hash, name);
        self.ns.tree.attr_set(&self.nodes(), key, ino, value, &[])
    }

    /// Remove the attribute record under (`ino`, `hash`, `name`), whatever inode it belongs
    /// to, freeing the value blocks `free` (only those: a damaged record may name blocks that
    /// are not its own).
    pub(crate) fn repair_remove_attr(
        &self,
        ino: u64,
        hash: u64,
        name: &[u8],
        free: &[u64],
    ) -> Result<()> {
        let _g = self.log.gate.read();
        let key = crate::betree::Key::new(ino, hash, name);
        self.ns.tree.attr_remove(&self.nodes(), key, free)
    }

    /// Set inode `ino`'s attribute flags from the attributes of its generation.
    pub(crate) fn repair_attr_flags(&self, ino: u64) -> Result<()> {
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        let generation = e.state.read().d.generation;
        let flags = self
            .attr_list(crate::format::inode::IFLAG_XATTRS, ino, generation)?
            .flags();
        let bits = crate::format::inode::IFLAG_XATTRS | crate::format::inode::IFLAG_XATTR_BLOCKS;
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        st.d.flags = (st.d.flags & !bits) | flags;
        self.mark_dirty(&e, &mut st);
        Ok(())
    }

    /// Remove the entry stored under (`dir`, `hash`, `name`), whatever the hash should be.
    pub(crate) fn repair_remove_entry(&self, dir: u64, hash: u64, name: &[u8]) -> Result<()> {
        let _g = self.log.gate.read();
        self.ns
            .tree
            .remove_key(&self.nodes(), Key::new(dir, hash, name))
    }

    /// Add (or replace) the entry `name` in `dir` naming `ino` of type `kind`.
    pub(crate) fn repair_insert_entry(
        &self,
        dir: u64,
        name: &[u8],
        ino: u64,
        kind: FileKind,
    ) -> Result<()> {
        super::namespace::dir::check_name(name)?;
        let _g = self.log.gate.read();
        self.ns.tree.insert(
            &self.nodes(),
            dir,
            name,
            DirValue {
                ino,
                kind: kind.code(),
            },
        )
    }

    /// A new empty directory (mode 0700, owned by root) named `name` in `parent`, with no
    /// admission control; returns its inode number. Link counts of `parent` are left to the
    /// caller (fsck sets every count at the end).
    pub(crate) fn repair_mkdir(&self, parent: u64, name: &[u8]) -> Result<u64> {
        super::namespace::dir::check_name(name)?;
        let parent_group = self.inode(parent)?.state.read().d.group;
        let (ino, generation, group) = self.allocate_inode(parent_group, true)?;
        let now = super::inode::to_disk_time(Timespec::now());
        let d = DiskInode {
            ino,
            generation,
            mode: libc::S_IFDIR | 0o700,
            nlink: 2,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            parent,
            group,
            ..Default::default()
        };
        let _g = self.log.gate.read();
        let e = self.new_inode_entry(d);
        let inserted = self.ns.tree.insert(
            &self.nodes(),
            parent,
            name,
            DirValue {
                ino,
                kind: FileKind::Directory.code(),
            },
        );
        if let Err(err) = inserted {
            self.ns.inodes.remove(ino);
            self.ns.give_back_ino(ino);
            return Err(err);
        }
        {
            let mut st = e.state.write();
            self.mark_dirty(&e, &mut st);
        }
        self.push_record(Record::GroupDirs {
            group: group as u64,
            delta: 1,
        });
        Ok(ino)
    }

    /// Make the root directory (inode 1) again, empty, after fsck freed the lost one. Entries
    /// of directory 1 still in the tree belong to it again.
    pub(crate) fn repair_make_root(&self) -> Result<()> {
        let ino = crate::format::ROOT_INO;
        let generation = {
            let ifile = self.log.lock_ifile();
            if ifile.entry(ino).is_some() {
                return Err(FsError::Errno(libc::EEXIST));
            }
            ifile
                .imap
                .get(ino as usize)
                .map(|e| e.generation)
                .unwrap_or(0)
                .wrapping_add(1)
                .max(1)
        };
        let now = super::inode::to_disk_time(Timespec::now());
        let _g = self.log.gate.read();
        self.ns.claim_ino(ino);
        let e = self.new_inode_entry(DiskInode {
            ino,
            generation,
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            parent: ino,
            ..Default::default()
        });
        let mut st = e.state.write();
        self.mark_dirty(&e, &mut st);
        self.push_record(Record::GroupDirs { group: 0, delta: 1 });
        Ok(())
    }

    /// Cache the indirect blocks of `e` on the path to block (`level`, `index`), that block
    /// included. False when a pointer on the way is 0 (the block is not there).
    fn repair_load_block(&self, e: &Arc<InodeEntry>, level: u8, index: u64) -> Result<bool> {
        let Some(BlockPath::Indirect { tree, steps }) = bmap::path(index, self.ppb) else {
            return Ok(false);
        };
        loop {
            let need = {
                let st = e.state.read();
                let mut addr = st.d.indirect[tree];
                let mut need = None;
                for s in steps.iter().filter(|s| s.level >= level) {
                    match st.ptrs.get(&(s.level, s.index)) {
                        Some(_) if s.level == level => return Ok(true),
                        Some(b) => addr = b.ptrs[s.slot],
                        None if addr == 0 => return Ok(false),
                        None => {
                            need = Some(Need {
                                level: s.level,
                                index: s.index,
                                addr,
                            });
                            break;
                        }
                    }
                }
                match need {
                    Some(n) => n,
                    None => return Ok(false),
                }
            };
            self.load_ptr(e, need)?;
        }
    }
}
