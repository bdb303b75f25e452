//! The intent log: what each acknowledged operation did, in memory that outlives the daemon
//! (files on tmpfs), until the log holds it (docs/DESIGN.md, "Surviving the daemon").
//!
//! Every mutation is *stamped* with a sequence number under the gate it already holds
//! (`stamp`), so the numbers order conflicting operations as they happened, and the log
//! writer's exclusive phase reads the next number as the transaction's cover: everything
//! stamped below it is in the transaction. Before its log write the writer appends a
//! marker (`Cover`: the log serial after the transaction, that number); once a transaction
//! is durable the chunks holding only what it covers are deleted. Mount takes the newest
//! marker the recovered log reaches and replays every record at or above its number.
//!
//! This module is the storage: chunks, framing, markers, what may be deleted. What records
//! mean is the core's (`fs::intent::records`).

pub mod chunk;

use crate::lockcheck::Mutex as NoIoMutex;
use chunk::{Chunk, ChunkContents, Cover};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use chunk::RawRecord;

/// The record kind of a transaction marker (the core's records use the others).
pub const KIND_COVER: u8 = 0;

/// Where a mount keeps its intent log unless told otherwise: tmpfs, which outlives the
/// process (not a reboot: power loss keeps the log's own rules).
pub const DEFAULT_INTENT_DIR: &str = "/dev/shm/dualfs-intent";

/// Bytes of a chunk (a record larger than that gets a chunk of its own size).
pub const CHUNK_SIZE: usize = 8 << 20;

thread_local! {
    /// The stamp of this thread's latest mutation (`stamp`), taken by the record that
    /// describes it (`take_stamp`).
    static STAMP: Cell<Option<u64>> = const { Cell::new(None) };
}

thread_local! {
    /// This thread is replaying records: the operations it runs record nothing.
    static REPLAYING: Cell<bool> = const { Cell::new(false) };
}

thread_local! {
    /// The FUSE request this thread is serving (0: none): its records carry it.
    static REQUEST: Cell<u64> = const { Cell::new(0) };
}

/// This thread serves FUSE request `unique` (0: none) from now on.
pub fn set_request(unique: u64) {
    REQUEST.with(|r| r.set(unique));
}

/// The FUSE request this thread serves (0: none).
pub fn current_request() -> u64 {
    REQUEST.with(|r| r.get())
}

/// Whether this thread is replaying (its operations are already recorded).
pub fn replaying() -> bool {
    REPLAYING.with(|r| r.get())
}

/// Mark this thread as replaying, or not.
pub fn set_replaying(on: bool) {
    REPLAYING.with(|r| r.set(on));
}

/// The stamp this thread's operation got since `clear_stamp`, if any.
pub fn take_stamp() -> Option<u64> {
    STAMP.with(|s| s.take())
}

/// The stamp this thread's operation got, left for its record.
pub fn peek_stamp() -> Option<u64> {
    STAMP.with(|s| s.get())
}

/// Put back a stamp taken aside (an inner mutation recorded itself in between).
pub fn set_stamp(seq: u64) {
    STAMP.with(|s| s.set(Some(seq)));
}

/// Forget a stamp left by an operation that recorded nothing (it failed).
pub fn clear_stamp() {
    STAMP.with(|s| s.set(None));
}

/// What a mount found in the intent directory.
#[derive(Debug, Default)]
pub struct Found {
    pub chunks: Vec<ChunkContents>,
    /// Files that are not chunks of this file system's, or are damaged: left alone, named.
    pub refused: Vec<(PathBuf, String)>,
}

impl Found {
    /// The newest marker that a log recovered up to serial `next_serial` (exclusive) holds:
    /// everything stamped below its `seq` is in that log.
    pub fn cover(&self, next_serial: u64) -> Cover {
        let mut best = Cover::default();
        for c in &self.chunks {
            let header = std::iter::once(c.cover);
            let records = c
                .records
                .iter()
                .filter(|r| r.kind == KIND_COVER)
                .filter_map(|r| decode_cover(&r.payload));
            for m in header.chain(records) {
                if m.serial != 0 && m.serial <= next_serial && m.seq > best.seq {
                    best = m;
                }
            }
        }
        best
    }

    /// Every operation record, in stamp order.
    pub fn records(&self) -> Vec<&RawRecord> {
        let mut v: Vec<&RawRecord> = self
            .chunks
            .iter()
            .flat_map(|c| c.records.iter())
            .filter(|r| r.kind != KIND_COVER)
            .collect();
        v.sort_by_key(|r| r.seq);
        v
    }

