//! The tree's own consistency check (used by fsck and by every test): walks every reachable
//! node — cached ones from the cache, the others straight from the loader, cached while there
//! is room — and verifies each invariant the tree relies on. No lock is held while a node is
//! read: when a mutation commits during the walk, the walk runs again.

use super::node::Node;
use super::state_lock::assert_not_held;
use super::tree::{BeTree, NodeLoader};
use crate::error::err;
use crate::format::node::{self as fmt, Key};
use crate::format::ROOT_NODE_ID as ROOT;
use crate::{FsError, Result};
use std::collections::HashSet;
use std::sync::Arc;

/// What `check` found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Number of nodes at each level (index 0 = leaves); its length is the height.
    pub nodes_per_level: Vec<u64>,
    /// Entries stored in leaves.
    pub leaf_entries: u64,
    /// Messages buffered in internal nodes.
    pub buffered_messages: u64,
    /// Every reachable node id, ascending.
    pub node_ids: Vec<u64>,
}

impl TreeStats {
    pub fn node_count(&self) -> u64 {
        self.nodes_per_level.iter().sum()
    }
    pub fn height(&self) -> usize {
        self.nodes_per_level.len()
    }
}

fn violation<T>(detail: String) -> Result<T> {
    Err(FsError::corrupt("B-epsilon tree", detail))
}

struct Checker<'a> {
    tree: &'a BeTree,
    ld: &'a dyn NodeLoader,
    next_id: u64,
    visited: HashSet<u64>,
    stats: TreeStats,
}

impl BeTree {
    /// Verify every invariant: key order inside nodes, pivots bounding their subtrees,
    /// levels decreasing by one, messages sorted, unique and inside their node's range,
    /// every node fitting its block and the fanout limits, ids allocated, no node reachable
    /// twice, every dirty node reachable. Mutations go on meanwhile; the verdict is about one
    /// state of the tree (the walk runs again if a mutation committed during it, at most
    /// `MAX_CHECK_RUNS` times, then EAGAIN).
    pub fn check(&self, ld: &dyn NodeLoader) -> Result<TreeStats> {
        for _ in 0..MAX_CHECK_RUNS {
            let start = self.state.read().version();
            if let Some(verdict) = self.check_once(ld, start) {
                return verdict;
            }
        }
        err!(EAGAIN)
    }

    /// One walk; `None` if the tree changed since `start` (the verdict may be about no
    /// single state).
    fn check_once(&self, ld: &dyn NodeLoader, start: (u64, u64)) -> Option<Result<TreeStats>> {
        let next_id = self.state.read().ids.next();
        let result = self.walk(ld, next_id);
        let state = self.state.read();
        if state.version() != start {
            return None;
        }
        Some(result.and_then(|(visited, stats)| {
            for id in state.cache.dirty_ids() {
                // Value blocks hang off records, not off the structure (pass 6 follows them).
                let is_value = state.cache.node(id).is_some_and(|n| n.is_value());
                if !is_value && !visited.contains(&id) {
                    return violation(format!("dirty node {id} is not reachable"));
                }
            }
            let mut stats = stats;
            stats.node_ids = visited.into_iter().collect();
            stats.node_ids.sort_unstable();
            Ok(stats)
        }))
    }

    fn walk(&self, ld: &dyn NodeLoader, next_id: u64) -> Result<(HashSet<u64>, TreeStats)> {
        let mut checker = Checker {
            tree: self,
            ld,
            next_id,
            visited: HashSet::new(),
            stats: TreeStats::default(),
        };
        let root = checker.fetch(ROOT)?;
        checker.stats.nodes_per_level = vec![0; root.level() as usize + 1];
        checker.visit(ROOT, root, None, None)?;
        Ok((checker.visited, checker.stats))
    }
}

/// How often `check` walks again because the tree kept changing under it.
const MAX_CHECK_RUNS: u32 = 16;

impl Checker<'_> {
    fn fetch(&self, id: u64) -> Result<Arc<Node>> {
        let mark = {
            let state = self.tree.state.read();
            if !state.ids.in_use(id) || id >= self.next_id {
                return violation(format!("node {id} is reachable but not allocated"));
            }
            if let Some(entry) = state.cache.entry(id) {
                return Ok(Arc::clone(&entry.node));
            }
            state.mark()
        };
        assert_not_held("checking a tree node");
        let block = self.ld.load_node(id)?;
        if block.len() != self.tree.policy.block_size {
            return violation(format!("node {id}: block of {} bytes", block.len()));
        }
        let node = Arc::new(Node::from_image(fmt::decode(&block, id)?));
        // Keep it while the cache has room: a listing usually follows a check (fsck), and
        // would otherwise read and decode every node again — unless the copy may be stale.
        let mut state = self.tree.state.write();
        if state.cache.len() < self.tree.cache_nodes && !state.went_stale(mark, id) {
            state.cache.insert_loaded_shared(id, Arc::clone(&node));
        }
        Ok(node)
    }

    fn visit(
        &mut self,
        id: u64,
        node: Arc<Node>,
        lower: Option<&Key>,
        upper: Option<&Key>,
    ) -> Result<()> {
        if !self.visited.insert(id) {
            return violation(format!("node {id} reachable twice"));
        }
        fmt::validate(id, node.image(), self.tree.policy.block_size)?;
        let policy = &self.tree.policy;
        let len = node.image().encoded_len();
        if node.encoded_len() != len {
            return violation(format!(
                "node {id}: size bookkeeping says {}",
                node.encoded_len()
            ));
        }
        if !node.fits(policy) {
            return violation(format!(
                "node {id} does not fit: {len} bytes, {} children, {} structure bytes",
                node.children().len(),
                node.structure_bytes()
            ));
        }
        if id != ROOT && !node.is_leaf() && node.children().len() < 2 {
            return violation(format!("internal node {id} with one child"));
        }
        let in_range = |k: &Key| lower.is_none_or(|l| l <= k) && upper.is_none_or(|u| k < u);
        let level = node.level() as usize;
        self.stats.nodes_per_level[level] += 1;
        if node.is_leaf() {
            let entries = node.entries();
            for e in [entries.first(), entries.last()].into_iter().flatten() {
                if !in_range(&e.key) {
                    return violation(format!("leaf {id}: entry {:?} outside its range", e.key));
                }
            }
            self.stats.leaf_entries += entries.len() as u64;
            return Ok(());
        }
        let messages = node.messages();
        for m in [messages.first(), messages.last()].into_iter().flatten() {
            if !in_range(&m.key) {
                return violation(format!("node {id}: message {:?} outside its range", m.key));
            }
        }
        self.stats.buffered_messages += messages.len() as u64;
        let pivots = node.pivots();
        for p in [pivots.first(), pivots.last()].into_iter().flatten() {
            // A pivot equal to the lower bound would leave a child with an empty range.
            if !in_range(p) || lower == Some(p) {
                return violation(format!("node {id}: pivot {p:?} outside its range"));
            }
        }
        for (i, &child_id) in node.children().iter().enumerate() {
            let child = self.fetch(child_id)?;
            if child.is_value() {
                return violation(format!("node {child_id} under node {id} is a value block"));
            }
            if child.level() as usize + 1 != level {
                return violation(format!(
                    "node {child_id} at level {} under node {id} at level {level}",
                    child.level()
                ));
            }
            let child_lower = if i == 0 { lower } else { Some(&pivots[i - 1]) };
            let child_upper = pivots.get(i).or(upper);
            self.visit(child_id, child, child_lower, child_upper)?;
        }
        Ok(())
    }
}
