//! Pass 6: the B-epsilon tree and the node map. The tree checks its own invariants (key order,
//! pivots, levels, messages, node size, no node reached twice) reading nodes through the node
//! map; here the node map is held against what the tree reaches: every reachable node has an
//! address below `next_node_id`, and every address in the node map belongs to a reachable node
//! (anything else is a leaked log block). Then the entries are listed for pass 7.

use super::context::{damage_or_failure, LogReader, Sink};
use super::entry::Entry;
use super::findings::Finding;
use super::pass1_checkpoints::Loaded;
use super::salvage::{salvage, Salvaged};
use crate::betree::{AttrValue, BeTree, NodeLoader, Value};
use crate::format::node::{self as fmt, value_bytes_per_block, NodeBody};
use crate::format::{BlockHeader, BlockKind};
use crate::{FsError, Result};
use std::collections::{BTreeSet, HashMap};

pub const NAME: &str = "directory tree";

/// Node cache of the tree opened for checking.
const TREE_CACHE_BYTES: u64 = 16 << 20;

/// An extended attribute record: key (`ino`, `hash`, `name`), the value's length and the
/// `VALUE` blocks holding it (none when inline). The value itself is kept only for ACLs
/// (`value`), which pass 7 parses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrRecord {
    pub ino: u64,
    pub hash: u64,
    pub name: Vec<u8>,
    pub len: usize,
    pub ids: Vec<u64>,
    pub value: Option<Vec<u8>>,
}

impl AttrRecord {
    /// Report this attribute as bad (`why`) in pass `pass`, for fsck -y to remove.
    pub fn report_bad(&self, sink: &mut Sink, pass: &'static str, why: &str) {
        sink.error(
            pass,
            format!(
                "inode {}: attribute '{}': {why}",
                self.ino,
                self.name.escape_ascii()
            ),
        );
        sink.found(Finding::Attribute {
            ino: self.ino,
            hash: self.hash,
            name: self.name.clone(),
        });
    }
}

/// Attribute values worth keeping for pass 7.
fn keeps_value(name: &[u8]) -> bool {
    name.starts_with(b"system.posix_acl_")
}

/// What pass 7 checks: the entries and attributes, and the tree (for its name hash).
pub struct Namespace {
    pub tree: BeTree,
    pub entries: Vec<Entry>,
    /// In key order, so each inode's are together.
    pub attrs: Vec<AttrRecord>,
    /// `attrs` were listed from the tree (not so when the entries come from a listing).
    pub attrs_known: bool,
    /// Every node the tree reaches.
    pub nodes: BTreeSet<u64>,
    /// The tree itself checked out (else the entries come from a listing).
    pub tree_ok: bool,
}

/// Reads tree nodes through the node map; a node's block must say it is that node.
struct NodeMapLoader<'a, 'b> {
    log: &'a LogReader<'b>,
    addrs: &'a [u64],
    /// Node blocks read ahead (the check and the listing each visit every node).
    read_ahead: HashMap<u64, Vec<u8>>,
}

/// Most node blocks read ahead (256 MiB of 4 KiB blocks).
const READ_AHEAD_NODES: usize = 65536;

impl<'a, 'b> NodeMapLoader<'a, 'b> {
    fn new(log: &'a LogReader<'b>, addrs: &'a [u64]) -> Result<Self> {
        let mut by_addr: Vec<(u64, u64)> = addrs
            .iter()
            .enumerate()
            .filter(|&(id, &a)| id > 0 && a != 0)
            .map(|(id, &a)| (a, id as u64))
            .collect();
        let mut read_ahead = HashMap::new();
        if by_addr.len() <= READ_AHEAD_NODES {
            by_addr.sort_unstable();
            by_addr.dedup_by_key(|p| p.0);
            let sorted: Vec<u64> = by_addr.iter().map(|p| p.0).collect();
            let id_of: HashMap<u64, u64> = by_addr.iter().copied().collect();
            log.read_sorted(&sorted, &mut |addr, block| {
                if let Ok(b) = block {
                    read_ahead.insert(id_of[&addr], b.to_vec());
                }
                Ok(())
            })?;
        }
        Ok(NodeMapLoader {
            log,
            addrs,
            read_ahead,
        })
    }
}

