//! The segment cleaner's mechanism and the log's space accounting.
//!
//! Cleaning a segment: read its summaries, find what is still live (judged against the current
//! maps — inode map, node map, block maps, meta-file maps — never trusted from the segment
//! itself, so a stale or lying summary can only cost work, not correctness), make it dirty so
//! the next log write moves it to the head, and checkpoint: the checkpoint finds the segment
//! dead and marks it clean (docs/DESIGN.md "Segment reuse").
//!
//! Before a pass touches anything it computes an upper bound of the log blocks it will write
//! (the live blocks, the indirect blocks above them and their inodes, summaries, and the
//! checkpoint) and cleans only victims whose bound fits the clean segments there are, and only
//! if the pass gains segments. Writers are admitted (`admit`) only while the clean segments,
//! less what everything pending will take, stay above `reserve_segments()`; deletes may go
//! down to `cleaner_reserve()`, which holds the worst case of a one-segment pass, so cleaning
//! always has the room it needs. The argument is in docs/DESIGN.md, "Cleaning and the reserve".
//!
//! Which segments and when is policy: `crate::clean`.

use super::Fs;
use crate::clean::control::{self, PassReport, SegmentInfo, UsageTable};
use crate::clean::{CleanerCounters, Policy, ThresholdUpdate, Thresholds};
use crate::format::bmap::{self, BlockPath, Parent};
use crate::format::inode::{check_inode_block, inode_in_block, inodes_per_block};
use crate::format::meta::{
    entries16_per_block, symlink_bytes_per_block, SEG_ACTIVE, SEG_DIRTY, SEG_RESERVED,
};
use crate::format::summary::{Summary, DESC_SIZE, RECORD_SIZE, SUMMARY_HEADER};
use crate::format::{BlockKind, BITMAP_ID, IFILE_ID, NODEMAP_ID};
use crate::log::{read_block, read_blocks};
use crate::meta::metafile::MetaFile;
use crate::meta::Tables;
use crate::{FsError, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Clean segments deletes may use below the writers' reserve.
const DELETE_SEGMENTS: u64 = 2;
/// Log blocks one operation may dirty that the dirty counters do not show yet while it runs
/// (its inodes, a cascade of tree nodes): charged while it is in flight.
const OP_BLOCKS: u64 = 16;

/// What the file system keeps for cleaning and admission.
pub(crate) struct CleanerState {
    /// `None` until someone sets them: defaults follow the log's size.
    thresholds: Mutex<Option<Thresholds>>,
    counters: Mutex<CleanerCounters>,
    /// Log blocks dirtied since the last snapshot that the dirty counters do not show
    /// (indirect blocks, long symlink targets); reset when the log writer takes a snapshot.
    charged: AtomicU64,
    /// Charges of admitted operations still running.
    inflight: AtomicU64,
    /// The bound of the cleaning pass running (it moves live bytes, adds none).
    claimed: AtomicU64,
    /// When the last write operation was admitted, ms after `epoch`.
    last_write_ms: AtomicU64,
    epoch: Instant,
    /// Cleaner daemons connected with takeover.
    daemons: AtomicU64,
    /// One attempt to make room at a time.
    room: Mutex<()>,
    /// (clean segments, live bytes) when making room last failed: until one changes, another
    /// attempt would fail the same way.
    futile: Mutex<Option<(u64, u64)>>,
    /// Live bytes of the log, with the (durable snapshot, checkpoint count) they were added
    /// up at: they change only when a transaction is applied or a checkpoint written.
    live_cache: Mutex<Option<(u64, u64, u64)>>,
}

impl CleanerState {
    pub(crate) fn new() -> CleanerState {
        CleanerState {
            thresholds: Mutex::new(None),
            counters: Mutex::new(CleanerCounters::default()),
            charged: AtomicU64::new(0),
            inflight: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            last_write_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            daemons: AtomicU64::new(0),
            room: Mutex::new(()),
            futile: Mutex::new(None),
            live_cache: Mutex::new(None),
        }
    }

    /// The log writer took a snapshot: everything charged so far is in it.
    pub(crate) fn snapshot_taken(&self) {
        self.charged.store(0, Ordering::Release);
    }
}

/// What an operation is, for admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Adds to the log: create, link, rename, attribute changes.
    Change,
    /// A write of this many bytes.
    Write(u64),
    /// Frees space: unlink, rmdir, truncate. May use the deletes' part of the reserve.
    Delete,
}

/// An admitted operation; its charge counts as pending until it is dropped.
#[must_use]
pub(crate) struct Admission<'a> {
    fs: &'a Fs,
    charge: u64,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.fs
            .cleaner
            .inflight
            .fetch_sub(self.charge, Ordering::AcqRel);
    }
}

/// A cleaning pass's bound, pending while the pass runs.
struct Claim<'a> {
    fs: &'a Fs,
    blocks: u64,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.fs
            .cleaner
            .claimed
            .fetch_sub(self.blocks, Ordering::AcqRel);
    }
}

/// Keeps the mount from threshold cleaning while a daemon is connected.
pub struct DaemonGuard<'a>(&'a Fs);

impl Drop for DaemonGuard<'_> {
    fn drop(&mut self) {
        self.0.cleaner.daemons.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The log's space, in blocks unless named bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Space {
    pub clean: u64,
    /// Upper bound of what writing everything pending takes (with its checkpoint).
    pub pending: u64,
    /// What operations add to the live bytes, at most, beyond what the tables show: charged
    /// blocks and operations in flight (rewrites of what is already live add nothing; new
    /// inodes and nodes of a flush interval are not counted: the live limit is a soft one).
    pub growth: u64,
    /// Blocks a clean segment takes of a write.
    pub seg_eff: u64,
    pub reserve: u64,
    pub cleaner_reserve: u64,
    pub live_limit_bytes: u64,
}

/// One live thing in a segment being cleaned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Live {
    Inode {
        ino: u64,
        slot: u16,
    },
    Node {
        id: u64,
    },
    Indirect {
        ino: u64,
        level: u8,
        index: u64,
    },
    /// `blocks`: the whole target is rewritten.
    Symlink {
        ino: u64,
        index: u64,
        blocks: u64,
    },
    Meta {
        file: u64,
        index: u64,
    },
}

