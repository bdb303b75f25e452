//! An inode's cached indirect blocks, and the count of dirty ones the log writer plans from.

use super::placing::Placing;
use foldhash::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A cached indirect block: its pointers and where it is in the log.
#[derive(Clone, Debug)]
pub struct PtrBlock {
    /// Shared with a log write in progress; changed copy-on-write.
    pub ptrs: Arc<Vec<u64>>,
    /// Log address (0 while never written).
    pub addr: u64,
    /// To be (re)written by the next snapshot; changed only through `PtrMap`, which counts
    /// the dirty blocks (the log writer plans from that count under the gate).
    dirty: bool,
}

impl PtrBlock {
    pub fn dirty(&self) -> bool {
        self.dirty
    }
}

/// An inode's cached indirect blocks, by (level, first file block mapped), with the number
/// of dirty ones kept in step, here and in the file system's total (`Placing`): the log writer
/// plans from the total under the gate, without visiting an inode (docs/DESIGN.md,
/// "Transactions"). Read through `Deref`; changed only through the methods here.
#[derive(Debug)]
pub struct PtrMap {
    map: HashMap<(u8, u64), PtrBlock>,
    ndirty: usize,
    pub(super) placing: Arc<Placing>,
}

impl std::ops::Deref for PtrMap {
    type Target = HashMap<(u8, u64), PtrBlock>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl PtrMap {
    pub(super) fn new(placing: Arc<Placing>) -> PtrMap {
        PtrMap {
            map: HashMap::default(),
            ndirty: 0,
            placing,
        }
    }

    /// Dirty blocks cached.
    pub fn ndirty(&self) -> usize {
        self.ndirty
    }

    /// The file system's shared snapshot state.
    pub fn placing(&self) -> &Arc<Placing> {
        &self.placing
    }

    /// `n` more (or fewer) dirty blocks, here and in the total the next snapshot takes.
    fn count_dirty(&mut self, n: isize) {
        self.ndirty = self
            .ndirty
            .checked_add_signed(n)
            .expect("dirty count below zero");
        self.placing
            .ptr_blocks
            .fetch_add(n as i64, Ordering::AcqRel);
    }

    /// The block, to change its pointers or address (its dirty flag only through the map).
    pub fn get_mut(&mut self, key: &(u8, u64)) -> Option<&mut PtrBlock> {
        self.map.get_mut(key)
    }

    /// Cache a block read from the log (clean), unless one is cached under `key` already.
    pub fn insert_clean(&mut self, key: (u8, u64), ptrs: Vec<u64>, addr: u64) {
        self.map.entry(key).or_insert(PtrBlock {
            ptrs: Arc::new(ptrs),
            addr,
            dirty: false,
        });
    }

    /// A new, empty block never written (dirty once `mark_dirty` says so).
    pub fn insert_new(&mut self, key: (u8, u64), p: u64) {
        let old = self.map.insert(
            key,
            PtrBlock {
                ptrs: Arc::new(vec![0; p as usize]),
                addr: 0,
                dirty: false,
            },
        );
        assert!(old.is_none(), "a new indirect block replaced a cached one");
    }

    /// Mark a cached block dirty (panics if it is not cached).
    pub fn mark_dirty(&mut self, key: (u8, u64)) {
        let b = self
            .map
            .get_mut(&key)
            .expect("a changed indirect block and its parents are cached");
        if !b.dirty {
            b.dirty = true;
            self.count_dirty(1);
        }
    }

    /// The log writer placed dirty block `key` at `addr`: clean from here. Returns its old
    /// address and its pointers. The snapshot took the block from the total already.
    pub fn placed(&mut self, key: (u8, u64), addr: u64) -> (u64, Arc<Vec<u64>>) {
        let b = self.map.get_mut(&key).expect("a placed block is cached");
        assert!(b.dirty, "placing a clean indirect block");
        b.dirty = false;
        self.ndirty -= 1;
        (std::mem::replace(&mut b.addr, addr), b.ptrs.clone())
    }

    pub fn remove(&mut self, key: &(u8, u64)) -> Option<PtrBlock> {
        let b = self.map.remove(key)?;
        if b.dirty {
            self.count_dirty(-1);
        }
        Some(b)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&(u8, u64), &PtrBlock) -> bool) {
        let mut gone = 0;
        self.map.retain(|k, b| {
            let kept = keep(k, b);
            if !kept && b.dirty {
                gone += 1;
            }
            kept
        });
        self.count_dirty(-gone);
    }

    pub fn clear(&mut self) {
        self.map.clear();
        let n = self.ndirty as isize;
        self.count_dirty(-n);
    }
}
