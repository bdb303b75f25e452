//! libmount's userspace mount table, `/run/mount/utab`: what mount(8) records beside the
//! kernel's table for a mount it made (options the kernel does not keep: `_netdev`, `nofail`,
//! `x-*`, `helper=`...). umount(8) drops a mount's line; `dualfs umount`, which unmounts with
//! umount2(2) itself, must do the same, or findmnt and the next mount(8) at that place see a
//! stale line.
//!
//! The file's rules are libmount's: one line per mount, `KEY=value` fields separated by
//! spaces, values with space, tab, newline and backslash written as `\ooo` (octal); changed
//! under an exclusive flock of `utab.lock` beside it, by writing a new file and renaming it
//! over the old. Like umount(8), the last line whose `TARGET=` is the mount point goes
//! (util-linux 2.38 writes no mount ID to match instead). `LIBMOUNT_UTAB` names another
//! file, as for libmount.
//!
//! A daemon that made its own mount also keeps a line of its own there while it runs, so
//! that umount(8) runs /sbin/umount.fuse.dualfs (see `record_daemon_line`).

use dualfs::daemon::Daemon;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const DEFAULT_PATH: &str = "/run/mount/utab";

/// Where libmount keeps the table.
pub fn path() -> PathBuf {
    std::env::var_os("LIBMOUNT_UTAB")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PATH))
}

/// The option that marks a daemon's own line, followed by its pid.
const DAEMON_MARK: &str = "x-dualfs.daemon=";

/// Drop the line of the mount at `mountpoint` from the table at `utab`; whether there was
/// one. No table, no line: nothing to do. A daemon's own line stays: the daemon drops it
/// when it exits.
pub fn forget_mount(utab: &Path, mountpoint: &Path) -> io::Result<bool> {
    forget_last(utab, |text| without_mount(text, mountpoint))
}

/// Record the line of daemon `pid` for its mount at `mountpoint`. umount(8) looks a mount
/// point that has a line here up in the kernel's mount table, which gives the type
/// `fuse.dualfs`, and so runs /sbin/umount.fuse.dualfs (which waits for the daemon); for one
/// without a line it takes the type from statfs(2), plain `fuse`, and runs no helper. The line
/// has no `SRC=`: libmount neither merges it into its view of the mount nor takes it for the
/// line mount(8) writes for options such as `_netdev`, which stays as it was. Lines of
/// daemons that are gone (killed: they could not drop theirs) go at the same time.
pub fn record_daemon_line(utab: &Path, mountpoint: &Path, pid: u32) -> io::Result<()> {
    if let Some(dir) = utab.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let _lock = lock(utab)?;
    let text = match std::fs::read_to_string(utab) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut kept: String = text
        .lines()
        .filter(|line| daemon_of(line).is_none_or(|pid| Daemon::Mount.is_live(pid)))
        .flat_map(|line| [line, "\n"])
        .collect();
    kept.push_str(&daemon_line(mountpoint, pid));
    kept.push('\n');
    replace(utab, &kept)
}

/// The pid of the daemon whose own line this is, if it is one.
fn daemon_of(line: &str) -> Option<i32> {
    line.split(' ')
        .find_map(|field| field.strip_prefix("OPTS=")?.strip_prefix(DAEMON_MARK))
        .and_then(|pid| pid.parse().ok())
}

/// Drop the line `record_daemon_line` wrote; whether it was there.
pub fn forget_daemon_line(utab: &Path, mountpoint: &Path, pid: u32) -> io::Result<bool> {
    let line = daemon_line(mountpoint, pid);
    forget_last(utab, |text| without_last(text, |l| l == line))
}

fn daemon_line(mountpoint: &Path, pid: u32) -> String {
    format!(
        "TARGET={} ROOT=/ OPTS={DAEMON_MARK}{pid}",
        mangle(mountpoint.as_os_str().as_bytes())
    )
}

/// Rewrite the table without what `drop` takes out of its text (None: nothing).
fn forget_last(utab: &Path, drop: impl Fn(&str) -> Option<String>) -> io::Result<bool> {
    let read = || match std::fs::read_to_string(utab) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    };
    // Looked at before locking: a user who may not write the table (an unmount through
    // fusermount) has no line in it either.
    if read()?.as_deref().and_then(&drop).is_none() {
        return Ok(false);
    }
    let _lock = lock(utab)?;
    match read()?.as_deref().and_then(&drop) {
        Some(kept) => replace(utab, &kept).map(|()| true),
        None => Ok(false),
    }
}

/// `text` without the last line whose `TARGET=` field is `mountpoint` (a daemon's own line
/// aside); None without one.
fn without_mount(text: &str, mountpoint: &Path) -> Option<String> {
    let wanted = format!("TARGET={}", mangle(mountpoint.as_os_str().as_bytes()));
    without_last(text, |line| {
        line.split(' ').any(|field| field == wanted) && daemon_of(line).is_none()
    })
}

/// `text` without its last line that `matches`; None without one.
fn without_last(text: &str, matches: impl Fn(&str) -> bool) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let last = lines.iter().rposition(|line| matches(line))?;
    Some(
        lines
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != last)
            .flat_map(|(_, line)| [*line, "\n"])
            .collect(),
    )
}

