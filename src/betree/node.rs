//! The in-memory node: a `NodeImage` plus its encoded size, kept current by every operation,
//! and the node-local algorithms (applying messages, picking a child to flush, splitting and
//! concatenating by bytes, shortest separators).

use super::policy::Policy;
use crate::format::node::{
    self as fmt, entry_size, message_size, pivot_size, Key, LeafEntry, Message, MessageOp,
    NodeBody, NodeImage, Value, CHILD_ID_SIZE,
};
use std::ops::Range;

#[derive(Clone, Debug)]
pub(crate) struct Node {
    image: NodeImage,
    /// `image.encoded_len()`, maintained incrementally.
    bytes: usize,
}

/// How badly a node needs a neighbour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Underflow {
    Healthy,
    /// Worth merging when convenient.
    Soft,
    /// An internal node with one child: must be merged before the mutation ends.
    Hard,
}

impl Node {
    pub fn empty_leaf() -> Node {
        Node::from_image(NodeImage {
            level: 0,
            body: NodeBody::Leaf { entries: vec![] },
        })
    }

    pub fn from_image(image: NodeImage) -> Node {
        let bytes = image.encoded_len();
        Node { image, bytes }
    }

    pub fn new_internal(
        level: u8,
        children: Vec<u64>,
        pivots: Vec<Key>,
        messages: Vec<Message>,
    ) -> Node {
        assert!(level > 0 && pivots.len() + 1 == children.len());
        Node::from_image(NodeImage {
            level,
            body: NodeBody::Internal {
                children,
                pivots,
                messages,
            },
        })
    }

    pub fn image(&self) -> &NodeImage {
        &self.image
    }
    pub fn level(&self) -> u8 {
        self.image.level
    }
    pub fn is_leaf(&self) -> bool {
        self.image.level == 0
    }
    /// A `VALUE` block, not a node of the tree's structure.
    pub fn is_value(&self) -> bool {
        self.image.is_value()
    }
    /// The bytes of a `VALUE` block.
    pub fn value_data(&self) -> Option<(u64, &std::sync::Arc<[u8]>)> {
        match &self.image.body {
            NodeBody::Value { owner, data } => Some((*owner, data)),
            _ => None,
        }
    }
    /// Bytes of the encoded node, header included.
    pub fn encoded_len(&self) -> usize {
        debug_assert_eq!(self.bytes, self.image.encoded_len());
        self.bytes
    }

    pub fn encode(&self, id: u64, block_size: usize) -> Vec<u8> {
        assert_eq!(
            self.bytes,
            self.image.encoded_len(),
            "node {id}: size bookkeeping"
        );
        fmt::encode(id, &self.image, block_size)
    }

    pub fn entries(&self) -> &[LeafEntry] {
        match &self.image.body {
            NodeBody::Leaf { entries } => entries,
            _ => &[],
        }
    }
    pub fn children(&self) -> &[u64] {
        match &self.image.body {
            NodeBody::Internal { children, .. } => children,
            _ => &[],
        }
    }
    pub fn pivots(&self) -> &[Key] {
        match &self.image.body {
            NodeBody::Internal { pivots, .. } => pivots,
            _ => &[],
        }
    }
    pub fn messages(&self) -> &[Message] {
        match &self.image.body {
            NodeBody::Internal { messages, .. } => messages,
            _ => &[],
        }
    }

    fn internal_parts(&mut self) -> (&mut Vec<u64>, &mut Vec<Key>, &mut Vec<Message>) {
        match &mut self.image.body {
            NodeBody::Internal {
                children,
                pivots,
                messages,
            } => (children, pivots, messages),
            _ => panic!("internal-node operation on a leaf or value block"),
        }
    }

    /// Index of the child whose range holds `key`.
    pub fn child_index(&self, key: &Key) -> usize {
        self.pivots().partition_point(|p| p <= key)
    }

    /// The messages destined to child `index`, as a range of `messages()`.
    pub fn child_messages(&self, index: usize) -> Range<usize> {
        let (pivots, messages) = (self.pivots(), self.messages());
        let start = match index {
            0 => 0,
            i => messages.partition_point(|m| m.key < pivots[i - 1]),
        };
        let end = match pivots.get(index) {
            Some(upper) => messages.partition_point(|m| m.key < *upper),
            None => messages.len(),
        };
        start..end
    }

