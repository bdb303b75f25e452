//! Restructuring: putting a message into the root, then flushing buffers down, splitting
//! nodes that overflow, merging or redistributing underfull ones, and growing or shrinking
//! the root — until every node fits its block again.
//!
//! Everything runs in a `Txn`, so nodes may be over-full in between; a missing node stops the
//! whole mutation (`Stop::Miss`) and it runs again after the load.

use super::node::{Node, Underflow};
use super::stop::Stop;
use super::txn::Txn;
use crate::format::node::{Key, Message};
use crate::format::ROOT_NODE_ID as ROOT;

/// New right siblings of a node that was split: (lower bound, id), in key order.
type Siblings = Vec<(Key, u64)>;

impl Txn<'_> {
    /// Put `message` into the root (a leaf root applies it) and restore every invariant.
    pub fn apply_at_root(&mut self, message: Message) -> Result<(), Stop> {
        let mut root = self.take(ROOT)?;
        root.apply(vec![message]);
        self.put(ROOT, root);
        self.settle_root()
    }

    fn settle_root(&mut self) -> Result<(), Stop> {
        loop {
            let siblings = self.settle(ROOT)?;
            if !siblings.is_empty() {
                self.grow_root(siblings)?;
                continue;
            }
            if self.peek(ROOT)?.children().len() == 1 {
                self.shrink_root()?;
                continue;
            }
            return Ok(());
        }
    }

    /// The root was split: move its first piece to a fresh id and make id 1 the parent of
    /// all pieces, one level up.
    fn grow_root(&mut self, siblings: Siblings) -> Result<(), Stop> {
        let old_root = self.take(ROOT)?;
        let level = old_root
            .level()
            .checked_add(1)
            .expect("tree height overflow");
        let moved = self.alloc(old_root);
        let (pivots, mut children): (Vec<Key>, Vec<u64>) = siblings.into_iter().unzip();
        children.insert(0, moved);
        self.put(
            ROOT,
            Node::new_internal(level, children, pivots, Vec::new()),
        );
        Ok(())
    }

    /// The root has one child: push the root's buffer into the child and pull the child's
    /// content up into id 1.
    fn shrink_root(&mut self) -> Result<(), Stop> {
        let mut root = self.take(ROOT)?;
        let child_id = root.children()[0];
        let mut child = self.take_child(child_id, root.level())?;
        child.apply(root.take_all_messages());
        self.free(child_id);
        self.put(ROOT, child);
        Ok(())
    }

    /// Make node `id` fit its block: flush its buffer down while only the buffer is too big,
    /// then split it if it is still too big. Returns the right siblings it was split into.
    fn settle(&mut self, id: u64) -> Result<Siblings, Stop> {
        if self.peek(id)?.fits(self.policy) {
            return Ok(Vec::new());
        }
        let mut node = self.take(id)?;
        while !node.is_leaf() && !node.fits(self.policy) && !node.structure_overfull(self.policy) {
            let heaviest = node
                .heaviest_child()
                .expect("a node whose structure fits overflows only by its buffer");
            self.flush_child(&mut node, heaviest)?;
        }
        if node.fits(self.policy) {
            self.put(id, node);
            return Ok(Vec::new());
        }
        let pieces = node.split(self.policy);
        let mut siblings = Vec::with_capacity(pieces.len());
        for (index, (lower, piece)) in pieces.into_iter().enumerate() {
            let piece_id = if index == 0 {
                self.put(id, piece);
                id
            } else {
                self.alloc(piece)
            };
            if let Some(lower) = lower {
                siblings.push((lower, piece_id));
            }
            // An internal piece may still hold more buffer than fits.
            siblings.extend(self.settle(piece_id)?);
        }
        Ok(siblings)
    }

    /// Move the messages destined to child `index` of `parent` into that child, settle it,
    /// and repair the parent around it.
    fn flush_child(&mut self, parent: &mut Node, index: usize) -> Result<(), Stop> {
        let child_id = parent.children()[index];
        let mut child = self.take_child(child_id, parent.level())?;
        child.apply(parent.take_child_messages(index));
        self.put(child_id, child);
        let siblings = self.settle(child_id)?;
        let produced = 1 + siblings.len();
        parent.insert_children(index, siblings);
        self.fix_underflow(parent, index, produced)
    }

    /// Rebalance underfull children among `parent.children()[start..start + count]` (the
    /// nodes just settled): every internal node left with one child must merge, and each
    /// merely underfull node gets one chance to.
    fn fix_underflow(&mut self, parent: &mut Node, start: usize, count: usize) -> Result<(), Stop> {
        let mut start = start;
        // Children right of the range are untouched, so count the range end from the right.
        let mut right_of_range = parent.children().len() - start - count;
        let mut soft_budget = count;
        loop {
            let fanout = parent.children().len();
            if fanout < 2 {
                return Ok(());
            }
            let end = fanout - right_of_range;
            let mut hard = None;
            let mut soft = None;
            for i in start..end {
                match self.peek(parent.children()[i])?.underflow(self.policy) {
                    Underflow::Hard => {
                        hard = Some(i);
                        break;
                    }
                    Underflow::Soft if soft.is_none() => soft = Some(i),
                    _ => {}
                }
            }
            let index = match (hard, soft) {
                (Some(i), _) => i,
                (None, Some(i)) if soft_budget > 0 => {
                    soft_budget -= 1;
                    i
                }
                _ => return Ok(()),
            };
            // Pair with the right neighbour unless only the left one is at hand.
            let children = parent.children();
            let use_right = index + 1 < fanout
                && (index == 0
                    || self.is_available(children[index + 1])
                    || !self.is_available(children[index - 1]));
            let left = if use_right { index } else { index - 1 };
            if left < start {
                start = left;
            }
            if left + 1 >= end {
                right_of_range -= 1;
            }
            self.rebalance(parent, left)?;
        }
    }

    /// Merge children `left` and `left + 1` of `parent` when their content fits one node,
    /// else share it out evenly (keeping both ids).
    fn rebalance(&mut self, parent: &mut Node, left: usize) -> Result<(), Stop> {
        let level = parent.level();
        let left_id = parent.children()[left];
        let right_id = parent.children()[left + 1];
        let left_node = self.take_child(left_id, level)?;
        let right_node = self.take_child(right_id, level)?;
        let combined = Node::concat(left_node, parent.pivots()[left].clone(), right_node);
        // An internal node may take an over-full buffer: settling it flushes.
        let one_node = if combined.is_leaf() {
            combined.fits(self.policy)
        } else {
            !combined.structure_overfull(self.policy)
        };
        parent.remove_child(left + 1);
        if one_node {
            self.free(right_id);
            self.put(left_id, combined);
            let siblings = self.settle(left_id)?;
            parent.insert_children(left, siblings);
            return Ok(());
        }
        let pieces = combined.split(self.policy);
        let mut ids = Vec::with_capacity(pieces.len());
        let mut siblings = Vec::with_capacity(pieces.len());
        for (index, (lower, piece)) in pieces.into_iter().enumerate() {
            let id = match index {
                0 => {
                    self.put(left_id, piece);
                    left_id
                }
                1 => {
                    self.put(right_id, piece);
                    right_id
                }
                _ => self.alloc(piece),
            };
            ids.push(id);
            if let Some(lower) = lower {
                siblings.push((lower, id));
            }
        }
        parent.insert_children(left, siblings);
        // Right to left, so the indices of the pieces not yet settled stay put.
        for (offset, id) in ids.into_iter().enumerate().rev() {
            let siblings = self.settle(id)?;
            parent.insert_children(left + offset, siblings);
        }
        Ok(())
    }
}
