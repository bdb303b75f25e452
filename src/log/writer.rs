//! The segment writer: lays transactions out as partial segments at the log head, picks the
//! segments the log continues in, and writes summaries plus blocks.
//!
//! Layout is planned before the blocks are encoded (the file system must know the addresses
//! of indirect blocks to store them in their parents), and only then written. A plan is pure;
//! `commit` moves the head. Flushes are serialized by the caller, so nobody plans in between.

use crate::device::BlockDevice;
use crate::format::meta::{SEG_ACTIVE, SEG_DIRTY};
use crate::format::summary::{Descriptor, Record, Summary, SS_CONT};
use crate::format::superblock::Superblock;
use crate::meta::ifile::Ifile;
use crate::{FsError, Result};
use std::sync::Arc;

/// Where the log continues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHead {
    /// Log address of the next partial segment.
    pub addr: u64,
    /// The segment the log moves to when the head's segment is full.
    pub next_segment: u64,
    /// Serial of the next partial segment.
    pub serial: u64,
    /// Serial of the checkpoint this log follows.
    pub ckpt_serial: u64,
}

/// One planned partial segment.
#[derive(Clone, Debug)]
pub struct PartPlan {
    pub addr: u64,
    pub summary_blocks: u16,
    pub nblocks: usize,
    pub record_cap: usize,
    pub serial: u64,
    pub next_segment: u64,
}

/// The addresses of blocks `first..first + n` of a transaction planned as `parts`, in
/// transaction order (each part's blocks follow its summary blocks).
pub fn part_addrs(parts: &[PartPlan], mut first: usize, n: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    for p in parts {
        if out.len() == n {
            break;
        }
        if first >= p.nblocks {
            first -= p.nblocks;
            continue;
        }
        let start = p.addr + p.summary_blocks as u64;
        let take = (p.nblocks - first).min(n - out.len());
        out.extend((first..first + take).map(|i| start + i as u64));
        first = 0;
    }
    assert_eq!(out.len(), n, "blocks beyond the plan");
    out
}

/// Where a transaction goes.
#[derive(Clone, Debug)]
pub struct Plan {
    pub parts: Vec<PartPlan>,
    /// Address of each block, in transaction order.
    pub addrs: Vec<u64>,
    /// Segments the plan writes into (the head's first).
    pub segments: Vec<u64>,
    /// The head after the transaction.
    pub end: LogHead,
}

/// A block ready to be written.
pub struct TxnBlock {
    pub desc: Descriptor,
    pub bytes: Vec<u8>,
}

pub struct LogWriter {
    sb: Arc<Superblock>,
    dev: Arc<dyn BlockDevice>,
    pub head: LogHead,
}

impl LogWriter {
    pub fn new(sb: Arc<Superblock>, dev: Arc<dyn BlockDevice>, head: LogHead) -> LogWriter {
        LogWriter { sb, dev, head }
    }

    fn bs(&self) -> u32 {
        self.sb.block_size
    }

    /// A clean segment to continue in, after `after`, avoiding `busy`.
    pub fn pick_segment(sb: &Superblock, ifile: &Ifile, after: u64, busy: &[u64]) -> Option<u64> {
        let n = sb.segments;
        (1..n)
            .map(|i| (after + i) % n)
            .find(|&s| s != 0 && ifile.usage[s as usize].is_clean() && !busy.contains(&s))
    }

    /// Plan `nblocks` blocks and up to `max_records` records. Fails with ENOSPC when the log
    /// would need a segment and none is clean.
    pub fn plan(&self, ifile: &Ifile, nblocks: usize, max_records: usize) -> Result<Plan> {
        let mut plan = self.plan_parts(ifile, nblocks, max_records)?;
        plan.addrs = part_addrs(&plan.parts, 0, nblocks);
        Ok(plan)
    }

