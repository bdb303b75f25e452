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
//! Which segments and when is policy: `policy`; the mount's cleaner thread, which cleans by it
//! beside operations, is `background`.

use super::Fs;
use crate::format::meta::{SEG_ACTIVE, SEG_DIRTY, SEG_RESERVED};
use crate::lockcheck::{Mutex as NoIoMutex, Rank};
use crate::Result;
use policy::{CleanerCounters, Policy, ThresholdUpdate, Thresholds};
use report::{PassReport, SegmentInfo, Status, UsageTable};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

mod background;
mod bound;
use bound::*;
mod live;
mod pass;
pub mod policy;
pub mod report;
mod room;
pub(crate) use room::RoomCounts;
mod space;

/// Clean segments deletes may use below the writers' reserve.
const DELETE_SEGMENTS: u64 = 2;
/// Log blocks one operation may dirty that the dirty counters do not show yet while it runs
/// (its inodes, a cascade of tree nodes): charged while it is in flight.
const OP_BLOCKS: u64 = 16;

/// Space and admission, a component of `Fs` (docs/DESIGN.md, "The components
/// of Fs"): what the file system keeps for cleaning and admission. Its methods are
/// `Fs`'s in this module's files (space.rs, room.rs, and the passes here), which read the
/// log's tables and move what is live through the namespace and the log.
pub(crate) struct CleanerState {
    /// One cleaning pass at a time.
    cleaning: crate::lockcheck::Mutex<()>,
    /// `None` until someone sets them: defaults follow the log's size.
    thresholds: NoIoMutex<Option<Thresholds>>,
    counters: NoIoMutex<CleanerCounters>,
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
    room: crate::lockcheck::Mutex<()>,
    /// (clean segments, live bytes, deletes admitted) when making room last failed: until one
    /// changes, another attempt would fail the same way.
    futile: NoIoMutex<Option<(u64, u64, u64)>>,
    /// Deletes admitted so far: each may make cleaning worth it again.
    deletes: AtomicU64,
    /// The figures admission reads without a lock.
    pub(crate) counts: room::RoomCounts,
    /// Wakes the cleaner thread (shared with it).
    wake: std::sync::Arc<background::Wake>,
    /// The cleaner thread, while it runs.
    thread: NoIoMutex<Option<std::thread::JoinHandle<()>>>,
    /// `min_free` of thresholds someone set (`u64::MAX`: the defaults), for admission.
    custom_min_free: AtomicU64,
}

impl CleanerState {
    pub(crate) fn new() -> CleanerState {
        CleanerState {
            cleaning: crate::lockcheck::Mutex::across_io("cleaning", Rank::CLEANING, 0, ()),
            thresholds: NoIoMutex::new("cleaner thresholds", None),
            counters: NoIoMutex::new("cleaner counters", CleanerCounters::default()),
            charged: AtomicU64::new(0),
            inflight: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            last_write_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            daemons: AtomicU64::new(0),
            room: crate::lockcheck::Mutex::across_io("cleaner room", Rank::ROOM, 0, ()),
            futile: NoIoMutex::new("cleaner futile", None),
            deletes: AtomicU64::new(0),
            counts: room::RoomCounts::default(),
            wake: std::sync::Arc::new(background::Wake::new()),
            thread: NoIoMutex::new("cleaner thread", None),
            custom_min_free: AtomicU64::new(u64::MAX),
        }
    }

    /// The log writer took a snapshot: everything charged so far is in it.
    pub(crate) fn snapshot_taken(&self) {
        self.charged.store(0, Ordering::Release);
    }
}

/// What a pass must gain to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gain {
    /// A whole clean segment more than its writes can take, now.
    Segment,
    /// More blocks freed than written.
    Blocks,
}

/// Who runs a pass (they are counted apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PassOrigin {
    /// An operation short of room, in its write path.
    WritePath,
    /// The mount's background thread, by its thresholds.
    Background,
    /// Asked for: the control socket (dualfs-cleaner), tests.
    Requested,
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
    /// Maps a range of data blocks (fallocate, copy_file_range): may dirty this many indirect
    /// blocks, charged with the operation so the room for them is there before it starts.
    Map(u64),
}

impl Admit {
    /// Log blocks charged while the operation runs.
    fn charge(self) -> u64 {
        match self {
            Admit::Map(blocks) => OP_BLOCKS + blocks,
            _ => OP_BLOCKS,
        }
    }
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
    /// Blocks the dirty inodes and tree nodes fill once written (new ones add to the live
    /// bytes; a bound, since rewrites add nothing): the live limit counts them, so a burst of
    /// creates within one flush interval does not run past it.
    pub dirty_blocks: u64,
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
#[derive(Debug, Default)]
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

impl Fs {
    /// A pass in the write path of an operation `op` short of room: greedy, enough to get
    /// writers going again and not more (they wait for it); one that gives a whole segment
    /// back at once if it can, else one that frees more blocks than it writes. `None` when
    /// the room was there once this thread had the pass to itself: a pass beside it (the
    /// cleaner thread's, a daemon's) made it meanwhile.
    pub(super) fn write_path_pass(&self, op: Admit) -> Result<Option<PassReport>> {
        let _one = self.cleaner.cleaning.lock();
        if self.fits(&self.space(), op) {
            return Ok(None);
        }
        let max = self.space().reserve;
        let mut r = None;
        for gain in [Gain::Segment, Gain::Blocks] {
            let victims = self.choose_victims(Policy::Greedy, max as usize * 2);
            let pass = self.run_pass(victims, max, gain, PassOrigin::WritePath)?;
            let cleaned = !pass.cleaned.is_empty();
            r = Some(pass);
            if cleaned {
                break;
            }
        }
        Ok(r)
    }

