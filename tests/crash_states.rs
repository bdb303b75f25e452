//! Crash consistency under simulated power cuts (issue 3).
//!
//! Every workload runs on DualFS's core API over two in-memory devices wrapped in
//! `RecordingDevice`s that share one sequence clock. A crash state is both devices at one moment
//! `t` of that clock: on each, every epoch whose flush completed before `t`, plus a subset of the
//! writes of its open epoch issued before `t` (writes between flushes may land in any order or
//! not at all). Each distinct state (the same images are counted once) is mounted (recovery
//! must succeed), unmounted, checked (the checker must be clean), mounted again and compared
//! with a model of the tree after some prefix of the operations: at least every operation
//! before the last completed persistence call (fsync, fdatasync, fsyncdir, sync, cleaning pass,
//! mount, unmount), at most every operation issued. File bytes must be those of that prefix, or,
//! in files changed after the last persistence point, bytes some issued write put there.
//!
//! Environment:
//! - `DUALFS_CRASH_STATES`: how many crash states to judge (default 6,000; 100,000 for a long
//!   run). The ACE families always run every workload; the budget sets how many of each one's
//!   crash states are judged and how many random workloads run.
//! - `DUALFS_CRASH_SEED`: master seed (random workloads, sampling, write subsets).
//! - `DUALFS_CRASH_CASE=<workload id>` runs one workload (all its crash states, or with
//!   `DUALFS_CRASH_STATE=<t>/<meta subset>/<data subset>` just one); a violation prints both.
//! - `DUALFS_CRASH_THREADS`: worker threads (default: available parallelism).

mod crash;

use crash::run::{make_base, run_workload, Base, CrashPoint, Tally};
use crash::workloads::{self, Flavor};
use crash::run::Workload;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const DEFAULT_STATES: u64 = 6_000;
const DEFAULT_SEED: u64 = 0x0D0A_1F55_C4A5_4001;
/// Operations per random workload.
const RANDOM_OPS: usize = 200;
/// Crash states judged per random workload.
const RANDOM_STATES_EACH: usize = 150;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        let v = v.replace('_', "");
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => v.parse(),
        }
        .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
    })
}

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn seed_of(id: &str, master: u64) -> u64 {
    id.bytes().fold(master, |h, b| mix(h, b as u64))
}

struct Job {
    family: &'static str,
    w: Workload,
    states: usize,
}

/// Bases are shared by every workload with the same setup.
fn base_for(cache: &Mutex<HashMap<String, Arc<Base>>>, w: &Workload) -> Arc<Base> {
    let key = format!("{:?}", w.setup);
    if let Some(b) = cache.lock().unwrap().get(&key) {
        return b.clone();
    }
    let b = Arc::new(make_base(&w.setup));
    cache.lock().unwrap().entry(key).or_insert(b).clone()
}

fn run_jobs(jobs: Vec<Job>, master: u64) -> HashMap<&'static str, Tally> {
    let threads = env_u64("DUALFS_CRASH_THREADS")
        .map(|n| n as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let next = AtomicUsize::new(0);
    let bases = Mutex::new(HashMap::new());
    let tallies: Mutex<HashMap<&'static str, Tally>> = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { return };
                let base = base_for(&bases, &job.w);
                let t = run_workload(
                    &base,
                    &job.w,
                    job.states,
                    seed_of(&job.w.id, master),
                    None,
                    "crash_states",
                );
                tallies
                    .lock()
                    .unwrap()
                    .entry(job.family)
                    .or_default()
                    .add(&t);
            });
        }
    });
    tallies.into_inner().unwrap()
}

/// Spread `total` states over `n` workloads: each gets the floor or the ceiling of the share.
fn shares(total: u64, n: usize, seed: u64) -> Vec<usize> {
    let base = total / n as u64;
    let extra = total % n as u64;
    (0..n)
        .map(|i| (base + ((mix(seed, i as u64) % (n as u64)) < extra) as u64) as usize)
        .collect()
}

