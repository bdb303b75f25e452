//! Making a fresh DualFS on a pair of devices: superblocks, empty tables, the root directory
//! and /lost+found, and a first (clean) checkpoint. The root and lost+found are made by the
//! same code that makes every other directory, and written by the ordinary log writer.

use crate::device::BlockDevice;
use crate::format::checkpoint::{CP_REGION_A, CP_REGION_B};
use crate::format::inode::DiskInode;
use crate::format::superblock::{Role, Superblock, LABEL_LEN, MAX_DATA_PATH, SB_SIZE};
use crate::format::{HEADER_SIZE, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, MIN_SEGMENT_BLOCKS, ROOT_INO};
use crate::fs::{Caller, Fs, Timespec};
use crate::{FsError, Result};
use std::sync::Arc;

/// Fewest log segments mkfs accepts: the reserved segment, the head and its successor, and
/// room for checkpoints and for the cleaner to work.
pub const MIN_SEGMENTS: u64 = 16;
/// Fewest data blocks mkfs accepts.
pub const MIN_DATA_BLOCKS: u64 = 64;

#[derive(Clone, Debug)]
pub struct MkfsParams {
    pub block_size: u32,
    pub segment_blocks: u32,
    pub blocks_per_group: u32,
    pub label: String,
    pub data_path: String,
    /// The seed of the directory-name hash; None draws one at random, as every mkfs does.
    /// Fixed, the same operations give the same tree shape and log layout (tests that
    /// must not depend on the luck of a draw).
    pub hash_seed: Option<u64>,
}

impl Default for MkfsParams {
    fn default() -> Self {
        MkfsParams {
            block_size: 4096,
            segment_blocks: 256,
            blocks_per_group: 8 * (4096 - HEADER_SIZE as u32),
            label: String::new(),
            data_path: String::new(),
            hash_seed: None,
        }
    }
}

pub struct MkfsReport {
    pub uuid: uuid::Uuid,
    pub meta_blocks: u64,
    pub data_blocks: u64,
    pub segments: u64,
    pub groups: u64,
    pub block_size: u32,
}

/// Smallest device sizes (bytes) the params allow, checked before anything is written.
pub fn minimum_sizes(p: &MkfsParams) -> (u64, u64) {
    let b = u64::from(p.block_size);
    (
        MIN_SEGMENTS * u64::from(p.segment_blocks) * b,
        MIN_DATA_BLOCKS * b,
    )
}

/// Validate params against the device sizes; Err(message) if unusable. Writes nothing.
pub fn validate(p: &MkfsParams, meta_size: u64, data_size: u64) -> std::result::Result<(), String> {
    let b = p.block_size;
    if !b.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&b) {
        return Err(format!(
            "block size {b} is not a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}"
        ));
    }
    if p.segment_blocks < MIN_SEGMENT_BLOCKS || p.segment_blocks > u16::MAX as u32 {
        return Err(format!(
            "a segment of {} blocks is out of range ({MIN_SEGMENT_BLOCKS} to 65535 blocks)",
            p.segment_blocks
        ));
    }
    let max_bpg = 8 * (b - HEADER_SIZE as u32);
    if p.blocks_per_group == 0 || p.blocks_per_group > max_bpg {
        return Err(format!(
            "{} blocks per group is out of range 1..={max_bpg}",
            p.blocks_per_group
        ));
    }
    if p.label.len() > LABEL_LEN {
        return Err(format!("label longer than {LABEL_LEN} bytes"));
    }
    if p.data_path.len() > MAX_DATA_PATH {
        return Err(format!(
            "data device path longer than {MAX_DATA_PATH} bytes"
        ));
    }
    let (min_meta, min_data) = minimum_sizes(p);
    if meta_size < min_meta {
        return Err(format!("metadata device too small: {meta_size} bytes, at least {min_meta} needed ({MIN_SEGMENTS} segments)"));
    }
    if data_size < min_data {
        return Err(format!(
            "data device too small: {data_size} bytes, at least {min_data} needed"
        ));
    }
    if meta_size / u64::from(b) >= 1 << 48 || data_size / u64::from(b) >= 1 << 48 {
        return Err("device larger than 2^48 blocks".into());
    }
    Ok(())
}

/// Write a fresh file system: superblocks, empty tables, root and lost+found, first checkpoint.
pub fn mkfs(
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    p: &MkfsParams,
) -> Result<MkfsReport> {
    validate(p, meta.size(), data.size()).map_err(FsError::Refused)?;
    let bs = p.block_size as u64;
    let uuid = uuid::Uuid::new_v4();
    let seed = uuid::Uuid::new_v4();
    let meta_blocks = meta.size() / bs;
    let data_blocks = data.size() / bs;
    let segments = meta_blocks / p.segment_blocks as u64;
    let sb = Superblock {
        uuid: *uuid.as_bytes(),
        role: Role::Meta,
        block_size: p.block_size,
        meta_blocks,
        data_blocks,
        segment_blocks: p.segment_blocks,
        blocks_per_group: p.blocks_per_group,
        segments,
        groups: data_blocks.div_ceil(p.blocks_per_group as u64),
        hash_seed: p
            .hash_seed
            .unwrap_or_else(|| u64::from_le_bytes(seed.as_bytes()[..8].try_into().unwrap())),
        created: Timespec::now().sec as u64,
        label: p.label.clone(),
        copy_segments: Superblock::copy_locations(segments),
        data_path: p.data_path.as_bytes().to_vec(),
    };
    let block = |bytes: Vec<u8>| {
        let mut b = bytes;
        b.resize(bs as usize, 0);
        b
    };
    // Data device: its superblock. Metadata device: superblock, its copies, empty checkpoints.
    let dsb = Superblock {
        role: Role::Data,
        data_path: Vec::new(),
        ..sb.clone()
    };
    data.write_at(&block(dsb.encode()), 0)?;
    meta.write_at(&block(sb.encode()), 0)?;
    for &s in &sb.copy_segments {
        meta.write_at(&block(sb.encode()), s * sb.segment_blocks as u64 * bs)?;
    }
    for region in [CP_REGION_A, CP_REGION_B] {
        meta.write_at(&vec![0u8; bs as usize], region * bs)?;
    }
    debug_assert!(SB_SIZE as u64 <= bs);
    data.flush()?;
    meta.flush()?;

    let sb = Arc::new(sb);
    let fs = Fs::create_fresh(sb.clone(), meta, data)?;
    let now = crate::fs::inode::to_disk_time(Timespec::now());
    fs.make_root(DiskInode {
        ino: ROOT_INO,
        generation: 1,
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        parent: ROOT_INO,
        ..Default::default()
    });
    let lf = fs.mkdir(&Caller::ROOT, ROOT_INO, b"lost+found", 0o700)?;
    debug_assert_eq!(lf.ino, crate::format::LOST_FOUND_INO);
    fs.unmount()?;
    Ok(MkfsReport {
        uuid,
        meta_blocks,
        data_blocks,
        segments,
        groups: sb.groups,
        block_size: p.block_size,
    })
}
