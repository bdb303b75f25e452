//! B-epsilon tree nodes as stored in `NODE` log blocks (docs/FORMAT.md, "B-epsilon tree
//! node"), and the `VALUE` blocks that hold large attribute values: the key and message
//! vocabulary, the directory name hash, the attribute key space, and pure encode/decode.
//!
//! The tree holds two kinds of record, told apart by the key's hash field: directory entries
//! (hash below `ATTR_HASH_BASE`, value `(ino, type)`) and extended attributes (hash in
//! `ATTR_HASH_BASE..ATTR_HASH_END`, value the attribute's bytes or the ids of the `VALUE`
//! blocks holding them). An inode's attributes sort after its entries as a directory.
//!
//! `encode` and `decode` share one validator (`validate`): what the encoder asserts is exactly
//! what the decoder insists on, and the decoder turns every violation into `FsError::Corrupt`.

use super::{
    get_u16, get_u32, put_u16, put_u32, BlockHeader, BlockKind, Reader, Writer, HEADER_SIZE,
    MIN_BLOCK_SIZE, NAME_MAX,
};
use crate::{FsError, Result};
use std::hash::Hasher;
use std::sync::Arc;

/// Byte offsets of a node block's fields after its header, named as in docs/FORMAT.md
/// "B-epsilon tree node" and "`VALUE` block" (`vb_len` is `at::VALUE_LEN`).
pub mod at {
    /// u16: a leaf's entry count, an internal node's child count.
    pub const COUNT: usize = 32;
    /// u16: an internal node's message count; 0 in a leaf.
    pub const MESSAGE_COUNT: usize = 34;
    /// u32: a value block's byte count, where a node has its counts.
    pub const VALUE_LEN: usize = 32;
    /// Entries; child ids, pivots and messages; a value block's bytes. Reserved bytes (zero)
    /// lie between the counts and here.
    pub const BODY: usize = 40;
}
// The counts follow the header and end before the body, which starts inside any block.
const _: () = assert!(
    at::COUNT == HEADER_SIZE
        && at::VALUE_LEN == HEADER_SIZE
        && at::MESSAGE_COUNT + 2 <= at::BODY
        && at::VALUE_LEN + 4 <= at::BODY
        && at::BODY < MIN_BLOCK_SIZE as usize
);
/// A leaf entry without its name and tail: dir, hash, a (ino or value length), type, name_len.
pub const ENTRY_FIXED: usize = 8 + 8 + 8 + 1 + 1;
/// A pivot without its name: dir, hash, name_len.
pub const PIVOT_FIXED: usize = 8 + 8 + 1;
/// A message without its name and value: op, dir, hash, name_len.
pub const MESSAGE_FIXED: usize = 1 + 8 + 8 + 1;
/// The fixed part of the value an insert message carries: a (ino or value length), type.
pub const VALUE_SIZE: usize = 8 + 1;
/// One child id of an internal node.
pub const CHILD_ID_SIZE: usize = 8;
/// Message op codes.
pub const OP_INSERT: u8 = 1;
pub const OP_DELETE: u8 = 2;
/// Delete every key in `[key, end)` (format 2).
pub const OP_DELETE_RANGE: u8 = 3;
/// File type codes a directory entry may carry (1 regular .. 7 socket).
pub const KIND_MIN: u8 = 1;
pub const KIND_MAX: u8 = 7;
/// Type codes of attribute records: the value follows the name, or the ids of its blocks do.
pub const KIND_ATTR_INLINE: u8 = 8;
pub const KIND_ATTR_BLOCKS: u8 = 9;
/// Hash fields of attribute keys: `ATTR_HASH_BASE | generation << 30 | name hash >> 32`.
pub const ATTR_HASH_BASE: u64 = 1 << 62;
pub const ATTR_HASH_END: u64 = 1 << 63;
/// The largest attribute value (the kernel's XATTR_SIZE_MAX).
pub const ATTR_VALUE_MAX: usize = 65536;

/// The directory name hash: SipHash-2-4 keyed with `(seed, 0)` over exactly the name bytes,
/// shifted right by 2 so it fits 62 bits.
pub fn name_hash(seed: u64, name: &[u8]) -> u64 {
    let mut hasher = siphasher::sip::SipHasher24::new_with_keys(seed, 0);
    hasher.write(name);
    hasher.finish() >> 2
}

/// The hash field of attribute `name` (with its `name_hash`) of an inode of `generation`:
/// all attributes of one use of an inode number are contiguous, those of another use are not
/// (so a range delete of a freed inode's attributes can never meet a newer attribute).
pub fn attr_hash(generation: u32, name_hash: u64) -> u64 {
    ATTR_HASH_BASE | (generation as u64) << 30 | (name_hash >> 32) & ((1 << 30) - 1)
}

/// The keys of every attribute of inode `ino` at `generation`: `[lower, upper)`.
pub fn attr_range(ino: u64, generation: u32) -> (Key, Key) {
    let lower = ATTR_HASH_BASE | (generation as u64) << 30;
    (Key::lowest(ino, lower), Key::lowest(ino, lower + (1 << 30)))
}

/// The generation an attribute key's hash field names.
pub fn attr_generation(hash: u64) -> u32 {
    ((hash - ATTR_HASH_BASE) >> 30) as u32
}

/// Values longer than this go to `VALUE` blocks: a sixteenth of a block (256 bytes with 4 KiB
/// blocks), so that nodes still hold many records and flushes still move batches.
pub fn attr_inline_max(block_size: usize) -> usize {
    block_size / 16
}

/// Value bytes one `VALUE` block holds.
pub fn value_bytes_per_block(block_size: usize) -> usize {
    block_size - at::BODY
}

