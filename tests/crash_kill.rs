//! Real process crashes: `dualfs mount --foreground` is killed with SIGKILL at a random moment
//! of a heavy workload (two threads copying a generated tree in, each file written then
//! fsync'd, each directory fsync'd when complete), the dead mount is detached, the file system
//! is mounted again (recovery), unmounted and checked, mounted again, and every file whose
//! fsync returned before the kill must be there with its exact content. Files whose fsync had
//! not returned may be missing or shorter, but what they show must be a prefix of what was
//! written (no stale or foreign data). The rounds go on in the same file system, so recovery
//! meets the log of earlier crashes too.
//!
//! `DUALFS_KILL_SEED` picks the tree and the kill moments (printed); `DUALFS_KILL_ROUNDS`
//! (default 20) the number of rounds.

#[macro_use]
mod common;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One file of a round's tree: where it goes, its size and the seed of its bytes.
#[derive(Clone, Debug)]
struct Planned {
    rel: PathBuf,
    len: usize,
    id: u64,
}

/// Files (and the directories holding them) of round `round`, for copier `thread`.
fn plan(rng: &mut StdRng, round: usize, thread: usize, files: usize) -> Vec<Planned> {
    let mut v = Vec::with_capacity(files);
    let dirs = 8;
    for i in 0..files {
        let len = match rng.gen_range(0..100) {
            0..=9 => 0,
            10..=64 => rng.gen_range(1..16 << 10),
            65..=94 => rng.gen_range(16 << 10..256 << 10),
            _ => rng.gen_range(256 << 10..2 << 20),
        };
        v.push(Planned {
            rel: PathBuf::from(format!(
                "round-{round:02}/t{thread}/d{}/f{i:04}",
                i * dirs / files
            )),
            len,
            id: rng.gen(),
        });
    }
    v
}

/// What a copier got done: files whose fsync returned, and why it stopped.
#[derive(Default)]
struct Progress {
    durable: Vec<Planned>,
    stopped: Option<String>,
}

fn fsync_dir(p: &Path) -> std::io::Result<()> {
    fs::File::open(p)?.sync_all()
}

/// Copy `files` under `root` in order: create, write in pieces, fsync; fsync each directory
/// when its last file is done. Stops at the first error (the daemon was killed).
fn copier(
    root: PathBuf,
    files: Vec<Planned>,
    progress: Arc<Mutex<Progress>>,
    stop: Arc<AtomicBool>,
) {
    let run = || -> std::io::Result<()> {
        let mut made: Option<PathBuf> = None;
        for (k, f) in files.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let path = root.join(&f.rel);
            let dir = path.parent().unwrap().to_path_buf();
            if made.as_ref() != Some(&dir) {
                fs::create_dir_all(&dir)?;
                fsync_dir(dir.parent().unwrap())?;
                made = Some(dir.clone());
            }
            let data = content(f.id, f.len);
            let mut out = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&path)?;
            for piece in data.chunks(192 << 10) {
                out.write_all(piece)?;
            }
            if k % 2 == 0 {
                out.sync_all()?;
            } else {
                out.sync_data()?;
            }
            drop(out);
            progress.lock().unwrap().durable.push(f.clone());
            let last_in_dir = files
                .get(k + 1)
                .is_none_or(|n| root.join(&n.rel).parent() != Some(&dir));
            if last_in_dir {
                fsync_dir(&dir)?;
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        progress.lock().unwrap().stopped = Some(e.to_string());
    }
}

/// Every durable file intact; every other file of the plan, if present, a prefix of its data.
fn verify(fs_root: &Path, planned: &[Planned], durable: &BTreeMap<PathBuf, Planned>) -> usize {
    let mut partial = 0;
    for f in planned {
        let p = fs_root.join(&f.rel);
        let want = content(f.id, f.len);
        match fs::read(&p) {
            Ok(got) if durable.contains_key(&f.rel) => assert!(
                got == want,
                "{}: fsync'd before the kill, but {} bytes read where {} were written{}",
                f.rel.display(),
                got.len(),
                want.len(),
                if got.len() == want.len() {
                    " (content differs)"
                } else {
                    ""
                }
            ),
            Ok(got) => {
                assert!(
                    got.len() <= want.len() && got == want[..got.len()],
                    "{}: not fsync'd, yet shows {} bytes that are not a prefix of the {} written",
                    f.rel.display(),
                    got.len(),
                    want.len()
                );
                partial += (got.len() < want.len()) as usize;
            }
            Err(e) => assert!(
                !durable.contains_key(&f.rel),
                "{}: fsync'd before the kill, now: {e}",
                f.rel.display()
            ),
        }
    }
    partial
}