impl NodeLoader for NodeMapLoader<'_, '_> {
    fn load_node(&self, id: u64) -> Result<Vec<u8>> {
        let bad = |d: String| FsError::corrupt("directory tree", d);
        let addr = self.addrs.get(id as usize).copied().unwrap_or(0);
        if addr == 0 {
            return Err(bad(format!("node {id} has no address in the node map")));
        }
        let raw = match self.read_ahead.get(&id) {
            Some(b) => b.clone(),
            None => self
                .log
                .read(addr)?
                .map_err(|why| bad(format!("node {id}: {why}")))?,
        };
        let h = BlockHeader::read(&raw).map_err(|e| bad(format!("node {id} at {addr}: {e}")))?;
        let kind_ok = match h.kind {
            BlockKind::Node => h.index == 0,
            BlockKind::Value => true,
            _ => false,
        };
        if !kind_ok || h.owner != id {
            return Err(bad(format!(
                "node {id} at {addr}: the block is {:?} of owner {}, index {}",
                h.kind, h.owner, h.index
            )));
        }
        Ok(raw)
    }
}

/// What pass 6 hands on: the namespace for pass 7 (None when the tree cannot be listed), and
/// when the tree is damaged, what a rebuild could salvage of it.
pub struct TreeResult {
    pub namespace: Option<Namespace>,
    pub salvaged: Option<Salvaged>,
}

pub fn run(
    sink: &mut Sink,
    log: &LogReader,
    state: &Loaded,
    listed: Option<Vec<Entry>>,
) -> Result<TreeResult> {
    let listed_given = listed.is_some();
    let mut damaged = false;
    let namespace = check_and_list(sink, log, state, listed, &mut damaged)?;
    // With a listing given (tests), the tree on the device is not what is checked.
    let salvaged = if damaged && !listed_given {
        let loader = NodeMapLoader::new(log, &state.tables.nodes.addrs)?;
        let s = salvage(&loader);
        sink.note(|| {
            format!(
                "a rebuild would keep {} entries: {} nodes read, {} lost, {} entries dropped",
                s.entries.len(),
                s.nodes_read,
                s.nodes_lost,
                s.dropped
            )
        });
        Some(s)
    } else {
        None
    };
    Ok(TreeResult {
        namespace,
        salvaged,
    })
}

fn check_and_list(
    sink: &mut Sink,
    log: &LogReader,
    state: &Loaded,
    listed: Option<Vec<Entry>>,
    damaged: &mut bool,
) -> Result<Option<Namespace>> {
    let addrs = &state.tables.nodes.addrs;
    // Nodes made after the checkpoint and rolled forward have ids at or past its next node id;
    // mount continues past the highest id in use, and so does the check.
    let next_id = if state.head.addr != state.cp.log_head {
        state.cp.next_node_id.max(state.tables.nodes.used_limit())
    } else {
        state.cp.next_node_id
    };
    sink.progress(6, NAME, 0, 1);
    if addrs.first().is_some_and(|&a| a != 0) {
        sink.error(NAME, "node map entry 0 is in use (node id 0 is never used)");
        sink.found(Finding::NodeMapEntry { id: 0 });
    }
    for (id, &a) in addrs.iter().enumerate().skip(1) {
        if a != 0 && id as u64 >= next_id {
            sink.found(Finding::NextNodeId);
            sink.error(
                NAME,
                format!(
                    "node map entry {id} names log block {a}, but ids from {next_id} (the \
                     checkpoint's next node id) were never used"
                ),
            );
        }
    }
    // The checker never allocates nodes; free ids only matter to a tree that would.
    let free_ids = state.tables.nodes.free_ids(next_id.min(addrs.len() as u64));
    let tree = BeTree::open(
        log.sb.block_size,
        log.sb.hash_seed,
        TREE_CACHE_BYTES,
        next_id,
        free_ids,
    );
    let loader = NodeMapLoader::new(log, addrs)?;
    let mut reached = BTreeSet::new();
    let tree_ok = match tree.check(&loader) {
        Ok(stats) => {
            for &id in &stats.node_ids {
                if !reached.insert(id) {
                    sink.error(NAME, format!("node {id} is reached twice"));
                    sink.found(Finding::TreeDamaged);
                    *damaged = true;
                }
                if id == 0 || id >= next_id {
                    sink.found(Finding::NextNodeId);
                    sink.error(
                        NAME,
                        format!("reachable node {id} is not below the next node id {next_id}"),
                    );
                }
            }
            sink.stats.tree_nodes = reached.len() as u64;
            true
        }
        Err(e) => {
            let why = damage_or_failure(e)?;
            sink.error(NAME, format!("the directory tree is damaged: {why}"));
            sink.found(Finding::TreeDamaged);
            *damaged = true;
            false
        }
    };
    sink.progress(6, NAME, 1, 2);

    let mut attrs = Vec::new();
    let attrs_known = listed.is_none();
    let entries = match listed {
        Some(listed) => {
            sink.note(|| "directory entries come from a listing, not from the tree".into());
            listed
        }
        None if tree_ok => {
            let mut v = Vec::new();
            let listing = tree.for_each(&loader, &mut |dir, hash, name, value| match value {
                Value::Entry(value) => v.push(Entry {
                    dir,
                    hash,
                    name: name.to_vec(),
                    ino: value.ino,
                    kind: value.kind,
                }),
                Value::Attr(a) => attrs.push(AttrRecord {
                    ino: dir,
                    hash,
                    name: name.to_vec(),
                    len: a.len(),
                    ids: a.ids().to_vec(),
                    value: match a {
                        AttrValue::Inline(bytes) if keeps_value(name) => Some(bytes.to_vec()),
                        _ => None,
                    },
                }),
            });
            if let Err(e) = listing {
                let why = damage_or_failure(e)?;
                sink.error(NAME, format!("listing the directory tree fails: {why}"));
                sink.found(Finding::TreeDamaged);
                *damaged = true;
                return Ok(None);
            }
            check_value_blocks(sink, &loader, next_id, &mut reached, &mut attrs);
            v
        }
        None => {
            sink.warning(
                NAME,
                "directory entries are not checked: the tree cannot be trusted",
            );
            return Ok(None);
        }
    };
    if tree_ok {
        leaked_ids(sink, addrs, &reached);
    }
    for w in entries.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if (a.dir, a.hash, &a.name) >= (b.dir, b.hash, &b.name) {
            sink.found(Finding::TreeDamaged);
            *damaged = true;
            sink.error(
                NAME,
                format!(
                    "entries out of key order or repeated: ({}, {:#x}, '{}') then ({}, {:#x}, '{}')",
                    a.dir,
                    a.hash,
                    a.name.escape_ascii(),
                    b.dir,
                    b.hash,
                    b.name.escape_ascii()
                ),
            );
        }
    }
    sink.stats.entries = entries.len() as u64;
    sink.stats.attributes = attrs.len() as u64;
    sink.progress(6, NAME, 2, 2);
    Ok(Some(Namespace {
        tree,
        entries,
        attrs,
        attrs_known,
        nodes: reached,
        tree_ok,
    }))
}

