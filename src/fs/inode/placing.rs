//! What the log writer's snapshot shares with the cached inodes: the dirty block counts, the
//! published plan of the snapshot being placed, and each inode's part of it once placed.

use crate::format::inode::DiskInode;
use crate::lockcheck::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Shared by the cached inodes of one file system and its log writer (docs/DESIGN.md,
/// "Transactions"): the dirty blocks all inodes hold, counted where they change, so the
/// writer's exclusive phase plans a transaction without visiting an inode; and the snapshot
/// whose blocks are being placed, which the first hold of each of its inodes' state locks
/// carries out (`StateLock`).
pub struct Placing {
    /// Dirty indirect blocks, and blocks of dirty long symlink targets, of all inodes, not
    /// yet taken by a snapshot. Changed under an inode's state lock by operations that hold
    /// the gate shared, so they are exact while the writer holds it exclusively.
    pub(super) ptr_blocks: AtomicI64,
    pub(super) sym_blocks: AtomicI64,
    /// Symlink target bytes per log block.
    pub(super) sym_bytes: usize,
    /// The snapshot taken and not placed whole yet: its epoch (0: none) and plan.
    pub(super) epoch: AtomicU64,
    pub(super) plan: Mutex<Option<Arc<SnapshotPlan>>>,
}

impl std::fmt::Debug for Placing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placing")
            .field("ptr_blocks", &self.ptr_blocks)
            .field("sym_blocks", &self.sym_blocks)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl Placing {
    pub fn new(sym_bytes: usize) -> Arc<Placing> {
        Arc::new(Placing {
            ptr_blocks: AtomicI64::new(0),
            sym_blocks: AtomicI64::new(0),
            sym_bytes,
            epoch: AtomicU64::new(0),
            plan: Mutex::new("snapshot plan", None),
        })
    }

    /// The writer, under the gate exclusively: take the dirty block counts (indirect,
    /// symlink) for the snapshot.
    pub fn take_counts(&self) -> (usize, usize) {
        let take = |c: &AtomicI64| {
            let n = c.swap(0, Ordering::AcqRel);
            usize::try_from(n).expect("dirty block count below zero")
        };
        (take(&self.ptr_blocks), take(&self.sym_blocks))
    }

    /// The writer gives counts it took back (its snapshot failed before anything changed).
    pub fn give_back_counts(&self, ptr: usize, sym: usize) {
        self.ptr_blocks.fetch_add(ptr as i64, Ordering::AcqRel);
        self.sym_blocks.fetch_add(sym as i64, Ordering::AcqRel);
    }

    /// The writer, under the gate: inodes dirty in `plan.epoch` or before place their blocks
    /// by `plan` at the next hold of their state lock.
    pub fn publish(&self, plan: Arc<SnapshotPlan>) {
        let epoch = plan.epoch;
        assert!(epoch > 0);
        *self.plan.lock() = Some(plan);
        self.epoch.store(epoch, Ordering::Release);
    }

    /// The writer, once it has placed every inode of the snapshot: nothing is pending.
    /// Returns the blocks the plan handed out.
    pub fn finish(&self) -> usize {
        self.epoch.store(0, Ordering::Release);
        let plan = self.plan.lock().take().expect("a published plan");
        plan.cursor.load(Ordering::Acquire)
    }

    pub(super) fn symlink_blocks(&self, target: &[u8]) -> usize {
        target.len().div_ceil(self.sym_bytes)
    }
}

/// The plan of a snapshot, published by the log writer's exclusive phase (`Placing::publish`)
/// for the inodes dirty in its epoch: the first hold of each one's state lock after the gate
/// (by the writer, or by an operation that got there first) takes the next range of the
/// plan's inode-owned blocks and gives its dirty indirect and symlink blocks those addresses
/// (`place_snapshot`, entry.rs), so nobody ever sees an inode's state between the gate and its
/// addresses.
#[derive(Debug)]
pub struct SnapshotPlan {
    /// The dirty epoch the snapshot took (inodes marked dirty in it or before are placed).
    pub epoch: u64,
    /// The transaction's partial segments; the inode-owned blocks are its blocks
    /// `0..blocks` (`log::part_addrs`), handed out in ranges by `cursor`.
    pub parts: Vec<crate::log::PartPlan>,
    pub blocks: usize,
    pub cursor: AtomicUsize,
    /// Pointers per indirect block, symlink target bytes per block.
    pub ppb: u64,
    pub sym_bytes: usize,
}

impl SnapshotPlan {
    /// The next `n` of the plan's inode-owned blocks: the first one's position.
    pub fn take_range(&self, n: usize) -> usize {
        let first = self.cursor.fetch_add(n, Ordering::AcqRel);
        assert!(
            first + n <= self.blocks,
            "inodes hold more dirty blocks than the snapshot counted"
        );
        first
    }
}

/// One block of an inode's part of a snapshot, as placed.
#[derive(Debug)]
pub enum TakenBlock {
    Ptr {
        level: u8,
        index: u64,
        ptrs: Arc<Vec<u64>>,
    },
    Symlink {
        index: u64,
        bytes: Vec<u8>,
    },
}

/// An inode's part of a snapshot once placed: its blocks in address order, the addresses
/// they replace (dead in the same transaction) and the inode as the snapshot took it.
#[derive(Debug)]
pub struct SnapshotPart {
    /// Position of the first block in the transaction.
    pub first: usize,
    pub blocks: Vec<TakenBlock>,
    pub dead: Vec<u64>,
    pub inode: DiskInode,
}