/// What is live in one segment.
#[derive(Clone, Debug, Default)]
struct SegmentScan {
    seg: u64,
    partial_segments: u64,
    blocks_examined: u64,
    /// Its live bytes by the usage table when scanned.
    live_bytes: u64,
    items: Vec<(u64, Live)>,
}

/// The union of what a set of victims makes the log write.
#[derive(Clone, Debug, Default)]
struct CostAcc {
    inos: BTreeSet<u64>,
    ptrs: BTreeSet<(u64, u8, u64)>,
    symlinks: BTreeMap<u64, u64>,
    nodes: BTreeSet<u64>,
    meta: BTreeSet<(u64, u64)>,
}

/// Sizes the bounds need.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    block_size: u64,
    segment_blocks: u64,
    segments: u64,
    ppb: u64,
    ipb: u64,
}

impl Geometry {
    /// Blocks a write takes of each clean segment it moves into: a segment loses at most a
    /// superblock copy, one summary block and one block left at its end.
    fn seg_eff(&self) -> u64 {
        self.segment_blocks - 3
    }

    /// Summary blocks of a write of `blocks` blocks and `records` records (one partial
    /// segment per segment it spans).
    fn summary_blocks(&self, blocks: u64, records: u64) -> u64 {
        let per = self.block_size - SUMMARY_HEADER as u64;
        ((blocks * DESC_SIZE as u64 + records * RECORD_SIZE as u64).div_ceil(per))
            + blocks.div_ceil(self.seg_eff())
            + 1
    }

    fn usage_blocks(&self) -> u64 {
        self.segments
            .div_ceil(entries16_per_block(self.block_size as u32) as u64)
    }

    fn imap_block(&self, ino: u64) -> u64 {
        1 + self.usage_blocks() + ino / entries16_per_block(self.block_size as u32) as u64
    }

    /// A checkpoint of `blocks` meta blocks, with its summaries.
    fn checkpoint_blocks(&self, blocks: u64) -> u64 {
        blocks + self.summary_blocks(blocks, 0)
    }

    /// Worst case, in log blocks, of a pass cleaning `k` segments when the meta files have
    /// `meta_total` blocks (docs/DESIGN.md "Cleaning and the reserve"): every block of every
    /// victim a level-1 indirect block of a different file whose two ancestors lie elsewhere
    /// (itself, two ancestors, an inode), a Dead record for each old copy, summaries, and a
    /// checkpoint rewriting every meta-file block.
    fn pass_bound(&self, k: u64, meta_total: u64) -> u64 {
        let moved = k * (self.segment_blocks - 1);
        let txn = 3 * moved + moved.div_ceil(self.ipb) + 1;
        let records = 3 * moved;
        txn + self.summary_blocks(txn, records)
            + self.checkpoint_blocks(meta_total)
            + self.checkpoint_blocks(self.usage_blocks() + 1)
    }
}

fn metafile(t: &Tables, id: u64) -> &MetaFile {
    match id {
        IFILE_ID => &t.ifile.file,
        BITMAP_ID => &t.data.file,
        _ => &t.nodes.file,
    }
}

/// Every block and indirect block of the meta files: no checkpoint writes more.
fn meta_total_blocks(t: &Tables) -> u64 {
    [IFILE_ID, BITMAP_ID, NODEMAP_ID]
        .iter()
        .map(|&id| {
            let f = metafile(t, id);
            f.len() + f.indirect.len() as u64
        })
        .sum()
}

/// Meta blocks the next checkpoint writes as things are now (dirty ones, and all indirect
/// blocks of a file with any), plus the usage blocks it may add and the IFile header.
fn meta_dirty_blocks(t: &Tables, g: &Geometry) -> u64 {
    let mut n = g.usage_blocks() + 1;
    for id in [IFILE_ID, BITMAP_ID, NODEMAP_ID] {
        let f = metafile(t, id);
        if !f.dirty.is_empty() {
            n += f.dirty.len() as u64 + f.indirect.len() as u64;
        }
    }
    n.min(meta_total_blocks(t))
}

impl CostAcc {
    fn add(&mut self, scan: &SegmentScan, ppb: u64) {
        for &(_, item) in &scan.items {
            match item {
                Live::Inode { ino, .. } => {
                    self.inos.insert(ino);
                }
                Live::Node { id } => {
                    self.nodes.insert(id);
                }
                Live::Indirect { ino, level, index } => {
                    self.inos.insert(ino);
                    // The block and every indirect block above it up to the inode.
                    let (mut l, mut i) = (level, index);
                    self.ptrs.insert((ino, l, i));
                    while let Parent::Block { level, index, .. } = bmap::parent(l, i, ppb) {
                        self.ptrs.insert((ino, level, index));
                        (l, i) = (level, index);
                    }
                }
                Live::Symlink { ino, blocks, .. } => {
                    self.inos.insert(ino);
                    self.symlinks.insert(ino, blocks);
                }
                Live::Meta { file, index } => {
                    self.meta.insert((file, index));
                }
            }
        }
    }

    /// Upper bound of the log blocks the pass writes: its transaction and its checkpoint,
    /// with `meta_dirty` meta blocks already due and `meta_total` the most a checkpoint writes.
    fn bound(&self, g: &Geometry, meta_dirty: u64, meta_total: u64) -> u64 {
        let sym: u64 = self.symlinks.values().sum();
        let blocks = (self.inos.len() as u64).div_ceil(g.ipb)
            + 1
            + self.ptrs.len() as u64
            + sym
            + self.nodes.len() as u64;
        let records = self.ptrs.len() as u64 + sym;
        let imap: BTreeSet<u64> = self.inos.iter().map(|&i| g.imap_block(i)).collect();
        let nodemap: BTreeSet<u64> = self.nodes.iter().map(|&n| n / g.ppb).collect();
        let meta = (meta_dirty + imap.len() as u64 + nodemap.len() as u64 + self.meta.len() as u64)
            .min(meta_total);
        // A second checkpoint frees victims that held meta blocks (the first relocates them):
        // it writes the usage blocks and the IFile header.
        let second = if self.meta.is_empty() {
            0
        } else {
            g.checkpoint_blocks(g.usage_blocks() + 1)
        };
        blocks + g.summary_blocks(blocks, records) + g.checkpoint_blocks(meta) + second
    }
}

