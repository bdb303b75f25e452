//! fallocate(2): preallocating (mode 0, FALLOC_FL_KEEP_SIZE), punching holes
//! (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE) and zeroing ranges (FALLOC_FL_ZERO_RANGE).
//! Other modes (COLLAPSE_RANGE, INSERT_RANGE, UNSHARE_RANGE, ...) are EOPNOTSUPP.
//!
//! Preallocated blocks are *unwritten*: their pointers carry `UNWRITTEN` (docs/FORMAT.md) and
//! they read as zeros without a byte written to the device, whatever the block held before.
//! A write into one writes the whole block (zero-padded) and then clears the flag in the
//! same operation that records the write, so after a crash the block reads either as zeros
//! or with the write (docs/DESIGN.md, "Preallocation and holes"). Zeroing a range marks its
//! whole written blocks unwritten (one pointer change each, no data written) and zeroes the
//! partial blocks at its ends in place; punching frees whole blocks and zeroes partial ones.
//!
//! Every change is all or nothing: the data blocks an operation needs are reserved, and the
//! log room for its indirect blocks admitted, before anything changes; ENOSPC leaves the
//! file as it was.

use super::file::regular_size;
use crate::format::bmap::{max_blocks, unwritten, DataPtr};
use crate::format::summary::Record;
use crate::fs::attrs::flags::Change;
use crate::fs::clean::Admit;
use crate::fs::inode::bmap;
use crate::fs::inode::InodeEntry;
use crate::fs::types::{Caller, Timespec};
use crate::fs::Fs;
use crate::{FsError, Result};
use std::sync::Arc;

const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;
const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;

/// What a fallocate mode asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Allocate the holes of the range; extend the size unless `keep_size`.
    Allocate { keep_size: bool },
    /// Free the whole blocks of the range, zero the partial ones (always keeps the size).
    Punch,
    /// Make the range read as zeros, allocated; extend the size unless `keep_size`.
    Zero { keep_size: bool },
}

impl Mode {
    /// The modes DualFS implements, as Linux checks them (vfs_fallocate): anything else is
    /// EOPNOTSUPP, as is PUNCH_HOLE without KEEP_SIZE or with ZERO_RANGE.
    fn parse(mode: i32) -> Result<Mode> {
        let keep_size = mode & KEEP_SIZE != 0;
        match mode & !KEEP_SIZE {
            0 => Ok(Mode::Allocate { keep_size }),
            PUNCH_HOLE if keep_size => Ok(Mode::Punch),
            ZERO_RANGE => Ok(Mode::Zero { keep_size }),
            _ => Err(FsError::Errno(libc::EOPNOTSUPP)),
        }
    }
}

/// The pointers of a range, sorted out: runs of holes to allocate (first block, count), and
/// whole written blocks to mark unwritten (block, data address).
#[derive(Default)]
pub(crate) struct RangeMap {
    holes: Vec<(u64, u64)>,
    written: Vec<(u64, u64)>,
}

impl RangeMap {
    fn hole_count(&self) -> u64 {
        self.holes.iter().map(|r| r.1).sum()
    }
}

impl Fs {
    /// fallocate(2) of `len` bytes at `offset` through handle `fh`; `mode` as Linux's.
    pub fn fallocate(&self, ino: u64, fh: u64, offset: u64, len: u64, mode: i32) -> Result<()> {
        self.fallocate_as(&Caller::ROOT, ino, fh, offset, len, mode)
    }

