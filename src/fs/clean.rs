//! The segment cleaner's mechanism: find what is still live in a segment and make it dirty,
//! so the next log write moves it to the head; the checkpoint after that finds the segment
//! dead and marks it clean. Liveness is decided against the current maps (inode map, node
//! map, block maps, meta-file maps), never trusted from the segment itself, so a stale or
//! lying summary can only cost work, not correctness.
//!
//! Policies (which segments, when) are in `crate::clean`.

use super::Fs;
use crate::format::bmap::{self, BlockPath};
use crate::format::inode::{check_inode_block, inode_in_block};
use crate::format::summary::Summary;
use crate::format::{BlockKind, BITMAP_ID, IFILE_ID};
use crate::log::{read_block, read_blocks};
use crate::meta::metafile::MetaFile;
use crate::{FsError, Result};

/// What cleaning one segment found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanStats {
    pub partial_segments: u64,
    pub blocks_examined: u64,
    /// Live blocks (inodes count one each) queued to move.
    pub live_moved: u64,
}

impl Fs {
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

    /// Queue every live block of `seg` to be rewritten at the log head.
    pub fn clean_segment(&self, seg: u64) -> Result<CleanStats> {
        self.writable()?;
        let mut stats = CleanStats::default();
        for (addr, summary) in self.segment_summaries(seg)? {
            stats.partial_segments += 1;
            let first = addr + summary.summary_blocks as u64;
            for (i, d) in summary.descriptors.iter().enumerate() {
                let a = first + i as u64;
                stats.blocks_examined += 1;
                stats.live_moved += match d.kind {
                    BlockKind::Inodes => self.move_inodes(a)?,
                    BlockKind::Node => self.move_node(d.owner, a)?,
                    BlockKind::Indirect => self.move_indirect(d.owner, d.level, d.index, a)?,
                    BlockKind::Symlink => self.move_symlink(d.owner, d.index, a)?,
                    BlockKind::Meta | BlockKind::MetaIndirect => {
                        self.move_meta(d.kind, d.owner, d.index, a)
                    }
                };
            }
        }
        Ok(stats)
    }

    fn move_inodes(&self, a: u64) -> Result<u64> {
        let block = read_block(&*self.meta, self.sb.block_size, a)?;
        let Ok(n) = check_inode_block(&block) else {
            return Ok(0);
        };
        let mut moved = 0;
        for slot in 1..=n {
            let Ok(d) = inode_in_block(&block, slot) else {
                continue;
            };
            let live = self
                .tables
                .lock()
                .ifile
                .entry(d.ino)
                .is_some_and(|e| e.addr == a && e.slot as usize == slot);
            if live {
                let e = match self.inode(d.ino) {
                    Ok(e) => e,
                    Err(FsError::Errno(libc::ENOENT)) => continue,
                    Err(x) => return Err(x),
                };
                let _g = self.gate.read();
                let mut st = e.state.write();
                if !st.deleted {
                    self.mark_dirty(&e, &mut st);
                    moved += 1;
                }
            }
        }
        Ok(moved)
    }

    fn move_node(&self, id: u64, a: u64) -> Result<u64> {
        if self.tables.lock().nodes.get(id) != a {
            return Ok(0);
        }
        let _g = self.gate.read();
        self.tree.mark_dirty(&self.nodes(), id)?;
        Ok(1)
    }

    fn move_indirect(&self, ino: u64, level: u8, index: u64, a: u64) -> Result<u64> {
        if self.tables.lock().ifile.entry(ino).is_none() || !(1..=3).contains(&level) {
            return Ok(0);
        }
        let e = match self.inode(ino) {
            Ok(e) => e,
            Err(FsError::Errno(libc::ENOENT)) => return Ok(0),
            Err(x) => return Err(x),
        };
        let _op = e.op.lock_arc();
        // Walk to the block the way a lookup would, loading what is missing.
        let Some(BlockPath::Indirect { steps, .. }) = bmap::path(index, self.ppb) else {
            return Ok(0);
        };
        if !steps.iter().any(|s| s.level == level && s.index == index) {
            return Ok(0);
        }
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
        if self.tables.lock().ifile.entry(ino).is_none() || index > 1 {
            return Ok(0);
        }
        let e = match self.inode(ino) {
            Ok(e) => e,
            Err(FsError::Errno(libc::ENOENT)) => return Ok(0),
            Err(x) => return Err(x),
        };
        let live = {
            let st = e.state.read();
            st.d.is_symlink()
                && st.d.inline.is_none()
                && !st.target_dirty
                && st.d.direct[index as usize] == a
        };
        if !live {
            return Ok(0);
        }
        let target = self.readlink(ino)?;
        let _g = self.gate.read();
        let mut st = e.state.write();
        if st.deleted || st.d.direct[index as usize] != a {
            return Ok(0);
        }
        st.long_target = Some(std::sync::Arc::new(target));
        st.target_dirty = true;
        self.mark_dirty(&e, &mut st);
        Ok(1)
    }