impl Fs {
    fn geometry(&self) -> Geometry {
        Geometry {
            block_size: self.sb.block_size as u64,
            segment_blocks: self.sb.segment_blocks as u64,
            segments: self.sb.segments,
            ppb: self.ppb,
            ipb: inodes_per_block(self.sb.block_size) as u64,
        }
    }

    /// Bytes of log segment `seg`.
    fn segment_bytes_of(&self, seg: u64) -> u64 {
        (self.sb.segment_end(seg) - self.sb.segment_start(seg)) * self.sb.block_size as u64
    }

    // ------------------------------------------------------------------------------------
    // Space accounting and admission
    // ------------------------------------------------------------------------------------

    pub fn clean_segments_count(&self) -> u64 {
        self.tables.lock().ifile.clean_segments()
    }

    /// Clean segments only the cleaner may use: the worst case of a one-segment pass plus
    /// one for operations in flight.
    pub fn cleaner_reserve(&self) -> u64 {
        let g = self.geometry();
        let meta_total = meta_total_blocks(&self.tables.lock());
        g.pass_bound(1, meta_total).div_ceil(g.seg_eff()) + 1
    }

    /// Clean segments kept back from writers: they get ENOSPC before touching them. Deletes
    /// may use all but the cleaner's part.
    pub fn reserve_segments(&self) -> u64 {
        self.cleaner_reserve() + DELETE_SEGMENTS
    }

    /// Live bytes writers may reach: beyond it they get ENOSPC, because cleaning a log that
    /// full would cost more than it gains. A twentieth of the log (at least two segments)
    /// stays free beyond the reserve.
    fn live_limit_bytes(&self, reserve: u64) -> u64 {
        let g = self.geometry();
        let log = self.sb.segments - 1;
        let gap = (log / 20).max(2);
        log.saturating_sub(reserve + gap) * g.seg_eff() * g.block_size
    }

    /// Upper bound of the log blocks that writing everything dirty now takes, with the
    /// checkpoint after it.
    pub(crate) fn pending_blocks(&self) -> u64 {
        let g = self.geometry();
        let meta = meta_dirty_blocks(&self.tables.lock(), &g);
        self.pending_blocks_with(meta)
    }

    /// `pending_blocks` with the checkpoint's `meta` blocks known.
    fn pending_blocks_with(&self, meta: u64) -> u64 {
        let g = self.geometry();
        let inodes = self.dirty.lock().len() as u64;
        let records = self.records.lock().len() as u64;
        let nodes = self.tree.dirty_count() as u64;
        let freed = self.tree.freed_count() as u64;
        let charged = self.cleaner.charged.load(Ordering::Acquire)
            + self.cleaner.inflight.load(Ordering::Acquire)
            + self.cleaner.claimed.load(Ordering::Acquire);
        let blocks = inodes.div_ceil(g.ipb) + nodes + charged;
        blocks + g.summary_blocks(blocks, records + freed + charged) + g.checkpoint_blocks(meta)
    }

    pub(crate) fn space(&self) -> Space {
        let g = self.geometry();
        let (clean, meta_total, meta_dirty) = {
            let t = self.tables.lock();
            (
                t.ifile.clean_segments(),
                meta_total_blocks(&t),
                meta_dirty_blocks(&t, &g),
            )
        };
        let cleaner_reserve = g.pass_bound(1, meta_total).div_ceil(g.seg_eff()) + 1;
        let reserve = cleaner_reserve + DELETE_SEGMENTS;
        Space {
            clean,
            pending: self.pending_blocks_with(meta_dirty),
            growth: self.cleaner.charged.load(Ordering::Acquire)
                + self.cleaner.inflight.load(Ordering::Acquire),
            seg_eff: g.seg_eff(),
            reserve,
            cleaner_reserve,
            live_limit_bytes: self.live_limit_bytes(reserve),
        }
    }

    fn live_bytes_total(&self) -> u64 {
        let key = (
            self.durable_seq.load(Ordering::Acquire),
            self.stats.lock().checkpoints,
        );
        if let Some((seq, ckpts, live)) = *self.cleaner.live_cache.lock() {
            if (seq, ckpts) == key {
                return live;
            }
        }
        let live = self
            .tables
            .lock()
            .ifile
            .usage
            .iter()
            .map(|u| u.live_bytes as u64)
            .sum();
        *self.cleaner.live_cache.lock() = Some((key.0, key.1, live));
        live
    }

    /// Is there room for `op` now?
    fn fits(&self, sp: &Space, op: Admit) -> bool {
        let floor = match op {
            Admit::Delete => sp.cleaner_reserve,
            _ => sp.reserve,
        };
        if sp.clean * sp.seg_eff < sp.pending + floor * sp.seg_eff {
            return false;
        }
        if op == Admit::Delete {
            return true;
        }
        // Live bytes are all in dirty segments: no need to add them up while those could not
        // hold more than the limit anyway.
        let bs = self.sb.block_size as u64;
        let most = (self.sb.segments - 1 - sp.clean.min(self.sb.segments - 1))
            * self.sb.segment_blocks as u64
            * bs;
        let growth = sp.growth * bs;
        most + growth <= sp.live_limit_bytes
            || self.live_bytes_total() + growth <= sp.live_limit_bytes
    }

