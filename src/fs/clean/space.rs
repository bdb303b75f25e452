//! The log's space: reserves, pending charges, and admission of operations.

use super::*;
use crate::format::inode::inodes_per_block;
use crate::format::meta::entries16_per_block;
use crate::format::meta::{SEG_ACTIVE, SEG_DIRTY, SEG_RESERVED};
use crate::fs::Fs;
use crate::{FsError, Result};
use std::sync::atomic::Ordering;

impl Fs {
    pub(super) fn geometry(&self) -> Geometry {
        Geometry {
            block_size: self.sb.block_size as u64,
            segment_blocks: self.sb.segment_blocks as u64,
            segments: self.sb.segments,
            ppb: self.ppb,
            ipb: inodes_per_block(self.sb.block_size) as u64,
        }
    }

    /// Bytes of log segment `seg`.
    pub(super) fn segment_bytes_of(&self, seg: u64) -> u64 {
        (self.sb.segment_end(seg) - self.sb.segment_start(seg)) * self.sb.block_size as u64
    }

    // ------------------------------------------------------------------------------------
    // Space accounting and admission
    // ------------------------------------------------------------------------------------

    pub fn clean_segments_count(&self) -> u64 {
        self.log.lock_ifile().clean_segments()
    }

    /// Clean segments only the cleaner may use: the worst case of a one-segment pass plus
    /// one for operations in flight.
    pub fn cleaner_reserve(&self) -> u64 {
        let g = self.geometry();
        // With what the meta files grow by once what is dirty is applied: writers admitted
        // between two flushes must not take the room the grown reserve then lacks.
        let meta_total =
            self.cleaner.counts.meta_total.load(Ordering::Acquire) + self.pending_meta_growth();
        g.pass_bound(1, meta_total).div_ceil(g.seg_eff()) + 1
    }

    /// Dirty inodes the next transaction writes (freed ones are records, not inodes).
    fn dirty_inodes_to_write(&self) -> u64 {
        let c = &self.cleaner.counts;
        c.dirty_inodes
            .load(Ordering::Acquire)
            .saturating_sub(c.tombstones.load(Ordering::Acquire))
    }

    /// Blocks the meta files grow by when what is dirty now is applied, at most: the
    /// inode-map blocks of new inodes and the node-map blocks of new nodes (live from the
    /// checkpoint after them on).
    fn pending_meta_growth(&self) -> u64 {
        let inodes = self.dirty_inodes_to_write();
        // With a meta-indirect block each.
        inodes.div_ceil(entries16_per_block(self.sb.block_size) as u64)
            + (self.ns.tree.dirty_count() as u64).div_ceil(self.ppb)
            + 2
    }

    /// Clean segments kept back from writers: they get ENOSPC before touching them. Deletes
    /// may use all but the cleaner's part.
    pub fn reserve_segments(&self) -> u64 {
        self.cleaner_reserve() + DELETE_SEGMENTS
    }

    /// Live bytes writers may reach (as `live_bytes_packed` counts them): beyond it they get
    /// ENOSPC, because cleaning a log that full would cost more than it gains. A twentieth of
    /// the log (at least two segments) stays free beyond the reserve.
    pub(super) fn live_limit_bytes(&self, reserve: u64) -> u64 {
        let g = self.geometry();
        let log = self.sb.segments - 1;
        let gap = (log / 20).max(2);
        log.saturating_sub(reserve + gap) * g.seg_eff() * g.block_size
    }

    /// Live bytes as the blocks they fill count them: an `INODES` block holds `ipb` inodes
    /// of `Ifile::INODE_BYTES`, less than a block, and the usage table counts only those
    /// bytes; the rest of the block is taken all the same. Without this, a log of small
    /// files was promised room up to a limit its blocks could not hold (no pass gained).
    pub(crate) fn live_bytes_packed(&self) -> u64 {
        let inodes = self.cleaner.counts.applied_inodes.load(Ordering::Acquire);
        self.live_bytes_total() + self.inode_slack_bytes(inodes)
    }

