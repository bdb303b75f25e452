//! Tail latency of single operations on any mounted directory, idle and under load: the
//! workload of bench/latency.sh, which runs it on DualFS, kernel ext4 and memfs (the FUSE
//! ceiling) side by side.
//!
//!     latency run DIR [--files 1000] [--samples 2000] [--pause-us 500] [--load full|churn]
//!                     [--warmup-s 1]
//!     latency fill DIR --count N [--size 100]   # N more small live files under DIR/live
//!     latency load DIR [--kind full|churn]      # the load alone, until killed
//!
//! `run` makes `--files` files of 4 KiB in DIR/warm, reads and stats each once (so their
//! metadata and data are cached wherever the file system caches them), syncs, and then times
//! three operations one by one, `--samples` times each, interleaved, with `--pause-us` between
//! rounds:
//! - read: open a random warm file, read 4 KiB, close;
//! - stat: stat a random warm file;
//! - create: create a new empty file (O_CREAT|O_EXCL, then close) in DIR/new-PHASE.
//!
//! First with nothing else running (phase "idle"), then while a child process (this program's
//! `load`) works on DIR/load (phase "loaded"):
//! - full: write a 16 MiB file, fsync it, remove the previous one; then a
//!   burst of 500 creates of empty files and their 500 unlinks; again;
//! - churn: bursts of 2,000 creates of 100-byte files and their unlinks only (keeps a small
//!   metadata device busy without filling the data device).
//!
//! Output, one line per phase and operation, machine-readable:
//!     latency phase=idle op=read n=2000 p50_us=12.1 p99_us=45.0 max_us=210.3 mean_us=14.2
//! and one line with what the load did: `load mib_written=... files_created=... cycles=...`.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const READ_SIZE: usize = 4096;
const BIG_FILE: usize = 16 << 20;

fn usage(code: i32) -> ! {
    let text = "usage: latency run DIR [--files N] [--samples N] [--pause-us US] [--load full|churn] [--warmup-s S]\n\
                \x20      latency fill DIR --count N [--size BYTES]\n\
                \x20      latency load DIR [--kind full|churn]";
    if code == 0 {
        println!("{text}");
    } else {
        eprintln!("{text}");
    }
    std::process::exit(code)
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL in paths")
}

fn die(what: &str, p: &Path) -> ! {
    eprintln!(
        "latency: {what} {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    std::process::exit(1)
}

/// A small xorshift generator: the same sequence of files on every file system.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Write a whole file; false (with the error on stderr) when the file system refused.
fn write_file(path: &Path, bytes: &[u8], fsync: bool) -> bool {
    let c = cpath(path);
    let fail = |what: &str| {
        let e = std::io::Error::last_os_error();
        eprintln!("latency: {what} {}: {e}", path.display());
        false
    };
    // SAFETY: plain syscalls on a path and a buffer we own.
    unsafe {
        let fd = libc::open(
            c.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            0o644,
        );
        if fd < 0 {
            return fail("create");
        }
        let mut done = 0;
        while done < bytes.len() {
            let n = libc::write(fd, bytes[done..].as_ptr().cast(), bytes.len() - done);
            if n <= 0 {
                libc::close(fd);
                return fail("write");
            }
            done += n as usize;
        }
        if fsync && libc::fsync(fd) != 0 {
            libc::close(fd);
            return fail("fsync");
        }
        libc::close(fd);
    }
    true
}

fn sync_fs(dir: &Path) {
    let c = cpath(dir);
    // SAFETY: open/syncfs/close on a directory path.
    unsafe {
        let fd = libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
        if fd >= 0 {
            libc::syncfs(fd);
            libc::close(fd);
        }
    }
}

/// The three timed operations; each returns its duration.
fn op_read(path: &CString, buf: &mut [u8]) -> Duration {
    let t = Instant::now();
    // SAFETY: open/read/close with a buffer we own.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
        if fd < 0 || libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) < 0 {
            die(
                "read",
                Path::new(std::ffi::OsStr::from_bytes(path.as_bytes())),
            );
        }
        libc::close(fd);
    }
    t.elapsed()
}

fn op_stat(path: &CString) -> Duration {
    let t = Instant::now();
    // SAFETY: stat into a zeroed struct we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::stat(path.as_ptr(), &mut st) != 0 {
            die(
                "stat",
                Path::new(std::ffi::OsStr::from_bytes(path.as_bytes())),
            );
        }
    }
    t.elapsed()
}

