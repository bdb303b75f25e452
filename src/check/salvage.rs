//! Salvaging the directory entries and attributes of a damaged B-epsilon tree, for a repair
//! that rebuilds it.
//!
//! The walk goes from the root through every node it can read, skipping what it cannot (an
//! unreadable or undecodable block, a node reached twice, a child whose level is not below
//! its parent's, a value block where a node should be) and the subtrees under it. A key's
//! current state is the one nearest the root: a message buffered in an internal node is newer
//! than everything below it on the key's path, so for each key the entry or message found at
//! the smallest depth wins, and a delete there — or a range delete covering the key, above
//! where the key was found — means the record is gone. Names that no directory may hold are
//! dropped. The entries of unreadable nodes are lost; the inodes they named become
//! unreachable and the repair's next round reconnects them under /lost+found. Attributes keep
//! their keys and values (read from their value blocks; one that cannot be read is dropped).

use super::entry::Entry;
use crate::betree::NodeLoader;
use crate::format::node::{self as fmt, AttrValue, Key, MessageOp, NodeBody, Value};
use crate::format::ROOT_NODE_ID;
use std::collections::{BTreeMap, HashSet};

/// An attribute a rebuild puts back: its key and its whole value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SalvagedAttr {
    pub ino: u64,
    pub hash: u64,
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

/// What a salvage walk found.
#[derive(Clone, Debug, Default)]
pub struct Salvaged {
    /// The entries that survive, in key order.
    pub entries: Vec<Entry>,
    /// The attributes that survive, in key order.
    pub attrs: Vec<SalvagedAttr>,
    /// Nodes read and decoded.
    pub nodes_read: u64,
    /// Nodes that could not be read, decoded or placed (their subtrees are not visited).
    pub nodes_lost: u64,
    /// Entries dropped for an illegal name or inode number, attributes whose value could not
    /// be read.
    pub dropped: u64,
}

/// A name a directory may hold (what `Fs::check_name` and '.'/'..' allow).
fn legal_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= crate::format::NAME_MAX
        && !name.contains(&b'/')
        && !name.contains(&0)
        && name != b"."
        && name != b".."
}

/// Every key seen with the depth of the node nearest the root that holds it and its value
/// there (None: a delete).
type Seen = BTreeMap<Key, (u32, Option<Value>)>;

/// Walk the tree through `ld` from the root and collect what can be read of it.
pub fn salvage(ld: &dyn NodeLoader) -> Salvaged {
    let mut out = Salvaged::default();
    let mut found = Seen::new();
    // Range deletes: (start, end, depth).
    let mut ranges: Vec<(Key, Key, u32)> = Vec::new();
    let mut note = |key: Key, depth: u32, v: Option<Value>| match found.get(&key) {
        Some(&(d, _)) if d <= depth => {}
        _ => {
            found.insert(key, (depth, v));
        }
    };
    let mut visited: HashSet<u64> = HashSet::new();
    // (node id, depth, the level it must be below: None for the root)
    let mut stack: Vec<(u64, u32, Option<u8>)> = vec![(ROOT_NODE_ID, 0, None)];
    while let Some((id, depth, below)) = stack.pop() {
        if !visited.insert(id) {
            out.nodes_lost += 1;
            continue;
        }
        let image = match ld.load_node(id).and_then(|b| fmt::decode(&b, id)) {
            Ok(image) if !image.is_value() => image,
            _ => {
                out.nodes_lost += 1;
                continue;
            }
        };
        if below.is_some_and(|parent| image.level >= parent) {
            out.nodes_lost += 1;
            continue;
        }
        out.nodes_read += 1;
        match image.body {
            NodeBody::Leaf { entries } => {
                for e in entries {
                    note(e.key, depth, Some(e.value));
                }
            }
            NodeBody::Internal {
                children, messages, ..
            } => {
                for m in messages {
                    match m.op {
                        MessageOp::Insert(v) => note(m.key, depth, Some(v)),
                        MessageOp::Delete => note(m.key, depth, None),
                        MessageOp::DeleteRange(end) => ranges.push((m.key, end, depth)),
                    }
                }
                // Reversed so that children are visited left to right.
                for &child in children.iter().rev() {
                    stack.push((child, depth + 1, Some(image.level)));
                }
            }
            NodeBody::Value { .. } => unreachable!("value blocks were skipped"),
        }
    }
    let deleted_by_range = |key: &Key, depth: u32| {
        ranges
            .iter()
            .any(|(start, end, d)| *d < depth && start <= key && key < end)
    };
    for (key, (depth, value)) in found {
        let Some(v) = value else { continue };
        if deleted_by_range(&key, depth) {
            continue;
        }
        match v {
            Value::Entry(v) => {
                if !legal_name(&key.name) || key.dir == 0 || v.ino == 0 {
                    out.dropped += 1;
                    continue;
                }
                out.entries.push(Entry {
                    dir: key.dir,
                    hash: key.hash,
                    name: key.name.to_vec(),
                    ino: v.ino,
                    kind: v.kind,
                });
            }
            Value::Attr(a) => match read_value(ld, key.dir, &a) {
                Some(value) => out.attrs.push(SalvagedAttr {
                    ino: key.dir,
                    hash: key.hash,
                    name: key.name.to_vec(),
                    value,
                }),
                None => out.dropped += 1,
            },
        }
    }
    out
}

