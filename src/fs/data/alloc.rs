//! Data allocation: the data device, its bitmaps, and per-file reservation windows (the
//! `DataAlloc` component of `Fs`, docs/DESIGN.md "The components of Fs").
//!
//! A file being written holds a *window*, a run of reserved data blocks right after its last
//! block, and its new blocks come from there: a file written sequentially comes out
//! contiguous even while other files are written. A window pins free space, so it goes back
//! to the allocator (in memory only: nothing durable names reserved blocks)
//! - at the file's last close;
//! - when it was idle for a whole flush interval: the background thread sweeps the windows
//!   after each periodic log write, and returns every one no write took blocks from since
//!   the sweep before (second chance). A writer that comes back finds its next block free
//!   in the common case (the file's goal is its last block + 1), so it stays contiguous;
//! - all of them, before a writer is answered ENOSPC.
//!
//! So windowed blocks are free space, and statfs counts them as free (`Windows::blocks`).

use crate::device::fence::Fence;
use crate::device::readahead::{Clusters, ReadAhead, ReadAheadStats};
use crate::device::BlockDevice;
use crate::format::bmap::DataPtr;
use crate::format::summary::Record;
use crate::fs::inode::{InodeEntry, InodeState};
use crate::fs::{Fs, NoIoGuard};
use crate::lockcheck::{Mutex as NoIoMutex, Rank};
use crate::meta::datamap::DataMap;
use crate::{FsError, Result};
use foldhash::HashMap;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Largest reservation window, in blocks (it grows with the file up to this).
const MAX_WINDOW: u64 = 1024;
/// Files of at most this many blocks (64 KiB of 4 KiB blocks) written back from the data
/// cache get no window: ext4's threshold for its small-file locality groups.
pub(crate) const SMALL_FILE_BLOCKS: u64 = 16;

/// Every file that holds a window, and how many blocks all windows hold.
///
/// Lock order: an inode's `state`, then `files`, then the data map. Every inode with a window is
/// in `files` (it is added, under its state lock, when it gets one, and removed only under its
/// state lock when it has none); an entry may stay a little after its window went (until the
/// next sweep), which only delays that inode's eviction.
#[derive(Default)]
pub(crate) struct Windows {
    files: Mutex<HashMap<u64, Arc<InodeEntry>>>,
    blocks: AtomicU64,
}

impl Windows {
    /// Blocks reserved in windows and not yet given to a write (free space).
    pub(crate) fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Acquire)
    }

    fn entries(&self) -> Vec<Arc<InodeEntry>> {
        self.files.lock().values().cloned().collect()
    }

    /// Forget `e` (the caller holds its state lock and it has no window), unless the number
    /// went to a newer entry meanwhile.
    fn forget(&self, e: &Arc<InodeEntry>) {
        let mut files = self.files.lock();
        if files.get(&e.ino).is_some_and(|x| Arc::ptr_eq(x, e)) {
            files.remove(&e.ino);
        }
    }
}

/// Data allocation: the data device, the data bitmaps under their own lock, the files'
/// reservation windows, and whether file data waits for a flush of the device. The log
/// applies its allocations and frees to the bitmaps (`lock_map`, with the other tables);
/// everything else goes through the methods here.
pub(crate) struct DataAlloc {
    /// The fence `shutdown` cuts in front of the data device.
    fence: Arc<Fence>,
    /// The data device as file data is read and written: through the fence, with read-ahead
    /// of clusters from each small read on (`data_readahead`).
    dev: Arc<ReadAhead>,
    /// The data bitmaps and group descriptors (`Rank::DATA_MAP`).
    map: NoIoMutex<DataMap>,
    /// Data blocks reserved for files' next writes.
    windows: Windows,
    /// File data was written since the last data-device flush.
    written: AtomicBool,
    /// Blocks promised to cached file data that has none yet (data_cache.rs): not free for
    /// anything else. Changed only under the map lock, so that a check of free space and
    /// the change it allows are one step.
    delayed: AtomicU64,
    /// Promises may exceed the free blocks for a while (`overcommit`).
    overcommit: AtomicBool,
    /// Pointers per indirect block.
    ppb: u64,
}

