//! The pid file of a mount's daemon, `/run/dualfs/<escaped mount point>.pid`, through which
//! `dualfs umount` finds the process to wait for.
//!
//! The daemon removes its pid file only after its final checkpoint is written, so a pid file
//! that outlives its process marks a mount that did not end cleanly.

use dualfs::run_dir::run_file_path;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the daemon of `mountpoint` (a canonical path) records its pid.
pub fn pid_file_path(mountpoint: &Path) -> PathBuf {
    run_file_path(mountpoint, "pid")
}

/// Record this process as the daemon of `mountpoint` (replacing a stale record).
pub fn write_pid_file(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    // Write then rename, so that a reader never sees half a pid.
    let pid = std::process::id();
    let temporary = path.with_extension(format!("pid.{pid}.tmp"));
    fs::write(&temporary, format!("{pid}\n"))?;
    fs::rename(&temporary, path).inspect_err(|_| {
        let _ = fs::remove_file(&temporary);
    })
}

/// Remove the pid file if it is still this process's.
pub fn remove_pid_file(path: &Path) -> io::Result<()> {
    if read_pid_file(path) == Some(std::process::id() as i32) {
        fs::remove_file(path)?;
    }
    Ok(())
}

pub fn read_pid_file(path: &Path) -> Option<i32> {
    let text = fs::read_to_string(path).ok()?;
    text.trim().parse().ok().filter(|&pid: &i32| pid > 0)
}

/// Is `pid` a running (not zombie) dualfs process? A zombie counts as gone: where nobody
/// reaps orphans it would never disappear.
pub fn is_live_daemon(pid: i32) -> bool {
    dualfs::unmounted_daemon::is_live_dualfs_process(pid)
}

/// Wait until `pid` is no longer a live dualfs process; false on timeout.
pub fn wait_for_exit(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !is_live_daemon(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_file_path_is_under_run_dir() {
        assert_eq!(
            pid_file_path(Path::new("/mnt/x")),
            PathBuf::from("/run/dualfs/mnt-x.pid")
        );
    }

    #[test]
    fn write_read_remove() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/mnt-x.pid");
        write_pid_file(&path).unwrap();
        assert_eq!(read_pid_file(&path), Some(std::process::id() as i32));
        remove_pid_file(&path).unwrap();
        assert!(!path.exists());

        // Someone else's pid file stays.
        fs::write(&path, "1\n").unwrap();
        remove_pid_file(&path).unwrap();
        assert!(path.exists());
        fs::write(&path, "garbage").unwrap();
        assert_eq!(read_pid_file(&path), None);
    }

    #[test]
    fn liveness() {
        // The test binary is named dualfs-<hash>.
        assert!(is_live_daemon(std::process::id() as i32));
        assert!(!is_live_daemon(i32::MAX));
        // pid 1 is alive but not dualfs.
        assert!(
            !is_live_daemon(1)
                || fs::read_to_string("/proc/1/comm")
                    .unwrap()
                    .contains("dualfs")
        );
        assert!(wait_for_exit(i32::MAX, Duration::ZERO));
    }
}
