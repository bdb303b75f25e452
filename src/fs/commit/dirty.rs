//! The inodes the next log transaction writes: the dirty set, gathered in epochs. An
//! operation puts an inode in the current epoch's set where it changes it (`Fs::mark_dirty`);
//! the log writer takes the whole set at once under its gate (`DirtySet::take`), however
//! large, and the next epoch begins with an empty one. An inode remembers the epoch it was
//! put in (`InodeState::dirty_epoch`), so the first hold of its state lock after the gate can
//! tell, without a lookup, that the snapshot took it (`inode::StateLock`).

use crate::fs::clean::RoomCounts;
use crate::fs::inode::InodeEntry;
use crate::lockcheck::Mutex as NoIoMutex;
use foldhash::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) struct DirtySet {
    gathering: NoIoMutex<Gathering>,
}

struct Gathering {
    epoch: u64,
    inodes: HashMap<u64, Arc<InodeEntry>>,
    /// Of `inodes`, those freed (tombstones: the transaction writes an IFREE record for each
    /// and no inode); the others are live.
    tombstones: usize,
    footprint: ImapFootprint,
}

/// The inode-map blocks that applying the live inodes of a set dirties, counted as the set
/// changes, for admission (which used to count a whole block per dirty inode: a burst of
/// 2,000 creates looked like 2,000 blocks for the next checkpoint where it dirties about 10).
/// Applying an inode writes its own entry; a new number (`InodeState::fresh`) also leaves the
/// free list, which rewrites the entry of the largest free number below it and the IFile's
/// header. New inodes are applied in ascending number order (a transaction's inode blocks
/// are), so by the time a new number is applied every new number below it is allocated: its
/// free neighbour lies in a block holding new numbers (counted as their own) or in a gap of
/// blocks without any below it, and while no block is skipped the neighbour stays in the same
/// place. So the neighbours add at most one block per run of consecutive blocks holding new
/// numbers.
#[derive(Default)]
struct ImapFootprint {
    per_block: u64,
    /// Live inodes of the set by inode-map block.
    blocks: HashMap<u64, u32>,
    /// New numbers among them by block, and how many runs of consecutive blocks those form.
    fresh: HashMap<u64, u32>,
    runs: usize,
}

impl ImapFootprint {
    fn new(per_block: u64) -> ImapFootprint {
        ImapFootprint {
            per_block,
            ..ImapFootprint::default()
        }
    }

    fn add(&mut self, ino: u64, fresh: bool) {
        let b = ino / self.per_block;
        *self.blocks.entry(b).or_default() += 1;
        if fresh {
            self.add_fresh(b, 1);
        }
    }

    fn add_fresh(&mut self, b: u64, n: u32) {
        let count = self.fresh.entry(b).or_default();
        *count += n;
        if *count == n {
            // A new block: it joins the runs on either side (one, or two into one), or
            // starts one.
            self.runs = self.runs + 1 - self.fresh_around(b);
        }
    }

    fn remove(&mut self, ino: u64, fresh: bool) {
        let b = ino / self.per_block;
        let left = |m: &mut HashMap<u64, u32>| {
            let n = m.get_mut(&b).expect("a live inode's block counted");
            *n -= 1;
            let empty = *n == 0;
            if empty {
                m.remove(&b);
            }
            empty
        };
        left(&mut self.blocks);
        if fresh && left(&mut self.fresh) {
            self.runs = self.runs + self.fresh_around(b) - 1;
        }
    }

    /// Blocks with new numbers right before and after block `b`.
    fn fresh_around(&self, b: u64) -> usize {
        let before = b > 0 && self.fresh.contains_key(&(b - 1));
        let after = self.fresh.contains_key(&(b + 1));
        before as usize + after as usize
    }

    /// Inode-map blocks applying the set dirties at most: the inodes' own, one of free
    /// neighbours per run of blocks with new numbers, and the IFile's header if there are
    /// new numbers.
    fn blocks(&self) -> usize {
        self.blocks.len() + self.runs + usize::from(self.runs > 0)
    }

    fn merge(&mut self, other: ImapFootprint) {
        for (b, n) in other.blocks {
            *self.blocks.entry(b).or_default() += n;
        }
        for (b, n) in other.fresh {
            self.add_fresh(b, n);
        }
    }
}

/// A dirty set the log writer took.
pub(crate) struct TakenSet {
    pub epoch: u64,
    pub inodes: HashMap<u64, Arc<InodeEntry>>,
    pub tombstones: usize,
    footprint: ImapFootprint,
}

impl TakenSet {
    /// Inodes the transaction writes.
    pub fn live(&self) -> usize {
        self.inodes.len() - self.tombstones
    }

    /// Inode-map blocks applying it dirties, at most (`ImapFootprint`).
    pub fn imap_blocks(&self) -> usize {
        self.footprint.blocks()
    }
}

