//! Inodes in memory: the cache, their per-inode locks, and inode-number allocation.
//!
//! Each cached inode has two locks. `op` serializes whole mutations of the inode (directory
//! entries, file contents) and may be held across device I/O; `state` guards the fields and
//! is only held for memory work, so getattr, lookups and reads never wait for I/O.

use super::types::Timespec;
use crate::format::inode::{DiskInode, DiskTime};
use crate::lockcheck::Mutex;
use crate::lockcheck::Rank;
use foldhash::HashMap;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
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
    placing: Arc<Placing>,
}

impl std::ops::Deref for PtrMap {
    type Target = HashMap<(u8, u64), PtrBlock>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl PtrMap {
    fn new(placing: Arc<Placing>) -> PtrMap {
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

/// Shared by the cached inodes of one file system and its log writer (docs/DESIGN.md,
/// "Transactions"): the dirty blocks all inodes hold, counted where they change, so the
/// writer's exclusive phase plans a transaction without visiting an inode; and the snapshot
/// whose blocks are being placed, which the first hold of each of its inodes' state locks
/// carries out (`StateLock`).
pub struct Placing {
    /// Dirty indirect blocks, and blocks of dirty long symlink targets, of all inodes, not
    /// yet taken by a snapshot. Changed under an inode's state lock by operations that hold
    /// the gate shared, so they are exact while the writer holds it exclusively.
    ptr_blocks: AtomicI64,
    sym_blocks: AtomicI64,
    /// Symlink target bytes per log block.
    sym_bytes: usize,
    /// The snapshot taken and not placed whole yet: its epoch (0: none) and plan.
    epoch: AtomicU64,
    plan: Mutex<Option<Arc<SnapshotPlan>>>,
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

    fn symlink_blocks(&self, target: &[u8]) -> usize {
        target.len().div_ceil(self.sym_bytes)
    }
}

/// The plan of a snapshot, published by the log writer's exclusive phase (`Placing::publish`)
/// for the inodes dirty in its epoch: the first hold of each one's state lock after the gate
/// (by the writer, or by an operation that got there first) takes the next range of the
/// plan's inode-owned blocks and gives its dirty indirect and symlink blocks those addresses
/// (`transaction::place_snapshot`), so nobody ever sees an inode's state between the gate and its
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
    /// Indirect blocks in memory, by (level, first file block mapped).
    pub ptrs: PtrMap,
    /// A long symlink target held in memory; `target_dirty` when its blocks must be
    /// (re)written (counted in `Placing` with the indirect blocks, so changed only through
    /// the methods below). It keeps serving readlink while its blocks are being written.
    pub long_target: Option<Arc<Vec<u8>>>,
    target_dirty: bool,
    /// Data blocks reserved for this file's next writes: [next, end).
    pub window: Option<(u64, u64)>,
    /// A write took blocks from the window since the last sweep of idle windows (alloc.rs).
    pub window_used: bool,
    /// This inode's part of the snapshot once placed, until the writer takes it.
    pub snapshot_part: Option<SnapshotPart>,
    /// File data written and not yet on the data device (data_cache.rs).
    pub cache: Option<Box<super::data_cache::FileCache>>,
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
            super::transaction::place_snapshot(self, &plan);
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

pub fn to_disk_time(t: Timespec) -> DiskTime {
    DiskTime {
        sec: t.sec,
        nsec: t.nsec,
    }
}

pub fn from_disk_time(t: DiskTime) -> Timespec {
    Timespec {
        sec: t.sec,
        nsec: t.nsec,
    }
}

const SHARDS: usize = 64;

/// A cached inode and when it was last used: the value of its shard's use counter then
/// (higher is more recent; 0 is older than any use).
struct Slot {
    entry: Arc<InodeEntry>,
    used: u64,
}

/// One shard: its entries and a counter of the uses of any of them. A use stamps the entry
/// with the counter, in the hash map's own slot, so the use order costs no list: a lookup
/// touches the slot it reads anyway (a linked LRU list also wrote the entry's neighbours and
/// the list head, each a cache miss for an entry not used lately).
#[derive(Default)]
struct Shard {
    slots: HashMap<u64, Slot>,
    uses: u64,
}

impl Shard {
    /// The entry, now the most recently used.
    fn get(&mut self, ino: u64) -> Option<&Arc<InodeEntry>> {
        let slot = self.slots.get_mut(&ino)?;
        self.uses += 1;
        slot.used = self.uses;
        Some(&slot.entry)
    }

    fn peek(&self, ino: u64) -> Option<&Arc<InodeEntry>> {
        self.slots.get(&ino).map(|slot| &slot.entry)
    }

    /// Add `e`, the most recently used (`use_now`) or the least.
    fn put(&mut self, e: Arc<InodeEntry>, use_now: bool) -> Option<Arc<InodeEntry>> {
        let used = if use_now {
            self.uses += 1;
            self.uses
        } else {
            0
        };
        self.slots
            .insert(e.ino, Slot { entry: e, used })
            .map(|old| old.entry)
    }

    fn pop(&mut self, ino: u64) {
        self.slots.remove(&ino);
    }

    fn entries(&self) -> impl Iterator<Item = &Arc<InodeEntry>> {
        self.slots.values().map(|slot| &slot.entry)
    }

    /// The entries, least recently used first (a trim's order: it sorts a shard's entries,
    /// where a list would have kept them in order at every use).
    fn by_age(&self) -> Vec<(u64, &Arc<InodeEntry>)> {
        let mut all: Vec<(u64, u64, &Arc<InodeEntry>)> = self
            .slots
            .iter()
            .map(|(&ino, slot)| (slot.used, ino, &slot.entry))
            .collect();
        all.sort_unstable_by_key(|&(used, ino, _)| (used, ino));
        all.into_iter().map(|(_, ino, e)| (ino, e)).collect()
    }
}

/// The inode cache: sharded so lookups of different inodes do not contend, and evicting by
/// recency. Each shard keeps the use order of its entries (`Shard`: a use stamps the entry
/// with the shard's use counter): a lookup already takes its shard's lock to find the entry,
/// so recency costs no lock and no shared counter on the lookup and getattr path. Eviction
/// takes from every shard its least recently used clean, unreferenced entries, in proportion
/// to the shard's size (inode numbers spread evenly over shards, so this approximates one
/// global LRU order).
pub struct InodeCache {
    shards: Vec<Mutex<Shard>>,
    /// Bumped by every eviction: a load that raced with one is retried.
    evictions: AtomicU64,
}

impl Default for InodeCache {
    fn default() -> Self {
        InodeCache {
            shards: (0..SHARDS)
                .map(|_| Mutex::new("inode cache shard", Shard::default()))
                .collect(),
            evictions: AtomicU64::new(0),
        }
    }
}

/// Approximate memory an entry holds: the inode plus its cached indirect blocks (a state
/// locked by someone else counts as the inode alone).
fn entry_bytes(e: &InodeEntry, block_size: u32) -> u64 {
    512 + e
        .state
        .try_read()
        .map_or(0, |st| st.ptrs.len() as u64 * block_size as u64)
}

/// Nothing but the cache holds `e`, and it has nothing the log or the allocator still needs.
fn evictable(e: &Arc<InodeEntry>) -> bool {
    Arc::strong_count(e) == 1
        && e.state.try_read().is_some_and(|st| {
            !st.dirty
                && st.opens == 0
                && st.window.is_none()
                && st.ptrs.ndirty() == 0
                && st.cache.is_none()
                // A removed inode kept for the kernel's references is freed from the cache
                // at its last FORGET (`Fs::forget`).
                && (st.d.nlink > 0 || st.deleted)
        })
}

impl InodeCache {
    fn shard(&self, ino: u64) -> &Mutex<Shard> {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// The cached entry, now the most recently used of its shard.
    pub fn get(&self, ino: u64) -> Option<Arc<InodeEntry>> {
        self.shard(ino).lock().get(ino).cloned()
    }

    /// The cached entry, its place in the use order unchanged (the cleaner: a pass walks
    /// many inodes, and must not make them look used).
    pub fn peek(&self, ino: u64) -> Option<Arc<InodeEntry>> {
        self.shard(ino).lock().peek(ino).cloned()
    }

    pub fn eviction_count(&self) -> u64 {
        self.evictions.load(Ordering::Acquire)
    }

    /// Insert a freshly loaded inode unless one is cached already or an eviction happened
    /// since `seen` (the load may be stale); returns the cached entry or None to retry.
    /// `use_now`: the entry becomes the most recently used of its shard; otherwise (the
    /// cleaner's loads) a new entry is the least recently used, the first to go, and one
    /// cached already keeps its place.
    pub fn insert_loaded(
        &self,
        e: Arc<InodeEntry>,
        seen: u64,
        use_now: bool,
    ) -> Option<Arc<InodeEntry>> {
        let mut s = self.shard(e.ino).lock();
        let cached = if use_now { s.get(e.ino) } else { s.peek(e.ino) };
        if let Some(x) = cached {
            return Some(x.clone());
        }
        if self.evictions.load(Ordering::Acquire) != seen {
            return None;
        }
        s.put(e.clone(), use_now);
        Some(e)
    }

    /// Insert a brand-new inode (just allocated: nobody can have it cached).
    pub fn insert_new(&self, e: Arc<InodeEntry>) {
        let old = self.shard(e.ino).lock().put(e, true);
        assert!(old.is_none(), "new inode already cached");
    }

    pub fn remove(&self, ino: u64) {
        self.shard(ino).lock().pop(ino);
        self.evictions.fetch_add(1, Ordering::AcqRel);
    }

    /// Approximate memory held: inodes plus their cached indirect blocks.
    pub fn bytes(&self, block_size: u32) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .entries()
                    .map(|e| entry_bytes(e, block_size))
                    .sum::<u64>()
            })
            .sum()
    }

    /// Number of cached entries.
    pub fn count(&self) -> usize {
        self.shards.iter().map(|s| s.lock().slots.len()).sum()
    }

    /// Drop clean, unused inodes, least recently used first, until about `target` bytes
    /// remain. An entry is unused when only the cache holds it (no operation, dirty list,
    /// window list or log write has a reference). Each shard keeps its share of `target` (in
    /// proportion to its size); a second round spreads what shards full of entries in use
    /// could not give up over the others.
    pub fn evict(&self, target: u64, block_size: u32) {
        for _round in 0..2 {
            let have = self.bytes(block_size);
            if have <= target {
                return;
            }
            for s in &self.shards {
                let mut map = s.lock();
                let mut left: u64 = map.entries().map(|e| entry_bytes(e, block_size)).sum();
                let keep = (left as u128 * target as u128 / have as u128) as u64;
                let mut victims = Vec::new();
                for (ino, e) in map.by_age() {
                    if left <= keep {
                        break;
                    }
                    if evictable(e) {
                        left = left.saturating_sub(entry_bytes(e, block_size));
                        victims.push(ino);
                    }
                }
                if victims.is_empty() {
                    continue;
                }
                for ino in victims {
                    map.pop(ino);
                }
                self.evictions.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// Every cached entry (for unmount-time cleanup).
    pub fn all(&self) -> Vec<Arc<InodeEntry>> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().entries().cloned().collect::<Vec<_>>())
            .collect()
    }
}

/// Hands out inode numbers. Numbers freed by an operation are held back until the log
/// writer has taken the transaction that frees them (a number must not be freed and reused
/// inside one transaction), and numbers the kernel still holds until its FORGET
/// (kernel_refs.rs). Neither kind names a file any more: `in_use` counts them as free, as
/// df must (a deleted file is gone for its user whether or not the kernel has forgotten its
/// node id yet; only the log's room limits how many more can be made).
pub struct InoAllocator {
    free: BTreeSet<u64>,
    next_new: u64,
    /// Freed by operations since the log writer's last snapshot.
    held: Vec<u64>,
    /// Taken by the log writer, whose transaction is not yet durable.
    in_transaction: u64,
    /// Freed and durable, waiting for the kernel's FORGET.
    parked: u64,
}

impl InoAllocator {
    pub fn new(free: impl IntoIterator<Item = u64>, next_new: u64) -> InoAllocator {
        InoAllocator {
            free: free.into_iter().collect(),
            next_new,
            held: Vec::new(),
            in_transaction: 0,
            parked: 0,
        }
    }

    pub fn alloc(&mut self) -> Option<u64> {
        if let Some(&i) = self.free.iter().next() {
            self.free.remove(&i);
            return Some(i);
        }
        if self.next_new >= u32::MAX as u64 {
            return None;
        }
        self.next_new += 1;
        Some(self.next_new - 1)
    }

    /// Take `ino` if it is free (a replayed create makes the number it made): false if it
    /// is in use or not yet reusable.
    pub fn claim_exact(&mut self, ino: u64) -> bool {
        if self.free.remove(&ino) {
            return true;
        }
        if ino >= self.next_new && ino < u32::MAX as u64 {
            self.free.extend(self.next_new..ino);
            self.next_new = ino + 1;
            return true;
        }
        false
    }

    /// Take a specific number (mkfs: the root).
    pub fn claim(&mut self, ino: u64) {
        self.free.remove(&ino);
    }

    /// A number freed by an operation (usable once the log writer `release`s it).
    pub fn hold(&mut self, ino: u64) {
        self.held.push(ino);
    }

    /// A number allocated but given back before anything used it.
    pub fn give_back(&mut self, ino: u64) {
        self.free.insert(ino);
    }

    /// The numbers held now (taken by the log writer's snapshot; they come back through
    /// `release`).
    pub fn take_held(&mut self) -> Vec<u64> {
        let taken = std::mem::take(&mut self.held);
        self.in_transaction += taken.len() as u64;
        taken
    }

    /// The log writer's transaction that freed `n` numbers is durable: they count as parked
    /// until the writer has asked the kernel's references about each (`unpark` returns the
    /// ones it does not hold, FORGET the others), so that a FORGET arriving meanwhile finds
    /// its number counted and every number is counted once all along.
    pub fn transaction_durable(&mut self, n: u64) {
        assert!(
            n <= self.in_transaction,
            "{n} numbers made durable, {} were taken",
            self.in_transaction
        );
        self.in_transaction -= n;
        self.parked += n;
    }

    /// Parked numbers `inos` may be handed out again.
    pub fn unpark(&mut self, inos: impl IntoIterator<Item = u64>) {
        for ino in inos {
            assert!(self.parked > 0, "inode {ino} unparked, none was parked");
            self.parked -= 1;
            self.free.insert(ino);
        }
    }

    /// Numbers that name a file now (below the first never-used one, and neither free nor on
    /// their way to being free; 0 is no number).
    pub fn in_use(&self) -> u64 {
        self.next_new.saturating_sub(1).saturating_sub(
            self.free.len() as u64 + self.held.len() as u64 + self.in_transaction + self.parked,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ino: u64) -> Arc<InodeEntry> {
        InodeEntry::detached(DiskInode {
            ino,
            nlink: 1,
            ..DiskInode::default()
        })
    }

    /// A set of inodes used all the time stays cached through a scan of many more inodes
    /// than the cache holds (each used once, as by `find` or a backup), with the cache
    /// trimmed as the background thread trims it; the scan's inodes are what goes.
    #[test]
    fn a_hot_set_survives_a_scan_larger_than_the_cache() {
        let cache = InodeCache::default();
        let budget = 2000 * 512; // 2,000 inodes
        let hot: Vec<u64> = (1..=300).map(|i| i * 7).collect();
        for &ino in &hot {
            cache.insert_new(entry(ino));
        }
        let mut next = 100_000u64;
        for round in 0..50 {
            // 1,000 new inodes each round: 50,000 in all, 25 times the cache.
            for _ in 0..1000 {
                cache.insert_new(entry(next));
                next += 1;
                if next % 100 == 0 {
                    for &ino in &hot {
                        assert!(
                            cache.get(ino).is_some(),
                            "hot inode {ino} evicted (round {round})"
                        );
                    }
                }
            }
            cache.evict(budget * 3 / 4, 4096);
            assert!(cache.bytes(4096) <= budget * 3 / 4, "round {round}");
        }
        for &ino in &hot {
            assert!(cache.get(ino).is_some(), "hot inode {ino} evicted");
        }
        // What stayed of the scan is its newest part.
        assert!(cache.get(100_000).is_none());
        assert!(cache.get(next - 1).is_some());
    }

    /// Entries in use (held by someone, dirty, open) are never evicted, whatever their age;
    /// the cache then stays over its target rather than drop them.
    #[test]
    fn entries_in_use_are_never_evicted() {
        let cache = InodeCache::default();
        let held: Vec<Arc<InodeEntry>> = (1..=100).map(entry).collect();
        for e in &held {
            cache.insert_new(e.clone());
        }
        let dirty = entry(101);
        dirty.state.write().dirty = true;
        cache.insert_new(dirty);
        let open = entry(102);
        open.state.write().opens = 1;
        cache.insert_new(open);
        // Removed, kept for the kernel's references: freed from the cache at its FORGET.
        let removed = entry(103);
        removed.state.write().d.nlink = 0;
        cache.insert_new(removed);
        for ino in 1000..3000 {
            cache.insert_new(entry(ino));
        }
        cache.evict(0, 4096);
        assert_eq!(cache.count(), 103);
        assert!((1..=103).all(|ino| cache.get(ino).is_some()));
    }
}
