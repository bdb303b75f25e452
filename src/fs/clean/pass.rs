//! One cleaning pass (docs/DESIGN.md, "Cleaning and the reserve"), in its phases: the room
//! it may write into; the victims whose bound fits it; the prefix of them that gains most;
//! the moves of what is live; one checkpoint (two when a victim's last live blocks were
//! meta-file blocks); and what it wrote, held against its bound.

use super::report::PassReport;
use super::{Claim, CostAcc, Gain, Geometry, PassOrigin, SegmentScan};
use crate::fs::Fs;
use crate::log::checkpoint::Item;
use crate::Result;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

/// Where a pass starts: the log head's segment, the next one it takes, the room left in
/// the head's, and how many log blocks the pass may write.
struct PassRoom {
    head_seg: u64,
    next: u64,
    head_room: u64,
    budget: u64,
    seg_eff: u64,
}

impl PassRoom {
    /// Clean segments a write of `blocks` takes (the head's room first).
    fn consumed(&self, blocks: u64) -> u64 {
        blocks
            .saturating_sub(self.head_room.saturating_sub(3))
            .div_ceil(self.seg_eff)
    }

    /// By how much a pass of `k` victims writing `bound` blocks gains, if it does: a whole
    /// segment back now, or more blocks freed than written. Then the clean segments do not
    /// drop (the writes take at most k of them) and the head's segment fills, so later
    /// passes gain.
    fn margin(&self, gain: Gain, k: u64, bound: u64) -> Option<u64> {
        match gain {
            Gain::Segment => k.checked_sub(self.consumed(bound)).filter(|&m| m > 0),
            Gain::Blocks => (k * self.seg_eff).checked_sub(bound).filter(|&m| m > 0),
        }
    }
}

/// The victims a pass runs, what they make the log write, and the claims of its
/// checkpoints (fixed once the victims are: the pass changes no meta file's shape).
struct PassPlan {
    scans: Vec<SegmentScan>,
    bound: u64,
    first_claim: BTreeSet<Item>,
    second_claim: BTreeSet<Item>,
}

impl Fs {
    /// Clean up to `max` of `candidates`, in order, as far as the clean segments hold the
    /// bound of what that writes; nothing if the pass would not make the `gain`.
    pub(super) fn run_pass(
        &self,
        candidates: Vec<u64>,
        max: u64,
        gain: Gain,
        origin: PassOrigin,
    ) -> Result<PassReport> {
        let g = self.geometry();
        // Write what is pending first: the pass then starts from a known state, and what it
        // writes is its own.
        self.sync_log()?;
        let mut rep = PassReport {
            clean_before: self.clean_segments_count(),
            ..Default::default()
        };
        let room = self.pass_room(&g, rep.clean_before, origin);
        let (scans, acc) = self.take_victims(candidates, max, &room, &g, &mut rep)?;
        let Some(plan) = self.plan_pass(scans, acc, &room, gain, &g, &mut rep) else {
            rep.clean_after = rep.clean_before;
            return Ok(rep);
        };
        rep.bound_blocks = plan.bound;
        // Claim the bound, so writers see it as pending while the pass runs.
        self.cleaner.claimed.fetch_add(plan.bound, Ordering::AcqRel);
        let _claim = Claim {
            fs: self,
            blocks: plan.bound,
        };
        let moved = self.move_victims(&plan.scans, &g, &mut rep)?;
        // Tests stop a pass here: its claim held, what it moved dirty.
        #[cfg(test)]
        if origin == PassOrigin::Background {
            self.cleaner.wake.pause_point();
        }
        let written = self.checkpoint_pass(&plan, &moved, &g)?;
        rep.bytes_written = written * g.block_size;
        self.tally_pass(&plan, written, origin, &mut rep);
        Ok(rep)
    }

