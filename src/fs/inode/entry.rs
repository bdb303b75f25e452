//! A cached inode: its two locks and the state the `state` lock guards.
//!
//! `op` serializes whole mutations of the inode (directory entries, file contents) and may
//! be held across device I/O; `state` guards the fields and is only held for memory work, so
//! getattr, lookups and reads never wait for I/O.

use super::file_cache::FileCache;
use super::placing::{Placing, SnapshotPart, SnapshotPlan, TakenBlock};
use super::ptr_map::PtrMap;
use crate::format::bmap::{self, Parent};
use crate::format::inode::DiskInode;
use crate::lockcheck::Rank;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type ReadGuard<'a> = crate::lockcheck::Guard<parking_lot::RwLockReadGuard<'a, InodeState>>;
type WriteGuard<'a> = crate::lockcheck::Guard<parking_lot::RwLockWriteGuard<'a, InodeState>>;

/// An inode's `state` lock. Every hold of it sees the state with the last snapshot's
/// addresses placed: a hold that finds the inode in a snapshot whose plan is published and
/// its blocks not placed yet carries its part out first (a reader takes the lock exclusively
/// for that, once).
pub struct StateLock {
    inner: crate::lockcheck::RwLock<InodeState>,
}

impl StateLock {
    #[track_caller]
    pub fn read(&self) -> ReadGuard<'_> {
        loop {
            let g = self.inner.read();
            if !g.placing_pending() {
                return g;
            }
            drop(g);
            drop(self.write());
        }
    }

    #[track_caller]
    pub fn write(&self) -> WriteGuard<'_> {
        let mut g = self.inner.write();
        g.place_pending();
        g
    }

    /// Without waiting; a state whose part is not placed yet is shown as it was at the gate
    /// (the cache's size and eviction checks: such an inode is dirty, never evicted).
    pub fn try_read(&self) -> Option<ReadGuard<'_>> {
        self.inner.try_read()
    }

    pub fn try_write(&self) -> Option<WriteGuard<'_>> {
        let mut g = self.inner.try_write()?;
        g.place_pending();
        Some(g)
    }
}

pub struct InodeState {
    pub d: DiskInode,
    /// Changed since last handed to the log writer: then it is in the dirty set of epoch
    /// `dirty_epoch` (`Fs::mark_dirty`), the current one unless a snapshot took it and its
    /// part is not placed yet (no hold of the lock sees that: `StateLock`).
    pub dirty: bool,
    pub dirty_epoch: u64,
    /// A new inode whose number is not in the inode map yet (until a snapshot places it):
    /// applying it takes the number off the free list (`dirty::ImapFootprint`).
    pub fresh: bool,
    /// Freed: a tombstone kept until the log writer has applied the free.
    pub deleted: bool,
    /// Open file handles.
    pub opens: u32,
    /// Made by O_TMPFILE without O_EXCL and never linked: `link` may give it its first name
    /// although it has no link (Linux's I_LINKABLE).
    pub linkable: bool,
    /// Indirect blocks in memory, by (level, first file block mapped).
    pub ptrs: PtrMap,
    /// A long symlink target held in memory; `target_dirty` when its blocks must be
    /// (re)written (counted in `Placing` with the indirect blocks, so changed only through
    /// the methods below). It keeps serving readlink while its blocks are being written.
    pub long_target: Option<Arc<Vec<u8>>>,
    target_dirty: bool,
    /// Data blocks reserved for this file's next writes: [next, end).
    pub window: Option<(u64, u64)>,
    /// A write took blocks from the window since the last sweep of idle windows (data/alloc.rs).
    pub window_used: bool,
    /// This inode's part of the snapshot once placed, until the writer takes it.
    pub snapshot_part: Option<SnapshotPart>,
    /// File data written and not yet on the data device (data/data_cache.rs).
    pub cache: Option<Box<FileCache>>,
}

impl InodeState {
    /// The snapshot being placed took this inode, and its part is not placed yet.
    fn placing_pending(&self) -> bool {
        let epoch = self.ptrs.placing.epoch.load(Ordering::Acquire);
        epoch != 0 && self.dirty && !self.deleted && self.dirty_epoch <= epoch
    }

    fn place_pending(&mut self) {
        if self.placing_pending() {
            let plan = self.ptrs.placing.plan.lock().clone();
            let plan = plan.expect("a published plan while its epoch is set");
            place_snapshot(self, &plan);
        }
    }

    pub fn target_dirty(&self) -> bool {
        self.target_dirty
    }

    /// A long symlink target whose blocks the next snapshot writes (a new symlink, or one
    /// the cleaner moves).
    pub fn set_dirty_target(&mut self, target: Arc<Vec<u8>>) {
        self.drop_target();
        let n = self.ptrs.placing.symlink_blocks(&target);
        self.ptrs
            .placing
            .sym_blocks
            .fetch_add(n as i64, Ordering::AcqRel);
        self.long_target = Some(target);
        self.target_dirty = true;
    }

    /// Forget the long symlink target (freed, or its pointers cleared by repair).
    pub fn drop_target(&mut self) {
        if let Some(t) = self.long_target.take() {
            if self.target_dirty {
                let n = self.ptrs.placing.symlink_blocks(&t);
                self.ptrs
                    .placing
                    .sym_blocks
                    .fetch_sub(n as i64, Ordering::AcqRel);
            }
        }
        self.target_dirty = false;
    }

    /// The snapshot placed the target's blocks (it took their count at the gate): clean.
    pub fn target_placed(&mut self) {
        self.target_dirty = false;
    }
}

