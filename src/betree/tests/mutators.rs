//! Mutations on several threads: none waits for another's node load, no load happens with
//! the tree lock held, and many mutators on a slow disk with a tiny cache, written out and
//! evicted all the while, leave exactly what a model says.

use super::harness::{attr_value_of, name_of, value_of, MemLoader, SEED};
use crate::betree::{BeTree, DirValue, NodeLoader};
use crate::Result;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// A tree of `n` entries in directory 5 written out, reopened with room for `cache_nodes`
/// nodes and nothing cached.
fn reopened(disk: &MemLoader, n: u32, cache_nodes: u64) -> BeTree {
    let tree = BeTree::new_empty(4096, SEED, 1 << 30);
    for i in 0..n {
        tree.insert(disk, 5, &name_of(i), value_of(i, 0)).unwrap();
    }
    disk.persist(&tree);
    let next = tree.next_node_id();
    BeTree::open(4096, SEED, cache_nodes * 4096, next, disk.free_ids(next))
}

/// Stops the first load made on one chosen thread until the test lets it go.
struct OneStalledThread {
    disk: MemLoader,
    victim: parking_lot::Mutex<Option<std::thread::ThreadId>>,
    stalled: mpsc::SyncSender<()>,
    resume: Barrier,
}

impl NodeLoader for OneStalledThread {
    fn load_node(&self, id: u64) -> Result<Vec<u8>> {
        let stall = {
            let mut victim = self.victim.lock();
            let me = std::thread::current().id();
            if *victim == Some(me) {
                *victim = None;
                true
            } else {
                false
            }
        };
        if stall {
            self.stalled.send(()).unwrap();
            self.resume.wait();
        }
        self.disk.load_node(id)
    }
}

/// The stall the issue measured (a create in a cached directory waited 253 ms behind one in
/// an uncached directory): with a mutation stopped in the middle of a node load, mutations
/// in another directory — loading nodes of their own — still run to the end.
#[test]
fn a_mutation_never_waits_for_another_ones_load() {
    let (stalled_tx, stalled_rx) = mpsc::sync_channel(1);
    let loader = Arc::new(OneStalledThread {
        disk: MemLoader::default(),
        victim: parking_lot::Mutex::new(None),
        stalled: stalled_tx,
        resume: Barrier::new(2),
    });
    let tree = Arc::new(reopened(&loader.disk, 3000, 8));

    let slow = {
        let (tree, loader) = (tree.clone(), loader.clone());
        std::thread::spawn(move || {
            *loader.victim.lock() = Some(std::thread::current().id());
            // Nothing is cached: this load (of the root at least) stalls.
            tree.insert(&*loader, 6, b"slow", value_of(1, 1)).unwrap();
        })
    };
    stalled_rx.recv().unwrap();

    let (done_tx, done_rx) = mpsc::channel();
    let fast = {
        let (tree, loader) = (tree.clone(), loader.clone());
        std::thread::spawn(move || {
            for i in 0..400 {
                tree.insert(&*loader, 7, &name_of(i), value_of(i, 2))
                    .unwrap();
                if i % 3 == 0 {
                    tree.remove(&*loader, 5, &name_of(i)).unwrap();
                }
            }
            done_tx.send(()).unwrap();
        })
    };
    // Not a timing assertion: under the old global mutator the fast thread never finishes
    // while the slow one is stalled (a deadlock); the bound only turns that into a failure.
    let finished = done_rx.recv_timeout(Duration::from_secs(300)).is_ok();
    loader.resume.wait();
    assert!(
        finished,
        "mutations in directory 7 waited for a stalled load in directory 6"
    );
    fast.join().unwrap();
    slow.join().unwrap();

    assert_eq!(
        tree.lookup(&*loader, 6, b"slow").unwrap(),
        Some(value_of(1, 1))
    );
    for i in 0..3000 {
        let in_7 = (i < 400).then(|| value_of(i, 2));
        assert_eq!(tree.lookup(&*loader, 7, &name_of(i)).unwrap(), in_7);
        let in_5 = (i >= 400 || i % 3 != 0).then(|| value_of(i, 0));
        assert_eq!(tree.lookup(&*loader, 5, &name_of(i)).unwrap(), in_5);
    }
    tree.check(&loader.disk).unwrap();
}

