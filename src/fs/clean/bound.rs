//! Upper bounds of what cleaning writes (the wandering of indirect blocks, summaries, checkpoints).

use super::*;
use crate::format::bmap::{self, Parent};
use crate::format::meta::entries16_per_block;
use crate::format::summary::{DESC_SIZE, RECORD_SIZE, SUMMARY_HEADER};
use crate::format::{BITMAP_ID, IFILE_ID, NODEMAP_ID};
use crate::log::checkpoint::{add_with_ancestors, Item};
use crate::meta::metafile::MetaFile;
use crate::meta::TablesMut;
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
    /// (itself, two ancestors, an inode), a Dead record for each old copy, summaries, a
    /// checkpoint rewriting every meta-file block, and a second one rewriting the IFile's
    /// header and usage blocks with the indirect blocks above them.
    pub(super) fn pass_bound(&self, k: u64, meta_total: u64) -> u64 {
        let moved = k * (self.segment_blocks - 1);
        let txn = 3 * moved + moved.div_ceil(self.ipb) + 1;
        let records = 3 * moved;
        let second = self.usage_blocks() + 1;
        txn + self.summary_blocks(txn, records)
            + self.checkpoint_blocks(meta_total)
            + self.checkpoint_blocks(second + indirect_blocks_for(second, self.ppb))
    }
}

pub(super) fn metafile<'a>(t: &'a TablesMut, id: u64) -> &'a MetaFile {
    match id {
        IFILE_ID => &t.ifile.file,
        BITMAP_ID => &t.data.file,
        _ => &t.nodes.file,
    }
}

