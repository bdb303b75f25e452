//! The tree against a `BTreeMap` model: random operations over several directories, with
//! periodic write-out to a fake disk and restarts from it (so encode, decode, eviction and
//! reload all run), and the checker after every batch.

use super::harness::{attr_value_of, name_of, value_of, Harness, Hashing, ATTR_LENS};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Debug)]
enum Op {
    Insert {
        dir: u64,
        name: u32,
        salt: u32,
    },
    Remove {
        dir: u64,
        name: u32,
    },
    /// Remove the first entry of `dir` at or after `hash` (wrapping): one that exists.
    RemoveNear {
        dir: u64,
        hash: u64,
    },
    Lookup {
        dir: u64,
        name: u32,
    },
    Scan {
        dir: u64,
        start: u64,
        max: usize,
    },
    /// Set attribute `name` of inode `dir` to a value of `ATTR_LENS[len]` bytes.
    SetAttr {
        dir: u64,
        name: u32,
        len: usize,
        salt: u32,
    },
    RemoveAttr {
        dir: u64,
        name: u32,
    },
    /// Drop every attribute of inode `dir` in one step (its generation moves on).
    DropAttrs {
        dir: u64,
    },
    GetAttr {
        dir: u64,
        name: u32,
    },
    /// Write out dirty nodes (the cache may then evict).
    Persist,
    /// Write out and restart from the disk with an empty cache.
    Reopen,
    Check,
}

const DIRS: u64 = 4;

/// Attribute names: few per inode (an inode has a handful), some long.
fn attr_name(i: u32) -> Vec<u8> {
    let mut name = format!("user.{}", i % 40).into_bytes();
    if i % 7 == 0 {
        name.resize(255, b'q');
    }
    name
}

/// Value lengths skewed small, as attributes are.
fn random_attr_len(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..100) {
        x if x < 70 => rng.gen_range(0..3),
        x if x < 90 => rng.gen_range(3..6),
        _ => rng.gen_range(6..ATTR_LENS.len()),
    }
}

fn apply(h: &mut Harness, op: &Op) {
    match *op {
        Op::Insert { dir, name, salt } => h.insert(dir, &name_of(name), value_of(name, salt)),
        Op::Remove { dir, name } => h.remove(dir, &name_of(name)),
        Op::RemoveNear { dir, hash } => {
            let found = h
                .model
                .range((dir, hash, Vec::new())..(dir + 1, 0, Vec::new()))
                .chain(
                    h.model
                        .range((dir, 0, Vec::new())..(dir + 1, 0, Vec::new())),
                )
                .next()
                .map(|((_, _, name), _)| name.clone());
            if let Some(name) = found {
                h.remove(dir, &name);
            }
        }
        Op::Lookup { dir, name } => h.check_lookup(dir, &name_of(name)),
        Op::SetAttr {
            dir,
            name,
            len,
            salt,
        } => h.set_attr(dir, &attr_name(name), attr_value_of(ATTR_LENS[len], salt)),
        Op::RemoveAttr { dir, name } => h.remove_attr(dir, &attr_name(name)),
        Op::DropAttrs { dir } => h.drop_attrs(dir),
        Op::GetAttr { dir, name } => {
            h.check_attr(dir, &attr_name(name));
            h.check_attr_scan(dir);
        }
        Op::Scan { dir, start, max } => h.check_scan(dir, start, max),
        Op::Persist => {
            h.persist();
        }
        Op::Reopen => h.reopen(),
        Op::Check => {
            h.check_all();
        }
    }
}

/// Which way the tree is pushed.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Grow,
    Shrink,
    Mixed,
}

/// A random operation of the phase: growing inserts most, shrinking removes existing
/// entries most (so leaves empty, merge and levels disappear), mixed does a bit of all.
fn random_op(rng: &mut StdRng, phase: Phase, names: u32, hash_bits: u32, attrs: bool) -> Op {
    let dir = 1 + rng.gen_range(0..DIRS);
    let name = rng.gen_range(0..names);
    let hash = rng.gen::<u64>() >> (64 - hash_bits);
    let (insert, remove, remove_near) = match phase {
        Phase::Grow => (700, 750, 800),
        Phase::Shrink => (50, 100, 850),
        Phase::Mixed => (450, 650, 750),
    };
    match rng.gen_range(0..1000) {
        x if x < insert => Op::Insert {
            dir,
            name,
            salt: rng.gen(),
        },
        x if x < remove => Op::Remove { dir, name },
        x if x < remove_near => Op::RemoveNear { dir, hash },
        x if x < 900 || (!attrs && x < 950) => Op::Lookup { dir, name },
        x if x < 930 => Op::SetAttr {
            dir,
            name,
            len: random_attr_len(rng),
            salt: rng.gen(),
        },
        x if x < 940 => Op::RemoveAttr { dir, name },
        x if x < 942 => Op::DropAttrs { dir },
        x if x < 950 => Op::GetAttr { dir, name },
        x if x < 994 => Op::Scan {
            dir,
            start: if rng.gen_bool(0.3) { 0 } else { hash },
            max: [1, 3, 20, 200][rng.gen_range(0..4)],
        },
        x if x < 997 => Op::Persist,
        998 => Op::Reopen,
        _ => Op::Check,
    }
}

