//! The pid file of a mount's daemon, `/run/dualfs/<escaped mount point>.pid`, through which
//! `dualfs umount` finds the process to wait for.
//!
//! The daemon removes its pid file only after its final checkpoint is written, so a pid file
//! that outlives its process marks a mount that did not end cleanly.

use siphasher::sip::SipHasher;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const RUN_DIR: &str = "/run/dualfs";

/// Longest file name most file systems take.
const NAME_MAX: usize = 255;
const SUFFIX: &str = ".pid";

/// Where the daemon of `mountpoint` (a canonical path) records its pid.
pub fn pid_file_path(mountpoint: &Path) -> PathBuf {
    Path::new(RUN_DIR).join(pid_file_name(mountpoint))
}

/// `systemd-escape --path` of the mount point plus ".pid"; a name too long for a directory
/// entry is cut and made unique again with a hash of the whole path.
pub fn pid_file_name(mountpoint: &Path) -> String {
    let escaped = escape_path(mountpoint);
    if escaped.len() + SUFFIX.len() <= NAME_MAX {
        return escaped + SUFFIX;
    }
    let hash = SipHasher::new().hash(mountpoint.as_os_str().as_bytes());
    // Escaped text is ASCII, so any byte index is a char boundary.
    let keep = NAME_MAX - SUFFIX.len() - 17;
    format!("{}-{hash:016x}{SUFFIX}", &escaped[..keep])
}

/// systemd's path escaping: strip the outer slashes, turn inner ones into '-', keep ASCII
/// letters, digits, ':', '_' and '.' (not leading), write every other byte as `\xNN`.
pub fn escape_path(path: &Path) -> String {
    let bytes = path.as_os_str().as_bytes();
    let trimmed = trim_slashes(bytes);
    if trimmed.is_empty() {
        return "-".into();
    }
    let mut out = String::with_capacity(trimmed.len());
    let mut previous_slash = false;
    for (i, &b) in trimmed.iter().enumerate() {
        if b == b'/' {
            // Collapse "//" like systemd's path simplification.
            if !previous_slash {
                out.push('-');
            }
            previous_slash = true;
            continue;
        }
        previous_slash = false;
        let plain = b.is_ascii_alphanumeric() || b == b':' || b == b'_' || (b == b'.' && i > 0);
        if plain {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn trim_slashes(mut bytes: &[u8]) -> &[u8] {
    while let [b'/', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b'/'] = bytes {
        bytes = rest;
    }
    bytes
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
    let Ok(stat) = fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    let state = stat.get(close + 2).copied().unwrap_or(b'?');
    if matches!(state, b'Z' | b'X' | b'x') {
        return false;
    }
    let comm = &stat[stat.iter().position(|&b| b == b'(').unwrap_or(0)..close];
    comm.windows(b"dualfs".len()).any(|w| w == b"dualfs")
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

    fn name(path: &str) -> String {
        pid_file_name(Path::new(path))
    }

    #[test]
    fn escapes_like_systemd() {
        assert_eq!(name("/mnt/dualfs"), "mnt-dualfs.pid");
        assert_eq!(name("/"), "-.pid");
        assert_eq!(name("/mnt/a-b"), "mnt-a\\x2db.pid");
        assert_eq!(name("/srv/my disk/x_y:z"), "srv-my\\x20disk-x_y:z.pid");
        assert_eq!(name("/.hidden/v1.2"), "\\x2ehidden-v1.2.pid");
        assert_eq!(name("/mnt//x/"), "mnt-x.pid");
        assert_eq!(name("/mnt/caf\u{e9}"), "mnt-caf\\xc3\\xa9.pid");
        assert_eq!(name("/a\\b"), "a\\x5cb.pid");
    }

    #[test]
    fn escaping_keeps_distinct_paths_distinct() {
        assert_ne!(name("/mnt/a-b"), name("/mnt/a/b"));
        assert_ne!(name("/mnt/a_b"), name("/mnt/a/b"));
    }

    #[test]
    fn long_mount_points_fit_in_a_file_name() {
        let long_a = format!("/{}", "a".repeat(400));
        let long_b = format!("/{}b", "a".repeat(400));
        let (a, b) = (name(&long_a), name(&long_b));
        assert!(a.len() <= NAME_MAX && b.len() <= NAME_MAX);
        assert_ne!(a, b);
        assert!(a.ends_with(".pid"));
        let just_fits = format!("/{}", "c".repeat(NAME_MAX - 4));
        assert_eq!(
            name(&just_fits),
            format!("{}.pid", "c".repeat(NAME_MAX - 4))
        );
    }

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
