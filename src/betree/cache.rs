//! The node cache: decoded nodes by id, their dirty and in-flight state, clock eviction, and
//! the bookkeeping that lets a load done without locks tell whether it went stale.
//!
//! Lives inside the tree's `RwLock`. Reads (`node`) need only the shared lock: the clock's
//! reference bits are atomics and pins sit behind their own small mutex (a lockcheck leaf:
//! taken under the tree's state lock, nothing under it, never across I/O).

use super::node::Node;
use crate::format::ROOT_NODE_ID;
use crate::lockcheck::Mutex;
use foldhash::{HashMap, HashMapExt};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How many recent removals are remembered for stale-load detection.
const REMOVAL_MEMORY: usize = 4096;

pub(crate) struct CachedNode {
    /// Shared with `take_dirty` snapshots: nodes are replaced, never changed in place while
    /// shared (`Arc::make_mut` at most).
    pub node: Arc<Node>,
    pub dirty: bool,
    /// The node has (or is about to have) a block on disk: loaded, or handed to the writer.
    pub on_disk: bool,
    /// Clock reference bit.
    referenced: AtomicBool,
}

pub(crate) struct NodeCache {
    entries: HashMap<u64, CachedNode>,
    /// Clock hand order; may hold ids no longer cached (skipped) or twice (harmless).
    clock: VecDeque<u64>,
    dirty: BTreeSet<u64>,
    /// The dirty set a log writer took whole (`take_dirty_ids`) and has not yet captured
    /// (`capture_taken`): each node's content as of the take is copied (`Arc`) before anything
    /// changes or drops it, or at the capture.
    taken: BTreeSet<u64>,
    /// Nodes of `taken` copied before the capture, because something was about to change them.
    captured: Vec<(u64, Arc<Node>)>,
    /// Ids handed out by `take_dirty` and not yet `written`, with the number of such batches.
    /// Keyed by id rather than entry so that a late `written` can never release a newer copy.
    in_flight: HashMap<u64, u32>,
    /// Ids an operation in progress needs to stay cached until it retries, with counts.
    pins: Mutex<HashMap<u64, u32>>,
    /// Number of entries removed so far (evicted or freed).
    removals: u64,
    /// The last `REMOVAL_MEMORY` removals as (removal number, id).
    recent_removals: VecDeque<(u64, u64)>,
}

impl Default for NodeCache {
    fn default() -> NodeCache {
        NodeCache {
            entries: HashMap::new(),
            clock: VecDeque::new(),
            dirty: BTreeSet::new(),
            taken: BTreeSet::new(),
            captured: Vec::new(),
            in_flight: HashMap::new(),
            pins: Mutex::new("tree node pins", HashMap::new()),
            removals: 0,
            recent_removals: VecDeque::new(),
        }
    }
}