impl DataAlloc {
    pub(crate) fn new(
        fence: Arc<Fence>,
        map: DataMap,
        ppb: u64,
        read_ahead: Clusters,
    ) -> DataAlloc {
        DataAlloc {
            dev: Arc::new(ReadAhead::new(fence.clone(), read_ahead)),
            fence,
            map: NoIoMutex::ranked("data map", Rank::DATA_MAP, map),
            windows: Default::default(),
            written: AtomicBool::new(false),
            delayed: AtomicU64::new(0),
            overcommit: AtomicBool::new(false),
            ppb,
        }
    }

    /// The data device (reads and writes of file data).
    pub(crate) fn dev(&self) -> &dyn BlockDevice {
        &*self.dev
    }

    /// What read-ahead of file data saved and cost.
    pub(crate) fn read_ahead_stats(&self) -> ReadAheadStats {
        self.dev.stats()
    }

    /// File data was written: the next log write flushes the data device first.
    pub(crate) fn mark_written(&self) {
        self.written.store(true, Ordering::Release);
    }

    /// Flush the data device if file data was written since the last flush.
    pub(crate) fn flush_written(&self) -> Result<()> {
        if self.written.swap(false, Ordering::AcqRel) {
            self.fence.flush()?;
        }
        Ok(())
    }

    /// Stop every access to the data device (`Fs::shutdown`).
    pub(crate) fn cut(&self) {
        self.fence.cut();
    }

    pub(crate) fn is_cut(&self) -> bool {
        self.fence.is_cut()
    }