#[test]
fn crash_states() {
    let master = env_u64("DUALFS_CRASH_SEED").unwrap_or(DEFAULT_SEED);
    if let Ok(id) = std::env::var("DUALFS_CRASH_CASE") {
        let w = workloads::by_id(&id, RANDOM_OPS);
        let only = std::env::var("DUALFS_CRASH_STATE")
            .ok()
            .map(|s| CrashPoint::parse(&s));
        let base = make_base(&w.setup);
        let t = run_workload(
            &base,
            &w,
            usize::MAX,
            seed_of(&w.id, master),
            only.as_ref(),
            "crash_states",
        );
        eprintln!(
            "{id}: {} crash states of {} judged, {} rolled forward, {} violations",
            t.states + t.recovery_crashes,
            t.candidates,
            t.rolled_forward,
            t.violations.len()
        );
        assert!(t.violations.is_empty(), "{} violations", t.violations.len());
        return;
    }
    let budget = env_u64("DUALFS_CRASH_STATES").unwrap_or(DEFAULT_STATES);
    let start = Instant::now();
    let mut jobs = Vec::new();
    // ACE, one operation: every op with every persistence call.
    let core = workloads::ace_core_ops().len();
    let ace1_n = core * workloads::PERSIST_KINDS;
    let ace1_shares = shares(budget * 15 / 100, ace1_n, mix(master, 1));
    for i in 0..core {
        for k in 0..workloads::PERSIST_KINDS {
            jobs.push(Job {
                family: "ace1",
                w: workloads::ace1(i, k),
                states: ace1_shares[i * workloads::PERSIST_KINDS + k],
            });
        }
    }
    // ACE, two operations: every ordered pair, one persistence variant each.
    let ace2_shares = shares(budget * 25 / 100, core * core, mix(master, 2));
    for i in 0..core {
        for j in 0..core {
            let (p, q) = workloads::ace2_default_variant(i, j);
            jobs.push(Job {
                family: "ace2",
                w: workloads::ace2(i, j, p, q),
                states: ace2_shares[i * core + j],
            });
        }
    }
    // Random workloads of hundreds of operations, and cleaner churn.
    let n_random = (budget * 25 / 100).div_ceil(RANDOM_STATES_EACH as u64).max(1);
    for k in 0..n_random {
        jobs.push(Job {
            family: "random",
            w: workloads::random(Flavor::Mixed, mix(master, 100 + k), RANDOM_OPS),
            states: RANDOM_STATES_EACH,
        });
    }
    let n_churn = (budget * 15 / 100).div_ceil(RANDOM_STATES_EACH as u64).max(1);
    for k in 0..n_churn {
        jobs.push(Job {
            family: "churn",
            w: workloads::random(Flavor::Churn, mix(master, 10_000 + k), RANDOM_OPS),
            states: RANDOM_STATES_EACH,
        });
    }
    let n_full = (budget * 10 / 100).div_ceil(RANDOM_STATES_EACH as u64).max(1);
    for k in 0..n_full {
        jobs.push(Job {
            family: "full",
            w: workloads::random(Flavor::Full, mix(master, 30_000 + k), RANDOM_OPS),
            states: RANDOM_STATES_EACH,
        });
    }
    let n_names = (budget * 10 / 100).div_ceil(RANDOM_STATES_EACH as u64).max(1);
    for k in 0..n_names {
        jobs.push(Job {
            family: "names",
            w: workloads::random(Flavor::Names, mix(master, 20_000 + k), RANDOM_OPS),
            states: RANDOM_STATES_EACH,
        });
    }
    // Long workloads first, so the threads finish together.
    jobs.sort_by_key(|j| std::cmp::Reverse(j.w.ops.len()));
    let tallies = run_jobs(jobs, master);
    let mut total = Tally::default();
    for family in ["ace1", "ace2", "random", "churn", "names", "full"] {
        let t = tallies.get(family).cloned().unwrap_or_default();
        eprintln!(
            "{family:>6}: {:5} workloads, {:6} ops, {:7} distinct crash states, {:6} judged: \
             {} rolled forward, {} discarded a torn transaction, {} freed orphans, \
             {} ops refused for space, \
             {} lost nothing issued, \
             {} inside a cleaning pass, {} inside another checkpoint, {} also crashed during \
             recovery; {} violations",
            t.workloads,
            t.ops,
            t.candidates,
            t.states,
            t.rolled_forward,
            t.discarded,
            t.orphans,
            t.enospc,
            t.lost_nothing,
            t.in_clean,
            t.in_checkpoint,
            t.recovery_crashes,
            t.violations.len()
        );
        total.add(&t);
    }
    eprintln!(
        " total: {} crash states judged ({} of the workloads' {} distinct, {} during a \
         recovery) in {:.1?}, {} violations (DUALFS_CRASH_SEED={master:#x}, \
         DUALFS_CRASH_STATES={budget})",
        total.states + total.recovery_crashes,
        total.states,
        total.candidates,
        total.recovery_crashes,
        start.elapsed(),
        total.violations.len()
    );
    assert!(
        total.violations.is_empty(),
        "{} crash states violate the oracle; first:\n{}",
        total.violations.len(),
        total.violations[0]
    );
    assert!(
        total.states >= budget.min(2_000),
        "only {} crash states judged",
        total.states
    );
}

/// Crash states that once failed, judged exactly (they do not depend on sampling or seeds).
/// Each names the bug it found.
#[test]
fn crash_states_that_found_bugs() {
    use crash::run::{judge, record, RecoveryCrash, Subset, Verdict};
    let cases: &[(&str, &str, Option<(u64, &str, &str)>, &str)] = &[
        // A transaction split over two segments, only its second part landed; the recovery
        // mount wrote its checkpoint's first part at the old head, then crashed: roll-forward
        // took the stale second part for the continuation (half a transaction applied).
        (
            "ace2/38.42.2.0",
            "6/2,3/all",
            Some((1, "all", "all")),
            "stale continuation adopted after a crash during recovery",
        ),
        (
            "names/12460076518482832470",
            "27/r6082460108910167736/all",
            Some((1, "all", "all")),
            "stale continuation adopted after a crash during recovery (inodes without names)",
        ),
    ];
    for &(id, state, rc, bug) in cases {
        let w = workloads::by_id(id, RANDOM_OPS);
        let base = make_base(&w.setup);
        let rec = record(&base, &w);
        let cp = CrashPoint::parse(state);
        let rc = rc.map(|(t, m, d)| RecoveryCrash::At(t, Subset::parse(m), Subset::parse(d)));
        if let Verdict::Violation(why) = judge(&rec, &cp, rc) {
            panic!("{bug}: {id} at {state}:\n{why}");
        }
    }
}