    /// The part of their blocks `inodes` inodes take beyond their live bytes.
    pub(crate) fn inode_slack_bytes(&self, inodes: u64) -> u64 {
        let g = self.geometry();
        let slack = g.block_size - g.ipb * crate::meta::ifile::Ifile::INODE_BYTES as u64;
        inodes * slack / g.ipb
    }

    /// Upper bound of the log blocks that writing everything pending now takes, with the
    /// checkpoint after it: the dirty inodes (packed), tree nodes and charged blocks, their
    /// summaries, and the meta blocks dirty now or dirtied by applying all that. Read from
    /// counters only (no lock).
    pub(crate) fn pending_blocks(&self) -> u64 {
        let g = self.geometry();
        let inodes = self.dirty_inodes_to_write();
        let records = self.log.records.count();
        let nodes = self.ns.tree.dirty_count() as u64;
        let freed = self.ns.tree.freed_count() as u64;
        // Cached data maps its blocks when written back: its indirect blocks are pending too.
        let charged = self.cleaner.charged.load(Ordering::Acquire)
            + self.cleaner.inflight.load(Ordering::Acquire)
            + self.cleaner.claimed.load(Ordering::Acquire)
            + self.cache.log_charge();
        let blocks = inodes.div_ceil(g.ipb) + nodes + charged;
        let meta = self.pending_meta_blocks(inodes, nodes + freed);
        let writing = self.cleaner.counts.writing.load(Ordering::Acquire);
        writing
            + blocks
            + g.summary_blocks(blocks, records + freed + charged)
            + g.checkpoint_blocks(meta)
    }

    /// The log's space as admission sees it, from counters only (no lock).
    pub(crate) fn space(&self) -> Space {
        let g = self.geometry();
        let c = &self.cleaner.counts;
        let cleaner_reserve = self.cleaner_reserve();
        let reserve = cleaner_reserve + DELETE_SEGMENTS;
        let dirty_inodes = self.dirty_inodes_to_write();
        let nodes = self.ns.tree.dirty_count() as u64;
        Space {
            clean: c.clean.load(Ordering::Acquire),
            pending: self.pending_blocks(),
            growth: self.cleaner.charged.load(Ordering::Acquire)
                + self.cleaner.inflight.load(Ordering::Acquire)
                + self.cache.log_charge(),
            // Inode blocks, tree nodes, and the meta blocks the next checkpoint writes for the
            // first time (the IFile grows by the inode map of new inodes): those become live
            // only then.
            dirty_blocks: dirty_inodes.div_ceil(g.ipb)
                + nodes
                + c.meta_unwritten.load(Ordering::Acquire)
                + self.pending_meta_growth(),
            seg_eff: g.seg_eff(),
            reserve,
            cleaner_reserve,
            live_limit_bytes: self.live_limit_bytes(reserve),
        }
    }

    /// Live bytes of the log by the applied transactions (no lock).
    pub(super) fn live_bytes_total(&self) -> u64 {
        self.cleaner.counts.live_bytes.load(Ordering::Acquire)
    }

    /// Is there room for `op` now?
    pub(super) fn fits(&self, sp: &Space, op: Admit) -> bool {
        // A replayed operation was admitted once already, with room the recovery may since
        // have spent (a fresh log segment): it may use every clean segment, the cleaner's
        // reserve too, rather than lose what was acknowledged (a full log can be cleaned or
        // freed later; a lost write cannot come back).
        let replaying = crate::intent::replaying();
        let reserved = op == Admit::Delete || replaying;
        let floor = if replaying {
            0
        } else if reserved {
            sp.cleaner_reserve
        } else {
            sp.reserve
        };
        if sp.clean * sp.seg_eff < sp.pending + floor * sp.seg_eff {
            return false;
        }
        if reserved {
            return true;
        }
        // Live bytes are all in dirty segments: no need to add them up while those could not
        // hold more than the limit anyway.
        let bs = self.sb.block_size as u64;
        let most = (self.sb.segments - 1 - sp.clean.min(self.sb.segments - 1))
            * self.sb.segment_blocks as u64
            * bs;
        let growth = (sp.growth + sp.dirty_blocks) * bs;
        most + growth <= sp.live_limit_bytes
            || self.live_bytes_packed() + growth <= sp.live_limit_bytes
    }