    /// The bitmaps, for the log applying a transaction or writing a checkpoint: taken with
    /// the other tables, in rank order (`Fs::lock_tables`).
    pub(crate) fn lock_map(&self) -> NoIoGuard<'_, DataMap> {
        self.map.lock()
    }

    /// Blocks free for allocation (not committed, not reserved, not promised to cached data).
    pub(crate) fn free_blocks(&self) -> u64 {
        let map = self.map.lock();
        map.free_blocks()
            .saturating_sub(self.delayed.load(Ordering::Acquire))
    }

    /// Promise `n` blocks to cached data, if that many are free beside every promise made
    /// (windows count as free: a write-back short of blocks takes them back first).
    fn promise(&self, n: u64) -> bool {
        let map = self.map.lock();
        let delayed = self.delayed.load(Ordering::Acquire);
        if !self.overcommit.load(Ordering::Acquire)
            && map.free_blocks() + self.windows.blocks() < delayed + n
        {
            return false;
        }
        self.delayed.store(delayed + n, Ordering::Release);
        true
    }

    /// Let promises exceed the free blocks (`on`), or hold them to the free blocks again,
    /// returning by how many blocks they exceed them then. The replay of an intent log
    /// overcommits while it puts cached writes back: it restores them on top of a log that
    /// holds its files' later allocations already, so on the way the cache may hold more
    /// than the device has room for; once every cached write is back it holds what the dead
    /// daemon held, which its promises covered.
    pub(crate) fn overcommit(&self, on: bool) -> u64 {
        let map = self.map.lock();
        self.overcommit.store(on, Ordering::Release);
        self.delayed
            .load(Ordering::Acquire)
            .saturating_sub(map.free_blocks() + self.windows.blocks())
    }

    /// Promises may exceed the free blocks now (`overcommit`).
    pub(crate) fn overcommitting(&self) -> bool {
        self.overcommit.load(Ordering::Acquire)
    }

    /// Promise `n` blocks again that a failed write-back was given and gave back: they are
    /// free again, so the promise holds as before.
    pub(crate) fn repromise(&self, n: u64) {
        let _map = self.map.lock();
        self.delayed.fetch_add(n, Ordering::AcqRel);
    }

    /// Take back `n` blocks promised to cached data (it went, or got its blocks).
    pub(crate) fn unpromise(&self, n: u64) {
        let _map = self.map.lock();
        let delayed = self.delayed.load(Ordering::Acquire);
        assert!(delayed >= n, "unpromising {n} of {delayed} delayed blocks");
        self.delayed.store(delayed - n, Ordering::Release);
    }

    /// Blocks reserved in windows and not yet given to a write (free space).
    pub(crate) fn windowed_blocks(&self) -> u64 {
        self.windows.blocks()
    }

    /// A group for a new directory (`DataMap::pick_dir_group`).
    pub(crate) fn pick_dir_group(&self, parent_group: u64) -> u64 {
        self.map.lock().pick_dir_group(parent_group)
    }

    /// Give back the rest of `e`'s window (the caller holds its state lock `st`).
    pub(crate) fn return_window(&self, e: &Arc<InodeEntry>, st: &mut InodeState) {
        if let Some((next, end)) = st.window.take() {
            self.windows.blocks.fetch_sub(end - next, Ordering::AcqRel);
            self.map.lock().unreserve(next, end - next);
        }
        self.windows.forget(e);
    }

    /// Return every window no write used since the last sweep; mark the others unused.
    /// Called by the background thread after each periodic log write.
    pub(crate) fn return_idle_windows(&self) {
        for e in self.windows.entries() {
            let mut st = e.state.write();
            if st.window.is_some() && st.window_used {
                st.window_used = false;
            } else {
                self.return_window(&e, &mut st);
            }
        }
    }

    /// Return every window (a writer is short of blocks). Returns how many blocks came back.
    fn return_all_windows(&self) -> u64 {
        let before = self.windows.blocks();
        for e in self.windows.entries() {
            self.return_window(&e, &mut e.state.write());
        }
        before.saturating_sub(self.windows.blocks())
    }

    /// Take `k` blocks (at most what is left) from the front of `st`'s window.
    fn take_from_window(&self, st: &mut InodeState, k: u64) -> Option<(u64, u64)> {
        let (next, end) = st.window?;
        let k = k.min(end - next);
        st.window = (next + k < end).then_some((next + k, end));
        st.window_used = true;
        self.windows.blocks.fetch_sub(k, Ordering::AcqRel);
        Some((next, k))
    }

    /// `e` gets the new window `[start, start + len)` (its state lock `st` held).
    fn open_window(&self, e: &Arc<InodeEntry>, st: &mut InodeState, (start, len): (u64, u64)) {
        debug_assert!(st.window.is_none());
        st.window = Some((start, start + len));
        self.windows.blocks.fetch_add(len, Ordering::AcqRel);
        self.windows.files.lock().insert(e.ino, e.clone());
    }

    /// Take `n` data blocks for `e` from its reservation window, reserving a new window near
    /// `goal` when it runs out. With `contiguous` (preallocation) a window is the first free
    /// run long enough for the rest, where there is one. Returns runs (start, count); ENOSPC
    /// (nothing reserved) when there are not `n` free blocks outside other files' windows.
    /// `promised`: the blocks are promised to cached data already (`promise`), and the
    /// promise turns into them.
    fn alloc_data(
        &self,
        e: &Arc<InodeEntry>,
        st: &mut InodeState,
        n: u64,
        goal: u64,
        mut contiguous: bool,
        promised: bool,
    ) -> Result<Vec<(u64, u64)>> {
        let in_window = st.window.map_or(0, |(next, end)| end - next);
        // Free for this allocation: what nobody reserved, less what other cached data was
        // promised (what is free while promises exceed it).
        let overcommitting = self.overcommitting();
        let free = |map: &DataMap| {
            let others = if overcommitting {
                0
            } else {
                self.delayed
                    .load(Ordering::Acquire)
                    .saturating_sub(if promised { n } else { 0 })
            };
            map.free_blocks().saturating_sub(others)
        };
        if n > in_window && n - in_window > free(&self.map.lock()) {
            return Err(FsError::Errno(libc::ENOSPC));
        }
        let mut goal = goal;
        if let (true, Some((next, end))) = (contiguous, st.window) {
            // A window too short for a preallocation would split it: look from its start.
            if end - next < n {
                self.return_window(e, st);
                goal = next;
            }
        }
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut need = n;
        while need > 0 {
            if let Some((next, k)) = self.take_from_window(st, need) {
                match out.last_mut() {
                    Some(r) if r.0 + r.1 == next => r.1 += k,
                    _ => out.push((next, k)),
                }
                need -= k;
                continue;
            }
            // A small file written back whole gets exactly its blocks, no window: small
            // files written back together then lie packed one after another (ext4 packs
            // them in its per-CPU locality groups for the same reason), and a write-back
            // of many goes to the disk in a few long requests.
            let want = if promised && st.d.blocks <= SMALL_FILE_BLOCKS {
                need
            } else {
                need.max((8 + st.d.blocks / 8).min(MAX_WINDOW))
            };
            let g = out.last().map(|r| r.0 + r.1).unwrap_or(goal);
            let got = {
                let mut data = self.map.lock();
                // A window never takes blocks promised to cached data.
                let want = want.min(free(&data).max(need));
                if contiguous {
                    let got = data.reserve_run(g, want);
                    // No run that long anywhere: the rest is taken as it comes.
                    contiguous = got.is_some_and(|r| r.1 >= want.min(data.blocks_per_group));
                    got
                } else {
                    data.reserve(g, want)
                }
            };
            match got {
                Some(run) => self.open_window(e, st, run),
                None => {
                    self.unreserve_runs(&out);
                    return Err(FsError::Errno(libc::ENOSPC));
                }
            }
        }
        if promised {
            self.unpromise(n);
        }
        Ok(out)
    }

    /// Where a file's next block should go: after its last block, or its home group.
    fn data_goal(&self, st: &InodeState, block: u64) -> u64 {
        if let Some((next, _)) = st.window {
            return next;
        }
        let mut n = block;
        for _ in 0..64 {
            if n == 0 {
                break;
            }
            n -= 1;
            if let Ok(raw) = crate::fs::inode::bmap::lookup(st, n, self.ppb) {
                if let Some(a) = DataPtr::decode(raw).addr() {
                    return a + (block - n);
                }
            }
        }
        self.map.lock().group_start(st.d.group as u64)
    }

    /// Reserve `n` blocks, `promised` of them promised to cached data, in as few runs as the
    /// free space allows (`DataMap::reserve_run`), the first at or after `goal`: the promise
    /// turns into them. ENOSPC (nothing reserved) as `alloc_data`.
    fn reserve_runs(&self, goal: u64, n: u64, promised: u64) -> Result<Vec<(u64, u64)>> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        {
            let mut map = self.map.lock();
            let others = if self.overcommitting() {
                0
            } else {
                self.delayed
                    .load(Ordering::Acquire)
                    .saturating_sub(promised)
            };
            if n > map.free_blocks().saturating_sub(others) {
                return Err(FsError::Errno(libc::ENOSPC));
            }
            let (mut need, mut g) = (n, goal);
            while need > 0 {
                let Some((start, count)) = map.reserve_run(g, need) else {
                    for &(s, c) in &out {
                        map.unreserve(s, c);
                    }
                    return Err(FsError::Errno(libc::ENOSPC));
                };
                out.push((start, count));
                need -= count;
                g = start + count;
            }
        }
        self.unpromise(promised);
        Ok(out)
    }

    /// Give back reserved runs an operation could not use.
    pub(crate) fn unreserve_runs(&self, runs: &[(u64, u64)]) {
        let mut data = self.map.lock();
        for &(s, c) in runs {
            data.unreserve(s, c);
        }
    }
}

