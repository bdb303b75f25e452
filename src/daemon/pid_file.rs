//! Pid files in `/run/dualfs`, named after the mount point a daemon serves: the mount's
//! (`<escaped mount point>.pid`), through which `dualfs umount` finds the process to wait for,
//! and the cleaner's (`.cleaner.pid`), through which `dualfs-cleaner --stop` finds it and a
//! second cleaner of the same mount is refused.
//!
//! The mount daemon removes its pid file only after its final checkpoint is written, so a pid
//! file that outlives its process marks a mount that did not end cleanly.

use crate::run_dir::run_file_path;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which daemon of a mount point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Daemon {
    /// The process that mounted and serves the file system.
    Mount,
    /// A `dualfs-cleaner` attached to the mount.
    Cleaner,
}

impl Daemon {
    /// Where this daemon of `mountpoint` (a canonical path) records its pid.
    pub fn pid_file(self, mountpoint: &Path) -> PathBuf {
        let suffix = match self {
            Daemon::Mount => "pid",
            Daemon::Cleaner => "cleaner.pid",
        };
        run_file_path(mountpoint, suffix)
    }

    /// What the process name holds. A mount daemon may be `dualfs`, `mount.dualfs` or a test
    /// binary (`dualfs-<hash>`), so any DualFS program counts; a pid reused by another
    /// program does not.
    fn name(self) -> &'static [u8] {
        match self {
            Daemon::Mount => b"dualfs",
            Daemon::Cleaner => b"dualfs-cleaner",
        }
    }

    /// Is `pid` a running (not zombie) process of this daemon's program? A zombie counts as
    /// gone: where nobody reaps orphans it would never disappear.
    pub fn is_live(self, pid: i32) -> bool {
        let Ok(stat) = fs::read(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the
        // last ')'.
        let Some(close) = stat.iter().rposition(|&b| b == b')') else {
            return false;
        };
        let state = stat.get(close + 2).copied().unwrap_or(b'?');
        if matches!(state, b'Z' | b'X' | b'x') {
            return false;
        }
        let comm = &stat[stat.iter().position(|&b| b == b'(').unwrap_or(0)..close];
        let name = self.name();
        comm.windows(name.len()).any(|w| w == name)
    }

    /// Wait until `pid` is no longer a live process of this daemon; false on timeout.
    pub fn wait_for_exit(self, pid: i32, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.is_live(pid) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Record this process in `path` (replacing a stale record), creating the run directory if
/// this is the first daemon since boot.
pub fn write_pid_file(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    // Write then rename, so that a reader never sees half a pid; the temporary name is this
    // process's own, so that two starting daemons never write into one file.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_files_are_under_run_dir() {
        assert_eq!(
            Daemon::Mount.pid_file(Path::new("/mnt/x")),
            PathBuf::from("/run/dualfs/mnt-x.pid")
        );
        assert_eq!(
            Daemon::Cleaner.pid_file(Path::new("/mnt/x")),
            PathBuf::from("/run/dualfs/mnt-x.cleaner.pid")
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
    fn a_pid_file_that_cannot_be_written_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a file");
        fs::write(&file, "").unwrap();
        assert!(write_pid_file(&file.join("mnt-x.pid")).is_err());
    }

    #[test]
    fn liveness() {
        // The test binary is named dualfs-<hash>: a mount daemon's name, not the cleaner's.
        let me = std::process::id() as i32;
        assert!(Daemon::Mount.is_live(me));
        assert!(!Daemon::Cleaner.is_live(me));
        assert!(!Daemon::Mount.is_live(i32::MAX));
        // pid 1 is alive but not dualfs.
        assert!(
            !Daemon::Mount.is_live(1)
                || fs::read_to_string("/proc/1/comm")
                    .unwrap()
                    .contains("dualfs")
        );
        assert!(Daemon::Mount.wait_for_exit(i32::MAX, Duration::ZERO));
    }
}
