//! What the tree lock guards: the node cache, the id allocator and the counts that tell a load
//! whether the tree changed under it. Reads, transactions and the lock all take it from here,
//! and it takes nothing from them.

use super::cache::NodeCache;
use super::ids::IdAllocator;
use super::node::Node;

/// Everything behind the tree lock.
pub(crate) struct TreeState {
    pub cache: NodeCache,
    pub ids: IdAllocator,
    /// Mutations committed so far (never reset, so a count taken before `reset_empty` never
    /// matches one after it).
    pub commits: u64,
    /// Bumped by `reset_empty`: a load begun before it belongs to the old tree.
    pub epoch: u64,
}

impl TreeState {
    pub(crate) fn commit(&mut self, changes: Changes) {
        for &id in &changes.allocated {
            self.ids.claim(id);
        }
        for (id, node) in changes.stored {
            self.cache.store_dirty(id, node);
        }
        for id in changes.freed {
            // A node that is not cached was written and evicted (dirty and in-flight nodes
            // stay cached): it has a block. Tree nodes are always cached when freed; value
            // blocks are freed without being loaded.
            let on_disk = !self.cache.contains(id) || self.cache.discard(id);
            self.ids.release(id, on_disk);
        }
        self.commits += 1;
    }

    pub(crate) fn mark(&self) -> LoadMark {
        LoadMark {
            removals: self.cache.removal_mark(),
            commits: self.commits,
            epoch: self.epoch,
        }
    }

    /// Which state of the tree this is: changes with every commit and reset.
    pub(crate) fn version(&self) -> (u64, u64) {
        (self.epoch, self.commits)
    }

    /// Has a mutation committed since `mark`?
    pub(crate) fn committed_since(&self, mark: LoadMark) -> bool {
        self.commits != mark.commits
    }

    /// May a copy of `id` read from disk since `mark` be older than the tree's? (It was
    /// evicted or freed meanwhile, or the whole tree was replaced.)
    pub(crate) fn went_stale(&self, mark: LoadMark, id: u64) -> bool {
        self.epoch != mark.epoch || self.cache.removed_since(mark.removals, id)
    }
}

/// The state seen when a node was found missing, to judge a load that happens later.
#[derive(Clone, Copy)]
pub(crate) struct LoadMark {
    removals: u64,
    commits: u64,
    epoch: u64,
}

/// What a successful mutation did, to be committed.
pub(crate) struct Changes {
    pub stored: Vec<(u64, Node)>,
    pub allocated: Vec<u64>,
    pub freed: Vec<u64>,
}
