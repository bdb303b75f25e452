//! Making a fresh DualFS on a pair of devices.
//!
//! STUB: the core engineer replaces these bodies when merging; the signatures are the
//! contract the `mkfs-dualfs` command is written against and must stay as they are.

use crate::device::BlockDevice;
use crate::format::{MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, MIN_SEGMENT_BLOCKS};

pub struct MkfsParams {
    pub block_size: u32,
    pub segment_blocks: u32,
    pub blocks_per_group: u32,
    pub label: String,
    pub data_path: String,
}

impl Default for MkfsParams {
    fn default() -> Self {
        MkfsParams {
            block_size: 4096,
            segment_blocks: 256,
            blocks_per_group: 8 * (4096 - 32),
            label: String::new(),
            data_path: String::new(),
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
pub fn minimum_sizes(p: &MkfsParams) -> (u64 /*meta*/, u64 /*data*/) {
    // Placeholder numbers until the core's layout decides them: a few segments, a few blocks.
    let block = u64::from(p.block_size);
    (8 * u64::from(p.segment_blocks) * block, 16 * block)
}

/// Validate params against the device sizes; Err(message) if unusable. Writes nothing.
pub fn validate(p: &MkfsParams, meta_size: u64, data_size: u64) -> Result<(), String> {
    let b = p.block_size;
    if !b.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&b) {
        return Err(format!(
            "block size {b} is not a power of two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}"
        ));
    }
    if p.segment_blocks < MIN_SEGMENT_BLOCKS {
        return Err(format!(
            "a segment of {} blocks is too small (at least {MIN_SEGMENT_BLOCKS})",
            p.segment_blocks
        ));
    }
    if p.blocks_per_group == 0 || p.blocks_per_group > 8 * (b - 32) {
        return Err(format!(
            "{} blocks per group is out of range 1..={}",
            p.blocks_per_group,
            8 * (b - 32)
        ));
    }
    let (min_meta, min_data) = minimum_sizes(p);
    if meta_size < min_meta || data_size < min_data {
        return Err(format!(
            "devices too small: need at least {min_meta} bytes (metadata) and {min_data} bytes \
             (data)"
        ));
    }
    Ok(())
}

/// Write a fresh file system: superblocks, empty tables, root and lost+found, first checkpoint.
pub fn mkfs(
    meta: &dyn BlockDevice,
    data: &dyn BlockDevice,
    p: &MkfsParams,
) -> crate::Result<MkfsReport> {
    let _ = (meta, data, p);
    Err(crate::FsError::Io(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "mkfs is not yet implemented",
    )))
}
