//! The workloads: ACE-style exhaustive 1- and 2-operation sequences over a small tree, seeded
//! random workloads of hundreds of operations, and seeded churn that keeps the cleaner busy.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use std::collections::BTreeMap;

use super::model::{split, Kind, Model};
use super::ops::{Falloc, Op, Persist};
use super::run::Workload;

// ---------------------------------------------------------------------------------------------
// ACE: files A/foo, A/bar, B/foo, B/bar; directories A, B (and A/C, absent at first, so mkdir,
// rmdir and directory renames have something to do).

pub const ACE_FILES: [&str; 4] = ["A/foo", "A/bar", "B/foo", "B/bar"];
pub const ACE_DIRS: [&str; 3] = ["A", "B", "A/C"];

fn s(x: &str) -> String {
    x.to_string()
}

/// The tree every ACE workload starts from (synced and unmounted before recording): A/ with
/// foo (9000 bytes, three blocks) and bar (3000 bytes), an empty B/.
pub fn ace_setup() -> Vec<Op> {
    vec![
        Op::Mkdir(s("A")),
        Op::Mkdir(s("B")),
        Op::Creat(s("A/foo")),
        Op::Write {
            path: s("A/foo"),
            off: 0,
            len: 9000,
        },
        Op::Creat(s("A/bar")),
        Op::Write {
            path: s("A/bar"),
            off: 0,
            len: 3000,
        },
    ]
}

/// Every core operation over the small tree (the namespace, data and attribute ones, then the
/// fallocate ones, then the O_TMPFILE ones).
pub fn ace_core_ops() -> Vec<Op> {
    let mut v = ace_namespace_and_data_ops();
    v.extend(ace_falloc_ops());
    v.extend(ace_tmpfile_ops());
    v
}

/// O_TMPFILE, written, then linked: as B/foo (free in the setup: a new file of two blocks
/// and a partial one), and as A/bar (taken: the link fails, the file is freed unnamed). After
/// the fallocate ops, so that their numbers stay.
pub fn ace_tmpfile_ops() -> Vec<Op> {
    vec![
        Op::Tmpfile {
            path: s("B/foo"),
            len: 9000,
        },
        Op::Tmpfile {
            path: s("A/bar"),
            len: 5000,
        },
    ]
}

/// fallocate in every mode on the two files of the setup (A/foo: 9000 bytes, A/bar: 3000):
/// growing past a partial last block, preallocating past the end, punching and zeroing
/// across partial and whole blocks, zeroing past the end (10 ops, after the 64 others so
/// that their numbers stay).
pub fn ace_falloc_ops() -> Vec<Op> {
    let mut v = Vec::new();
    for f in ["A/foo", "A/bar"] {
        for (mode, off, len) in [
            (Falloc::Allocate, 4096, 12_288),
            (Falloc::KeepSize, 0, 20_480),
            (Falloc::PunchHole, 1000, 8000),
            (Falloc::ZeroRangeKeepSize, 2000, 7000),
            (Falloc::ZeroRange, 6000, 10_000),
        ] {
            v.push(Op::Fallocate {
                path: s(f),
                mode,
                off,
                len,
            });
        }
    }
    v
}

