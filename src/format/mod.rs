//! Pure encoding and decoding of every on-disk structure (docs/FORMAT.md). No I/O here.
//!
//! Decoders never panic on hostile bytes: every length and offset is checked and a bad
//! structure becomes `FsError::Corrupt`.

pub mod bmap;
pub mod checkpoint;
pub mod header;
pub mod inode;
pub mod kind;
pub mod meta;
pub mod node;
pub mod summary;
pub mod superblock;

pub use header::{BlockHeader, BlockKind, HEADER_SIZE};

/// On-disk format version written and accepted.
pub const FORMAT_VERSION: u32 = 2;
/// Size of an inode record.
pub const INODE_SIZE: usize = 256;
/// Smallest and largest block sizes.
pub const MIN_BLOCK_SIZE: u32 = 4096;
pub const MAX_BLOCK_SIZE: u32 = 65536;
/// Smallest segment, in blocks.
pub const MIN_SEGMENT_BLOCKS: u32 = 16;
/// Longest file name.
pub const NAME_MAX: usize = 255;
/// Longest symlink target.
pub const SYMLINK_MAX: usize = 4095;
/// Symlink targets up to this length live inside the inode.
pub const INLINE_SYMLINK_MAX: usize = 120;

/// Inode numbers with a fixed meaning.
pub const ROOT_INO: u64 = 1;
pub const LOST_FOUND_INO: u64 = 2;

/// Meta file ids (owners of `META` and `META_INDIRECT` blocks).
pub const IFILE_ID: u64 = 1;
pub const BITMAP_ID: u64 = 2;
pub const NODEMAP_ID: u64 = 3;

/// B-epsilon tree root node id.
pub const ROOT_NODE_ID: u64 = 1;

/// CRC-32 of `buf` with the 4 bytes at `crc_off` taken as zero.
pub fn crc_with_hole(buf: &[u8], crc_off: usize) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[..crc_off]);
    h.update(&[0u8; 4]);
    h.update(&buf[crc_off + 4..]);
    h.finalize()
}

/// Store the CRC of `buf` (hole at `crc_off`) at `crc_off`.
pub fn seal_crc(buf: &mut [u8], crc_off: usize) {
    let c = crc_with_hole(buf, crc_off);
    put_u32(buf, crc_off, c);
}

/// Does the CRC stored at `crc_off` match?
pub fn check_crc(buf: &[u8], crc_off: usize) -> bool {
    get_u32(buf, crc_off) == crc_with_hole(buf, crc_off)
}

// Fixed-offset little-endian accessors. Callers guarantee the offset is in bounds (fixed
// layouts inside buffers whose size was checked first).
pub fn get_u8(b: &[u8], off: usize) -> u8 {
    b[off]
}
pub fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(b[off..off + 2].try_into().unwrap())
}
pub fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}
pub fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}
pub fn get_i64(b: &[u8], off: usize) -> i64 {
    i64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}
pub fn put_u8(b: &mut [u8], off: usize, v: u8) {
    b[off] = v;
}
pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
pub fn put_i64(b: &mut [u8], off: usize, v: i64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// A bounds-checked cursor for variable-length structures (nodes, summaries).
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], pos: usize, what: &'static str) -> Self {
        Reader { buf, pos, what }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn bytes(&mut self, n: usize) -> crate::Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(crate::FsError::corrupt(
                self.what,
                format!(
                    "runs past its end ({} + {} > {})",
                    self.pos,
                    n,
                    self.buf.len()
                ),
            )),
        }
    }
    pub fn u8(&mut self) -> crate::Result<u8> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> crate::Result<u16> {
        Ok(get_u16(self.bytes(2)?, 0))
    }
    pub fn u32(&mut self) -> crate::Result<u32> {
        Ok(get_u32(self.bytes(4)?, 0))
    }
    pub fn u64(&mut self) -> crate::Result<u64> {
        Ok(get_u64(self.bytes(8)?, 0))
    }
}

/// An appending writer into a fixed buffer; running out of room is a bug of the caller,
/// who must size structures before encoding them.
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub fn new(buf: &'a mut [u8], pos: usize) -> Self {
        Writer { buf, pos }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn bytes(&mut self, s: &[u8]) {
        assert!(
            self.pos + s.len() <= self.buf.len(),
            "encoder overflow: structure sized wrongly"
        );
        self.buf[self.pos..self.pos + s.len()].copy_from_slice(s);
        self.pos += s.len();
    }
    pub fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}