    /// The room a pass may write into: the clean segments and the head's, less everything
    /// pending; beside operations (`Background`), a quarter of what is above the writers'
    /// reserve, so it is not in their way: admission counts a running pass about twice (its
    /// claim until it ends, and what it moved, dirty and then written, meanwhile), and the
    /// quarter leaves writers admitted while it runs the other half.
    fn pass_room(&self, g: &Geometry, clean: u64, origin: PassOrigin) -> PassRoom {
        let (head_seg, next, head_room) = {
            let fl = self.log.flusher();
            let h = fl.writer.head;
            let seg = self.sb.segment_of(h.addr);
            (seg, h.next_segment, self.sb.segment_end(seg) - h.addr)
        };
        let room = clean * g.seg_eff() + head_room.saturating_sub(3);
        let mut budget = room.saturating_sub(self.pending_blocks());
        if origin == PassOrigin::Background {
            budget = budget.saturating_sub(self.space().reserve * g.seg_eff()) / 4;
        }
        PassRoom {
            head_seg,
            next,
            head_room,
            budget,
            seg_eff: g.seg_eff(),
        }
    }

    /// Scan candidates in order while what they make the log write fits the room; the
    /// others are refused, with why. Returns the scans and what they write together.
    fn take_victims(
        &self,
        candidates: Vec<u64>,
        max: u64,
        room: &PassRoom,
        g: &Geometry,
        rep: &mut PassReport,
    ) -> Result<(Vec<SegmentScan>, CostAcc)> {
        // No copy of the accumulator per prefix: copying its sets for every victim made
        // choosing cost a third of an 18-segment pass; `plan_pass` adds the prefixes up again
        // once.
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
            if let Some(why) = self.not_a_victim(seg, room.head_seg, room.next) {
                rep.refused.push((seg, why.into()));
                continue;
            }
            let scan = self.scan_segment(seg)?;
            acc.add(&scan, g.ppb);
            if acc.bound(&self.lock_tables().tables(), g) > room.budget {
                rep.refused
                    .push((seg, "its live blocks do not fit the clean segments".into()));
                // Candidates come best first: after two misfits the rest will hardly fit.
                misfits += 1;
                // Take it back out (the sets cannot lose one victim's items in place).
                acc = CostAcc::of(&scans, g.ppb);
                continue;
            }
            scans.push(scan);
        }
        rep.refused
            .extend(candidates.map(|s| (s, "the pass is full".to_string())));
        Ok((scans, acc))
    }

    /// The prefix of the victims that gains most (the longest of equals), with its bound and
    /// its checkpoints' claims; `None` (every victim refused) when no prefix gains. Victims
    /// come best first, but one full of meta blocks or inodes can cost more than it frees,
    /// and must not sink the ones before it.
    fn plan_pass(
        &self,
        mut scans: Vec<SegmentScan>,
        acc: CostAcc,
        room: &PassRoom,
        gain: Gain,
        g: &Geometry,
        rep: &mut PassReport,
    ) -> Option<PassPlan> {
        let best = {
            let mut locked = self.lock_tables();
            let t = locked.tables();
            let mut best: Option<(u64, usize)> = None;
            let mut prefix = CostAcc::default();
            for (i, scan) in scans.iter().enumerate() {
                prefix.add(scan, g.ppb);
                if let Some(m) = room.margin(gain, i as u64 + 1, prefix.bound(&t, g)) {
                    if best.is_none_or(|(bm, _)| m >= bm) {
                        best = Some((m, i + 1));
                    }
                }
            }
            best.map_or(0, |(_, k)| k)
        };
        let acc = if best > 0 && best < scans.len() {
            for s in scans.drain(best..) {
                rep.refused
                    .push((s.seg, "cleaning it too would gain less".into()));
            }
            CostAcc::of(&scans, g.ppb)
        } else {
            acc
        };
        let (bound, first_claim, second_claim) = {
            let mut locked = self.lock_tables();
            let t = locked.tables();
            (
                acc.bound(&t, g),
                acc.first_checkpoint(&t, g),
                acc.second_checkpoint(&t, g),
            )
        };
        if scans.is_empty() || best == 0 || room.margin(gain, best as u64, bound).is_none() {
            for s in scans {
                rep.refused
                    .push((s.seg, "cleaning would not gain a segment".into()));
            }
            return None;
        }
        Some(PassPlan {
            scans,
            bound,
            first_claim,
            second_claim,
        })
    }

    /// Move what is still live in the victims; returns what the moves really dirtied (the
    /// union of the items found still live).
    fn move_victims(
        &self,
        scans: &[SegmentScan],
        g: &Geometry,
        rep: &mut PassReport,
    ) -> Result<CostAcc> {
        let mut moved = CostAcc::default();
        for s in scans {
            rep.partial_segments += s.partial_segments;
            rep.blocks_examined += s.blocks_examined;
            let mut still = SegmentScan::default();
            for &(addr, item) in &s.items {
                if self.move_live(addr, item)? > 0 {
                    still.items.push((addr, item));
                }
            }
            rep.live_moved += still.items.len() as u64;
            moved.add(&still, g.ppb);
        }
        Ok(moved)
    }

    /// One checkpoint for the pass: it writes what moved and frees the dead segments. A
    /// victim whose last live blocks were meta-file blocks dies only in that checkpoint (it
    /// relocates them): one more frees it, and the bound holds that one only when a victim
    /// held meta blocks. Returns the log blocks the pass wrote for itself (writers go on
    /// meanwhile, and their blocks share its transaction and checkpoints): its moves'
    /// transaction, and of each checkpoint the blocks in that checkpoint's claim.
    fn checkpoint_pass(&self, plan: &PassPlan, moved: &CostAcc, g: &Geometry) -> Result<u64> {
        let first = {
            let mut fl = self.log.flusher();
            self.checkpoint_written(&mut fl, false)?
        };
        let dead_but_dirty = {
            let ifile = self.log.lock_ifile();
            plan.scans.iter().any(|s| {
                let u = ifile.usage[s.seg as usize];
                u.live_bytes == 0 && !u.is_clean()
            })
        };
        let second = if dead_but_dirty && !plan.second_claim.is_empty() {
            let mut fl = self.log.flusher();
            self.checkpoint_written(&mut fl, false)?
        } else {
            Vec::new()
        };
        Ok(moved.written(
            g,
            &[
                (&plan.first_claim, &first[..]),
                (&plan.second_claim, &second[..]),
            ],
        ))
    }

    /// Which victims are clean now, what the pass freed, and the counters; a pass that wrote
    /// more than its bound is a bug the reserve argument cannot survive.
    fn tally_pass(&self, plan: &PassPlan, written: u64, origin: PassOrigin, rep: &mut PassReport) {
        {
            let ifile = self.log.lock_ifile();
            for s in &plan.scans {
                if ifile.usage[s.seg as usize].is_clean() {
                    rep.cleaned.push(s.seg);
                    rep.bytes_freed += self.segment_bytes_of(s.seg).saturating_sub(s.live_bytes);
                } else {
                    let live = ifile.usage[s.seg as usize].live_bytes;
                    rep.refused.push((
                        s.seg,
                        format!("still holds {live} live bytes after the pass"),
                    ));
                }
            }
        }
        rep.clean_after = self.clean_segments_count();
        let bound = plan.bound;
        // The reserve argument (docs/DESIGN.md, "Cleaning and the reserve") rests on this.
        if written > bound {
            log::error!(
                "cleaning pass wrote {written} log blocks, over its bound of {bound}: {rep:?}"
            );
            debug_assert!(false, "cleaning pass over its bound: {written} > {bound}");
        }
        if rep.cleaned.is_empty() {
            return;
        }
        let mut c = self.cleaner.counters.lock();
        c.passes += 1;
        match origin {
            PassOrigin::WritePath => c.write_path_passes += 1,
            PassOrigin::Background => c.background_passes += 1,
            PassOrigin::Requested => c.requested_passes += 1,
        }
        c.segments_cleaned += rep.cleaned.len() as u64;
        c.live_moved += rep.live_moved;
        c.bytes_written += rep.bytes_written;
        c.bytes_freed += rep.bytes_freed;
        log::info!(
            "cleaned {} segments ({} live blocks moved, {} log blocks written, bound {}): {} \
             -> {} clean",
            rep.cleaned.len(),
            rep.live_moved,
            written,
            bound,
            rep.clean_before,
            rep.clean_after
        );
    }
}
