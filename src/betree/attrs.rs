//! Extended attributes in the tree: records in the attribute key space of their inode
//! (`format::node::attr_hash`), values of up to `attr_inline_max` bytes inside the record and
//! longer ones in `VALUE` blocks — nodes of their own, named by ids from the node ids' space,
//! so the node map finds them, the cleaner moves them and the log writer writes them exactly
//! as it does tree nodes. A record and the value blocks it names change in one mutation.

use super::node::Node;
use super::stop::Stop;
use super::tree::{BeTree, NodeLoader};
use super::txn::Txn;
use crate::format::node::{
    self as fmt, attr_inline_max, value_bytes_per_block, AttrValue, Key, Message, MessageOp,
    NodeBody, NodeImage, Value,
};
use crate::{FsError, Result};
use std::sync::Arc;

fn bad_value<T>(detail: String) -> std::result::Result<T, Stop> {
    Err(Stop::Fail(FsError::corrupt("attribute value", detail)))
}

impl BeTree {
    /// The key of attribute `name` of inode `ino` at `generation`.
    pub fn attr_key(&self, ino: u64, generation: u32, name: &[u8]) -> Key {
        Key::new(ino, fmt::attr_hash(generation, self.hash(name)), name)
    }

    /// The record of the attribute under `key` (its value may be in blocks).
    pub fn attr_get(&self, ld: &dyn NodeLoader, key: &Key) -> Result<Option<AttrValue>> {
        match self.lookup_value(ld, key)? {
            None => Ok(None),
            Some(Value::Attr(a)) => Ok(Some(a)),
            Some(Value::Entry(_)) => Err(FsError::corrupt(
                "attribute",
                format!("a directory entry under attribute key {key:?}"),
            )),
        }
    }

    /// The value of the attribute under `key`, read in one consistent view of the tree (the
    /// record and its blocks, which a concurrent change frees together).
    pub fn attr_read(&self, ld: &dyn NodeLoader, key: &Key) -> Result<Option<Vec<u8>>> {
        let per = value_bytes_per_block(self.policy.block_size);
        self.read_op(ld, |state| {
            let value = match super::read::lookup(state, key)? {
                None => return Ok(None),
                Some(Value::Attr(a)) => a,
                Some(Value::Entry(_)) => return bad_value(format!("a directory entry at {key:?}")),
            };
            let (len, ids) = match value {
                AttrValue::Inline(bytes) => return Ok(Some(bytes.to_vec())),
                AttrValue::Blocks { len, ids } => (len as usize, ids),
            };
            let mut out = Vec::with_capacity(len);
            for (k, &id) in ids.iter().enumerate() {
                let node = state.cache.node(id).ok_or(Stop::Miss(id))?;
                let want = per.min(len - k * per);
                match node.value_data() {
                    Some((owner, data)) if owner == key.dir && data.len() == want => {
                        out.extend_from_slice(data)
                    }
                    _ => {
                        return bad_value(format!(
                            "block {k} (id {id}) of the value of {key:?} is not its part"
                        ))
                    }
                }
            }
            Ok(Some(out))
        })
    }

    /// Every attribute record with a key in `[lower, upper)`, in key order.
    pub fn attr_scan(
        &self,
        ld: &dyn NodeLoader,
        lower: &Key,
        upper: &Key,
    ) -> Result<Vec<(Key, AttrValue)>> {
        let mut out = Vec::new();
        let mut start = lower.clone();
        loop {
            let range = self.read_op(ld, |state| super::read::read_leaf_range(state, &start))?;
            for entry in range.entries {
                if entry.key >= *upper {
                    return Ok(out);
                }
                match entry.value {
                    Value::Attr(a) => out.push((entry.key, a)),
                    Value::Entry(_) => {
                        return Err(FsError::corrupt(
                            "attribute",
                            format!("a directory entry under attribute key {:?}", entry.key),
                        ))
                    }
                }
            }
            match range.next {
                Some(next) if next < *upper => start = next,
                _ => return Ok(out),
            }
        }
    }

