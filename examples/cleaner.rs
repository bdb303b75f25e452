//! The DualFS cleaner benchmark (Piernas et al.): copy a directory tree of several thousand
//! files, delete 7/8 of its regular files, repeat 20 times, on a metadata device small
//! enough that the log would run out without cleaning. Run twice: with the `dualfs-cleaner`
//! daemon attached, and with the mount's own (in-process) cleaning only. Prints, side by
//! side: total time, bytes the cleaner wrote, segments cleaned, write cost (bytes written by
//! cleaning / bytes freed), final utilization, and the checker's verdict after unmount.
//!
//! Run (as root, needs /dev/fuse):   bench/cleaner.sh [--files N] [--rounds N] [--meta MIB]
//!                          [--source DIR] [--policy cost-benefit|greedy] [--only daemon|inprocess]
//! which builds `dualfs`, `dualfs-cleaner` and this example in release mode and runs it.
//! The source tree is generated (seeded) in a private tmpfs unless --source names one.

#[path = "bench_csv/mod.rs"]
mod bench_csv;
#[path = "../tests/common/mod.rs"]
#[allow(unused_macros, unused_imports)]
mod common;

use common::{Backend, TestFs, TmpfsDir};
use dualfs::control_protocol::{Client, Status};
use dualfs::fs::clean::policy::{Policy, ThresholdUpdate};
use dualfs::mkfs::MkfsParams;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Config {
    files: u64,
    rounds: u64,
    meta_mib: u64,
    data_mib: u64,
    source: Option<PathBuf>,
    modes: Vec<Mode>,
    policy: Policy,
    csv: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Daemon,
    InProcess,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Daemon => "with daemon",
            Mode::InProcess => "in-process only",
        }
    }
    fn key(self) -> &'static str {
        match self {
            Mode::Daemon => "daemon",
            Mode::InProcess => "in-process",
        }
    }
}

struct Row {
    mode: Mode,
    time: Duration,
    status: Status,
    log_written: u64,
    meta_bytes: u64,
    files_left: u64,
    check: String,
    clean: bool,
}

/// Deterministic sizes skewed small, as source trees are: half under 2 KiB, a few past the
/// direct blocks (so they own indirect blocks).
fn size_of(i: u64) -> usize {
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    match h % 100 {
        0..=49 => (h % 2048) as usize,
        50..=79 => 2048 + (h % 14_336) as usize,
        80..=94 => 16_384 + (h % 49_152) as usize,
        _ => 65_536 + (h % 196_608) as usize,
    }
}

/// A seeded tree of `n` files in directories of at most 40 entries, two levels deep.
fn generate(root: &Path, n: u64) {
    let mut buf = Vec::new();
    for i in 0..n {
        let d = root.join(format!("d{:02}/s{:03}", i / 1600, (i / 40) % 40));
        if i % 40 == 0 {
            fs::create_dir_all(&d).unwrap();
        }
        let len = size_of(i);
        buf.clear();
        buf.extend((0..len).map(|k| (k as u64 ^ i).wrapping_mul(31) as u8));
        fs::write(d.join(format!("file{i:06}.c")), &buf).unwrap();
    }
}

/// Copy the tree (directories, regular files, symlinks); returns the regular files copied.
fn copy_tree(from: &Path, to: &Path, files: &mut Vec<PathBuf>) {
    fs::create_dir(to).unwrap();
    let mut entries: Vec<_> = fs::read_dir(from).unwrap().map(|e| e.unwrap()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let ty = e.file_type().unwrap();
        let dst = to.join(e.file_name());
        if ty.is_dir() {
            copy_tree(&e.path(), &dst, files);
        } else if ty.is_file() {
            fs::copy(e.path(), &dst).unwrap();
            files.push(dst);
        } else if ty.is_symlink() {
            let _ = std::os::unix::fs::symlink(fs::read_link(e.path()).unwrap(), &dst);
        }
    }
}

fn cleaner_bin() -> PathBuf {
    let p = common::dualfs_bin().with_file_name("dualfs-cleaner");
    assert!(p.is_file(), "{} is missing", p.display());
    p
}

fn status(mnt: &Path) -> Status {
    let start = Instant::now();
    loop {
        match Client::connect(mnt).and_then(|mut c| c.status()) {
            Ok(s) => return s,
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("control socket of {}: {e}", mnt.display()),
        }
    }
}