/// A loader that fails the test if the tree's state lock is held by anyone when a node is
/// read (the test is single-threaded, so a holder could only be the loading thread).
struct LockFreeLoads {
    disk: MemLoader,
    tree: std::sync::OnceLock<Arc<BeTree>>,
}

impl NodeLoader for LockFreeLoads {
    fn load_node(&self, id: u64) -> Result<Vec<u8>> {
        if let Some(tree) = self.tree.get() {
            assert!(
                !tree.state.is_locked(),
                "node {id} loaded with the tree lock held"
            );
        }
        self.disk.load_node(id)
    }
}

/// Every kind of mutation (inserts that flush and split, removes that merge, attributes in
/// value blocks, range deletes, the cleaner's `mark_dirty`, the check) on a cache of three
/// nodes, so that nearly every step loads: the lock is free at every load.
#[test]
fn no_node_is_loaded_with_the_tree_lock_held() {
    let loader = LockFreeLoads {
        disk: MemLoader::default(),
        tree: std::sync::OnceLock::new(),
    };
    let tree = Arc::new(reopened(&loader.disk, 2000, 3));
    loader.tree.set(tree.clone()).ok().unwrap();
    let before = loader.disk.loads();
    for i in 0..2000 {
        tree.insert(&loader, 9, &name_of(i), value_of(i, 3))
            .unwrap();
        if i % 2 == 0 {
            tree.remove(&loader, 5, &name_of(i)).unwrap();
        }
        if i % 50 == 0 {
            let key = tree.attr_key(9, 1, &name_of(i));
            tree.attr_set(&loader, key, 9, &attr_value_of(9000, i), &[])
                .unwrap();
        }
        if i % 10 == 0 {
            // Written out, the nodes may be evicted: the next steps load them again.
            loader.disk.persist(&tree);
        }
    }
    let (lower, upper) = crate::format::node::attr_range(9, 1);
    let ids: Vec<u64> = tree
        .attr_scan(&loader, &lower, &upper)
        .unwrap()
        .iter()
        .flat_map(|(_, a)| a.ids().to_vec())
        .collect();
    tree.delete_range(&loader, lower, upper, &ids).unwrap();
    loader.disk.persist(&tree);
    let stats = tree.check(&loader).unwrap();
    for &id in stats.node_ids.iter().rev().take(5) {
        loader.disk.persist(&tree);
        tree.mark_dirty(&loader, id).unwrap();
    }
    let loads = loader.disk.loads() - before;
    println!("{loads} loads");
    assert!(
        loads > 200,
        "the cache was not small enough to force loads: {loads}"
    );
}

/// A load attempted while this thread holds a state guard fails: the lookup's own take of
/// the lock, under the one held, is caught first (the lock order allows no tree lock under
/// another).
#[test]
#[should_panic(expected = "taking tree state (rank 8, key 0) while holding tree state")]
fn a_load_under_the_tree_lock_is_caught() {
    let disk = MemLoader::default();
    let tree = reopened(&disk, 500, 4);
    let _held = tree.state.read();
    // Nothing is cached: the lookup must load the root, with `_held` still held.
    let _ = tree.lookup(&disk, 5, b"anything");
}

/// The assertion every node load makes.
#[test]
#[should_panic(expected = "with the tree lock held")]
fn the_node_load_assertion_sees_the_tree_lock() {
    let disk = MemLoader::default();
    let tree = reopened(&disk, 500, 4);
    let _held = tree.state.read();
    crate::betree::state_lock::assert_not_held("loading a tree node");
}

const THREADS: u64 = 6;
const STEPS: u32 = 2500;
const SHARED_DIR: u64 = 3;

