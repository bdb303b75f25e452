//! Inodes in memory: the cache, their per-inode locks, and inode-number allocation.
//!
//! Each cached inode has two locks. `op` serializes whole mutations of the inode (directory
//! entries, file contents) and may be held across device I/O; `state` guards the fields and
//! is only held for memory work, so getattr, lookups and reads never wait for I/O.

use super::types::Timespec;
use crate::format::inode::{DiskInode, DiskTime};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A cached indirect block: its pointers and where it is in the log.
#[derive(Clone, Debug)]
pub struct PtrBlock {
    /// Shared with a log write in progress; changed copy-on-write.
    pub ptrs: Arc<Vec<u64>>,
    /// Log address (0 while never written).
    pub addr: u64,
    pub dirty: bool,
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
    pub ptrs: HashMap<(u8, u64), PtrBlock>,
    /// A long symlink target held in memory; `target_dirty` when its blocks must be
    /// (re)written. It keeps serving readlink while its blocks are being written.
    pub long_target: Option<Arc<Vec<u8>>>,
    pub target_dirty: bool,
    /// Data blocks reserved for this file's next writes: [next, end).
    pub window: Option<(u64, u64)>,
}

pub struct InodeEntry {
    pub ino: u64,
    pub op: Arc<Mutex<()>>,
    pub state: crate::lockcheck::RwLock<InodeState>,
}

impl InodeEntry {
    pub fn new(d: DiskInode, dirty: bool) -> Arc<InodeEntry> {
        Arc::new(InodeEntry {
            ino: d.ino,
            op: Arc::new(Mutex::new(())),
            state: crate::lockcheck::RwLock::new(
                "inode state",
                InodeState {
                    d,
                    dirty,
                    deleted: false,
                    opens: 0,
                    ptrs: HashMap::new(),
                    long_target: None,
                    target_dirty: false,
                    window: None,
                },
            ),
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

/// The inode cache: sharded so lookups of different inodes do not contend.
pub struct InodeCache {
    shards: Vec<Mutex<HashMap<u64, Arc<InodeEntry>>>>,
    /// Bumped by every eviction: a load that raced with one is retried.
    evictions: AtomicU64,
}

impl Default for InodeCache {
    fn default() -> Self {
        InodeCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            evictions: AtomicU64::new(0),
        }
    }
}

impl InodeCache {
    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, Arc<InodeEntry>>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    pub fn get(&self, ino: u64) -> Option<Arc<InodeEntry>> {
        self.shard(ino).lock().get(&ino).cloned()
    }

    pub fn eviction_count(&self) -> u64 {
        self.evictions.load(Ordering::Acquire)
    }

    /// Insert a freshly loaded inode unless one is cached already or an eviction happened
    /// since `seen` (the load may be stale); returns the cached entry or None to retry.
    pub fn insert_loaded(&self, e: Arc<InodeEntry>, seen: u64) -> Option<Arc<InodeEntry>> {
        let mut s = self.shard(e.ino).lock();
        if let Some(x) = s.get(&e.ino) {
            return Some(x.clone());
        }
        if self.evictions.load(Ordering::Acquire) != seen {
            return None;
        }
        s.insert(e.ino, e.clone());
        Some(e)
    }

    /// Insert a brand-new inode (just allocated: nobody can have it cached).
    pub fn insert_new(&self, e: Arc<InodeEntry>) {
        let old = self.shard(e.ino).lock().insert(e.ino, e);
        assert!(old.is_none(), "new inode already cached");
    }

    pub fn remove(&self, ino: u64) {
        self.shard(ino).lock().remove(&ino);
        self.evictions.fetch_add(1, Ordering::AcqRel);
    }

    /// Approximate memory held: inodes plus their cached indirect blocks.
    pub fn bytes(&self, block_size: u32) -> u64 {
        let mut n = 0u64;
        for s in &self.shards {
            for e in s.lock().values() {
                n += 512;
                if let Some(st) = e.state.try_read() {
                    n += st.ptrs.len() as u64 * block_size as u64;
                }
            }
        }
        n
    }

    /// Drop clean, unused inodes until about `target` bytes remain. An entry is unused when
    /// only the cache holds it (no operation, dirty list or log write has a reference).
    pub fn evict(&self, target: u64, block_size: u32) {
        let mut have = self.bytes(block_size);
        for s in &self.shards {
            if have <= target {
                return;
            }
            let mut map = s.lock();
            let victims: Vec<u64> = map
                .iter()
                .filter(|(_, e)| {
                    Arc::strong_count(e) == 1
                        && e.state.try_read().is_some_and(|st| {
                            !st.dirty
                                && st.opens == 0
                                && st.window.is_none()
                                && !st.ptrs.values().any(|p| p.dirty)
                        })
                })
                .map(|(&i, _)| i)
                .collect();
            for i in victims {
                if have <= target {
                    break;
                }
                if let Some(e) = map.remove(&i) {
                    have = have
                        .saturating_sub(512 + e.state.read().ptrs.len() as u64 * block_size as u64);
                }
            }
            self.evictions.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Every cached entry (for unmount-time cleanup).
    pub fn all(&self) -> Vec<Arc<InodeEntry>> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
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