    /// `plan` without the list of block addresses (`addrs` left empty): O(partial segments),
    /// for the log writer's exclusive phase, which hands out addresses by position and lists
    /// them after the gate (`part_addrs`).
    pub fn plan_parts(&self, ifile: &Ifile, nblocks: usize, max_records: usize) -> Result<Plan> {
        let bs = self.bs();
        let mut h = self.head;
        let mut parts = Vec::new();
        let mut segments = vec![self.sb.segment_of(h.addr)];
        let (mut blocks_left, mut recs_left) = (nblocks, max_records);
        // Invariant: the head always has at least 2 blocks of room in its segment, so its
        // segment is `segment_of(addr)` (an address at a segment's very end would name the next).
        let mut seg = self.sb.segment_of(h.addr);
        while blocks_left > 0 || recs_left > 0 {
            let room = (self.sb.segment_end(seg) - h.addr) as usize;
            debug_assert!(room >= 2);
            // Records go first (they are few); then as many blocks as fit.
            let r = recs_left.min(Self::records_fitting(bs, room - 1));
            let mut k = blocks_left.min(room - 1);
            while k > 0 && Summary::blocks_needed(bs, k, r) + k > room {
                let over = Summary::blocks_needed(bs, k, r) + k - room;
                k = k.saturating_sub(over.max(1));
            }
            let s = Summary::blocks_needed(bs, k, r);
            debug_assert!(s + k <= room);
            parts.push(PartPlan {
                addr: h.addr,
                summary_blocks: s as u16,
                nblocks: k,
                record_cap: r,
                serial: h.serial,
                next_segment: h.next_segment,
            });
            h.addr += (s + k) as u64;
            h.serial += 1;
            blocks_left -= k;
            recs_left -= r;
            if self.sb.segment_end(seg) - h.addr < 2 {
                let next = h.next_segment;
                let busy: Vec<u64> = segments.iter().copied().chain([next]).collect();
                let after = LogWriter::pick_segment(&self.sb, ifile, next, &busy)
                    .ok_or(FsError::Errno(libc::ENOSPC))?;
                h.addr = self.sb.segment_start(next);
                h.next_segment = after;
                seg = next;
                segments.push(next);
            }
        }
        Ok(Plan {
            parts,
            addrs: Vec::new(),
            segments,
            end: h,
        })
    }

    /// Records that fit, with no blocks, in `blocks` summary blocks.
    fn records_fitting(bs: u32, blocks: usize) -> usize {
        (blocks * bs as usize - crate::format::summary::SUMMARY_HEADER)
            / crate::format::summary::RECORD_SIZE
    }

    /// Move the head to the plan's end and update segment flags: every segment written is
    /// DIRTY (never reused before the next checkpoint), the head's and next segment ACTIVE.
    pub fn commit(&mut self, ifile: &mut Ifile, plan: &Plan) {
        let old_active = [self.sb.segment_of(self.head.addr), self.head.next_segment];
        for &s in &plan.segments {
            ifile.set_seg_flags(s, SEG_DIRTY, 0);
        }
        self.head = plan.end;
        let new_active = [self.sb.segment_of(self.head.addr), self.head.next_segment];
        for s in old_active {
            if !new_active.contains(&s) {
                ifile.set_seg_flags(s, 0, SEG_ACTIVE);
            }
        }
        for s in new_active {
            ifile.set_seg_flags(s, SEG_ACTIVE, 0);
        }
    }

    /// Write a planned transaction (no device flush). `extra_flags` is OR-ed into every part.
    pub fn write(
        &self,
        plan: &Plan,
        blocks: &[TxnBlock],
        records: &[Record],
        extra_flags: u16,
    ) -> Result<()> {
        let bs = self.bs() as usize;
        assert_eq!(blocks.len(), plan.addrs.len(), "plan and blocks disagree");
        let (mut bi, mut ri) = (0usize, 0usize);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        for (pi, part) in plan.parts.iter().enumerate() {
            let last = pi + 1 == plan.parts.len();
            let these = &blocks[bi..bi + part.nblocks];
            let nrec = if last {
                records.len() - ri
            } else {
                part.record_cap.min(records.len() - ri)
            };
            assert!(nrec <= part.record_cap, "more records than planned");
            let mut crc = crc32fast::Hasher::new();
            for b in these {
                assert_eq!(b.bytes.len(), bs);
                crc.update(&b.bytes);
            }
            let summary = Summary {
                flags: extra_flags | if last { 0 } else { SS_CONT },
                data_crc: crc.finalize(),
                serial: part.serial,
                ckpt_serial: self.head_ckpt_serial(),
                uuid_tag: self.sb.uuid_tag(),
                create_ns: now,
                next_segment: part.next_segment,
                summary_blocks: part.summary_blocks,
                descriptors: these.iter().map(|b| b.desc).collect(),
                records: records[ri..ri + nrec].to_vec(),
            };
            let mut buf = summary.encode(self.bs());
            buf.reserve(these.len() * bs);
            for b in these {
                buf.extend_from_slice(&b.bytes);
            }
            self.dev.write_at(&buf, part.addr * bs as u64)?;
            bi += part.nblocks;
            ri += nrec;
        }
        debug_assert_eq!(ri, records.len());
        Ok(())
    }

    fn head_ckpt_serial(&self) -> u64 {
        self.head.ckpt_serial
    }

    pub fn flush(&self) -> Result<()> {
        Ok(self.dev.flush()?)
    }
}
