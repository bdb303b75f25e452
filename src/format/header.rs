//! The 32-byte header every log block (except summaries) starts with.

use super::*;
use crate::{FsError, Result};

pub const HEADER_SIZE: usize = 32;
pub const BLOCK_MAGIC: u32 = 0x4B4C_4644;

/// Byte offsets of the header's fields, named as in docs/FORMAT.md "Log blocks: the common
/// header" (`bh_kind` is `at::KIND`).
mod at {
    pub const MAGIC: usize = 0;
    pub const KIND: usize = 4;
    pub const LEVEL: usize = 5;
    pub const VERSION: usize = 6;
    pub const CRC: usize = 8;
    pub const RESERVED: usize = 12;
    pub const OWNER: usize = 16;
    pub const INDEX: usize = 24;
}
const _: () = assert!(at::INDEX + 8 == HEADER_SIZE);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum BlockKind {
    Inodes = 1,
    Indirect = 2,
    Symlink = 3,
    Node = 4,
    Meta = 5,
    MetaIndirect = 6,
    /// Part of an extended attribute's value too large to sit in the tree (format 2).
    Value = 7,
}

impl BlockKind {
    pub fn from_u8(v: u8) -> Option<BlockKind> {
        Some(match v {
            1 => BlockKind::Inodes,
            2 => BlockKind::Indirect,
            3 => BlockKind::Symlink,
            4 => BlockKind::Node,
            5 => BlockKind::Meta,
            6 => BlockKind::MetaIndirect,
            7 => BlockKind::Value,
            _ => return None,
        })
    }
}

/// What a log block says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockHeader {
    pub kind: BlockKind,
    pub level: u8,
    pub owner: u64,
    pub index: u64,
}

impl BlockHeader {
    pub fn new(kind: BlockKind, level: u8, owner: u64, index: u64) -> Self {
        BlockHeader {
            kind,
            level,
            owner,
            index,
        }
    }

    /// Write the header into `block` (the CRC is filled by `seal`).
    pub fn write(&self, block: &mut [u8]) {
        put_u32(block, at::MAGIC, BLOCK_MAGIC);
        put_u8(block, at::KIND, self.kind as u8);
        put_u8(block, at::LEVEL, self.level);
        put_u16(block, at::VERSION, FORMAT_VERSION as u16);
        put_u32(block, at::CRC, 0);
        put_u32(block, at::RESERVED, 0);
        put_u64(block, at::OWNER, self.owner);
        put_u64(block, at::INDEX, self.index);
    }

    /// Compute and store the block CRC; call after the body is complete.
    pub fn seal(block: &mut [u8]) {
        seal_crc(block, at::CRC);
    }

    /// Decode and verify a block's header and CRC.
    pub fn read(block: &[u8]) -> Result<BlockHeader> {
        if block.len() < MIN_BLOCK_SIZE as usize {
            return Err(FsError::corrupt(
                "log block",
                format!("short block of {} bytes", block.len()),
            ));
        }
        if get_u32(block, at::MAGIC) != BLOCK_MAGIC {
            return Err(FsError::corrupt(
                "log block",
                format!("bad magic {:#x}", get_u32(block, at::MAGIC)),
            ));
        }
        if get_u16(block, at::VERSION) as u32 != FORMAT_VERSION {
            return Err(FsError::corrupt(
                "log block",
                format!("version {}", get_u16(block, at::VERSION)),
            ));
        }
        if !check_crc(block, at::CRC) {
            return Err(FsError::corrupt("log block", "CRC mismatch"));
        }
        let kind = BlockKind::from_u8(get_u8(block, at::KIND)).ok_or_else(|| {
            FsError::corrupt(
                "log block",
                format!("unknown kind {}", get_u8(block, at::KIND)),
            )
        })?;
        Ok(BlockHeader {
            kind,
            level: get_u8(block, at::LEVEL),
            owner: get_u64(block, at::OWNER),
            index: get_u64(block, at::INDEX),
        })
    }

    /// Decode, verify, and insist the block is the one the caller followed a pointer to.
    pub fn expect(block: &[u8], want: BlockHeader) -> Result<()> {
        let got = BlockHeader::read(block)?;
        if got != want {
            return Err(FsError::corrupt(
                "log block",
                format!("expected {want:?}, found {got:?}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes this encoder writes are the format's: pinned, so that no change to the code
    /// (naming an offset, say) moves a field unnoticed.
    #[test]
    fn encoding_is_pinned() {
        let mut b = vec![0u8; 4096];
        BlockHeader::new(BlockKind::Indirect, 2, 77, 520).write(&mut b);
        BlockHeader::seal(&mut b);
        assert_eq!(crc32fast::hash(&b), 0x904fded7);
    }

    #[test]
    fn header_round_trip_and_crc() {
        let mut b = vec![0u8; 4096];
        let h = BlockHeader::new(BlockKind::Indirect, 2, 77, 520);
        h.write(&mut b);
        b[100] = 9;
        BlockHeader::seal(&mut b);
        assert_eq!(BlockHeader::read(&b).unwrap(), h);
        BlockHeader::expect(&b, h).unwrap();
        assert!(
            BlockHeader::expect(&b, BlockHeader::new(BlockKind::Indirect, 1, 77, 520)).is_err()
        );
        b[101] = 1;
        assert!(BlockHeader::read(&b).is_err());
    }
}
