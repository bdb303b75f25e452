//! Readers during a writer: lookups and scans run on several threads while one thread
//! inserts, removes and writes nodes out, with a tiny cache and a slow disk so that loads
//! (done with no lock held) interleave with everything else.

use super::harness::{MemLoader, SEED};
use crate::betree::{BeTree, DirValue};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const DIR: u64 = 5;
const STABLE: u32 = 3000;
const CHURN: u32 = 6000;

fn stable_name(i: u32) -> Vec<u8> {
    format!("stable-{i}").into_bytes()
}
fn churn_name(i: u32) -> Vec<u8> {
    format!("churn-{i}").into_bytes()
}
/// Every value is a function of its name, so a reader can tell a right answer.
fn value_for(name: &[u8]) -> DirValue {
    let sum = name
        .iter()
        .fold(7u64, |acc, &b| acc.wrapping_mul(31).wrapping_add(b as u64));
    DirValue {
        ino: sum,
        kind: 1 + (sum % 7) as u8,
    }
}

#[test]
fn readers_see_consistent_results_while_a_writer_mutates() {
    let disk = Arc::new(MemLoader::with_delay(Duration::from_micros(30)));
    let tree = Arc::new(BeTree::new_empty(4096, SEED, 6 * 4096));
    for i in 0..STABLE {
        let name = stable_name(i);
        tree.insert(&*disk, DIR, &name, value_for(&name)).unwrap();
    }
    disk.persist(&tree);
    // Stable entries in key order, to check that scans cover their range.
    let stable: BTreeMap<(u64, Vec<u8>), ()> = (0..STABLE)
        .map(|i| ((tree.hash(&stable_name(i)), stable_name(i)), ()))
        .collect();
    let stable = Arc::new(stable);

    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (tree, disk, stop, reads, stable) = (
                tree.clone(),
                disk.clone(),
                stop.clone(),
                reads.clone(),
                stable.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(r);
                while !stop.load(Ordering::Relaxed) {
                    match rng.gen_range(0..10) {
                        0..=3 => {
                            let name = stable_name(rng.gen_range(0..STABLE));
                            let found = tree.lookup(&*disk, DIR, &name).unwrap();
                            assert_eq!(found, Some(value_for(&name)), "stable entry lost");
                        }
                        4..=6 => {
                            let name = churn_name(rng.gen_range(0..CHURN));
                            if let Some(found) = tree.lookup(&*disk, DIR, &name).unwrap() {
                                assert_eq!(found, value_for(&name));
                            }
                        }
                        7 => {
                            assert_eq!(tree.lookup(&*disk, DIR + 1, b"stable-1").unwrap(), None);
                        }
                        _ => {
                            let start = rng.gen::<u64>() >> 2;
                            let max = rng.gen_range(1..80);
                            let items = tree.scan(&*disk, DIR, start, max).unwrap();
                            for pair in items.windows(2) {
                                assert!(
                                    (pair[0].hash, &pair[0].name) < (pair[1].hash, &pair[1].name)
                                );
                            }
                            for item in &items {
                                assert!(item.hash >= start);
                                assert_eq!(item.value, value_for(&item.name));
                            }
                            // Every stable entry in the range the scan covered is in it.
                            let covered_end = match items.last() {
                                Some(last) if items.len() >= max => Some(last.hash),
                                _ => None,
                            };
                            let expected =
                                stable
                                    .range((start, Vec::new())..)
                                    .take_while(|((hash, _), _)| {
                                        covered_end.is_none_or(|end| *hash <= end)
                                    });
                            for ((hash, name), _) in expected {
                                assert!(
                                    items
                                        .iter()
                                        .any(|item| item.hash == *hash && item.name == *name),
                                    "scan from {start:#x} missed a stable entry"
                                );
                            }
                        }
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    // The writer: waves of inserts and removes of churn names, writing out now and then.
    let mut rng = StdRng::seed_from_u64(99);
    let mut present = vec![false; CHURN as usize];
    let loads_before = disk.loads();
    for step in 0..30_000u32 {
        let i = rng.gen_range(0..CHURN);
        let name = churn_name(i);
        let insert = if (step / 5000) % 2 == 0 {
            rng.gen_bool(0.8)
        } else {
            rng.gen_bool(0.2)
        };
        if insert {
            tree.insert(&*disk, DIR, &name, value_for(&name)).unwrap();
        } else {
            tree.remove(&*disk, DIR, &name).unwrap();
        }
        present[i as usize] = insert;
        if step % 500 == 499 {
            disk.persist(&tree);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.join().expect("a reader saw an inconsistent result");
    }
    let reads = reads.load(Ordering::Relaxed);
    let loads = disk.loads() - loads_before;
    println!("concurrent: {reads} reads, {loads} node loads");
    assert!(reads > 1000, "readers barely ran: {reads}");
    assert!(
        loads > 100,
        "the cache was not small enough to force loads: {loads}"
    );

    // Final content is exactly what the writer left.
    disk.persist(&tree);
    tree.check(&*disk).unwrap();
    for i in 0..CHURN {
        let name = churn_name(i);
        let want = present[i as usize].then(|| value_for(&name));
        assert_eq!(tree.lookup(&*disk, DIR, &name).unwrap(), want);
    }
}

/// Holds the first load of one node until the test says go, returning the bytes it read
/// before waiting: a load that was in progress while the node changed.
struct StallingLoader {
    disk: MemLoader,
    stall: parking_lot::Mutex<Option<u64>>,
    stalled: std::sync::Barrier,
    resume: std::sync::Barrier,
}

impl crate::betree::NodeLoader for StallingLoader {
    fn load_node(&self, id: u64) -> crate::Result<Vec<u8>> {
        let block = self.disk.load_node(id)?;
        let stall = {
            let mut target = self.stall.lock();
            if *target == Some(id) {
                *target = None;
                true
            } else {
                false
            }
        };
        if stall {
            self.stalled.wait();
            self.resume.wait();
        }
        Ok(block)
    }
}

#[test]
fn a_load_that_went_stale_is_not_cached() {
    use crate::format::ROOT_NODE_ID;
    let name = |i: u32| format!("entry-{i}").into_bytes();
    let loader = Arc::new(StallingLoader {
        disk: MemLoader::default(),
        stall: parking_lot::Mutex::new(None),
        stalled: std::sync::Barrier::new(2),
        resume: std::sync::Barrier::new(2),
    });
    // A two-level tree on disk, then reopened with room for the root only.
    let tree = BeTree::new_empty(4096, SEED, 4096);
    for i in 0..400 {
        tree.insert(&loader.disk, DIR, &name(i), value_for(&name(i)))
            .unwrap();
    }
    loader.disk.persist(&tree);
    let next = tree.next_node_id();
    let tree = Arc::new(BeTree::open(
        4096,
        SEED,
        4096,
        next,
        loader.disk.free_ids(next),
    ));
    let probe = name(7);
    let key = crate::format::node::Key::new(DIR, tree.hash(&probe), &probe);
    assert_eq!(
        tree.lookup(&*loader, DIR, &probe).unwrap(),
        Some(value_for(&probe))
    );
    let (leaf, lower, upper) = {
        let state = tree.state.read();
        let root = state.cache.node(ROOT_NODE_ID).unwrap();
        assert_eq!(root.level(), 1, "want a root over leaves");
        let i = root.child_index(&key);
        (
            root.children()[i],
            i.checked_sub(1).map(|below| root.pivots()[below].clone()),
            root.pivots().get(i).cloned(),
        )
    };
    assert!(!tree.state.read().cache.contains(leaf), "leaf evicted");

    let in_range = |n: &[u8]| {
        let k = crate::format::node::Key::new(DIR, tree.hash(n), n);
        lower.as_ref().is_none_or(|l| *l <= k) && upper.as_ref().is_none_or(|u| k < *u)
    };
    // New names that belong to the leaf; the reader will look for the first one.
    let fresh: Vec<Vec<u8>> = (1000..)
        .map(name)
        .filter(|n| in_range(n))
        .take(500)
        .collect();

    // A reader starts loading the leaf and stalls with its old bytes.
    *loader.stall.lock() = Some(leaf);
    let reader = {
        let (tree, loader, wanted) = (tree.clone(), loader.clone(), fresh[0].clone());
        std::thread::spawn(move || tree.lookup(&*loader, DIR, &wanted).unwrap())
    };
    loader.stalled.wait();

    // Meanwhile the writer inserts into the leaf's range until the root flushes into it,
    // writes everything out, and the leaf is evicted again.
    let pending_for_leaf = || {
        let state = tree.state.read();
        let root = state.cache.node(ROOT_NODE_ID).unwrap();
        root.messages().iter().any(|m| in_range(&m.key.name))
    };
    let mut added = 0;
    while added == 0 || pending_for_leaf() {
        let n = &fresh[added];
        tree.insert(&*loader, DIR, n, value_for(n)).unwrap();
        added += 1;
    }
    loader.disk.persist(&tree);
    assert!(
        !tree.state.read().cache.contains(leaf),
        "leaf evicted after write-out"
    );

    // The reader's copy is stale: it must be thrown away, and the retry must find the
    // entry that now sits in the leaf (a stale copy would say it is absent).
    loader.resume.wait();
    assert_eq!(reader.join().unwrap(), Some(value_for(&fresh[0])));
    for n in &fresh[..added] {
        assert_eq!(tree.lookup(&*loader, DIR, n).unwrap(), Some(value_for(n)));
    }
    tree.check(&loader.disk).unwrap();
}