    /// The buffered message that decides `key` (a point message for it, or a range
    /// covering it), if any.
    pub fn find_message(&self, key: &Key) -> Option<&Message> {
        let messages = self.messages();
        // Messages cover disjoint keys in order: only the last one starting at or below
        // `key` can cover it.
        let i = messages.partition_point(|m| m.key <= *key);
        let m = &messages[i.checked_sub(1)?];
        m.covers(key).then_some(m)
    }

    pub fn find_entry(&self, key: &Key) -> Option<&Value> {
        let entries = self.entries();
        entries
            .binary_search_by(|e| e.key.cmp(key))
            .ok()
            .map(|i| &entries[i].value)
    }

    /// Encoded size after `apply(vec![message])`, without doing it (`usize::MAX` for a range
    /// message: the caller then takes the general path).
    pub fn size_with(&self, message: &Message) -> usize {
        if message.is_range() {
            return usize::MAX;
        }
        match &self.image.body {
            NodeBody::Leaf { entries } => {
                let old = entries
                    .binary_search_by(|e| e.key.cmp(&message.key))
                    .ok()
                    .map_or(0, |i| entry_size(&entries[i]));
                let new = match &message.op {
                    MessageOp::Insert(value) => entry_size(&LeafEntry {
                        key: message.key.clone(),
                        value: value.clone(),
                    }),
                    _ => 0,
                };
                self.bytes - old + new
            }
            NodeBody::Value { .. } => usize::MAX,
            NodeBody::Internal { messages, .. } => {
                let old = messages
                    .binary_search_by(|m| m.key.cmp(&message.key))
                    .ok()
                    .map_or(0, |i| message_size(&messages[i]));
                self.bytes - old + message_size(message)
            }
        }
    }

    /// Apply messages (sorted, one per key, newer than everything here): a leaf updates its
    /// entries, an internal node buffers them, replacing older messages for the same keys.
    pub fn apply(&mut self, incoming: Vec<Message>) {
        debug_assert!(incoming.windows(2).all(|w| w[0].ends_before(&w[1].key)));
        let delta = match &mut self.image.body {
            NodeBody::Leaf { entries } => apply_to_entries(entries, incoming),
            NodeBody::Internal { messages, .. } => merge_messages(messages, incoming),
            NodeBody::Value { .. } => panic!("messages applied to a value block"),
        };
        self.bytes = (self.bytes as isize + delta) as usize;
        self.split_ranges_at_pivots();
        debug_assert_eq!(self.bytes, self.image.encoded_len());
    }

    /// Cut range messages of an internal node at its pivots, so that each message is destined
    /// to one child (the pieces keep the range's meaning: every key they cover is deleted).
    fn split_ranges_at_pivots(&mut self) {
        let NodeBody::Internal {
            pivots, messages, ..
        } = &mut self.image.body
        else {
            return;
        };
        let crosses = |m: &Message| match &m.op {
            MessageOp::DeleteRange(end) => {
                let first = pivots.partition_point(|p| *p <= m.key);
                pivots.get(first).is_some_and(|p| p < end)
            }
            _ => false,
        };
        if !messages.iter().any(crosses) {
            return;
        }
        let mut out = Vec::with_capacity(messages.len() + 2);
        for m in messages.drain(..) {
            let MessageOp::DeleteRange(end) = &m.op else {
                out.push(m);
                continue;
            };
            let mut lower = m.key.clone();
            let first = pivots.partition_point(|p| *p <= lower);
            for p in pivots[first..].iter().take_while(|p| *p < end) {
                out.push(Message {
                    key: lower,
                    op: MessageOp::DeleteRange(p.clone()),
                });
                lower = p.clone();
            }
            out.push(Message {
                key: lower,
                op: MessageOp::DeleteRange(end.clone()),
            });
        }
        *messages = out;
        self.bytes = self.image.encoded_len();
    }

    /// Remove and return the messages destined to child `index`.
    pub fn take_child_messages(&mut self, index: usize) -> Vec<Message> {
        let range = self.child_messages(index);
        let (_, _, messages) = self.internal_parts();
        let taken: Vec<Message> = messages.drain(range).collect();
        self.bytes -= taken.iter().map(message_size).sum::<usize>();
        taken
    }

    pub fn take_all_messages(&mut self) -> Vec<Message> {
        let (_, _, messages) = self.internal_parts();
        let taken = std::mem::take(messages);
        self.bytes -= taken.iter().map(message_size).sum::<usize>();
        taken
    }