    /// Admit an operation that changes the file system. Called before the operation takes
    /// any lock, so the cleaner can lock what it moves. When the log is short of clean
    /// segments this writes what is pending, checkpoints and cleans (greedy, in this thread)
    /// until there is room; ENOSPC when there is none to be had. The operation's charge
    /// counts as pending until the returned guard is dropped.
    pub(crate) fn admit(&self, op: Admit) -> Result<Admission<'_>> {
        self.writable()?;
        let c = &self.cleaner;
        let charge = op.charge();
        c.inflight.fetch_add(charge, Ordering::AcqRel);
        let guard = Admission { fs: self, charge };
        c.last_write_ms
            .store(c.epoch.elapsed().as_millis() as u64, Ordering::Release);
        if op == Admit::Delete {
            c.deletes.fetch_add(1, Ordering::AcqRel);
        }
        let sp = self.space();
        self.wake_cleaner_if_low(&sp);
        if !self.fits(&sp, op) {
            self.make_room(op)?;
        }
        Ok(guard)
    }

    /// Count `blocks` log blocks an operation dirtied that the dirty counters do not show
    /// (call under the gate, so the next snapshot holds them).
    pub(crate) fn charge_log_blocks(&self, blocks: u64) {
        self.cleaner.charged.fetch_add(blocks, Ordering::AcqRel);
    }

    /// Charge the indirect blocks a change of file blocks `first..=last` may dirty.
    pub(crate) fn charge_block_range(&self, first: u64, last: u64) {
        self.charge_log_blocks(self.block_range_charge(first, last));
    }

    /// What `charge_block_range` charges: the indirect blocks on the range's paths, exactly
    /// (a file of 64–256 KiB dirties one; three per level-1 block, as this once counted,
    /// held six for it and made writers wait for room a small log had).
    pub(crate) fn block_range_charge(&self, first: u64, last: u64) -> u64 {
        crate::format::bmap::indirect_blocks_over(first, last, self.ppb)
    }

    pub(super) fn make_room(&self, op: Admit) -> Result<()> {
        self.cleaner.counters.lock().room_waits += 1;
        let _one = self.cleaner.room.lock();
        if self.fits(&self.space(), op) {
            return Ok(());
        }
        // What is pending was admitted against the room above the reserve: write it.
        self.sync_log()?;
        if self.fits(&self.space(), op) {
            return Ok(());
        }
        // Cached data whose write-back dirties indirect blocks holds room for them in the
        // pending count: write back those files (no op lock is held here), and only those:
        // the rest costs the log nothing and may still die in the cache.
        if self.cache.log_charge() > 0 {
            self.writeback_charged()?;
            self.sync_log()?;
            if self.fits(&self.space(), op) {
                return Ok(());
            }
        }
        let key = (
            self.clean_segments_count(),
            self.live_bytes_packed(),
            self.cleaner.deletes.load(Ordering::Acquire),
        );
        let enospc = || {
            self.cleaner.counters.lock().enospc += 1;
            Err(FsError::Errno(libc::ENOSPC))
        };
        if op != Admit::Delete {
            let sp = self.space();
            let growth = (sp.growth + sp.dirty_blocks) * self.sb.block_size as u64;
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
        // Passes that give a whole segment back at once first; when none can (the victims
        // are too full for that), passes that free more blocks than they write: they never
        // lower the clean segments, and each leaves the head's segment fuller, so the next
        // gains a segment. Each fits the room by its bound (the cleaner's reserve holds it).
        let mut last = None;
        for _ in 0..64 {
            if self.fits(&self.space(), op) {
                *self.cleaner.futile.lock() = None;
                return Ok(());
            }
            let Some(r) = self.write_path_pass(op)? else {
                *self.cleaner.futile.lock() = None;
                return Ok(());
            };
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
            self.live_bytes_packed(),
            sp.live_limit_bytes
        );
        if op != Admit::Delete {
            *self.cleaner.futile.lock() = Some((
                self.clean_segments_count(),
                self.live_bytes_packed(),
                self.cleaner.deletes.load(Ordering::Acquire),
            ));
        }
        enospc()
    }
}