/// A create the file system refused (ENOSPC on a full metadata device) is timed all the same
/// and counted.
fn op_create(path: &Path, errors: &mut u64) -> Duration {
    let c = cpath(path);
    let t = Instant::now();
    // SAFETY: open/close on a path we own.
    unsafe {
        let fd = libc::open(
            c.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644,
        );
        if fd < 0 {
            *errors += 1;
        } else {
            libc::close(fd);
        }
    }
    t.elapsed()
}

struct RunArgs {
    dir: PathBuf,
    files: usize,
    samples: usize,
    pause: Duration,
    load: String,
    warmup: Duration,
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e6
}

fn report(phase: &str, op: &str, mut v: Vec<Duration>) {
    v.sort();
    let mean = v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len() as f64 * 1e6;
    println!(
        "latency phase={phase} op={op} n={} p50_us={:.1} p99_us={:.1} max_us={:.1} mean_us={:.1}",
        v.len(),
        percentile(&v, 0.50),
        percentile(&v, 0.99),
        v.last().unwrap().as_secs_f64() * 1e6,
        mean
    );
}

/// One measured phase: `samples` rounds of read, stat and create.
fn measure(a: &RunArgs, phase: &str, warm: &[CString]) {
    let new_dir = a.dir.join(format!("new-{phase}"));
    std::fs::create_dir_all(&new_dir).unwrap_or_else(|_| die("mkdir", &new_dir));
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut buf = vec![0u8; READ_SIZE];
    let (mut reads, mut stats, mut creates) = (Vec::new(), Vec::new(), Vec::new());
    let mut errors = 0;
    for i in 0..a.samples {
        reads.push(op_read(&warm[rng.below(warm.len())], &mut buf));
        stats.push(op_stat(&warm[rng.below(warm.len())]));
        creates.push(op_create(&new_dir.join(format!("f{i}")), &mut errors));
        std::thread::sleep(a.pause);
    }
    report(phase, "read", reads);
    report(phase, "stat", stats);
    report(phase, "create", creates);
    if errors > 0 {
        println!("errors phase={phase} op=create failed={errors}");
    }
}

fn run(a: RunArgs) {
    let warm_dir = a.dir.join("warm");
    std::fs::create_dir_all(&warm_dir).unwrap_or_else(|_| die("mkdir", &warm_dir));
    let data = vec![0x5Au8; READ_SIZE];
    let paths: Vec<PathBuf> = (0..a.files)
        .map(|i| warm_dir.join(format!("w{i:05}")))
        .collect();
    for p in &paths {
        if !write_file(p, &data, false) {
            std::process::exit(1);
        }
    }
    sync_fs(&a.dir);
    let warm: Vec<CString> = paths.iter().map(|p| cpath(p)).collect();
    let mut buf = vec![0u8; READ_SIZE];
    for c in &warm {
        op_read(c, &mut buf);
        op_stat(c);
    }
    std::thread::sleep(a.warmup);
    measure(&a, "idle", &warm);
    sync_fs(&a.dir);

    let load_dir = a.dir.join("load");
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .arg("load")
        .arg(&load_dir)
        .arg("--kind")
        .arg(&a.load)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the load process");
    // The load's progress lines, read beside the measurement so its pipe never fills.
    let out = child.stdout.take().unwrap();
    let totals = std::thread::spawn(move || {
        let (mut mib, mut files, mut failed, mut cycles) = (0u64, 0u64, 0u64, 0u64);
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let mut it = line
                .split_whitespace()
                .map(|w| w.parse::<u64>().unwrap_or(0));
            mib += it.next().unwrap_or(0);
            files += it.next().unwrap_or(0);
            failed += it.next().unwrap_or(0);
            cycles += 1;
        }
        (mib, files, failed, cycles)
    });
    std::thread::sleep(a.warmup);
    measure(&a, "loaded", &warm);
    // Our own child: stopped at once, whatever it was doing.
    child.kill().ok();
    child.wait().ok();
    let (mib, files, failed, cycles) = totals.join().unwrap();
    println!(
        "load kind={} mib_written={mib} files_created={files} failed={failed} cycles={cycles}",
        a.load
    );
}

