//! What the core costs per metadata operation, without FUSE: the metarate phases (create,
//! lookup, unlink; one directory per worker) called on the library API over in-memory
//! devices. Prints the rate and the process's CPU time per operation for each phase, so a
//! change to the core can be compared with the one before it in one run, far below the noise
//! of a FUSE benchmark (and run under `valgrind --tool=callgrind` for instruction counts).
//!
//!     coreops [--workers W] [--files N] [--rounds R]
//!     coreops --clean [--rounds R]
//!
//! Output, one line per phase: `coreops workers=W phase=P ops_per_sec=X cpu_ns_per_op=Y`
//! (the best round of R by CPU time).
//!
//! `--clean`: cleaning passes instead. A 256 MiB log is filled with empty files to 65% (directories
//! of 1,000), every other file of every third directory
//! is removed (dead blocks all over the log), and R greedy passes of up to 18 segments run
//! one after another, in one thread (no background flush or cleaning: the same passes on
//! every build). Output: `coreops phase=clean passes=R live_moved=M cpu_ns_per_block=X
//! max_pass_ms=Y` (CPU per live block moved over all passes, and the longest pass).

use dualfs::device::{BlockDevice, MemDevice};
use dualfs::format::ROOT_INO;
use dualfs::fs::{Caller, Fs, MountOptions};
use dualfs::mkfs::{mkfs, MkfsParams};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn process_cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Who calls: root, with no umask.
const ROOT: Caller = Caller {
    uid: 0,
    gid: 0,
    pid: 1,
    umask: 0,
    holds_fsetid: None,
};

/// A fresh file system on memory devices of these sizes.
fn memory_fs(meta_bytes: u64, data_bytes: u64, opts: MountOptions) -> Arc<Fs> {
    let meta: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(meta_bytes));
    let data: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(data_bytes));
    mkfs(meta.clone(), data.clone(), &MkfsParams::default()).expect("mkfs");
    Fs::mount(meta, data, opts).expect("mount")
}

fn main() {
    let usage = || -> ! {
        eprintln!("usage: coreops [--workers W] [--files N] [--rounds R] | --clean [--rounds R]");
        std::process::exit(2)
    };
    let (mut workers, mut files, mut rounds, mut clean) = (1usize, 20_000usize, None, false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match a.as_str() {
            "--workers" => workers = value(),
            "--files" => files = value(),
            "--rounds" => rounds = Some(value()),
            "--clean" => clean = true,
            _ => usage(),
        }
    }
    if clean {
        return clean_passes(rounds.unwrap_or(6));
    }
    let rounds = rounds.unwrap_or(3);
    let fs = memory_fs(512 << 20, 256 << 20, MountOptions::default());
    let caller = ROOT;
    let dirs: Vec<u64> = (0..workers)
        .map(|w| {
            fs.mkdir(&caller, ROOT_INO, format!("w{w}").as_bytes(), 0o755)
                .expect("mkdir")
                .ino
        })
        .collect();
    let name = |i: usize| format!("file.{i:08}").into_bytes();
    let mut best: Vec<(&str, f64, f64)> = Vec::new();
    for round in 0..rounds {
        for phase in ["create", "lookup", "unlink"] {
            let barrier = Arc::new(Barrier::new(workers + 1));
            let threads: Vec<_> = dirs
                .iter()
                .map(|&dir| {
                    let (fs, barrier) = (fs.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        for i in 0..files {
                            let n = name(i);
                            match phase {
                                "create" => {
                                    let (attr, fh) = fs
                                        .create(&caller, dir, &n, 0o644, libc::O_WRONLY)
                                        .expect("create");
                                    fs.release(attr.ino, fh).expect("release");
                                    fs.forget(attr.ino, 1);
                                }
                                "lookup" => {
                                    let attr = fs.lookup(dir, &n).expect("lookup");
                                    fs.forget(attr.ino, 1);
                                }
                                _ => fs.unlink(&caller, dir, &n).expect("unlink"),
                            }
                        }
                    })
                })
                .collect();
            let cpu = process_cpu();
            let start = Instant::now();
            barrier.wait();
            for t in threads {
                t.join().expect("worker");
            }
            let wall = start.elapsed().as_secs_f64();
            let cpu = (process_cpu() - cpu).as_secs_f64();
            let ops = (workers * files) as f64;
            let (rate, ns) = (ops / wall, cpu * 1e9 / ops);
            match best.iter_mut().find(|b| b.0 == phase) {
                Some(b) if b.2 <= ns => {}
                Some(b) => *b = (phase, rate, ns),
                None => best.push((phase, rate, ns)),
            }
            eprintln!("round {round} {phase}: {rate:.0} ops/s, {ns:.0} ns CPU per op");
        }
    }
    for (phase, rate, ns) in best {
        println!(
            "coreops workers={workers} phase={phase} ops_per_sec={rate:.0} cpu_ns_per_op={ns:.0}"
        );
    }
    fs.unmount().expect("unmount");
}

/// The `--clean` mode (see the module documentation).
fn clean_passes(rounds: usize) {
    let quiet = MountOptions {
        flush_interval: Duration::from_secs(3600),
        checkpoint_interval: Duration::from_secs(3600),
        background_cleaning: false,
        ..MountOptions::default()
    };
    let fs = memory_fs(256 << 20, 4 << 30, quiet);
    let caller = ROOT;
    let mut dirs = Vec::new();
    let mut n = 0usize;
    loop {
        if n % 1000 == 0 {
            // Written out first: what is pending does not count in the utilization yet.
            if n % 20_000 == 0 {
                fs.sync().expect("sync");
                if fs.cleaner_status().utilization > 0.65 {
                    break;
                }
            }
            let name = format!("d{}", n / 1000);
            dirs.push(
                fs.mkdir(&caller, ROOT_INO, name.as_bytes(), 0o755)
                    .expect("mkdir")
                    .ino,
            );
        }
        let dir = *dirs.last().expect("a directory");
        let (attr, fh) = fs
            .create(
                &caller,
                dir,
                format!("f{n}").as_bytes(),
                0o644,
                libc::O_WRONLY,
            )
            .unwrap_or_else(|e| panic!("create {n}: {e:?}: {:?}", fs.cleaner_status()));
        fs.release(attr.ino, fh).expect("release");
        fs.forget(attr.ino, 1);
        n += 1;
    }
    for (k, &dir) in dirs.iter().enumerate().step_by(3) {
        for i in (k * 1000..(k + 1) * 1000).step_by(2) {
            fs.unlink(&caller, dir, format!("f{i}").as_bytes())
                .expect("unlink");
        }
    }
    fs.sync().expect("sync");
    let (mut moved, mut cpu, mut longest) = (0u64, Duration::ZERO, Duration::ZERO);
    for _ in 0..rounds {
        let (before, start) = (process_cpu(), Instant::now());
        let report = fs
            .clean_pass(dualfs::fs::clean::policy::Policy::Greedy, 18)
            .expect("pass");
        longest = longest.max(start.elapsed());
        cpu += process_cpu() - before;
        moved += report.live_moved;
        eprintln!(
            "pass: {} segments cleaned, {} live blocks moved, {:.1} ms",
            report.cleaned.len(),
            report.live_moved,
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    println!(
        "coreops phase=clean passes={rounds} live_moved={moved} cpu_ns_per_block={:.0} max_pass_ms={:.1}",
        cpu.as_secs_f64() * 1e9 / moved.max(1) as f64,
        longest.as_secs_f64() * 1e3
    );
    fs.unmount().expect("unmount");
}
