//! The data device path that mkfs recorded in the metadata superblock, for
//! `dualfs mount META MOUNTPOINT`. Reads only; the core checks the pair again when it mounts.
//! To be swapped for the core's superblock decoder once it exposes one.

use super::error::describe_io;
use anyhow::{anyhow, bail};
use dualfs::format::{check_crc, get_u16, get_u32, FORMAT_VERSION};
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

// Superblock fields (docs/FORMAT.md, "Superblock").
const SB_MAGIC: &[u8; 8] = b"DUALFSSB";
const SB_CHECKED_BYTES: usize = 4096;
const SB_VERSION_OFF: usize = 8;
const SB_CRC_OFF: usize = 12;
const SB_ROLE_OFF: usize = 32;
const SB_DATA_PATH_LEN_OFF: usize = 208;
const SB_DATA_PATH_OFF: usize = 210;
const SB_DATA_PATH_MAX: usize = 1024;
const ROLE_METADATA: u32 = 1;
const ROLE_DATA: u32 = 2;

/// The data device path recorded in META's superblock, as recorded (possibly relative).
pub fn recorded_data_path(meta: &Path) -> anyhow::Result<PathBuf> {
    let file = File::open(meta)
        .map_err(|e| anyhow!("cannot open {}: {}", meta.display(), describe_io(&e)))?;
    let mut block = vec![0u8; SB_CHECKED_BYTES];
    match file.read_exact_at(&mut block, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            bail!("{} is not a DualFS device (too small)", meta.display())
        }
        Err(e) => bail!("cannot read {}: {}", meta.display(), describe_io(&e)),
    }
    decode_data_path(&block).map_err(|why| anyhow!("{}: {why}", meta.display()))
}

/// Check the superblock of a metadata device and return its recorded data path.
fn decode_data_path(sb: &[u8]) -> Result<PathBuf, String> {
    if sb.len() < SB_CHECKED_BYTES || &sb[..SB_MAGIC.len()] != SB_MAGIC {
        return Err("not a DualFS device (no superblock)".into());
    }
    let sb = &sb[..SB_CHECKED_BYTES];
    if !check_crc(sb, SB_CRC_OFF) {
        return Err("DualFS superblock is damaged (checksum mismatch)".into());
    }
    let version = get_u32(sb, SB_VERSION_OFF);
    if version != FORMAT_VERSION {
        return Err(format!(
            "DualFS format version {version} is not supported (this program reads version {FORMAT_VERSION})"
        ));
    }
    match get_u32(sb, SB_ROLE_OFF) {
        ROLE_METADATA => {}
        ROLE_DATA => return Err("is the data device of a DualFS, not its metadata device".into()),
        role => return Err(format!("DualFS superblock has an unknown role {role}")),
    }
    let len = usize::from(get_u16(sb, SB_DATA_PATH_LEN_OFF));
    if len > SB_DATA_PATH_MAX {
        return Err(format!(
            "DualFS superblock is damaged (data path length {len})"
        ));
    }
    if len == 0 {
        return Err("no data device path is recorded; give DATA on the command line".into());
    }
    let bytes = &sb[SB_DATA_PATH_OFF..SB_DATA_PATH_OFF + len];
    Ok(PathBuf::from(OsStr::from_bytes(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dualfs::format::seal_crc;

    /// A metadata superblock as mkfs would write it (only the fields read here).
    fn superblock(role: u32, version: u32, data_path: &[u8]) -> Vec<u8> {
        let mut sb = vec![0u8; SB_CHECKED_BYTES];
        sb[..8].copy_from_slice(SB_MAGIC);
        sb[SB_VERSION_OFF..SB_VERSION_OFF + 4].copy_from_slice(&version.to_le_bytes());
        sb[SB_ROLE_OFF..SB_ROLE_OFF + 4].copy_from_slice(&role.to_le_bytes());
        let len = data_path.len() as u16;
        sb[SB_DATA_PATH_LEN_OFF..SB_DATA_PATH_LEN_OFF + 2].copy_from_slice(&len.to_le_bytes());
        let n = data_path.len().min(SB_DATA_PATH_MAX);
        sb[SB_DATA_PATH_OFF..SB_DATA_PATH_OFF + n].copy_from_slice(&data_path[..n]);
        seal_crc(&mut sb, SB_CRC_OFF);
        sb
    }

    #[test]
    fn reads_the_recorded_path() {
        let sb = superblock(ROLE_METADATA, FORMAT_VERSION, b"/dev/vdb");
        assert_eq!(decode_data_path(&sb), Ok(PathBuf::from("/dev/vdb")));
        let odd = superblock(ROLE_METADATA, FORMAT_VERSION, b"data \xff.img");
        assert_eq!(
            decode_data_path(&odd).unwrap().as_os_str().as_bytes(),
            b"data \xff.img"
        );
    }

    #[test]
    fn longest_path_fits() {
        let long = vec![b'a'; SB_DATA_PATH_MAX];
        let sb = superblock(ROLE_METADATA, FORMAT_VERSION, &long);
        assert_eq!(
            decode_data_path(&sb).unwrap().as_os_str().len(),
            SB_DATA_PATH_MAX
        );
    }

    #[test]
    fn rejects_what_is_not_a_metadata_superblock() {
        let zeros = vec![0u8; SB_CHECKED_BYTES];
        assert!(decode_data_path(&zeros)
            .unwrap_err()
            .contains("not a DualFS"));
        assert!(decode_data_path(&zeros[..100]).is_err());

        let mut damaged = superblock(ROLE_METADATA, FORMAT_VERSION, b"/d");
        damaged[300] ^= 1;
        assert!(decode_data_path(&damaged).unwrap_err().contains("checksum"));

        let future = superblock(ROLE_METADATA, FORMAT_VERSION + 1, b"/d");
        assert!(decode_data_path(&future).unwrap_err().contains("version"));

        let data = superblock(ROLE_DATA, FORMAT_VERSION, b"");
        assert!(decode_data_path(&data).unwrap_err().contains("data device"));

        let unknown = superblock(9, FORMAT_VERSION, b"/d");
        assert!(decode_data_path(&unknown).unwrap_err().contains("role"));

        let no_path = superblock(ROLE_METADATA, FORMAT_VERSION, b"");
        assert!(decode_data_path(&no_path)
            .unwrap_err()
            .contains("give DATA"));

        let mut too_long = superblock(ROLE_METADATA, FORMAT_VERSION, b"/d");
        too_long[SB_DATA_PATH_LEN_OFF..SB_DATA_PATH_LEN_OFF + 2]
            .copy_from_slice(&(SB_DATA_PATH_MAX as u16 + 1).to_le_bytes());
        seal_crc(&mut too_long, SB_CRC_OFF);
        assert!(decode_data_path(&too_long).unwrap_err().contains("length"));
    }

    #[test]
    fn only_the_first_4096_bytes_are_checked() {
        let mut block = superblock(ROLE_METADATA, FORMAT_VERSION, b"/d");
        block.extend_from_slice(&[0xAA; 4096]);
        assert_eq!(decode_data_path(&block), Ok(PathBuf::from("/d")));
    }

    #[test]
    fn reads_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let meta = dir.path().join("meta.img");
        std::fs::write(
            &meta,
            superblock(ROLE_METADATA, FORMAT_VERSION, b"data.img"),
        )
        .unwrap();
        assert_eq!(
            recorded_data_path(&meta).unwrap(),
            PathBuf::from("data.img")
        );
        std::fs::write(&meta, [0u8; 10]).unwrap();
        let e = recorded_data_path(&meta).unwrap_err().to_string();
        assert!(e.contains("too small"), "{e}");
    }
}