/// What one mutator leaves: entries by (dir, name) and its inode's attributes by name.
#[derive(Default)]
struct Model {
    entries: BTreeMap<(u64, Vec<u8>), DirValue>,
    attrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// One mutator thread: entries in its own directory and (its own names) in a shared one,
/// attributes of its own inode, some in value blocks.
/// Every 25 steps it writes everything out (one writer at a time, as the log writer), so
/// the nodes may be evicted and later steps load them again.
fn mutator(tree: &BeTree, disk: &MemLoader, writer: &parking_lot::Mutex<u64>, t: u64) -> Model {
    let mut rng = StdRng::seed_from_u64(1000 + t);
    let own_dir = 100 + t;
    let ino = 200 + t;
    let mut model = Model::default();
    for step in 0..STEPS {
        if step % 25 == 24 {
            let mut batches = writer.lock();
            disk.persist(tree);
            *batches += 1;
        }
        let i = rng.gen_range(0..300u32);
        let (dir, name) = if rng.gen_bool(0.5) {
            (own_dir, name_of(i))
        } else {
            (SHARED_DIR, format!("t{t}-{i}").into_bytes())
        };
        match rng.gen_range(0..10) {
            0..=5 => {
                let v = value_of(i, step);
                tree.insert(disk, dir, &name, v).unwrap();
                model.entries.insert((dir, name), v);
            }
            6..=8 => {
                tree.remove(disk, dir, &name).unwrap();
                model.entries.remove(&(dir, name));
            }
            _ => {
                let attr = format!("user.a{}", i % 8).into_bytes();
                let key = tree.attr_key(ino, 1, &attr);
                let old = tree.attr_get(disk, &key).unwrap();
                let replaced = old.map(|a| a.ids().to_vec()).unwrap_or_default();
                if rng.gen_bool(0.25) {
                    tree.attr_remove(disk, key, &replaced).unwrap();
                    model.attrs.remove(&attr);
                } else {
                    let value = attr_value_of([10, 300, 5000][i as usize % 3], step);
                    tree.attr_set(disk, key, ino, &value, &replaced).unwrap();
                    model.attrs.insert(attr, value);
                }
            }
        }
    }
    model
}

/// Many mutators at once, in their own directories and in one they share, on a disk that
/// sleeps in every load, with a tree cache of 8 nodes, written out (and so evicted) all the
/// while; then every entry and attribute is what the threads' models say,
/// and nothing else is there.
#[test]
fn concurrent_mutators_on_a_slow_evicting_disk_match_a_model() {
    let disk = Arc::new(MemLoader::with_delay(Duration::from_micros(50)));
    let tree = Arc::new(reopened(&disk, 1500, 8));
    let writer = Arc::new(parking_lot::Mutex::new(0u64));
    let loads_before = disk.loads();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (tree, disk, writer) = (tree.clone(), disk.clone(), writer.clone());
            std::thread::spawn(move || mutator(&tree, &disk, &writer, t))
        })
        .collect();
    let models: Vec<Model> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let loads = disk.loads() - loads_before;
    println!(
        "concurrent mutators: {loads} loads, {} write-outs",
        writer.lock()
    );
    assert!(
        loads > 200,
        "the cache was not small enough to force loads: {loads}"
    );
    disk.persist(&tree);
    tree.check(&*disk).unwrap();

    for (t, model) in (0..THREADS).zip(&models) {
        let own = tree.scan(&*disk, 100 + t, 0, usize::MAX).unwrap();
        let got: BTreeMap<(u64, Vec<u8>), DirValue> = own
            .into_iter()
            .map(|item| ((100 + t, item.name), item.value))
            .collect();
        let want: BTreeMap<_, _> = model
            .entries
            .iter()
            .filter(|((dir, _), _)| *dir == 100 + t)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert_eq!(got, want, "directory of thread {t}");
        let (lower, upper) = crate::format::node::attr_range(200 + t, 1);
        let names: Vec<Vec<u8>> = tree
            .attr_scan(&*disk, &lower, &upper)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k.name.to_vec())
            .collect();
        assert_eq!(names.len(), model.attrs.len(), "attributes of thread {t}");
        for (name, value) in &model.attrs {
            let key = tree.attr_key(200 + t, 1, name);
            assert_eq!(tree.attr_read(&*disk, &key).unwrap().as_ref(), Some(value));
        }
    }
    let shared: BTreeMap<Vec<u8>, DirValue> = tree
        .scan(&*disk, SHARED_DIR, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|item| (item.name, item.value))
        .collect();
    let want: BTreeMap<Vec<u8>, DirValue> = models
        .iter()
        .flat_map(|m| m.entries.iter())
        .filter(|((dir, _), _)| *dir == SHARED_DIR)
        .map(|((_, name), v)| (name.clone(), *v))
        .collect();
    assert_eq!(shared, want, "the shared directory");
    // The untouched directory is as it was, but for nothing.
    assert_eq!(tree.scan(&*disk, 5, 0, usize::MAX).unwrap().len(), 1500);
}