impl Fs {
    /// Log bytes writers may still fill, for statfs: the clean segments above the reserve
    /// plus the dead bytes cleaning can take back, at most up to the live limit, less what
    /// is pending. `in_use` inodes are allocated now: those made or freed since the last
    /// applied transaction count at once (a burst of creates or unlinks shows right away).
    pub(crate) fn log_room_bytes(&self, in_use: u64) -> u64 {
        let sp = self.space();
        let bs = self.sb.block_size as u64;
        let seg_bytes = self.sb.segment_blocks as u64 * bs;
        // The last attempt to make room for a writer failed and nothing changed since: there
        // is none, whatever the estimate below would say.
        let now = (
            self.clean_segments_count(),
            self.live_bytes_packed(),
            self.cleaner.deletes.load(Ordering::Acquire),
        );
        if *self.cleaner.futile.lock() == Some(now) {
            return 0;
        }
        let (live, dead) = {
            let ifile = self.log.lock_ifile();
            let mut live = 0u64;
            let mut dead = 0u64;
            // Dead space is worth counting in segments cleaning can reclaim even with the
            // clean segments down to the reserve: cleaning k of them, utilization u, with
            // k*u segments of room gains k*(1-u) >= 1 for u <= (R-1)/R. (The meta blocks a
            // pass rewrites are left out: greedy passes find the emptiest segments first,
            // and the estimate stays within a few percent of what creates then find, where
            // charging every pass with them made it promise nothing; and when writers were
            // refused, the check above says so.)
            let r = sp.reserve.max(2) as f64;
            let reclaim = ((r - 1.0) / r).min(super::policy::MAX_VICTIM_UTILIZATION);
            for u in &ifile.usage {
                live += u.live_bytes as u64;
                let victim = u.flags & SEG_DIRTY != 0 && u.flags & (SEG_ACTIVE | SEG_RESERVED) == 0;
                if victim && (u.live_bytes as f64) <= reclaim * seg_bytes as f64 {
                    dead += seg_bytes - (u.live_bytes as u64).min(seg_bytes);
                }
            }
            (live, dead)
        };
        let applied = self.cleaner.counts.applied_inodes.load(Ordering::Acquire);
        let live = live + self.inode_slack_bytes(applied);
        let per = self.file_log_bytes();
        let made = in_use.saturating_sub(applied) * per;
        let freed = applied.saturating_sub(in_use) * per;
        // The clean room already has the pending inodes' blocks taken off (pending).
        let clean_room =
            (sp.clean.saturating_sub(sp.reserve) * sp.seg_eff * bs).saturating_sub(sp.pending * bs);
        // Meta-file blocks never written become live at the next checkpoint (admission counts
        // them too).
        let meta_new = (self.cleaner.counts.meta_unwritten.load(Ordering::Acquire)
            + self.pending_meta_growth())
            * bs;
        let by_limit =
            (sp.live_limit_bytes + freed).saturating_sub(live + made + meta_new + sp.growth * bs);
        by_limit.min(clean_room + dead + freed)
    }

    /// Log bytes one more file takes: its share of an INODES block, and its directory entry
    /// in a tree leaf (an entry of a 16-byte name in a leaf two-thirds full: 64 bytes).
    pub(crate) fn file_log_bytes(&self) -> u64 {
        self.sb.block_size as u64 / inodes_per_block(self.sb.block_size) as u64 + 64
    }

    /// Log bytes an operation needs free beyond what it adds: its in-flight charge and the
    /// indirect blocks a small write is charged for. statfs keeps them back, so that what it
    /// shows free can be had one operation at a time.
    pub(crate) fn op_headroom_bytes(&self) -> u64 {
        (OP_BLOCKS + 6) * self.sb.block_size as u64
    }
}