    /// The message `attr_set` of `value` under `key` applies, for `preload`: a long value's
    /// blocks are named by placeholder ids (their number, not their values, sizes the message,
    /// and the message, not the blocks, decides which nodes the mutation reads).
    pub fn attr_set_message(&self, key: Key, value: &[u8]) -> Message {
        let bs = self.policy.block_size;
        let stored = if value.len() <= attr_inline_max(bs) {
            AttrValue::Inline(Arc::from(value))
        } else {
            let n = value.len().div_ceil(value_bytes_per_block(bs));
            AttrValue::Blocks {
                len: value.len() as u32,
                ids: Arc::from(vec![0u64; n]),
            }
        };
        Message {
            key,
            op: MessageOp::Insert(Value::Attr(stored)),
        }
    }

    /// The message `attr_remove` applies, for `preload`.
    pub fn attr_remove_message(&self, key: Key) -> Message {
        Message {
            key,
            op: MessageOp::Delete,
        }
    }

    /// The message `delete_range` applies, for `preload`.
    pub fn delete_range_message(&self, lower: Key, upper: Key) -> Message {
        Message {
            key: lower,
            op: MessageOp::DeleteRange(upper),
        }
    }

    /// Store `value` under `key` (replacing what is there): inline when short, else in new
    /// `VALUE` blocks of inode `owner`. `replaced` are the value blocks of the record it
    /// replaces, freed in the same mutation.
    pub fn attr_set(
        &self,
        ld: &dyn NodeLoader,
        key: Key,
        owner: u64,
        value: &[u8],
        replaced: &[u64],
    ) -> Result<()> {
        if !key.is_attr() || value.len() > fmt::ATTR_VALUE_MAX {
            return crate::error::err!(EINVAL);
        }
        let bs = self.policy.block_size;
        if value.len() <= attr_inline_max(bs) && replaced.is_empty() {
            let message = Message {
                key,
                op: MessageOp::Insert(Value::Attr(AttrValue::Inline(Arc::from(value)))),
            };
            if self.apply_in_place(&message) {
                return Ok(());
            }
            return self.mutate(ld, |txn| txn.apply_at_root(message.clone()));
        }
        let parts: Vec<Arc<[u8]>> = if value.len() <= attr_inline_max(bs) {
            Vec::new()
        } else {
            value
                .chunks(value_bytes_per_block(bs))
                .map(Arc::from)
                .collect()
        };
        self.mutate(ld, |txn| {
            free_values(txn, replaced);
            let stored = if parts.is_empty() {
                AttrValue::Inline(Arc::from(value))
            } else {
                let ids: Vec<u64> = parts
                    .iter()
                    .map(|data| {
                        txn.alloc(Node::from_image(NodeImage {
                            level: 0,
                            body: NodeBody::Value {
                                owner,
                                data: data.clone(),
                            },
                        }))
                    })
                    .collect();
                AttrValue::Blocks {
                    len: value.len() as u32,
                    ids: Arc::from(ids),
                }
            };
            txn.apply_at_root(Message {
                key: key.clone(),
                op: MessageOp::Insert(Value::Attr(stored)),
            })
        })
    }

    /// Remove the attribute under `key` and free its value blocks `replaced`.
    pub fn attr_remove(&self, ld: &dyn NodeLoader, key: Key, replaced: &[u64]) -> Result<()> {
        let message = Message {
            key,
            op: MessageOp::Delete,
        };
        if replaced.is_empty() && self.apply_in_place(&message) {
            return Ok(());
        }
        self.mutate(ld, |txn| {
            free_values(txn, replaced);
            txn.apply_at_root(message.clone())
        })
    }

    /// Delete every record with a key in `[lower, upper)` with one message (however many
    /// nodes they fill, none is read to do it) and free the value blocks `ids`. The caller
    /// promises that no key of the range is ever inserted again: a range message is cut
    /// around newer keys it meets, but never asked to.
    pub fn delete_range(
        &self,
        ld: &dyn NodeLoader,
        lower: Key,
        upper: Key,
        ids: &[u64],
    ) -> Result<()> {
        if upper <= lower {
            return Ok(());
        }
        let message = Message {
            key: lower,
            op: MessageOp::DeleteRange(upper),
        };
        self.mutate(ld, |txn| {
            free_values(txn, ids);
            txn.apply_at_root(message.clone())
        })
    }
}

/// Free value blocks that are allocated (a damaged record may name others: those are left
/// to the checker).
fn free_values(txn: &mut Txn, ids: &[u64]) {
    for &id in ids {
        if txn.is_allocated(id) {
            txn.free_value(id);
        } else {
            log::warn!("value block {id} is not allocated; not freed");
        }
    }
}