impl Fs {
    /// Reserve `n` data blocks for `e`, the first near file block `block`. Short of blocks,
    /// the windows of every file go back first, and blocks freed by deletes become
    /// allocatable once the log has the free: a full device has room again right after
    /// `rm`, not only after the next flush.
    pub(crate) fn alloc_data_retrying(
        &self,
        e: &Arc<InodeEntry>,
        n: u64,
        block: u64,
        contiguous: bool,
    ) -> Result<Vec<(u64, u64)>> {
        let alloc = || {
            let mut st = e.state.write();
            let goal = self.alloc.data_goal(&st, block);
            self.alloc
                .alloc_data(e, &mut st, n, goal, contiguous, false)
        };
        match alloc() {
            Err(FsError::Errno(libc::ENOSPC)) => {
                // Without the state lock: returning windows takes other files' state locks.
                let windows_back = self.alloc.return_all_windows() > 0;
                let frees_pending = self.data_frees_pending();
                if frees_pending {
                    self.sync_log()?;
                }
                if windows_back || frees_pending {
                    alloc()
                } else {
                    Err(FsError::Errno(libc::ENOSPC))
                }
            }
            r => r,
        }
    }

    /// Promise `n` blocks to data a write puts in the cache (data_cache.rs). Short of
    /// blocks, as `alloc_data_retrying`: windows back, and the frees of deletes made
    /// allocatable by a log write.
    pub(crate) fn promise_retrying(&self, n: u64) -> Result<()> {
        if n == 0 || self.alloc.promise(n) {
            return Ok(());
        }
        let windows_back = self.alloc.return_all_windows() > 0;
        let frees_pending = self.data_frees_pending();
        if frees_pending {
            self.sync_log()?;
        }
        if (windows_back || frees_pending) && self.alloc.promise(n) {
            return Ok(());
        }
        Err(FsError::Errno(libc::ENOSPC))
    }