pub struct InodeEntry {
    pub ino: u64,
    pub op: crate::lockcheck::ArcMutex<()>,
    pub state: StateLock,
}

impl InodeEntry {
    /// A cached inode, clean (`Fs::mark_dirty` puts it in the dirty set).
    pub fn new(d: DiskInode, placing: &Arc<Placing>) -> Arc<InodeEntry> {
        // A regular file with no link read from the log is an orphan that some kernel may
        // still hold: a running daemon never evicts one, so only a mount's replay or a
        // successor loads it, and there the kernel alone knows whether it is an O_TMPFILE file
        // it may still name (it sends LINK only then), and a LINK record replayed names one
        // that was. A new inode's maker sets the flag itself (`Fs::make_unnamed`).
        let linkable = d.nlink == 0 && d.mode & libc::S_IFMT == libc::S_IFREG;
        Arc::new(InodeEntry {
            ino: d.ino,
            op: crate::lockcheck::ArcMutex::across_io("inode op", Rank::INODE_OP, d.ino, ()),
            state: StateLock {
                inner: crate::lockcheck::RwLock::ranked(
                    "inode state",
                    Rank::INODE_STATE,
                    InodeState {
                        d,
                        dirty: false,
                        dirty_epoch: 0,
                        fresh: false,
                        deleted: false,
                        opens: 0,
                        ptrs: PtrMap::new(placing.clone()),
                        long_target: None,
                        target_dirty: false,
                        window: None,
                        window_used: false,
                        snapshot_part: None,
                        cache: None,
                        linkable,
                    },
                ),
            },
        })
    }

    /// An inode of no file system (tests of the block map and the cache).
    #[cfg(test)]
    pub fn detached(d: DiskInode) -> Arc<InodeEntry> {
        InodeEntry::new(d, &Placing::new(4000))
    }
}

/// Carry out the snapshot's plan for an inode it took (`StateLock` calls this at the first
/// hold of the lock after the gate, so the state is still exactly as the snapshot took it):
/// take the next range of the plan's inode-owned blocks for its dirty indirect blocks
/// (children before parents) and the blocks of its dirty long symlink target, and give each
/// its address, in the block, its parent's slot (copy-on-write, `Arc::make_mut`, of an array
/// a write in progress still shares) or the inode's pointers; mark them clean, take `Arc`
/// clones of the pointer arrays and a copy of the inode, and clear its dirty flag. The
/// result waits in `snapshot_part` for the writer.
fn place_snapshot(st: &mut InodeState, plan: &SnapshotPlan) {
    assert!(
        st.snapshot_part.is_none(),
        "a snapshot part left from an earlier transaction"
    );
    let p = plan.ppb;
    let n_ptr = st.ptrs.ndirty();
    let target = match (st.target_dirty(), &st.long_target) {
        (true, Some(t)) => Some(t.clone()),
        _ => None,
    };
    let n_sym = target
        .as_ref()
        .map_or(0, |t| t.len().div_ceil(plan.sym_bytes));
    let first = plan.take_range(n_ptr + n_sym);
    let mut addrs = crate::log::part_addrs(&plan.parts, first, n_ptr + n_sym).into_iter();
    let mut keys: Vec<(u8, u64)> = st
        .ptrs
        .iter()
        .filter(|(_, b)| b.dirty())
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(
        keys.len(),
        n_ptr,
        "the dirty count and the dirty flags disagree"
    );
    keys.sort_unstable(); // children (lower levels) before parents
    let mut blocks = Vec::with_capacity(n_ptr + n_sym);
    let mut dead = Vec::new();
    for (level, index) in keys {
        let a = addrs.next().expect("plan covers every block");
        crate::lockcheck::count_placement();
        let (old, ptrs) = st.ptrs.placed((level, index), a);
        if old != 0 {
            dead.push(old);
        }
        blocks.push(TakenBlock::Ptr { level, index, ptrs });
        match bmap::parent(level, index, p) {
            Parent::Inode { tree } => st.d.indirect[tree] = a,
            Parent::Block { level, index, slot } => {
                let pb = st.ptrs.get_mut(&(level, index)).unwrap();
                assert!(pb.dirty(), "parent of a rewritten block not dirty");
                Arc::make_mut(&mut pb.ptrs)[slot] = a;
            }
        }
    }
    if let Some(target) = target {
        st.target_placed();
        for (k, part) in target.chunks(plan.sym_bytes).enumerate() {
            let a = addrs.next().expect("plan covers every block");
            crate::lockcheck::count_placement();
            // A target rewritten by the cleaner leaves its old block behind.
            if st.d.direct[k] != 0 {
                dead.push(st.d.direct[k]);
            }
            st.d.direct[k] = a;
            blocks.push(TakenBlock::Symlink {
                index: k as u64,
                bytes: part.to_vec(),
            });
        }
    }
    assert!(
        addrs.next().is_none(),
        "plan has more blocks than the inode"
    );
    assert_eq!(
        st.ptrs.ndirty(),
        0,
        "the dirty count and the dirty flags disagree"
    );
    // Clean from here: a change after this puts it in the next epoch's dirty set. Its
    // number is in the inode map once this transaction is applied.
    st.dirty = false;
    st.fresh = false;
    // Data still cached has no blocks: the log records the file without it (data/data_cache.rs).
    let mut inode = st.d.clone();
    if let Some(c) = &st.cache {
        (inode.size, inode.blocks) = c.logged(inode.size, inode.blocks);
    }
    st.snapshot_part = Some(SnapshotPart {
        first,
        blocks,
        dead,
        inode,
    });
}
