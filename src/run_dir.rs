//! Files in `/run/dualfs` named after a mount point: the daemons' pid files (`<escaped mount
//! point>.pid` for the mount, `.cleaner.pid` for the cleaner, `daemon::pid_file`) and the
//! mount's control socket (`.sock`, `control_protocol`). One naming for all, so that each is
//! found from the others.

use siphasher::sip::SipHasher;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub const RUN_DIR: &str = "/run/dualfs";

/// Longest file name most file systems take.
pub const NAME_MAX: usize = 255;

/// `RUN_DIR/<escaped mount point>.<suffix>` for `mountpoint` (a canonical path).
pub fn run_file_path(mountpoint: &Path, suffix: &str) -> PathBuf {
    Path::new(RUN_DIR).join(run_file_name(mountpoint, suffix))
}

/// `systemd-escape --path` of the mount point plus `.<suffix>`; a name too long for a
/// directory entry is cut and made unique again with a hash of the whole path.
pub fn run_file_name(mountpoint: &Path, suffix: &str) -> String {
    let escaped = escape_path(mountpoint);
    if escaped.len() + 1 + suffix.len() <= NAME_MAX {
        return format!("{escaped}.{suffix}");
    }
    let hash = SipHasher::new().hash(mountpoint.as_os_str().as_bytes());
    // Escaped text is ASCII, so any byte index is a char boundary.
    let keep = NAME_MAX - 1 - suffix.len() - 17;
    format!("{}-{hash:016x}.{suffix}", &escaped[..keep])
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

#[cfg(test)]
mod tests {
    use super::*;

    fn name(path: &str) -> String {
        run_file_name(Path::new(path), "pid")
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
}
