//! Queries over the cached tree: point lookups and leaf-sized range reads. They run under the
//! shared lock and stop with `Stop::Miss` at the first node that is not cached.

use super::node::apply_to_entries;
use super::state::TreeState;
use super::stop::{check_child_level, Stop};
use crate::format::node::{Key, LeafEntry, Message, MessageOp, Value};
use crate::format::ROOT_NODE_ID as ROOT;

/// Walk root to leaf; the first message for `key` met on the way (the newest) decides.
pub(crate) fn lookup(state: &TreeState, key: &Key) -> Result<Option<Value>, Stop> {
    let mut id = ROOT;
    let mut parent_level = None;
    loop {
        let node = state.cache.node(id).ok_or(Stop::Miss(id))?;
        if let Some(level) = parent_level {
            check_child_level(id, node, level)?;
        }
        if node.is_leaf() {
            return Ok(node.find_entry(key).cloned());
        }
        if let Some(message) = node.find_message(key) {
            return Ok(match &message.op {
                MessageOp::Insert(value) => Some(value.clone()),
                MessageOp::Delete | MessageOp::DeleteRange(_) => None,
            });
        }
        parent_level = Some(node.level());
        id = node.children()[node.child_index(key)];
    }
}

/// The live entries of one leaf's range from `start` on, with pending messages applied.
pub(crate) struct LeafRange {
    pub entries: Vec<LeafEntry>,
    /// Where the next leaf's range begins; `None` after the last leaf.
    pub next: Option<Key>,
}

/// Read the leaf whose range holds `start`: its entries at or above `start`, overridden by
/// the messages buffered above it for that range (higher nodes win).
pub(crate) fn read_leaf_range(state: &TreeState, start: &Key) -> Result<LeafRange, Stop> {
    let mut id = ROOT;
    let mut parent_level = None;
    let mut upper: Option<Key> = None;
    // Messages of each internal node on the path, top first, from `start` to the end of
    // the child's range.
    let mut layers: Vec<Vec<Message>> = Vec::new();
    loop {
        let node = state.cache.node(id).ok_or(Stop::Miss(id))?;
        if let Some(level) = parent_level {
            check_child_level(id, node, level)?;
        }
        let below_upper = |k: &Key| upper.as_ref().is_none_or(|u| k < u);
        if node.is_leaf() {
            let entries = node.entries();
            let from = entries.partition_point(|e| e.key < *start);
            let mut live: Vec<LeafEntry> = entries[from..]
                .iter()
                .take_while(|e| below_upper(&e.key))
                .cloned()
                .collect();
            // Bottom layer first, so that higher (newer) messages win.
            for mut layer in layers.into_iter().rev() {
                // Messages above were clipped to their child's range, wider than this leaf's.
                layer.truncate(layer.partition_point(|m| below_upper(&m.key)));
                apply_to_entries(&mut live, layer);
            }
            return Ok(LeafRange {
                entries: live,
                next: upper,
            });
        }
        let index = node.child_index(start);
        if let Some(pivot) = node.pivots().get(index) {
            upper = Some(pivot.clone());
        }
        let range = node.child_messages(index);
        let messages = &node.messages()[range];
        // A range that starts below `start` may still cover what follows it.
        let from = messages.partition_point(|m| m.ends_before(start));
        layers.push(messages[from..].to_vec());
        parent_level = Some(node.level());
        id = node.children()[index];
    }
}
