//! Crash consistency under simulated power cuts.
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
//! Half the workloads (by a hash of their id) run with the data cache (delayed allocation, the
//! default mount), the other half write through (`data_cache=0`); with the cache, a file
//! written after the last persistence point may also show any size it had since then (its
//! cached writes were not written back when the log was written: ext4's delayed allocation
//! gives the same), everything else still matching the prefix.
//!
//! Environment:
//! - `DUALFS_CRASH_STATES`: how many crash states to judge (default 30,000, about 40 s on two
//!   cores; 100,000 or more for a long run). The ACE families always run every workload; the
//!   budget sets how many of each one's crash states are judged and how many random workloads
//!   run. One state in four also crashes its own recovery (counted on top).
//! - `DUALFS_CRASH_SEED`: master seed (random workloads, sampling, write subsets).
//! - `DUALFS_CRASH_CASE=<workload id>` runs one workload (all its crash states, or with
//!   `DUALFS_CRASH_STATE=<t>/<meta subset>/<data subset>` just one); a violation prints both.
//! - `DUALFS_CRASH_ACE2_ALL`: run every 2-operation sequence with all 20 combinations of
//!   persistence calls (109,520 workloads) instead of one combination per pair.
//! - `DUALFS_CRASH_SECTOR`: the atomic write unit of both devices (default 4096; 512 tears
//!   blocks into sectors).
//! - `DUALFS_CRASH_THREADS`: worker threads (default: available parallelism).
//! - `DUALFS_CRASH_VERBOSE`: list each workload's operations with their clock spans.
//! - Each crash image is also checked as it is, before recovery (the checker rolls the log
//!   forward itself and must agree with mount); `DUALFS_CRASH_NO_RAW_CHECK` skips that.

mod crash;

use crash::run::Workload;
use crash::run::{make_base, run_workload, Base, CrashPoint, Tally};
use crash::workloads::{self, Flavor};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const DEFAULT_STATES: u64 = 30_000;
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
                    &format!("DUALFS_CRASH_SEED={master:#x}"),
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
            &format!("DUALFS_CRASH_SEED={master:#x}"),
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
    // ACE, two operations: every ordered pair, one persistence variant each (all 20 with
    // DUALFS_CRASH_ACE2_ALL: none or one of four after the first, one of four after the second).
    let all_variants = std::env::var_os("DUALFS_CRASH_ACE2_ALL").is_some();
    let variants: Vec<(usize, usize)> = (0..=workloads::PERSIST_KINDS)
        .flat_map(|p| (0..workloads::PERSIST_KINDS).map(move |q| (p, q)))
        .collect();
    let per_pair = if all_variants { variants.len() } else { 1 };
    let ace2_shares = shares(budget * 25 / 100, core * core * per_pair, mix(master, 2));
    for i in 0..core {
        for j in 0..core {
            let chosen = if all_variants {
                variants.clone()
            } else {
                vec![workloads::ace2_default_variant(i, j)]
            };
            for (k, (p, q)) in chosen.into_iter().enumerate() {
                jobs.push(Job {
                    family: "ace2",
                    w: workloads::ace2(i, j, p, q),
                    states: ace2_shares[(i * core + j) * per_pair + k],
                });
            }
        }
    }
    // Random workloads of hundreds of operations, and cleaner churn.
    // (family, flavor, share of the budget in percent, first seed)
    let random_families = [
        ("random", Flavor::Mixed, 25, 100),
        ("churn", Flavor::Churn, 15, 10_000),
        ("full", Flavor::Full, 10, 30_000),
        ("names", Flavor::Names, 10, 20_000),
        ("holes", Flavor::Holes, 10, 40_000),
    ];
    for (family, flavor, percent, first_seed) in random_families {
        let n = (budget * percent / 100)
            .div_ceil(RANDOM_STATES_EACH as u64)
            .max(1);
        for k in 0..n {
            jobs.push(Job {
                family,
                w: workloads::random(flavor, mix(master, first_seed + k), RANDOM_OPS),
                states: RANDOM_STATES_EACH,
            });
        }
    }
    // Long workloads first, so the threads finish together.
    jobs.sort_by_key(|j| std::cmp::Reverse(j.w.ops.len()));
    let tallies = run_jobs(jobs, master);
    let mut total = Tally::default();
    for family in ["ace1", "ace2", "random", "churn", "names", "full", "holes"] {
        let t = tallies.get(family).cloned().unwrap_or_default();
        eprintln!(
            "{family:>6}: {:5} workloads, {:6} ops, {:7} distinct crash states, {:6} judged: \
             {} rolled forward, {} discarded a torn transaction, {} freed orphans, \
             {} ops refused for space, \
             {} lost nothing issued, \
             {} inside a cleaning pass, {} inside another checkpoint, {} also crashed during \
             recovery; {} daemon deaths ({} with a torn intent record); {} violations",
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
            t.deaths,
            t.torn_intents,
            t.violations.len()
        );
        total.add(&t);
    }
    eprintln!(
        " total: {} crash states judged ({} of the workloads' {} distinct, {} during a \
         recovery, {} daemon deaths) in {:.1?}, {} violations (DUALFS_CRASH_SEED={master:#x}, \
         DUALFS_CRASH_STATES={budget})",
        total.states + total.recovery_crashes + total.deaths,
        total.states,
        total.candidates,
        total.recovery_crashes,
        total.deaths,
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
    assert!(
        total.deaths >= budget.min(2_000) / 10 && total.torn_intents > 0,
        "only {} daemon deaths ({} torn) judged",
        total.deaths,
        total.torn_intents
    );
}