    /// The FUSE requests that made the operation records (a request whose reply may never
    /// have reached the kernel is resent to the daemon's successor).
    pub fn requests(&self) -> std::collections::HashSet<u64> {
        self.records()
            .into_iter()
            .map(|r| r.request)
            .filter(|&r| r != 0)
            .collect()
    }

    pub fn torn(&self) -> u64 {
        self.chunks.iter().map(|c| c.torn).sum()
    }

    /// The highest stamp any record holds.
    pub fn max_seq(&self) -> u64 {
        self.chunks
            .iter()
            .flat_map(|c| c.records.iter())
            .map(|r| r.seq)
            .max()
            .unwrap_or(0)
    }
}

fn decode_cover(p: &[u8]) -> Option<Cover> {
    (p.len() >= 16).then(|| Cover {
        serial: u64::from_le_bytes(p[0..8].try_into().unwrap()),
        seq: u64::from_le_bytes(p[8..16].try_into().unwrap()),
    })
}

/// Read every chunk of the file system `uuid` in `dir` (none if `dir` does not exist).
pub fn find(dir: &Path, uuid: &[u8; 16]) -> std::io::Result<Found> {
    let mut found = Found::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(number) = name.to_str().and_then(chunk::chunk_number) else {
            continue;
        };
        let bytes = std::fs::read(entry.path())?;
        match chunk::read_chunk(&bytes, uuid) {
            Ok(c) if c.number == number => found.chunks.push(c),
            Ok(c) => found
                .refused
                .push((entry.path(), format!("says it is chunk {:x}", c.number))),
            Err(why) => found.refused.push((entry.path(), why)),
        }
    }
    found.chunks.sort_by_key(|c| c.number);
    Ok(found)
}

/// The directory of file system `uuid`'s intent log under `base`.
pub fn dir_for(base: &Path, uuid: &[u8; 16]) -> PathBuf {
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    base.join(hex)
}

struct Appender {
    chunk: Option<Arc<Chunk>>,
    off: usize,
    /// The highest stamp of a record in `chunk`.
    max_seq: u64,
    next_number: u64,
}

struct Sealed {
    path: PathBuf,
    max_seq: u64,
    /// The mapping, kept while a writer may still be copying into it.
    _chunk: Option<Arc<Chunk>>,
}

/// A mount's intent log, open for appending.
pub struct IntentLog {
    dir: PathBuf,
    uuid: [u8; 16],
    chunk_size: usize,
    /// The next stamp.
    next: AtomicU64,
    appender: NoIoMutex<Appender>,
    sealed: NoIoMutex<Vec<Sealed>>,
    /// The newest marker of a durable transaction (headers of new chunks carry it).
    durable: NoIoMutex<Cover>,
    /// No marker covers less than this: what a replay started from is in the log.
    floor: AtomicU64,
}

