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

/// Drop the line of the mount at `mountpoint` from the table at `utab`; whether there was
/// one. No table, no line: nothing to do.
pub fn forget_mount(utab: &Path, mountpoint: &Path) -> io::Result<bool> {
    if !utab.exists() {
        return Ok(false);
    }
    let _lock = lock(utab)?;
    let text = match std::fs::read_to_string(utab) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match without_mount(&text, mountpoint) {
        Some(kept) => replace(utab, &kept).map(|()| true),
        None => Ok(false),
    }
}

/// `text` without the last line whose `TARGET=` field is `mountpoint`; None without one.
fn without_mount(text: &str, mountpoint: &Path) -> Option<String> {
    let wanted = format!("TARGET={}", mangle(mountpoint.as_os_str().as_bytes()));
    let lines: Vec<&str> = text.lines().collect();
    let last = lines
        .iter()
        .rposition(|line| line.split(' ').any(|field| field == wanted))?;
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