fn run(cfg: &Config, source: &Path, mode: Mode) -> Row {
    let label = mode.label();
    let meta_bytes = cfg.meta_mib << 20;
    let mut fs = TestFs::builder()
        .backend(Backend::DualFs)
        .sizes(meta_bytes, cfg.data_mib << 20)
        .mkfs_params(MkfsParams {
            segment_blocks: 64,
            ..MkfsParams::default()
        })
        .watchdog(Duration::from_secs(86_400))
        .mount();
    let mnt = fs.path().to_path_buf();
    let s0 = status(&mnt);
    // The same policy for the mount's own cleaning and the daemon's.
    Client::connect(&mnt)
        .and_then(|mut c| {
            c.set_thresholds(ThresholdUpdate {
                policy: Some(cfg.policy),
                ..Default::default()
            })
        })
        .expect("set the policy");
    let mut daemon: Option<Child> = None;
    if mode == Mode::Daemon {
        let log = fs.scratch().join("cleaner.log");
        daemon = Some(
            Command::new(cleaner_bin())
                .arg(&mnt)
                .args([
                    "--foreground",
                    "--interval",
                    "0.2",
                    "--policy",
                    cfg.policy.name(),
                ])
                .stdout(Stdio::null())
                .stderr(fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        let t = Instant::now();
        while status(&mnt).daemons == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the daemon did not attach"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    eprintln!(
        "[{label}] {} log segments of {} KiB, reserve {}, thresholds {}..{}",
        s0.log_segments,
        s0.segment_bytes >> 10,
        s0.reserve,
        s0.thresholds.min_free,
        s0.thresholds.max_free
    );
    let start = Instant::now();
    let mut left = 0u64;
    for round in 0..cfg.rounds {
        let dst = mnt.join(format!("copy{round:02}"));
        let mut files = Vec::new();
        copy_tree(source, &dst, &mut files);
        for (k, f) in files.iter().enumerate() {
            if k % 8 != 0 {
                fs::remove_file(f).unwrap();
            }
        }
        left += files.len().div_ceil(8) as u64;
        let s = status(&mnt);
        eprintln!(
            "[{label}] round {:2}: {:6.1} s, {} files left, clean {:3}, utilization {:4.1}%, \
             {} segments cleaned ({} in the write path)",
            round + 1,
            start.elapsed().as_secs_f64(),
            left,
            s.clean,
            s.utilization * 100.0,
            s.counters.segments_cleaned,
            s.counters.write_path_passes
        );
    }
    common::sync_fs(&mnt);
    let time = start.elapsed();
    let status_end = status(&mnt);
    if let Some(mut d) = daemon {
        unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
        let _ = d.wait();
        let keep = std::env::temp_dir().join("dualfs-cleaner-bench-daemon.log");
        if fs::copy(fs.scratch().join("cleaner.log"), &keep).is_ok() {
            eprintln!("[{label}] the daemon's log: {}", keep.display());
        }
    }
    fs.unmount();
    // TestFs::unmount requires a clean check; run it again for the report line.
    let m = common::open_device(fs.meta_path(), true);
    let d = common::open_device(fs.data_path(), true);
    let report = dualfs::check::check(&m, &d).expect("checker");
    let clean = report.is_clean();
    let check = report.to_string().lines().last().unwrap_or("").to_string();
    Row {
        mode,
        time,
        log_written: (status_end.log_blocks_written - s0.log_blocks_written)
            * status_end.block_size as u64,
        status: status_end,
        meta_bytes,
        files_left: left,
        check,
        clean,
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

fn main() {
    let mut cfg = Config {
        files: 4000,
        rounds: 20,
        meta_mib: 16,
        data_mib: 4096,
        source: None,
        modes: vec![Mode::Daemon, Mode::InProcess],
        policy: Policy::CostBenefit,
        csv: None,
    };
    let mut args = std::env::args().skip(1);
    let num = |v: Option<String>, what: &str| -> u64 {
        v.and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{what} needs a number"))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--files" => cfg.files = num(args.next(), "--files"),
            "--rounds" => cfg.rounds = num(args.next(), "--rounds"),
            "--meta" => cfg.meta_mib = num(args.next(), "--meta"),
            "--data" => cfg.data_mib = num(args.next(), "--data"),
            "--source" => cfg.source = Some(PathBuf::from(args.next().expect("--source DIR"))),
            "--csv" => cfg.csv = Some(PathBuf::from(args.next().expect("--csv FILE"))),
            "--policy" => {
                cfg.policy = args
                    .next()
                    .and_then(|p| p.parse().ok())
                    .expect("--policy cost-benefit|greedy")
            }
            "--only" => {
                cfg.modes = match args.next().as_deref() {
                    Some("daemon") => vec![Mode::Daemon],
                    Some("inprocess") => vec![Mode::InProcess],
                    _ => panic!("--only daemon|inprocess"),
                }
            }
            _ => {
                eprintln!(
                    "usage: cleaner [--files N] [--rounds N] [--meta MIB] [--data MIB] \
                     [--source DIR] [--policy cost-benefit|greedy] [--only daemon|inprocess] [--csv FILE]"
                );
                std::process::exit(2);
            }
        }
    }
    common::user::require_root();
    let tmp;
    let source = match &cfg.source {
        Some(s) => s.clone(),
        None => {
            tmp = TmpfsDir::new(1 << 30);
            let root = tmp.path().join("tree");
            eprintln!("generating a tree of {} files", cfg.files);
            generate(&root, cfg.files);
            root
        }
    };
    let (mut nfiles, mut nbytes) = (0u64, 0u64);
    let mut stack = vec![source.clone()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                nfiles += 1;
                nbytes += m.len();
            }
        }
    }
    let rows: Vec<Row> = cfg.modes.iter().map(|&m| run(&cfg, &source, m)).collect();

    println!(
        "DualFS cleaner benchmark: copy {} ({} regular files, {}), delete 7/8 of the regular \
         files, {} times; metadata device {} MiB (256 KiB segments); policy {}",
        source.display(),
        nfiles,
        mib(nbytes),
        cfg.rounds,
        cfg.meta_mib,
        cfg.policy
    );
    let w = 22;
    print!("{:<34}", "");
    for r in &rows {
        print!("{:>w$}", r.mode.label());
    }
    println!();
    let line = |name: &str, f: &dyn Fn(&Row) -> String| {
        print!("{name:<34}");
        for r in &rows {
            print!("{:>w$}", f(r));
        }
        println!();
    };
    line("total time", &|r| format!("{:.1} s", r.time.as_secs_f64()));
    line("log written (x metadata device)", &|r| {
        format!(
            "{} ({:.1}x)",
            mib(r.log_written),
            r.log_written as f64 / r.meta_bytes as f64
        )
    });
    line("bytes written by the cleaner", &|r| {
        mib(r.status.counters.bytes_written)
    });
    line("bytes freed by the cleaner", &|r| {
        mib(r.status.counters.bytes_freed)
    });
    line("segments cleaned", &|r| {
        r.status.counters.segments_cleaned.to_string()
    });
    line("  of which in the write path", &|r| {
        format!("{} passes", r.status.counters.write_path_passes)
    });
    line("cleaning passes", &|r| r.status.counters.passes.to_string());
    line("write cost (written / freed)", &|r| {
        format!("{:.3}", r.status.write_cost)
    });
    line("final utilization", &|r| {
        format!("{:.1}%", r.status.utilization * 100.0)
    });
    line("clean segments at the end", &|r| {
        format!("{} of {}", r.status.clean, r.status.log_segments)
    });
    line("ENOSPC refusals", &|r| r.status.counters.enospc.to_string());
    line("files left", &|r| r.files_left.to_string());
    line("checker", &|r| {
        if r.clean {
            "clean".into()
        } else {
            "ERRORS".into()
        }
    });
    for r in &rows {
        println!("checker ({}): {}", r.mode.label(), r.check);
    }
    let mut csv = bench_csv::Csv::create(cfg.csv.as_deref());
    for r in &rows {
        let (k, c) = (r.mode.key(), &r.status.counters);
        csv.row(k, "total", "seconds", r.time.as_secs_f64(), "s");
        csv.row(k, "log", "bytes_written", r.log_written as f64, "bytes");
        csv.row(
            k,
            "cleaning",
            "bytes_written",
            c.bytes_written as f64,
            "bytes",
        );
        csv.row(k, "cleaning", "bytes_freed", c.bytes_freed as f64, "bytes");
        csv.row(
            k,
            "cleaning",
            "segments_cleaned",
            c.segments_cleaned as f64,
            "segments",
        );
        csv.row(k, "cleaning", "passes", c.passes as f64, "passes");
        csv.row(
            k,
            "cleaning",
            "write_path_passes",
            c.write_path_passes as f64,
            "passes",
        );
        csv.row(k, "cleaning", "write_cost", r.status.write_cost, "ratio");
        csv.row(k, "end", "utilization", r.status.utilization, "fraction");
        csv.row(
            k,
            "end",
            "clean_segments",
            r.status.clean as f64,
            "segments",
        );
        csv.row(k, "end", "enospc", c.enospc as f64, "refusals");
        csv.row(k, "end", "files_left", r.files_left as f64, "files");
        csv.row(
            k,
            "end",
            "checker_clean",
            f64::from(u8::from(r.clean)),
            "bool",
        );
    }
    if rows.iter().any(|r| !r.clean) {
        std::process::exit(1);
    }
}