/// The whole value of an attribute of `ino`, if every block of it can be read.
fn read_value(ld: &dyn NodeLoader, ino: u64, a: &AttrValue) -> Option<Vec<u8>> {
    let (len, ids) = match a {
        AttrValue::Inline(bytes) => return Some(bytes.to_vec()),
        AttrValue::Blocks { len, ids } => (*len as usize, ids),
    };
    let mut out = Vec::with_capacity(len);
    for &id in ids.iter() {
        let image = ld.load_node(id).and_then(|b| fmt::decode(&b, id)).ok()?;
        match image.body {
            NodeBody::Value { owner, data } if owner == ino => out.extend_from_slice(&data),
            _ => return None,
        }
    }
    (out.len() == len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::betree::BeTree;
    use crate::{FsError, Result};
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Node blocks by id, some of which can be made unreadable.
    #[derive(Default)]
    struct Blocks(Mutex<HashMap<u64, Vec<u8>>>);

    impl NodeLoader for Blocks {
        fn load_node(&self, id: u64) -> Result<Vec<u8>> {
            self.0
                .lock()
                .unwrap()
                .get(&id)
                .cloned()
                .ok_or_else(|| FsError::corrupt("test", format!("no node {id}")))
        }
    }

    fn v(ino: u64) -> crate::format::node::DirValue {
        crate::format::node::DirValue { ino, kind: 1 }
    }

    /// A tree of `n` entries in directory 1 (names f<i> -> inode 100+i) whose last `removed`
    /// names were removed again (so deletes sit in buffers), written out to `Blocks`.
    fn tree(n: u64, removed: u64) -> (BeTree, Blocks) {
        let blocks = Blocks::default();
        let t = BeTree::new_empty(4096, 7, 64 << 20);
        for i in 0..n {
            t.insert(&blocks, 1, format!("f{i}").as_bytes(), v(100 + i))
                .unwrap();
        }
        for i in n - removed..n {
            t.remove(&blocks, 1, format!("f{i}").as_bytes()).unwrap();
        }
        let dirty = t.take_dirty();
        let ids: Vec<u64> = dirty.nodes.iter().map(|(id, _)| *id).collect();
        for (id, block) in dirty.nodes {
            blocks.0.lock().unwrap().insert(id, block);
        }
        t.written(&ids);
        (t, blocks)
    }

    #[test]
    fn a_sound_tree_is_salvaged_whole_with_its_buffered_messages() {
        let (t, blocks) = tree(5000, 700);
        let stats = t.check(&blocks).unwrap();
        assert!(
            stats.height() >= 3 && stats.buffered_messages > 0,
            "{stats:?}"
        );
        let s = salvage(&blocks);
        assert_eq!((s.nodes_lost, s.dropped), (0, 0));
        assert_eq!(s.nodes_read, stats.node_count());
        let mut want: Vec<(u64, Vec<u8>, u64)> = Vec::new();
        t.for_each(&blocks, &mut |dir, _, name, value| {
            want.push((dir, name.to_vec(), value.as_entry().unwrap().ino))
        })
        .unwrap();
        let got: Vec<(u64, Vec<u8>, u64)> = s
            .entries
            .iter()
            .map(|e| (e.dir, e.name.clone(), e.ino))
            .collect();
        assert_eq!(got.len(), 4300);
        assert_eq!(got, want);
    }

    #[test]
    fn an_unreadable_node_loses_only_its_own_subtree() {
        let (t, blocks) = tree(5000, 0);
        let stats = t.check(&blocks).unwrap();
        // Drop one node that is not the root: its subtree is lost, the rest is found.
        let victim = *stats
            .node_ids
            .iter()
            .find(|&&id| id != ROOT_NODE_ID)
            .unwrap();
        blocks.0.lock().unwrap().get_mut(&victim).unwrap()[100] ^= 0xff;
        let s = salvage(&blocks);
        assert!(s.nodes_lost >= 1);
        assert!(
            s.entries.len() < 5000 && s.entries.len() > 2500,
            "{}",
            s.entries.len()
        );
        for e in &s.entries {
            let i: u64 = std::str::from_utf8(&e.name[1..]).unwrap().parse().unwrap();
            assert_eq!(e.ino, 100 + i, "a salvaged entry names the wrong inode");
        }
    }

    #[test]
    fn an_unreadable_root_yields_nothing_and_never_loops() {
        let (_, blocks) = tree(2000, 0);
        blocks.0.lock().unwrap().remove(&ROOT_NODE_ID);
        let s = salvage(&blocks);
        assert!(s.entries.is_empty() && s.nodes_read == 0 && s.nodes_lost == 1);
    }
}
