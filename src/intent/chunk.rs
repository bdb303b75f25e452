//! One file of the intent log: a header, then records appended into a shared mapping, so
//! what a record's copy wrote is in the file (and in memory that outlives the process) as
//! soon as the copy is done, with no system call per record (docs/FORMAT.md, "Intent log").

use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

pub const CHUNK_MAGIC: &[u8; 8] = b"DFSINTNT";
pub const CHUNK_VERSION: u32 = 4;
/// Header bytes before the first record.
pub const CHUNK_HEADER: usize = 64;
/// Every record starts at a multiple of this.
pub const RECORD_ALIGN: usize = 8;
/// Bytes of a record's frame before its payload.
pub const FRAME: usize = 32;

/// Byte offsets of the header's fields (docs/FORMAT.md, "Intent log").
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const CRC: usize = 12;
    pub const UUID: usize = 16;
    pub const NUMBER: usize = 32;
    /// The newest transaction marker durable when the chunk was made (`COVER_SERIAL` 0: none).
    pub const COVER_SERIAL: usize = 40;
    pub const COVER_SEQ: usize = 48;
}
const _: () = assert!(at::COVER_SEQ + 8 <= CHUNK_HEADER);

/// Offsets inside a record's frame.
pub mod frame_at {
    /// Total bytes of the record, frame included, a multiple of `RECORD_ALIGN`; written when
    /// the space is taken, so a reader can step over a record whose copy never finished.
    pub const LEN: usize = 0;
    /// CRC-32 of bytes `SEQ..LEN`, written last: a record is whole when it matches.
    pub const CRC: usize = 4;
    pub const SEQ: usize = 8;
    /// The FUSE request that made the operation (0: none), so that a successor answers the
    /// kernel's resend of it from what it did instead of doing it twice.
    pub const REQUEST: usize = 16;
    pub const KIND: usize = 24;
    /// Payload bytes (the rest of `LEN` is padding).
    pub const PAYLOAD_LEN: usize = 28;
}
const _: () = assert!(frame_at::PAYLOAD_LEN + 4 == FRAME);

/// A transaction marker: once the log holds every partial segment below serial `serial`,
/// every operation stamped below `seq` is in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cover {
    pub serial: u64,
    pub seq: u64,
}

/// A record read back whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    pub seq: u64,
    /// The FUSE request's unique id (0: not made by a request).
    pub request: u64,
    pub kind: u8,
    pub payload: Vec<u8>,
}

/// What a chunk holds, read back.
#[derive(Debug)]
pub struct ChunkContents {
    pub number: u64,
    pub cover: Cover,
    pub records: Vec<RawRecord>,
    /// Records whose copy had not finished (a process that died while appending).
    pub torn: u64,
}

/// A chunk open for appending.
pub struct Chunk {
    pub number: u64,
    pub path: PathBuf,
    map: MmapMut,
    _file: File,
}