fn ace_namespace_and_data_ops() -> Vec<Op> {
    let mut v = Vec::new();
    for f in ACE_FILES {
        v.push(Op::Creat(s(f)));
    }
    for d in ACE_DIRS {
        v.push(Op::Mkdir(s(d)));
    }
    for d in ACE_DIRS {
        v.push(Op::Rmdir(s(d)));
    }
    for f in ACE_FILES {
        // write: unaligned, across a block boundary, extending a short file.
        v.push(Op::Write {
            path: s(f),
            off: 2000,
            len: 6000,
        });
        // overwrite: inside the first block.
        v.push(Op::Write {
            path: s(f),
            off: 512,
            len: 1024,
        });
        v.push(Op::Append {
            path: s(f),
            len: 4500,
        });
        v.push(Op::Truncate {
            path: s(f),
            size: 1000,
        });
    }
    for a in ACE_FILES {
        for b in ACE_FILES {
            if a != b {
                v.push(Op::Link {
                    from: s(a),
                    to: s(b),
                });
            }
        }
    }
    for f in ACE_FILES {
        v.push(Op::Unlink(s(f)));
    }
    for a in ACE_FILES {
        for b in ACE_FILES {
            if a != b {
                v.push(Op::Rename {
                    from: s(a),
                    to: s(b),
                });
            }
        }
    }
    for a in ACE_DIRS {
        for b in ACE_DIRS {
            if a != b {
                v.push(Op::Rename {
                    from: s(a),
                    to: s(b),
                });
            }
        }
    }
    for f in ACE_FILES {
        // Short (inline) targets in A, long (out-of-line, one log block) ones in B.
        let target = if f.starts_with('A') {
            b"../B/foo".to_vec()
        } else {
            vec![b't'; 300]
        };
        v.push(Op::Symlink { path: s(f), target });
    }
    // Attributes (after the others, so that earlier indices name what they always did):
    // inline, in value blocks, removed; on files and on a directory.
    for f in ACE_FILES.iter().chain(&["A"]) {
        v.push(Op::SetXattr {
            path: s(f),
            name: s("user.small"),
            len: 24,
        });
        v.push(Op::SetXattr {
            path: s(f),
            name: s("trusted.large"),
            len: 5000,
        });
        v.push(Op::RemoveXattr {
            path: s(f),
            name: s("user.small"),
        });
    }
    v
}

/// The name an operation is about (what ACE would fsync after it).
fn main_path(op: &Op) -> String {
    match op {
        Op::Creat(p) | Op::Mkdir(p) | Op::Unlink(p) | Op::Rmdir(p) => p.clone(),
        Op::Write { path, .. }
        | Op::Append { path, .. }
        | Op::Truncate { path, .. }
        | Op::Symlink { path, .. }
        | Op::Chmod { path, .. }
        | Op::Fallocate { path, .. }
        | Op::SetXattr { path, .. }
        | Op::RemoveXattr { path, .. }
        | Op::Tmpfile { path, .. } => path.clone(),
        Op::Link { to, .. } | Op::Rename { to, .. } => to.clone(),
        _ => String::new(),
    }
}

/// The four ways ACE makes an operation durable: fsync / fdatasync of its file, fsync of its
/// directory, sync.
pub const PERSIST_KINDS: usize = 4;

pub fn persist_after(op: &Op, k: usize) -> Op {
    let p = main_path(op);
    Op::Persist(match k {
        0 => Persist::Fsync(p),
        1 => Persist::Fdatasync(p),
        2 => Persist::Fsyncdir(split(&p).0.to_string()),
        _ => Persist::Sync,
    })
}

/// "ace1/i.k": core op i, then persistence k.
pub fn ace1(i: usize, k: usize) -> Workload {
    let core = ace_core_ops();
    let op = core[i].clone();
    Workload {
        id: format!("ace1/{i}.{k}"),
        setup: ace_setup(),
        ops: vec![op.clone(), persist_after(&op, k)],
    }
}

/// "ace2/i.j.p.q": core op i, persistence p (PERSIST_KINDS = none), core op j, persistence q.
pub fn ace2(i: usize, j: usize, p: usize, q: usize) -> Workload {
    let core = ace_core_ops();
    let (a, b) = (core[i].clone(), core[j].clone());
    let mut ops = vec![a.clone()];
    if p < PERSIST_KINDS {
        ops.push(persist_after(&a, p));
    }
    ops.push(b.clone());
    ops.push(persist_after(&b, q));
    Workload {
        id: format!("ace2/{i}.{j}.{p}.{q}"),
        setup: ace_setup(),
        ops,
    }
}

/// The persistence variant a pair gets in the default run (every pair runs once; all variants
/// of a pair are reachable through `ace2`).
pub fn ace2_default_variant(i: usize, j: usize) -> (usize, usize) {
    (
        (i + 2 * j) % (PERSIST_KINDS + 1),
        (3 * i + j) % PERSIST_KINDS,
    )
}

// ---------------------------------------------------------------------------------------------
// Random workloads.

const RAND_DIRS: [&str; 4] = ["A", "B", "A/C", "B/D"];
const RAND_FILE_DIRS: [&str; 5] = ["", "A", "B", "A/C", "B/D"];
const RAND_NAMES: [&str; 3] = ["f0", "f1", "f2"];

/// Setup of the random workloads: the four directories.
pub fn random_setup() -> Vec<Op> {
    RAND_DIRS.iter().map(|d| Op::Mkdir(s(d))).collect()
}

