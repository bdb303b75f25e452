//! Where each block of a meta file lives in the log. Meta files (IFile, bitmap file, node map)
//! are held whole in memory; this map says which log block holds each of their blocks and
//! which of their indirect blocks exist, so a checkpoint can rewrite exactly what changed.

use crate::format::bmap::{self, BlockPath, Step};
use crate::format::inode::{DiskInode, NDIRECT};
use crate::format::meta::{decode_pointer_block, pointers_per_block};
use crate::format::{BlockHeader, BlockKind};
use crate::{FsError, Result};
use std::collections::{BTreeMap, BTreeSet};

pub struct MetaFile {
    pub id: u64,
    block_size: u32,
    /// Log address of block i (0 while never written).
    pub blocks: Vec<u64>,
    /// Log address of each meta-indirect block, by (level, first block mapped).
    pub indirect: BTreeMap<(u8, u64), u64>,
    /// Blocks that changed since the last checkpoint.
    pub dirty: BTreeSet<u64>,
}

impl MetaFile {
    pub fn new(id: u64, block_size: u32, nblocks: u64) -> MetaFile {
        MetaFile {
            id,
            block_size,
            blocks: vec![0; nblocks as usize],
            indirect: BTreeMap::new(),
            dirty: (0..nblocks).collect(),
        }
    }

    fn p(&self) -> u64 {
        pointers_per_block(self.block_size) as u64
    }

    /// Rebuild the map from the meta file's inode, reading its indirect blocks.
    /// `limit` bounds the size: no meta file is larger than the log.
    pub fn load(
        id: u64,
        block_size: u32,
        limit: u64,
        inode: &DiskInode,
        read: &mut dyn FnMut(u64) -> Result<Vec<u8>>,
    ) -> Result<MetaFile> {
        let nblocks = inode.size / block_size as u64;
        if nblocks > limit {
            return Err(FsError::corrupt(
                "meta file",
                format!("meta file {id} of {} bytes", inode.size),
            ));
        }
        let mut mf = MetaFile {
            id,
            block_size,
            blocks: vec![0; nblocks as usize],
            indirect: BTreeMap::new(),
            dirty: BTreeSet::new(),
        };
        let p = mf.p();
        if nblocks > bmap::max_blocks(p) || inode.size % block_size as u64 != 0 {
            return Err(FsError::corrupt(
                "meta file",
                format!("meta file {id} of {} bytes", inode.size),
            ));
        }
        for i in 0..nblocks.min(NDIRECT as u64) {
            mf.blocks[i as usize] = inode.direct[i as usize];
        }
        for tree in 0..3 {
            let start = bmap::tree_start(tree, p);
            let top = inode.indirect[tree];
            if top == 0 || start >= nblocks {
                continue;
            }
            mf.load_indirect(tree as u8 + 1, start, top, nblocks, read)?;
        }
        if let Some(i) = mf.blocks.iter().position(|&a| a == 0) {
            return Err(FsError::corrupt(
                "meta file",
                format!("meta file {id} has no block {i}"),
            ));
        }
        Ok(mf)
    }

    fn load_indirect(
        &mut self,
        level: u8,
        index: u64,
        addr: u64,
        nblocks: u64,
        read: &mut dyn FnMut(u64) -> Result<Vec<u8>>,
    ) -> Result<()> {
        let p = self.p();
        let raw = read(addr)?;
        let ptrs = decode_pointer_block(
            &raw,
            BlockHeader::new(BlockKind::MetaIndirect, level, self.id, index),
        )?;
        self.indirect.insert((level, index), addr);
        for (slot, &child) in ptrs.iter().enumerate() {
            let cidx = bmap::child_index(level, index, slot, p);
            if cidx >= nblocks {
                break;
            }
            if level == 1 {
                self.blocks[cidx as usize] = child;
            } else if child != 0 {
                self.load_indirect(level - 1, cidx, child, nblocks, read)?;
            }
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    pub fn len(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Grow to `n` blocks; new blocks are dirty.
    pub fn grow(&mut self, n: u64) {
        let old = self.len();
        if n > old {
            self.blocks.resize(n as usize, 0);
            self.dirty.extend(old..n);
        }
    }

    pub fn mark_dirty(&mut self, block: u64) {
        debug_assert!(block < self.len());
        self.dirty.insert(block);
    }

    /// The indirect blocks on the way to `block`, top first.
    pub fn ancestors(&self, block: u64) -> Vec<Step> {
        match bmap::path(block, self.p()) {
            Some(BlockPath::Indirect { steps, .. }) => steps,
            _ => Vec::new(),
        }
    }

    /// Pointers of indirect block (`level`, `index`) as they are now.
    pub fn pointer_block(&self, level: u8, index: u64) -> Vec<u64> {
        let p = self.p();
        (0..p as usize)
            .map(|slot| {
                let c = bmap::child_index(level, index, slot, p);
                if level == 1 {
                    self.blocks.get(c as usize).copied().unwrap_or(0)
                } else {
                    self.indirect.get(&(level - 1, c)).copied().unwrap_or(0)
                }
            })
            .collect()
    }

    /// The meta file's inode as it is now (pointers from the map).
    pub fn inode(&self, template: &DiskInode) -> DiskInode {
        let p = self.p();
        let mut ino = template.clone();
        ino.ino = self.id;
        ino.size = self.len() * self.block_size as u64;
        ino.direct = [0; NDIRECT];
        for i in 0..(self.len() as usize).min(NDIRECT) {
            ino.direct[i] = self.blocks[i];
        }
        for tree in 0..3 {
            ino.indirect[tree] = self
                .indirect
                .get(&(tree as u8 + 1, bmap::tree_start(tree, p)))
                .copied()
                .unwrap_or(0);
        }
        ino.meta_blocks = self.indirect.len() as u64;
        ino
    }
}