/// Node map entries that nothing reaches: neither the tree nor a live attribute's value.
fn leaked_ids(sink: &mut Sink, addrs: &[u64], reached: &BTreeSet<u64>) {
    for (id, &a) in addrs.iter().enumerate().skip(1) {
        if a != 0 && !reached.contains(&(id as u64)) {
            sink.found(Finding::NodeMapEntry { id: id as u64 });
            sink.error(
                NAME,
                format!(
                    "node map entry {id} names log block {a}, but neither the tree nor an \
                     attribute reaches it (leaked)"
                ),
            );
        }
    }
}

/// Every `VALUE` block a live attribute names must be allocated, used once, and hold its
/// part of that attribute's value; the blocks join what the node map may name. An attribute
/// whose value cannot be read is reported for removal (and its blocks are not counted as
/// reached, so the repair frees them).
fn check_value_blocks(
    sink: &mut Sink,
    loader: &NodeMapLoader,
    next_id: u64,
    reached: &mut BTreeSet<u64>,
    attrs: &mut [AttrRecord],
) {
    let bs = loader.log.block_size() as usize;
    let per = value_bytes_per_block(bs);
    for a in attrs.iter_mut().filter(|a| !a.ids.is_empty()) {
        let mut value = keeps_value(&a.name).then(Vec::new);
        let mut why = None;
        for (k, &id) in a.ids.iter().enumerate() {
            let want = per.min(a.len - k * per);
            let part = if id >= next_id || reached.contains(&id) {
                Err(format!(
                    "block id {id} is not free for it (used, or never allocated)"
                ))
            } else {
                loader
                    .load_node(id)
                    .and_then(|raw| fmt::decode(&raw, id))
                    .map_err(|e| e.to_string())
                    .and_then(|image| match image.body {
                        NodeBody::Value { owner, data } if owner == a.ino && data.len() == want => {
                            Ok(data)
                        }
                        _ => Err(format!("block id {id} is not part {k} of this value")),
                    })
            };
            match part {
                Ok(data) => {
                    if let Some(v) = &mut value {
                        v.extend_from_slice(&data);
                    }
                }
                Err(e) => {
                    why = Some(e);
                    break;
                }
            }
        }
        match why {
            None => {
                reached.extend(a.ids.iter().copied());
                sink.stats.value_blocks += a.ids.len() as u64;
                a.value = value;
            }
            Some(why) => {
                a.report_bad(sink, NAME, &format!("its value cannot be read: {why}"));
                a.ids.clear();
            }
        }
    }
}