/// On a tree its cache holds whole (with room to spare), `preload` skips the dry run: it pins
/// nothing, and the mutations after it still load nothing, flush cascades and splits
/// included. Until the tree is resident, the preloads do run (they load and pin).
#[test]
fn a_preload_on_a_resident_tree_runs_nothing_and_its_mutation_loads_nothing() {
    let disk = MemLoader::default();
    let tree = reopened(&disk, 3000, 10_000);
    // Freshly opened, only the root is cached: the preloads load and pin.
    let mut pinned_while_loading = 0;
    for i in 0..200 {
        let pre = tree
            .preload(&disk, &[tree.remove_message(5, &name_of(i)).unwrap()])
            .unwrap();
        pinned_while_loading += pre.pinned();
        tree.remove(&disk, 5, &name_of(i)).unwrap();
    }
    assert!(pinned_while_loading > 0, "no preload pinned on a cold tree");
    // Load every node: a scan reads every leaf; then nothing is missing.
    assert_eq!(tree.scan(&disk, 5, 0, usize::MAX).unwrap().len(), 2800);
    {
        let state = tree.state.read();
        let in_use = state.ids.in_use_count();
        assert_eq!(state.cache.len(), in_use, "the scan left nodes uncached");
        let cached = (0..state.ids.next())
            .filter(|&id| state.ids.in_use(id))
            .all(|id| state.cache.contains(id));
        assert!(
            cached,
            "a node in use is not cached although the counts match"
        );
    }
    let loads = disk.loads();
    for i in 0..6000 {
        let v = value_of(i, 7);
        let pre = tree
            .preload(&disk, &[tree.insert_message(9, &name_of(i), v).unwrap()])
            .unwrap();
        assert_eq!(pre.pinned(), 0, "insert {i}: a dry run on a resident tree");
        tree.insert(&disk, 9, &name_of(i), v).unwrap();
        drop(pre);
        if i % 500 == 0 {
            disk.persist(&tree);
        }
    }
    assert_eq!(
        disk.loads(),
        loads,
        "a mutation on the resident tree loaded"
    );
    assert_eq!(tree.scan(&disk, 9, 0, usize::MAX).unwrap().len(), 6000);
    tree.check(&disk).unwrap();
}

/// `preload` makes resident and pins what a mutation will read, its flush cascade included:
/// on a cache of three nodes, written out and evicted all along, every insert, remove and
/// attribute change (value blocks too) run right after a preload of its message loads
/// nothing itself — while the preloads do load (the cache is far too small to hold the
/// tree) — and the pins go with the preload.
#[test]
fn a_preloaded_mutation_loads_nothing() {
    let disk = MemLoader::default();
    let tree = reopened(&disk, 2000, 3);
    let start = disk.loads();
    for i in 0..2000 {
        let v = value_of(i, 3);
        let pre = tree
            .preload(&disk, &[tree.insert_message(9, &name_of(i), v).unwrap()])
            .unwrap();
        let before = disk.loads();
        tree.insert(&disk, 9, &name_of(i), v).unwrap();
        assert_eq!(disk.loads(), before, "insert {i} loaded after its preload");
        drop(pre);
        if i % 2 == 0 {
            let message = tree.remove_message(5, &name_of(i)).unwrap();
            let _pre = tree.preload(&disk, &[message]).unwrap();
            let before = disk.loads();
            tree.remove(&disk, 5, &name_of(i)).unwrap();
            assert_eq!(disk.loads(), before, "remove {i} loaded after its preload");
        }
        if i % 50 == 0 {
            let key = tree.attr_key(9, 1, &name_of(i));
            let value = attr_value_of(9000, i);
            let message = tree.attr_set_message(key.clone(), &value);
            let _pre = tree.preload(&disk, &[message]).unwrap();
            let before = disk.loads();
            tree.attr_set(&disk, key, 9, &value, &[]).unwrap();
            assert_eq!(
                disk.loads(),
                before,
                "attribute {i} loaded after its preload"
            );
        }
        if i % 10 == 0 {
            disk.persist(&tree);
        }
    }
    assert!(disk.loads() > start + 100, "the preloads loaded little");
    // Nothing stays pinned: once written out, the cache shrinks back to its budget.
    disk.persist(&tree);
    assert!(
        tree.cached_bytes() <= 3 * 4096,
        "{} bytes",
        tree.cached_bytes()
    );
    tree.check(&disk).unwrap();
}
