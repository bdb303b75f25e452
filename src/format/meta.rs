//! Blocks made of fixed-size entries: indirect blocks, symlink blocks and the meta files
//! (IFile header, segment usage, inode map, group descriptors, bitmaps, node map).

use super::*;
use crate::{FsError, Result};

/// Pointers in an `INDIRECT` / `META_INDIRECT` block (508 with 4 KiB blocks).
pub fn pointers_per_block(block_size: u32) -> usize {
    (block_size as usize - HEADER_SIZE) / 8
}

/// 16-byte entries per `META` block (254 with 4 KiB blocks).
pub fn entries16_per_block(block_size: u32) -> usize {
    (block_size as usize - HEADER_SIZE) / 16
}

/// 32-byte entries per `META` block (127 with 4 KiB blocks).
pub fn entries32_per_block(block_size: u32) -> usize {
    (block_size as usize - HEADER_SIZE) / 32
}

/// Symlink target bytes per `SYMLINK` block.
pub fn symlink_bytes_per_block(block_size: u32) -> usize {
    block_size as usize - HEADER_SIZE
}

/// Encode a block of pointers (indirect or meta-indirect).
pub fn encode_pointer_block(h: BlockHeader, ptrs: &[u64], block_size: u32) -> Vec<u8> {
    assert!(matches!(
        h.kind,
        BlockKind::Indirect | BlockKind::MetaIndirect
    ));
    assert!((1..=3).contains(&h.level));
    assert_eq!(ptrs.len(), pointers_per_block(block_size));
    let mut b = vec![0u8; block_size as usize];
    h.write(&mut b);
    for (i, p) in ptrs.iter().enumerate() {
        put_u64(&mut b, HEADER_SIZE + 8 * i, *p);
    }
    BlockHeader::seal(&mut b);
    b
}

/// Decode a pointer block after checking it is the one expected.
pub fn decode_pointer_block(b: &[u8], want: BlockHeader) -> Result<Vec<u64>> {
    BlockHeader::expect(b, want)?;
    Ok((0..pointers_per_block(b.len() as u32))
        .map(|i| get_u64(b, HEADER_SIZE + 8 * i))
        .collect())
}

pub fn encode_symlink_block(ino: u64, index: u64, part: &[u8], block_size: u32) -> Vec<u8> {
    assert!(part.len() <= symlink_bytes_per_block(block_size));
    let mut b = vec![0u8; block_size as usize];
    BlockHeader::new(BlockKind::Symlink, 0, ino, index).write(&mut b);
    b[HEADER_SIZE..HEADER_SIZE + part.len()].copy_from_slice(part);
    BlockHeader::seal(&mut b);
    b
}

/// The body of a checked `SYMLINK` block.
pub fn decode_symlink_block(b: &[u8], ino: u64, index: u64) -> Result<&[u8]> {
    BlockHeader::expect(b, BlockHeader::new(BlockKind::Symlink, 0, ino, index))?;
    Ok(&b[HEADER_SIZE..])
}

/// Wrap a meta-file body (block size minus header) into a `META` block.
pub fn encode_meta_block(file: u64, index: u64, body: &[u8], block_size: u32) -> Vec<u8> {
    assert_eq!(body.len(), block_size as usize - HEADER_SIZE);
    let mut b = vec![0u8; block_size as usize];
    BlockHeader::new(BlockKind::Meta, 0, file, index).write(&mut b);
    b[HEADER_SIZE..].copy_from_slice(body);
    BlockHeader::seal(&mut b);
    b
}

/// The body of a checked `META` block.
pub fn decode_meta_block(b: &[u8], file: u64, index: u64) -> Result<&[u8]> {
    BlockHeader::expect(b, BlockHeader::new(BlockKind::Meta, 0, file, index))?;
    Ok(&b[HEADER_SIZE..])
}

// ---- IFile header -------------------------------------------------------------------------

/// IFile block 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IfileHeader {
    pub segments: u64,
    pub imap_entries: u64,
    pub free_head: u64,
    pub free_count: u64,
    pub clean_segments: u64,
    pub live_inodes: u64,
}

/// Byte offsets of the IFile header's fields in the block body (docs/FORMAT.md gives them
/// from the block's start, `HEADER_SIZE` more: `if_free_head` at 48 is `if_at::FREE_HEAD`).
mod if_at {
    pub const SEGMENTS: usize = 0;
    pub const IMAP_ENTRIES: usize = 8;
    pub const FREE_HEAD: usize = 16;
    pub const FREE_COUNT: usize = 24;
    pub const CLEAN_SEGMENTS: usize = 32;
    pub const LIVE_INODES: usize = 40;
}
const _: () = assert!(if_at::LIVE_INODES + 8 <= MIN_BLOCK_SIZE as usize - HEADER_SIZE);

