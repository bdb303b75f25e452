//! Superblock of either device (docs/FORMAT.md "Superblock").

use super::*;
use crate::{FsError, Result};

pub const SB_MAGIC: &[u8; 8] = b"DUALFSSB";
/// The superblock is the first 4096 bytes of its block.
pub const SB_SIZE: usize = 4096;
pub const MAX_SB_COPIES: usize = 8;
pub const MAX_DATA_PATH: usize = 1024;
pub const LABEL_LEN: usize = 32;

/// Byte offsets of the superblock's fields, named as in docs/FORMAT.md "Superblock"
/// (`sb_role` is `at::ROLE`): the encoder, the decoder and the device probe read them here.
pub mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const CRC: usize = 12;
    pub const UUID: usize = 16;
    pub const ROLE: usize = 32;
    pub const BLOCK_SIZE: usize = 36;
    pub const META_BLOCKS: usize = 40;
    pub const DATA_BLOCKS: usize = 48;
    pub const SEGMENT_BLOCKS: usize = 56;
    pub const BLOCKS_PER_GROUP: usize = 60;
    pub const SEGMENTS: usize = 64;
    pub const GROUPS: usize = 72;
    pub const HASH_SEED: usize = 80;
    pub const CREATED: usize = 88;
    pub const INODE_SIZE: usize = 96;
    pub const FEATURES: usize = 100;
    pub const LABEL: usize = 104;
    pub const COPIES: usize = 136;
    /// `MAX_SB_COPIES` u64s.
    pub const COPY_SEGMENTS: usize = 144;
    pub const DATA_PATH_LEN: usize = 208;
    /// Up to `MAX_DATA_PATH` bytes.
    pub const DATA_PATH: usize = 210;
}
// The fields follow each other without overlap and end inside the superblock.
const _: () = assert!(
    at::LABEL + LABEL_LEN <= at::COPIES
        && at::COPY_SEGMENTS + 8 * MAX_SB_COPIES <= at::DATA_PATH_LEN
        && at::DATA_PATH + MAX_DATA_PATH <= SB_SIZE
);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Meta = 1,
    Data = 2,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub uuid: [u8; 16],
    pub role: Role,
    pub block_size: u32,
    pub meta_blocks: u64,
    pub data_blocks: u64,
    pub segment_blocks: u32,
    pub blocks_per_group: u32,
    pub segments: u64,
    pub groups: u64,
    pub hash_seed: u64,
    pub created: u64,
    pub label: String,
    pub copy_segments: Vec<u64>,
    pub data_path: Vec<u8>,
}

impl Superblock {
    pub fn uuid_tag(&self) -> u64 {
        uuid_tag(&self.uuid)
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(self.copy_segments.len() <= MAX_SB_COPIES);
        assert!(self.data_path.len() <= MAX_DATA_PATH);
        assert!(self.label.len() <= LABEL_LEN);
        let mut b = vec![0u8; SB_SIZE];
        b[at::MAGIC..at::MAGIC + SB_MAGIC.len()].copy_from_slice(SB_MAGIC);
        put_u32(&mut b, at::VERSION, FORMAT_VERSION);
        b[at::UUID..at::UUID + 16].copy_from_slice(&self.uuid);
        put_u32(&mut b, at::ROLE, self.role as u32);
        put_u32(&mut b, at::BLOCK_SIZE, self.block_size);
        put_u64(&mut b, at::META_BLOCKS, self.meta_blocks);
        put_u64(&mut b, at::DATA_BLOCKS, self.data_blocks);
        put_u32(&mut b, at::SEGMENT_BLOCKS, self.segment_blocks);
        put_u32(&mut b, at::BLOCKS_PER_GROUP, self.blocks_per_group);
        put_u64(&mut b, at::SEGMENTS, self.segments);
        put_u64(&mut b, at::GROUPS, self.groups);
        put_u64(&mut b, at::HASH_SEED, self.hash_seed);
        put_u64(&mut b, at::CREATED, self.created);
        put_u32(&mut b, at::INODE_SIZE, INODE_SIZE as u32);
        put_u32(&mut b, at::FEATURES, 0);
        b[at::LABEL..at::LABEL + self.label.len()].copy_from_slice(self.label.as_bytes());
        put_u32(&mut b, at::COPIES, self.copy_segments.len() as u32);
        for (i, s) in self.copy_segments.iter().enumerate() {
            put_u64(&mut b, at::COPY_SEGMENTS + 8 * i, *s);
        }
        put_u16(&mut b, at::DATA_PATH_LEN, self.data_path.len() as u16);
        b[at::DATA_PATH..at::DATA_PATH + self.data_path.len()].copy_from_slice(&self.data_path);
        seal_crc(&mut b, at::CRC);
        b
    }