impl Gathering {
    /// Admission reads the set's size and tombstones without the lock: stored under it, so
    /// the figures follow the set's changes in order.
    fn publish(&self, counts: &RoomCounts) {
        counts
            .dirty_inodes
            .store(self.inodes.len() as u64, Ordering::Release);
        counts
            .tombstones
            .store(self.tombstones as u64, Ordering::Release);
        counts
            .dirty_imap_blocks
            .store(self.footprint.blocks() as u64, Ordering::Release);
    }
}

impl DirtySet {
    /// `per_block`: inode-map entries per block.
    pub fn new(per_block: u64) -> DirtySet {
        DirtySet {
            gathering: NoIoMutex::new(
                "dirty",
                Gathering {
                    // Epoch 0 means "none" to the snapshot's placing (`inode::Placing`).
                    epoch: 1,
                    inodes: HashMap::default(),
                    tombstones: 0,
                    footprint: ImapFootprint::new(per_block),
                },
            ),
        }
    }

    /// Put `e` (not in the set: its state says clean) in the current epoch's set, as a
    /// tombstone if it was freed; `fresh` if its number is not in the inode map yet. Returns
    /// the epoch.
    pub fn insert(
        &self,
        e: &Arc<InodeEntry>,
        deleted: bool,
        fresh: bool,
        counts: &RoomCounts,
    ) -> u64 {
        let mut g = self.gathering.lock();
        let old = g.inodes.insert(e.ino, e.clone());
        assert!(old.is_none(), "inode {} put in the dirty set twice", e.ino);
        if deleted {
            g.tombstones += 1;
        } else {
            g.footprint.add(e.ino, fresh);
        }
        g.publish(counts);
        g.epoch
    }

    /// Inode `ino` of the current set (`fresh` as it was put in) was freed: a tombstone from
    /// here.
    pub fn now_deleted(&self, ino: u64, fresh: bool, counts: &RoomCounts) {
        let mut g = self.gathering.lock();
        g.tombstones += 1;
        g.footprint.remove(ino, fresh);
        assert!(
            g.tombstones <= g.inodes.len(),
            "more tombstones than inodes"
        );
        g.publish(counts);
    }

    /// The log writer, under the gate exclusively: the whole set, O(1); the next epoch
    /// starts empty.
    pub fn take(&self, counts: &RoomCounts) -> TakenSet {
        let mut g = self.gathering.lock();
        let per_block = g.footprint.per_block;
        let taken = TakenSet {
            epoch: g.epoch,
            inodes: std::mem::take(&mut g.inodes),
            tombstones: std::mem::replace(&mut g.tombstones, 0),
            footprint: std::mem::replace(&mut g.footprint, ImapFootprint::new(per_block)),
        };
        g.epoch += 1;
        g.publish(counts);
        taken
    }

    /// The writer's snapshot failed before anything changed (ENOSPC planning it): its
    /// inodes belong to the set again. They keep their older epoch, which the next
    /// snapshot's placing takes as its own (`InodeState::placing_pending`: "this epoch or
    /// before").
    pub fn restore(&self, taken: TakenSet, counts: &RoomCounts) {
        let mut g = self.gathering.lock();
        for (ino, e) in taken.inodes {
            let old = g.inodes.insert(ino, e);
            assert!(old.is_none(), "inode {ino} in two dirty sets");
        }
        g.tombstones += taken.tombstones;
        g.footprint.merge(taken.footprint);
        g.publish(counts);
    }

    /// Inodes in the current set (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.gathering.lock().inodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of blocks with new numbers are kept as blocks come and go, in any order.
    #[test]
    fn the_footprint_counts_runs_of_blocks_with_new_numbers() {
        let mut f = ImapFootprint::new(10);
        f.add(5, false); // block 0, not new
        assert_eq!(f.blocks(), 1);
        for ino in [21, 45, 38] {
            f.add(ino, true); // blocks 2, 4, 3: three runs joined into one
        }
        assert_eq!((f.blocks.len(), f.runs), (4, 1));
        assert_eq!(f.blocks(), 4 + 1 + 1);
        f.add(39, true); // block 3 again
        f.remove(38, true);
        assert_eq!(f.runs, 1, "block 3 still holds 39");
        f.remove(39, true); // block 3 empty: 2 and 4 apart
        assert_eq!((f.blocks.len(), f.runs), (3, 2));
        let mut g = ImapFootprint::new(10);
        g.add(33, true);
        f.merge(g); // block 3 back: one run again
        assert_eq!((f.blocks.len(), f.runs), (4, 1));
        for ino in [5, 21, 33, 45] {
            f.remove(ino, ino != 5);
        }
        assert_eq!((f.blocks(), f.runs), (0, 0));
    }
}