impl IfileHeader {
    pub fn encode(&self, body: &mut [u8]) {
        body.fill(0);
        put_u64(body, if_at::SEGMENTS, self.segments);
        put_u64(body, if_at::IMAP_ENTRIES, self.imap_entries);
        put_u64(body, if_at::FREE_HEAD, self.free_head);
        put_u64(body, if_at::FREE_COUNT, self.free_count);
        put_u64(body, if_at::CLEAN_SEGMENTS, self.clean_segments);
        put_u64(body, if_at::LIVE_INODES, self.live_inodes);
    }
    pub fn decode(body: &[u8]) -> IfileHeader {
        IfileHeader {
            segments: get_u64(body, if_at::SEGMENTS),
            imap_entries: get_u64(body, if_at::IMAP_ENTRIES),
            free_head: get_u64(body, if_at::FREE_HEAD),
            free_count: get_u64(body, if_at::FREE_COUNT),
            clean_segments: get_u64(body, if_at::CLEAN_SEGMENTS),
            live_inodes: get_u64(body, if_at::LIVE_INODES),
        }
    }
}

// ---- Segment usage ------------------------------------------------------------------------

pub const SEG_DIRTY: u32 = 1;
pub const SEG_ACTIVE: u32 = 2;
pub const SEG_SUPERBLOCK: u32 = 4;
pub const SEG_RESERVED: u32 = 8;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegUsage {
    pub live_bytes: u32,
    pub flags: u32,
    pub last_mod: u64,
}

/// Byte offsets of a segment usage entry's fields (`su_last_mod` is `su_at::LAST_MOD`).
mod su_at {
    pub const LIVE_BYTES: usize = 0;
    pub const FLAGS: usize = 4;
    pub const LAST_MOD: usize = 8;
}
const _: () = assert!(su_at::LAST_MOD + 8 == SegUsage::SIZE);

impl SegUsage {
    /// Bytes of one entry: `entries16_per_block` fit a block.
    pub const SIZE: usize = 16;

    pub fn encode(&self, e: &mut [u8]) {
        put_u32(e, su_at::LIVE_BYTES, self.live_bytes);
        put_u32(e, su_at::FLAGS, self.flags);
        put_u64(e, su_at::LAST_MOD, self.last_mod);
    }
    pub fn decode(e: &[u8]) -> SegUsage {
        SegUsage {
            live_bytes: get_u32(e, su_at::LIVE_BYTES),
            flags: get_u32(e, su_at::FLAGS),
            last_mod: get_u64(e, su_at::LAST_MOD),
        }
    }
    pub fn is_clean(&self) -> bool {
        self.flags & (SEG_DIRTY | SEG_ACTIVE | SEG_RESERVED) == 0
    }
}

// ---- Inode map ----------------------------------------------------------------------------

pub const IMAP_ALLOCATED: u16 = 1;
pub const IMAP_ORPHAN: u16 = 2;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImapEntry {
    /// Allocated: log block of the inode. Free: next free inode number (0 = end).
    pub addr: u64,
    pub generation: u32,
    pub slot: u16,
    pub flags: u16,
}

/// Byte offsets of an inode map entry's fields (`im_slot` is `im_at::SLOT`).
mod im_at {
    pub const ADDR: usize = 0;
    pub const GENERATION: usize = 8;
    pub const SLOT: usize = 12;
    pub const FLAGS: usize = 14;
}
const _: () = assert!(im_at::FLAGS + 2 == ImapEntry::SIZE);

impl ImapEntry {
    /// Bytes of one entry: `entries16_per_block` fit a block.
    pub const SIZE: usize = 16;

    pub fn encode(&self, e: &mut [u8]) {
        put_u64(e, im_at::ADDR, self.addr);
        put_u32(e, im_at::GENERATION, self.generation);
        put_u16(e, im_at::SLOT, self.slot);
        put_u16(e, im_at::FLAGS, self.flags);
    }
    pub fn decode(e: &[u8]) -> ImapEntry {
        ImapEntry {
            addr: get_u64(e, im_at::ADDR),
            generation: get_u32(e, im_at::GENERATION),
            slot: get_u16(e, im_at::SLOT),
            flags: get_u16(e, im_at::FLAGS),
        }
    }
    pub fn allocated(&self) -> bool {
        self.flags & IMAP_ALLOCATED != 0
    }
}

// ---- Group descriptors --------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupDesc {
    pub free_blocks: u32,
    pub dirs: u32,
    pub flags: u32,
}