/// `VALUE` blocks a value of `len` bytes takes.
pub fn value_blocks(len: usize, block_size: usize) -> usize {
    len.div_ceil(value_bytes_per_block(block_size))
}

/// A key of the tree, ordered by `dir`, then `hash`, then `name` as unsigned bytes (shorter
/// first when one name is a prefix of the other) — the derived order.
/// Names are shared (`Arc`) because messages move between nodes and nodes are copied on write.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub dir: u64,
    pub hash: u64,
    pub name: Arc<[u8]>,
}

impl Key {
    pub fn new(dir: u64, hash: u64, name: &[u8]) -> Key {
        Key {
            dir,
            hash,
            name: Arc::from(name),
        }
    }
    /// The smallest key with this `dir` and `hash` (empty name; only pivots and range bounds
    /// have those).
    pub fn lowest(dir: u64, hash: u64) -> Key {
        Key::new(dir, hash, &[])
    }
    /// Is this a key of an extended attribute (rather than of a directory entry)?
    pub fn is_attr(&self) -> bool {
        self.hash >= ATTR_HASH_BASE
    }
    /// The smallest key above this one (names are at most `NAME_MAX` bytes), or None for the
    /// largest key there is.
    pub fn successor(&self) -> Option<Key> {
        if self.name.len() < NAME_MAX {
            let mut name = self.name.to_vec();
            name.push(0);
            return Some(Key::new(self.dir, self.hash, &name));
        }
        // A longest name: the next one drops the trailing 0xff bytes and counts up.
        let keep = self.name.iter().rposition(|&b| b != 0xff);
        match keep {
            Some(i) => {
                let mut name = self.name[..=i].to_vec();
                name[i] += 1;
                Some(Key::new(self.dir, self.hash, &name))
            }
            None => match self.hash.checked_add(1) {
                Some(hash) => Some(Key::lowest(self.dir, hash)),
                None => self.dir.checked_add(1).map(|dir| Key::lowest(dir, 0)),
            },
        }
    }
}

/// What a directory entry points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DirValue {
    pub ino: u64,
    /// File type code, `KIND_MIN..=KIND_MAX`.
    pub kind: u8,
}

/// An extended attribute's value as the tree holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AttrValue {
    /// Up to `attr_inline_max` bytes, in the record itself.
    Inline(Arc<[u8]>),
    /// `len` bytes in the `VALUE` blocks `ids` (node ids, found through the node map), in
    /// order, `value_bytes_per_block` bytes each but the last.
    Blocks { len: u32, ids: Arc<[u64]> },
}