impl NodeCache {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.entries.contains_key(&id)
    }

    /// The cached node, noting the use for the clock.
    pub fn node(&self, id: u64) -> Option<&Arc<Node>> {
        let entry = self.entries.get(&id)?;
        if !entry.referenced.load(Ordering::Relaxed) {
            entry.referenced.store(true, Ordering::Relaxed);
        }
        Some(&entry.node)
    }

    pub fn entry(&self, id: u64) -> Option<&CachedNode> {
        self.entries.get(&id)
    }

    pub fn dirty_count(&self) -> usize {
        self.dirty.len()
    }

    pub fn dirty_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.dirty.iter().copied()
    }

    /// Add a node just read from disk.
    pub fn insert_loaded(&mut self, id: u64, node: Node) {
        let old = self.entries.insert(
            id,
            CachedNode {
                node: Arc::new(node),
                dirty: false,
                on_disk: true,
                referenced: AtomicBool::new(true),
            },
        );
        assert!(old.is_none(), "node {id} loaded while cached");
        self.clock.push_back(id);
    }

    /// Add a node just read from disk that the caller keeps using too (the check). Nothing
    /// happens if the node is cached already.
    pub fn insert_loaded_shared(&mut self, id: u64, node: Arc<Node>) {
        if self.entries.contains_key(&id) {
            return;
        }
        self.entries.insert(
            id,
            CachedNode {
                node,
                dirty: false,
                on_disk: true,
                referenced: AtomicBool::new(true),
            },
        );
        self.clock.push_back(id);
    }

    /// Store a node's new content (a new node, or a changed one) and mark it dirty.
    pub fn store_dirty(&mut self, id: u64, node: Node) {
        self.capture_before_change(id);
        match self.entries.get_mut(&id) {
            Some(entry) => {
                entry.node = Arc::new(node);
                entry.dirty = true;
                entry.referenced.store(true, Ordering::Relaxed);
            }
            None => {
                self.entries.insert(
                    id,
                    CachedNode {
                        node: Arc::new(node),
                        dirty: true,
                        on_disk: false,
                        referenced: AtomicBool::new(true),
                    },
                );
                self.clock.push_back(id);
            }
        }
        self.dirty.insert(id);
    }

    /// Change a cached node in place (copying it first if a snapshot shares it); marks it dirty.
    pub fn modify<R>(&mut self, id: u64, change: impl FnOnce(&mut Node) -> R) -> Option<R> {
        self.capture_before_change(id);
        let entry = self.entries.get_mut(&id)?;
        let result = change(Arc::make_mut(&mut entry.node));
        entry.dirty = true;
        self.dirty.insert(id);
        Some(result)
    }

    /// Make a cached node dirty; false if it is not cached.
    pub fn mark_dirty(&mut self, id: u64) -> bool {
        match self.entries.get_mut(&id) {
            Some(entry) => {
                entry.dirty = true;
                self.dirty.insert(id);
                true
            }
            None => false,
        }
    }

    /// Forget a freed node; returns whether it may have a block on disk.
    pub fn discard(&mut self, id: u64) -> bool {
        self.capture_before_change(id);
        self.dirty.remove(&id);
        match self.entries.remove(&id) {
            Some(entry) => {
                self.note_removal(id);
                entry.on_disk
            }
            None => false,
        }
    }

    /// Snapshot every dirty node and clear the flags; the nodes stay in flight until written.
    #[cfg(test)]
    pub fn take_dirty(&mut self) -> Vec<(u64, Arc<Node>)> {
        self.take_dirty_ids();
        self.capture_taken()
    }

    /// Take the dirty set whole, without visiting a node (the log writer's exclusive phase):
    /// the nodes stay dirty and cached until `capture_taken`, and their content as of now is
    /// what it returns. Returns how many were taken.
    pub fn take_dirty_ids(&mut self) -> usize {
        assert!(
            self.taken.is_empty() && self.captured.is_empty(),
            "a dirty set taken and not captured"
        );
        self.taken = std::mem::take(&mut self.dirty);
        self.taken.len()
    }

    /// The nodes `take_dirty_ids` took, as they were then, in id order; from now on they are
    /// in flight (and clean, unless dirtied again since the take).
    pub fn capture_taken(&mut self) -> Vec<(u64, Arc<Node>)> {
        for id in std::mem::take(&mut self.taken) {
            self.capture(id);
        }
        let mut nodes = std::mem::take(&mut self.captured);
        nodes.sort_unstable_by_key(|&(id, _)| id);
        nodes
    }

    /// Called before node `id` is changed or dropped: a node taken and not yet captured is
    /// copied first, so the writer gets it as it was at the take.
    fn capture_before_change(&mut self, id: u64) {
        if self.taken.remove(&id) {
            self.capture(id);
        }
    }

    fn capture(&mut self, id: u64) {
        crate::lockcheck::count_node_capture();
        let dirty_again = self.dirty.contains(&id);
        let entry = self.entries.get_mut(&id).expect("a taken node is cached");
        entry.dirty = dirty_again;
        entry.on_disk = true;
        *self.in_flight.entry(id).or_insert(0) += 1;
        self.captured.push((id, Arc::clone(&entry.node)));
    }

    pub fn written(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(count) = self.in_flight.get_mut(id) {
                *count -= 1;
                if *count == 0 {
                    self.in_flight.remove(id);
                }
            }
        }
    }

    pub fn pin(&self, id: u64) {
        *self.pins.lock().entry(id).or_insert(0) += 1;
    }

    pub fn unpin(&self, id: u64) {
        let mut pins = self.pins.lock();
        if let Some(count) = pins.get_mut(&id) {
            *count -= 1;
            if *count == 0 {
                pins.remove(&id);
            }
        }
    }

    /// Evict clean, settled, unpinned, non-root nodes, by clock, down to `max_nodes` if possible.
    pub fn evict_to(&mut self, max_nodes: usize) {
        // Nothing to gain sweeping when every cached node is dirty or the root.
        if self.entries.len() <= max_nodes || self.entries.len() <= self.dirty.len() + 1 {
            return;
        }
        if self.clock.len() > 2 * self.entries.len() + 64 {
            self.clock = self.entries.keys().copied().collect();
        }
        let pins = self.pins.lock();
        // Two sweeps: the first may only clear reference bits.
        let mut budget = 2 * self.clock.len() + 1;
        while self.entries.len() > max_nodes && budget > 0 {
            budget -= 1;
            let Some(id) = self.clock.pop_front() else {
                break;
            };
            let Some(entry) = self.entries.get(&id) else {
                continue;
            };
            let keep = id == ROOT_NODE_ID
                || entry.dirty
                || self.in_flight.contains_key(&id)
                || pins.contains_key(&id);
            if keep || entry.referenced.swap(false, Ordering::Relaxed) {
                self.clock.push_back(id);
                continue;
            }
            self.entries.remove(&id);
            self.removals += 1;
            self.recent_removals.push_back((self.removals, id));
            if self.recent_removals.len() > REMOVAL_MEMORY {
                self.recent_removals.pop_front();
            }
        }
    }

    fn note_removal(&mut self, id: u64) {
        self.removals += 1;
        self.recent_removals.push_back((self.removals, id));
        if self.recent_removals.len() > REMOVAL_MEMORY {
            self.recent_removals.pop_front();
        }
    }

    /// A mark to compare against after an unlocked load.
    pub fn removal_mark(&self) -> u64 {
        self.removals
    }

    /// Was `id` (possibly) removed after `mark`? Then a copy read from disk meanwhile may be
    /// older than the one that was cached, and must not be inserted.
    pub fn removed_since(&self, mark: u64, id: u64) -> bool {
        if self.removals == mark {
            return false;
        }
        match self.recent_removals.front() {
            Some(&(oldest, _)) if oldest <= mark + 1 => self
                .recent_removals
                .iter()
                .any(|&(number, removed)| number > mark && removed == id),
            _ => true, // forgotten: assume the worst
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_with(ids: impl IntoIterator<Item = u64>) -> NodeCache {
        let mut cache = NodeCache::default();
        for id in ids {
            cache.insert_loaded(id, Node::empty_leaf());
        }
        cache
    }

    #[test]
    fn eviction_spares_root_dirty_in_flight_and_pinned() {
        let mut cache = cache_with(1..=6);
        cache.mark_dirty(2);
        cache.mark_dirty(3);
        let taken = cache.take_dirty(); // 2 and 3 in flight, clean
        assert_eq!(taken.len(), 2);
        cache.mark_dirty(4);
        cache.pin(5);
        cache.evict_to(0);
        let left: Vec<u64> = (1..=6).filter(|&id| cache.contains(id)).collect();
        assert_eq!(left, vec![1, 2, 3, 4, 5]);
        cache.written(&[2]);
        cache.unpin(5);
        cache.evict_to(0);
        let left: Vec<u64> = (1..=6).filter(|&id| cache.contains(id)).collect();
        assert_eq!(left, vec![1, 3, 4]);
    }

    /// Between the take and the capture, a taken node is copied before it changes or goes,
    /// and taken nodes are not evicted; the capture hands over the contents of the take.
    #[test]
    fn a_taken_node_is_captured_before_it_changes_or_goes() {
        let mut cache = cache_with(1..=5);
        for id in [2, 3, 4] {
            cache.mark_dirty(id);
        }
        let before: Vec<Arc<Node>> = (2..=4).map(|id| cache.node(id).unwrap().clone()).collect();
        assert_eq!(cache.take_dirty_ids(), 3);
        assert_eq!(cache.dirty_count(), 0);
        cache.evict_to(0);
        assert!((2..=4).all(|id| cache.contains(id)), "taken nodes evicted");
        // 2 changes in place, 3 is replaced, 4 is freed; 6 (a new node) is stored too.
        cache.modify(2, |n| *n = Node::empty_leaf());
        cache.store_dirty(3, Node::empty_leaf());
        assert!(cache.discard(4), "a taken node has (or will have) a block");
        cache.store_dirty(6, Node::empty_leaf());
        let nodes = cache.capture_taken();
        assert_eq!(nodes.iter().map(|n| n.0).collect::<Vec<_>>(), vec![2, 3, 4]);
        for ((_, got), want) in nodes.iter().zip(&before) {
            assert!(Arc::ptr_eq(got, want), "the content of the take");
        }
        // Changed after the take: dirty for the next one, and in flight with the taken copy.
        let mut dirty: Vec<u64> = cache.dirty_ids().collect();
        dirty.sort();
        assert_eq!(dirty, vec![2, 3, 6]);
        assert!(!Arc::ptr_eq(cache.node(2).unwrap(), &before[0]));
        assert_eq!(cache.take_dirty_ids(), 3, "the next take");
        assert_eq!(cache.capture_taken().len(), 3);
    }

    #[test]
    fn written_of_an_older_batch_does_not_release_a_newer_one() {
        let mut cache = cache_with([1, 2]);
        cache.mark_dirty(2);
        cache.take_dirty(); // batch 1
        cache.mark_dirty(2);
        cache.take_dirty(); // batch 2
        cache.written(&[2]); // batch 1 done
        cache.evict_to(0);
        assert!(cache.contains(2), "batch 2 still in flight");
        cache.written(&[2]);
        cache.evict_to(0);
        assert!(!cache.contains(2));
    }

    #[test]
    fn clock_gives_recently_used_nodes_a_second_chance() {
        let mut cache = cache_with(1..=5);
        // Loading sets the reference bit; a first sweep only clears the bits.
        for id in 2..=5 {
            cache.entries[&id]
                .referenced
                .store(false, Ordering::Relaxed);
        }
        cache.node(3); // used
        cache.evict_to(2);
        assert!(cache.contains(1) && cache.contains(3));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn removals_are_remembered_for_stale_loads() {
        let mut cache = cache_with([1, 2, 3]);
        let mark = cache.removal_mark();
        assert!(!cache.removed_since(mark, 2));
        cache.discard(2);
        assert!(cache.removed_since(mark, 2));
        assert!(!cache.removed_since(mark, 3));
        assert!(!cache.removed_since(cache.removal_mark(), 2));
        // When the memory no longer reaches back to the mark, assume the worst.
        for id in 10..10 + REMOVAL_MEMORY as u64 + 1 {
            cache.insert_loaded(id, Node::empty_leaf());
            cache.discard(id);
        }
        assert!(cache.removed_since(mark, 3));
    }
}