impl IntentLog {
    /// Continue the log of file system `uuid` in `dir` (made, mode 0700, if missing) after
    /// `found`: new chunks are numbered after the ones there, which stay until a durable
    /// transaction covers them.
    pub fn open(
        dir: &Path,
        uuid: [u8; 16],
        found: &Found,
        chunk_size: usize,
    ) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let next_number = found.chunks.iter().map(|c| c.number + 1).max().unwrap_or(1);
        Ok(IntentLog {
            dir: dir.to_path_buf(),
            uuid,
            chunk_size: chunk_size.max(chunk::CHUNK_HEADER + chunk::FRAME),
            next: AtomicU64::new(found.max_seq() + 1),
            appender: NoIoMutex::new(
                "intent appender",
                Appender {
                    chunk: None,
                    off: 0,
                    max_seq: 0,
                    next_number,
                },
            ),
            sealed: NoIoMutex::new("intent chunks", Vec::new()),
            durable: NoIoMutex::new("intent cover", Cover::default()),
            floor: AtomicU64::new(0),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stamp this thread's mutation (called under the gate, held shared).
    pub fn stamp(&self) -> u64 {
        let s = self.next.fetch_add(1, Ordering::Relaxed);
        STAMP.with(|c| c.set(Some(s)));
        s
    }

    /// The next stamp: read under the exclusive gate, it is a transaction's cover.
    pub fn next_seq(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Replay stamps its mutations with the numbers they had (so a transaction written
    /// during replay covers exactly what was replayed before it).
    pub fn set_next_seq(&self, seq: u64) {
        self.next.store(seq, Ordering::Relaxed);
    }

    /// Append a record of `kind` stamped `seq` whose payload is `parts` concatenated. The
    /// record is whole in the file when this returns.
    pub fn append(&self, seq: u64, kind: u8, parts: &[&[u8]]) -> std::io::Result<()> {
        let payload: usize = parts.iter().map(|p| p.len()).sum();
        let len = chunk::record_len(payload);
        // Read before the appender's lock: leaves are never nested.
        let cover = *self.durable.lock();
        let mut sealed = None;
        let (chunk, off) = {
            let mut a = self.appender.lock();
            let room = a.chunk.as_ref().map_or(0, |c| c.len() - a.off);
            if room < len {
                let size = self.chunk_size.max(chunk::CHUNK_HEADER + len);
                let c = Arc::new(Chunk::create(
                    &self.dir,
                    &self.uuid,
                    a.next_number,
                    size,
                    cover,
                )?);
                a.next_number += 1;
                if let Some(old) = a.chunk.replace(c) {
                    sealed = Some(Sealed {
                        path: old.path.clone(),
                        max_seq: a.max_seq,
                        _chunk: Some(old),
                    });
                }
                a.off = chunk::CHUNK_HEADER;
                a.max_seq = 0;
            }
            let c = a.chunk.clone().expect("a chunk with room");
            let off = a.off;
            c.claim(off, len);
            a.off += len;
            a.max_seq = a.max_seq.max(seq);
            (c, off)
        };
        if let Some(s) = sealed {
            self.sealed.lock().push(s);
        }
        let request = if kind == KIND_COVER {
            0
        } else {
            current_request()
        };
        chunk.write_record(off, seq, request, kind, parts);
        Ok(())
    }

    /// Replay started from a log holding everything stamped below `seq`.
    pub fn set_floor(&self, seq: u64) {
        self.floor.fetch_max(seq, Ordering::Relaxed);
    }

    /// A transaction's cover: what it holds, and at least what replay started from.
    pub fn clamp(&self, seq: u64) -> u64 {
        seq.max(self.floor.load(Ordering::Relaxed))
    }

    /// Append the marker of a transaction about to be written.
    pub fn cover(&self, cover: Cover) -> std::io::Result<()> {
        let mut p = [0u8; 16];
        p[0..8].copy_from_slice(&cover.serial.to_le_bytes());
        p[8..16].copy_from_slice(&cover.seq.to_le_bytes());
        self.append(0, KIND_COVER, &[&p])
    }

    /// A transaction with marker `cover` is durable. The oldest chunks whose records are all
    /// below its cover and below `keep_from` (the oldest record cached data still needs) go:
    /// oldest first, never one after a chunk that stays, since a replay judges the records
    /// it finds by the ones after them (a write by the write-back that covers it). Threads
    /// append in a different order than they stamp, so a chunk may hold a stamp newer than
    /// the next chunk's.
    pub fn durable(&self, cover: Cover, keep_from: u64) {
        {
            let mut d = self.durable.lock();
            if cover.seq > d.seq {
                *d = cover;
            }
        }
        let below = cover.seq.min(keep_from);
        let gone: Vec<Sealed> = {
            let mut sealed = self.sealed.lock();
            let n = sealed
                .iter()
                .position(|s| s.max_seq >= below)
                .unwrap_or(sealed.len());
            sealed.drain(..n).collect()
        };
        for s in gone {
            if let Err(e) = std::fs::remove_file(&s.path) {
                log::warn!("intent log: cannot remove {}: {e}", s.path.display());
            }
        }
    }

    /// Delete the chunks a mount found, once the log holds everything they describe (its
    /// replay was written back and checkpointed).
    pub fn remove_found(&self, found: &Found) {
        for c in &found.chunks {
            let path = self.dir.join(chunk::chunk_name(c.number));
            if let Err(e) = std::fs::remove_file(&path) {
                log::warn!("intent log: cannot remove {}: {e}", path.display());
            }
        }
    }

    /// Everything is in the log and nothing is cached (a clean unmount): every chunk goes.
    pub fn discard_all(&self) {
        {
            let mut a = self.appender.lock();
            if let Some(c) = a.chunk.take() {
                let _ = std::fs::remove_file(&c.path);
            }
            a.off = 0;
            a.max_seq = 0;
        }
        for s in std::mem::take(&mut *self.sealed.lock()) {
            let _ = std::fs::remove_file(&s.path);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }

    /// How many chunk files the log holds now (tests).
    pub fn chunk_count(&self) -> usize {
        let current = usize::from(self.appender.lock().chunk.is_some());
        self.sealed.lock().len() + current
    }
}