    fn move_meta(&self, kind: BlockKind, file: u64, index: u64, a: u64) -> u64 {
        let mut t = self.tables.lock();
        let mf: &mut MetaFile = match file {
            IFILE_ID => &mut t.ifile.file,
            BITMAP_ID => &mut t.data.file,
            _ => &mut t.nodes.file,
        };
        let live = match kind {
            BlockKind::Meta => mf.blocks.get(index as usize) == Some(&a),
            _ => mf.indirect.values().any(|&x| x == a),
        };
        if !live {
            return 0;
        }
        // Rewriting any block below an indirect block rewrites the indirect block too.
        if index < mf.len() {
            mf.mark_dirty(index);
        }
        1
    }
}

/// What a cleaning pass did.
#[derive(Clone, Debug, Default)]
pub struct PassReport {
    pub cleaned: Vec<u64>,
    pub stats: CleanStats,
    pub clean_before: u64,
    pub clean_after: u64,
}

impl Fs {
    pub fn clean_segments_count(&self) -> u64 {
        self.tables.lock().ifile.clean_segments()
    }

    /// Clean up to `max` segments chosen by `policy`, then checkpoint so they become reusable.
    pub fn clean_pass(&self, policy: crate::clean::Policy, max: usize) -> Result<PassReport> {
        let _one = self.cleaning.lock();
        let mut rep = PassReport {
            clean_before: self.clean_segments_count(),
            ..Default::default()
        };
        let victims = {
            let t = self.tables.lock();
            let seg_bytes = self.sb.segment_blocks as u64 * self.sb.block_size as u64;
            crate::clean::choose(
                &t.ifile.usage,
                seg_bytes,
                crate::log::now_secs(),
                policy,
                max,
            )
        };
        for seg in victims {
            let s = self.clean_segment(seg)?;
            rep.stats.partial_segments += s.partial_segments;
            rep.stats.blocks_examined += s.blocks_examined;
            rep.stats.live_moved += s.live_moved;
            rep.cleaned.push(seg);
        }
        // One checkpoint for the pass: it writes what moved and frees the dead segments.
        self.checkpoint(false)?;
        rep.clean_after = self.clean_segments_count();
        if !rep.cleaned.is_empty() {
            log::info!(
                "cleaned {} segments ({} live blocks moved): {} -> {} clean",
                rep.cleaned.len(),
                rep.stats.live_moved,
                rep.clean_before,
                rep.clean_after
            );
        }
        Ok(rep)
    }

    /// Clean segments when few are left. Called before an operation takes any lock, so the
    /// cleaner can lock what it moves; ENOSPC when cleaning cannot make room.
    pub(crate) fn admit(&self) -> Result<()> {
        self.writable()?;
        if self.clean_segments_count() >= self.reserve_segments() {
            return Ok(());
        }
        for _ in 0..4 {
            // A checkpoint alone frees segments whose blocks all died since the last one.
            self.checkpoint(false)?;
            if self.clean_segments_count() >= self.reserve_segments() {
                return Ok(());
            }
            let r = self.clean_pass(crate::clean::Policy::Greedy, 4)?;
            if self.clean_segments_count() >= self.reserve_segments() {
                return Ok(());
            }
            if r.cleaned.is_empty() {
                break;
            }
        }
        Err(FsError::Errno(libc::ENOSPC))
    }

    /// Clean segments kept back for the cleaner and checkpoints: writers see ENOSPC below it.
    pub(crate) fn reserve_segments(&self) -> u64 {
        (self.sb.segments / 50).clamp(4, 16)
    }

    /// Background cleaning threshold: start below this many clean segments.
    pub(crate) fn low_water_segments(&self) -> u64 {
        (self.sb.segments / 10).max(self.reserve_segments() + 4)
    }
}
