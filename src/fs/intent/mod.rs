//! The core's side of the intent log (docs/DESIGN.md, "Surviving the daemon"): stamping each
//! mutation under the gate, recording it before its reply, a marker per transaction, and
//! the cached data that keeps the records of its writes. What a record says is in `records`,
//! how a mount carries records out again in `replay`.

pub mod records;
pub(crate) mod replay;
#[cfg(test)]
mod tests;

use super::Fs;
use crate::intent::chunk::Cover;
use crate::lockcheck::SharedGate;
use records::{IntentOp, IntentRecord};
use std::collections::BTreeMap;

/// The records cached data still needs: a file's cache keeps the records of its writes
/// from the first on (`pin`), until its write-back or drop is in a durable transaction.
#[derive(Default)]
pub(crate) struct Pins {
    /// Stamps of the first write of each cached file, counted.
    held: BTreeMap<u64, u32>,
    /// (`at`, pin): released once a durable transaction covers stamp `at`.
    releasing: Vec<(u64, u64)>,
}

impl Pins {
    pub(crate) fn pin(&mut self, seq: u64) {
        *self.held.entry(seq).or_default() += 1;
    }

    /// The file pinned at `seq` has nothing cached from stamp `at` on.
    pub(crate) fn release_at(&mut self, at: u64, seq: u64) {
        self.releasing.push((at, seq));
    }

    /// A transaction covering stamps below `cover` is durable: the oldest record still
    /// needed afterwards.
    fn durable(&mut self, cover: u64) -> u64 {
        let held = &mut self.held;
        self.releasing.retain(|&(at, seq)| {
            if at < cover {
                if let Some(n) = held.get_mut(&seq) {
                    *n -= 1;
                    if *n == 0 {
                        held.remove(&seq);
                    }
                }
                false
            } else {
                true
            }
        });
        self.held.keys().next().copied().unwrap_or(u64::MAX)
    }
}

impl Fs {
    /// Take the gate shared for a mutation, stamping it for its intent record (the stamp
    /// orders it among the mutations and against the log writer's snapshot).
    pub(crate) fn gate_shared(&self) -> SharedGate<'_> {
        let g = self.log.gate.read();
        if let Some(i) = &self.intent {
            i.stamp();
        }
        g
    }

    /// The stamp a mutation under the gate now would be below (for pins).
    pub(crate) fn intent_position(&self) -> u64 {
        self.intent.as_ref().map_or(0, |i| i.next_seq())
    }

    /// Record the operation this thread has just done (its latest stamp), before its reply.
    pub(crate) fn record(&self, op: IntentOp) {
        let Some(log) = &self.intent else { return };
        let Some(seq) = crate::intent::take_stamp() else {
            return;
        };
        if crate::intent::replaying() {
            return;
        }
        let r = IntentRecord {
            time: super::types::Timespec::last_now(),
            op,
        };
        if let Err(e) = log.append(seq, r.op.kind(), &[&r.encode()]) {
            self.intent_failed(e);
        }
    }

    /// Record a write of `data` at `offset` to `ino` (without copying `data` twice), into
    /// the data cache or through it.
    pub(crate) fn record_write(
        &self,
        ino: u64,
        generation: u32,
        offset: u64,
        mode: u32,
        data: &[u8],
        cached: bool,
    ) {
        let Some(log) = &self.intent else { return };
        let Some(seq) = crate::intent::take_stamp() else {
            return;
        };
        if crate::intent::replaying() {
            return;
        }
        let head = records::write_head(
            super::types::Timespec::last_now(),
            ino,
            generation,
            offset,
            mode,
            data.len(),
        );
        let kind = if cached {
            records::KIND_WRITE
        } else {
            records::KIND_WRITE_THROUGH
        };
        if let Err(e) = log.append(seq, kind, &[&head, data]) {
            self.intent_failed(e);
        }
    }

    /// A record that could not be appended: what it acknowledges goes to the log now
    /// instead, so nothing acknowledged depends on it.
    fn intent_failed(&self, e: std::io::Error) {
        log::error!("intent log: cannot append a record ({e}); writing the log instead");
        if let Err(e) = self.sync_log() {
            log::error!("intent log: and the log write failed too: {e}");
        }
    }

    /// The marker of a transaction planned to end before log serial `serial`, covering
    /// stamps below `seq`: appended before its log write.
    pub(crate) fn intent_cover(&self, serial: u64, seq: u64) {
        if let Some(log) = &self.intent {
            if let Err(e) = log.cover(Cover { serial, seq }) {
                // Without its marker a transaction's operations are replayed again after
                // a death: refuse to go on rather than risk that.
                log::error!("intent log: cannot append a transaction marker: {e}");
                self.log.set_failed(format!(
                    "intent log: cannot append a transaction marker: {e}"
                ));
            }
        }
    }

    /// The transaction with that marker is durable: drop what no replay can need.
    pub(crate) fn intent_durable(&self, serial: u64, seq: u64) {
        if let Some(log) = &self.intent {
            let keep_from = self.cache.pins.lock().durable(seq);
            log.durable(Cover { serial, seq }, keep_from);
        }
    }
}