    /// The child with the most buffered bytes, if any message is buffered.
    pub fn heaviest_child(&self) -> Option<usize> {
        let messages = self.messages();
        (0..self.children().len())
            .map(|i| {
                let bytes: usize = messages[self.child_messages(i)]
                    .iter()
                    .map(message_size)
                    .sum();
                (bytes, i)
            })
            .filter(|&(bytes, _)| bytes > 0)
            // max_by_key keeps the last maximum; prefer the leftmost for determinism
            .min_by_key(|&(bytes, i)| (std::cmp::Reverse(bytes), i))
            .map(|(_, i)| i)
    }

    /// Insert `(lower bound, id)` siblings right after child `index` (a split child).
    pub fn insert_children(&mut self, index: usize, siblings: Vec<(Key, u64)>) {
        if siblings.is_empty() {
            return;
        }
        let added: usize = siblings
            .iter()
            .map(|(k, _)| pivot_size(k) + CHILD_ID_SIZE)
            .sum();
        let (children, pivots, _) = self.internal_parts();
        debug_assert!(index < children.len());
        let (keys, ids): (Vec<Key>, Vec<u64>) = siblings.into_iter().unzip();
        children.splice(index + 1..index + 1, ids);
        pivots.splice(index..index, keys);
        self.bytes += added;
        // A buffered range may now span the new pivots.
        self.split_ranges_at_pivots();
    }

    /// Drop child `index >= 1` and the pivot below it: its range joins child `index - 1`.
    pub fn remove_child(&mut self, index: usize) {
        assert!(index >= 1);
        let (children, pivots, _) = self.internal_parts();
        children.remove(index);
        let pivot = pivots.remove(index - 1);
        self.bytes -= CHILD_ID_SIZE + pivot_size(&pivot);
    }

    /// Bytes of child ids and pivots.
    pub fn structure_bytes(&self) -> usize {
        self.children().len() * CHILD_ID_SIZE + self.pivots().iter().map(pivot_size).sum::<usize>()
    }

    /// Too many children or too long pivots: must split, whatever its buffer holds.
    pub fn structure_overfull(&self, policy: &Policy) -> bool {
        !self.is_leaf()
            && (self.children().len() > policy.max_fanout
                || self.structure_bytes() > policy.max_structure_bytes)
    }

    /// Fits its block and the fanout limits: the state every node is in between mutations.
    pub fn fits(&self, policy: &Policy) -> bool {
        self.bytes <= policy.block_size && !self.structure_overfull(policy)
    }

    pub fn underflow(&self, policy: &Policy) -> Underflow {
        if self.is_leaf() {
            if self.bytes.saturating_sub(fmt::at::BODY) < policy.min_leaf_bytes {
                return Underflow::Soft;
            }
        } else {
            let fanout = self.children().len();
            if fanout < 2 {
                return Underflow::Hard;
            }
            if fanout < policy.min_fanout && self.structure_bytes() < policy.max_structure_bytes / 4
            {
                return Underflow::Soft;
            }
        }
        Underflow::Healthy
    }

    /// Join two neighbours of one level; `separator` is the parent's pivot between them.
    pub fn concat(left: Node, separator: Key, right: Node) -> Node {
        assert_eq!(left.level(), right.level(), "concat across levels");
        let level = left.level();
        let body = match (left.image.body, right.image.body) {
            (NodeBody::Leaf { mut entries }, NodeBody::Leaf { entries: more }) => {
                debug_assert!(entries.last().is_none_or(|e| e.key < separator));
                debug_assert!(more.first().is_none_or(|e| e.key >= separator));
                entries.extend(more);
                NodeBody::Leaf { entries }
            }
            (
                NodeBody::Internal {
                    mut children,
                    mut pivots,
                    mut messages,
                },
                NodeBody::Internal {
                    children: more_children,
                    pivots: more_pivots,
                    messages: more_messages,
                },
            ) => {
                debug_assert!(messages.last().is_none_or(|m| m.key < separator));
                debug_assert!(more_messages.first().is_none_or(|m| m.key >= separator));
                children.extend(more_children);
                pivots.push(separator);
                pivots.extend(more_pivots);
                messages.extend(more_messages);
                NodeBody::Internal {
                    children,
                    pivots,
                    messages,
                }
            }
            _ => unreachable!("nodes of one level are of one kind (value blocks are no children)"),
        };
        Node::from_image(NodeImage { level, body })
    }