/// Every block and indirect block of the meta files: no checkpoint writes more.
pub(super) fn meta_total_blocks(t: &TablesMut) -> u64 {
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
pub(super) fn meta_dirty_blocks(t: &TablesMut, g: &Geometry) -> u64 {
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
    /// The items of these victims.
    pub(super) fn of(scans: &[SegmentScan], ppb: u64) -> CostAcc {
        let mut acc = CostAcc::default();
        for scan in scans {
            acc.add(scan, ppb);
        }
        acc
    }

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

    /// The pass's own transaction: blocks (inodes packed `ipb` to a block) and records (a
    /// `DEAD` for each old copy of an indirect or symlink block).
    pub(super) fn txn(&self, g: &Geometry) -> (u64, u64) {
        let sym: u64 = self.symlinks.values().sum();
        let blocks = (self.inos.len() as u64).div_ceil(g.ipb)
            + self.ptrs.len() as u64
            + sym
            + self.nodes.len() as u64;
        (blocks, self.ptrs.len() as u64 + sym)
    }

    /// The meta blocks the pass's first checkpoint must write for it, with the indirect
    /// blocks above each: the IFile's header and usage blocks (every segment the pass writes
    /// into or empties), the inode-map blocks of the inodes it moves, the node-map blocks of
    /// the nodes it moves, and the victims' own meta blocks. What writers dirty meanwhile is
    /// theirs: it is in what they have pending.
    pub(super) fn first_checkpoint(&self, t: &TablesMut, g: &Geometry) -> BTreeSet<Item> {
        let mut set = usage_and_header(t, g);
        let imap: BTreeSet<u64> = self.inos.iter().map(|&i| g.imap_block(i)).collect();
        for b in imap {
            add_with_ancestors(&mut set, &t.ifile.file, IFILE_ID, b);
        }
        let nodemap: BTreeSet<u64> = self.nodes.iter().map(|&n| n / g.ppb).collect();
        for b in nodemap {
            add_with_ancestors(&mut set, &t.nodes.file, NODEMAP_ID, b);
        }
        for &(file, index) in &self.meta {
            add_with_ancestors(&mut set, metafile(t, file), file, index);
        }
        set
    }

    /// The second checkpoint, which frees victims that held meta blocks (the first relocates
    /// them): the usage blocks and the IFile header. None when no victim held meta blocks.
    pub(super) fn second_checkpoint(&self, t: &TablesMut, g: &Geometry) -> BTreeSet<Item> {
        if self.meta.is_empty() {
            BTreeSet::new()
        } else {
            usage_and_header(t, g)
        }
    }

    /// Upper bound of the log blocks the pass writes for itself: its transaction (one
    /// inode block more for packing) with summaries, and its checkpoints.
    pub(super) fn bound(&self, t: &TablesMut, g: &Geometry) -> u64 {
        let (blocks, records) = self.txn(g);
        let blocks = blocks + 1;
        blocks
            + g.summary_blocks(blocks, records)
            + checkpoint_share(g, self.first_checkpoint(t, g).len() as u64)
            + checkpoint_share(g, self.second_checkpoint(t, g).len() as u64)
    }

    /// What a pass wrote for itself: the transaction of the items it moved (`self`), and of
    /// each checkpoint it ran, the blocks that are in that checkpoint's claimed set (`claims`,
    /// paired with what the checkpoint wrote). Never more than `bound` of the scan's union:
    /// moved items are a subset of it, and each share a subset of its claim.
    pub(super) fn written(&self, g: &Geometry, ckpts: &[(&BTreeSet<Item>, &[Item])]) -> u64 {
        let (blocks, records) = self.txn(g);
        let txn = if blocks == 0 {
            0
        } else {
            blocks + g.summary_blocks(blocks, records)
        };
        let shares: u64 = ckpts
            .iter()
            .map(|(claim, wrote)| {
                checkpoint_share(g, wrote.iter().filter(|i| claim.contains(i)).count() as u64)
            })
            .sum();
        txn + shares
    }
}

/// A checkpoint's share of `blocks` meta blocks, with their summaries (none for none).
fn checkpoint_share(g: &Geometry, blocks: u64) -> u64 {
    if blocks == 0 {
        0
    } else {
        g.checkpoint_blocks(blocks)
    }
}

/// The IFile's header and usage blocks, with their indirect blocks.
fn usage_and_header(t: &TablesMut, g: &Geometry) -> BTreeSet<Item> {
    let mut set = BTreeSet::new();
    for b in 0..=g.usage_blocks() {
        add_with_ancestors(&mut set, &t.ifile.file, IFILE_ID, b);
    }
    set
}

/// Indirect blocks a file needs to map its first `n` blocks (ext2's scheme, `p` pointers
/// per block).
pub(super) fn indirect_blocks_for(n: u64, p: u64) -> u64 {
    let direct = crate::format::inode::NDIRECT as u64;
    let mut rest = n.saturating_sub(direct);
    let mut total = 0;
    // Single, double, triple: a tree of each height covers p^h blocks.
    let mut span = p;
    for height in 1..=3u32 {
        if rest == 0 {
            break;
        }
        let here = rest.min(span);
        // Indirect blocks at each level of a tree of `height` mapping `here` blocks.
        let mut level_blocks = here;
        for _ in 0..height {
            level_blocks = level_blocks.div_ceil(p);
            total += level_blocks;
        }
        rest -= here;
        span = span.saturating_mul(p);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::inode::inodes_per_block;
    use crate::format::meta::pointers_per_block;
    use crate::fs::clean::{Live, SegmentScan};

    fn geometry(segment_blocks: u64) -> Geometry {
        Geometry {
            block_size: 4096,
            segment_blocks,
            segments: 256,
            ppb: pointers_per_block(4096) as u64,
            ipb: inodes_per_block(4096) as u64,
        }
    }

    #[test]
    fn pass_bound_covers_the_worst_segment() {
        let g = geometry(256);
        let b = g.pass_bound(1, 40);
        // 255 blocks, each with two wandering ancestors, plus inodes, summaries, checkpoint.
        assert!(b >= 3 * 255 + 17 + 40, "{b}");
        assert!(b < 4 * 256, "{b}");
        // k segments cost k times the moves.
        assert!(g.pass_bound(2, 40) > 2 * 3 * 255);
    }

    #[test]
    fn cost_counts_shared_ancestors_once() {
        let g = geometry(64);
        let p = g.ppb;
        let mut scan = SegmentScan::default();
        // Two level-1 blocks of one file under the same double-indirect block, one inode.
        let base = 12 + p;
        scan.items.push((
            100,
            Live::Indirect {
                ino: 7,
                level: 1,
                index: base,
            },
        ));
        scan.items.push((
            101,
            Live::Indirect {
                ino: 7,
                level: 1,
                index: base + p,
            },
        ));
        scan.items.push((102, Live::Inode { ino: 7, slot: 1 }));
        let mut acc = CostAcc::default();
        acc.add(&scan, p);
        assert_eq!(acc.inos.len(), 1);
        assert_eq!(acc.ptrs.len(), 3, "two level-1 blocks and their one parent");
        // 1 inode block and 3 pointer blocks; a DEAD record for each pointer block.
        assert_eq!(acc.txn(&g), (4, 3));
    }

    #[test]
    fn indirect_blocks_of_a_file_prefix() {
        let p = 508;
        assert_eq!(indirect_blocks_for(12, p), 0);
        assert_eq!(indirect_blocks_for(13, p), 1);
        assert_eq!(indirect_blocks_for(12 + p, p), 1);
        // The double-indirect block and one level-1 block under it.
        assert_eq!(indirect_blocks_for(12 + p + 1, p), 3);
        assert_eq!(indirect_blocks_for(12 + p + p * p, p), 2 + p);
        assert_eq!(indirect_blocks_for(12 + p + p * p + 1, p), 2 + p + 3);
    }
}
