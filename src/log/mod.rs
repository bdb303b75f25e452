//! The metadata log: the segment writer, checkpoints and roll-forward.

pub mod checkpoint;
pub mod recovery;
pub mod writer;

pub use writer::{part_addrs, LogHead, LogWriter, PartPlan, TxnBlock};

use crate::device::BlockDevice;
use crate::Result;

/// Byte offset of block `addr`: a pointer from a damaged structure can be any number, and
/// one whose offset does not even fit in 64 bits is corruption, not an overflow.
fn offset(block_size: u32, addr: u64) -> Result<u64> {
    addr.checked_mul(block_size as u64).ok_or_else(|| {
        crate::FsError::corrupt("log address", format!("block {addr} is past any device"))
    })
}

/// Read one log block.
pub fn read_block(dev: &dyn BlockDevice, block_size: u32, addr: u64) -> Result<Vec<u8>> {
    let mut b = vec![0u8; block_size as usize];
    dev.read_at(&mut b, offset(block_size, addr)?)?;
    Ok(b)
}

/// Read `n` consecutive log blocks.
pub fn read_blocks(dev: &dyn BlockDevice, block_size: u32, addr: u64, n: u64) -> Result<Vec<u8>> {
    let len = offset(block_size, n)?;
    let mut b = vec![0u8; len as usize];
    dev.read_at(&mut b, offset(block_size, addr)?)?;
    Ok(b)
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
