//! Node id allocation. An id whose node may have a block on disk is reusable only after the
//! log writer was told it is free (`take_dirty` reports it): otherwise a crash could find the
//! new node's block and the old node's free record out of order. Ids of nodes that never
//! reached the writer are reused at once and never reported.

use std::collections::BTreeSet;

pub(crate) struct IdAllocator {
    /// Ids at or above were never used.
    next: u64,
    /// Free ids below `next`, reusable now.
    free: BTreeSet<u64>,
    /// Freed ids not yet reported by `take_dirty`.
    unreported: BTreeSet<u64>,
}

impl IdAllocator {
    pub fn new(next: u64, free: impl IntoIterator<Item = u64>) -> IdAllocator {
        let next = next.max(crate::format::ROOT_NODE_ID + 1);
        IdAllocator {
            next,
            free: free
                .into_iter()
                .filter(|&id| id > crate::format::ROOT_NODE_ID && id < next)
                .collect(),
            unreported: BTreeSet::new(),
        }
    }

    pub fn next(&self) -> u64 {
        self.next
    }

    /// The smallest reusable id above `after`, if any (for planning without claiming).
    pub fn free_after(&self, after: u64) -> Option<u64> {
        self.free.range(after + 1..).next().copied()
    }

    /// Take `id` for a new node: a reusable one, or the next never-used one.
    pub fn claim(&mut self, id: u64) {
        if !self.free.remove(&id) {
            assert!(id >= self.next, "node id {id} claimed while in use");
            self.next = id + 1;
        }
    }

    /// `id` no longer names a node.
    pub fn release(&mut self, id: u64, on_disk: bool) {
        assert!(id > crate::format::ROOT_NODE_ID && id < self.next);
        let fresh = if on_disk {
            self.unreported.insert(id)
        } else {
            self.free.insert(id)
        };
        assert!(fresh, "node id {id} freed twice");
    }

    /// Hand the unreported freed ids to the caller; from now on they are reusable.
    pub fn report_freed(&mut self) -> Vec<u64> {
        let freed = std::mem::take(&mut self.unreported);
        self.free.extend(freed.iter().copied());
        freed.into_iter().collect()
    }

    pub fn unreported_count(&self) -> usize {
        self.unreported.len()
    }

    /// How many ids name a node of the tree (the root included).
    pub fn in_use_count(&self) -> usize {
        let named = self.next - crate::format::ROOT_NODE_ID;
        named as usize - self.free.len() - self.unreported.len()
    }

    /// Does `id` name a node of the tree?
    pub fn in_use(&self, id: u64) -> bool {
        id >= crate::format::ROOT_NODE_ID
            && id < self.next
            && !self.free.contains(&id)
            && !self.unreported.contains(&id)
    }
}
