//! Recovery time against the checkpoint interval.
//!
//! For each checkpoint interval (default 5, 15 and 30 s): make a fresh DualFS on two sparse
//! image files, mount it in-process with that interval, and run a metadata-heavy workload
//! (threads creating, renaming and removing files and directories, fsync'ing their directory
//! every few dozen operations). After the first periodic checkpoint, wait until the next one
//! is almost due (the worst moment: the most log since a checkpoint) and cut the power: every
//! later write to either image fails, as after a power loss (what was written stays, since the
//! images' page cache survives). Then drop the images' pages from the page cache and time the
//! mount, which loads the newest checkpoint and rolls the log forward. Prints, side by side:
//! the interval, how long after the last checkpoint the power was cut, the log replayed
//! (transactions, partial segments, blocks, MiB) and the recovery (mount) time, with a clean
//! mount of the same file system afterwards for scale.
//!
//!     bench/recovery.sh [--intervals 5,15,30] [--seconds N] [--threads 2] [--rate 20000]
//!                       [--fsync-every 64] [--flush 1] [--checkpoint-segments N] [--dir DIR]
//!                       [--no-check]
//!
//! `--seconds N`: write for at least N seconds before waiting for the worst moment to cut.
//!
//! `--rate` caps the operations per second of all threads together (0: as fast as they go),
//! so that the log written, and with it the log to replay, grows with the interval.
//!
//! `--checkpoint-segments` is the other checkpoint trigger (default here: none, so that the
//! interval alone bounds the log; the mount program's default is 32 segments).

#[path = "bench_csv/mod.rs"]
mod bench_csv;

use dualfs::device::{BlockDevice, FileDevice, OpenMode};
use dualfs::fs::{Caller, Fs, MountOptions};
use dualfs::mkfs::{mkfs, MkfsParams};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A device whose power can be cut: afterwards every write and flush fails with EIO.
struct Cuttable {
    inner: FileDevice,
    cut: AtomicBool,
}

impl BlockDevice for Cuttable {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.flush()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

struct Args {
    intervals: Vec<u64>,
    threads: usize,
    seconds: u64,
    rate: u64,
    fsync_every: u64,
    flush: u64,
    checkpoint_segments: u64,
    dir: PathBuf,
    check: bool,
    csv: Option<PathBuf>,
}

fn parse_args() -> Args {
    let mut a = Args {
        intervals: vec![5, 15, 30],
        threads: 2,
        seconds: 0,
        rate: 20_000,
        fsync_every: 64,
        flush: 1,
        checkpoint_segments: u64::MAX,
        dir: std::env::temp_dir(),
        check: true,
        csv: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--intervals" => {
                a.intervals = val()
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse()
                            .expect("intervals: seconds, comma-separated")
                    })
                    .collect()
            }
            "--threads" => a.threads = val().parse().expect("--threads N"),
            "--rate" => a.rate = val().parse().expect("--rate OPS_PER_SECOND"),
            "--seconds" => a.seconds = val().parse().expect("--seconds N"),
            "--fsync-every" => a.fsync_every = val().parse().expect("--fsync-every N"),
            "--flush" => a.flush = val().parse().expect("--flush SECONDS"),
            "--checkpoint-segments" => {
                a.checkpoint_segments = val().parse().expect("--checkpoint-segments N")
            }
            "--dir" => a.dir = PathBuf::from(val()),
            "--no-check" => a.check = false,
            "--csv" => a.csv = Some(PathBuf::from(val())),
            "-h" | "--help" => {
                println!(
                    "usage: recovery [--intervals 5,15,30] [--seconds N] [--threads 2] \
                     [--rate 20000] [--fsync-every 64] \
                     [--flush 1] [--checkpoint-segments N] [--dir DIR] [--no-check] [--csv FILE]"
                );
                std::process::exit(0);
            }
            other => {
                eprintln!("recovery: unknown argument {other:?} (try --help)");
                std::process::exit(2);
            }
        }
    }
    a
}

const META_SIZE: u64 = 4 << 30;
const DATA_SIZE: u64 = 1 << 30;
const WHO: Caller = Caller::ROOT;