#[test]
fn kill_9_during_a_heavy_workload() {
    dualfs_only!();
    let seed = std::env::var("DUALFS_KILL_SEED")
        .ok()
        .map(|s| s.parse::<u64>().expect("DUALFS_KILL_SEED is a number"))
        .unwrap_or(0x6b11_9a11);
    let rounds: usize = std::env::var("DUALFS_KILL_ROUNDS")
        .ok()
        .map(|s| s.parse().expect("DUALFS_KILL_ROUNDS is a number"))
        .unwrap_or(20);
    eprintln!("kill -9 test: DUALFS_KILL_SEED={seed} DUALFS_KILL_ROUNDS={rounds}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = TestFs::builder().sizes(256 << 20, 2 << 30).mount();
    let start = Instant::now();
    let mut all_planned: Vec<Planned> = Vec::new();
    let mut durable: BTreeMap<PathBuf, Planned> = BTreeMap::new();
    let (mut total_durable, mut total_bytes) = (0usize, 0u64);
    for round in 0..rounds {
        let plans: Vec<Vec<Planned>> = (0..2).map(|k| plan(&mut rng, round, k, 400)).collect();
        let delay = Duration::from_millis(rng.gen_range(20..1200));
        let stop = Arc::new(AtomicBool::new(false));
        let progress: Vec<Arc<Mutex<Progress>>> = (0..2)
            .map(|_| Arc::new(Mutex::new(Progress::default())))
            .collect();
        let threads: Vec<_> = plans
            .iter()
            .zip(&progress)
            .map(|(files, pr)| {
                let (root, files, pr, stop) = (
                    t.path().to_path_buf(),
                    files.clone(),
                    pr.clone(),
                    stop.clone(),
                );
                std::thread::spawn(move || copier(root, files, pr, stop))
            })
            .collect();
        std::thread::sleep(delay);
        let pid = t.kill_daemon_hard();
        stop.store(true, Ordering::Relaxed);
        for th in threads {
            th.join().expect("copier thread");
        }
        let round_planned: Vec<Planned> = plans.iter().flatten().cloned().collect();
        let mut n_durable = 0;
        for pr in &progress {
            let pr = pr.lock().unwrap();
            for f in &pr.durable {
                durable.insert(f.rel.clone(), f.clone());
                total_bytes += f.len as u64;
            }
            n_durable += pr.durable.len();
        }
        total_durable += n_durable;
        for p in plans {
            all_planned.extend(p);
        }
        // Recovery, then a clean unmount and the checker, then a fresh mount to look at.
        // (The mount shows in the mount table before the daemon has finished the FUSE
        // handshake; unmounting before that makes it exit with an error. A lookup waits.)
        t.mount();
        fs::metadata(t.path()).expect("the recovered file system answers");
        t.remount();
        let partial = verify(t.path(), &round_planned, &durable);
        eprintln!(
            "round {round:2}: killed pid {pid} after {delay:?}: {n_durable} files fsync'd \
             survive, {partial} unfinished one(s) show a prefix; copiers stopped by: {:?}",
            progress
                .iter()
                .map(|p| p
                    .lock()
                    .unwrap()
                    .stopped
                    .clone()
                    .unwrap_or("finished".into()))
                .collect::<Vec<_>>()
        );
    }
    // Nothing durable was lost by the crashes and recoveries that came after it.
    verify(t.path(), &all_planned, &durable);
    t.unmount();
    eprintln!(
        "{rounds} kills in {:.1?}: {total_durable} fsync'd files ({} MiB) all intact",
        start.elapsed(),
        total_bytes >> 20
    );
}
