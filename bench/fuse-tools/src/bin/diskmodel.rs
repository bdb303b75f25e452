//! diskmodel — simulated disks under real file systems, for DualFS's benchmarks: serves the
//! regular files of one backing directory (flat, like delayfs), each a partition of a
//! simulated HDD or SSD, and makes every read and write of them take the time the disk's model
//! gives it (seek, rotation, media rate, queue; src/disk/model.rs says exactly how), in real
//! time. It reports each disk's busy time (the DualFS paper's "disk I/O time"), requests,
//! bytes, seeks.
//!
//!     diskmodel BACKING_DIR MOUNTPOINT --disk NAME:MODEL[,KEY=VALUE...]...
//!               [--file FILE:DISK[:OFFSET]]... [--report FILE] [--threads 32]
//!     diskmodel --show MODEL[,KEY=VALUE...] [--seq-mib 64]
//!
//! MODEL is paper5400, hdd7200 or ssd; KEY=VALUE changes one of its parameters
//! (`hdd7200,capacity=8G`; `paper5400,write_cache=on` gives an HDD its write cache, off in
//! every set by default; fsync of a file waits until that cache is on the platter). --file
//! puts FILE (a name in BACKING_DIR) on disk DISK at byte OFFSET (default: after the disk's
//! previous partition, on a MiB boundary); files not named go on the first disk the same way
//! when first opened. Two files on one disk share its
//! head: a DualFS metadata image and data image placed so make the head travel between them.
//!
//! Files are opened with direct I/O (nothing cached in the kernel), so every pread/pwrite,
//! or the I/O of a loop device over a file (`losetup --direct-io=on`), reaches the model;
//! --threads requests at most are in the model's queue at once (one FUSE thread each).
//!
//! The report (JSON, one disk a line, with each partition's requests and bytes, so that the
//! work of two images on one disk can be told apart): read `MOUNTPOINT/.diskmodel-stats` at
//! any time (take differences between two readings around a phase); also written to --report
//! FILE (or printed) on SIGUSR1 and at unmount. The parameters are printed at start. --show
//! prints a parameter set and what the model predicts for it (sequential MB/s, random 4 KiB
//! reads). Stop it with: umount MOUNTPOINT. With DISKMODEL_TRACE=FILE in its environment it
//! writes every request to FILE as it starts (`disk op pos len arrival start done`).

#[path = "../disk/mod.rs"]
mod disk;

use disk::live::LiveDisk;
use disk::model::{expectations, size, Params, MIB};
use disk::serve::{DiskModelFs, Shared};
use fuser::{Config, MountOption};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

const USAGE: &str = "usage: diskmodel BACKING_DIR MOUNTPOINT --disk NAME:MODEL[,KEY=VALUE...]... [--file FILE:DISK[:OFFSET]]... [--report FILE] [--threads N]
       diskmodel --show MODEL[,KEY=VALUE...] [--seq-mib N]
MODEL: paper5400, hdd7200 or ssd (stop the mount with: umount MOUNTPOINT)";

fn usage(code: i32) -> ! {
    if code == 0 {
        println!("{USAGE}");
    } else {
        eprintln!("{USAGE}");
    }
    std::process::exit(code)
}

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("diskmodel: {message}");
    std::process::exit(2)
}

struct FileArg {
    name: OsString,
    disk: String,
    offset: Option<u64>,
}

#[derive(Default)]
struct Args {
    paths: Vec<PathBuf>,
    disks: Vec<(String, Params)>,
    files: Vec<FileArg>,
    report: Option<PathBuf>,
    threads: usize,
    show: Option<Params>,
    seq_mib: u64,
}

fn parse_disk(arg: &str) -> Result<(String, Params), String> {
    let (name, spec) = arg
        .split_once(':')
        .ok_or_else(|| format!("--disk {arg}: expected NAME:MODEL[,KEY=VALUE...]"))?;
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || !name.chars().all(valid) {
        return Err(format!(
            "--disk {arg}: a disk's name is letters, digits, - and _"
        ));
    }
    let params = Params::parse(spec).map_err(|e| format!("--disk {arg}: {e}"))?;
    Ok((name.to_string(), params))
}

