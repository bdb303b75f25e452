//! The data device path that mkfs recorded in the metadata superblock, for
//! `dualfs mount META MOUNTPOINT`. Reads only; the core checks the pair again when it mounts.

use super::error::describe_io;
use anyhow::{anyhow, bail};
use dualfs::format::superblock::{Role, Superblock, SB_SIZE};
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The data device path recorded in META's superblock, as recorded (possibly relative).
pub fn recorded_data_path(meta: &Path) -> anyhow::Result<PathBuf> {
    let file = File::open(meta)
        .map_err(|e| anyhow!("cannot open {}: {}", meta.display(), describe_io(&e)))?;
    let mut block = vec![0u8; SB_SIZE];
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
fn decode_data_path(block: &[u8]) -> Result<PathBuf, String> {
    let sb = Superblock::decode(block).map_err(|e| match e {
        dualfs::FsError::Corrupt { detail, .. }
            if detail.starts_with("not a DualFS") || detail.starts_with("damaged") =>
        {
            detail
        }
        dualfs::FsError::Corrupt { detail, .. } => format!("not a usable DualFS device: {detail}"),
        other => other.to_string(),
    })?;
    if sb.role == Role::Data {
        return Err("is the data device of a DualFS, not its metadata device".into());
    }
    if sb.data_path.is_empty() {
        return Err("no data device path is recorded; give DATA on the command line".into());
    }
    Ok(PathBuf::from(OsStr::from_bytes(&sb.data_path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock(role: Role, data_path: &[u8]) -> Vec<u8> {
        Superblock {
            uuid: [3; 16],
            role,
            block_size: 4096,
            meta_blocks: 16 * 256,
            data_blocks: 1000,
            segment_blocks: 256,
            blocks_per_group: 32512,
            segments: 16,
            groups: 1,
            hash_seed: 1,
            created: 0,
            label: String::new(),
            copy_segments: Superblock::copy_locations(16),
            data_path: data_path.to_vec(),
        }
        .encode()
    }

    #[test]
    fn reads_the_recorded_path() {
        let sb = superblock(Role::Meta, b"/dev/vdb");
        assert_eq!(decode_data_path(&sb), Ok(PathBuf::from("/dev/vdb")));
        let odd = superblock(Role::Meta, b"data \xff.img");
        assert_eq!(
            decode_data_path(&odd).unwrap().as_os_str().as_bytes(),
            b"data \xff.img"
        );
    }

    #[test]
    fn rejects_what_is_not_a_metadata_superblock() {
        let zeros = vec![0u8; SB_SIZE];
        assert!(decode_data_path(&zeros)
            .unwrap_err()
            .contains("not a DualFS device"));
        assert!(decode_data_path(&zeros[..100]).is_err());
        let mut damaged = superblock(Role::Meta, b"/d");
        damaged[300] ^= 1;
        assert!(decode_data_path(&damaged).unwrap_err().contains("checksum"));
        let data = superblock(Role::Data, b"");
        assert!(decode_data_path(&data).unwrap_err().contains("data device"));
        let no_path = superblock(Role::Meta, b"");
        assert!(decode_data_path(&no_path)
            .unwrap_err()
            .contains("give DATA"));
    }

    #[test]
    fn reads_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let meta = dir.path().join("meta.img");
        std::fs::write(&meta, superblock(Role::Meta, b"data.img")).unwrap();
        assert_eq!(
            recorded_data_path(&meta).unwrap(),
            PathBuf::from("data.img")
        );
        std::fs::write(&meta, [0u8; 10]).unwrap();
        let e = recorded_data_path(&meta).unwrap_err().to_string();
        assert!(e.contains("too small"), "{e}");
    }
}