    /// The `n` blocks promised to `e`'s cached data, the first near file block `block`:
    /// never ENOSPC while the promise holds, since every other allocation leaves promised
    /// blocks alone (other files' windows go back first if they hold them).
    pub(crate) fn alloc_promised(
        &self,
        e: &Arc<InodeEntry>,
        n: u64,
        block: u64,
    ) -> Result<Vec<(u64, u64)>> {
        let alloc = || {
            let mut st = e.state.write();
            let goal = self.alloc.data_goal(&st, block);
            self.alloc.alloc_data(e, &mut st, n, goal, false, true)
        };
        match alloc() {
            Err(FsError::Errno(libc::ENOSPC)) => {
                self.alloc.return_all_windows();
                alloc()
            }
            r => r,
        }
    }

    /// `n` blocks for the small files of one write-back whose home is group `group`, `promised`
    /// of them promised to their cached data, in one run where the group (or another) has one
    /// that long: they go to the device in one long write (`writeback_allocate`).
    pub(crate) fn alloc_small_files(
        &self,
        group: u64,
        n: u64,
        promised: u64,
    ) -> Result<Vec<(u64, u64)>> {
        let goal = self.alloc.map.lock().group_start(group);
        match self.alloc.reserve_runs(goal, n, promised) {
            Err(FsError::Errno(libc::ENOSPC)) => {
                self.alloc.return_all_windows();
                self.alloc.reserve_runs(goal, n, promised)
            }
            r => r,
        }
    }

    /// Log the allocation of `runs` (under the gate, with the pointers that use them).
    pub(crate) fn record_allocations(&self, runs: &[(u64, u64)]) {
        let mut recs = self.log.records.lock();
        for &(start, count) in runs {
            recs.push(Record::DAlloc { start, count });
        }
    }
}
