//! Segment summaries: the head of every partial segment (docs/FORMAT.md "Segment summary").

use super::*;
use crate::{FsError, Result};

pub const SS_MAGIC: u32 = 0x5353_4644;
pub const SS_CONT: u16 = 1;
pub const SS_CHECKPOINT: u16 = 2;
pub const SUMMARY_HEADER: usize = at::DESCRIPTORS;
pub const DESC_SIZE: usize = 24;
pub const RECORD_SIZE: usize = 24;

/// Byte offsets of the summary's fields, named as in docs/FORMAT.md "Segment summary"
/// (`ss_next_segment` is `at::NEXT_SEGMENT`).
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 4;
    pub const FLAGS: usize = 6;
    pub const SUM_CRC: usize = 8;
    pub const DATA_CRC: usize = 12;
    pub const SERIAL: usize = 16;
    pub const CKPT_SERIAL: usize = 24;
    pub const UUID_TAG: usize = 32;
    pub const CREATE_NS: usize = 40;
    pub const NEXT_SEGMENT: usize = 48;
    pub const SUMMARY_BLOCKS: usize = 56;
    pub const BLOCK_COUNT: usize = 60;
    pub const RECORD_COUNT: usize = 64;
    /// `ss_block_count` descriptors, then the records.
    pub const DESCRIPTORS: usize = 72;
}
/// Offsets inside a descriptor.
mod desc_at {
    pub const KIND: usize = 0;
    pub const LEVEL: usize = 1;
    pub const OWNER: usize = 8;
    pub const INDEX: usize = 16;
}
/// Offsets inside a record.
mod record_at {
    pub const TYPE: usize = 0;
    pub const A: usize = 8;
    pub const B: usize = 16;
}
// The header's last field ends before the descriptors (a reserved u32 between), and each
// descriptor's and record's last field ends with it.
const _: () = assert!(
    at::RECORD_COUNT + 4 <= at::DESCRIPTORS
        && desc_at::INDEX + 8 == DESC_SIZE
        && record_at::B + 8 == RECORD_SIZE
        && SUMMARY_HEADER <= MIN_BLOCK_SIZE as usize
);

/// What one block of a partial segment is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Descriptor {
    pub kind: BlockKind,
    pub level: u8,
    pub owner: u64,
    pub index: u64,
}

impl Descriptor {
    pub fn header(&self) -> BlockHeader {
        BlockHeader::new(self.kind, self.level, self.owner, self.index)
    }
}

/// Changes a transaction makes that no block shows (docs/FORMAT.md "Record").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// An inode number becomes free; `generation` is that of the use that ends (0 in logs
    /// written before it was recorded: the entry keeps its generation).
    IFree { ino: u64, generation: u32 },
    /// A tree node id becomes free.
    NFree { node: u64 },
    /// A run of whole log blocks dies.
    Dead { addr: u64, count: u64 },
    /// Data blocks become allocated.
    DAlloc { start: u64, count: u64 },
    /// Data blocks become free.
    DFree { start: u64, count: u64 },
    /// A group's directory count changes.
    GroupDirs { group: u64, delta: i64 },
}

impl Record {
    fn encode(&self, e: &mut [u8]) {
        let (t, a, b) = match *self {
            Record::IFree { ino, generation } => (1u8, ino, u64::from(generation)),
            Record::NFree { node } => (2, node, 0),
            Record::Dead { addr, count } => (3, addr, count),
            Record::DAlloc { start, count } => (4, start, count),
            Record::DFree { start, count } => (5, start, count),
            Record::GroupDirs { group, delta } => (6, group, delta as u64),
        };
        e[..RECORD_SIZE].fill(0);
        e[record_at::TYPE] = t;
        put_u64(e, record_at::A, a);
        put_u64(e, record_at::B, b);
    }

    fn decode(e: &[u8]) -> Result<Record> {
        let (a, b) = (get_u64(e, record_at::A), get_u64(e, record_at::B));
        Ok(match e[record_at::TYPE] {
            // A generation is 32 bits; wider values are damage, and a generation of 0
            // (older logs) changes nothing.
            1 => Record::IFree {
                ino: a,
                generation: u32::try_from(b).map_err(|_| {
                    FsError::corrupt(
                        "segment summary",
                        format!("inode {a} freed with generation {b}"),
                    )
                })?,
            },
            2 => Record::NFree { node: a },
            3 => Record::Dead { addr: a, count: b },
            4 => Record::DAlloc { start: a, count: b },
            5 => Record::DFree { start: a, count: b },
            6 => Record::GroupDirs {
                group: a,
                delta: b as i64,
            },
            t => {
                return Err(FsError::corrupt(
                    "segment summary",
                    format!("unknown record type {t}"),
                ))
            }
        })
    }
}