    /// Cut the node into pieces of balanced size: leaves by entry bytes so that every piece
    /// fits its block; internal nodes by structure bytes within the fanout limits (each
    /// piece keeps the messages of its children and may still need flushing). Returns the
    /// pieces in key order, each with its lower bound (none for the first).
    pub fn split(self, policy: &Policy) -> Vec<(Option<Key>, Node)> {
        let level = self.level();
        match self.image.body {
            NodeBody::Leaf { entries } => {
                let weights: Vec<usize> = entries.iter().map(entry_size).collect();
                let ranges = balanced_ranges(&weights, policy.usable(), usize::MAX, 1);
                let bounds: Vec<Option<Key>> = ranges
                    .iter()
                    .map(|r| match r.start {
                        0 => None,
                        s => Some(shortest_separator(&entries[s - 1].key, &entries[s].key)),
                    })
                    .collect();
                let mut rest = entries;
                let mut pieces = Vec::with_capacity(ranges.len());
                for (range, bound) in ranges.iter().rev().zip(bounds.into_iter().rev()) {
                    let piece = rest.split_off(range.start);
                    let node = Node::from_image(NodeImage {
                        level: 0,
                        body: NodeBody::Leaf { entries: piece },
                    });
                    debug_assert!(node.fits(policy));
                    pieces.push((bound, node));
                }
                pieces.reverse();
                pieces
            }
            NodeBody::Internal {
                children,
                pivots,
                messages,
            } => {
                let weights: Vec<usize> = (0..children.len())
                    .map(|i| CHILD_ID_SIZE + if i > 0 { pivot_size(&pivots[i - 1]) } else { 0 })
                    .collect();
                let ranges =
                    balanced_ranges(&weights, policy.max_structure_bytes, policy.max_fanout, 2);
                let mut rest = messages;
                let mut pieces = Vec::with_capacity(ranges.len());
                for (k, range) in ranges.iter().enumerate().rev() {
                    let bound = (k > 0).then(|| pivots[range.start - 1].clone());
                    let piece_messages = match &bound {
                        Some(lower) => {
                            let at = rest.partition_point(|m| m.key < *lower);
                            rest.split_off(at)
                        }
                        None => std::mem::take(&mut rest),
                    };
                    let node = Node::new_internal(
                        level,
                        children[range.clone()].to_vec(),
                        pivots[range.start..range.end - 1].to_vec(),
                        piece_messages,
                    );
                    debug_assert!(!node.structure_overfull(policy));
                    pieces.push((bound, node));
                }
                pieces.reverse();
                pieces
            }
            NodeBody::Value { .. } => panic!("splitting a value block"),
        }
    }
}

/// Apply sorted messages to sorted entries; returns the change of encoded bytes.
pub(crate) fn apply_to_entries(entries: &mut Vec<LeafEntry>, incoming: Vec<Message>) -> isize {
    let mut delta = 0isize;
    if incoming.len() <= 8 || incoming.iter().any(Message::is_range) {
        // A few point updates: binary search beats rebuilding the vector. (Ranges are rare:
        // they take this path too.)
        for message in incoming {
            if let MessageOp::DeleteRange(end) = &message.op {
                let from = entries.partition_point(|e| e.key < message.key);
                let to = from + entries[from..].partition_point(|e| e.key < *end);
                for e in entries.drain(from..to) {
                    delta -= entry_size(&e) as isize;
                }
                continue;
            }
            match (
                entries.binary_search_by(|e| e.key.cmp(&message.key)),
                message.op,
            ) {
                (Ok(i), MessageOp::Insert(value)) => {
                    let old = entry_size(&entries[i]) as isize;
                    entries[i].value = value;
                    delta += entry_size(&entries[i]) as isize - old;
                }
                (Ok(i), _) => {
                    delta -= entry_size(&entries.remove(i)) as isize;
                }
                (Err(i), MessageOp::Insert(value)) => {
                    let entry = LeafEntry {
                        key: message.key,
                        value,
                    };
                    delta += entry_size(&entry) as isize;
                    entries.insert(i, entry);
                }
                (Err(_), _) => {}
            }
        }
        return delta;
    }
    let old = std::mem::take(entries);
    let mut merged = Vec::with_capacity(old.len() + incoming.len());
    let mut old = old.into_iter().peekable();
    for message in incoming {
        while let Some(entry) = old.next_if(|e| e.key < message.key) {
            merged.push(entry);
        }
        let replaced = old.next_if(|e| e.key == message.key);
        if let Some(entry) = &replaced {
            delta -= entry_size(entry) as isize;
        }
        if let MessageOp::Insert(value) = message.op {
            let entry = LeafEntry {
                key: message.key,
                value,
            };
            delta += entry_size(&entry) as isize;
            merged.push(entry);
        }
    }
    merged.extend(old);
    *entries = merged;
    delta
}

