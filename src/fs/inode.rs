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
use std::sync::atomic::{AtomicU64, Ordering};
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
/// of dirty ones kept in step: the log writer reads that count under the gate instead of
/// walking the blocks (docs/DESIGN.md, "Transactions"). Read through `Deref`; changed only
/// through the methods here.
#[derive(Default, Debug)]
pub struct PtrMap {
    map: HashMap<(u8, u64), PtrBlock>,
    ndirty: usize,
}

impl std::ops::Deref for PtrMap {
    type Target = HashMap<(u8, u64), PtrBlock>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl PtrMap {
    /// Dirty blocks cached.
    pub fn ndirty(&self) -> usize {
        self.ndirty
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
            self.ndirty += 1;
        }
    }

    /// The log writer placed dirty block `key` at `addr`: clean from here. Returns its old
    /// address and its pointers.
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
            self.ndirty -= 1;
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
        self.ndirty -= gone;
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.ndirty = 0;
    }
}

/// What the log writer's exclusive phase leaves in an inode's state (`StateLock::plan`): the
/// addresses its dirty indirect and symlink blocks get, planned from their counts. The first
/// hold of the state lock after the gate (by the writer, or by an operation that got there
/// first) carries the plan out (`flush::place_snapshot`), so nobody ever sees the state
/// between the gate and its addresses.
#[derive(Debug)]
pub struct SnapshotPlan {
    /// The transaction's partial segments; this inode's blocks are its blocks
    /// `first..first + n_ptr + n_sym` (`log::part_addrs`).
    pub parts: Arc<Vec<crate::log::PartPlan>>,
    pub first: usize,
    pub n_ptr: usize,
    pub n_sym: usize,
    /// Pointers per indirect block, symlink target bytes per block.
    pub ppb: u64,
    pub sym_bytes: usize,
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
    pub blocks: Vec<TakenBlock>,
    pub dead: Vec<u64>,
    pub inode: DiskInode,
}

type ReadGuard<'a> = crate::lockcheck::Guard<parking_lot::RwLockReadGuard<'a, InodeState>>;
type WriteGuard<'a> = crate::lockcheck::Guard<parking_lot::RwLockWriteGuard<'a, InodeState>>;

/// An inode's `state` lock. Every hold of it sees the state with the last snapshot's
/// addresses placed: a hold that finds a `SnapshotPlan` left by the log writer's gate carries
/// it out first (a reader takes the lock exclusively for that, once).
pub struct StateLock {
    inner: crate::lockcheck::RwLock<InodeState>,
}

impl StateLock {
    #[track_caller]
    pub fn read(&self) -> ReadGuard<'_> {
        loop {
            let g = self.inner.read();
            if g.snapshot_plan.is_none() {
                return g;
            }
            drop(g);
            drop(self.write());
        }
    }

    #[track_caller]
    pub fn write(&self) -> WriteGuard<'_> {
        let mut g = self.inner.write();
        if g.snapshot_plan.is_some() {
            super::flush::place_snapshot(&mut g);
        }
        g
    }

    /// Without waiting; a state whose plan is not carried out yet is shown as it was at the
    /// gate (the cache's size and eviction checks: such an inode is dirty, never evicted).
    pub fn try_read(&self) -> Option<ReadGuard<'_>> {
        self.inner.try_read()
    }

    pub fn try_write(&self) -> Option<WriteGuard<'_>> {
        let mut g = self.inner.try_write()?;
        if g.snapshot_plan.is_some() {
            super::flush::place_snapshot(&mut g);
        }
        Some(g)
    }

    /// The log writer, under the gate: leave this inode its plan (O(1): nothing is placed
    /// yet, see `SnapshotPlan`).
    pub fn plan(&self, plan: SnapshotPlan) {
        let mut g = self.inner.write();
        assert!(
            g.snapshot_plan.is_none() && g.snapshot_part.is_none(),
            "a snapshot part left from an earlier transaction"
        );
        g.snapshot_plan = Some(Box::new(plan));
    }
}

pub struct InodeState {
    pub d: DiskInode,
    /// Changed since last handed to the log writer.
    pub dirty: bool,
    /// Freed: a tombstone kept until the log writer has applied the free.
    pub deleted: bool,
    /// Open file handles.
    pub opens: u32,
    /// Indirect blocks in memory, by (level, first file block mapped).
    pub ptrs: PtrMap,
    /// A long symlink target held in memory; `target_dirty` when its blocks must be
    /// (re)written. It keeps serving readlink while its blocks are being written.
    pub long_target: Option<Arc<Vec<u8>>>,
    pub target_dirty: bool,
    /// Data blocks reserved for this file's next writes: [next, end).
    pub window: Option<(u64, u64)>,
    /// A write took blocks from the window since the last sweep of idle windows (alloc.rs).
    pub window_used: bool,
    /// Left by the log writer's gate until carried out (`StateLock`).
    pub snapshot_plan: Option<Box<SnapshotPlan>>,
    /// This inode's part of the snapshot once placed, until the writer takes it.
    pub snapshot_part: Option<SnapshotPart>,
}

pub struct InodeEntry {
    pub ino: u64,
    pub op: crate::lockcheck::ArcMutex<()>,
    pub state: StateLock,
}

impl InodeEntry {
    pub fn new(d: DiskInode, dirty: bool) -> Arc<InodeEntry> {
        Arc::new(InodeEntry {
            ino: d.ino,
            op: crate::lockcheck::ArcMutex::across_io("inode op", Rank::INODE_OP, d.ino, ()),
            state: StateLock {
                inner: crate::lockcheck::RwLock::ranked(
                    "inode state",
                    Rank::INODE_STATE,
                    InodeState {
                        d,
                        dirty,
                        deleted: false,
                        opens: 0,
                        ptrs: PtrMap::default(),
                        long_target: None,
                        target_dirty: false,
                        window: None,
                        window_used: false,
                        snapshot_plan: None,
                        snapshot_part: None,
                    },
                ),
            },
        })
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
/// inside one transaction).
pub struct InoAllocator {
    free: BTreeSet<u64>,
    next_new: u64,
    held: Vec<u64>,
}

impl InoAllocator {
    pub fn new(free: impl IntoIterator<Item = u64>, next_new: u64) -> InoAllocator {
        InoAllocator {
            free: free.into_iter().collect(),
            next_new,
            held: Vec::new(),
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

    /// The numbers held now (taken by the log writer's snapshot).
    pub fn take_held(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.held)
    }

    /// Numbers whose free is applied and whose tombstones are gone.
    pub fn release(&mut self, inos: Vec<u64>) {
        self.free.extend(inos);
    }

    /// Numbers allocated now (below the first never-used one, neither free nor held; 0 is
    /// no number).
    pub fn in_use(&self) -> u64 {
        self.next_new
            .saturating_sub(1)
            .saturating_sub(self.free.len() as u64 + self.held.len() as u64)
    }

    pub fn free_count(&self) -> u64 {
        self.free.len() as u64 + self.held.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ino: u64) -> Arc<InodeEntry> {
        InodeEntry::new(
            DiskInode {
                ino,
                nlink: 1,
                ..DiskInode::default()
            },
            false,
        )
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