/// A decoded summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub flags: u16,
    pub data_crc: u32,
    pub serial: u64,
    pub ckpt_serial: u64,
    pub uuid_tag: u64,
    pub create_ns: u64,
    pub next_segment: u64,
    pub summary_blocks: u16,
    pub descriptors: Vec<Descriptor>,
    pub records: Vec<Record>,
}

impl Summary {
    /// Summary blocks needed for `nblocks` descriptors and `nrecords` records.
    pub fn blocks_needed(block_size: u32, nblocks: usize, nrecords: usize) -> usize {
        (SUMMARY_HEADER + DESC_SIZE * nblocks + RECORD_SIZE * nrecords)
            .div_ceil(block_size as usize)
    }

    pub fn block_count(&self) -> u64 {
        self.descriptors.len() as u64
    }

    /// Total length of the partial segment in blocks.
    pub fn total_blocks(&self) -> u64 {
        self.summary_blocks as u64 + self.block_count()
    }

    /// Encode into `summary_blocks` blocks (at least `blocks_needed`; the writer plans the
    /// layout before it knows the exact record count, so there may be spare zero space).
    pub fn encode(&self, block_size: u32) -> Vec<u8> {
        let n = self.summary_blocks as usize;
        assert!(
            Self::blocks_needed(block_size, self.descriptors.len(), self.records.len()) <= n,
            "summary sized wrongly"
        );
        let mut b = vec![0u8; n * block_size as usize];
        put_u32(&mut b, at::MAGIC, SS_MAGIC);
        put_u16(&mut b, at::VERSION, FORMAT_VERSION as u16);
        put_u16(&mut b, at::FLAGS, self.flags);
        put_u32(&mut b, at::DATA_CRC, self.data_crc);
        put_u64(&mut b, at::SERIAL, self.serial);
        put_u64(&mut b, at::CKPT_SERIAL, self.ckpt_serial);
        put_u64(&mut b, at::UUID_TAG, self.uuid_tag);
        put_u64(&mut b, at::CREATE_NS, self.create_ns);
        put_u64(&mut b, at::NEXT_SEGMENT, self.next_segment);
        put_u16(&mut b, at::SUMMARY_BLOCKS, self.summary_blocks);
        put_u32(&mut b, at::BLOCK_COUNT, self.descriptors.len() as u32);
        put_u32(&mut b, at::RECORD_COUNT, self.records.len() as u32);
        let mut off = at::DESCRIPTORS;
        for d in &self.descriptors {
            put_u8(&mut b, off + desc_at::KIND, d.kind as u8);
            put_u8(&mut b, off + desc_at::LEVEL, d.level);
            put_u64(&mut b, off + desc_at::OWNER, d.owner);
            put_u64(&mut b, off + desc_at::INDEX, d.index);
            off += DESC_SIZE;
        }
        for r in &self.records {
            r.encode(&mut b[off..off + RECORD_SIZE]);
            off += RECORD_SIZE;
        }
        seal_crc(&mut b, at::SUM_CRC);
        b
    }

    /// Whether `first` begins a summary of the file system with `uuid_tag`, by magic and tag
    /// alone. Where a partial segment could follow, anything else means none was written
    /// there (roll-forward's end of the log), not damage: blocks never written, or left by an
    /// earlier file system on the device.
    pub fn starts_here(first: &[u8], uuid_tag: u64) -> bool {
        first.len() >= SUMMARY_HEADER
            && get_u32(first, at::MAGIC) == SS_MAGIC
            && get_u64(first, at::UUID_TAG) == uuid_tag
    }

    /// Peek at the first summary block: how many summary blocks the whole summary has, or
    /// an error when this is not a summary of this file system.
    pub fn peek_len(first: &[u8], uuid_tag: u64) -> Result<usize> {
        let bad = |d: String| FsError::corrupt("segment summary", d);
        if first.len() < SUMMARY_HEADER || get_u32(first, at::MAGIC) != SS_MAGIC {
            return Err(bad("no summary here".into()));
        }
        let version = get_u16(first, at::VERSION);
        if version as u32 != FORMAT_VERSION {
            return Err(bad(format!("version {version}")));
        }
        if get_u64(first, at::UUID_TAG) != uuid_tag {
            return Err(bad("summary of another file system".into()));
        }
        let n = get_u16(first, at::SUMMARY_BLOCKS) as usize;
        if n == 0 {
            return Err(bad("zero summary blocks".into()));
        }
        Ok(n)
    }

