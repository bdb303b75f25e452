//! The inode cache: sharded, evicting by recency.

use super::entry::InodeEntry;
use crate::lockcheck::Mutex;
use foldhash::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::inode::DiskInode;

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
