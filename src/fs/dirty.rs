//! The inodes the next log transaction writes: the dirty set, gathered in epochs. An
//! operation puts an inode in the current epoch's set where it changes it (`Fs::mark_dirty`);
//! the log writer takes the whole set at once under its gate (`DirtySet::take`), however
//! large, and the next epoch begins with an empty one. An inode remembers the epoch it was
//! put in (`InodeState::dirty_epoch`), so the first hold of its state lock after the gate can
//! tell, without a lookup, that the snapshot took it (`inode::StateLock`).

use super::clean::RoomCounts;
use super::inode::InodeEntry;
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
}

/// A dirty set the log writer took.
pub(crate) struct TakenSet {
    pub epoch: u64,
    pub inodes: HashMap<u64, Arc<InodeEntry>>,
    pub tombstones: usize,
}

impl TakenSet {
    /// Inodes the transaction writes.
    pub fn live(&self) -> usize {
        self.inodes.len() - self.tombstones
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
    }
}

impl DirtySet {
    pub fn new() -> DirtySet {
        DirtySet {
            gathering: NoIoMutex::new(
                "dirty",
                Gathering {
                    // Epoch 0 means "none" to the snapshot's placing (`inode::Placing`).
                    epoch: 1,
                    inodes: HashMap::default(),
                    tombstones: 0,
                },
            ),
        }
    }

    /// Put `e` (not in the set: its state says clean) in the current epoch's set, as a
    /// tombstone if it was freed; returns the epoch.
    pub fn insert(&self, e: &Arc<InodeEntry>, deleted: bool, counts: &RoomCounts) -> u64 {
        let mut g = self.gathering.lock();
        let old = g.inodes.insert(e.ino, e.clone());
        assert!(old.is_none(), "inode {} put in the dirty set twice", e.ino);
        if deleted {
            g.tombstones += 1;
        }
        g.publish(counts);
        g.epoch
    }

    /// An inode in the current set was freed: a tombstone from here.
    pub fn now_deleted(&self, counts: &RoomCounts) {
        let mut g = self.gathering.lock();
        g.tombstones += 1;
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
        let taken = TakenSet {
            epoch: g.epoch,
            inodes: std::mem::take(&mut g.inodes),
            tombstones: std::mem::replace(&mut g.tombstones, 0),
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
        g.publish(counts);
    }

    /// Inodes in the current set (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.gathering.lock().inodes.len()
    }
}