    /// Decode and validate everything that can be checked without the other device.
    /// A superblock of another format version is refused (`version_refusal`).
    pub fn decode(buf: &[u8]) -> Result<Superblock> {
        let bad = |d: String| FsError::corrupt("superblock", d);
        if buf.len() < SB_SIZE {
            return Err(bad(format!("short read of {} bytes", buf.len())));
        }
        let b = &buf[..SB_SIZE];
        if &b[at::MAGIC..at::MAGIC + SB_MAGIC.len()] != SB_MAGIC {
            return Err(bad("not a DualFS device (no DualFS superblock)".into()));
        }
        let version = get_u32(b, at::VERSION);
        if version != FORMAT_VERSION {
            return Err(bad(version_refusal(version)));
        }
        if !check_crc(b, at::CRC) {
            return Err(bad("damaged DualFS superblock (checksum mismatch)".into()));
        }
        let role = match get_u32(b, at::ROLE) {
            1 => Role::Meta,
            2 => Role::Data,
            r => return Err(bad(format!("unknown device role {r}"))),
        };
        let block_size = get_u32(b, at::BLOCK_SIZE);
        if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size)
        {
            return Err(bad(format!("block size {block_size}")));
        }
        let segment_blocks = get_u32(b, at::SEGMENT_BLOCKS);
        let blocks_per_group = get_u32(b, at::BLOCKS_PER_GROUP);
        let meta_blocks = get_u64(b, at::META_BLOCKS);
        let data_blocks = get_u64(b, at::DATA_BLOCKS);
        let segments = get_u64(b, at::SEGMENTS);
        let groups = get_u64(b, at::GROUPS);
        if segment_blocks < MIN_SEGMENT_BLOCKS
            || segments < 2
            || segments != meta_blocks / segment_blocks as u64
        {
            return Err(bad(format!(
                "segments {segments} of {segment_blocks} blocks on {meta_blocks} blocks"
            )));
        }
        if blocks_per_group == 0
            || blocks_per_group as u64 > 8 * (block_size as u64 - HEADER_SIZE as u64)
        {
            return Err(bad(format!("blocks per group {blocks_per_group}")));
        }
        if data_blocks < 2 || groups != data_blocks.div_ceil(blocks_per_group as u64) {
            return Err(bad(format!(
                "{groups} groups for {data_blocks} data blocks"
            )));
        }
        if meta_blocks >= 1 << 48 || data_blocks >= 1 << 48 {
            return Err(bad("device larger than 2^48 blocks".into()));
        }
        // Every group has a bitmap block in the log: more groups than log blocks cannot be
        // (and the tables for them would exhaust memory before anything noticed).
        if groups > meta_blocks {
            return Err(bad(format!(
                "{groups} groups, more than the {meta_blocks} blocks of the log"
            )));
        }
        if get_u32(b, at::INODE_SIZE) as usize != INODE_SIZE {
            return Err(bad(format!("inode size {}", get_u32(b, at::INODE_SIZE))));
        }
        if get_u32(b, at::FEATURES) != 0 {
            return Err(bad(format!(
                "unknown features {:#x}",
                get_u32(b, at::FEATURES)
            )));
        }
        let label_bytes = &b[at::LABEL..at::LABEL + LABEL_LEN];
        let label_end = label_bytes
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(LABEL_LEN);
        // mkfs writes UTF-8; anything else is shown with replacement characters, cut back to
        // what fits the field (each replacement takes 3 bytes: uncut, encoding it again
        // would not fit and panicked).
        let mut label = String::from_utf8_lossy(&label_bytes[..label_end]).into_owned();
        while label.len() > LABEL_LEN {
            label.pop();
        }
        let ncopies = get_u32(b, at::COPIES) as usize;
        if ncopies > MAX_SB_COPIES {
            return Err(bad(format!("{ncopies} superblock copies")));
        }
        let copy_segments: Vec<u64> = (0..ncopies)
            .map(|i| get_u64(b, at::COPY_SEGMENTS + 8 * i))
            .collect();
        if copy_segments.iter().any(|&s| s == 0 || s >= segments) {
            return Err(bad("superblock copy outside the log".into()));
        }
        let path_len = get_u16(b, at::DATA_PATH_LEN) as usize;
        if path_len > MAX_DATA_PATH {
            return Err(bad(format!("data path length {path_len}")));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[at::UUID..at::UUID + 16]);
        Ok(Superblock {
            uuid,
            role,
            block_size,
            meta_blocks,
            data_blocks,
            segment_blocks,
            blocks_per_group,
            segments,
            groups,
            hash_seed: get_u64(b, at::HASH_SEED),
            created: get_u64(b, at::CREATED),
            label,
            copy_segments,
            data_path: b[at::DATA_PATH..at::DATA_PATH + path_len].to_vec(),
        })
    }

    /// Is `other` (the data device's superblock) the partner of this metadata superblock?
    pub fn pairs_with(&self, other: &Superblock) -> bool {
        self.uuid == other.uuid
            && self.block_size == other.block_size
            && self.meta_blocks == other.meta_blocks
            && self.data_blocks == other.data_blocks
            && self.blocks_per_group == other.blocks_per_group
            && self.role == Role::Meta
            && other.role == Role::Data
    }

    /// First log block of segment `seg` (after a superblock copy if it has one).
    pub fn segment_start(&self, seg: u64) -> u64 {
        let base = seg * self.segment_blocks as u64;
        if self.copy_segments.contains(&seg) {
            base + 1
        } else {
            base
        }
    }

    /// One past the last block of segment `seg`.
    pub fn segment_end(&self, seg: u64) -> u64 {
        (seg + 1) * self.segment_blocks as u64
    }

    pub fn segment_of(&self, addr: u64) -> u64 {
        addr / self.segment_blocks as u64
    }

    /// Where mkfs puts superblock copies for a log of `segments` segments.
    pub fn copy_locations(segments: u64) -> Vec<u64> {
        let mut v: Vec<u64> = (1..8u64)
            .map(|i| (segments * i / 8).max(1))
            .filter(|&s| s < segments)
            .collect();
        v.dedup();
        v
    }
}