/// Merge newer sorted messages into a sorted buffer; returns the change of encoded bytes.
fn merge_messages(buffer: &mut Vec<Message>, incoming: Vec<Message>) -> isize {
    if incoming.iter().any(Message::is_range) || buffer.iter().any(Message::is_range) {
        return merge_covering(buffer, incoming);
    }
    let mut delta = 0isize;
    if incoming.len() <= 8 {
        for message in incoming {
            delta += message_size(&message) as isize;
            match buffer.binary_search_by(|m| m.key.cmp(&message.key)) {
                Ok(i) => {
                    delta -= message_size(&buffer[i]) as isize;
                    buffer[i] = message;
                }
                Err(i) => buffer.insert(i, message),
            }
        }
        return delta;
    }
    let old = std::mem::take(buffer);
    let mut merged = Vec::with_capacity(old.len() + incoming.len());
    let mut old = old.into_iter().peekable();
    for message in incoming {
        while let Some(older) = old.next_if(|m| m.key < message.key) {
            merged.push(older);
        }
        if let Some(older) = old.next_if(|m| m.key == message.key) {
            delta -= message_size(&older) as isize;
        }
        delta += message_size(&message) as isize;
        merged.push(message);
    }
    merged.extend(old);
    *buffer = merged;
    delta
}

/// `merge_messages` when ranges are involved: each newer message takes over every key it
/// covers — older points there go, older ranges are cut around it.
fn merge_covering(buffer: &mut Vec<Message>, incoming: Vec<Message>) -> isize {
    let before: usize = buffer.iter().map(message_size).sum();
    for message in incoming {
        let end = message.end();
        let below_end = |k: &Key| end.as_ref().is_none_or(|e| k < e);
        let from = buffer.partition_point(|o| o.ends_before(&message.key));
        let to = from + buffer[from..].partition_point(|o| below_end(&o.key));
        let mut replacement = Vec::with_capacity(3);
        if let Some(first) = buffer.get(from).filter(|_| from < to) {
            if first.is_range() && first.key < message.key {
                replacement.push(Message {
                    key: first.key.clone(),
                    op: MessageOp::DeleteRange(message.key.clone()),
                });
            }
        }
        let tail = (from < to)
            .then(|| &buffer[to - 1])
            .and_then(|last| match (&last.op, &end) {
                (MessageOp::DeleteRange(last_end), Some(end)) if end < last_end => Some(Message {
                    key: end.clone(),
                    op: MessageOp::DeleteRange(last_end.clone()),
                }),
                _ => None,
            });
        replacement.push(message);
        replacement.extend(tail);
        buffer.splice(from..to, replacement);
    }
    let after: usize = buffer.iter().map(message_size).sum();
    after as isize - before as isize
}

/// The shortest key `p` with `left < p <= right`: `(dir, hash)` of `right` with an empty name
/// when the hashes differ, else the shortest prefix of `right`'s name above `left`'s.
pub(crate) fn shortest_separator(left: &Key, right: &Key) -> Key {
    assert!(left < right, "separator of unordered keys");
    if (left.dir, left.hash) < (right.dir, right.hash) {
        return Key::lowest(right.dir, right.hash);
    }
    let common = left
        .name
        .iter()
        .zip(right.name.iter())
        .take_while(|(a, b)| a == b)
        .count();
    Key::new(right.dir, right.hash, &right.name[..common + 1])
}