    /// Admit an operation that changes the file system. Called before the operation takes
    /// any lock, so the cleaner can lock what it moves. When the log is short of clean
    /// segments this writes what is pending, checkpoints and cleans (greedy, in this thread)
    /// until there is room; ENOSPC when there is none to be had. The operation's charge
    /// counts as pending until the returned guard is dropped.
    pub(crate) fn admit(&self, op: Admit) -> Result<Admission<'_>> {
        self.writable()?;
        let c = &self.cleaner;
        c.inflight.fetch_add(OP_BLOCKS, Ordering::AcqRel);
        let guard = Admission {
            fs: self,
            charge: OP_BLOCKS,
        };
        c.last_write_ms
            .store(c.epoch.elapsed().as_millis() as u64, Ordering::Release);
        if !self.fits(&self.space(), op) {
            self.make_room(op)?;
        }
        Ok(guard)
    }

    /// Count `blocks` log blocks an operation dirtied that the dirty counters do not show
    /// (call under the gate, so the next snapshot holds them).
    pub(crate) fn charge_log_blocks(&self, blocks: u64) {
        self.cleaner.charged.fetch_add(blocks, Ordering::AcqRel);
    }

    /// Charge the indirect blocks a change of file blocks `first..=last` may dirty: the
    /// level-1 blocks over the range and two ancestors each.
    pub(crate) fn charge_block_range(&self, first: u64, last: u64) {
        if last < crate::format::inode::NDIRECT as u64 {
            return;
        }
        let l1 = (last - first) / self.ppb + 2;
        self.charge_log_blocks(3 * l1);
    }

    fn make_room(&self, op: Admit) -> Result<()> {
        let _one = self.cleaner.room.lock();
        if self.fits(&self.space(), op) {
            return Ok(());
        }
        // What is pending was admitted against the room above the reserve: write it.
        self.sync_log()?;
        if self.fits(&self.space(), op) {
            return Ok(());
        }
        let key = (self.clean_segments_count(), self.live_bytes_total());
        let enospc = || {
            self.cleaner.counters.lock().enospc += 1;
            Err(FsError::Errno(libc::ENOSPC))
        };
        if op != Admit::Delete {
            let sp = self.space();
            let growth = sp.growth * self.sb.block_size as u64;
            if key.1 + growth > sp.live_limit_bytes {
                log::debug!(
                    "{op:?}: {} live bytes and {growth} pending reach the limit of {}: ENOSPC",
                    key.1,
                    sp.live_limit_bytes
                );
                return enospc();
            }
        }
        // Writers refused once are refused at once until something changes; deletes need
        // less room and always try.
        if op != Admit::Delete && *self.cleaner.futile.lock() == Some(key) {
            log::debug!("{op:?}: still nothing worth cleaning: ENOSPC");
            return enospc();
        }
        // Segments whose blocks all died since the last checkpoint become clean with one.
        self.checkpoint(false)?;
        let mut last = None;
        for _ in 0..64 {
            if self.fits(&self.space(), op) {
                *self.cleaner.futile.lock() = None;
                return Ok(());
            }
            let r = self.emergency_pass()?;
            let done = r.cleaned.is_empty();
            last = Some(r);
            if done {
                break;
            }
        }
        if self.fits(&self.space(), op) {
            return Ok(());
        }
        let sp = self.space();
        let why = last
            .and_then(|r| r.refused.first().map(|(s, w)| format!("segment {s}: {w}")))
            .unwrap_or_default();
        log::warn!(
            "log full for {op:?}: {} clean segments (reserve {}), {} pending blocks, {} live \
             bytes (limit {}), nothing worth cleaning ({why}); ENOSPC",
            sp.clean,
            sp.reserve,
            sp.pending,
            self.live_bytes_total(),
            sp.live_limit_bytes
        );
        if op != Admit::Delete {
            *self.cleaner.futile.lock() =
                Some((self.clean_segments_count(), self.live_bytes_total()));
        }
        enospc()
    }

    fn emergency_pass(&self) -> Result<PassReport> {
        let _one = self.cleaning.lock();
        // Enough to get writers going again, not more: they wait for it.
        let max = self.space().reserve;
        let victims = self.choose_victims(Policy::Greedy, max as usize * 2);
        let r = self.run_pass(victims, max, true)?;
        if !r.cleaned.is_empty() {
            self.cleaner.counters.lock().emergency_passes += 1;
        }
        Ok(r)
    }

    // ------------------------------------------------------------------------------------
    // Passes
    // ------------------------------------------------------------------------------------

    fn choose_victims(&self, policy: Policy, max: usize) -> Vec<u64> {
        let t = self.tables.lock();
        let seg_bytes = self.sb.segment_blocks as u64 * self.sb.block_size as u64;
        crate::clean::choose(
            &t.ifile.usage,
            seg_bytes,
            crate::log::now_secs(),
            policy,
            max,
        )
    }

    /// Clean up to `max` segments chosen by `policy`, then checkpoint so they become reusable.
    pub fn clean_pass(&self, policy: Policy, max: usize) -> Result<PassReport> {
        self.writable()?;
        let _one = self.cleaning.lock();
        let victims = self.choose_victims(policy, max.saturating_mul(2));
        self.run_pass(victims, max as u64, false)
    }

    /// Clean exactly these segments (as far as they can be: the others are refused, with why).
    pub fn clean_segments(&self, segments: &[u64]) -> Result<PassReport> {
        self.writable()?;
        let _one = self.cleaning.lock();
        self.run_pass(segments.to_vec(), segments.len() as u64, false)
    }

    /// Why `seg` cannot be a victim, if it cannot.
    fn not_a_victim(&self, seg: u64, head_seg: u64, next: u64) -> Option<&'static str> {
        if seg == 0 || seg >= self.sb.segments {
            return Some("no such log segment");
        }
        if seg == head_seg || seg == next {
            return Some("the log head is there");
        }
        let u = self.tables.lock().ifile.usage[seg as usize];
        if u.flags & SEG_RESERVED != 0 {
            return Some("reserved");
        }
        if u.flags & SEG_ACTIVE != 0 {
            return Some("active");
        }
        if u.flags & SEG_DIRTY == 0 {
            return Some("already clean");
        }
        None
    }

    /// Clean up to `max` of `candidates`, in order, as far as the clean segments hold the
    /// bound of what that writes; nothing if the pass would not gain segments (`emergency`:
    /// at least one).
    fn run_pass(&self, candidates: Vec<u64>, max: u64, emergency: bool) -> Result<PassReport> {
        let g = self.geometry();
        // Write what is pending first: the pass then starts from a known state, and what it
        // writes is its own.
        self.sync_log()?;
        let mut rep = PassReport {
            clean_before: self.clean_segments_count(),
            ..Default::default()
        };
        let (head_seg, next, head_room) = {
            let fl = self.flusher.lock();
            let h = fl.writer.head;
            let seg = self.sb.segment_of(h.addr);
            (seg, h.next_segment, self.sb.segment_end(seg) - h.addr)
        };
        let (meta_dirty, meta_total) = {
            let t = self.tables.lock();
            (meta_dirty_blocks(&t, &g), meta_total_blocks(&t))
        };
        let room = rep.clean_before * g.seg_eff() + head_room.saturating_sub(3);
        let budget = room.saturating_sub(self.pending_blocks());
        let consumed = |blocks: u64| {
            blocks
                .saturating_sub(head_room.saturating_sub(3))
                .div_ceil(g.seg_eff())
        };

        let mut acc = CostAcc::default();
        let mut scans: Vec<SegmentScan> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut misfits = 0;
        let mut candidates = candidates.into_iter();
        for seg in candidates.by_ref() {
            if scans.len() as u64 >= max || misfits >= 2 {
                rep.refused.push((seg, "the pass is full".into()));
                break;
            }
            if !seen.insert(seg) {
                continue;
            }
            if let Some(why) = self.not_a_victim(seg, head_seg, next) {
                rep.refused.push((seg, why.into()));
                continue;
            }
            let scan = self.scan_segment(seg)?;
            let mut trial = acc.clone();
            trial.add(&scan, g.ppb);
            if trial.bound(&g, meta_dirty, meta_total) > budget {
                rep.refused
                    .push((seg, "its live blocks do not fit the clean segments".into()));
                // Candidates come best first: after two misfits the rest will hardly fit.
                misfits += 1;
                continue;
            }
            acc = trial;
            scans.push(scan);
        }
        rep.refused
            .extend(candidates.map(|s| (s, "the pass is full".to_string())));
        let bound = acc.bound(&g, meta_dirty, meta_total);
        let k = scans.len() as u64;
        // In the write path the pass must give back a whole segment now; otherwise it must
        // free more than it writes (the head's segment fills, later passes gain).
        let gains = if emergency {
            k > consumed(bound)
        } else {
            k * g.seg_eff() > bound
        };
        if scans.is_empty() || !gains {
            for s in scans.drain(..) {
                rep.refused
                    .push((s.seg, "cleaning would not gain a segment".into()));
            }
            rep.clean_after = rep.clean_before;
            return Ok(rep);
        }
        rep.bound_blocks = bound;

        // Claim the bound, so writers see it as pending while the pass runs.
        self.cleaner.claimed.fetch_add(bound, Ordering::AcqRel);
        let _claim = Claim {
            fs: self,
            blocks: bound,
        };
        for s in &scans {
            rep.partial_segments += s.partial_segments;
            rep.blocks_examined += s.blocks_examined;
            for &(addr, item) in &s.items {
                rep.live_moved += self.move_live(addr, item)?;
            }
        }
        let before = self.checkpoint_blocks_total();
        // One checkpoint for the pass: it writes what moved and frees the dead segments. A
        // victim whose last live blocks were meta-file blocks dies only in that checkpoint
        // (it relocates them): one more frees it.
        self.checkpoint(false)?;
        let dead_but_dirty = {
            let t = self.tables.lock();
            scans.iter().any(|s| {
                let u = t.ifile.usage[s.seg as usize];
                u.live_bytes == 0 && !u.is_clean()
            })
        };
        if dead_but_dirty {
            self.checkpoint(false)?;
        }
        // What the pass wrote, its own part only (writers go on meanwhile): the live bytes it
        // moved, the indirect blocks, inodes and symlink blocks that moved with them from
        // outside the victims, and its checkpoints' meta blocks.
        let ckpt_blocks = self.checkpoint_blocks_total() - before;
        let moved: u64 = scans.iter().map(|s| s.live_bytes).sum();
        let (mut own_inodes, mut own_ptrs, mut own_sym) = (0u64, 0u64, 0u64);
        for s in &scans {
            for (_, item) in &s.items {
                match item {
                    Live::Inode { .. } => own_inodes += 1,
                    Live::Indirect { .. } => own_ptrs += 1,
                    Live::Symlink { .. } => own_sym += 1,
                    _ => {}
                }
            }
        }
        let sym: u64 = acc.symlinks.values().sum();
        let wander = (acc.ptrs.len() as u64).saturating_sub(own_ptrs) * g.block_size
            + sym.saturating_sub(own_sym) * g.block_size
            + (acc.inos.len() as u64).saturating_sub(own_inodes) * crate::format::INODE_SIZE as u64;
        rep.bytes_written = moved + wander + ckpt_blocks * g.block_size;
        let written = rep.bytes_written.div_ceil(g.block_size);
        {
            let t = self.tables.lock();
            for s in &scans {
                if t.ifile.usage[s.seg as usize].is_clean() {
                    rep.cleaned.push(s.seg);
                    rep.bytes_freed += self.segment_bytes_of(s.seg).saturating_sub(s.live_bytes);
                } else {
                    let live = t.ifile.usage[s.seg as usize].live_bytes;
                    rep.refused.push((
                        s.seg,
                        format!("still holds {live} live bytes after the pass"),
                    ));
                }
            }
        }
        rep.clean_after = self.clean_segments_count();
        if written > bound {
            log::warn!("cleaning pass wrote {written} log blocks, over its bound of {bound}");
        }
        if !rep.cleaned.is_empty() {
            let mut c = self.cleaner.counters.lock();
            c.passes += 1;
            c.segments_cleaned += rep.cleaned.len() as u64;
            c.live_moved += rep.live_moved;
            c.bytes_written += rep.bytes_written;
            c.bytes_freed += rep.bytes_freed;
            log::info!(
                "cleaned {} segments ({} live blocks moved, {} log blocks written, bound {}): \
                 {} -> {} clean",
                rep.cleaned.len(),
                rep.live_moved,
                written,
                bound,
                rep.clean_before,
                rep.clean_after
            );
        }
        Ok(rep)
    }

    fn checkpoint_blocks_total(&self) -> u64 {
        self.stats.lock().checkpoint_blocks_written
    }

    /// Threshold cleaning by the mount itself (the background thread), unless a daemon took
    /// it over.
    pub(crate) fn background_clean(&self) {
        if self.cleaner.daemons.load(Ordering::Acquire) > 0 || self.opts.read_only {
            return;
        }
        let t = self.thresholds();
        let start = Instant::now();
        let mut cleaning = false;
        loop {
            let clean = self.clean_segments_count();
            let idle = self.idle_secs() >= t.idle_secs;
            let go = if cleaning {
                clean < t.max_free
            } else {
                t.should_start(clean, idle)
            };
            if !go || start.elapsed().as_secs() >= 2 {
                return;
            }
            cleaning = true;
            match self.clean_pass(t.policy, t.pass_size(clean, idle) as usize) {
                Ok(r) if r.cleaned.is_empty() || r.clean_after <= r.clean_before => return,
                Ok(_) => {}
                Err(e) => {
                    log::warn!("background cleaning: {e}");
                    return;
                }
            }
        }
    }

    // ------------------------------------------------------------------------------------
    // Status and control
    // ------------------------------------------------------------------------------------

    pub fn thresholds(&self) -> Thresholds {
        if let Some(t) = *self.cleaner.thresholds.lock() {
            return t;
        }
        Thresholds::defaults(
            self.sb.segments - 1,
            self.reserve_segments(),
            self.sb.segment_blocks as u64 * self.sb.block_size as u64,
        )
    }

    pub fn set_thresholds(
        &self,
        update: &ThresholdUpdate,
    ) -> std::result::Result<Thresholds, String> {
        let t = update.apply(self.thresholds())?;
        *self.cleaner.thresholds.lock() = Some(t);
        log::info!(
            "cleaning thresholds: start below {} clean segments, stop at {}, {} per pass, idle \
             after {} s, {}",
            t.min_free,
            t.max_free,
            t.segments_per_pass,
            t.idle_secs,
            t.policy
        );
        Ok(t)
    }

    /// Seconds since the last write operation was admitted (since mount if none).
    pub fn idle_secs(&self) -> u64 {
        let c = &self.cleaner;
        let now = c.epoch.elapsed().as_millis() as u64;
        now.saturating_sub(c.last_write_ms.load(Ordering::Acquire)) / 1000
    }

    /// A cleaner daemon takes over threshold cleaning until the guard is dropped.
    pub fn attach_daemon(&self) -> DaemonGuard<'_> {
        self.cleaner.daemons.fetch_add(1, Ordering::AcqRel);
        DaemonGuard(self)
    }

    pub fn cleaner_counters(&self) -> CleanerCounters {
        *self.cleaner.counters.lock()
    }

    pub fn usage_table(&self) -> UsageTable {
        let t = self.tables.lock();
        UsageTable {
            segment_bytes: self.sb.segment_blocks as u64 * self.sb.block_size as u64,
            now: crate::log::now_secs(),
            segments: t
                .ifile
                .usage
                .iter()
                .map(|u| SegmentInfo {
                    live_bytes: u.live_bytes,
                    flags: u.flags,
                    last_mod: u.last_mod,
                })
                .collect(),
        }
    }

    pub fn cleaner_status(&self) -> control::Status {
        let sp = self.space();
        let (clean, live, dirty) = {
            let t = self.tables.lock();
            let live: u64 = t.ifile.usage.iter().map(|u| u.live_bytes as u64).sum();
            let dirty = t
                .ifile
                .usage
                .iter()
                .filter(|u| u.flags & SEG_DIRTY != 0)
                .count() as u64;
            (t.ifile.clean_segments(), live, dirty)
        };
        let segment_bytes = self.sb.segment_blocks as u64 * self.sb.block_size as u64;
        let counters = self.cleaner_counters();
        let stats = self.stats();
        control::Status {
            segments: self.sb.segments,
            segment_bytes,
            block_size: self.sb.block_size,
            log_segments: self.sb.segments - 1,
            clean,
            dirty,
            reserve: sp.reserve,
            cleaner_reserve: sp.cleaner_reserve,
            live_bytes: live,
            utilization: live as f64 / ((self.sb.segments - 1) * segment_bytes) as f64,
            live_limit_bytes: sp.live_limit_bytes,
            idle_secs: self.idle_secs(),
            daemons: self.cleaner.daemons.load(Ordering::Acquire),
            thresholds: self.thresholds(),
            write_cost: counters.write_cost(),
            counters,
            log_blocks_written: stats.log_blocks_written,
            checkpoints: stats.checkpoints,
        }
    }

    /// Log bytes writers may still fill, for statfs: the clean segments above the reserve
    /// plus the dead bytes cleaning can take back, at most up to the live limit, less what
    /// is pending.
    pub(crate) fn log_room_bytes(&self) -> u64 {
        let sp = self.space();
        let bs = self.sb.block_size as u64;
        let seg_bytes = self.sb.segment_blocks as u64 * bs;
        let (live, dead) = {
            let t = self.tables.lock();
            let mut live = 0u64;
            let mut dead = 0u64;
            // Dead space is worth counting in segments cleaning can reclaim even with the
            // clean segments down to the reserve: cleaning k of them, utilization u, with
            // k*u segments of room gains k*(1-u) >= 1 for u <= (R-1)/R.
            let r = sp.reserve.max(2) as f64;
            let reclaim = ((r - 1.0) / r).min(crate::clean::MAX_VICTIM_UTILIZATION);
            for u in &t.ifile.usage {
                live += u.live_bytes as u64;
                let victim = u.flags & SEG_DIRTY != 0 && u.flags & (SEG_ACTIVE | SEG_RESERVED) == 0;
                if victim && (u.live_bytes as f64) <= reclaim * seg_bytes as f64 {
                    dead += seg_bytes - (u.live_bytes as u64).min(seg_bytes);
                }
            }
            (live, dead)
        };
        let clean_room =
            (sp.clean.saturating_sub(sp.reserve) * sp.seg_eff * bs).saturating_sub(sp.pending * bs);
        let by_limit = sp.live_limit_bytes.saturating_sub(live + sp.growth * bs);
        by_limit.min(clean_room + dead)
    }

    /// Log bytes one more inode takes: its share of an INODES block.
    pub(crate) fn inode_log_bytes(&self) -> u64 {
        self.sb.block_size as u64 / inodes_per_block(self.sb.block_size) as u64
    }

    // ------------------------------------------------------------------------------------
    // Finding what is live
    // ------------------------------------------------------------------------------------

    /// The partial segments of `seg`, newest use only: (address, summary), in log order.
    pub(crate) fn segment_summaries(&self, seg: u64) -> Result<Vec<(u64, Summary)>> {
        let sb = &self.sb;
        let end = sb.segment_end(seg);
        let mut addr = sb.segment_start(seg);
        let mut out: Vec<(u64, Summary)> = Vec::new();
        while end - addr >= 2 {
            let first = read_block(&*self.meta, sb.block_size, addr)?;
            let Ok(n) = Summary::peek_len(&first, sb.uuid_tag()) else {
                break;
            };
            if addr + n as u64 > end {
                break;
            }
            let raw = if n == 1 {
                first
            } else {
                read_blocks(&*self.meta, sb.block_size, addr, n as u64)?
            };
            let Ok(s) = Summary::decode(&raw, sb.uuid_tag()) else {
                break;
            };
            // A reused segment may still hold partial segments of its previous use behind the
            // new ones; serials only grow within one use.
            if out.last().is_some_and(|(_, p)| s.serial <= p.serial)
                || addr + s.total_blocks() > end
            {
                break;
            }
            let next = addr + s.total_blocks();
            out.push((addr, s));
            addr = next;
        }
        Ok(out)
    }

    /// Everything still live in `seg`, without changing anything.
    fn scan_segment(&self, seg: u64) -> Result<SegmentScan> {
        let mut scan = SegmentScan {
            seg,
            live_bytes: self.tables.lock().ifile.usage[seg as usize].live_bytes as u64,
            ..Default::default()
        };
        for (addr, summary) in self.segment_summaries(seg)? {
            scan.partial_segments += 1;
            let first = addr + summary.summary_blocks as u64;
            for (i, d) in summary.descriptors.iter().enumerate() {
                let a = first + i as u64;
                scan.blocks_examined += 1;
                match d.kind {
                    BlockKind::Inodes => {
                        for (ino, slot) in self.live_inodes_in(a)? {
                            scan.items.push((a, Live::Inode { ino, slot }));
                        }
                    }
                    BlockKind::Node => {
                        if self.tables.lock().nodes.get(d.owner) == a {
                            scan.items.push((a, Live::Node { id: d.owner }));
                        }
                    }
                    BlockKind::Indirect => {
                        if self.indirect_is_live(d.owner, d.level, d.index, a)? {
                            let item = Live::Indirect {
                                ino: d.owner,
                                level: d.level,
                                index: d.index,
                            };
                            scan.items.push((a, item));
                        }
                    }
                    BlockKind::Symlink => {
                        if let Some(blocks) = self.symlink_is_live(d.owner, d.index, a)? {
                            let item = Live::Symlink {
                                ino: d.owner,
                                index: d.index,
                                blocks,
                            };
                            scan.items.push((a, item));
                        }
                    }
                    BlockKind::Meta | BlockKind::MetaIndirect => {
                        if self.meta_is_live(d.kind, d.owner, d.index, a) {
                            let item = Live::Meta {
                                file: d.owner,
                                index: d.index,
                            };
                            scan.items.push((a, item));
                        }
                    }
                }
            }
        }
        Ok(scan)
    }

    /// (inode, slot) of every inode the inode map places in INODES block `a`.
    fn live_inodes_in(&self, a: u64) -> Result<Vec<(u64, u16)>> {
        let block = read_block(&*self.meta, self.sb.block_size, a)?;
        let Ok(n) = check_inode_block(&block) else {
            return Ok(Vec::new());
        };
        let t = self.tables.lock();
        let mut out = Vec::new();
        for slot in 1..=n {
            let Ok(d) = inode_in_block(&block, slot) else {
                continue;
            };
            if t.ifile
                .entry(d.ino)
                .is_some_and(|e| e.addr == a && e.slot as usize == slot)
            {
                out.push((d.ino, slot as u16));
            }
        }
        Ok(out)
    }

    /// The cached inode for the cleaner (None when it is gone).
    fn inode_for_clean(&self, ino: u64) -> Result<Option<std::sync::Arc<super::InodeEntry>>> {
        if self.tables.lock().ifile.entry(ino).is_none() {
            return Ok(None);
        }
        match self.inode(ino) {
            Ok(e) => Ok(Some(e)),
            Err(FsError::Errno(libc::ENOENT)) => Ok(None),
            Err(x) => Err(x),
        }
    }

    fn indirect_is_live(&self, ino: u64, level: u8, index: u64, a: u64) -> Result<bool> {
        if !(1..=3).contains(&level) {
            return Ok(false);
        }
        let Some(BlockPath::Indirect { steps, .. }) = bmap::path(index, self.ppb) else {
            return Ok(false);
        };
        if !steps.iter().any(|s| s.level == level && s.index == index) {
            return Ok(false);
        }
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(false);
        };
        let _op = e.op.lock_arc();
        // Walk to the block the way a lookup would, loading what is missing.
        self.resolve_for_clean(&e, index)?;
        let st = e.state.read();
        Ok(!st.deleted && st.ptrs.get(&(level, index)).is_some_and(|b| b.addr == a))
    }

    /// Blocks of the target when symlink block `index` of `ino` at `a` is live.
    fn symlink_is_live(&self, ino: u64, index: u64, a: u64) -> Result<Option<u64>> {
        if index > 1 {
            return Ok(None);
        }
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(None);
        };
        let st = e.state.read();
        let live = st.d.is_symlink()
            && st.d.inline.is_none()
            && !st.target_dirty
            && st.d.direct[index as usize] == a;
        Ok(live.then(|| {
            (st.d.size as usize).div_ceil(symlink_bytes_per_block(self.sb.block_size)) as u64
        }))
    }

    fn meta_is_live(&self, kind: BlockKind, file: u64, index: u64, a: u64) -> bool {
        let t = self.tables.lock();
        if ![IFILE_ID, BITMAP_ID, NODEMAP_ID].contains(&file) {
            return false;
        }
        let mf = metafile(&t, file);
        match kind {
            BlockKind::Meta => mf.blocks.get(index as usize) == Some(&a),
            _ => mf.indirect.values().any(|&x| x == a) && index < mf.len(),
        }
    }

    // ------------------------------------------------------------------------------------
    // Moving it
    // ------------------------------------------------------------------------------------

    /// Make `item` (found live at `a`) dirty if it still is live; returns 1 if it was.
    fn move_live(&self, a: u64, item: Live) -> Result<u64> {
        match item {
            Live::Inode { ino, slot } => self.move_inode(ino, slot, a),
            Live::Node { id } => self.move_node(id, a),
            Live::Indirect { ino, level, index } => self.move_indirect(ino, level, index, a),
            Live::Symlink { ino, index, .. } => self.move_symlink(ino, index, a),
            Live::Meta { file, index } => Ok(self.move_meta(file, index)),
        }
    }

    fn move_inode(&self, ino: u64, slot: u16, a: u64) -> Result<u64> {
        let live = self
            .tables
            .lock()
            .ifile
            .entry(ino)
            .is_some_and(|e| e.addr == a && e.slot == slot);
        if !live {
            return Ok(0);
        }
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(0);
        };
        let _g = self.gate.read();
        let mut st = e.state.write();
        if st.deleted {
            return Ok(0);
        }
        self.mark_dirty(&e, &mut st);
        Ok(1)
    }

    fn move_node(&self, id: u64, a: u64) -> Result<u64> {
        if self.tables.lock().nodes.get(id) != a {
            return Ok(0);
        }
        let _g = self.gate.read();
        match self.tree.mark_dirty(&self.nodes(), id) {
            Ok(()) => Ok(1),
            // Freed meanwhile: its block died with it.
            Err(FsError::Errno(libc::ENOENT)) => Ok(0),
            Err(e) => Err(e),
        }
    }

    fn move_indirect(&self, ino: u64, level: u8, index: u64, a: u64) -> Result<u64> {
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(0);
        };
        let _op = e.op.lock_arc();
        self.resolve_for_clean(&e, index)?;
        let _g = self.gate.read();
        let mut st = e.state.write();
        if st.deleted {
            return Ok(0);
        }
        match st.ptrs.get_mut(&(level, index)) {
            Some(b) if b.addr == a => {
                b.dirty = true;
                self.mark_dirty(&e, &mut st);
                Ok(1)
            }
            _ => Ok(0),
        }
    }

    fn move_symlink(&self, ino: u64, index: u64, a: u64) -> Result<u64> {
        if self.symlink_is_live(ino, index, a)?.is_none() {
            return Ok(0);
        }
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(0);
        };
        let target = self.readlink(ino)?;
        let _g = self.gate.read();
        let mut st = e.state.write();
        if st.deleted || st.target_dirty || st.d.direct[index as usize] != a {
            return Ok(0);
        }
        st.long_target = Some(std::sync::Arc::new(target));
        st.target_dirty = true;
        self.mark_dirty(&e, &mut st);
        Ok(1)
    }

    /// Meta blocks are written by the checkpoint that ends the pass.
    fn move_meta(&self, file: u64, index: u64) -> u64 {
        let mut t = self.tables.lock();
        let mf: &mut MetaFile = match file {
            IFILE_ID => &mut t.ifile.file,
            BITMAP_ID => &mut t.data.file,
            _ => &mut t.nodes.file,
        };
        // Rewriting any block below an indirect block rewrites the indirect block too.
        if index < mf.len() {
            mf.mark_dirty(index);
            1
        } else {
            0
        }
    }
}

