//! FS_IOC_SHUTDOWN (the "going down" ioctl of ext4, xfs and fuse2fs) through a real mount:
//! writes stop at once, as if the power failed, so recovery can be tested from outside.
//! Nothing more reaches either image, every later operation fails with EIO, the unmount
//! writes nothing; the next mount recovers and everything fsync'd before is there.

#[macro_use]
mod common;

use common::user::{as_user, ALICE};
use common::*;
use std::fs;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// `_IOR('X', 125, __u32)`.
const FS_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587d;
/// FS_GOING_DOWN_NOLOGFLUSH: what DualFS does whatever is asked (FUSE passes no argument).
const NOLOGFLUSH: u32 = 2;

fn shutdown(p: &Path) -> std::io::Result<()> {
    let d = sys::open(p, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let mut how = NOLOGFLUSH;
    if unsafe { libc::ioctl(d.as_raw_fd(), FS_IOC_SHUTDOWN, &mut how) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn body(w: usize, i: usize) -> Vec<u8> {
    content((w * 100_000 + i) as u64, 1000 + (i * 997) % 60_000)
}

#[test]
fn shutdown_stops_all_writes_and_the_next_mount_recovers_what_was_fsynced() {
    // No periodic flush: only fsync makes anything durable, so "durable" is exact.
    let mut t = TestFs::builder()
        .sizes(64 << 20, 256 << 20)
        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},flush_interval=3600"))
        .mount();
    // Others may not.
    as_user(ALICE.0, ALICE.1, || {
        assert_errno!(shutdown(t.path()), libc::EPERM);
    });
    const WORKERS: usize = 2;
    let stop = AtomicBool::new(false);
    let durable: Mutex<Vec<(usize, usize)>> = Mutex::default();
    let started: Mutex<Vec<(usize, usize)>> = Mutex::default();
    for w in 0..WORKERS {
        sys::mkdir(t.join(format!("w{w}")), 0o755).unwrap();
    }
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let (t, stop, durable, started) = (&t, &stop, &durable, &started);
            s.spawn(move || {
                for i in 0.. {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    started.lock().unwrap().push((w, i));
                    let p = t.join(format!("w{w}/f{i}"));
                    let r = (|| {
                        let mut f = fs::File::create(&p)?;
                        f.write_all(&body(w, i))?;
                        if i % 2 == 0 {
                            sys::fsync(&f)?;
                            durable.lock().unwrap().push((w, i));
                        }
                        Ok::<_, std::io::Error>(())
                    })();
                    if let Err(e) = r {
                        // Only the shutdown may stop a worker, and only with EIO.
                        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{}: {e}", p.display());
                        return;
                    }
                }
            });
        }
        // Shut down in the middle of the work.
        while durable.lock().unwrap().len() < 40 {
            std::thread::yield_now();
        }
        shutdown(t.path()).unwrap();
        stop.store(true, Ordering::Release);
    });
    let (meta, data) = (t.meta_path().to_path_buf(), t.data_path().to_path_buf());
    let images = || (digest_file(&meta), digest_file(&data));
    let at_shutdown = images();
    // Everything fails now; nothing reaches the images.
    assert_errno!(fs::write(t.join("after"), b"x"), libc::EIO);
    assert_errno!(sys::mkdir(t.join("after-dir"), 0o755), libc::EIO);
    // Listing a directory never listed before reaches DualFS (its open may not: by default
    // the kernel opens directories itself, and the path may be cached).
    assert_errno!(
        fs::read_dir(t.join("w0")).and_then(|d| d.collect::<std::io::Result<Vec<_>>>()),
        libc::EIO
    );
    // A second shutdown changes nothing and, as on ext4 and XFS, is no error: the kernel opens
    // the directory itself (noopendir, the default), so the ioctl reaches DualFS, which is
    // already down. (With OPENDIR sent, that open would fail with EIO first.)
    shutdown(t.path()).unwrap();
    assert_eq!(
        images(),
        at_shutdown,
        "a device was written after the shutdown"
    );
    t.unmount(); // the daemon exits 0, writing nothing; the checker sees a crashed image
    assert_eq!(
        images(),
        at_shutdown,
        "the unmount wrote after the shutdown"
    );

    t.mount();
    assert!(
        t.daemon_log().contains("not unmounted cleanly"),
        "{}",
        t.daemon_log()
    );
    let durable = durable.into_inner().unwrap();
    for &(w, i) in &durable {
        let got = fs::read(t.join(format!("w{w}/f{i}"))).unwrap();
        assert!(got == body(w, i), "fsync'd file w{w}/f{i} lost or changed");
    }
    // What was not fsync'd is gone or a prefix of what was written.
    for (w, i) in started.into_inner().unwrap() {
        if let Ok(got) = fs::read(t.join(format!("w{w}/f{i}"))) {
            assert!(body(w, i).starts_with(&got), "w{w}/f{i} is not a prefix");
        }
    }
    // And the file system takes new work.
    fs::write(t.join("after"), b"x").unwrap();
    t.remount();
    assert_eq!(fs::read(t.join("after")).unwrap(), b"x");
    t.unmount();
}

#[test]
fn no_stale_data_shows_after_preallocation_and_a_shutdown() {
    // As xfstests' generic/042: both devices hold a pattern (0xCD) before mkfs; a file
    // written, then preallocated, preallocated past its end, punched or zeroed, with a
    // shutdown right after, shows after recovery only what was written, zeros, or nothing:
    // never the pattern. Once without an fsync (as 042), once with the write fsync'd first.
    dualfs_only!();
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("meta.img"), dir.path().join("data.img"));
    for (p, size) in [(&meta, 64usize << 20), (&data, 256 << 20)] {
        fs::write(p, vec![0xCDu8; size]).unwrap();
    }
    mkfs_pair(&meta, &data, &dualfs::mkfs::MkfsParams::default());
    let mut t = TestFs::builder().images(&meta, &data).mount();
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    let modes = [
        ("falloc", 0),
        ("falloc -k", keep),
        ("fpunch", libc::FALLOC_FL_PUNCH_HOLE | keep),
        ("fzero", libc::FALLOC_FL_ZERO_RANGE),
    ];
    for fsync_first in [false, true] {
        for (name, mode) in modes {
            let f = t.join(format!("{name}-{fsync_first}").replace(' ', ""));
            {
                let w = fs::OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .open(&f)
                    .unwrap();
                std::os::unix::fs::FileExt::write_all_at(&w, &[1u8; 64 << 10], 0).unwrap();
                if fsync_first {
                    w.sync_all().unwrap();
                }
                let r = unsafe { libc::fallocate(w.as_raw_fd(), mode, 60 << 10, 4 << 10) };
                assert_eq!(r, 0, "{name}: {}", std::io::Error::last_os_error());
            }
            shutdown(t.path()).unwrap();
            t.unmount();
            t.mount();
            let shown = fs::read(&f).unwrap_or_default();
            assert!(
                shown.iter().all(|&b| b == 0 || b == 1),
                "{name} (fsync first: {fsync_first}): stale bytes after recovery"
            );
            if fsync_first {
                assert!(shown.len() >= 64 << 10, "{name}: the fsync'd write is gone");
                assert!(shown[..60 << 10].iter().all(|&b| b == 1), "{name}");
            }
        }
    }
}
