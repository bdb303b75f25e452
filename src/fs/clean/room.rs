//! What admission reads, kept in atomics so that admitting an operation takes no lock
//! (docs/DESIGN.md, "Admission without locks"): the figures of the tables (clean segments,
//! live bytes, meta-file blocks) are stored under the tables' locks by every change that
//! moves them (`Fs::tables_changed`); what is pending is counted where it is kept (the dirty
//! inode map, the records, the tree's state lock, the charges of operations in flight).

use super::*;
use crate::format::meta::entries16_per_block;
use crate::format::{BITMAP_ID, IFILE_ID, NODEMAP_ID};
use crate::meta::TablesMut;

/// The figures admission reads; see the module comment for who keeps each.
#[derive(Default)]
pub(crate) struct RoomCounts {
    pub clean: AtomicU64,
    pub live_bytes: AtomicU64,
    /// Every meta-file block and meta-indirect block: no checkpoint writes more.
    pub meta_total: AtomicU64,
    /// What the next checkpoint writes as things are (`meta_dirty_blocks`).
    pub meta_dirty: AtomicU64,
    /// Meta-file blocks (and meta-indirect blocks) never written: the next checkpoint adds
    /// them to the live bytes (a rewritten one only replaces its old copy).
    pub meta_unwritten: AtomicU64,
    /// Meta-indirect blocks of all three meta files.
    pub meta_indirect: AtomicU64,
    /// Allocated inodes by the tables (the applied transactions).
    pub applied_inodes: AtomicU64,
    /// Entries of the dirty inode map (stored under its lock).
    pub dirty_inodes: AtomicU64,
    /// Of those, inodes freed (tombstones: the transaction writes an IFREE record for each,
    /// no inode); under the gate like the map's snapshot.
    pub tombstones: AtomicU64,
    /// Inode-map blocks applying the dirty set dirties, at most (`dirty::ImapFootprint`).
    pub dirty_imap_blocks: AtomicU64,
    /// Log blocks of the transaction being written: from its snapshot (which empties the
    /// dirty sets) until the tables show it.
    pub writing: AtomicU64,
    /// Meta blocks applying that transaction may dirty (as `pending_meta_blocks` counts).
    pub writing_meta: AtomicU64,
}

impl Fs {
    /// The tables changed: store the figures admission reads (the caller holds their locks,
    /// all three, so stores follow the changes in order; the data allocator's reservations,
    /// made under the data map's lock alone, change none of these figures).
    pub(crate) fn tables_changed(&self, t: &TablesMut) {
        let g = self.geometry();
        let c = &self.cleaner.counts;
        c.clean.store(t.ifile.clean_segments(), Ordering::Release);
        let live: u64 = t.ifile.usage.iter().map(|u| u.live_bytes as u64).sum();
        c.live_bytes.store(live, Ordering::Release);
        c.meta_total.store(meta_total_blocks(t), Ordering::Release);
        c.meta_dirty
            .store(meta_dirty_blocks(t, &g), Ordering::Release);
        let indirect: u64 = [IFILE_ID, BITMAP_ID, NODEMAP_ID]
            .iter()
            .map(|&id| metafile(t, id).indirect.len() as u64)
            .sum();
        c.meta_indirect.store(indirect, Ordering::Release);
        let unwritten: usize = [IFILE_ID, BITMAP_ID, NODEMAP_ID]
            .iter()
            .map(|&id| {
                let f = metafile(t, id);
                f.blocks.iter().filter(|&&a| a == 0).count()
                    + f.indirect.values().filter(|&&a| a == 0).count()
            })
            .sum();
        c.meta_unwritten.store(unwritten as u64, Ordering::Release);
        c.applied_inodes
            .store(t.ifile.live_inodes, Ordering::Release);
    }

    /// Upper bound of the meta-file blocks the checkpoint after everything pending writes:
    /// those dirty now, and what applying the pending transaction dirties — the inode-map
    /// blocks of the dirty inodes (`dirty::ImapFootprint`), the node-map block of each dirty
    /// or freed node, what the
    /// records touch, the indirect blocks above all of them — but never more than every
    /// meta block, with the blocks new inodes and nodes may add to the inode and node maps.
    pub(super) fn pending_meta_blocks(&self, inodes: u64, nodes: u64) -> u64 {
        let c = &self.cleaner.counts;
        let g = self.geometry();
        let growth = c.dirty_imap_blocks.load(Ordering::Acquire)
            + nodes
            + self.log.records.meta_blocks()
            + c.writing_meta.load(Ordering::Acquire);
        let most = c.meta_total.load(Ordering::Acquire)
            + inodes.div_ceil(entries16_per_block(self.sb.block_size) as u64)
            + nodes.div_ceil(g.ppb)
            + 6;
        (c.meta_dirty.load(Ordering::Acquire) + growth + c.meta_indirect.load(Ordering::Acquire))
            .min(most)
    }
}

#[cfg(test)]
impl Fs {
    /// The stored figures against the tables (tests, at moments nothing runs).
    pub(crate) fn assert_room_counts_match_the_tables(&self) {
        // Leaves of the lock order, taken one at a time.
        let dirty = self.log.dirty.len() as u64;
        let records = self.log.records.lock().len() as u64;
        let mut locked = self.lock_tables();
        let t = locked.tables();
        let g = self.geometry();
        let c = &self.cleaner.counts;
        let live: u64 = t.ifile.usage.iter().map(|u| u.live_bytes as u64).sum();
        assert_eq!(c.clean.load(Ordering::Acquire), t.ifile.clean_segments());
        assert_eq!(c.live_bytes.load(Ordering::Acquire), live);
        assert_eq!(c.meta_total.load(Ordering::Acquire), meta_total_blocks(&t));
        assert_eq!(
            c.meta_dirty.load(Ordering::Acquire),
            meta_dirty_blocks(&t, &g)
        );
        assert_eq!(
            c.applied_inodes.load(Ordering::Acquire),
            t.ifile.live_inodes
        );
        assert_eq!(c.dirty_inodes.load(Ordering::Acquire), dirty);
        assert_eq!(self.log.records.count(), records);
    }
}