fn pick<'a>(rng: &mut StdRng, v: &[&'a str]) -> &'a str {
    v[rng.gen_range(0..v.len())]
}

fn rand_file(rng: &mut StdRng) -> String {
    let d = pick(rng, &RAND_FILE_DIRS);
    let n = pick(rng, &RAND_NAMES);
    super::model::join(d, n)
}

/// Kinds of random workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Every operation, persistence calls about one in ten.
    Mixed,
    /// Metadata churn with frequent fsyncs that fills the small log quickly, with explicit
    /// cleaning passes (and the automatic ones the log's fullness triggers).
    Churn,
    /// Big writes, appends, truncates and unlinks that keep the small data device nearly full,
    /// so freed blocks are soon handed out again (and some writes meet ENOSPC).
    Full,
    /// Hundreds of long names in two directories: the directory tree splits, buffers messages
    /// in internal nodes, merges and frees nodes.
    Names,
    /// Writes, truncates and fallocate in every mode (preallocation past the end, punched
    /// holes, zeroed ranges, some too big for the small data device) on a few files.
    Holes,
}

/// The name pool of `Flavor::Names`: long names, so a tree node holds few of them.
fn long_name(rng: &mut StdRng) -> String {
    let d = if rng.gen_bool(0.5) { "A" } else { "B" };
    let k = rng.gen_range(0..150u32);
    format!("{d}/{k:03}-{}", "n".repeat(60 + (k as usize * 7) % 60))
}

/// "random/<seed>" or "churn/<seed>": `n` operations. The generator follows the tree in a model
/// so that most operations name something that exists (and succeed).
pub fn random(flavor: Flavor, seed: u64, n: usize) -> Workload {
    let mut rng = StdRng::seed_from_u64(seed);
    let setup = random_setup();
    let mut model = Model::new();
    let mut scratch = BTreeMap::new();
    for (gi, op) in setup.iter().enumerate() {
        let _ = model.apply(gi, op, &mut scratch);
    }
    let mut ops = Vec::with_capacity(n);
    while ops.len() < n {
        let paths = model.paths();
        let files: Vec<String> = paths
            .iter()
            .filter(|(p, id)| !p.is_empty() && model.inodes[id].kind() != Kind::Dir)
            .map(|(p, _)| p.clone())
            .collect();
        // Mostly an existing file (or symlink), else any name of the pools.
        let fresh = |rng: &mut StdRng| match flavor {
            Flavor::Names => long_name(rng),
            _ => rand_file(rng),
        };
        let existing = match flavor {
            Flavor::Names | Flavor::Full | Flavor::Holes => 0.95,
            _ => 0.8,
        };
        let f = if !files.is_empty() && rng.gen_bool(existing) {
            files[rng.gen_range(0..files.len())].clone()
        } else {
            fresh(&mut rng)
        };
        let r = rng.gen_range(0..100);
        let op = match flavor {
            Flavor::Mixed => mixed_op(&mut rng, r, f),
            Flavor::Churn => churn_op(&mut rng, r, f),
            Flavor::Full => full_op(&mut rng, r, f),
            Flavor::Holes => holes_op(&mut rng, r, f),
            Flavor::Names => {
                let other = fresh(&mut rng);
                names_op(&mut rng, r, f, other)
            }
        };
        let _ = model.apply(setup.len() + ops.len(), &op, &mut scratch);
        scratch.clear();
        ops.push(op);
    }
    let name = match flavor {
        Flavor::Mixed => "random",
        Flavor::Churn => "churn",
        Flavor::Full => "full",
        Flavor::Names => "names",
        Flavor::Holes => "holes",
    };
    Workload {
        id: format!("{name}/{seed}"),
        setup,
        ops,
    }
}

fn persist(rng: &mut StdRng, f: String) -> Op {
    Op::Persist(match rng.gen_range(0..4) {
        0 => Persist::Fsync(f),
        1 => Persist::Fdatasync(f),
        2 => Persist::Fsyncdir(split(&f).0.to_string()),
        _ => Persist::Sync,
    })
}

fn data_len(rng: &mut StdRng) -> u64 {
    match rng.gen_range(0..4) {
        0 => rng.gen_range(1..100),
        1 => 4096 * rng.gen_range(1..4),
        _ => rng.gen_range(1..12_000),
    }
}