/// Cut `weights` into consecutive ranges of similar total weight, each at most `max_weight`,
/// with `min_len..=max_len` items, in as few ranges as possible (at least two).
pub(crate) fn balanced_ranges(
    weights: &[usize],
    max_weight: usize,
    max_len: usize,
    min_len: usize,
) -> Vec<Range<usize>> {
    let len = weights.len();
    assert!(
        weights.iter().all(|&w| w * min_len <= max_weight),
        "an item too heavy to place"
    );
    let mut prefix = Vec::with_capacity(len + 1);
    prefix.push(0usize);
    for &w in weights {
        prefix.push(prefix.last().unwrap() + w);
    }
    let total = prefix[len];
    let mut count = 2.max(total.div_ceil(max_weight)).max(len.div_ceil(max_len));
    loop {
        assert!(
            count * min_len <= len,
            "cannot cut {len} items into {count} pieces"
        );
        let mut starts = vec![0usize];
        for k in 1..count {
            let target = total * k / count;
            let lowest = starts[k - 1] + min_len;
            let highest = len - (count - k) * min_len;
            let mut cut = prefix
                .partition_point(|&p| p < target)
                .clamp(lowest, highest);
            // the boundary nearest the target, of the two around it
            if cut > lowest && prefix[cut - 1].abs_diff(target) < prefix[cut].abs_diff(target) {
                cut -= 1;
            }
            starts.push(cut);
        }
        starts.push(len);
        let ranges: Vec<Range<usize>> = starts.windows(2).map(|w| w[0]..w[1]).collect();
        if ranges
            .iter()
            .all(|r| prefix[r.end] - prefix[r.start] <= max_weight && r.len() <= max_len)
        {
            return ranges;
        }
        count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(dir: u64, hash: u64, name: &[u8]) -> Key {
        Key::new(dir, hash, name)
    }

    #[test]
    fn separators_are_shortest_and_between() {
        let cases = [
            (key(1, 5, b"abc"), key(1, 6, b"a")),
            (key(1, 5, b"abc"), key(2, 0, b"a")),
            (key(1, 5, b"abc"), key(1, 5, b"abd")),
            (key(1, 5, b"ab"), key(1, 5, b"abzz")),
            (key(1, 5, b"a"), key(1, 5, &[b'a', 0])),
        ];
        for (a, b) in &cases {
            let p = shortest_separator(a, b);
            assert!(*a < p && p <= *b, "{a:?} {p:?} {b:?}");
        }
        assert_eq!(
            shortest_separator(&cases[0].0, &cases[0].1),
            Key::lowest(1, 6)
        );
        assert_eq!(&*shortest_separator(&cases[2].0, &cases[2].1).name, b"abd");
        assert_eq!(&*shortest_separator(&cases[3].0, &cases[3].1).name, b"abz");
    }

    #[test]
    fn balanced_ranges_respect_limits() {
        let weights: Vec<usize> = (0..100).map(|i| 20 + (i * 37) % 260).collect();
        for (max_weight, max_len, min_len) in [(4056, usize::MAX, 1), (2048, 16, 2), (600, 5, 2)] {
            let ranges = balanced_ranges(&weights, max_weight, max_len, min_len);
            assert_eq!(ranges.first().unwrap().start, 0);
            assert_eq!(ranges.last().unwrap().end, weights.len());
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            for r in &ranges {
                let sum: usize = weights[r.clone()].iter().sum();
                assert!(sum <= max_weight && r.len() <= max_len && r.len() >= min_len);
            }
        }
        // Two pieces of a slightly overfull leaf are about even.
        let weights = vec![100usize; 41];
        let ranges = balanced_ranges(&weights, 4056, usize::MAX, 1);
        assert_eq!(ranges.len(), 2);
        assert!(ranges[0].len().abs_diff(ranges[1].len()) <= 1);
    }

    #[test]
    fn apply_and_merge_keep_sizes() {
        let ins = |n: &[u8], ino| Message {
            key: key(1, n[0] as u64, n),
            op: MessageOp::Insert(Value::Entry(fmt::DirValue { ino, kind: 1 })),
        };
        let del = |n: &[u8]| Message {
            key: key(1, n[0] as u64, n),
            op: MessageOp::Delete,
        };
        for batch in [3usize, 20] {
            let mut leaf = Node::empty_leaf();
            let names: Vec<Vec<u8>> = (0..batch as u8).map(|i| vec![b'a' + i, i]).collect();
            leaf.apply(names.iter().map(|n| ins(n, 1)).collect());
            assert_eq!(leaf.entries().len(), batch);
            let mut changes: Vec<Message> = names.iter().step_by(2).map(|n| del(n)).collect();
            changes.push(ins(b"zz", 5));
            leaf.apply(changes);
            assert_eq!(leaf.entries().len(), batch - batch.div_ceil(2) + 1);
            assert_eq!(leaf.bytes, leaf.image.encoded_len());

            let mut inner =
                Node::new_internal(1, vec![2, 3], vec![key(1, b'm' as u64, b"")], vec![]);
            inner.apply(names.iter().map(|n| ins(n, 1)).collect());
            inner.apply(names.iter().map(|n| del(n)).collect());
            assert_eq!(inner.messages().len(), batch);
            assert!(inner.messages().iter().all(|m| m.op == MessageOp::Delete));
            assert_eq!(inner.bytes, inner.image.encoded_len());
            let left = inner.child_messages(0);
            let right = inner.child_messages(1);
            assert_eq!(left.end, right.start);
            assert_eq!(right.end, batch);
        }
    }
}