fn open(p: &Path) -> FileDevice {
    FileDevice::open(
        p,
        OpenMode {
            read_only: false,
            exclusive: true,
            ..OpenMode::default()
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Write the image's dirty pages and drop all its pages from the page cache, so the next
/// mount reads from the disk (only this file's pages; no root needed).
fn drop_cache(p: &Path) {
    let f = std::fs::File::open(p).unwrap();
    f.sync_all().unwrap();
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// One thread of the workload: files in its own directories, created, renamed, removed,
/// directories made; its directory fsync'd every `fsync_every` operations.
fn worker(
    fs: Arc<Fs>,
    id: usize,
    rate: f64,
    fsync_every: u64,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
) {
    let start = Instant::now();
    let top = match fs.mkdir(&WHO, 1, format!("w{id}").as_bytes(), 0o755) {
        Ok(a) => a.ino,
        Err(_) => return,
    };
    let mut dirs = vec![top];
    let mut live: Vec<(u64, String)> = Vec::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ id as u64;
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let r = x % 100;
        let res = if r < 45 || live.len() < 100 {
            let d = dirs[(x >> 8) as usize % dirs.len()];
            let name = format!("file-{id}-{n}");
            fs.create(&WHO, d, name.as_bytes(), 0o644, 0)
                .and_then(|(a, h)| {
                    live.push((d, name));
                    fs.release(a.ino, h)
                })
        } else if r < 70 {
            let i = (x >> 8) as usize % live.len();
            let (d, old) = live[i].clone();
            let nd = dirs[(x >> 20) as usize % dirs.len()];
            let name = format!("moved-{id}-{n}");
            let r = fs.rename(
                &WHO,
                d,
                old.as_bytes(),
                nd,
                name.as_bytes(),
                Default::default(),
            );
            live[i] = (nd, name);
            r
        } else if r < 95 || live.len() > 50_000 {
            let i = (x >> 8) as usize % live.len();
            let (d, name) = live.swap_remove(i);
            fs.unlink(&WHO, d, name.as_bytes())
        } else if dirs.len() < 64 {
            fs.mkdir(&WHO, top, format!("dir-{n}").as_bytes(), 0o755)
                .map(|a| dirs.push(a.ino))
        } else {
            let d = dirs[(x >> 8) as usize % dirs.len()];
            fs.symlink(&WHO, d, format!("link-{id}-{n}").as_bytes(), &[b'l'; 200])
                .map(|_| ())
        };
        if res.is_err() {
            // The power was cut (or the log is full): stop.
            return;
        }
        n += 1;
        ops.fetch_add(1, Ordering::Relaxed);
        if rate > 0.0 {
            let due = Duration::from_secs_f64(n as f64 / rate);
            if let Some(ahead) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(ahead);
            }
        }
        if n % fsync_every == 0 && fs.fsyncdir(top, false).is_err() {
            return;
        }
    }
}

struct Row {
    interval: u64,
    ran: Duration,
    since_checkpoint: Duration,
    ops: u64,
    transactions: u64,
    partial_segments: u64,
    blocks: u64,
    recovery: Duration,
    clean_mount: Duration,
    check: Option<Duration>,
}

fn run(a: &Args, interval: u64) -> Row {
    let dir = tempfile::Builder::new()
        .prefix("dualfs-recovery-")
        .tempdir_in(&a.dir)
        .expect("temp dir");
    let meta_p = dir.path().join("meta.img");
    let data_p = dir.path().join("data.img");
    for (p, size) in [(&meta_p, META_SIZE), (&data_p, DATA_SIZE)] {
        std::fs::File::create(p).unwrap().set_len(size).unwrap();
    }
    {
        let m: Arc<dyn BlockDevice> = Arc::new(open(&meta_p));
        let d: Arc<dyn BlockDevice> = Arc::new(open(&data_p));
        mkfs(m, d, &MkfsParams::default()).expect("mkfs");
    }
    let meta = Arc::new(Cuttable {
        inner: open(&meta_p),
        cut: AtomicBool::new(false),
    });
    let data = Arc::new(Cuttable {
        inner: open(&data_p),
        cut: AtomicBool::new(false),
    });
    let opts = MountOptions {
        flush_interval: Duration::from_secs(a.flush),
        checkpoint_interval: Duration::from_secs(interval),
        checkpoint_segments: a.checkpoint_segments,
        ..MountOptions::default()
    };
    let m: Arc<dyn BlockDevice> = meta.clone();
    let d: Arc<dyn BlockDevice> = data.clone();
    let fs = Fs::mount(m, d, opts).expect("mount");
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..a.threads)
        .map(|i| {
            let (fs, stop, ops) = (fs.clone(), stop.clone(), ops.clone());
            let every = a.fsync_every;
            let rate = a.rate as f64 / a.threads as f64;
            std::thread::spawn(move || worker(fs, i, rate, every, stop, ops))
        })
        .collect();
    // Watch the checkpoints; after the first periodic one, cut just before the next is due.
    let start = Instant::now();
    let mut seen = fs.stats().checkpoints;
    let mut last = start;
    let mut periodic = 0;
    let target = Duration::from_millis(interval * 950);
    loop {
        std::thread::sleep(Duration::from_millis(2));
        let c = fs.stats().checkpoints;
        if c != seen {
            seen = c;
            last = Instant::now();
            periodic += 1;
        }
        let long_enough = start.elapsed() >= Duration::from_secs(a.seconds);
        if periodic >= 1 && long_enough && last.elapsed() >= target {
            break;
        }
        if start.elapsed() > Duration::from_secs(a.seconds + interval * 4 + 60) {
            panic!("no periodic checkpoint after {:?}", start.elapsed());
        }
    }
    meta.cut.store(true, Ordering::SeqCst);
    data.cut.store(true, Ordering::SeqCst);
    let since_checkpoint = last.elapsed();
    let ran = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    // Stop the dead file system's thread; its final checkpoint fails, as it must.
    let _ = fs.unmount();
    drop(fs);
    drop((meta, data));

    drop_cache(&meta_p);
    drop_cache(&data_p);
    let t = Instant::now();
    let m: Arc<dyn BlockDevice> = Arc::new(open(&meta_p));
    let d: Arc<dyn BlockDevice> = Arc::new(open(&data_p));
    let fs = Fs::mount(m, d, MountOptions::default()).expect("recovery mount");
    let recovery = t.elapsed();
    let r = fs.recovery().clone();
    assert!(r.crashed(), "the cut file system mounted as clean: {r:?}");
    fs.unmount().expect("unmount after recovery");
    drop(fs);

    drop_cache(&meta_p);
    drop_cache(&data_p);
    let t = Instant::now();
    let m: Arc<dyn BlockDevice> = Arc::new(open(&meta_p));
    let d: Arc<dyn BlockDevice> = Arc::new(open(&data_p));
    let fs = Fs::mount(m, d, MountOptions::default()).expect("clean mount");
    let clean_mount = t.elapsed();
    assert!(!fs.recovery().crashed());
    fs.unmount().expect("unmount");
    drop(fs);

    let check = a.check.then(|| {
        let t = Instant::now();
        let m = open(&meta_p);
        let d = open(&data_p);
        let rep = dualfs::check::check(&m, &d).expect("checker");
        assert!(rep.is_clean(), "checker after recovery:\n{rep}");
        t.elapsed()
    });
    Row {
        interval,
        ran,
        since_checkpoint,
        ops: ops.load(Ordering::Relaxed),
        transactions: r.report.transactions,
        partial_segments: r.report.partial_segments,
        blocks: r.report.blocks,
        recovery,
        clean_mount,
        check,
    }
}

fn main() {
    let a = parse_args();
    println!(
        "DualFS recovery time vs checkpoint interval: {} workload threads, {} ops/s, fsyncdir \
         every {} ops, flush interval {} s, checkpoint after {} segments of log; images in {}",
        a.threads,
        if a.rate == 0 {
            "unlimited".to_string()
        } else {
            a.rate.to_string()
        },
        a.fsync_every,
        a.flush,
        if a.checkpoint_segments == u64::MAX {
            "unlimited".to_string()
        } else {
            a.checkpoint_segments.to_string()
        },
        a.dir.display()
    );
    let mut rows = Vec::new();
    for &i in &a.intervals {
        eprintln!("checkpoint interval {i} s: running...");
        let r = run(&a, i);
        eprintln!(
            "  cut {:.1?} after the last checkpoint; {} transactions replayed in {:.1?}",
            r.since_checkpoint, r.transactions, r.recovery
        );
        rows.push(r);
    }
    println!();
    println!(
        "{:>10} {:>8} {:>14} {:>10} {:>12} {:>10} {:>10} {:>9} {:>12} {:>11} {:>9}",
        "interval",
        "ran",
        "since ckpt",
        "ops",
        "transactions",
        "partials",
        "blocks",
        "log MiB",
        "recovery",
        "clean mount",
        "check"
    );
    let mut csv = bench_csv::Csv::create(a.csv.as_deref());
    for r in &rows {
        let phase = format!("interval {} s", r.interval);
        csv.row(
            "dualfs",
            &phase,
            "recovery_seconds",
            r.recovery.as_secs_f64(),
            "s",
        );
        csv.row(
            "dualfs",
            &phase,
            "clean_mount_seconds",
            r.clean_mount.as_secs_f64(),
            "s",
        );
        csv.row(
            "dualfs",
            &phase,
            "since_checkpoint_seconds",
            r.since_checkpoint.as_secs_f64(),
            "s",
        );
        csv.row(
            "dualfs",
            &phase,
            "transactions_replayed",
            r.transactions as f64,
            "transactions",
        );
        let log_mib = (r.blocks + r.partial_segments) as f64 * 4096.0 / (1 << 20) as f64;
        csv.row("dualfs", &phase, "log_replayed", log_mib, "MiB");
        csv.row("dualfs", &phase, "ops", r.ops as f64, "ops");
        if let Some(c) = r.check {
            csv.row("dualfs", &phase, "check_seconds", c.as_secs_f64(), "s");
        }
    }
    for r in &rows {
        println!(
            "{:>9}s {:>7.1}s {:>13.2}s {:>10} {:>12} {:>10} {:>10} {:>9.1} {:>11.3}s {:>10.3}s {:>9}",
            r.interval,
            r.ran.as_secs_f64(),
            r.since_checkpoint.as_secs_f64(),
            r.ops,
            r.transactions,
            r.partial_segments,
            r.blocks,
            (r.blocks + r.partial_segments) as f64 * 4096.0 / (1 << 20) as f64,
            r.recovery.as_secs_f64(),
            r.clean_mount.as_secs_f64(),
            r.check
                .map(|c| format!("{:.2}s", c.as_secs_f64()))
                .unwrap_or("-".into())
        );
    }
}