#[cfg(test)]
#[path = "clean_tests.rs"]
mod cleaning;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::meta::pointers_per_block;

    fn geometry(segment_blocks: u64) -> Geometry {
        Geometry {
            block_size: 4096,
            segment_blocks,
            segments: 256,
            ppb: pointers_per_block(4096) as u64,
            ipb: inodes_per_block(4096) as u64,
        }
    }

    #[test]
    fn pass_bound_covers_the_worst_segment() {
        let g = geometry(256);
        let b = g.pass_bound(1, 40);
        // 255 blocks, each with two wandering ancestors, plus inodes, summaries, checkpoint.
        assert!(b >= 3 * 255 + 17 + 40, "{b}");
        assert!(b < 4 * 256, "{b}");
        // k segments cost k times the moves.
        assert!(g.pass_bound(2, 40) > 2 * 3 * 255);
    }

    #[test]
    fn cost_counts_shared_ancestors_once() {
        let g = geometry(64);
        let p = g.ppb;
        let mut scan = SegmentScan::default();
        // Two level-1 blocks of one file under the same double-indirect block, one inode.
        let base = 12 + p;
        scan.items.push((
            100,
            Live::Indirect {
                ino: 7,
                level: 1,
                index: base,
            },
        ));
        scan.items.push((
            101,
            Live::Indirect {
                ino: 7,
                level: 1,
                index: base + p,
            },
        ));
        scan.items.push((102, Live::Inode { ino: 7, slot: 1 }));
        let mut acc = CostAcc::default();
        acc.add(&scan, p);
        assert_eq!(acc.inos.len(), 1);
        assert_eq!(acc.ptrs.len(), 3, "two level-1 blocks and their one parent");
        let b = acc.bound(&g, 3, 100);
        // 1 inode block + 1 spare + 3 pointer blocks, 3 summary blocks, and a checkpoint of
        // 4 meta blocks (3 due, 1 inode map block) with 3 of its own.
        assert_eq!(b, 5 + 3 + 4 + 3);
    }
}
