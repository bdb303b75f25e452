//! A mount daemon whose file system was unmounted keeps both devices (and their locks) until
//! it has written its final checkpoint, a moment after umount(2) returned. A mount or a check
//! that finds a device held by such a daemon waits for it to let go, for a bounded while,
//! instead of failing with "in use" at once. The wait never weakens the lock: the device is
//! still opened exclusively, only once the daemon has closed it.
//!
//! A daemon is known by its pid file (`/run/dualfs/<escaped mount point>.pid`, written by
//! `dualfs mount` once mounted, removed after the final checkpoint); its mount is gone when no
//! FUSE mount in the table has that pid file. Mounts made by ordinary users have no pid file:
//! their devices are never waited for.

use super::Daemon;
use crate::mountinfo;
use crate::run_dir::RUN_DIR;
use std::fmt;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a mount or a check waits for such a daemon: a final checkpoint takes well under
/// a second unless the metadata cache held a great deal.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The device was still held when the patience ran out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StillHeld {
    pub pid: i32,
    pub waited: Duration,
}

impl fmt::Display for StillHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "held by the DualFS daemon (pid {}) of a file system no longer mounted, still \
             writing its final checkpoint after {} s (or unmounted lazily and still in use)",
            self.pid,
            self.waited.as_secs()
        )
    }
}

impl std::error::Error for StillHeld {}

/// Wait until no unmounted DualFS daemon holds `device` (returns at once if none does).
pub fn wait_until_released(device: &Path, patience: Duration) -> Result<(), StillHeld> {
    let start = Instant::now();
    loop {
        let Some(pid) = unmounted_daemon_holding(device) else {
            return Ok(());
        };
        let waited = start.elapsed();
        if waited >= patience {
            return Err(StillHeld { pid, waited });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A live DualFS daemon that holds `device` open and whose mount is gone, if there is one.
pub fn unmounted_daemon_holding(device: &Path) -> Option<i32> {
    let wanted = Storage::of(device)?;
    // Without the table nothing tells a finishing daemon from a serving one: no wait.
    let table = mountinfo::read().ok()?;
    let serving: Vec<PathBuf> = table
        .iter()
        .filter(|m| m.is_fuse())
        .map(|m| Daemon::Mount.pid_file(&m.mount_point))
        .collect();
    daemon_pid_files()
        .into_iter()
        .filter(|(pid_file, _)| !serving.contains(pid_file))
        .map(|(_, pid)| pid)
        .find(|&pid| Daemon::Mount.is_live(pid) && holds(pid, &wanted))
}

/// Every daemon pid file in the run directory, with the pid it names.
fn daemon_pid_files() -> Vec<(PathBuf, i32)> {
    let Ok(entries) = fs::read_dir(RUN_DIR) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pid"))
        .filter_map(|p| {
            let pid = fs::read_to_string(&p).ok()?.trim().parse().ok()?;
            Some((p, pid))
        })
        .collect()
}

/// What a device is, as its open descriptors show it: a block device by its number, an image
/// file by its inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Storage {
    Block(u64),
    File(u64, u64),
}

impl Storage {
    fn of(path: &Path) -> Option<Storage> {
        let m = fs::metadata(path).ok()?;
        Some(if m.file_type().is_block_device() {
            Storage::Block(m.rdev())
        } else {
            Storage::File(m.dev(), m.ino())
        })
    }
}

/// Does process `pid` have `storage` open?
fn holds(pid: i32, storage: &Storage) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| Storage::of(&fd.path()).as_ref() == Some(storage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_this_process_holds_is_found_by_its_descriptors() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let storage = Storage::of(file.path()).unwrap();
        assert!(holds(std::process::id() as i32, &storage));
        let other = tempfile::NamedTempFile::new().unwrap();
        assert_ne!(Storage::of(other.path()), Some(storage));
        assert!(!holds(i32::MAX, &storage));
    }

    #[test]
    fn nothing_to_wait_for_returns_at_once() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let start = Instant::now();
        assert_eq!(wait_until_released(file.path(), PATIENCE), Ok(()));
        assert!(start.elapsed() < PATIENCE);
        assert_eq!(
            wait_until_released(Path::new("/nonexistent/dualfs-image"), PATIENCE),
            Ok(())
        );
    }
}