fn parse_file(arg: &str) -> Result<FileArg, String> {
    let parts: Vec<&str> = arg.split(':').collect();
    let (name, disk, offset) = match parts[..] {
        [name, disk] => (name, disk, None),
        [name, disk, offset] => (
            name,
            disk,
            Some(size("OFFSET", offset).map_err(|e| format!("--file {arg}: {e}"))?),
        ),
        _ => return Err(format!("--file {arg}: expected FILE:DISK[:OFFSET]")),
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(format!("--file {arg}: FILE is a name in BACKING_DIR"));
    }
    Ok(FileArg {
        name: name.into(),
        disk: disk.to_string(),
        offset,
    })
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        threads: 32,
        seq_mib: 64,
        ..Args::default()
    };
    let mut it = std::env::args().skip(1);
    let value = |it: &mut dyn Iterator<Item = String>, opt: &str| {
        it.next().ok_or_else(|| format!("{opt} needs a value"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--disk" => args.disks.push(parse_disk(&value(&mut it, &a)?)?),
            "--file" => args.files.push(parse_file(&value(&mut it, &a)?)?),
            "--report" => args.report = Some(PathBuf::from(value(&mut it, &a)?)),
            "--threads" => {
                let v = value(&mut it, &a)?;
                args.threads = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0 && n <= 1024)
                    .ok_or_else(|| format!("--threads {v}: expected 1 to 1024"))?;
            }
            "--show" => {
                let v = value(&mut it, &a)?;
                args.show = Some(Params::parse(&v).map_err(|e| format!("--show {v}: {e}"))?);
            }
            "--seq-mib" => {
                let v = value(&mut it, &a)?;
                args.seq_mib = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0 && n <= 1 << 20)
                    .ok_or_else(|| format!("--seq-mib {v}: expected a whole number of MiB"))?;
            }
            "-h" | "--help" => usage(0),
            _ if !a.starts_with('-') && args.paths.len() < 2 => args.paths.push(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument '{a}'")),
        }
    }
    Ok(args)
}

/// Write the report to FILE (whole, by a rename) or print it.
fn write_report(shared: &Shared, to: Option<&Path>) {
    let report = shared.report();
    let Some(path) = to else {
        print!("{report}");
        return;
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let r = std::fs::write(&tmp, &report).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        eprintln!("diskmodel: {}: {e}", path.display());
    }
}

/// SIGUSR1 writes the report. The signal is blocked in every thread (they inherit the mask
/// from here) and taken by one that waits for it.
fn report_on_sigusr1(shared: Arc<Shared>, to: Option<PathBuf>) {
    // SAFETY: a signal set we own, filled and installed as this thread's mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::spawn(move || loop {
        let mut sig = 0;
        // SAFETY: waits on the set built above.
        if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
            write_report(&shared, to.as_deref());
        }
    });
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail(e));
    if let Some(params) = &args.show {
        let expect = expectations(params, args.seq_mib * MIB).unwrap_or_else(|e| fail(e));
        println!(
            "{{\"params\": {},\n \"expect\": {expect}}}",
            params.to_json()
        );
        return;
    }
    let [backing, mountpoint] = <[PathBuf; 2]>::try_from(args.paths).unwrap_or_else(|_| usage(2));
    if !backing.is_dir() {
        fail(format_args!("{}: not a directory", backing.display()));
    }
    if args.disks.is_empty() {
        fail("give at least one --disk NAME:MODEL");
    }
    for (i, (name, _)) in args.disks.iter().enumerate() {
        if args.disks[..i].iter().any(|(n, _)| n == name) {
            fail(format_args!("--disk {name} is given twice"));
        }
    }
    let epoch = Instant::now();
    let disks = args
        .disks
        .iter()
        .map(|(name, params)| LiveDisk::new(name, params, epoch).unwrap_or_else(|e| fail(e)))
        .collect();
    let shared = Arc::new(Shared::new(backing.clone(), disks, epoch));
    for f in &args.files {
        let disk = shared
            .disks
            .iter()
            .position(|d| d.name == f.disk)
            .unwrap_or_else(|| fail(format_args!("--file: no --disk named {}", f.disk)));
        let path = backing.join(&f.name);
        let md = std::fs::metadata(&path)
            .ok()
            .filter(|m| m.is_file())
            .unwrap_or_else(|| fail(format_args!("{}: not a regular file", path.display())));
        let length = md.len().div_ceil(MIB).max(1) * MIB;
        shared
            .place(&f.name, disk, f.offset, length)
            .unwrap_or_else(|e| fail(e));
    }
    for d in &shared.disks {
        println!("diskmodel: disk {}: {}", d.name, d.params.to_json());
    }
    print!("{}", shared.report());

    report_on_sigusr1(shared.clone(), args.report.clone());
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("diskmodel".into()),
        MountOption::Subtype("diskmodel".into()),
        MountOption::DefaultPermissions,
    ];
    cfg.n_threads = Some(args.threads);
    cfg.clone_fd = true;
    let result = fuser::mount(DiskModelFs::new(shared.clone()), &mountpoint, &cfg);
    write_report(&shared, args.report.as_deref());
    if let Err(e) = result {
        eprintln!("diskmodel: {}: {e}", mountpoint.display());
        std::process::exit(1);
    }
}