// SAFETY-free sharing: a record's bytes are written through `write_record` into space that
// `Appender` handed out once, so no two threads write the same bytes.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// Make chunk `number` of `size` bytes in `dir`.
    pub fn create(
        dir: &Path,
        uuid: &[u8; 16],
        number: u64,
        size: usize,
        cover: Cover,
    ) -> std::io::Result<Chunk> {
        let path = dir.join(chunk_name(number));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        file.set_len(size as u64)?;
        // SAFETY: the file is ours (created above, in a directory only root writes) and is
        // never truncated while mapped.
        let mut map = unsafe { MmapMut::map_mut(&file)? };
        let h = &mut map[..CHUNK_HEADER];
        h[at::MAGIC..at::MAGIC + 8].copy_from_slice(CHUNK_MAGIC);
        h[at::VERSION..at::VERSION + 4].copy_from_slice(&CHUNK_VERSION.to_le_bytes());
        h[at::UUID..at::UUID + 16].copy_from_slice(uuid);
        h[at::NUMBER..at::NUMBER + 8].copy_from_slice(&number.to_le_bytes());
        h[at::COVER_SERIAL..at::COVER_SERIAL + 8].copy_from_slice(&cover.serial.to_le_bytes());
        h[at::COVER_SEQ..at::COVER_SEQ + 8].copy_from_slice(&cover.seq.to_le_bytes());
        let crc = header_crc(h);
        h[at::CRC..at::CRC + 4].copy_from_slice(&crc.to_le_bytes());
        Ok(Chunk {
            number,
            path,
            map,
            _file: file,
        })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Take `len` bytes at `off` for a record: its length goes in now, under the appender's
    /// lock, so the space can be stepped over whatever happens to its copy.
    pub fn claim(&self, off: usize, len: usize) {
        assert!(off % RECORD_ALIGN == 0 && len % RECORD_ALIGN == 0 && off + len <= self.len());
        // SAFETY: `off..off + len` was handed out to this caller alone (`Appender`).
        let b = unsafe { self.bytes_mut(off, len) };
        b[frame_at::LEN..frame_at::LEN + 4].copy_from_slice(&(len as u32).to_le_bytes());
    }

    /// Copy a record into the space `claim` took at `off`; its CRC goes in last.
    pub fn write_record(&self, off: usize, seq: u64, request: u64, kind: u8, parts: &[&[u8]]) {
        let payload: usize = parts.iter().map(|p| p.len()).sum();
        let len = record_len(payload);
        // SAFETY: as in `claim`: the space is this caller's alone.
        let b = unsafe { self.bytes_mut(off, len) };
        assert_eq!(
            u32::from_le_bytes(b[0..4].try_into().unwrap()) as usize,
            len,
            "a record written into space claimed for another length"
        );
        b[frame_at::SEQ..frame_at::SEQ + 8].copy_from_slice(&seq.to_le_bytes());
        b[frame_at::REQUEST..frame_at::REQUEST + 8].copy_from_slice(&request.to_le_bytes());
        b[frame_at::KIND..frame_at::KIND + 4].copy_from_slice(&u32::from(kind).to_le_bytes());
        b[frame_at::PAYLOAD_LEN..FRAME].copy_from_slice(&(payload as u32).to_le_bytes());
        let mut at = FRAME;
        for p in parts {
            b[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        b[at..len].fill(0);
        let crc = crc32fast::hash(&b[frame_at::SEQ..len]);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        b[frame_at::CRC..frame_at::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// # Safety
    /// The caller owns `off..off + len` of the mapping: no other thread touches those bytes.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
        std::slice::from_raw_parts_mut((self.map.as_ptr() as *mut u8).add(off), len)
    }
}

/// The bytes a record with `payload` bytes takes, frame and padding included.
pub fn record_len(payload: usize) -> usize {
    (FRAME + payload).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

pub fn chunk_name(number: u64) -> String {
    format!("{number:016x}.intent")
}

/// The chunk number a file name gives, if it is a chunk's.
pub fn chunk_number(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".intent")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn header_crc(h: &[u8]) -> u32 {
    crate::format::crc_with_hole(&h[..CHUNK_HEADER], at::CRC)
}

/// Read a chunk back: its header must be whole and name `uuid`; its records are read up to
/// the first space never claimed, each kept if whole.
pub fn read_chunk(bytes: &[u8], uuid: &[u8; 16]) -> Result<ChunkContents, String> {
    if bytes.len() < CHUNK_HEADER {
        return Err("shorter than its header".into());
    }
    let h = &bytes[..CHUNK_HEADER];
    if &h[at::MAGIC..at::MAGIC + 8] != CHUNK_MAGIC {
        return Err("not an intent log chunk".into());
    }
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let version = u32_at(h, at::VERSION);
    // Version 3 lacks only kind 15 (O_TMPFILE); version 2 also kind 14: its kind 7 may be
    // either write.
    if !(2..=CHUNK_VERSION).contains(&version) {
        return Err(format!("version {version}, not {CHUNK_VERSION}"));
    }
    if u32_at(h, at::CRC) != header_crc(h) {
        return Err("header checksum does not match".into());
    }
    if &h[at::UUID..at::UUID + 16] != uuid {
        return Err("belongs to another file system".into());
    }
    let mut out = ChunkContents {
        number: u64_at(h, at::NUMBER),
        cover: Cover {
            serial: u64_at(h, at::COVER_SERIAL),
            seq: u64_at(h, at::COVER_SEQ),
        },
        records: Vec::new(),
        torn: 0,
    };
    let mut off = CHUNK_HEADER;
    while off + FRAME <= bytes.len() {
        let len = u32_at(bytes, off + frame_at::LEN) as usize;
        if len == 0 {
            break; // never claimed: the end
        }
        if len % RECORD_ALIGN != 0 || len < FRAME || off + len > bytes.len() {
            // A length is written whole under the appender's lock; anything else is damage,
            // and nothing after it can be found.
            out.torn += 1;
            break;
        }
        let r = &bytes[off..off + len];
        let payload = u32_at(r, frame_at::PAYLOAD_LEN) as usize;
        if u32_at(r, frame_at::CRC) == crc32fast::hash(&r[frame_at::SEQ..])
            && record_len(payload) == len
        {
            out.records.push(RawRecord {
                seq: u64_at(r, frame_at::SEQ),
                request: u64_at(r, frame_at::REQUEST),
                kind: r[frame_at::KIND],
                payload: r[FRAME..FRAME + payload].to_vec(),
            });
        } else {
            out.torn += 1;
        }
        off += len;
    }
    Ok(out)
}