/// Crash states that once failed, judged exactly (they do not depend on sampling or seeds).
/// Each names the bug it found.
#[test]
fn crash_states_that_found_bugs() {
    use crash::run::{delayed_allocation, judge, record_in, RecoveryCrash, Subset, Verdict};
    /// (workload, crash point, crash during recovery (moment, meta, data), the bug); the
    /// data cache as the workload's id has it, unless named in `CACHED`.
    type Case = (
        &'static str,
        &'static str,
        Option<(u64, &'static str, &'static str)>,
        &'static str,
    );
    /// Cases found with the data cache on.
    const CACHED: &[&str] = &["full/13456240362323746622", "full/6142062796334673157"];
    let cases: &[Case] = &[
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
        // truncate f2 down (not durable), then a write past its end refused with ENOSPC: the
        // write had zeroed the rest of the last block in place first, over durable data.
        (
            "full/13021929904561356305",
            "218/r4191805821107300923/all",
            None,
            "a write refused for space zeroed durable bytes",
        ),
        // Data cache: f0 durable at 337,416 bytes; an overwrite of its block 47 cached, then a
        // truncate to 194,334 zeroed the cached block past it; another file's admission wrote
        // everything back and crashed before its log write: the block written in place had
        // put the truncate's zeros under the durable, longer size.
        (
            "full/13456240362323746622",
            "122/all/all",
            None,
            "a write-back in place put a truncate's zeros under the durable size",
        ),
        // Data cache: A/f2's append cached, a later create logged (a log write while it was
        // cached): the file shows its size before the append (its cached writes missing as a
        // whole), everything else the prefix: the state delayed allocation allows.
        (
            "full/6142062796334673157",
            "724/all/all",
            None,
            "a lagging file size (cached writes lost as a whole) taken for a violation",
        ),
    ];
    for &(id, state, rc, bug) in cases {
        let w = workloads::by_id(id, RANDOM_OPS);
        let base = make_base(&w.setup);
        let rec = record_in(&base, &w, CACHED.contains(&id) || delayed_allocation(id));
        let cp = CrashPoint::parse(state);
        let rc = rc.map(|(t, m, d)| RecoveryCrash::At(t, Subset::parse(m), Subset::parse(d)));
        if let Verdict::Violation(why) = judge(&rec, &cp, rc) {
            panic!("{bug}: {id} at {state}:\n{why}");
        }
    }
    // Daemon deaths: (workload, the op the daemon died after, the bug).
    let deaths: &[(&str, usize, &str)] = &[
        // The log nearly full at the death: the replay of cached writes was refused the
        // cleaner's reserve and lost three acknowledged writes to ENOSPC.
        (
            "random/14979686767498039267",
            99,
            "a replay refused log room lost acknowledged cached writes",
        ),
        (
            "full/8367586382672300108",
            84,
            "a replay of cached writes was refused data blocks (ENOSPC)",
        ),
        (
            "full/8367586382672300108",
            99,
            "a replayed truncate was refused data blocks while cached writes overcommitted",
        ),
        (
            "full/11278725903945249551",
            69,
            "a replay of cached writes was refused data blocks (ENOSPC)",
        ),
    ];
    for &(id, op, bug) in deaths {
        let w = workloads::by_id(id, RANDOM_OPS);
        let base = make_base(&w.setup);
        let rec = record_in(&base, &w, delayed_allocation(id));
        if let Some(Verdict::Violation(why)) = crash::run::judge_death(&rec, op, false) {
            panic!("{bug}: {id}, killed after op {op}:\n{why}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Durability without fsync, and what recovery reports (core API, real background thread).

mod durability {
    use dualfs::device::{BlockDevice, MemDevice, RecordingDevice, SeqClock, WriteSubset};
    use dualfs::fs::{Caller, Fs, MountOptions};
    use dualfs::mkfs::{mkfs, MkfsParams};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const ROOT: u64 = 1;
    const WHO: Caller = Caller::ROOT;

    struct Devices {
        clock: Arc<SeqClock>,
        meta: Arc<RecordingDevice<MemDevice>>,
        data: Arc<RecordingDevice<MemDevice>>,
        base_meta: Vec<u8>,
        base_data: Vec<u8>,
    }

    /// A fresh file system on recording devices (recording starts after mkfs).
    fn devices() -> Devices {
        let clock = SeqClock::new();
        let meta = Arc::new(RecordingDevice::with_clock(
            MemDevice::new(4 << 20),
            4096,
            clock.clone(),
        ));
        let data = Arc::new(RecordingDevice::with_clock(
            MemDevice::new(8 << 20),
            4096,
            clock.clone(),
        ));
        let params = MkfsParams {
            segment_blocks: 16,
            ..MkfsParams::default()
        };
        mkfs(meta.clone(), data.clone(), &params).unwrap();
        meta.restart_recording();
        data.restart_recording();
        Devices {
            base_meta: meta.inner().snapshot(),
            base_data: data.inner().snapshot(),
            clock,
            meta,
            data,
        }
    }

    impl Devices {
        fn mount(&self, opts: MountOptions) -> Arc<Fs> {
            let m: Arc<dyn BlockDevice> = self.meta.clone();
            let d: Arc<dyn BlockDevice> = self.data.clone();
            Fs::mount(m, d, opts).unwrap()
        }

        /// A power cut now that keeps only what was flushed: every write since each device's
        /// last completed flush is lost.
        fn cut_now(&self) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
            let t = self.clock.now();
            let none = WriteSubset::Prefix(0);
            let m = self.meta.crash_state_at(&self.base_meta, t, &none).unwrap();
            let d = self.data.crash_state_at(&self.base_data, t, &none).unwrap();
            (
                Arc::new(MemDevice::from_bytes(m)),
                Arc::new(MemDevice::from_bytes(d)),
            )
        }
    }

    /// Cached file data expires with each flush here: what these tests wait for is the
    /// background flush carrying everything (data_expire, default 30 s, bounds data apart).
    fn opts(flush: Duration, checkpoint: Duration) -> MountOptions {
        MountOptions {
            flush_interval: flush,
            checkpoint_interval: checkpoint,
            data_expire: flush,
            ..MountOptions::default()
        }
    }

    fn content(i: usize) -> Vec<u8> {
        (0..10_000 + i * 777)
            .map(|j| ((i * 31 + j * 7) % 251) as u8 + 1)
            .collect()
    }

    /// Work that is never fsync'd: a directory, files with data, a rename, a symlink.
    fn work(fs: &Fs, n: usize) -> u64 {
        let dir = fs.mkdir(&WHO, ROOT, b"work", 0o755).unwrap().ino;
        for i in 0..n {
            let (a, fh) = fs
                .create(&WHO, dir, format!("f{i}").as_bytes(), 0o644, libc::O_WRONLY)
                .unwrap();
            fs.write(a.ino, fh, 0, &content(i)).unwrap();
            fs.release(a.ino, fh).unwrap();
        }
        fs.rename(&WHO, dir, b"f0", ROOT, b"moved", Default::default())
            .unwrap();
        fs.symlink(&WHO, dir, b"link", b"../moved").unwrap();
        dir
    }

    fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
        let fh = fs.open(&WHO, ino, libc::O_RDONLY).unwrap();
        let v = fs.read(ino, fh, 0, 1 << 24).unwrap();
        fs.release(ino, fh).unwrap();
        v
    }

    fn verify(fs: &Fs, n: usize) {
        let dir = fs.lookup(ROOT, b"work").expect("work/ survived").ino;
        let moved = fs.lookup(ROOT, b"moved").expect("the rename survived");
        assert_eq!(read_all(fs, moved.ino), content(0));
        for i in 1..n {
            let a = fs
                .lookup(dir, format!("f{i}").as_bytes())
                .unwrap_or_else(|e| panic!("work/f{i} lost: {e}"));
            assert_eq!(read_all(fs, a.ino), content(i), "work/f{i}");
        }
        let l = fs.lookup(dir, b"link").unwrap();
        assert_eq!(fs.readlink(l.ino).unwrap(), b"../moved");
    }

    /// Work not fsync'd survives a power cut that comes after the flush interval has passed:
    /// the documented bound on what a crash loses.
    #[test]
    fn work_survives_a_power_cut_after_the_flush_interval() {
        let dev = devices();
        let flush = Duration::from_millis(200);
        let fs = dev.mount(opts(flush, Duration::from_secs(3600)));
        let n = 20;
        work(&fs, n);
        let done = Instant::now();
        let flushes_after_work = fs.stats().flushes;
        // One whole interval after the work, the background flush has run. Cut no sooner than
        // two intervals later, once a flush has completed since the work (on a loaded machine
        // this can take longer) and no further one followed it for an interval (in case that
        // one had begun before the work ended).
        std::thread::sleep(flush * 2);
        let deadline = done + Duration::from_secs(10);
        while fs.stats().flushes == flushes_after_work && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        loop {
            let n = fs.stats().flushes;
            std::thread::sleep(flush * 2);
            if fs.stats().flushes == n || Instant::now() > deadline {
                break;
            }
        }
        let cut_after = done.elapsed();
        let (m, d) = dev.cut_now();
        drop(fs); // never unmounted: the original is simply abandoned
        let crashed = Fs::mount(m.clone(), d.clone(), opts(flush, Duration::from_secs(3600)))
            .expect("recovery");
        let r = crashed.recovery().clone();
        assert!(r.crashed(), "{r:?}");
        assert!(!r.checkpoint_clean, "{r:?}");
        assert!(
            r.report.transactions > 0,
            "the work must come back by roll-forward: {r:?}"
        );
        verify(&crashed, n);
        crashed.unmount().unwrap();
        let report = dualfs::check::check(&*m, &*d).unwrap();
        assert!(report.is_clean(), "{report}");
        eprintln!(
            "power cut {cut_after:?} after unsynced work (flush interval {flush:?}): \
             {} transactions, {} blocks rolled forward, nothing lost",
            r.report.transactions, r.report.blocks
        );
    }

    /// The clean flag tells a cleanly unmounted file system from a crashed one, and the
    /// recovery report says what roll-forward did; a periodic checkpoint bounds the log that a
    /// crash leaves to replay.
    #[test]
    fn recovery_reports_clean_and_crashed_mounts() {
        let dev = devices();
        let never = Duration::from_secs(3600);
        // A clean unmount: nothing to recover.
        let fs = dev.mount(opts(never, never));
        assert!(fs.recovery().checkpoint_clean, "after mkfs");
        assert!(!fs.recovery().crashed());
        work(&fs, 5);
        fs.unmount().unwrap();
        drop(fs);
        let fs = dev.mount(opts(never, never));
        let r = fs.recovery().clone();
        assert!(r.checkpoint_clean && !r.crashed(), "{r:?}");
        assert_eq!(r.report.transactions, 0);
        // Synced work, then a crash: the checkpoint is not clean, the log is replayed.
        let dir = fs.lookup(ROOT, b"work").unwrap().ino;
        for i in 0..10 {
            fs.create(&WHO, dir, format!("g{i}").as_bytes(), 0o644, 0)
                .map(|(a, h)| fs.release(a.ino, h))
                .unwrap()
                .unwrap();
            fs.fsyncdir(dir, false).unwrap();
        }
        let (m, d) = dev.cut_now();
        let crashed = Fs::mount(m.clone(), d.clone(), opts(never, never)).unwrap();
        let r = crashed.recovery().clone();
        assert!(!r.checkpoint_clean && r.crashed(), "{r:?}");
        assert_eq!(
            r.report.transactions, 10,
            "one transaction per fsyncdir: {r:?}"
        );
        for i in 0..10 {
            crashed.lookup(dir, format!("g{i}").as_bytes()).unwrap();
        }
        crashed.unmount().unwrap();
        // Mounted again after recovery's clean unmount: clean, nothing to replay.
        let again = Fs::mount(m.clone(), d.clone(), opts(never, never)).unwrap();
        assert!(!again.recovery().crashed(), "{:?}", again.recovery());
        again.unmount().unwrap();
        fs.unmount().unwrap();

        // With a short checkpoint interval, a crash replays only what came after the last
        // periodic checkpoint.
        let dev = devices();
        let fs = dev.mount(opts(Duration::from_millis(50), Duration::from_millis(300)));
        let dir = fs.mkdir(&WHO, ROOT, b"d", 0o755).unwrap().ino;
        for i in 0..40 {
            fs.create(&WHO, dir, format!("h{i}").as_bytes(), 0o644, 0)
                .map(|(a, h)| fs.release(a.ino, h))
                .unwrap()
                .unwrap();
            fs.fsyncdir(dir, false).unwrap();
        }
        let ckpts = fs.stats().checkpoints;
        let deadline = Instant::now() + Duration::from_secs(10);
        while fs.stats().checkpoints < ckpts + 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            fs.stats().checkpoints >= ckpts + 2,
            "no periodic checkpoint"
        );
        let (m, d) = dev.cut_now();
        let crashed = Fs::mount(m, d, opts(never, never)).unwrap();
        let r = crashed.recovery().clone();
        assert!(
            r.report.transactions < 40,
            "a periodic checkpoint came after the 40 fsyncs, yet {} transactions were replayed",
            r.report.transactions
        );
        for i in 0..40 {
            crashed.lookup(dir, format!("h{i}").as_bytes()).unwrap();
        }
        crashed.unmount().unwrap();
        fs.unmount().unwrap();
    }
}