/// A value as libmount writes it: space, tab, newline and backslash as `\ooo`, other bytes
/// as they are (a path that is not UTF-8 is compared lossily).
fn mangle(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    for &b in value {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\\') {
            out.extend(format!("\\{b:03o}").bytes());
        } else {
            out.push(b);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// libmount's lock: an exclusive flock of `<utab>.lock`, held while the guard lives.
fn lock(utab: &Path) -> io::Result<nix::fcntl::Flock<File>> {
    let mut name = utab.as_os_str().to_owned();
    name.push(".lock");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(PathBuf::from(name))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| io::Error::from_raw_os_error(errno as i32))
}

/// Write `text` as the new table: a file beside it, then a rename, so that readers see the
/// old table or the new one.
fn replace(utab: &Path, text: &str) -> io::Result<()> {
    let mut name = utab.as_os_str().to_owned();
    name.push(format!(".dualfs-{}", std::process::id()));
    let tmp = PathBuf::from(name);
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, utab)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "SRC=/srv/a.meta TARGET=/mnt/a ROOT=/ OPTS=_netdev,nofail\n\
                         SRC=/srv/b.meta TARGET=/mnt/a\\040b ROOT=/ OPTS=x-test\n\
                         SRC=/srv/c.meta TARGET=/mnt/a ROOT=/ OPTS=x-over\n";

    #[test]
    fn only_the_last_line_of_that_mount_point_goes() {
        assert_eq!(
            without_mount(TABLE, Path::new("/mnt/a")).unwrap(),
            "SRC=/srv/a.meta TARGET=/mnt/a ROOT=/ OPTS=_netdev,nofail\n\
             SRC=/srv/b.meta TARGET=/mnt/a\\040b ROOT=/ OPTS=x-test\n"
        );
        assert_eq!(
            without_mount(TABLE, Path::new("/mnt/a b")).unwrap(),
            "SRC=/srv/a.meta TARGET=/mnt/a ROOT=/ OPTS=_netdev,nofail\n\
             SRC=/srv/c.meta TARGET=/mnt/a ROOT=/ OPTS=x-over\n"
        );
        assert_eq!(without_mount(TABLE, Path::new("/mnt")), None);
        assert_eq!(without_mount("", Path::new("/mnt/a")), None);
        assert_eq!(mangle(b"/a b\\c\td\ne"), "/a\\040b\\134c\\011d\\012e");
    }

    #[test]
    fn a_daemons_line_is_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let utab = dir.path().join("mount/utab");
        let (mnt, me) = (Path::new("/mnt/a"), std::process::id());
        // A line of a daemon that is gone (pid i32::MAX is never live) and one of mount(8).
        std::fs::create_dir_all(utab.parent().unwrap()).unwrap();
        std::fs::write(
            &utab,
            "TARGET=/mnt/c ROOT=/ OPTS=x-dualfs.daemon=2147483647\n",
        )
        .unwrap();
        record_daemon_line(&utab, mnt, me).unwrap();
        let text = std::fs::read_to_string(&utab).unwrap();
        std::fs::write(
            &utab,
            text + "SRC=/srv/a.meta TARGET=/mnt/a ROOT=/ OPTS=_netdev",
        )
        .unwrap();
        record_daemon_line(&utab, Path::new("/mnt/b"), me).unwrap();
        assert_eq!(
            std::fs::read_to_string(&utab).unwrap(),
            format!(
                "TARGET=/mnt/a ROOT=/ OPTS=x-dualfs.daemon={me}\n\
                 SRC=/srv/a.meta TARGET=/mnt/a ROOT=/ OPTS=_netdev\n\
                 TARGET=/mnt/b ROOT=/ OPTS=x-dualfs.daemon={me}\n"
            )
        );
        // umount(8)'s line goes with `forget_mount`, the daemon's own only with its pid.
        assert!(forget_mount(&utab, mnt).unwrap());
        assert!(!forget_mount(&utab, mnt).unwrap());
        assert!(!forget_daemon_line(&utab, mnt, me + 1).unwrap());
        assert!(forget_daemon_line(&utab, mnt, me).unwrap());
        assert_eq!(
            std::fs::read_to_string(&utab).unwrap(),
            format!("TARGET=/mnt/b ROOT=/ OPTS=x-dualfs.daemon={me}\n")
        );
    }

    #[test]
    fn forget_mount_rewrites_the_file_and_leaves_others() {
        let dir = tempfile::tempdir().unwrap();
        let utab = dir.path().join("utab");
        let b = Path::new("/mnt/a b");
        assert!(!forget_mount(&utab, b).unwrap(), "no table: nothing to do");
        std::fs::write(&utab, TABLE).unwrap();
        assert!(forget_mount(&utab, b).unwrap());
        assert_eq!(
            std::fs::read_to_string(&utab).unwrap(),
            "SRC=/srv/a.meta TARGET=/mnt/a ROOT=/ OPTS=_netdev,nofail\n\
             SRC=/srv/c.meta TARGET=/mnt/a ROOT=/ OPTS=x-over\n"
        );
        assert!(!forget_mount(&utab, b).unwrap(), "already gone");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            names.iter().all(|n| n == "utab" || n == "utab.lock"),
            "no temporary file left: {names:?}"
        );
    }
}