/// Byte offsets of a group descriptor's fields (`gd_dirs` is `gd_at::DIRS`); 20 reserved
/// bytes follow them.
mod gd_at {
    pub const FREE_BLOCKS: usize = 0;
    pub const DIRS: usize = 4;
    pub const FLAGS: usize = 8;
}
const _: () = assert!(gd_at::FLAGS + 4 <= GroupDesc::SIZE);

impl GroupDesc {
    /// Bytes of one descriptor: `entries32_per_block` fit a block.
    pub const SIZE: usize = 32;

    pub fn encode(&self, e: &mut [u8]) {
        e[..Self::SIZE].fill(0);
        put_u32(e, gd_at::FREE_BLOCKS, self.free_blocks);
        put_u32(e, gd_at::DIRS, self.dirs);
        put_u32(e, gd_at::FLAGS, self.flags);
    }
    pub fn decode(e: &[u8]) -> GroupDesc {
        GroupDesc {
            free_blocks: get_u32(e, gd_at::FREE_BLOCKS),
            dirs: get_u32(e, gd_at::DIRS),
            flags: get_u32(e, gd_at::FLAGS),
        }
    }
}

/// Check a meta block body's claimed count against what fits; used by table loaders.
pub fn check_count(what: &'static str, n: u64, max: u64) -> Result<()> {
    if n > max {
        return Err(FsError::corrupt(
            what,
            format!("{n} exceeds the limit {max}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes this encoder writes are the format's: pinned, so that no change to the code
    /// (naming an offset, say) moves a field unnoticed.
    #[test]
    fn encoding_is_pinned() {
        let mut body = vec![0xffu8; 4096 - HEADER_SIZE];
        IfileHeader {
            segments: 1000,
            imap_entries: 2 * 254,
            free_head: 33,
            free_count: 7,
            clean_segments: 900,
            live_inodes: 12345,
        }
        .encode(&mut body);
        SegUsage {
            live_bytes: 0x0102_0304,
            flags: SEG_DIRTY | SEG_SUPERBLOCK,
            last_mod: 1_700_000_000,
        }
        .encode(&mut body[64..80]);
        ImapEntry {
            addr: 1 << 40 | 5,
            generation: 0x0a0b_0c0d,
            slot: 3,
            flags: IMAP_ALLOCATED | IMAP_ORPHAN,
        }
        .encode(&mut body[80..96]);
        GroupDesc {
            free_blocks: 32000,
            dirs: 17,
            flags: 0,
        }
        .encode(&mut body[96..128]);
        let meta = encode_meta_block(IFILE_ID, 0, &body, 4096);
        let ptrs: Vec<u64> = (0..508u64).map(|i| i * 1_000_003).collect();
        let h = BlockHeader::new(BlockKind::Indirect, 2, 5, 520);
        let crcs = [
            crc32fast::hash(&meta),
            crc32fast::hash(&encode_pointer_block(h, &ptrs, 4096)),
            crc32fast::hash(&encode_symlink_block(9, 1, b"/a/b/c", 4096)),
        ];
        assert_eq!(crcs, [0x0996c2dc, 0x95a8b10a, 0x9ad7dd0c]);
    }

    #[test]
    fn pointer_block_round_trip() {
        let n = pointers_per_block(4096);
        assert_eq!(n, 508);
        let ptrs: Vec<u64> = (0..n as u64).map(|i| i * 3).collect();
        let h = BlockHeader::new(BlockKind::Indirect, 2, 5, 520);
        let b = encode_pointer_block(h, &ptrs, 4096);
        assert_eq!(decode_pointer_block(&b, h).unwrap(), ptrs);
        assert!(
            decode_pointer_block(&b, BlockHeader::new(BlockKind::Indirect, 2, 6, 520)).is_err()
        );
    }

    #[test]
    fn entries_round_trip() {
        let mut e = [0u8; 32];
        let u = SegUsage {
            live_bytes: 77,
            flags: SEG_DIRTY,
            last_mod: 5,
        };
        u.encode(&mut e);
        assert_eq!(SegUsage::decode(&e), u);
        let m = ImapEntry {
            addr: 1 << 40,
            generation: 9,
            slot: 3,
            flags: IMAP_ALLOCATED,
        };
        m.encode(&mut e);
        assert_eq!(ImapEntry::decode(&e), m);
        let g = GroupDesc {
            free_blocks: 10,
            dirs: 2,
            flags: 0,
        };
        g.encode(&mut e);
        assert_eq!(GroupDesc::decode(&e), g);
        let body = vec![1u8; 4096 - 32];
        let b = encode_meta_block(IFILE_ID, 7, &body, 4096);
        assert_eq!(decode_meta_block(&b, IFILE_ID, 7).unwrap(), &body[..]);
        assert!(decode_meta_block(&b, BITMAP_ID, 7).is_err());
    }
}