fn mixed_op(rng: &mut StdRng, r: u32, f: String) -> Op {
    // Rarely: far into the file (double indirect blocks begin at 2 MiB + 80 KiB), sparse.
    if rng.gen_ratio(1, 150) {
        let off = 2_150_000 + rng.gen_range(0..200_000);
        return if rng.gen_bool(0.5) {
            Op::Write {
                path: f,
                off,
                len: rng.gen_range(1..9000),
            }
        } else {
            Op::Truncate { path: f, size: off }
        };
    }
    if rng.gen_ratio(1, 25) {
        return if rng.gen_bool(0.6) {
            Op::Hold(f)
        } else {
            Op::Release
        };
    }
    if rng.gen_ratio(1, 10) {
        return xattr_op(rng, f);
    }
    match r {
        0..=9 => Op::Creat(f),
        10..=29 => Op::Write {
            path: f,
            off: if rng.gen_bool(0.3) {
                4096 * rng.gen_range(0..12)
            } else {
                rng.gen_range(0..48_000)
            },
            len: data_len(rng),
        },
        30..=38 => Op::Append {
            path: f,
            len: data_len(rng),
        },
        // A name of the pools, free or taken (the link fails, the file is freed unnamed). Its
        // two numbers, one of Append's and one of Truncate's, are ones the workload of the
        // pinned case random/14979686767498039267 never draws: it still names the same ops.
        39..=40 => Op::Tmpfile {
            path: rand_file(rng),
            len: data_len(rng),
        },
        41..=46 => Op::Truncate {
            path: f,
            size: rng.gen_range(0..60_000),
        },
        47..=51 => Op::Link {
            from: f,
            to: rand_file(rng),
        },
        52..=58 => Op::Unlink(f),
        59..=65 => Op::Rename {
            from: f,
            to: rand_file(rng),
        },
        66..=68 => Op::Rename {
            from: s(pick(rng, &RAND_DIRS)),
            to: s(pick(rng, &RAND_DIRS)),
        },
        69..=72 => Op::Mkdir(s(pick(rng, &RAND_DIRS))),
        73..=76 => Op::Rmdir(s(pick(rng, &RAND_DIRS))),
        77..=81 => Op::Symlink {
            path: f,
            target: vec![b'a' + rng.gen_range(0..26); rng.gen_range(1..400)],
        },
        82..=86 => Op::Chmod {
            path: f,
            perm: rng.gen_range(0..0o1000),
        },
        _ => persist(rng, f),
    }
}

/// An attribute change of `f`: a few names, values inline or in value blocks.
fn xattr_op(rng: &mut StdRng, f: String) -> Op {
    let name = s(["user.a", "user.b", "trusted.c"][rng.gen_range(0..3)]);
    if rng.gen_bool(0.25) {
        return Op::RemoveXattr { path: f, name };
    }
    let len = match rng.gen_range(0..4) {
        0 => 0,
        1 => rng.gen_range(1..257),
        2 => rng.gen_range(257..9000),
        _ => rng.gen_range(9000..65537),
    };
    Op::SetXattr { path: f, name, len }
}

fn churn_op(rng: &mut StdRng, r: u32, f: String) -> Op {
    if rng.gen_ratio(1, 8) {
        return xattr_op(rng, f);
    }
    match r {
        0..=14 => Op::Creat(f),
        15..=24 => Op::Write {
            path: f,
            off: rng.gen_range(0..20_000),
            len: rng.gen_range(1..8000),
        },
        25..=34 => Op::Unlink(f),
        35..=44 => Op::Rename {
            from: f,
            to: rand_file(rng),
        },
        45..=52 => Op::Symlink {
            path: f,
            target: vec![b'a' + rng.gen_range(0..26); rng.gen_range(100..600)],
        },
        53..=57 => Op::Chmod {
            path: f,
            perm: rng.gen_range(0..0o1000),
        },
        58..=60 => Op::Mkdir(s(pick(rng, &RAND_DIRS))),
        61..=63 => Op::Rmdir(s(pick(rng, &RAND_DIRS))),
        64..=66 => Op::Link {
            from: f,
            to: rand_file(rng),
        },
        67..=68 => Op::Tmpfile {
            path: rand_file(rng),
            len: rng.gen_range(1..8000),
        },
        69..=93 => persist(rng, f),
        _ => Op::Clean,
    }
}