/// The load: runs until killed; prints "MIB FILES FAILED" after each cycle. What the file
/// system refuses (ENOSPC) is counted and the load goes on.
fn load(dir: &Path, kind: &str) -> ! {
    std::fs::create_dir_all(dir).unwrap_or_else(|_| die("mkdir", dir));
    let big = vec![0xA5u8; BIG_FILE];
    let small = vec![0x11u8; 100];
    let stdout = std::io::stdout();
    for cycle in 0u64.. {
        let (mut mib, mut failed) = (0, 0);
        let (burst, payload): (usize, &[u8]) = match kind {
            "churn" => (2000, &small),
            _ => {
                // write(2) of 16 MiB: the file system sees it as max_write-sized requests (or page
                // writeback), as a program writing a big file would make it.
                let p = dir.join(format!("big{}", cycle % 2));
                if write_file(&p, &big, true) {
                    mib = (BIG_FILE >> 20) as u64;
                } else {
                    failed += 1;
                }
                let _ = std::fs::remove_file(dir.join(format!("big{}", (cycle + 1) % 2)));
                (500, &[][..])
            }
        };
        let names: Vec<PathBuf> = (0..burst).map(|i| dir.join(format!("c{i}"))).collect();
        for p in &names {
            if !write_file(p, payload, false) {
                failed += 1;
            }
        }
        for p in &names {
            let _ = std::fs::remove_file(p);
        }
        if failed > 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut out = stdout.lock();
        if writeln!(out, "{mib} {burst} {failed}")
            .and_then(|_| out.flush())
            .is_err()
        {
            std::process::exit(0); // the measurement is over
        }
    }
    unreachable!()
}

/// Add `count` live files of `size` bytes under DIR/live (continuing the numbering).
fn fill(dir: &Path, count: usize, size: usize) {
    let live = dir.join("live");
    std::fs::create_dir_all(&live).unwrap_or_else(|_| die("mkdir", &live));
    let count_in = |d: &Path| std::fs::read_dir(d).map(|d| d.count()).unwrap_or(0);
    let start: usize = std::fs::read_dir(&live)
        .map(|d| d.filter_map(Result::ok).map(|e| count_in(&e.path())).sum())
        .unwrap_or(0);
    let data = vec![0x33u8; size];
    for i in start..start + count {
        // 100 files per subdirectory, as a tree of small files would be.
        let sub = live.join(format!("d{}", i / 100));
        if i % 100 == 0 || i == start {
            std::fs::create_dir_all(&sub).unwrap_or_else(|_| die("mkdir", &sub));
        }
        if !write_file(&sub.join(format!("f{i}")), &data, false) {
            std::process::exit(1);
        }
    }
    sync_fs(dir);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let cmd = args.next().unwrap_or_else(|| usage(2));
    if cmd == "-h" || cmd == "--help" {
        usage(0)
    }
    let dir = PathBuf::from(args.next().unwrap_or_else(|| usage(2)));
    let rest: Vec<String> = args.collect();
    let opt = |name: &str| -> Option<&str> {
        rest.iter().position(|a| a == name).map(|i| {
            rest.get(i + 1)
                .map(String::as_str)
                .unwrap_or_else(|| usage(2))
        })
    };
    let num = |name: &str, default: u64| -> u64 {
        opt(name).map_or(default, |v| v.parse().unwrap_or_else(|_| usage(2)))
    };
    let known = [
        "--files",
        "--samples",
        "--pause-us",
        "--load",
        "--warmup-s",
        "--count",
        "--size",
        "--kind",
    ];
    for (i, a) in rest.iter().enumerate() {
        if a.starts_with("--") && !known.contains(&a.as_str())
            || (i % 2 == 0 && !a.starts_with("--"))
        {
            usage(2)
        }
    }
    let kind = |name: &str| -> String {
        let k = opt(name).unwrap_or("full");
        if k != "full" && k != "churn" {
            usage(2)
        }
        k.to_string()
    };
    match cmd.as_str() {
        "run" => run(RunArgs {
            dir,
            files: num("--files", 1000).max(1) as usize,
            samples: num("--samples", 2000).max(1) as usize,
            pause: Duration::from_micros(num("--pause-us", 500)),
            load: kind("--load"),
            warmup: Duration::from_secs(num("--warmup-s", 1)),
        }),
        "fill" => fill(
            &dir,
            num("--count", 0) as usize,
            num("--size", 100) as usize,
        ),
        "load" => load(&dir, &kind("--kind")),
        _ => usage(2),
    }
}
