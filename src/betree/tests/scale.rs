//! One huge directory: insert everything, look everything up, scan it all, remove it all.
//! Prints the rates (run with `--nocapture` to see them).

use super::harness::{MemLoader, SEED};
use crate::betree::{BeTree, DirValue};
use std::time::Instant;

fn name(i: u32) -> Vec<u8> {
    format!("file-{i:07}").into_bytes()
}

fn value(i: u32) -> DirValue {
    DirValue {
        ino: 1000 + i as u64,
        kind: 1,
    }
}

fn rate(count: u32, start: Instant) -> u64 {
    (count as f64 / start.elapsed().as_secs_f64()) as u64
}

fn one_big_directory(n: u32) {
    const DIR: u64 = 42;
    let disk = MemLoader::default();
    let tree = BeTree::new_empty(4096, SEED, 256 << 20);
    // Something else lives around the directory.
    for (dir, i) in [(DIR - 1, 1), (DIR + 1, 2)] {
        tree.insert(&disk, dir, b"neighbour", value(i)).unwrap();
    }
    // The log writer takes dirty nodes every so often.
    let write_every = (n / 10).max(1);

    let start = Instant::now();
    for i in 0..n {
        tree.insert(&disk, DIR, &name(i), value(i)).unwrap();
        if (i + 1) % write_every == 0 {
            disk.persist(&tree);
        }
    }
    let inserts = rate(n, start);
    let stats = tree.check(&disk).unwrap();
    println!(
        "{n} entries: height {}, nodes per level {:?}, buffered messages {}",
        stats.height(),
        stats.nodes_per_level,
        stats.buffered_messages
    );

    let start = Instant::now();
    for i in 0..n {
        assert_eq!(tree.lookup(&disk, DIR, &name(i)).unwrap(), Some(value(i)));
    }
    let lookups = rate(n, start);

    let start = Instant::now();
    let mut seen = vec![false; n as usize];
    let mut from = 0u64;
    let mut previous: Option<(u64, Vec<u8>)> = None;
    loop {
        let batch = tree.scan(&disk, DIR, from, 1000).unwrap();
        for item in &batch {
            let i: u32 = std::str::from_utf8(&item.name[5..])
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(item.value, value(i));
            assert_eq!(item.hash, tree.hash(&item.name));
            assert!(!std::mem::replace(&mut seen[i as usize], true), "{i} twice");
            let key = (item.hash, item.name.clone());
            assert!(previous.as_ref().is_none_or(|p| *p < key), "out of order");
            previous = Some(key);
        }
        match batch.last() {
            Some(last) if batch.len() >= 1000 => from = last.hash + 1,
            _ => break,
        }
    }
    assert!(seen.iter().all(|&s| s), "scan missed entries");
    let scans = rate(n, start);

    let start = Instant::now();
    for i in 0..n {
        tree.remove(&disk, DIR, &name(i)).unwrap();
        if (i + 1) % write_every == 0 {
            disk.persist(&tree);
        }
    }
    let removes = rate(n, start);
    disk.persist(&tree);
    let stats = tree.check(&disk).unwrap();
    println!("after removing all: {stats:?}");
    assert!(stats.node_count() <= 16, "tree did not collapse: {stats:?}");
    assert!(tree.scan(&disk, DIR, 0, 10).unwrap().is_empty());
    for i in (0..n).step_by(997) {
        assert_eq!(tree.lookup(&disk, DIR, &name(i)).unwrap(), None);
    }
    for (dir, i) in [(DIR - 1, 1), (DIR + 1, 2)] {
        assert_eq!(
            tree.lookup(&disk, dir, b"neighbour").unwrap(),
            Some(value(i))
        );
    }
    // Every freed node was reported and its block dropped: only live nodes remain on disk.
    assert_eq!(disk.block_count(), stats.node_ids.len());
    println!(
        "{n} entries: {inserts} inserts/s, {lookups} lookups/s, {scans} scanned entries/s, {removes} removes/s"
    );
}

#[test]
fn hundred_thousand_entries_in_one_directory() {
    one_big_directory(100_000);
}

/// About 7 s in the test profile, 5 s in release.
#[test]
fn million_entries_in_one_directory() {
    one_big_directory(1_000_000);
}
