//! Metadata rates against the number of concurrent workers, in the style of mdtest: each
//! worker makes files in its own directory (mdtest's "unique directory" mode), then stats them,
//! then removes them; every phase starts for all workers at once and is timed from the first
//! start to the last finish. Works on any mounted directory; bench/metarate.sh runs it on
//! DualFS, kernel ext4 and memfs (the FUSE ceiling) and prints the scaling side by side.
//!
//!     metarate DIR [--workers 1,2,4] [--files N] [--rounds R]
//!
//! Phases (ops/s summed over workers):
//! - create: open(O_CREAT|O_EXCL|O_WRONLY, 0644) + close, as `touch` does;
//! - stat: lstat of every file by name (the kernel's dentry cache is dropped before, so each
//!   one is a LOOKUP on a FUSE file system);
//! - unlink.
//!
//! Output: one line per (workers, phase) with `rate` and the best of R rounds, machine-readable
//! as `metarate workers=W phase=P ops_per_sec=X`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Instant;

struct Args {
    dir: PathBuf,
    workers: Vec<usize>,
    files: usize,
    rounds: usize,
}

fn parse_args() -> Args {
    let mut args = std::env::args().skip(1);
    let mut dir = None;
    let mut workers = vec![1, 2, 4];
    let mut files = 20_000;
    let mut rounds = 1;
    let usage = || -> ! {
        eprintln!("usage: metarate DIR [--workers 1,2,4] [--files N] [--rounds R]");
        std::process::exit(2)
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--workers" => {
                workers = args
                    .next()
                    .unwrap_or_else(|| usage())
                    .split(',')
                    .map(|w| w.parse().unwrap_or_else(|_| usage()))
                    .collect()
            }
            "--files" => {
                files = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "-h" | "--help" => usage(),
            _ if dir.is_none() && !a.starts_with('-') => dir = Some(PathBuf::from(a)),
            _ => usage(),
        }
    }
    let dir = dir.unwrap_or_else(|| usage());
    if workers.contains(&0) || files == 0 || rounds == 0 {
        usage()
    }
    Args {
        dir,
        workers,
        files,
        rounds,
    }
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn check(what: &str, p: &Path, r: libc::c_int) {
    if r < 0 {
        panic!(
            "{what} {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        );
    }
}

#[derive(Clone, Copy)]
enum Phase {
    Create,
    Stat,
    Unlink,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Create => "create",
            Phase::Stat => "stat",
            Phase::Unlink => "unlink",
        }
    }
}

/// One worker's share of a phase: `files` names in its own directory.
fn work(dir: &Path, files: usize, phase: Phase) {
    for i in 0..files {
        let p = dir.join(format!("f{i:07}"));
        let c = cpath(&p);
        match phase {
            Phase::Create => {
                let fd = unsafe {
                    libc::open(
                        c.as_ptr(),
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    )
                };
                check("create", &p, fd);
                unsafe { libc::close(fd) };
            }
            Phase::Stat => {
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                check("lstat", &p, unsafe { libc::lstat(c.as_ptr(), &mut st) });
            }
            Phase::Unlink => check("unlink", &p, unsafe { libc::unlink(c.as_ptr()) }),
        }
    }
}

/// Runs one phase on `dirs.len()` workers at once; returns total ops/s.
fn run_phase(dirs: &[PathBuf], files: usize, phase: Phase) -> f64 {
    let barrier = Arc::new(Barrier::new(dirs.len() + 1));
    let handles: Vec<_> = dirs
        .iter()
        .cloned()
        .map(|d| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                work(&d, files, phase);
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().expect("worker panicked");
    }
    (dirs.len() * files) as f64 / start.elapsed().as_secs_f64()
}

fn drop_dentry_cache() {
    unsafe { libc::sync() };
    // Best effort: without root the stat phase runs against a warm dentry cache.
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "2");
}

fn main() {
    let args = parse_args();
    let phases = [Phase::Create, Phase::Stat, Phase::Unlink];
    for &w in &args.workers {
        let mut best = [0f64; 3];
        for round in 0..args.rounds {
            let dirs: Vec<PathBuf> = (0..w)
                .map(|i| args.dir.join(format!("metarate-w{w}-r{round}-{i}")))
                .collect();
            for d in &dirs {
                std::fs::create_dir(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
            }
            for (k, &phase) in phases.iter().enumerate() {
                if let Phase::Stat = phase {
                    drop_dentry_cache();
                }
                let rate = run_phase(&dirs, args.files, phase);
                best[k] = best[k].max(rate);
            }
            for d in &dirs {
                std::fs::remove_dir(d).unwrap_or_else(|e| panic!("rmdir {}: {e}", d.display()));
            }
        }
        for (k, phase) in phases.iter().enumerate() {
            println!(
                "metarate workers={w} phase={} ops_per_sec={:.0}",
                phase.name(),
                best[k]
            );
        }
    }
}
