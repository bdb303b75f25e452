//! The one-directory benchmark: create N empty files (default 1,000,000) in one directory on a
//! mounted DualFS, stat every one by name in random order, and list the directory; optionally
//! the same on kernel ext4 over a loop device for scale.
//!
//! Run with one command (as root, needs /dev/fuse and loop devices for --ext4):
//!     bench/bigdir.sh [--files N] [--ext4] [--no-dualfs]
//! which builds `dualfs` and this example in release mode and runs it. Images go to $TMPDIR
//! (default /tmp; sparse: DualFS meta 8 GiB, data 1 GiB; ext4 24 GiB).
//!
//! Phases, each timed:
//! - create: open(O_CREAT|O_EXCL|O_WRONLY) + close for each name (what `touch` does);
//! - stat cold: unmount, mount again, then lstat every name in a seeded random order (the
//!   kernel's dentry cache and the file system's own caches start empty);
//! - stat warm: drop the kernel's dentry/inode caches (vm.drop_caches=2) and stat all again
//!   (the file system's caches may now be warm);
//! - list: getdents64 with a 64 KiB buffer until the end, counting entries;
//! - unmount: umount + wait for the daemon's final checkpoint + the checker (DualFS).

#[path = "bench_csv/mod.rs"]
mod bench_csv;
#[path = "../tests/common/mod.rs"]
#[allow(unused_macros, unused_imports)]
mod common;

use common::{Backend, TestFs};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

struct Row {
    key: &'static str,
    name: &'static str,
    create: f64,
    stat_cold: f64,
    stat_warm: f64,
    list: Duration,
    listed: usize,
    unmount: Duration,
}

fn name(i: u32) -> String {
    format!("file-{i:07}.dat")
}

fn run(label: &'static str, mut fs: TestFs, n: u32) -> Row {
    let dir = fs.join("big");
    std::fs::create_dir(&dir).unwrap();
    let cpath = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();

    eprintln!("[{label}] creating {n} files in {}", dir.display());
    let t = Instant::now();
    for i in 0..n {
        let c = cpath(&dir.join(name(i)));
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644,
            )
        };
        assert!(fd >= 0, "create #{i}: {}", std::io::Error::last_os_error());
        unsafe { libc::close(fd) };
        if (i + 1) % 100_000 == 0 {
            eprintln!(
                "[{label}]   {} created, {:.0}/s",
                i + 1,
                (i + 1) as f64 / t.elapsed().as_secs_f64()
            );
        }
    }
    let create = n as f64 / t.elapsed().as_secs_f64();

    fs.remount();
    let mut order: Vec<u32> = (0..n).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(42));
    let stat_all = |what: &str| -> f64 {
        eprintln!("[{label}] stat {what}");
        let t = Instant::now();
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        for (k, &i) in order.iter().enumerate() {
            let c = cpath(&dir.join(name(i)));
            let r = unsafe { libc::lstat(c.as_ptr(), &mut st) };
            assert_eq!(r, 0, "lstat #{i}: {}", std::io::Error::last_os_error());
            assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFREG);
            if (k + 1) % 250_000 == 0 {
                eprintln!(
                    "[{label}]   {} stat'ed, {:.0}/s",
                    k + 1,
                    (k + 1) as f64 / t.elapsed().as_secs_f64()
                );
            }
        }
        n as f64 / t.elapsed().as_secs_f64()
    };
    let stat_cold = stat_all("cold (after remount)");
    std::fs::write("/proc/sys/vm/drop_caches", "2").expect("drop dentry/inode caches");
    let stat_warm = stat_all("warm (kernel dentries dropped)");

    eprintln!("[{label}] listing");
    let t = Instant::now();
    let listed = common::list_dir(&dir).len() - 2;
    let list = t.elapsed();
    assert_eq!(listed, n as usize, "listing returned {listed} entries");

    eprintln!("[{label}] unmounting");
    let t = Instant::now();
    fs.unmount();
    let unmount = t.elapsed();
    Row {
        key: if label.starts_with("ext4") {
            "ext4"
        } else {
            "dualfs"
        },
        name: label,
        create,
        stat_cold,
        stat_warm,
        list,
        listed,
        unmount,
    }
}

fn main() {
    let mut n: u32 = 1_000_000;
    let (mut ext4, mut dualfs) = (false, true);
    let mut csv_path = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--files" => n = args.next().and_then(|v| v.parse().ok()).expect("--files N"),
            "--ext4" => ext4 = true,
            "--no-dualfs" => dualfs = false,
            "--csv" => csv_path = Some(std::path::PathBuf::from(args.next().expect("--csv FILE"))),
            _ => {
                eprintln!("usage: bigdir [--files N] [--ext4] [--no-dualfs] [--csv FILE]");
                std::process::exit(2);
            }
        }
    }
    common::user::require_root();
    let mut rows = Vec::new();
    let day = Duration::from_secs(86_400);
    if dualfs {
        let fs = TestFs::builder()
            .backend(Backend::DualFs)
            .sizes(8 << 30, 1 << 30)
            .watchdog(day)
            .mount();
        rows.push(run("dualfs", fs, n));
    }
    if ext4 {
        // A kernel ext4 on a loop device (the harness's kernel backend over loop devices).
        let fs = TestFs::builder()
            .backend(Backend::Dir)
            .loop_devices(true)
            .sizes(1 << 20, 24 << 30)
            .watchdog(day)
            .mount();
        rows.push(run("ext4 (loop)", fs, n));
    }
    println!("bigdir: {n} empty files in one directory");
    println!(
        "{:<12} {:>12} {:>14} {:>14} {:>10} {:>10} {:>11}",
        "fs", "creates/s", "stat/s cold", "stat/s warm", "list s", "entries", "unmount s"
    );
    let mut csv = bench_csv::Csv::create(csv_path.as_deref());
    for r in &rows {
        let k = r.key;
        for (phase, rate) in [
            ("create", r.create),
            ("stat cold", r.stat_cold),
            ("stat warm", r.stat_warm),
        ] {
            csv.row(k, phase, "ops_per_sec", rate, "ops/s");
            csv.row(k, phase, "seconds", f64::from(n) / rate, "s");
        }
        csv.row(k, "list", "seconds", r.list.as_secs_f64(), "s");
        csv.row(k, "list", "entries", r.listed as f64, "entries");
        csv.row(k, "unmount", "seconds", r.unmount.as_secs_f64(), "s");
    }
    for r in rows {
        println!(
            "{:<12} {:>12.0} {:>14.0} {:>14.0} {:>10.2} {:>10} {:>11.2}",
            r.name,
            r.create,
            r.stat_cold,
            r.stat_warm,
            r.list.as_secs_f64(),
            r.listed,
            r.unmount.as_secs_f64()
        );
    }
}
