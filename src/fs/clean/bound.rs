//! Upper bounds of what cleaning writes (the wandering of indirect blocks, summaries, checkpoints).

use super::*;
use crate::format::bmap::{self, Parent};
use crate::format::meta::entries16_per_block;
use crate::format::summary::{DESC_SIZE, RECORD_SIZE, SUMMARY_HEADER};
use crate::format::{BITMAP_ID, IFILE_ID, NODEMAP_ID};
use crate::meta::metafile::MetaFile;
use crate::meta::Tables;
use std::collections::BTreeSet;

impl Geometry {
    /// Blocks a write takes of each clean segment it moves into: a segment loses at most a
    /// superblock copy, one summary block and one block left at its end.
    pub(super) fn seg_eff(&self) -> u64 {
        self.segment_blocks - 3
    }

    /// Summary blocks of a write of `blocks` blocks and `records` records (one partial
    /// segment per segment it spans).
    pub(super) fn summary_blocks(&self, blocks: u64, records: u64) -> u64 {
        let per = self.block_size - SUMMARY_HEADER as u64;
        ((blocks * DESC_SIZE as u64 + records * RECORD_SIZE as u64).div_ceil(per))
            + blocks.div_ceil(self.seg_eff())
            + 1
    }

    pub(super) fn usage_blocks(&self) -> u64 {
        self.segments
            .div_ceil(entries16_per_block(self.block_size as u32) as u64)
    }

    pub(super) fn imap_block(&self, ino: u64) -> u64 {
        1 + self.usage_blocks() + ino / entries16_per_block(self.block_size as u32) as u64
    }

    /// A checkpoint of `blocks` meta blocks, with its summaries.
    pub(super) fn checkpoint_blocks(&self, blocks: u64) -> u64 {
        blocks + self.summary_blocks(blocks, 0)
    }

    /// Worst case, in log blocks, of a pass cleaning `k` segments when the meta files have
    /// `meta_total` blocks (docs/DESIGN.md "Cleaning and the reserve"): every block of every
    /// victim a level-1 indirect block of a different file whose two ancestors lie elsewhere
    /// (itself, two ancestors, an inode), a Dead record for each old copy, summaries, and a
    /// checkpoint rewriting every meta-file block.
    pub(super) fn pass_bound(&self, k: u64, meta_total: u64) -> u64 {
        let moved = k * (self.segment_blocks - 1);
        let txn = 3 * moved + moved.div_ceil(self.ipb) + 1;
        let records = 3 * moved;
        txn + self.summary_blocks(txn, records)
            + self.checkpoint_blocks(meta_total)
            + self.checkpoint_blocks(self.usage_blocks() + 1)
    }
}

pub(super) fn metafile(t: &Tables, id: u64) -> &MetaFile {
    match id {
        IFILE_ID => &t.ifile.file,
        BITMAP_ID => &t.data.file,
        _ => &t.nodes.file,
    }
}

/// Every block and indirect block of the meta files: no checkpoint writes more.
pub(super) fn meta_total_blocks(t: &Tables) -> u64 {
    [IFILE_ID, BITMAP_ID, NODEMAP_ID]
        .iter()
        .map(|&id| {
            let f = metafile(t, id);
            f.len() + f.indirect.len() as u64
        })
        .sum()
}

/// Meta blocks the next checkpoint writes as things are now (dirty ones, and all indirect
/// blocks of a file with any), plus the usage blocks it may add and the IFile header.
pub(super) fn meta_dirty_blocks(t: &Tables, g: &Geometry) -> u64 {
    let mut n = g.usage_blocks() + 1;
    for id in [IFILE_ID, BITMAP_ID, NODEMAP_ID] {
        let f = metafile(t, id);
        if !f.dirty.is_empty() {
            n += f.dirty.len() as u64 + f.indirect.len() as u64;
        }
    }
    n.min(meta_total_blocks(t))
}

impl CostAcc {
    pub(super) fn add(&mut self, scan: &SegmentScan, ppb: u64) {
        for &(_, item) in &scan.items {
            match item {
                Live::Inode { ino, .. } => {
                    self.inos.insert(ino);
                }
                Live::Node { id } => {
                    self.nodes.insert(id);
                }
                Live::Indirect { ino, level, index } => {
                    self.inos.insert(ino);
                    // The block and every indirect block above it up to the inode.
                    let (mut l, mut i) = (level, index);
                    self.ptrs.insert((ino, l, i));
                    while let Parent::Block { level, index, .. } = bmap::parent(l, i, ppb) {
                        self.ptrs.insert((ino, level, index));
                        (l, i) = (level, index);
                    }
                }
                Live::Symlink { ino, blocks, .. } => {
                    self.inos.insert(ino);
                    self.symlinks.insert(ino, blocks);
                }
                Live::Meta { file, index } => {
                    self.meta.insert((file, index));
                }
            }
        }
    }

    /// Upper bound of the log blocks the pass writes: its transaction and its checkpoint,
    /// with `meta_dirty` meta blocks already due and `meta_total` the most a checkpoint writes.
    pub(super) fn bound(&self, g: &Geometry, meta_dirty: u64, meta_total: u64) -> u64 {
        let sym: u64 = self.symlinks.values().sum();
        let blocks = (self.inos.len() as u64).div_ceil(g.ipb)
            + 1
            + self.ptrs.len() as u64
            + sym
            + self.nodes.len() as u64;
        let records = self.ptrs.len() as u64 + sym;
        let imap: BTreeSet<u64> = self.inos.iter().map(|&i| g.imap_block(i)).collect();
        let nodemap: BTreeSet<u64> = self.nodes.iter().map(|&n| n / g.ppb).collect();
        let meta = (meta_dirty + imap.len() as u64 + nodemap.len() as u64 + self.meta.len() as u64)
            .min(meta_total);
        // A second checkpoint frees victims that held meta blocks (the first relocates them):
        // it writes the usage blocks and the IFile header.
        let second = if self.meta.is_empty() {
            0
        } else {
            g.checkpoint_blocks(g.usage_blocks() + 1)
        };
        blocks + g.summary_blocks(blocks, records) + g.checkpoint_blocks(meta) + second
    }
}