impl AttrValue {
    pub fn len(&self) -> usize {
        match self {
            AttrValue::Inline(bytes) => bytes.len(),
            AttrValue::Blocks { len, .. } => *len as usize,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The `VALUE` block ids it uses (none when inline).
    pub fn ids(&self) -> &[u64] {
        match self {
            AttrValue::Inline(_) => &[],
            AttrValue::Blocks { ids, .. } => ids,
        }
    }
}

/// What a record of the tree holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    Entry(DirValue),
    Attr(AttrValue),
}

impl Value {
    /// The type code stored.
    pub fn kind(&self) -> u8 {
        match self {
            Value::Entry(v) => v.kind,
            Value::Attr(AttrValue::Inline(_)) => KIND_ATTR_INLINE,
            Value::Attr(AttrValue::Blocks { .. }) => KIND_ATTR_BLOCKS,
        }
    }
    /// The 8-byte field stored before the type: the inode, or the value's length.
    fn a(&self) -> u64 {
        match self {
            Value::Entry(v) => v.ino,
            Value::Attr(a) => a.len() as u64,
        }
    }
    /// Bytes stored after the name.
    fn tail_len(&self) -> usize {
        match self {
            Value::Entry(_) => 0,
            Value::Attr(AttrValue::Inline(bytes)) => bytes.len(),
            Value::Attr(AttrValue::Blocks { ids, .. }) => ids.len() * 8,
        }
    }
    pub fn as_entry(&self) -> Option<DirValue> {
        match self {
            Value::Entry(v) => Some(*v),
            Value::Attr(_) => None,
        }
    }
    pub fn as_attr(&self) -> Option<&AttrValue> {
        match self {
            Value::Entry(_) => None,
            Value::Attr(a) => Some(a),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafEntry {
    pub key: Key,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageOp {
    Insert(Value),
    Delete,
    /// Delete every key from the message's key up to this one (excluded).
    DeleteRange(Key),
}

/// A pending change buffered in an internal node. A point message covers its key, a range
/// message `[key, end)`; the messages of one node cover disjoint keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub key: Key,
    pub op: MessageOp,
}

impl Message {
    pub fn is_range(&self) -> bool {
        matches!(self.op, MessageOp::DeleteRange(_))
    }
    /// Does it decide the state of `key`?
    pub fn covers(&self, key: &Key) -> bool {
        match &self.op {
            MessageOp::DeleteRange(end) => self.key <= *key && key < end,
            _ => self.key == *key,
        }
    }
    /// Is every key it covers below `key`?
    pub fn ends_before(&self, key: &Key) -> bool {
        match &self.op {
            MessageOp::DeleteRange(end) => end <= key,
            _ => self.key < *key,
        }
    }
    /// The first key above what it covers (None: nothing is above).
    pub fn end(&self) -> Option<Key> {
        match &self.op {
            MessageOp::DeleteRange(end) => Some(end.clone()),
            _ => self.key.successor(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeBody {
    /// Entries sorted strictly ascending.
    Leaf { entries: Vec<LeafEntry> },
    /// `children.len() >= 2`, `pivots.len() == children.len() - 1`; child `i` holds keys in
    /// `[pivots[i-1], pivots[i])`; messages sorted ascending, covering disjoint keys.
    Internal {
        children: Vec<u64>,
        pivots: Vec<Key>,
        messages: Vec<Message>,
    },
    /// A `VALUE` block: part of the value of an attribute of inode `owner`.
    Value { owner: u64, data: Arc<[u8]> },
}

/// A node's content: what one `NODE` (or `VALUE`) block says (its id is the block's owner).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeImage {
    /// Height: 0 for a leaf (and a value block).
    pub level: u8,
    pub body: NodeBody,
}

pub fn entry_size(entry: &LeafEntry) -> usize {
    ENTRY_FIXED + entry.key.name.len() + entry.value.tail_len()
}
pub fn pivot_size(pivot: &Key) -> usize {
    PIVOT_FIXED + pivot.name.len()
}
pub fn message_size(message: &Message) -> usize {
    MESSAGE_FIXED
        + message.key.name.len()
        + match &message.op {
            MessageOp::Insert(value) => VALUE_SIZE + value.tail_len(),
            MessageOp::Delete => 0,
            MessageOp::DeleteRange(end) => pivot_size(end),
        }
}

impl NodeImage {
    /// Bytes the node occupies in its block, header included.
    pub fn encoded_len(&self) -> usize {
        at::BODY
            + match &self.body {
                NodeBody::Leaf { entries } => entries.iter().map(entry_size).sum::<usize>(),
                NodeBody::Internal {
                    children,
                    pivots,
                    messages,
                } => {
                    children.len() * CHILD_ID_SIZE
                        + pivots.iter().map(pivot_size).sum::<usize>()
                        + messages.iter().map(message_size).sum::<usize>()
                }
                NodeBody::Value { data, .. } => data.len(),
            }
    }

    pub fn is_value(&self) -> bool {
        matches!(self.body, NodeBody::Value { .. })
    }
}

fn corrupt<T>(id: u64, detail: impl std::fmt::Display) -> Result<T> {
    Err(FsError::corrupt(
        "tree node",
        format!("node {id}: {detail}"),
    ))
}

fn check_name(id: u64, key: &Key, min_len: usize) -> Result<()> {
    let len = key.name.len();
    if len < min_len || len > NAME_MAX {
        return corrupt(id, format!("name of {len} bytes"));
    }
    Ok(())
}

/// A record's value must fit its key space: directory entries below `ATTR_HASH_BASE` with a
/// known file type, attributes above it with a value of a size the block size allows.
fn check_value(id: u64, key: &Key, value: &Value, block_size: usize) -> Result<()> {
    match value {
        Value::Entry(v) => {
            if !(KIND_MIN..=KIND_MAX).contains(&v.kind) {
                return corrupt(id, format!("file type {} out of range", v.kind));
            }
            if key.is_attr() {
                return corrupt(id, "a directory entry in the attribute key space");
            }
        }
        Value::Attr(a) => {
            if !(ATTR_HASH_BASE..ATTR_HASH_END).contains(&key.hash) {
                return corrupt(id, format!("an attribute with hash {:#x}", key.hash));
            }
            let inline_max = attr_inline_max(block_size);
            match a {
                AttrValue::Inline(bytes) if bytes.len() > inline_max => {
                    return corrupt(id, format!("inline value of {} bytes", bytes.len()));
                }
                AttrValue::Inline(_) => {}
                AttrValue::Blocks { len, ids } => {
                    let len = *len as usize;
                    if len <= inline_max || len > ATTR_VALUE_MAX {
                        return corrupt(id, format!("value of {len} bytes in blocks"));
                    }
                    if ids.len() != value_blocks(len, block_size) {
                        return corrupt(id, format!("{} blocks for {len} bytes", ids.len()));
                    }
                    let mut sorted = ids.to_vec();
                    sorted.sort_unstable();
                    if sorted[0] <= crate::format::ROOT_NODE_ID
                        || sorted.windows(2).any(|w| w[0] == w[1])
                    {
                        return corrupt(id, "value block ids 0, the root's or repeated");
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every structural rule of a node that can be checked without its neighbours: counts, name
/// lengths, type codes and values against their key space, strict ordering of entries and
/// pivots, messages covering disjoint keys in order, child ids.
/// (That keys lie inside the node's range is checked by the tree, which knows the range.)
pub fn validate(id: u64, node: &NodeImage, block_size: usize) -> Result<()> {
    match &node.body {
        NodeBody::Leaf { entries } => {
            if node.level != 0 {
                return corrupt(id, format!("leaf at level {}", node.level));
            }
            if entries.len() > u16::MAX as usize {
                return corrupt(id, format!("{} entries", entries.len()));
            }
            for (i, entry) in entries.iter().enumerate() {
                check_name(id, &entry.key, 1)?;
                check_value(id, &entry.key, &entry.value, block_size)?;
                if i > 0 && entries[i - 1].key >= entry.key {
                    return corrupt(id, format!("entry {i} out of order"));
                }
            }
        }
        NodeBody::Internal {
            children,
            pivots,
            messages,
        } => {
            if node.level == 0 {
                return corrupt(id, "internal node at level 0");
            }
            if children.len() < 2 || children.len() > u16::MAX as usize {
                return corrupt(id, format!("{} children", children.len()));
            }
            if pivots.len() != children.len() - 1 {
                return corrupt(
                    id,
                    format!("{} pivots for {} children", pivots.len(), children.len()),
                );
            }
            if messages.len() > u16::MAX as usize {
                return corrupt(id, format!("{} messages", messages.len()));
            }
            let mut ids = children.clone();
            ids.sort_unstable();
            if ids[0] == 0 || ids.binary_search(&id).is_ok() {
                return corrupt(id, "child id 0 or the node itself");
            }
            if ids.windows(2).any(|w| w[0] == w[1]) {
                return corrupt(id, "a child listed twice");
            }
            for (i, pivot) in pivots.iter().enumerate() {
                check_name(id, pivot, 0)?;
                if i > 0 && pivots[i - 1] >= *pivot {
                    return corrupt(id, format!("pivot {i} out of order"));
                }
            }
            for (i, message) in messages.iter().enumerate() {
                match &message.op {
                    MessageOp::Insert(value) => {
                        check_name(id, &message.key, 1)?;
                        check_value(id, &message.key, value, block_size)?;
                    }
                    MessageOp::Delete => check_name(id, &message.key, 1)?,
                    MessageOp::DeleteRange(end) => {
                        check_name(id, &message.key, 0)?;
                        check_name(id, end, 0)?;
                        if *end <= message.key {
                            return corrupt(id, format!("message {i}: an empty range"));
                        }
                    }
                }
                if i > 0 && !messages[i - 1].ends_before(&message.key) {
                    return corrupt(id, format!("message {i} out of order or overlapping"));
                }
            }
        }
        NodeBody::Value { owner, data } => {
            if node.level != 0 {
                return corrupt(id, format!("value block at level {}", node.level));
            }
            if *owner == 0 || data.is_empty() || data.len() > value_bytes_per_block(block_size) {
                return corrupt(
                    id,
                    format!("value block of inode {owner} with {} bytes", data.len()),
                );
            }
        }
    }
    Ok(())
}

fn write_key(w: &mut Writer, key: &Key) {
    w.u64(key.dir);
    w.u64(key.hash);
    w.u8(key.name.len() as u8);
    w.bytes(&key.name);
}

/// The value's fixed part goes before the name (leaf entries) or after it (messages); the
/// tail always comes last.
fn write_tail(w: &mut Writer, value: &Value) {
    match value {
        Value::Entry(_) => {}
        Value::Attr(AttrValue::Inline(bytes)) => w.bytes(bytes),
        Value::Attr(AttrValue::Blocks { ids, .. }) => {
            for &id in ids.iter() {
                w.u64(id);
            }
        }
    }
}

/// Encode node `id` into a fresh block of `block_size` bytes with its header and CRC.
/// Panics if the node is invalid or does not fit: callers keep nodes within their block.
pub fn encode(id: u64, node: &NodeImage, block_size: usize) -> Vec<u8> {
    let len = node.encoded_len();
    assert!(
        len <= block_size,
        "node {id} needs {len} bytes, a block holds {block_size}"
    );
    if cfg!(debug_assertions) {
        if let Err(e) = validate(id, node, block_size) {
            panic!("encoding an invalid node: {e}");
        }
    }
    let mut block = vec![0u8; block_size];
    let header = match &node.body {
        NodeBody::Value { owner, .. } => BlockHeader::new(BlockKind::Value, 0, id, *owner),
        _ => BlockHeader::new(BlockKind::Node, node.level, id, 0),
    };
    header.write(&mut block);
    match &node.body {
        NodeBody::Leaf { entries } => put_u16(&mut block, at::COUNT, entries.len() as u16),
        NodeBody::Internal {
            children, messages, ..
        } => {
            put_u16(&mut block, at::COUNT, children.len() as u16);
            put_u16(&mut block, at::MESSAGE_COUNT, messages.len() as u16);
        }
        NodeBody::Value { data, .. } => put_u32(&mut block, at::VALUE_LEN, data.len() as u32),
    }
    let mut w = Writer::new(&mut block, at::BODY);
    match &node.body {
        NodeBody::Leaf { entries } => {
            for entry in entries {
                w.u64(entry.key.dir);
                w.u64(entry.key.hash);
                w.u64(entry.value.a());
                w.u8(entry.value.kind());
                w.u8(entry.key.name.len() as u8);
                w.bytes(&entry.key.name);
                write_tail(&mut w, &entry.value);
            }
        }
        NodeBody::Internal {
            children,
            pivots,
            messages,
        } => {
            for &child in children {
                w.u64(child);
            }
            for pivot in pivots {
                write_key(&mut w, pivot);
            }
            for message in messages {
                match &message.op {
                    MessageOp::Insert(value) => {
                        w.u8(OP_INSERT);
                        write_key(&mut w, &message.key);
                        w.u64(value.a());
                        w.u8(value.kind());
                        write_tail(&mut w, value);
                    }
                    MessageOp::Delete => {
                        w.u8(OP_DELETE);
                        write_key(&mut w, &message.key);
                    }
                    MessageOp::DeleteRange(end) => {
                        w.u8(OP_DELETE_RANGE);
                        write_key(&mut w, &message.key);
                        write_key(&mut w, end);
                    }
                }
            }
        }
        NodeBody::Value { data, .. } => w.bytes(data),
    }
    debug_assert_eq!(w.pos(), len, "encoded length disagrees with encoded_len");
    BlockHeader::seal(&mut block);
    block
}

fn read_key(r: &mut Reader) -> Result<Key> {
    let dir = r.u64()?;
    let hash = r.u64()?;
    let len = r.u8()? as usize;
    Ok(Key::new(dir, hash, r.bytes(len)?))
}

/// The value whose fixed part (`a`, type code) was read: its tail follows.
fn read_value(r: &mut Reader, a: u64, kind: u8, block_size: usize) -> Result<Value> {
    Ok(match kind {
        KIND_ATTR_INLINE => {
            let len = usize::try_from(a)
                .ok()
                .filter(|&n| n <= attr_inline_max(block_size))
                .ok_or_else(|| {
                    FsError::corrupt("tree node", format!("inline value of {a} bytes"))
                })?;
            Value::Attr(AttrValue::Inline(Arc::from(r.bytes(len)?)))
        }
        KIND_ATTR_BLOCKS => {
            let len = u32::try_from(a)
                .ok()
                .filter(|&n| n as usize <= ATTR_VALUE_MAX)
                .ok_or_else(|| FsError::corrupt("tree node", format!("value of {a} bytes")))?;
            let n = value_blocks(len as usize, block_size);
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                ids.push(r.u64()?);
            }
            Value::Attr(AttrValue::Blocks {
                len,
                ids: Arc::from(ids),
            })
        }
        // Anything else is a directory entry; `validate` judges the type code.
        _ => Value::Entry(DirValue { ino: a, kind }),
    })
}

/// Decode and verify the block of node `id`: header (kind `NODE` with index 0, or `VALUE`),
/// owner `id`, CRC, and every rule of `validate`. Never panics; any violation is
/// `FsError::Corrupt`.
pub fn decode(block: &[u8], id: u64) -> Result<NodeImage> {
    let header = BlockHeader::read(block)?;
    let kind_ok = match header.kind {
        BlockKind::Node => header.index == 0,
        BlockKind::Value => header.level == 0,
        _ => false,
    };
    if !kind_ok || header.owner != id {
        return corrupt(
            id,
            format!(
                "block says {:?} owner {} index {}",
                header.kind, header.owner, header.index
            ),
        );
    }
    let bs = block.len();
    // `BlockHeader::read` refused blocks too short to hold the counts.
    let mut r = Reader::new(block, at::BODY, "tree node");
    if header.kind == BlockKind::Value {
        let len = get_u32(block, at::VALUE_LEN) as usize;
        let node = NodeImage {
            level: 0,
            body: NodeBody::Value {
                owner: header.index,
                data: Arc::from(r.bytes(len)?),
            },
        };
        validate(id, &node, bs)?;
        return Ok(node);
    }
    let count = get_u16(block, at::COUNT) as usize;
    let message_count = get_u16(block, at::MESSAGE_COUNT) as usize;
    // Counts come from the block: never reserve more than the block could hold.
    let room = |fixed: usize, count: usize| count.min(block.len() / fixed);
    let body = if header.level == 0 {
        if message_count != 0 {
            return corrupt(id, format!("leaf with message count {message_count}"));
        }
        let mut entries = Vec::with_capacity(room(ENTRY_FIXED, count));
        for _ in 0..count {
            let dir = r.u64()?;
            let hash = r.u64()?;
            let a = r.u64()?;
            let kind = r.u8()?;
            let len = r.u8()? as usize;
            let name = r.bytes(len)?;
            let value = read_value(&mut r, a, kind, bs)?;
            entries.push(LeafEntry {
                key: Key::new(dir, hash, name),
                value,
            });
        }
        NodeBody::Leaf { entries }
    } else {
        if count < 2 {
            return corrupt(id, format!("internal node with {count} children"));
        }
        let mut children = Vec::with_capacity(room(CHILD_ID_SIZE, count));
        for _ in 0..count {
            children.push(r.u64()?);
        }
        let mut pivots = Vec::with_capacity(room(PIVOT_FIXED, count - 1));
        for _ in 1..count {
            pivots.push(read_key(&mut r)?);
        }
        let mut messages = Vec::with_capacity(room(MESSAGE_FIXED, message_count));
        for _ in 0..message_count {
            let op = r.u8()?;
            let key = read_key(&mut r)?;
            let op = match op {
                OP_INSERT => {
                    let a = r.u64()?;
                    let kind = r.u8()?;
                    MessageOp::Insert(read_value(&mut r, a, kind, bs)?)
                }
                OP_DELETE => MessageOp::Delete,
                OP_DELETE_RANGE => MessageOp::DeleteRange(read_key(&mut r)?),
                other => return corrupt(id, format!("message op {other}")),
            };
            messages.push(Message { key, op });
        }
        NodeBody::Internal {
            children,
            pivots,
            messages,
        }
    };
    let node = NodeImage {
        level: header.level,
        body,
    };
    validate(id, &node, bs)?;
    debug_assert_eq!(node.encoded_len(), r.pos());
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::put_u16;
    use proptest::prelude::*;

    const B: usize = 4096;

    fn entry(dir: u64, hash: u64, name: &[u8], ino: u64) -> LeafEntry {
        LeafEntry {
            key: Key::new(dir, hash, name),
            value: Value::Entry(DirValue { ino, kind: 1 }),
        }
    }

    fn sample_leaf() -> NodeImage {
        NodeImage {
            level: 0,
            body: NodeBody::Leaf {
                entries: vec![
                    entry(1, 5, b"a", 10),
                    entry(1, 5, b"ab", 11),
                    entry(1, 9, &[0xff; 255], 12),
                    entry(2, 0, b"z", 13),
                ],
            },
        }
    }

    fn sample_internal() -> NodeImage {
        NodeImage {
            level: 2,
            body: NodeBody::Internal {
                children: vec![7, 3, 12],
                pivots: vec![Key::lowest(1, 100), Key::new(4, 7, b"m")],
                messages: vec![
                    Message {
                        key: Key::new(1, 3, b"x"),
                        op: MessageOp::Delete,
                    },
                    Message {
                        key: Key::new(1, 100, b"y"),
                        op: MessageOp::Insert(Value::Entry(DirValue { ino: 99, kind: 2 })),
                    },
                    Message {
                        key: Key::new(9, 0, b"q"),
                        op: MessageOp::Insert(Value::Entry(DirValue { ino: 5, kind: 7 })),
                    },
                ],
            },
        }
    }

    /// The bytes this encoder writes are the format's: pinned, so that no change to the code
    /// (naming an offset, say) moves a field unnoticed.
    #[test]
    fn encoding_is_pinned() {
        let delete_range = NodeImage {
            level: 1,
            body: NodeBody::Internal {
                children: vec![2, 3],
                pivots: vec![Key::lowest(6, 1 << 62)],
                messages: vec![Message {
                    key: Key::lowest(6, attr_range(6, 3).0.hash),
                    op: MessageOp::DeleteRange(attr_range(6, 3).1),
                }],
            },
        };
        let value = NodeImage {
            level: 0,
            body: NodeBody::Value {
                owner: 77,
                data: Arc::from((0..3000u32).map(|i| i as u8).collect::<Vec<u8>>()),
            },
        };
        for (id, node) in [(9, &delete_range), (12, &value)] {
            assert_eq!(&decode(&encode(id, node, B), id).unwrap(), node);
        }
        let crcs = [
            crc32fast::hash(&encode(42, &sample_leaf(), B)),
            crc32fast::hash(&encode(8, &sample_internal(), B)),
            crc32fast::hash(&encode(4, &sample_attrs(), B)),
            crc32fast::hash(&encode(9, &delete_range, B)),
            crc32fast::hash(&encode(12, &value, B)),
        ];
        assert_eq!(
            crcs,
            [0xce7c35ed, 0x1fe80642, 0xdfd97237, 0xf553e8a4, 0x0a019158]
        );
    }

    #[test]
    fn leaf_round_trip() {
        let node = sample_leaf();
        let block = encode(42, &node, B);
        assert_eq!(block.len(), B);
        assert_eq!(decode(&block, 42).unwrap(), node);
        let empty = NodeImage {
            level: 0,
            body: NodeBody::Leaf { entries: vec![] },
        };
        assert_eq!(decode(&encode(1, &empty, B), 1).unwrap(), empty);
    }

    #[test]
    fn internal_round_trip_and_layout() {
        let node = sample_internal();
        let block = encode(8, &node, 8192);
        assert_eq!(decode(&block, 8).unwrap(), node);
        // Layout spot checks against FORMAT.md.
        assert_eq!(block[4], BlockKind::Node as u8);
        assert_eq!(block[5], 2);
        assert_eq!(crate::format::get_u64(&block, 16), 8);
        assert_eq!(crate::format::get_u16(&block, 32), 3);
        assert_eq!(crate::format::get_u16(&block, 34), 3);
        assert_eq!(crate::format::get_u64(&block, 40), 7);
        assert_eq!(crate::format::get_u64(&block, 56), 12);
        // first pivot: dir 1, hash 100, empty name
        assert_eq!(crate::format::get_u64(&block, 64), 1);
        assert_eq!(crate::format::get_u64(&block, 72), 100);
        assert_eq!(block[80], 0);
        assert_eq!(
            node.encoded_len(),
            40 + 24 + 17 + 18 + (19) + (19 + 9) + (19 + 9)
        );
    }

    #[test]
    fn full_leaf_fits_exactly() {
        // 14 entries of 281 bytes = 3934 + 40 <= 4096.
        let entries = (0..14u64)
            .map(|i| entry(1, i, &[b'n'; 255], i + 1))
            .collect();
        let node = NodeImage {
            level: 0,
            body: NodeBody::Leaf { entries },
        };
        assert_eq!(node.encoded_len(), 40 + 14 * 281);
        assert_eq!(decode(&encode(3, &node, B), 3).unwrap(), node);
    }

    #[test]
    #[should_panic(expected = "needs")]
    fn encode_refuses_overfull() {
        let entries = (0..15u64)
            .map(|i| entry(1, i, &[b'n'; 255], i + 1))
            .collect();
        encode(
            3,
            &NodeImage {
                level: 0,
                body: NodeBody::Leaf { entries },
            },
            B,
        );
    }

    fn reseal(block: &mut [u8]) {
        BlockHeader::seal(block);
    }

    fn is_corrupt(r: Result<NodeImage>) -> bool {
        matches!(r, Err(FsError::Corrupt { .. }))
    }

    #[test]
    fn decode_rejects_bad_blocks() {
        let good = encode(42, &sample_leaf(), B);
        // wrong owner, wrong kind, truncated, garbage, CRC
        assert!(is_corrupt(decode(&good, 43)));
        let mut b = good.clone();
        b[4] = BlockKind::Indirect as u8;
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 42)));
        let mut b = good.clone();
        crate::format::put_u64(&mut b, 24, 1);
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 42)));
        assert!(is_corrupt(decode(&good[..2000], 42)));
        assert!(is_corrupt(decode(&[0u8; B], 42)));
        let mut b = good.clone();
        b[50] ^= 1;
        assert!(is_corrupt(decode(&b, 42)));

        // unsorted: swap the first two entries' hashes (entry 0 hash 5 -> 6, entry 1 stays 5)
        let mut b = good.clone();
        crate::format::put_u64(&mut b, 48, 6);
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 42)));
        // entry count beyond the block
        let mut b = good.clone();
        put_u16(&mut b, 32, 1000);
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 42)));
        // zero-length name
        let mut b = good.clone();
        b[40 + 25] = 0;
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 42)));
        // bad file type
        let mut b = good.clone();
        b[40 + 24] = 8;
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 42)));
        // leaf with a message count
        let mut b = good.clone();
        put_u16(&mut b, 34, 1);
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 42)));
    }

    #[test]
    fn decode_rejects_bad_internal_nodes() {
        let good = encode(8, &sample_internal(), B);
        assert!(decode(&good, 8).is_ok());
        let patch = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            reseal(&mut b);
            decode(&b, 8)
        };
        // one child
        assert!(is_corrupt(patch(&|b| put_u16(b, 32, 1))));
        // child id 0, child id = self, duplicate child
        assert!(is_corrupt(patch(&|b| crate::format::put_u64(b, 48, 0))));
        assert!(is_corrupt(patch(&|b| crate::format::put_u64(b, 48, 8))));
        assert!(is_corrupt(patch(&|b| crate::format::put_u64(b, 48, 7))));
        // pivots out of order: first pivot dir 1 -> 5 (second pivot has dir 4)
        assert!(is_corrupt(patch(&|b| crate::format::put_u64(b, 64, 5))));
        // bad op of the first message (messages start after 3 ids + pivots of 17 and 18 bytes)
        let first_message = 40 + 24 + 17 + 18;
        assert!(is_corrupt(patch(&|b| b[first_message] = 3)));
        // message count beyond the block
        assert!(is_corrupt(patch(&|b| put_u16(b, 34, 4000))));
        // level 0 with internal body is read as a leaf whose entries make no sense
        assert!(is_corrupt(patch(&|b| b[5] = 0)));
    }

    #[test]
    fn hash_is_siphash_2_4_shifted() {
        // The crate is SipHash-2-4: reference vector 0 of the SipHash paper (key 00..0f,
        // empty message) is 0x726fdb47dd0e0e31.
        let mut h =
            siphasher::sip::SipHasher24::new_with_keys(0x0706050403020100, 0x0f0e0d0c0b0a0908);
        h.write(&[]);
        assert_eq!(h.finish(), 0x726fdb47dd0e0e31);
        let mut h = siphasher::sip::SipHasher24::new_with_keys(7, 0);
        h.write(b"hello");
        assert_eq!(name_hash(7, b"hello"), h.finish() >> 2);
        assert!(name_hash(7, b"hello") < 1 << 62);
        assert_ne!(name_hash(7, b"hello"), name_hash(8, b"hello"));
        // The test vector quoted in docs/FORMAT.md.
        assert_eq!(
            name_hash(0x0706050403020100, b"lost+found"),
            FORMAT_TEST_VECTOR
        );
    }

    /// `name_hash(0x0706050403020100, "lost+found")`, as documented in FORMAT.md.
    const FORMAT_TEST_VECTOR: u64 = 0x15ae_7497_a8cf_23d2;

    fn attr_entry(ino: u64, name: &[u8], value: AttrValue) -> LeafEntry {
        LeafEntry {
            key: Key::new(ino, attr_hash(3, name_hash(0, name)), name),
            value: Value::Attr(value),
        }
    }

    fn sample_attrs() -> NodeImage {
        let mut entries = vec![
            entry(5, 9, b"file", 6),
            attr_entry(6, b"user.a", AttrValue::Inline(Arc::from(&b"xyz"[..]))),
            attr_entry(6, b"user.empty", AttrValue::Inline(Arc::from(&b""[..]))),
            attr_entry(
                6,
                b"user.big",
                AttrValue::Blocks {
                    len: 5000,
                    ids: Arc::from(&[17u64, 9][..]),
                },
            ),
        ];
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        NodeImage {
            level: 0,
            body: NodeBody::Leaf { entries },
        }
    }

    #[test]
    fn attribute_records_round_trip_and_layout() {
        let node = sample_attrs();
        let block = encode(4, &node, B);
        assert_eq!(decode(&block, 4).unwrap(), node);
        // The first entry is the directory entry: its layout is format 1's.
        assert_eq!(crate::format::get_u64(&block, 40 + 16), 6);
        assert_eq!(block[40 + 24], 1);
        let (lo, hi) = attr_range(6, 3);
        for e in &node_entries(&node)[1..] {
            assert!(lo <= e.key && e.key < hi, "{:?}", e.key);
        }
        // Blocks records hold their length and then one id per VALUE block.
        let big = node_entries(&node)
            .iter()
            .find(|e| &*e.key.name == b"user.big")
            .unwrap()
            .clone();
        assert_eq!(entry_size(&big), ENTRY_FIXED + 8 + 16);
    }

    fn node_entries(node: &NodeImage) -> &[LeafEntry] {
        match &node.body {
            NodeBody::Leaf { entries } => entries,
            _ => &[],
        }
    }

    #[test]
    fn attribute_values_must_fit_their_key_space_and_size() {
        let bad = |entries: Vec<LeafEntry>| {
            validate(
                1,
                &NodeImage {
                    level: 0,
                    body: NodeBody::Leaf { entries },
                },
                B,
            )
            .is_err()
        };
        // An attribute under a directory hash, an entry under an attribute hash.
        let mut e = attr_entry(6, b"user.a", AttrValue::Inline(Arc::from(&b"x"[..])));
        e.key.hash = 5;
        assert!(bad(vec![e]));
        let mut e = entry(6, ATTR_HASH_BASE + 1, b"f", 9);
        e.key.hash = ATTR_HASH_BASE + 1;
        assert!(bad(vec![e]));
        // Inline values up to B/16; block values above it, up to 64 KiB, with the right count.
        let inline =
            |n: usize| attr_entry(6, b"user.a", AttrValue::Inline(Arc::from(vec![1u8; n])));
        assert!(!bad(vec![inline(256)]));
        assert!(bad(vec![inline(257)]));
        let blocks = |len: u32, ids: &[u64]| {
            attr_entry(
                6,
                b"user.a",
                AttrValue::Blocks {
                    len,
                    ids: Arc::from(ids),
                },
            )
        };
        assert!(!bad(vec![blocks(257, &[5])]));
        assert!(bad(vec![blocks(256, &[5])]));
        assert!(bad(vec![blocks(5000, &[5])]));
        assert!(bad(vec![blocks(5000, &[5, 5])]));
        assert!(bad(vec![blocks(5000, &[1, 5])]));
        assert!(bad(vec![blocks(65537, &[5; 17])]));
        let ids: Vec<u64> = (10..27).collect();
        assert!(!bad(vec![blocks(65536, &ids)]));
    }

    #[test]
    fn range_messages_round_trip_and_must_not_overlap() {
        let (lo, hi) = attr_range(6, 3);
        let range = Message {
            key: lo.clone(),
            op: MessageOp::DeleteRange(hi.clone()),
        };
        let point = |key: Key| Message {
            key,
            op: MessageOp::Delete,
        };
        let internal = |messages: Vec<Message>| NodeImage {
            level: 1,
            body: NodeBody::Internal {
                children: vec![2, 3],
                pivots: vec![Key::lowest(100, 0)],
                messages,
            },
        };
        let node = internal(vec![
            point(Key::new(6, 1, b"a")),
            range.clone(),
            point(hi.successor().unwrap()),
        ]);
        let block = encode(9, &node, B);
        assert_eq!(decode(&block, 9).unwrap(), node);
        assert_eq!(
            message_size(&range),
            MESSAGE_FIXED + PIVOT_FIXED,
            "two empty-named keys"
        );
        // A point inside the range, a point at its start, an empty range: corrupt.
        let inside = Key::new(6, lo.hash + 5, b"user.x");
        assert!(validate(9, &internal(vec![range.clone(), point(inside)]), B).is_err());
        let at_start = Key::new(lo.dir, lo.hash, b"a");
        assert!(validate(9, &internal(vec![range.clone(), point(at_start)]), B).is_err());
        let empty = Message {
            key: hi.clone(),
            op: MessageOp::DeleteRange(hi.clone()),
        };
        assert!(validate(9, &internal(vec![empty]), B).is_err());
        // A point right at the range's end is outside it.
        let after = Key::new(hi.dir, hi.hash, b"a");
        assert!(validate(9, &internal(vec![range, point(after)]), B).is_ok());
    }

    #[test]
    fn successor_is_the_next_key() {
        let k = Key::new(1, 2, b"ab");
        assert_eq!(k.successor().unwrap(), Key::new(1, 2, b"ab\0"));
        let mut long = vec![b'a'; 255];
        assert_eq!(
            Key::new(1, 2, &long).successor().unwrap(),
            Key::new(1, 2, &[&long[..254], b"b"].concat())
        );
        long[253] = 0xff;
        long[254] = 0xff;
        assert_eq!(
            Key::new(1, 2, &long).successor().unwrap(),
            Key::new(1, 2, &[&long[..252], b"b"].concat())
        );
        assert_eq!(
            Key::new(1, 2, &[0xff; 255]).successor().unwrap(),
            Key::lowest(1, 3)
        );
        assert_eq!(
            Key::new(1, u64::MAX, &[0xff; 255]).successor().unwrap(),
            Key::lowest(2, 0)
        );
        assert_eq!(Key::new(u64::MAX, u64::MAX, &[0xff; 255]).successor(), None);
        for k in [Key::new(1, 2, b"ab"), Key::new(1, 2, &[0x7f; 255])] {
            assert!(k < k.successor().unwrap());
        }
    }

    #[test]
    fn value_blocks_round_trip_and_are_checked() {
        let node = NodeImage {
            level: 0,
            body: NodeBody::Value {
                owner: 77,
                data: Arc::from(vec![0xab; 4056]),
            },
        };
        let block = encode(12, &node, B);
        assert_eq!(block[4], BlockKind::Value as u8);
        assert_eq!(crate::format::get_u64(&block, 16), 12);
        assert_eq!(crate::format::get_u64(&block, 24), 77);
        assert_eq!(crate::format::get_u32(&block, 32), 4056);
        assert_eq!(decode(&block, 12).unwrap(), node);
        assert!(is_corrupt(decode(&block, 13)));
        let mut b = block.clone();
        crate::format::put_u32(&mut b, 32, 4057);
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 12)));
        let mut b = block.clone();
        crate::format::put_u32(&mut b, 32, 0);
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 12)));
        let mut b = block;
        b[5] = 1;
        reseal(&mut b);
        assert!(is_corrupt(decode(&b, 12)));
    }

    #[test]
    fn attr_hashes_keep_generations_apart() {
        let h = name_hash(7, b"user.k");
        assert!(attr_hash(0, h) >= ATTR_HASH_BASE);
        assert!(attr_hash(u32::MAX, u64::MAX >> 2) < ATTR_HASH_END);
        assert_eq!(attr_generation(attr_hash(41, h)), 41);
        let (lo, hi) = attr_range(9, u32::MAX);
        assert_eq!(hi.hash, ATTR_HASH_END);
        assert!(lo < Key::new(9, attr_hash(u32::MAX, h), b"user.k"));
        assert!(attr_range(9, 4).1 <= attr_range(9, 5).0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn decode_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..5000), seal in any::<bool>()) {
            let mut block = bytes;
            if seal && block.len() >= B {
                // Give the parser a chance: a valid header and CRC over random content.
                BlockHeader::new(BlockKind::Node, block[5] % 3, 9, 0).write(&mut block);
                reseal(&mut block);
            }
            let _ = decode(&block, 9);
        }

        #[test]
        fn decode_never_panics_on_bit_flips(which in 0u8..3, flips in proptest::collection::vec((0usize..600, 0u8..8), 1..6)) {
            let (id, node) = match which {
                0 => (8, sample_internal()),
                1 => (42, sample_leaf()),
                _ => (4, sample_attrs()),
            };
            let mut block = encode(id, &node, B);
            for (at, bit) in flips {
                block[at] ^= 1 << bit;
            }
            reseal(&mut block);
            if let Ok(decoded) = decode(&block, id) {
                // Whatever survives is a valid node that re-encodes to itself.
                prop_assert!(validate(id, &decoded, B).is_ok());
                prop_assert_eq!(decode(&encode(id, &decoded, B), id).unwrap(), decoded);
            }
        }
    }
}