    // ------------------------------------------------------------------------------------
    // Passes
    // ------------------------------------------------------------------------------------

    pub(super) fn choose_victims(&self, policy: Policy, max: usize) -> Vec<u64> {
        let ifile = self.log.lock_ifile();
        let seg_bytes = self.sb.segment_blocks as u64 * self.sb.block_size as u64;
        policy::choose(&ifile.usage, seg_bytes, crate::log::now_secs(), policy, max)
    }

    /// Clean up to `max` segments chosen by `policy`, then checkpoint so they become reusable
    /// (a pass asked for: the control socket, tests).
    pub fn clean_pass(&self, policy: Policy, max: usize) -> Result<PassReport> {
        // A requested pass ends in a checkpoint that, like a commit, makes everything done
        // before it durable, cached file data included.
        self.writeback_all()?;
        self.clean_pass_for(policy, max, Gain::Blocks, PassOrigin::Requested)
    }

    fn clean_pass_for(
        &self,
        policy: Policy,
        max: usize,
        gain: Gain,
        origin: PassOrigin,
    ) -> Result<PassReport> {
        self.writable()?;
        let _one = self.cleaner.cleaning.lock();
        let victims = self.choose_victims(policy, max.saturating_mul(2));
        self.run_pass(victims, max as u64, gain, origin)
    }

    /// Clean exactly these segments (as far as they can be: the others are refused, with why).
    pub fn clean_segments(&self, segments: &[u64]) -> Result<PassReport> {
        self.writable()?;
        self.writeback_all()?;
        let _one = self.cleaner.cleaning.lock();
        self.run_pass(
            segments.to_vec(),
            segments.len() as u64,
            Gain::Blocks,
            PassOrigin::Requested,
        )
    }

    /// Why `seg` cannot be a victim, if it cannot.
    pub(super) fn not_a_victim(&self, seg: u64, head_seg: u64, next: u64) -> Option<&'static str> {
        if seg == 0 || seg >= self.sb.segments {
            return Some("no such log segment");
        }
        if seg == head_seg || seg == next {
            return Some("the log head is there");
        }
        let u = self.log.lock_ifile().usage[seg as usize];
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

    // ------------------------------------------------------------------------------------
    // Status and control
    // ------------------------------------------------------------------------------------

    pub fn thresholds(&self) -> Thresholds {
        self.cleaner
            .thresholds
            .lock()
            .unwrap_or_else(|| self.default_thresholds())
    }

    fn default_thresholds(&self) -> Thresholds {
        Thresholds::defaults(
            self.sb.segments - 1,
            self.reserve_segments(),
            self.segment_bytes(),
        )
    }

    pub fn set_thresholds(
        &self,
        update: &ThresholdUpdate,
    ) -> std::result::Result<Thresholds, String> {
        let t = {
            let mut set = self.cleaner.thresholds.lock();
            let t = update.apply(set.unwrap_or_else(|| self.default_thresholds()))?;
            *set = Some(t);
            // Admission reads it without the lock.
            self.cleaner
                .custom_min_free
                .store(t.min_free, Ordering::Release);
            t
        };
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
        let ifile = self.log.lock_ifile();
        UsageTable {
            segment_bytes: self.sb.segment_blocks as u64 * self.sb.block_size as u64,
            now: crate::log::now_secs(),
            segments: ifile
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

    pub fn cleaner_status(&self) -> Status {
        let sp = self.space();
        let (clean, live, dirty) = {
            let ifile = self.log.lock_ifile();
            let live: u64 = ifile.usage.iter().map(|u| u.live_bytes as u64).sum();
            let dirty = ifile
                .usage
                .iter()
                .filter(|u| u.flags & SEG_DIRTY != 0)
                .count() as u64;
            (ifile.clean_segments(), live, dirty)
        };
        let segment_bytes = self.sb.segment_blocks as u64 * self.sb.block_size as u64;
        let counters = self.cleaner_counters();
        let stats = self.stats();
        Status {
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
            // In the units of `live_bytes` (the limit counts inodes by the blocks they fill).
            live_limit_bytes: sp.live_limit_bytes.saturating_sub(
                self.inode_slack_bytes(self.cleaner.counts.applied_inodes.load(Ordering::Acquire)),
            ),
            idle_secs: self.idle_secs(),
            daemons: self.cleaner.daemons.load(Ordering::Acquire),
            thresholds: self.thresholds(),
            write_cost: counters.write_cost(),
            counters,
            log_blocks_written: stats.log_blocks_written,
            checkpoints: stats.checkpoints,
        }
    }
}

#[cfg(test)]
mod tests;
