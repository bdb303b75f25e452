//! The mount table as the kernel shows it in `/proc/self/mountinfo`: what is mounted where,
//! with which device number, type and source. One parser for the mount program (is a DualFS
//! already mounted here, is our own mount still there), `dualfs umount` and mkfs's in-use
//! check.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The kernel type of a DualFS mount (FUSE with the subtype `dualfs`).
pub const DUALFS_FS_TYPE: &str = "fuse.dualfs";

/// One line of the table:
/// `id parent major:minor root mount-point options [optional...] - type source superopts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's id (reused by later mounts once this one is gone).
    pub id: u32,
    pub parent: u32,
    /// Device number of the mounted file system (st_dev of its files). For FUSE the minor is
    /// also the connection's number in /sys/fs/fuse/connections.
    pub major: u32,
    pub minor: u32,
    pub mount_point: PathBuf,
    /// The per-mount options (`rw,nosuid,nodev,relatime`).
    pub options: String,
    pub fs_type: String,
    pub source: String,
}

impl MountEntry {
    /// The device number as `st_dev` holds it.
    pub fn device(&self) -> u64 {
        libc::makedev(self.major, self.minor)
    }

    /// Is this a FUSE mount ("fuse", "fuseblk" or "fuse.<subtype>")?
    pub fn is_fuse(&self) -> bool {
        is_fuse(&self.fs_type)
    }

    pub fn is_read_only(&self) -> bool {
        self.options.split(',').any(|o| o == "ro")
    }
}

/// Is this a FUSE type ("fuse", "fuseblk" or "fuse.<subtype>")?
pub fn is_fuse(fs_type: &str) -> bool {
    fs_type == "fuse" || fs_type == "fuseblk" || fs_type.starts_with("fuse.")
}

/// This process's mount table, in the kernel's order (a mount comes after what it covers).
pub fn read() -> io::Result<Vec<MountEntry>> {
    Ok(parse(&std::fs::read("/proc/self/mountinfo")?))
}

/// Mount points of the FUSE mounts whose source is `source` (a canonical path, as
/// `dualfs mount` names its mounts' source), in mount order.
pub fn fuse_mounts_of(source: &Path) -> io::Result<Vec<PathBuf>> {
    Ok(fuse_mounts_in(&read()?, source))
}

fn fuse_mounts_in(table: &[MountEntry], source: &Path) -> Vec<PathBuf> {
    table
        .iter()
        .filter(|e| e.is_fuse() && Path::new(&e.source) == source)
        .map(|e| e.mount_point.clone())
        .collect()
}

/// Parse a whole table; lines that do not parse are skipped.
pub fn parse(table: &[u8]) -> Vec<MountEntry> {
    table
        .split(|&b| b == b'\n')
        .filter_map(parse_line)
        .collect()
}

/// The topmost mount at exactly `mount_point` (a canonical path), if any.
pub fn topmost_at<'a>(table: &'a [MountEntry], mount_point: &Path) -> Option<&'a MountEntry> {
    table.iter().rev().find(|m| m.mount_point == mount_point)
}

fn parse_line(line: &[u8]) -> Option<MountEntry> {
    let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let separator = fields.iter().position(|f| *f == b"-")?;
    if separator < 6 {
        return None;
    }
    let number = |field: &[u8]| std::str::from_utf8(field).ok()?.parse::<u32>().ok();
    let (major, minor) = {
        let text = std::str::from_utf8(fields[2]).ok()?;
        let (major, minor) = text.split_once(':')?;
        (major.parse().ok()?, minor.parse().ok()?)
    };
    let text = |field: &[u8]| String::from_utf8_lossy(&unescape(field)).into_owned();
    Some(MountEntry {
        id: number(fields[0])?,
        parent: number(fields[1])?,
        major,
        minor,
        mount_point: PathBuf::from(OsString::from_vec(unescape(fields[4]))),
        options: text(fields[5]),
        fs_type: text(fields.get(separator + 1)?),
        source: text(fields.get(separator + 2)?),
    })
}

/// The kernel writes space, tab, newline and backslash in paths as octal escapes (`\040`).
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|digits| field[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match octal {
            Some(d) => {
                let value = (d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0');
                out.push(value);
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[u8] = b"\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /mnt/my\\040disk rw,nosuid,nodev,relatime shared:20 - fuse /img/meta.img rw,user_id=0
41 22 0:36 / /mnt/x rw - tmpfs tmpfs rw
42 41 0:37 / /mnt/x rw,nosuid - fuse.dualfs /img/m\\040n rw
";

    #[test]
    fn parses_every_field() {
        let table = parse(TABLE);
        assert_eq!(table.len(), 4);
        let m = &table[3];
        assert_eq!((m.id, m.parent, m.major, m.minor), (42, 41, 0, 37));
        assert_eq!(m.mount_point, Path::new("/mnt/x"));
        assert_eq!(m.fs_type, "fuse.dualfs");
        assert_eq!(m.source, "/img/m n");
        assert_eq!(m.device(), libc::makedev(0, 37));
        assert!(!m.is_read_only() && m.options == "rw,nosuid");
        assert_eq!(table[1].mount_point, Path::new("/mnt/my disk"));
    }

    #[test]
    fn finds_the_topmost_mount() {
        let table = parse(TABLE);
        let at = |p: &str| topmost_at(&table, Path::new(p)).map(|m| m.fs_type.as_str());
        assert_eq!(at("/"), Some("ext4"));
        assert_eq!(at("/mnt/x"), Some("fuse.dualfs"));
        assert_eq!(at("/mnt/my disk"), Some("fuse"));
        assert_eq!(at("/mnt"), None);
    }

    #[test]
    fn skips_lines_that_do_not_parse() {
        assert!(
            parse(b"garbage\n\n1 2 3\n1 2 x:y / / rw - ext4 a b\n1 2 0:1 / / rw -\n").is_empty()
        );
    }

    #[test]
    fn fuse_types() {
        assert!(is_fuse("fuse") && is_fuse("fuse.dualfs") && is_fuse("fuseblk"));
        assert!(!is_fuse("ext4") && !is_fuse("fusectl"));
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape(b"a\\040b\\134c\\011"), b"a b\\c\t");
        assert_eq!(unescape(b"odd\\9\\04"), b"odd\\9\\04");
    }

    #[test]
    fn reads_this_process_table() {
        let table = read().unwrap();
        assert!(topmost_at(&table, Path::new("/")).is_some());
    }
}