    /// Decode a whole summary (all its blocks).
    pub fn decode(b: &[u8], uuid_tag: u64) -> Result<Summary> {
        let bad = |d: String| FsError::corrupt("segment summary", d);
        let block_size = b.len() / Self::peek_len(b, uuid_tag)?.max(1);
        let n = Self::peek_len(b, uuid_tag)?;
        if n * block_size != b.len() {
            return Err(bad("summary length mismatch".into()));
        }
        if !check_crc(b, at::SUM_CRC) {
            return Err(bad("summary CRC mismatch".into()));
        }
        let nblocks = get_u32(b, at::BLOCK_COUNT) as usize;
        let nrecords = get_u32(b, at::RECORD_COUNT) as usize;
        let need = SUMMARY_HEADER as u64
            + DESC_SIZE as u64 * nblocks as u64
            + RECORD_SIZE as u64 * nrecords as u64;
        if need.div_ceil(block_size as u64) > n as u64 {
            return Err(bad(format!(
                "{nblocks} blocks and {nrecords} records in {n} summary blocks"
            )));
        }
        let mut off = at::DESCRIPTORS;
        let mut descriptors = Vec::with_capacity(nblocks);
        for _ in 0..nblocks {
            let raw = b[off + desc_at::KIND];
            let kind = BlockKind::from_u8(raw).ok_or_else(|| bad(format!("block kind {raw}")))?;
            descriptors.push(Descriptor {
                kind,
                level: b[off + desc_at::LEVEL],
                owner: get_u64(b, off + desc_at::OWNER),
                index: get_u64(b, off + desc_at::INDEX),
            });
            off += DESC_SIZE;
        }
        let mut records = Vec::with_capacity(nrecords);
        for _ in 0..nrecords {
            records.push(Record::decode(&b[off..off + RECORD_SIZE])?);
            off += RECORD_SIZE;
        }
        Ok(Summary {
            flags: get_u16(b, at::FLAGS),
            data_crc: get_u32(b, at::DATA_CRC),
            serial: get_u64(b, at::SERIAL),
            ckpt_serial: get_u64(b, at::CKPT_SERIAL),
            uuid_tag: get_u64(b, at::UUID_TAG),
            create_ns: get_u64(b, at::CREATE_NS),
            next_segment: get_u64(b, at::NEXT_SEGMENT),
            summary_blocks: n as u16,
            descriptors,
            records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One record of each type.
    fn every_record() -> Vec<Record> {
        vec![
            Record::IFree {
                ino: 5,
                generation: 7,
            },
            Record::NFree { node: 8 },
            Record::Dead {
                addr: 900,
                count: 3,
            },
            Record::DAlloc {
                start: 10,
                count: 20,
            },
            Record::DFree {
                start: 40,
                count: 2,
            },
            Record::GroupDirs {
                group: 3,
                delta: -1,
            },
        ]
    }

    /// The bytes this encoder writes are the format's: pinned, so that no change to the code
    /// (naming an offset, say) moves a field unnoticed.
    #[test]
    fn encoding_is_pinned() {
        let s = Summary {
            flags: SS_CONT | SS_CHECKPOINT,
            data_crc: 0xdead_beef,
            serial: 99,
            ckpt_serial: 4,
            uuid_tag: 0x0123_4567_89ab_cdef,
            create_ns: 1_700_000_000_123_456_789,
            next_segment: 17,
            summary_blocks: 1,
            descriptors: vec![
                Descriptor {
                    kind: BlockKind::Node,
                    level: 2,
                    owner: 300,
                    index: 0,
                },
                Descriptor {
                    kind: BlockKind::Indirect,
                    level: 1,
                    owner: 5,
                    index: 520,
                },
            ],
            records: every_record(),
        };
        let b = s.encode(4096);
        assert_eq!(crc32fast::hash(&b), 0x74908c62);
        assert_eq!(Summary::decode(&b, s.uuid_tag).unwrap(), s);
    }

    #[test]
    fn round_trip_multi_block() {
        let descriptors: Vec<Descriptor> = (0..200)
            .map(|i| Descriptor {
                kind: BlockKind::Indirect,
                level: 1,
                owner: i,
                index: i * 7,
            })
            .collect();
        let records = every_record();
        let n = Summary::blocks_needed(4096, descriptors.len(), records.len());
        assert_eq!(n, 2);
        let s = Summary {
            flags: SS_CONT,
            data_crc: 1234,
            serial: 99,
            ckpt_serial: 4,
            uuid_tag: 0xfeed,
            create_ns: 1,
            next_segment: 17,
            summary_blocks: n as u16,
            descriptors,
            records,
        };
        let b = s.encode(4096);
        assert_eq!(Summary::peek_len(&b, 0xfeed).unwrap(), 2);
        assert_eq!(Summary::decode(&b, 0xfeed).unwrap(), s);
        assert!(Summary::decode(&b, 0xbeef).is_err());
        let mut c = b.clone();
        c[5000] ^= 1;
        assert!(Summary::decode(&c, 0xfeed).is_err());
    }
}
