//! The records of the next transaction (effects no block shows, in the order they happened),
//! with two counts kept beside them for admission, readable without the lock: how many there
//! are, and how many meta-file blocks applying them can dirty (docs/DESIGN.md, "Admission
//! without locks").

use crate::format::meta::entries32_per_block;
use crate::format::summary::Record;
use crate::lockcheck::{Guard, Mutex};
use parking_lot::MutexGuard;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct RecordLog {
    list: Mutex<Vec<Record>>,
    count: AtomicU64,
    meta_blocks: AtomicU64,
    /// Data blocks the `DFREE` records free.
    data_freed: AtomicU64,
    blocks_per_group: u64,
    /// Group descriptors per bitmap-file block.
    descriptors_per_block: u64,
}

/// The list, locked; records go in through `push`, which keeps the counts.
pub(crate) struct RecordGuard<'a> {
    log: &'a RecordLog,
    list: Guard<MutexGuard<'a, Vec<Record>>>,
}

impl RecordLog {
    pub fn new(blocks_per_group: u32, block_size: u32) -> RecordLog {
        RecordLog {
            list: Mutex::new("records", Vec::new()),
            count: AtomicU64::new(0),
            meta_blocks: AtomicU64::new(0),
            data_freed: AtomicU64::new(0),
            blocks_per_group: blocks_per_group.max(1) as u64,
            descriptors_per_block: entries32_per_block(block_size).max(1) as u64,
        }
    }

    pub fn lock(&self) -> RecordGuard<'_> {
        RecordGuard {
            log: self,
            list: self.list.lock(),
        }
    }

    /// Take every record (the log writer's snapshot).
    pub fn take(&self) -> Vec<Record> {
        let mut list = self.list.lock();
        self.count.store(0, Ordering::Release);
        self.meta_blocks.store(0, Ordering::Release);
        self.data_freed.store(0, Ordering::Release);
        std::mem::take(&mut *list)
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Data blocks the records free (they stay allocated in the committed bitmap until the
    /// transaction is durable).
    pub fn data_freed(&self) -> u64 {
        self.data_freed.load(Ordering::Acquire)
    }

    /// Upper bound of the meta-file blocks applying the records dirties, beyond the IFile's
    /// header and usage blocks (which every transaction may dirty).
    pub fn meta_blocks(&self) -> u64 {
        self.meta_blocks.load(Ordering::Acquire)
    }

    /// Meta-file blocks applying `r` may dirty: the inode-map block of a freed inode and the
    /// one of the free number before it, whose link to the next free number changes; the
    /// bitmap block of every group a run of data blocks touches and the descriptor blocks of
    /// those groups; a group's descriptor block.
    fn meta_blocks_of(&self, r: &Record) -> u64 {
        match *r {
            Record::IFree { .. } => 2,
            Record::NFree { .. } => 1,
            Record::Dead { .. } => 0,
            Record::DAlloc { start, count } | Record::DFree { start, count } => {
                let first = start / self.blocks_per_group;
                let last = start.saturating_add(count.max(1) - 1) / self.blocks_per_group;
                let d = self.descriptors_per_block;
                (last - first + 1) + (last / d - first / d + 1)
            }
            Record::GroupDirs { .. } => 1,
        }
    }
}

impl RecordGuard<'_> {
    pub fn push(&mut self, r: Record) {
        let m = self.log.meta_blocks_of(&r);
        self.list.push(r);
        // Under the list's lock: the counts never run behind what `take` resets.
        self.log.count.fetch_add(1, Ordering::AcqRel);
        self.log.meta_blocks.fetch_add(m, Ordering::AcqRel);
        if let Some(Record::DFree { count, .. }) = self.list.last() {
            self.log.data_freed.fetch_add(*count, Ordering::AcqRel);
        }
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_pushes_and_takes() {
        let log = RecordLog::new(4096, 4096);
        {
            let mut g = log.lock();
            g.push(Record::IFree {
                ino: 5,
                generation: 0,
            });
            g.push(Record::Dead { addr: 9, count: 3 });
            // Crosses from group 0 into group 1: two bitmap blocks, one descriptor block.
            g.push(Record::DAlloc {
                start: 4000,
                count: 200,
            });
            assert_eq!(g.len(), 3);
        }
        assert_eq!((log.count(), log.meta_blocks()), (3, 2 + 3));
        log.lock().push(Record::DFree { start: 7, count: 5 });
        assert_eq!((log.count(), log.data_freed()), (4, 5));
        assert_eq!(log.take().len(), 4);
        assert_eq!(
            (log.count(), log.meta_blocks(), log.data_freed()),
            (0, 0, 0)
        );
    }
}
