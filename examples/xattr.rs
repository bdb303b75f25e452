//! What extended attributes cost: the create rate of plain files against files that each get
//! two small `user.` attributes (as GlusterFS gives every file a few small `trusted.` ones),
//! and the throughput of 4 KiB writes to a file without attributes and to one with them
//! (every write(2) makes the kernel ask the file system for `security.capability` first).
//! Works on any mounted directory; bench/xattr.sh runs it on DualFS and kernel ext4.
//!
//!     xattr DIR [--files N] [--write-mib M] [--rounds R] [--no-xattr]
//!
//! Phases (best of R rounds, the phases taking turns within a round, each in a fresh
//! directory; `--no-xattr` leaves out the ones that set attributes, for a file system
//! without them):
//! - create: open(O_CREAT|O_EXCL|O_WRONLY, 0644) + close;
//! - create+2xattr: the same, then setxattr of `user.a` (16 bytes) and `user.b` (32 bytes);
//! - write4k, write4k+xattr: pwrite(2) of 4 KiB blocks one after the other into a new file,
//!   M MiB, fsync at the end (in the time), the second file carrying two attributes.
//!
//! Output: `xattr phase=P rate=X unit=U` lines (ops/s, or MiB/s for the writes).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

struct Args {
    dir: PathBuf,
    files: usize,
    write_mib: usize,
    rounds: usize,
    no_xattr: bool,
}

fn parse_args() -> Args {
    let mut args = std::env::args().skip(1);
    let usage = || -> ! {
        eprintln!("usage: xattr DIR [--files N] [--write-mib M] [--rounds R] [--no-xattr]");
        std::process::exit(2)
    };
    let mut a = Args {
        dir: PathBuf::new(),
        files: 20_000,
        write_mib: 256,
        rounds: 3,
        no_xattr: false,
    };
    let mut dir = None;
    while let Some(arg) = args.next() {
        let mut num = || -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match arg.as_str() {
            "--files" => a.files = num(),
            "--write-mib" => a.write_mib = num(),
            "--rounds" => a.rounds = num(),
            "--no-xattr" => a.no_xattr = true,
            _ if dir.is_none() && !arg.starts_with('-') => dir = Some(PathBuf::from(arg)),
            _ => usage(),
        }
    }
    a.dir = dir.unwrap_or_else(|| usage());
    a
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn check(r: libc::c_int, what: &str, p: &Path) {
    if r < 0 {
        panic!(
            "{what} {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        );
    }
}

fn setxattr(p: &CString, name: &str, value: &[u8], path: &Path) {
    let n = CString::new(name).unwrap();
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    check(r, "setxattr", path);
}

/// Make `files` files in `dir` (with two attributes each if `attrs`); ops/s.
fn create(dir: &Path, files: usize, attrs: bool) -> f64 {
    std::fs::create_dir(dir).unwrap();
    let start = Instant::now();
    for i in 0..files {
        let p = dir.join(format!("f{i:07}"));
        let c = cpath(&p);
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
                0o644,
            )
        };
        check(fd, "open", &p);
        unsafe { libc::close(fd) };
        if attrs {
            setxattr(&c, "user.a", &(i as u128).to_le_bytes(), &p);
            setxattr(&c, "user.b", &[i as u8; 32], &p);
        }
    }
    files as f64 / start.elapsed().as_secs_f64()
}

/// Write `mib` MiB in 4 KiB pwrites to a new file `p` (with attributes if `attrs`); MiB/s.
fn write4k(p: &Path, mib: usize, attrs: bool) -> f64 {
    let c = cpath(p);
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644,
        )
    };
    check(fd, "open", p);
    if attrs {
        setxattr(&c, "user.a", &[1; 16], p);
        setxattr(&c, "user.b", &[2; 32], p);
    }
    let block = vec![0x5au8; 4096];
    let start = Instant::now();
    for k in 0..mib * 256 {
        let n = unsafe { libc::pwrite(fd, block.as_ptr().cast(), 4096, k as i64 * 4096) };
        assert_eq!(
            n,
            4096,
            "pwrite {}: {}",
            p.display(),
            std::io::Error::last_os_error()
        );
    }
    check(unsafe { libc::fsync(fd) }, "fsync", p);
    let rate = mib as f64 / start.elapsed().as_secs_f64();
    unsafe { libc::close(fd) };
    std::fs::remove_file(p).unwrap();
    rate
}

fn main() {
    let a = parse_args();
    type Phase<'a> = (
        &'static str,
        &'static str,
        bool,
        Box<dyn Fn(usize) -> f64 + 'a>,
    );
    let phases: [Phase; 4] = [
        (
            "create",
            "ops/s",
            false,
            Box::new(|r| create(&a.dir.join(format!("plain{r}")), a.files, false)),
        ),
        (
            "create+2xattr",
            "ops/s",
            true,
            Box::new(|r| create(&a.dir.join(format!("attrs{r}")), a.files, true)),
        ),
        (
            "write4k",
            "MiB/s",
            false,
            Box::new(|r| write4k(&a.dir.join(format!("w{r}")), a.write_mib, false)),
        ),
        (
            "write4k+xattr",
            "MiB/s",
            true,
            Box::new(|r| write4k(&a.dir.join(format!("wx{r}")), a.write_mib, true)),
        ),
    ];
    let mut best = [0.0f64; 4];
    for r in 0..a.rounds {
        for (k, (_, _, attrs, f)) in phases.iter().enumerate() {
            if !(a.no_xattr && *attrs) {
                best[k] = best[k].max(f(r));
            }
        }
    }
    for (k, (name, unit, attrs, _)) in phases.iter().enumerate() {
        if a.no_xattr && *attrs {
            println!("xattr phase={name} rate=n/a unit={unit}");
        } else {
            println!("xattr phase={name} rate={:.1} unit={unit}", best[k]);
        }
    }
}
