//! The metadata log: the segment writer, checkpoints and roll-forward.

pub mod checkpoint;
pub mod recovery;
pub mod writer;

pub use writer::{LogHead, LogWriter, TxnBlock};

use crate::device::BlockDevice;
use crate::Result;

/// Read one log block.
pub fn read_block(dev: &dyn BlockDevice, block_size: u32, addr: u64) -> Result<Vec<u8>> {
    let mut b = vec![0u8; block_size as usize];
    dev.read_at(&mut b, addr * block_size as u64)?;
    Ok(b)
}

/// Read `n` consecutive log blocks.
pub fn read_blocks(dev: &dyn BlockDevice, block_size: u32, addr: u64, n: u64) -> Result<Vec<u8>> {
    let mut b = vec![0u8; (n * block_size as u64) as usize];
    dev.read_at(&mut b, addr * block_size as u64)?;
    Ok(b)
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