fn full_op(rng: &mut StdRng, r: u32, f: String) -> Op {
    match r {
        0..=15 => Op::Creat(rand_file(rng)),
        16..=39 => Op::Write {
            path: f,
            off: 4096 * rng.gen_range(0..64) + rng.gen_range(0..2) * rng.gen_range(0..4096),
            len: rng.gen_range(16_000..260_000),
        },
        40..=54 => Op::Append {
            path: f,
            len: rng.gen_range(4_000..130_000),
        },
        55..=64 => Op::Truncate {
            path: f,
            size: rng.gen_range(0..200_000),
        },
        65..=71 => Op::Unlink(f),
        72..=77 => Op::Rename {
            from: f,
            to: rand_file(rng),
        },
        78..=79 => Op::Hold(f),
        80 => Op::Release,
        _ => persist(rng, f),
    }
}

fn names_op(rng: &mut StdRng, r: u32, f: String, other: String) -> Op {
    match r {
        0..=44 => Op::Creat(other),
        45..=56 => Op::Unlink(f),
        57..=71 => Op::Rename { from: f, to: other },
        72..=76 => Op::Link { from: f, to: other },
        77..=83 => Op::Symlink {
            path: other,
            target: f.into_bytes(),
        },
        84..=86 => Op::Write {
            path: f,
            off: rng.gen_range(0..8000),
            len: rng.gen_range(1..3000),
        },
        87..=88 => Op::Hold(f),
        89 => Op::Release,
        _ => persist(rng, f),
    }
}

/// An offset for `holes_op`: block-aligned or not, in the first blocks, the indirect range
/// (from 48 KiB) or the double-indirect one (from 2 MiB + 80 KiB).
fn hole_offset(rng: &mut StdRng) -> u64 {
    let base = match rng.gen_range(0..10) {
        0..=5 => 0,
        6..=8 => 40_000,
        _ => 2_100_000,
    };
    let off = base + rng.gen_range(0..60_000);
    if rng.gen_bool(0.4) {
        off / 4096 * 4096
    } else {
        off
    }
}

fn holes_op(rng: &mut StdRng, r: u32, f: String) -> Op {
    let len = |rng: &mut StdRng| match rng.gen_range(0..6) {
        0 => rng.gen_range(1..200),
        1 => 4096 * rng.gen_range(1..8),
        // More than the 2 MiB data device: ENOSPC, which must leave the file as it was.
        2 if rng.gen_ratio(1, 4) => rng.gen_range(2_200_000..3_000_000),
        _ => rng.gen_range(1..40_000),
    };
    match r {
        0..=7 => Op::Creat(rand_file(rng)),
        8..=27 => Op::Write {
            path: f,
            off: hole_offset(rng),
            len: rng.gen_range(1..12_000),
        },
        28..=33 => Op::Append {
            path: f,
            len: rng.gen_range(1..9000),
        },
        34..=41 => Op::Truncate {
            path: f,
            size: hole_offset(rng),
        },
        42..=71 => Op::Fallocate {
            path: f,
            mode: Falloc::ALL[rng.gen_range(0..Falloc::ALL.len())],
            off: hole_offset(rng),
            len: len(rng),
        },
        72..=75 => Op::Unlink(f),
        76..=78 => Op::Rename {
            from: f,
            to: rand_file(rng),
        },
        79..=80 => Op::Hold(f),
        81 => Op::Release,
        _ => persist(rng, f),
    }
}

/// The workload a `DUALFS_CRASH_CASE` id names.
pub fn by_id(id: &str, random_len: usize) -> Workload {
    let (family, rest) = id.split_once('/').expect("family/number");
    let nums: Vec<u64> = rest
        .split('.')
        .map(|x| x.parse().expect("number"))
        .collect();
    let u = |i: usize| nums[i] as usize;
    match family {
        "ace1" => ace1(u(0), u(1)),
        "ace2" => ace2(u(0), u(1), u(2), u(3)),
        "random" => random(Flavor::Mixed, nums[0], random_len),
        "churn" => random(Flavor::Churn, nums[0], random_len),
        "names" => random(Flavor::Names, nums[0], random_len),
        "full" => random(Flavor::Full, nums[0], random_len),
        "holes" => random(Flavor::Holes, nums[0], random_len),
        _ => panic!("unknown workload family {family:?}"),
    }
}