impl Fs {
    /// Record a write of `data` at `off` to `e` that has just been made, into the data cache
    /// (`cached`) or through it.
    pub(crate) fn record_written(
        &self,
        e: &super::inode::InodeEntry,
        off: u64,
        data: &[u8],
        cached: bool,
    ) {
        if self.intent.is_none() {
            return;
        }
        let (generation, mode) = {
            let st = e.state.read();
            (st.d.generation, st.d.mode)
        };
        self.record_write(e.ino, generation, off, mode, data, cached);
    }

    /// Record a truncate of `e` to `size` that has just been made (open with O_TRUNC, a copy
    /// that ends in a hole).
    pub(crate) fn record_truncate(&self, e: &super::inode::InodeEntry, size: u64) {
        if self.intent.is_none() {
            return;
        }
        let (generation, mode, uid, gid, mtime, ctime) = {
            let st = e.state.read();
            let d = &st.d;
            let t = super::inode::from_disk_time;
            (d.generation, d.mode, d.uid, d.gid, t(d.mtime), t(d.ctime))
        };
        self.record(IntentOp::SetAttr {
            ino: e.ino,
            generation,
            set: super::types::SetAttr {
                size: Some(size),
                ..Default::default()
            },
            mode,
            uid,
            gid,
            mtime,
            ctime,
        });
    }
}

impl Fs {
    /// Record an fallocate(2) of `e` that has just been made.
    pub(crate) fn record_fallocate(
        &self,
        e: &super::inode::InodeEntry,
        offset: u64,
        len: u64,
        mode: i32,
    ) {
        if self.intent.is_none() {
            return;
        }
        let generation = e.state.read().d.generation;
        self.record(IntentOp::Fallocate {
            ino: e.ino,
            generation,
            offset,
            len,
            mode,
        });
    }
}

thread_local! {
    /// The inode number and generation the next create on this thread makes (a replay).
    static FORCED_INODE: std::cell::Cell<Option<(u64, u32)>> = const { std::cell::Cell::new(None) };
}

/// The number and generation a replayed create must make, once.
pub(crate) fn take_forced_inode() -> Option<(u64, u32)> {
    FORCED_INODE.with(|f| f.take())
}

pub(crate) fn force_inode(ino: u64, generation: u32) {
    FORCED_INODE.with(|f| f.set(Some((ino, generation))));
}

impl Fs {
    /// The log holds everything and nothing is cached (a clean unmount): the intent log
    /// goes.
    pub(crate) fn discard_intents(&self) {
        if let Some(log) = &self.intent {
            log.discard_all();
        }
    }

    /// How many chunk files the intent log holds now (tests).
    pub fn intent_chunks(&self) -> usize {
        self.intent.as_ref().map_or(0, |l| l.chunk_count())
    }
}
