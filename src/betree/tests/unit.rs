//! Focused tests of single behaviours: API validation, root growth and collapse, the log
//! writer interface, id reuse, lazy loading, all-or-nothing mutations.

use super::harness::{name_of, value_of, Harness, Hashing, MemLoader, SEED};
use crate::betree::{BeTree, DirValue};
use crate::format::node::{self as fmt, Key};
use crate::format::ROOT_NODE_ID;
use crate::FsError;
use std::sync::atomic::Ordering;

const B: u32 = 4096;
const BIG_CACHE: u64 = 1 << 30;

fn errno(e: FsError) -> i32 {
    e.errno()
}

#[test]
fn empty_tree_basics_and_validation() {
    let disk = MemLoader::default();
    let tree = BeTree::new_empty(B, SEED, BIG_CACHE);
    assert_eq!(tree.next_node_id(), 2);
    assert_eq!(tree.dirty_count(), 1);
    assert_eq!(tree.lookup(&disk, 1, b"x").unwrap(), None);
    assert!(tree.scan(&disk, 1, 0, 10).unwrap().is_empty());
    let v = DirValue { ino: 5, kind: 2 };
    tree.insert(&disk, 1, b"x", v).unwrap();
    assert_eq!(tree.lookup(&disk, 1, b"x").unwrap(), Some(v));
    assert_eq!(tree.lookup(&disk, 2, b"x").unwrap(), None);
    tree.remove(&disk, 1, b"x").unwrap();
    tree.remove(&disk, 1, b"never there").unwrap();
    assert_eq!(tree.lookup(&disk, 1, b"x").unwrap(), None);

    assert_eq!(
        errno(tree.insert(&disk, 1, b"", v).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(
        errno(tree.insert(&disk, 1, &[b'a'; 256], v).unwrap_err()),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno(tree.lookup(&disk, 1, &[b'a'; 300]).unwrap_err()),
        libc::ENAMETOOLONG
    );
    assert_eq!(errno(tree.remove(&disk, 1, b"").unwrap_err()), libc::EINVAL);
    for kind in [0, 8, 255] {
        assert_eq!(
            errno(
                tree.insert(&disk, 1, b"k", DirValue { ino: 1, kind })
                    .unwrap_err()
            ),
            libc::EINVAL
        );
    }
    tree.insert(&disk, 1, &[b'a'; 255], v).unwrap();
    assert_eq!(tree.lookup(&disk, 1, &[b'a'; 255]).unwrap(), Some(v));
    assert_eq!(
        tree.hash(b"lost+found"),
        fmt::name_hash(SEED, b"lost+found")
    );
    tree.check(&disk).unwrap();
}

#[test]
fn root_grows_and_collapses_keeping_id_1() {
    let mut h = Harness::new(B, BIG_CACHE, Hashing::Real);
    let n = 20_000;
    for i in 0..n {
        h.insert(7, &name_of(i), value_of(i, 0));
    }
    let stats = h.check_all();
    assert!(stats.height() >= 3, "{stats:?}");
    assert!(stats.node_ids.contains(&ROOT_NODE_ID));
    let root_level = h
        .tree
        .state
        .read()
        .cache
        .node(ROOT_NODE_ID)
        .unwrap()
        .level();
    assert_eq!(root_level as usize + 1, stats.height());
    for i in (0..n).step_by(7) {
        h.check_lookup(7, &name_of(i));
    }
    for i in 0..n {
        h.remove(7, &name_of(i));
    }
    let stats = h.check_all();
    assert!(stats.node_count() <= 16, "tree did not shrink: {stats:?}");
    h.insert(7, b"again", value_of(1, 1));
    h.check_lookup(7, b"again");
    h.check_all();
}

#[test]
fn take_dirty_written_and_eviction() {
    let mut h = Harness::new(B, 4 * B as u64, Hashing::Real);
    for i in 0..3000 {
        h.insert(1, &name_of(i), value_of(i, 0));
    }
    let dirty = h.tree.dirty_count();
    assert!(dirty > 10);
    // Dirty nodes are never evicted, whatever the budget.
    assert_eq!(h.tree.cached_bytes(), dirty as u64 * B as u64);

    let batch = h.tree.take_dirty();
    assert_eq!(batch.nodes.len(), dirty);
    assert_eq!(h.tree.dirty_count(), 0);
    for (id, block) in &batch.nodes {
        let image = fmt::decode(block, *id).unwrap();
        assert!(image.encoded_len() <= B as usize);
    }
    // In flight: still cached until written.
    assert_eq!(h.tree.cached_bytes(), dirty as u64 * B as u64);
    // A change after the snapshot makes the root dirty again (a copy; the snapshot was
    // already encoded from the shared node).
    h.insert(1, b"after the snapshot", value_of(1, 2));
    assert_eq!(h.tree.dirty_count(), 1);
    let ids = h.disk.store(batch.nodes, &batch.freed);
    h.tree.written(&ids);
    // Now only the root (dirty) and at most the budget remain.
    assert!(
        h.tree.cached_bytes() <= 4 * B as u64,
        "{}",
        h.tree.cached_bytes()
    );
    h.persist();
    assert_eq!(h.tree.dirty_count(), 0);
    h.check_all();
    for i in (0..3000).step_by(13) {
        h.check_lookup(1, &name_of(i));
    }
    assert!(h.disk.loads() > 0, "evicted nodes were reloaded");
}

#[test]
fn open_loads_lazily_and_mark_dirty_rewrites() {
    let mut h = Harness::new(B, BIG_CACHE, Hashing::Real);
    for i in 0..2000 {
        h.insert(3, &name_of(i), value_of(i, 0));
    }
    h.reopen();
    assert_eq!(h.disk.loads(), 0, "open must not read anything");
    h.check_lookup(3, &name_of(5));
    let loads = h.disk.loads();
    assert!(loads >= 2, "root and a path were loaded");
    let stats = h.check_all();
    let some_leaf = *stats.node_ids.last().unwrap();
    h.tree.mark_dirty(&h.disk, some_leaf).unwrap();
    h.tree.mark_dirty(&h.disk, ROOT_NODE_ID).unwrap();
    let batch = h.tree.take_dirty();
    let mut ids: Vec<u64> = batch.nodes.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![ROOT_NODE_ID, some_leaf]);
    h.tree.written(&ids);
    let free = h.tree.next_node_id();
    assert_eq!(
        errno(h.tree.mark_dirty(&h.disk, free).unwrap_err()),
        libc::ENOENT
    );
    assert_eq!(
        errno(h.tree.mark_dirty(&h.disk, 0).unwrap_err()),
        libc::ENOENT
    );
}

#[test]
fn freed_ids_are_reported_once_and_reused_only_after() {
    let mut h = Harness::new(B, BIG_CACHE, Hashing::Real);
    for i in 0..6000 {
        h.insert(1, &name_of(i), value_of(i, 0));
    }
    h.persist();
    let before: Vec<u64> = h.check_all().node_ids;
    for i in 0..6000 {
        h.remove(1, &name_of(i));
    }
    // Nothing freed is reused before it is reported.
    let after = h.check_all().node_ids;
    let batch = h.tree.take_dirty();
    assert!(!batch.freed.is_empty());
    for id in &batch.freed {
        assert!(before.contains(id), "freed id {id} was never on disk");
        assert!(!after.contains(id), "freed id {id} still in the tree");
    }
    let ids: Vec<u64> = batch.nodes.iter().map(|(id, _)| *id).collect();
    h.tree.written(&ids);
    assert!(h.tree.take_dirty().freed.is_empty(), "reported twice");
    // Reported ids are reused before new ones.
    let next = h.tree.next_node_id();
    for i in 0..6000 {
        h.insert(1, &name_of(i), value_of(i, 1));
    }
    assert_eq!(h.tree.next_node_id(), next);
    h.check_all();
}

#[test]
fn ids_never_written_are_recycled_silently() {
    let mut h = Harness::new(B, BIG_CACHE, Hashing::Real);
    for i in 0..4000 {
        h.insert(1, &name_of(i), value_of(i, 0));
    }
    for i in 0..4000 {
        h.remove(1, &name_of(i));
    }
    h.check_all();
    let batch = h.tree.take_dirty();
    assert!(
        batch.freed.is_empty(),
        "nothing reached the disk, nothing to report"
    );
    assert_eq!(batch.nodes.len(), h.check_all().node_ids.len());
}

#[test]
fn scan_never_cuts_a_hash_group() {
    // Four hashes only: groups of hundreds of names, split across many leaves.
    let mut h = Harness::new(B, BIG_CACHE, Hashing::Colliding(4));
    for i in 0..1500 {
        h.insert(9, &name_of(i), value_of(i, 0));
    }
    h.insert(8, b"before", value_of(1, 0));
    h.insert(10, b"after", value_of(2, 0));
    let stats = h.check_all();
    assert!(stats.nodes_per_level[0] > 10);
    for max in [0, 1, 5, 100, 10_000] {
        for start in 0..5 {
            h.check_scan(9, start, max);
        }
    }
    let all = h.tree.scan(&h.disk, 9, 0, 1).unwrap();
    assert!(all.len() > 100 && all.iter().all(|item| item.hash == all[0].hash));
    h.reopen();
    h.check_scan(9, 1, 1);
    h.check_all();
}

#[test]
fn failed_load_leaves_the_tree_unchanged() {
    let mut h = Harness::new(B, B as u64, Hashing::Real);
    for i in 0..3000 {
        h.insert(1, &name_of(i), value_of(i, 0));
    }
    h.reopen();
    h.check_lookup(1, &name_of(0)); // root cached
    h.disk.failing.store(true, Ordering::SeqCst);
    // Sooner or later an insert needs a flush into an uncached child, and fails.
    let mut failed = None;
    for i in 3000..6000 {
        let name = name_of(i);
        if let Err(e) = h.tree.insert(&h.disk, 1, &name, value_of(i, 0)) {
            failed = Some((name, e));
            break;
        }
        h.model.insert((1, h.hash(&name), name), value_of(i, 0));
    }
    let (name, e) = failed.expect("some insert had to read a node");
    assert_eq!(e.errno(), libc::EIO);
    h.disk.failing.store(false, Ordering::SeqCst);
    // The failed insert left no trace, the tree is valid and holds everything else.
    h.check_lookup(1, &name);
    h.check_all();
}

#[test]
fn decode_problems_surface_as_errors() {
    let mut h = Harness::new(B, B as u64, Hashing::Real);
    for i in 0..3000 {
        h.insert(1, &name_of(i), value_of(i, 0));
    }
    h.reopen();
    // Point a child at the wrong block: owner mismatch must be EIO, not a panic.
    let stats = h.tree.check(&h.disk).unwrap();
    let victim = *stats.node_ids.last().unwrap();
    let other = stats.node_ids[stats.node_ids.len() - 2];
    h.disk.swap_blocks(victim, other);
    let tree = BeTree::open(
        B,
        SEED,
        B as u64,
        h.tree.next_node_id(),
        h.disk.free_ids(h.tree.next_node_id()),
    );
    let err = tree.check(&h.disk).unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
    let mut saw_error = false;
    for i in 0..3000 {
        if tree.lookup(&h.disk, 1, &name_of(i)).is_err() {
            saw_error = true;
        }
    }
    assert!(saw_error);
}

/// A tree built node by node (all dirty, as if just created).
fn tree_of(nodes: Vec<(u64, crate::betree::node::Node)>, next_id: u64) -> BeTree {
    let tree = BeTree::new_empty(B, SEED, BIG_CACHE);
    {
        let mut state = tree.state.write();
        for (id, node) in nodes {
            state.cache.store_dirty(id, node);
        }
        state.ids = crate::betree::ids::IdAllocator::new(next_id, []);
    }
    tree
}

#[test]
fn internal_node_left_with_one_child_is_merged_away() {
    use crate::betree::node::Node;
    use crate::format::node::{LeafEntry, Message, MessageOp, NodeBody, NodeImage};
    let long = |hash: u64| Key::new(1, hash, &[b'x'; 255]);
    let leaf = |hashes: std::ops::Range<u64>| {
        Node::from_image(NodeImage {
            level: 0,
            body: NodeBody::Leaf {
                entries: hashes
                    .map(|h| LeafEntry {
                        key: long(h),
                        value: crate::format::node::Value::Entry(DirValue { ino: h, kind: 1 }),
                    })
                    .collect(),
            },
        })
    };
    let deletes = |hashes: std::ops::Range<u64>| -> Vec<Message> {
        hashes
            .map(|h| Message {
                key: long(h),
                op: MessageOp::Delete,
            })
            .collect()
    };
    // Root (level 2) over A = [L1 | L2] and B = [L3 | L4]. The root's buffer is nearly full
    // of deletes for A's range, A's buffer too: one more delete cascades into A, empties
    // its leaves, they merge, A is left with one child and must merge with B.
    let l1 = leaf(0..3);
    let l2 = leaf(500..503);
    let l3 = leaf(1000..1010);
    let l4 = leaf(2000..2010);
    let a = Node::new_internal(1, vec![4, 5], vec![Key::lowest(1, 500)], {
        let mut m = deletes(0..3);
        m.extend(deletes(100..106));
        m.extend(deletes(500..503));
        m
    });
    let b = Node::new_internal(1, vec![6, 7], vec![Key::lowest(1, 2000)], vec![]);
    let root = Node::new_internal(2, vec![2, 3], vec![Key::lowest(1, 1000)], deletes(200..214));
    assert!(root.encoded_len() <= B as usize && a.encoded_len() <= B as usize);
    let tree = tree_of(
        vec![
            (1, root),
            (2, a),
            (3, b),
            (4, l1),
            (5, l2),
            (6, l3),
            (7, l4),
        ],
        8,
    );
    let disk = MemLoader::default();
    tree.check(&disk).unwrap();
    tree.remove_key(&disk, long(300)).unwrap();
    let stats = tree.check(&disk).unwrap();
    // A and B became one node, which became the root: two levels, L3 and L4 intact.
    assert_eq!(stats.nodes_per_level.len(), 2, "{stats:?}");
    for h in (0..3).chain(500..503) {
        assert_eq!(tree.lookup_key(&disk, &long(h)).unwrap(), None);
    }
    for h in (1000..1010).chain(2000..2010) {
        assert_eq!(
            tree.lookup_key(&disk, &long(h)).unwrap(),
            Some(DirValue { ino: h, kind: 1 })
        );
    }
    let freed: Vec<u64> = (2..8).filter(|id| !stats.node_ids.contains(id)).collect();
    assert!(freed.contains(&2) || freed.contains(&3), "{stats:?}");
}