    /// fallocate by `caller`: without CAP_FSETID it takes set-ID bits away, in every mode
    /// (attrs/privileges.rs).
    pub fn fallocate_as(
        &self,
        caller: &Caller,
        ino: u64,
        fh: u64,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<()> {
        let raw_mode = mode;
        let mode = Mode::parse(mode)?;
        if len == 0 {
            return Err(FsError::Errno(libc::EINVAL));
        }
        let bs = self.sb.block_size as u64;
        let largest = max_blocks(self.ppb) * bs;
        let end = offset.saturating_add(len);
        let end = match mode {
            // Nothing is mapped past the largest file: a punch there has nothing to do.
            Mode::Punch => end.min(largest),
            _ if end > largest => return Err(FsError::Errno(libc::EFBIG)),
            _ => end,
        };
        if offset >= end {
            // A punch wholly past the largest file: nothing to do, once the handle is known.
            self.handle_of(ino, fh, 0)?;
            return Ok(());
        }
        let (first, last) = (offset / bs, end.div_ceil(bs) - 1);
        let _admitted = match mode {
            Mode::Punch => self.admit(Admit::Delete)?,
            _ => self.admit(Admit::Map(self.block_range_charge(first, last)))?,
        };
        if self.handle_of(ino, fh, 0)?.ino != ino {
            return Err(FsError::Errno(libc::EBADF));
        }
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        // As vfs_fallocate: an append-only file may still be allocated (nothing it holds
        // changes), an immutable one not at all.
        self.check_entry(
            &e,
            match mode {
                Mode::Allocate { .. } => Change::Append,
                Mode::Zero { .. } | Mode::Punch => Change::Modify,
            },
        )?;
        let size = match regular_size(&e) {
            Err(FsError::Errno(libc::EINVAL)) => return Err(FsError::Errno(libc::ENODEV)),
            r => r?,
        };
        // It changes the block map as a write-back would: the cached data goes first.
        self.writeback_locked(&e)?;
        self.cache.forget_tail(e.ino);
        self.preload_range(&e, first, last + 1)?;
        self.contents_changed_by(caller, &e);
        match mode {
            Mode::Allocate { keep_size } => {
                self.allocate_locked(&e, size, (offset, end), keep_size, false)
            }
            Mode::Zero { keep_size } => {
                self.allocate_locked(&e, size, (offset, end), keep_size, true)
            }
            Mode::Punch => self.punch_locked(&e, offset, end),
        }?;
        self.record_fallocate(&e, offset, end - offset, raw_mode);
        Ok(())
    }

    /// Cache every indirect block that maps some of file blocks [from, end).
    pub(crate) fn preload_range(&self, e: &InodeEntry, from: u64, end: u64) -> Result<()> {
        self.walk_blocks(e, from, end, &mut |_, _, _| true)
    }

    /// The holes of file blocks [from, end), and (with `whole` = [lo, hi)) the written blocks
    /// inside `whole`. A pointer there that names no block on the data device is corruption
    /// (EIO): nothing is changed then.
    pub(crate) fn range_map(
        &self,
        e: &InodeEntry,
        (from, end): (u64, u64),
        whole: (u64, u64),
    ) -> Result<RangeMap> {
        let mut m = RangeMap::default();
        let mut bad = None;
        let data_blocks = self.sb.data_blocks;
        self.walk_blocks(e, from, end, &mut |n, count, raw| {
            let ptr = DataPtr::decode(raw);
            match ptr {
                DataPtr::Hole => match m.holes.last_mut() {
                    Some(h) if h.0 + h.1 == n => h.1 += count,
                    _ => m.holes.push((n, count)),
                },
                _ if ptr.addr().is_some_and(|a| a == 0 || a >= data_blocks) => {
                    bad = Some((n, raw));
                    return false;
                }
                DataPtr::Written(a) if n >= whole.0 && n < whole.1 => m.written.push((n, a)),
                _ => {}
            }
            true
        })?;
        match bad {
            Some((n, raw)) => Err(FsError::corrupt(
                "block map",
                format!("inode {}: file block {n} has data pointer {raw:#x}", e.ino),
            )),
            None => Ok(m),
        }
    }

    /// Reserve data blocks for the holes of `m`: their addresses, in file block order.
    fn reserve_holes(&self, e: &Arc<InodeEntry>, m: &RangeMap) -> Result<Vec<(u64, u64)>> {
        let n = m.hole_count();
        if n == 0 {
            return Ok(Vec::new());
        }
        self.alloc_data_retrying(e, n, m.holes[0].0, true)
    }

    /// Point the holes of `m` at the reserved `runs`, as unwritten blocks, and log the
    /// allocation (the caller holds the gate and the state lock).
    fn map_unwritten(
        &self,
        st: &mut crate::fs::inode::InodeState,
        m: &RangeMap,
        runs: &[(u64, u64)],
    ) {
        let mut addrs = runs.iter().flat_map(|&(s, c)| s..s + c);
        for &(first, count) in &m.holes {
            let ptrs: Vec<u64> = addrs.by_ref().take(count as usize).map(unwritten).collect();
            assert_eq!(ptrs.len() as u64, count, "a block reserved for every hole");
            bmap::set_run(st, first, &ptrs, self.ppb)
                .expect("indirect blocks were loaded under the op lock");
        }
        assert!(addrs.next().is_none(), "more blocks reserved than holes");
        st.d.blocks += m.hole_count();
        self.record_allocations(runs);
    }

    /// Mode 0 and KEEP_SIZE: allocate the holes of [offset, end) as unwritten blocks. With
    /// `zero` (ZERO_RANGE) the range reads as zeros too: its whole written blocks become
    /// unwritten and the partial written blocks at its ends are zeroed in place.
    fn allocate_locked(
        &self,
        e: &Arc<InodeEntry>,
        size: u64,
        (offset, end): (u64, u64),
        keep_size: bool,
        zero: bool,
    ) -> Result<()> {
        let bs = self.sb.block_size as u64;
        let (first, end_block) = (offset / bs, end.div_ceil(bs));
        let whole = match zero {
            true => (offset.div_ceil(bs), end / bs),
            false => (0, 0),
        };
        let m = self.range_map(e, (first, end_block), whole)?;
        let runs = self.reserve_holes(e, &m)?;
        let grows = !keep_size && end > size;
        let zeroed = match zero {
            true => self.zero_partial_blocks(e, offset, end),
            false => Ok(()),
        }
        .and_then(|()| match grows {
            true => self.zero_tail(e, size, end),
            false => Ok(()),
        });
        if let Err(err) = zeroed {
            self.alloc.unreserve_runs(&runs);
            return Err(err);
        }
        let _g = self.gate_shared();
        let mut st = e.state.write();
        self.map_unwritten(&mut st, &m, &runs);
        for &(n, a) in &m.written {
            let old = bmap::set(&mut st, n, unwritten(a), self.ppb)
                .expect("indirect blocks were loaded under the op lock");
            debug_assert_eq!(old, a, "file block {n}");
        }
        if !m.holes.is_empty() || !m.written.is_empty() {
            self.charge_block_range(first, end_block - 1);
        }
        let now = crate::fs::inode::to_disk_time(Timespec::now());
        if grows {
            st.d.size = end;
        }
        // As ext4: the data changes (mtime) when the size or the bytes do.
        if grows || zero {
            st.d.mtime = now;
        }
        st.d.ctime = now;
        self.mark_dirty(e, &mut st);
        Ok(())
    }

    /// PUNCH_HOLE: free the whole blocks of [offset, end) (preallocated ones past the end of
    /// the file too) and zero the partial blocks at its ends in place. The size stays.
    pub(crate) fn punch_locked(&self, e: &Arc<InodeEntry>, offset: u64, end: u64) -> Result<()> {
        // The punch works on the block map: cached data goes there first (else it would
        // still show over the hole).
        self.writeback_locked(e)?;
        self.cache.forget_tail(e.ino);
        let bs = self.sb.block_size as u64;
        // Nothing that names no block may be freed.
        self.range_map(e, (offset / bs, end.div_ceil(bs)), (0, 0))?;
        self.zero_partial_blocks(e, offset, end)?;
        let (lo, hi) = (offset.div_ceil(bs), end / bs);
        let _g = self.gate_shared();
        let mut st = e.state.write();
        if lo < hi {
            // Only the indirect blocks at the range's two ends may stay, changed.
            self.charge_block_range(lo, lo);
            self.charge_block_range(hi - 1, hi - 1);
            let freed = bmap::free_range(&mut st, lo, hi, self.ppb);
            let mut recs = self.log.records.lock();
            for (start, count) in freed.data {
                recs.push(Record::DFree { start, count });
            }
            for a in freed.log {
                recs.push(Record::Dead { addr: a, count: 1 });
            }
        }
        let now = crate::fs::inode::to_disk_time(Timespec::now());
        st.d.mtime = now;
        st.d.ctime = now;
        self.mark_dirty(e, &mut st);
        Ok(())
    }

    /// Zero, on the device, the bytes of [offset, end) that lie in written blocks only partly
    /// inside the range (its first and last block).
    fn zero_partial_blocks(&self, e: &InodeEntry, offset: u64, end: u64) -> Result<()> {
        let bs = self.sb.block_size as u64;
        let (first, last) = (offset / bs, (end - 1) / bs);
        let mut edges = vec![first];
        if last != first {
            edges.push(last);
        }
        for n in edges {
            let (lo, hi) = (offset.max(n * bs), end.min((n + 1) * bs));
            if hi - lo == bs {
                continue; // a whole block: not zeroed in place
            }
            if let DataPtr::Written(a) = DataPtr::decode(self.resolve(e, n)?) {
                self.alloc
                    .dev()
                    .write_at(&vec![0u8; (hi - lo) as usize], a * bs + (lo - n * bs))?;
                self.alloc.mark_written();
            }
        }
        Ok(())
    }

    /// The size grows from `size` towards `to`: zero the garbage past the old end in its
    /// last block (see `tail_past_end`).
    fn zero_tail(&self, e: &InodeEntry, size: u64, to: u64) -> Result<()> {
        if let Some((at, len)) = self.tail_past_end(e, size, to)? {
            self.alloc.dev().write_at(&vec![0u8; len], at)?;
            self.alloc.mark_written();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_linux_checks_them() {
        assert_eq!(Mode::parse(0).unwrap(), Mode::Allocate { keep_size: false });
        assert_eq!(
            Mode::parse(KEEP_SIZE).unwrap(),
            Mode::Allocate { keep_size: true }
        );
        assert_eq!(Mode::parse(PUNCH_HOLE | KEEP_SIZE).unwrap(), Mode::Punch);
        assert_eq!(
            Mode::parse(ZERO_RANGE).unwrap(),
            Mode::Zero { keep_size: false }
        );
        assert_eq!(
            Mode::parse(ZERO_RANGE | KEEP_SIZE).unwrap(),
            Mode::Zero { keep_size: true }
        );
        for bad in [
            PUNCH_HOLE,
            PUNCH_HOLE | ZERO_RANGE | KEEP_SIZE,
            libc::FALLOC_FL_COLLAPSE_RANGE,
            libc::FALLOC_FL_INSERT_RANGE,
            libc::FALLOC_FL_UNSHARE_RANGE,
            0x04 | KEEP_SIZE, // FALLOC_FL_NO_HIDE_STALE
            1 << 20,
        ] {
            assert_eq!(
                Mode::parse(bad).unwrap_err().errno(),
                libc::EOPNOTSUPP,
                "mode {bad:#x}"
            );
        }
    }
}
