//! What is mounted where, from /proc/self/mountinfo, so that `dualfs umount` only ever
//! unmounts a FUSE file system.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The file system type of the topmost mount at `mountpoint` (a canonical path), if any.
pub fn mounted_fs_type(mountpoint: &Path) -> io::Result<Option<String>> {
    let table = std::fs::read("/proc/self/mountinfo")?;
    Ok(fs_type_in(&table, mountpoint))
}

/// Mount points of the FUSE mounts whose source is `source` (a canonical path, as
/// `dualfs mount` names its mounts' source), in mount order.
pub fn fuse_mounts_of(source: &Path) -> io::Result<Vec<PathBuf>> {
    let table = std::fs::read("/proc/self/mountinfo")?;
    Ok(fuse_mounts_in(&table, source))
}

fn fuse_mounts_in(table: &[u8], source: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for line in table.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(separator) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        let (Some(point), Some(fs_type), Some(src)) = (
            fields.get(4),
            fields.get(separator + 1),
            fields.get(separator + 2),
        ) else {
            continue;
        };
        if is_fuse(&String::from_utf8_lossy(fs_type))
            && OsString::from_vec(unescape(src)) == source.as_os_str()
        {
            found.push(PathBuf::from(OsString::from_vec(unescape(point))));
        }
    }
    found
}

/// Is this a FUSE mount ("fuse", "fuseblk" or "fuse.<subtype>")?
pub fn is_fuse(fs_type: &str) -> bool {
    fs_type == "fuse" || fs_type == "fuseblk" || fs_type.starts_with("fuse.")
}

/// Lines are "id parent dev root MOUNTPOINT options [optional...] - TYPE source superopts";
/// later lines are mounted on top of earlier ones.
fn fs_type_in(table: &[u8], mountpoint: &Path) -> Option<String> {
    let wanted = mountpoint.as_os_str();
    let mut found = None;
    for line in table.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(point) = fields.get(4) else {
            continue;
        };
        let Some(separator) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        if OsString::from_vec(unescape(point)) == wanted {
            if let Some(fs_type) = fields.get(separator + 1) {
                found = Some(String::from_utf8_lossy(&unescape(fs_type)).into_owned());
            }
        }
    }
    found
}

/// The kernel writes space, tab, newline and backslash in paths as octal escapes (`\040`).
fn unescape(field: &[u8]) -> Vec<u8> {
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
42 41 0:37 / /mnt/x rw,nosuid - fuse.dualfs /img/m rw
";

    #[test]
    fn finds_the_topmost_mount() {
        assert_eq!(fs_type_in(TABLE, Path::new("/")), Some("ext4".into()));
        assert_eq!(
            fs_type_in(TABLE, Path::new("/mnt/x")),
            Some("fuse.dualfs".into())
        );
        assert_eq!(
            fs_type_in(TABLE, Path::new("/mnt/my disk")),
            Some("fuse".into())
        );
        assert_eq!(fs_type_in(TABLE, Path::new("/mnt")), None);
        assert_eq!(fs_type_in(b"garbage\n\n1 2 3\n", Path::new("/")), None);
    }

    #[test]
    fn finds_mounts_by_source() {
        assert_eq!(
            fuse_mounts_in(TABLE, Path::new("/img/meta.img")),
            vec![PathBuf::from("/mnt/my disk")]
        );
        assert_eq!(
            fuse_mounts_in(TABLE, Path::new("/img/m")),
            vec![PathBuf::from("/mnt/x")]
        );
        assert!(fuse_mounts_in(TABLE, Path::new("/dev/sda1")).is_empty());
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
        assert!(mounted_fs_type(Path::new("/")).unwrap().is_some());
    }
}
