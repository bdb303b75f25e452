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
