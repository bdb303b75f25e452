//! The session layer's two transports side by side: a tiny in-memory file system
//! (tests/common/session_memfs.rs) mounted over /dev/fuse and over io_uring in turn, the
//! same metadata phases on each (as examples/metarate.rs: creates, stats with the dentry
//! cache dropped, unlinks; each worker in its own directory), rounds interleaved, best of
//! the rounds. Needs root; sets `enable_uring` for the ring and puts it back.
//!
//!     session_bench [--workers 1,2] [--files N] [--rounds R]
//!
//! Output: one line per (workers, phase): ops/s over each transport, the ring's ratio, and
//! the requests the file system served per operation (last round).

#[path = "../tests/common/session_memfs.rs"]
mod session_memfs;

use dualfs::session::{MountSpec, Session, SessionConfig, Transport};
use nix::mount::{umount2, MntFlags, MsFlags};
use session_memfs::MemFs;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::Instant;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
const PHASES: [&str; 3] = ["create", "stat", "unlink"];

fn usage() -> ! {
    eprintln!("usage: session_bench [--workers 1,2] [--files N] [--rounds R]");
    std::process::exit(2)
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

/// One worker's share of phase `k` in its directory.
fn work(dir: &Path, files: usize, k: usize) {
    for i in 0..files {
        let p = dir.join(format!("f{i:07}"));
        let c = cpath(&p);
        // SAFETY: plain system calls on a NUL-terminated path.
        unsafe {
            match k {
                0 => {
                    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;
                    let fd = libc::open(c.as_ptr(), flags, 0o644);
                    check("create", &p, fd);
                    libc::close(fd);
                }
                1 => {
                    let mut st: libc::stat = std::mem::zeroed();
                    check("lstat", &p, libc::lstat(c.as_ptr(), &mut st));
                }
                _ => check("unlink", &p, libc::unlink(c.as_ptr())),
            }
        }
    }
}

/// Phase `k` on every directory at once: total ops/s.
fn run_phase(dirs: &[PathBuf], files: usize, k: usize) -> f64 {
    let barrier = Arc::new(Barrier::new(dirs.len() + 1));
    let handles: Vec<_> = dirs
        .iter()
        .cloned()
        .map(|d| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                work(&d, files, k);
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

/// A mount of a fresh MemFs over `transport`, unmounted when dropped.
struct Mount {
    dir: tempfile::TempDir,
    session: Option<Session>,
}

impl Mount {
    fn new(transport: Transport) -> Mount {
        let dir = tempfile::tempdir().expect("temporary directory");
        let config = SessionConfig {
            transport,
            ..SessionConfig::default()
        };
        let spec = MountSpec {
            mountpoint: dir.path(),
            fs_type: "fuse.sessionbench",
            source: "sessionbench",
            flags: MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
            allow_other: false,
        };
        let session = Session::mount(Arc::new(MemFs::default()), &spec, &config).expect("mount");
        assert_eq!(session.transport(), transport, "the transport asked for");
        Mount {
            dir,
            session: Some(session),
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = umount2(self.dir.path(), MntFlags::MNT_DETACH);
        if let Some(s) = self.session.take() {
            let _ = s.join();
        }
    }
}

/// One round of every phase with `workers` workers on a fresh mount: ops/s and requests
/// served per operation (which shows what reached the file system), per phase.
fn round(transport: Transport, workers: usize, files: usize) -> [(f64, f64); 3] {
    let mount = Mount::new(transport);
    let dirs: Vec<PathBuf> = (0..workers)
        .map(|i| mount.dir.path().join(format!("w{i}")))
        .collect();
    for d in &dirs {
        std::fs::create_dir(d).expect("mkdir");
    }
    let stats = mount.session.as_ref().expect("mounted").stats();
    let served = || stats.dev() + stats.uring();
    let mut rates = [(0.0, 0.0); 3];
    for (k, rate) in rates.iter_mut().enumerate() {
        if k == 1 {
            // Each stat a LOOKUP: drop the kernel's dentries first.
            // SAFETY: sync has no preconditions.
            unsafe { libc::sync() };
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "2");
        }
        let before = served();
        let ops = run_phase(&dirs, files, k);
        *rate = (ops, (served() - before) as f64 / (workers * files) as f64);
    }
    rates
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut workers, mut files, mut rounds) = (vec![1, 2], 10_000, 3);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--workers" => {
                workers = value()
                    .split(',')
                    .map(|w| w.parse().unwrap_or_else(|_| usage()))
                    .collect()
            }
            "--files" => files = value().parse().unwrap_or_else(|_| usage()),
            "--rounds" => rounds = value().parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("session_bench mounts: run it as root");
        std::process::exit(1);
    }
    let old = std::fs::read_to_string(ENABLE_URING).unwrap_or_else(|e| {
        eprintln!("{ENABLE_URING}: {e} (no FUSE over io_uring in this kernel)");
        std::process::exit(1)
    });
    std::fs::write(ENABLE_URING, "Y").expect("enable_uring");
    for &w in &workers {
        let mut best = [[0f64; 3]; 2];
        let mut per_op = [[0f64; 3]; 2];
        for _ in 0..rounds {
            for (t, transport) in [Transport::Dev, Transport::Uring].into_iter().enumerate() {
                let rates = round(transport, w, files);
                for k in 0..3 {
                    best[t][k] = best[t][k].max(rates[k].0);
                    per_op[t][k] = rates[k].1;
                }
            }
        }
        for (k, phase) in PHASES.iter().enumerate() {
            println!(
                "session_bench workers={w} phase={phase} dev={:.0} uring={:.0} ratio={:.2} \
                 requests_per_op dev={:.2} uring={:.2}",
                best[0][k],
                best[1][k],
                best[1][k] / best[0][k],
                per_op[0][k],
                per_op[1][k]
            );
        }
    }
    let _ = std::fs::write(ENABLE_URING, old.trim());
}