pub fn uuid_tag(uuid: &[u8; 16]) -> u64 {
    get_u64(uuid, 0)
}

/// Why a superblock of format `version` is refused: older images lack what this program
/// writes (version 2 added extended attributes and their `VALUE` blocks), newer ones may hold
/// what it cannot read. Neither is converted in place.
pub fn version_refusal(version: u32) -> String {
    if version < FORMAT_VERSION {
        format!(
            "format version {version} was written by an older DualFS; this program reads only \
             version {FORMAT_VERSION} (which added extended attributes): copy the files off \
             with the older program, make a new file system and copy them back"
        )
    } else {
        format!(
            "format version {version} is newer than this program, which reads only version \
             {FORMAT_VERSION}: use a newer DualFS"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            uuid: [7; 16],
            role: Role::Meta,
            block_size: 4096,
            meta_blocks: 256 * 64,
            data_blocks: 100_000,
            segment_blocks: 256,
            blocks_per_group: 32512,
            segments: 64,
            groups: 4,
            hash_seed: 99,
            created: 1,
            label: "disk".into(),
            copy_segments: Superblock::copy_locations(64),
            data_path: b"/tmp/data.img".to_vec(),
        }
    }

    #[test]
    fn round_trip() {
        let sb = sample();
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        assert_eq!(sb.copy_segments, vec![8, 16, 24, 32, 40, 48, 56]);
        assert_eq!(sb.segment_start(8), 8 * 256 + 1);
        assert_eq!(sb.segment_start(9), 9 * 256);
    }

    #[test]
    fn rejects_damage() {
        let b = sample().encode();
        for i in [0, 9, 20, 40, 60, 300] {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(Superblock::decode(&c).is_err(), "byte {i}");
        }
        assert!(Superblock::decode(&b[..100]).is_err());
    }

    /// The bytes this encoder writes are the format's: pinned, so that no change to the code
    /// (naming an offset, say) moves a field unnoticed.
    #[test]
    fn encoding_is_pinned() {
        assert_eq!(crc32fast::hash(&sample().encode()), 0x497931e0);
    }

    #[test]
    fn copies_on_small_logs() {
        assert_eq!(Superblock::copy_locations(4), vec![1, 2, 3]);
        assert_eq!(Superblock::copy_locations(2), vec![1]);
    }

    /// Regression (found by fuzz/superblock): a label of bytes that are not UTF-8 decoded to
    /// a string three times longer, and encoding that superblock again (fsck rewriting the
    /// data superblock or a copy) panicked.
    #[test]
    fn label_that_is_not_utf8_encodes_again() {
        let mut b = sample().encode();
        b[at::LABEL..at::LABEL + LABEL_LEN].fill(0xff);
        seal_crc(&mut b[..SB_SIZE], at::CRC);
        let sb = Superblock::decode(&b).unwrap();
        assert!(sb.label.len() <= LABEL_LEN);
        let again = Superblock::decode(&sb.encode()).unwrap();
        assert_eq!(again, sb);
    }

    /// Regression (found by fuzz/bitmap_file): a superblock with one block per group on a
    /// large device asked the tables for a bitmap per block, exhausting memory.
    #[test]
    fn more_groups_than_log_blocks_is_refused() {
        let mut sb = sample();
        sb.blocks_per_group = 1;
        sb.groups = sb.data_blocks;
        assert!(sb.groups > sb.meta_blocks);
        assert!(Superblock::decode(&sb.encode()).is_err());
    }
}