/// Remove everything left (in hash order per directory, like `rm -rf`), checking on the
/// way, and insist the tree shrinks back to a few nodes.
fn drain(h: &mut Harness, check_every: usize) {
    // Attributes first, as unlinking files drops theirs: the deletes that follow push the
    // range messages down with them.
    if !h.attrs.is_empty() || h.ranges_used {
        for dir in 1..=DIRS {
            h.drop_attrs(dir);
        }
    }
    let keys: Vec<(u64, Vec<u8>)> = h
        .model
        .keys()
        .map(|(dir, _, name)| (*dir, name.clone()))
        .collect();
    for (i, (dir, name)) in keys.iter().enumerate() {
        h.remove(*dir, name);
        if (i + 1) % check_every == 0 {
            h.check_all();
        }
    }
    assert!(h.model.is_empty() && h.attrs.is_empty());
    h.check_no_leaks();
    let stats = h.check_all();
    // Deletes are lazy: the records they cancel leave the leaves when a flush brings them
    // there. Point deletes are as big as what they cancel, so removing everything flushes
    // enough to empty the tree; a range delete is small and cancels many records (a whole
    // inode's attributes), so after one the leaves may keep dead records until later traffic
    // flushes it down.
    if !h.ranges_used {
        assert!(stats.node_count() <= 16, "tree did not shrink: {stats:?}");
    }
    h.reopen();
    h.check_all();
}

/// `attrs`: mix attribute operations in (else only directory entries, and the tree must
/// shrink back to a few nodes when they are all removed).
fn run_random(h: &mut Harness, seed: u64, ops: usize, names: u32, check_every: usize, attrs: bool) {
    let hash_bits = match h.hashing {
        Hashing::Real => 62,
        Hashing::Colliding(m) => 64 - m.leading_zeros(),
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let phases = [Phase::Grow, Phase::Shrink, Phase::Mixed];
    let phase_len = ops / 6 + 1;
    for i in 0..ops {
        let phase = phases[(i / phase_len) % phases.len()];
        let op = random_op(&mut rng, phase, names, hash_bits, attrs);
        apply(h, &op);
        if (i + 1) % check_every == 0 {
            h.check_all();
        }
    }
    h.check_all();
    drain(h, check_every);
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let dir = 1..=DIRS;
    let name = 0u32..3000;
    prop_oneof![
        50 => (dir.clone(), name.clone(), any::<u32>()).prop_map(|(dir, name, salt)| Op::Insert { dir, name, salt }),
        15 => (dir.clone(), name.clone()).prop_map(|(dir, name)| Op::Remove { dir, name }),
        15 => (dir.clone(), any::<u64>()).prop_map(|(dir, hash)| Op::RemoveNear { dir, hash: hash >> 2 }),
        10 => (dir.clone(), name.clone()).prop_map(|(dir, name)| Op::Lookup { dir, name }),
        8 => (dir.clone(), name.clone(), 0..ATTR_LENS.len(), any::<u32>())
            .prop_map(|(dir, name, len, salt)| Op::SetAttr { dir, name, len, salt }),
        3 => (dir.clone(), name.clone()).prop_map(|(dir, name)| Op::RemoveAttr { dir, name }),
        1 => dir.clone().prop_map(|dir| Op::DropAttrs { dir }),
        3 => (dir.clone(), name).prop_map(|(dir, name)| Op::GetAttr { dir, name }),
        4 => (dir, any::<u64>(), prop_oneof![Just(1usize), Just(7), Just(100)])
            .prop_map(|(dir, start, max)| Op::Scan { dir, start: start >> 2, max }),
        1 => Just(Op::Persist),
        1 => Just(Op::Reopen),
        1 => Just(Op::Check),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn model_proptest(ops in proptest::collection::vec(op_strategy(), 1..2500)) {
        let mut h = Harness::new(4096, 1 << 30, Hashing::Real);
        for op in &ops {
            apply(&mut h, op);
        }
        h.check_all();
        drain(&mut h, 500);
    }

    #[test]
    fn model_proptest_tiny_cache(ops in proptest::collection::vec(op_strategy(), 1..2500)) {
        // A budget of three nodes: after every write-out nearly everything is evicted.
        let mut h = Harness::new(4096, 3 * 4096, Hashing::Real);
        for op in &ops {
            apply(&mut h, op);
        }
        h.persist();
        h.check_all();
        drain(&mut h, 500);
    }
}

#[test]
fn model_long_run() {
    let mut h = Harness::new(4096, 1 << 30, Hashing::Real);
    run_random(&mut h, 0xb7ee, 200_000, 40_000, 20_000, true);
}

#[test]
fn model_long_run_tiny_cache() {
    let mut h = Harness::new(4096, 3 * 4096, Hashing::Real);
    run_random(&mut h, 0x71ee, 60_000, 10_000, 10_000, true);
}

#[test]
fn model_colliding_hashes() {
    // 64 hash values for thousands of names: long pivots, groups across leaves.
    let mut h = Harness::new(4096, 8 * 4096, Hashing::Colliding(64));
    run_random(&mut h, 0xc011, 60_000, 8_000, 10_000, false);
}

#[test]
fn model_bigger_blocks() {
    for block_size in [16384u32, 65536] {
        let mut h = Harness::new(block_size, 1 << 30, Hashing::Real);
        run_random(&mut h, block_size as u64, 60_000, 30_000, 20_000, true);
    }
}
