//! Delayed allocation: file data a write hands DualFS stays in the daemon, in whole blocks,
//! until something asks for it on the device (the flush interval, fsync, `dualfs sync`,
//! unmount, a full cache, an operation on the file's block map). Only then does it get data
//! blocks, all of a file's at once (so they come out contiguous, near its directory), and
//! reach the data device in runs, before the log write that maps them. Data freed before
//! that (a file created and deleted within a flush interval, a truncate) never reaches the
//! device: its blocks are never allocated.
//!
//! The rules that keep this safe (docs/DESIGN.md, "Delayed allocation"):
//! - A write promises the data device a block for each cached block that has none
//!   (`DataAlloc::promise`), so ENOSPC comes at the write, never at the write-back.
//! - The log never records a size that covers cached data: each inode copy a snapshot takes
//!   has the size the file had before its first cached write (`FileCache::logged_size`),
//!   at most. After a crash a file is as it was before the writes that were lost, never
//!   longer with zeros in place of data.
//! - Everything that changes a file's block map, other than a write, holds the file's `op`
//!   lock, as writes and write-backs do; each writes the file's cache back first, but a
//!   truncate, which drops the cached blocks it cuts off, and a free, which drops them all.
//! - A write-back holds the file's `op` lock: no write changes the file meanwhile. Readers
//!   find each block either in the cache or mapped: the cache lets go of a block in the
//!   same hold of the state lock that maps it.

use crate::format::bmap::DataPtr;
use crate::fs::data::alloc::SMALL_FILE_BLOCKS;
use crate::fs::inode::file_cache::{CachedBlock, FileCache};
use crate::fs::inode::{InodeEntry, InodeState};
use crate::fs::Fs;
use crate::lockcheck::Mutex as NoIoMutex;
use crate::Result;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Files a write-back takes together (their op locks held at once).
const WRITEBACK_BATCH: usize = 256;
/// The largest request a write-back sends to the data device, in bytes.
const WRITEBACK_REQUEST_MAX: usize = 1 << 20;
/// How many requests a write-back keeps in flight (a disk's command queue orders them).
const WRITEBACK_QUEUE: usize = 8;

/// A cached block as a write-back copies it out of the cache.
struct CachedCopy {
    n: u64,
    data: Arc<Vec<u8>>,
    promised: bool,
}

/// One file's write-back, planned under its op lock: each cached block's device address
/// (0 until `writeback_allocate` gives it one), whether it is new to the block map
/// (`fresh`), the block it moves from (`moved`, 0 if none), how many of its bytes go to the
/// device, and the runs allocated for it.
struct WritebackPlan {
    e: Arc<InodeEntry>,
    blocks: Vec<CachedCopy>,
    addrs: Vec<u64>,
    fresh: Vec<bool>,
    moved: Vec<u64>,
    lens: Vec<usize>,
    runs: Vec<(u64, u64)>,
    /// Blocks promised to the cached data (those without a data block).
    holes: u64,
    /// The runs are allocated (and the promise of `holes` taken).
    allocated: bool,
    /// A small file's home group (at most `SMALL_FILE_BLOCKS`, no window): in a batch its
    /// blocks come from one run with the batch's other small files.
    small_group: Option<u64>,
}

/// The mount's cached data: which files have some, and how much.
pub(crate) struct DataCache {
    /// Bytes of data the cache holds before writers write back (0: no cache, every write
    /// goes to the data device at once).
    budget: u64,
    /// A replay caches what it restores whatever the budget (`force`).
    forced: std::sync::atomic::AtomicBool,
    bytes: AtomicU64,
    /// Sum of the files' `charge`.
    charge: AtomicU64,
    files: NoIoMutex<BTreeMap<u64, Arc<InodeEntry>>>,
    /// The partial last blocks of files written back: at most half the budget more.
    tails: NoIoMutex<Tails>,
    /// The intent records cached data still needs.
    pub(crate) pins: NoIoMutex<crate::fs::intent::Pins>,
}

/// A written-back file's last block as it went to the device, up to the file's end: an
/// append to the file needs those bytes and would otherwise read them back (on a disk, a
/// seek and a rotation for a few bytes the daemon just had). The kernel keeps such pages
/// in its page cache; the daemon keeps only these.
struct CleanTail {
    /// File block number and its data block.
    n: u64,
    addr: u64,
    /// The file's size when the block was written back: the copy holds `size % bs` bytes
    /// and is used only while the size is the same.
    size: u64,
    bytes: Vec<u8>,
}

/// Clean tails by inode number, least recently written back first.
struct Tails {
    lru: lru::LruCache<u64, CleanTail>,
    bytes: u64,
}

impl Tails {
    fn remove(&mut self, ino: u64) {
        if let Some(t) = self.lru.pop(&ino) {
            self.bytes -= t.bytes.len() as u64;
        }
    }

    /// Let go of the oldest tails until they take at most `room` bytes.
    fn trim(&mut self, room: u64) {
        while self.bytes > room {
            let Some((_, t)) = self.lru.pop_lru() else {
                break;
            };
            self.bytes -= t.bytes.len() as u64;
        }
    }
}

impl DataCache {
    pub(crate) fn new(budget: u64) -> DataCache {
        DataCache {
            budget,
            forced: std::sync::atomic::AtomicBool::new(false),
            bytes: AtomicU64::new(0),
            charge: AtomicU64::new(0),
            files: NoIoMutex::new("data cache files", BTreeMap::new()),
            tails: NoIoMutex::new(
                "data cache tails",
                Tails {
                    lru: lru::LruCache::unbounded(),
                    bytes: 0,
                },
            ),
            pins: NoIoMutex::new("intent pins", crate::fs::intent::Pins::default()),
        }
    }

    /// Keep `bytes`, the last `size % bs` bytes of file `ino` as just written back to data
    /// block `addr` (its block `n`), letting go of the least recently kept tails beyond
    /// half the budget. (Not within the budget: the dirty data fills it between its
    /// write-backs, and would push every tail out just before the appends that need it.)
    fn keep_tail(&self, ino: u64, n: u64, addr: u64, size: u64, bytes: &[u8]) {
        let room = self.budget / 2;
        if bytes.len() as u64 > room {
            return;
        }
        let mut tails = self.tails.lock();
        tails.remove(ino);
        tails.bytes += bytes.len() as u64;
        let tail = CleanTail {
            n,
            addr,
            size,
            bytes: bytes.to_vec(),
        };
        tails.lru.put(ino, tail);
        tails.trim(room);
    }

    /// Copy file `ino`'s bytes of block `n` at data block `addr`, the file being `size`
    /// long, into `buf` if a tail holds them.
    fn read_tail(&self, ino: u64, n: u64, addr: u64, size: u64, buf: &mut [u8]) -> bool {
        let tails = self.tails.lock();
        match tails.lru.peek(&ino) {
            Some(t) if t.n == n && t.addr == addr && t.size == size => {
                debug_assert_eq!(buf.len(), t.bytes.len(), "inode {ino}: tail of block {n}");
                buf.copy_from_slice(&t.bytes);
                true
            }
            _ => false,
        }
    }

    /// Copy what a tail holds of file range [offset, end) in block `n` (of `bs` bytes, at
    /// data block `addr`) of file `ino`, `size` bytes long, into `buf` (which holds that
    /// range); false if no tail holds the block as it is now.
    pub(crate) fn read_tail_range(
        &self,
        ino: u64,
        (n, addr, size, bs): (u64, u64, u64, u64),
        buf: &mut [u8],
        offset: u64,
        end: u64,
    ) -> bool {
        let tails = self.tails.lock();
        let Some(t) = tails.lru.peek(&ino) else {
            return false;
        };
        if t.n != n || t.addr != addr || t.size != size {
            return false;
        }
        let (a, z) = in_block(n, bs, offset, end).expect("a block of the range");
        assert!(
            z <= t.bytes.len(),
            "inode {ino}: read of block {n} to {z} past its end"
        );
        let at = (n * bs + a as u64 - offset) as usize;
        buf[at..at + (z - a)].copy_from_slice(&t.bytes[a..z]);
        true
    }

    /// File `ino`'s data on the device changes other than by a write-back, or it is freed:
    /// its tail, if any, may no longer be what the device holds.
    pub(crate) fn forget_tail(&self, ino: u64) {
        self.tails.lock().remove(ino);
    }

    pub(crate) fn enabled(&self) -> bool {
        self.budget > 0 || self.forced.load(Ordering::Acquire)
    }

    /// Cache writes even without a budget (`on`), or as the budget says. The replay of an
    /// intent log restores cached writes into the cache on a mount without one too: written
    /// through, each would need its blocks on the way, where the log already holds what
    /// other files were given after it (`DataAlloc::overcommit`); the mount writes it all
    /// back before it serves, and then stops forcing.
    pub(crate) fn force(&self, on: bool) {
        self.forced.store(on, Ordering::Release);
    }

    /// Bytes cached now.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// Log blocks writing everything cached back may dirty.
    pub(crate) fn log_charge(&self) -> u64 {
        self.charge.load(Ordering::Acquire)
    }

    fn files(&self) -> Vec<Arc<InodeEntry>> {
        self.files.lock().values().cloned().collect()
    }
}

/// The part of block `n` (of `bs` bytes) that file range [lo, hi) covers, as offsets in
/// the block, if any.
fn in_block(n: u64, bs: u64, lo: u64, hi: u64) -> Option<(usize, usize)> {
    let (start, end) = (n * bs, (n + 1) * bs);
    let (a, b) = (lo.max(start), hi.min(end));
    (a < b).then(|| ((a - start) as usize, (b - start) as usize))
}

impl Fs {
    /// Copy what the cache holds of file range [offset, end) in block `n` into `buf`
    /// (which holds that range); false if block `n` is not cached.
    pub(crate) fn read_cached(
        &self,
        e: &InodeEntry,
        n: u64,
        buf: &mut [u8],
        offset: u64,
        end: u64,
    ) -> bool {
        let st = e.state.read();
        let Some(b) = st.cache.as_ref().and_then(|c| c.blocks.get(&n)) else {
            return false;
        };
        let bs = self.sb.block_size as u64;
        let (a, z) = in_block(n, bs, offset, end).expect("a block of the range");
        let at = (n * bs + a as u64 - offset) as usize;
        buf[at..at + (z - a)].copy_from_slice(&b.data[a..z]);
        true
    }

    /// Whether file block `n` of `st` is cached.
    pub(crate) fn is_cached(st: &InodeState, n: u64) -> bool {
        st.cache.as_ref().is_some_and(|c| c.blocks.contains_key(&n))
    }

    /// The first cached block of `st` in [from, end).
    pub(crate) fn first_cached(st: &InodeState, from: u64, end: u64) -> Option<u64> {
        let c = st.cache.as_ref()?;
        c.blocks.range(from..end).next().map(|(&n, _)| n)
    }

    /// Put `data` at `off` into regular file `e` of size `size`, in the cache (the caller
    /// holds its op lock and was admitted; `data` is not empty and ends within the largest
    /// file). Blocks not cached yet start from their bytes on the device where the write
    /// covers them in part, else from zeros.
    pub(crate) fn write_cached(
        &self,
        e: &Arc<InodeEntry>,
        size: u64,
        off: u64,
        data: &[u8],
    ) -> Result<()> {
        let bs = self.sb.block_size as u64;
        let end = off + data.len() as u64;
        let (first, last) = (off / bs, (end - 1) / bs);
        // Bytes between the old end and the write are garbage on the device where its last
        // block is not cached (cached blocks hold zeros past the end).
        let zero_tail = if off > size && !Fs::is_cached(&e.state.read(), size / bs) {
            self.tail_past_end(e, size, off)?
        } else {
            None
        };
        let mut new_blocks: Vec<(u64, Vec<u8>, bool)> = Vec::new();
        for n in first..=last {
            if Fs::is_cached(&e.state.read(), n) {
                continue;
            }
            let ptr = DataPtr::decode(self.resolve(e, n)?);
            let mut block = vec![0u8; bs as usize];
            let (a, z) = in_block(n, bs, off, end).expect("a block of the write");
            if let DataPtr::Written(addr) = ptr {
                // Its bytes before the end of the file that the write leaves.
                let keep = size.saturating_sub(n * bs).min(bs) as usize;
                if keep > 0
                    && (a > 0 || z < keep)
                    && !self
                        .cache
                        .read_tail(e.ino, n, addr, size, &mut block[..keep])
                {
                    self.alloc.dev().read_at(&mut block[..keep], addr * bs)?;
                }
            }
            block[a..z].copy_from_slice(&data[(n * bs + a as u64 - off) as usize..][..z - a]);
            new_blocks.push((n, block, ptr.addr().is_none()));
        }
        let promised = new_blocks.iter().filter(|b| b.2).count() as u64;
        self.promise_retrying(promised)?;
        if let Some((at, len)) = zero_tail {
            if let Err(err) = self.alloc.dev().write_at(&vec![0u8; len], at) {
                self.alloc.unpromise(promised);
                return Err(err.into());
            }
            self.alloc.mark_written();
        }
        // Blocks that get data blocks at the write-back charge the indirect blocks mapping
        // them may dirty.
        let write_bound = (promised > 0).then(|| self.block_range_charge(first, last));
        let added = new_blocks.len() as u64 * bs;
        let _g = self.gate_shared();
        let mut st = e.state.write();
        let logged_size = st.d.size;
        let newly = st.cache.is_none();
        let intent_from = if newly && self.intent.is_some() {
            let s = crate::intent::peek_stamp().unwrap_or(self.intent_position());
            self.cache.pins.lock().pin(s);
            s
        } else {
            0
        };
        let c = st.cache.get_or_insert_with(|| {
            Box::new(FileCache {
                logged_size,
                since: Some(std::time::Instant::now()),
                intent_from,
                ..FileCache::default()
            })
        });
        for (n, block, promised) in new_blocks {
            let b = CachedBlock {
                data: Arc::new(block),
                promised,
            };
            assert!(c.blocks.insert(n, b).is_none(), "block {n} cached twice");
        }
        // Blocks cached before this write take its bytes now.
        for n in first..=last {
            let b = c
                .blocks
                .get_mut(&n)
                .expect("every block of the write is cached");
            let (a, z) = in_block(n, bs, off, end).expect("a block of the write");
            Arc::make_mut(&mut b.data)[a..z]
                .copy_from_slice(&data[(n * bs + a as u64 - off) as usize..][..z - a]);
        }
        c.promised += promised;
        let charge = write_bound.map_or(0, |bound| {
            c.charge_write(first, last, bound, |lo, hi| self.block_range_charge(lo, hi))
        });
        st.d.blocks += promised;
        if end > st.d.size {
            st.d.size = end;
        }
        let now = crate::fs::inode::to_disk_time(crate::fs::types::Timespec::now());
        st.d.mtime = now;
        st.d.ctime = now;
        self.mark_dirty(e, &mut st);
        drop(st);
        self.cache.bytes.fetch_add(added, Ordering::AcqRel);
        self.cache.charge.fetch_add(charge, Ordering::AcqRel);
        if added > 0 {
            // Its last block is cached again, or the file grew past it.
            self.cache.forget_tail(e.ino);
        }
        if newly {
            self.cache.files.lock().insert(e.ino, e.clone());
        }
        Ok(())
    }

    /// Drop `e`'s cached blocks from file block `keep` on, and zero the bytes from `size` in
    /// the block before it (a truncate to `size`, `keep` its blocks; or, with `keep` 0, a
    /// free). The caller holds its op lock and state lock `st`.
    pub(crate) fn drop_cached_from(
        &self,
        e: &Arc<InodeEntry>,
        st: &mut InodeState,
        keep: u64,
        size: u64,
    ) {
        self.cache.forget_tail(e.ino);
        let Some(c) = st.cache.as_mut() else {
            return;
        };
        let bs = self.sb.block_size as u64;
        let gone = c.blocks.split_off(&keep);
        let promised = gone.values().filter(|b| b.promised).count() as u64;
        if size % bs != 0 && keep > 0 {
            if let Some(b) = c.blocks.get_mut(&(keep - 1)) {
                Arc::make_mut(&mut b.data)[(size % bs) as usize..].fill(0);
            }
        }
        c.promised -= promised;
        c.logged_size = c.logged_size.min(size);
        st.d.blocks -= promised;
        self.alloc.unpromise(promised);
        self.cache
            .bytes
            .fetch_sub(gone.len() as u64 * bs, Ordering::AcqRel);
        if c.blocks.is_empty() {
            let charge = c.charge;
            self.unpin(c);
            st.cache = None;
            self.cache.charge.fetch_sub(charge, Ordering::AcqRel);
            self.forget_cached(e);
        }
    }

    /// `c`, a file's cache, is gone from here on (under the gate): the records its writes
    /// pinned may go once a transaction after this is durable.
    fn unpin(&self, c: &FileCache) {
        if c.intent_from != 0 {
            let at = self.intent_position();
            self.cache.pins.lock().release_at(at, c.intent_from);
        }
    }

    /// `e` has no cached data any more (its state lock is held, or it is gone).
    fn forget_cached(&self, e: &Arc<InodeEntry>) {
        let mut files = self.cache.files.lock();
        if files.get(&e.ino).is_some_and(|x| Arc::ptr_eq(x, e)) {
            files.remove(&e.ino);
        }
    }

    /// Write `e`'s cached data to the data device and map it (the caller holds its op lock).
    pub(crate) fn writeback_locked(&self, e: &Arc<InodeEntry>) -> Result<()> {
        let Some(plan) = self.writeback_plan(e)? else {
            return Ok(());
        };
        let mut plans = [plan];
        plans[0].small_group = None;
        self.writeback_allocate(&mut plans)?;
        self.writeback_write(&plans)?;
        let [plan] = plans;
        self.writeback_map(plan);
        Ok(())
    }

    /// Write back several files' cached data together (the caller holds no op lock): their
    /// op locks are taken at once, in ascending inode order as everywhere, their new blocks
    /// allocated (small files' from one run: `writeback_allocate`), and then every block
    /// written in address order, consecutive blocks of any of the files in one request. On
    /// a disk that is one sweep of the head instead of a request per file.
    fn writeback_batch(&self, files: &[Arc<InodeEntry>]) -> Result<()> {
        let refs: Vec<&Arc<InodeEntry>> = files.iter().collect();
        let _ops = crate::fs::lock_ops(&refs);
        let mut plans = Vec::with_capacity(files.len());
        for e in files {
            if let Some(p) = self.writeback_plan(e)? {
                plans.push(p);
            }
        }
        self.writeback_allocate(&mut plans)?;
        self.writeback_write(&plans)?;
        for p in plans {
            self.writeback_map(p);
        }
        Ok(())
    }

    /// Where each of `e`'s cached blocks goes (in place, into its unwritten block, or a new
    /// one, all of a file's new blocks allocated at once from its window near its last
    /// block) and how much of it to write. The caller holds `e`'s op lock. None: nothing
    /// cached.
    fn writeback_plan(&self, e: &Arc<InodeEntry>) -> Result<Option<WritebackPlan>> {
        let (blocks, size): (Vec<CachedCopy>, u64) = {
            let st = e.state.read();
            let Some(c) = st.cache.as_ref() else {
                return Ok(None);
            };
            let blocks = c
                .blocks
                .iter()
                .map(|(&n, b)| CachedCopy {
                    n,
                    data: b.data.clone(),
                    promised: b.promised,
                })
                .collect();
            (blocks, st.d.size)
        };
        self.alive()?;
        let bs = self.sb.block_size as u64;
        let mut addrs = Vec::with_capacity(blocks.len());
        let mut fresh = Vec::with_capacity(blocks.len());
        for b in &blocks {
            let ptr = DataPtr::decode(self.resolve(e, b.n)?);
            assert_eq!(
                ptr.addr().is_none(),
                b.promised,
                "inode {}: cached block {} promised iff it has no data block",
                e.ino,
                b.n
            );
            addrs.push(ptr.addr().unwrap_or(0));
            fresh.push(!ptr.is_written());
        }
        let holes = blocks.iter().filter(|b| b.promised).count() as u64;
        let small_group = {
            let st = e.state.read();
            (st.window.is_none() && size.div_ceil(bs) <= SMALL_FILE_BLOCKS)
                .then_some(st.d.group as u64)
        };
        // How much of each block to write: all of it, but for a block written in place
        // that holds the end of the file, only up to the end. Its bytes past the end are
        // zeros a truncate put in the cache, and the log may still record the longer size
        // until its next write: they stay as they are on the device (old data, which a
        // crash may show), as a truncate without a cache leaves them; an extension zeroes
        // them then.
        let lens = blocks
            .iter()
            .zip(&fresh)
            .map(|(b, &fresh)| {
                assert!(
                    b.n * bs < size,
                    "inode {}: cached block {} past its end",
                    e.ino,
                    b.n
                );
                if fresh {
                    bs as usize
                } else {
                    (size - b.n * bs).min(bs) as usize
                }
            })
            .collect();
        Ok(Some(WritebackPlan {
            e: e.clone(),
            moved: vec![0; blocks.len()],
            blocks,
            addrs,
            fresh,
            lens,
            runs: Vec::new(),
            holes,
            allocated: false,
            small_group,
        }))
    }

    /// Give the planned blocks without a data block one. The small files of a batch get
    /// theirs from one run per home group, and their blocks written in place move there too
    /// (freed where they were once the log has the move): taken one file at a time from the
    /// first free blocks of a group, they would land in the holes deleted files left, and
    /// written in place they lie wherever the file began; either way a request, and on a
    /// disk a rotation, per file. From one run the batch goes out in one long write (ext4's
    /// per-CPU locality groups do the same for small files). Other files' blocks come from
    /// their windows near their last block. On an error nothing stays allocated.
    fn writeback_allocate(&self, plans: &mut [WritebackPlan]) -> Result<()> {
        let bs = self.sb.block_size as usize;
        let mut groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, p) in plans.iter_mut().enumerate() {
            let Some(group) = p.small_group else {
                continue;
            };
            for k in 0..p.blocks.len() {
                if !p.fresh[k] {
                    p.moved[k] = p.addrs[k];
                    p.addrs[k] = 0;
                    p.fresh[k] = true;
                    p.lens[k] = bs;
                }
            }
            if p.addrs.contains(&0) {
                groups.entry(group).or_default().push(i);
            }
        }
        let result = (|| {
            for p in plans.iter_mut() {
                if p.small_group.is_none() && p.holes > 0 {
                    let first_hole = p.blocks.iter().find(|b| b.promised).expect("a hole").n;
                    p.runs = self.alloc_promised(&p.e, p.holes, first_hole)?;
                    p.allocated = true;
                }
            }
            for (group, members) in &groups {
                let need = |p: &WritebackPlan| p.addrs.iter().filter(|&&a| a == 0).count() as u64;
                let total = members.iter().map(|&i| need(&plans[i])).sum();
                let promised = members.iter().map(|&i| plans[i].holes).sum();
                let mut runs = self.alloc_small_files(*group, total, promised)?.into_iter();
                let mut run = runs.next();
                for &i in members {
                    let mut left = need(&plans[i]);
                    while left > 0 {
                        let (start, count) = run.expect("runs for every block");
                        let k = count.min(left);
                        plans[i].runs.push((start, k));
                        left -= k;
                        run = if k < count {
                            Some((start + k, count - k))
                        } else {
                            runs.next()
                        };
                    }
                    plans[i].allocated = true;
                }
            }
            Ok(())
        })();
        if let Err(err) = result {
            self.writeback_undo(plans);
            return Err(err);
        }
        for p in plans.iter_mut() {
            let mut it = p.runs.iter().flat_map(|&(s, c)| s..s + c);
            for a in p.addrs.iter_mut().filter(|a| **a == 0) {
                *a = it.next().expect("runs cover every block without one");
            }
            assert!(
                it.next().is_none(),
                "inode {}: runs past its blocks",
                p.e.ino
            );
        }
        Ok(())
    }

    /// Write the planned blocks of `plans` to the data device, each run of consecutive
    /// whole blocks in one request (at most `WRITEBACK_REQUEST_MAX` bytes), up to
    /// `WRITEBACK_QUEUE` requests in flight, taken in address order. On an error the data
    /// stays cached and its blocks promised again.
    fn writeback_write(&self, plans: &[WritebackPlan]) -> Result<()> {
        let bs = self.sb.block_size as u64;
        let mut order: Vec<(u64, usize, usize)> = plans
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.addrs.iter().enumerate().map(move |(k, &a)| (a, i, k)))
            .collect();
        order.sort_unstable();
        let mut requests: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut i = 0;
        while i < order.len() {
            let (first, pi, k) = order[i];
            let mut buf = plans[pi].blocks[k].data[..plans[pi].lens[k]].to_vec();
            let mut j = i + 1;
            while j < order.len() {
                let (addr, pj, kj) = order[j];
                let (prev, pp, kp) = order[j - 1];
                assert!(addr > prev, "data block {addr} planned twice");
                if addr != prev + 1
                    || plans[pp].lens[kp] != bs as usize
                    || buf.len() + bs as usize > WRITEBACK_REQUEST_MAX
                {
                    break;
                }
                buf.extend_from_slice(&plans[pj].blocks[kj].data[..plans[pj].lens[kj]]);
                j += 1;
            }
            requests.push((first * bs, buf));
            i = j;
        }
        if let Err(err) = self.write_requests(&requests) {
            self.writeback_undo(plans);
            return Err(err.into());
        }
        self.alloc.mark_written();
        Ok(())
    }

    /// Send `requests` (offset, bytes) to the data device, up to `WRITEBACK_QUEUE` at once:
    /// a disk that sees several queued orders them by its head's position, where requests
    /// sent one after another would each wait for its sector to come round again.
    fn write_requests(&self, requests: &[(u64, Vec<u8>)]) -> std::io::Result<()> {
        let dev = self.alloc.dev();
        if requests.len() == 1 {
            return dev.write_at(&requests[0].1, requests[0].0);
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed: NoIoMutex<Option<std::io::Error>> = NoIoMutex::new("write-back error", None);
        std::thread::scope(|scope| {
            for _ in 0..WRITEBACK_QUEUE.min(requests.len()) {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::AcqRel);
                    let Some((at, buf)) = requests.get(i) else {
                        break;
                    };
                    if let Err(err) = dev.write_at(buf, *at) {
                        failed.lock().get_or_insert(err);
                        break;
                    }
                });
            }
        });
        failed.into_inner().map_or(Ok(()), Err)
    }

    /// Give back what `plans` allocated: their data stays cached, its blocks promised again.
    fn writeback_undo(&self, plans: &[WritebackPlan]) {
        for p in plans.iter().filter(|p| p.allocated) {
            self.alloc.unreserve_runs(&p.runs);
            self.alloc.repromise(p.holes);
        }
    }

    /// Map a plan's blocks, now on the device, and drop them from the cache, in one hold of
    /// the gate and the file's state lock (a reader finds each block cached or mapped).
    fn writeback_map(&self, plan: WritebackPlan) {
        let WritebackPlan {
            e,
            blocks,
            addrs,
            fresh,
            moved,
            lens,
            runs,
            ..
        } = plan;
        let bs = self.sb.block_size as u64;
        // The write-back is stamped for its own record, which leaves the stamp of an
        // operation it runs inside (a truncate, a rename) for that operation's record.
        let outer = crate::intent::take_stamp();
        let _g = self.gate_shared();
        let mut st = e.state.write();
        let mut span: Option<(u64, u64)> = None;
        let mut freed: Vec<(u64, u64)> = Vec::new();
        for (k, b) in blocks.iter().enumerate() {
            if fresh[k] {
                let old = crate::fs::inode::bmap::set(&mut st, b.n, addrs[k], self.ppb)
                    .expect("indirect blocks were loaded under the op lock");
                if moved[k] != 0 {
                    assert_eq!(old, moved[k], "inode {}: file block {} moved", e.ino, b.n);
                    match freed.last_mut() {
                        Some(r) if r.0 + r.1 == old => r.1 += 1,
                        _ => freed.push((old, 1)),
                    }
                } else {
                    debug_assert!(
                        old == 0 || old == crate::format::bmap::unwritten(addrs[k]),
                        "file block {}",
                        b.n
                    );
                }
                span = Some(span.map_or((b.n, b.n), |(a, _)| (a, b.n)));
            }
        }
        if let Some((first, last)) = span {
            self.charge_block_range(first, last);
        }
        self.record_allocations(&runs);
        if !freed.is_empty() {
            let mut recs = self.log.records.lock();
            for (start, count) in freed {
                recs.push(crate::format::summary::Record::DFree { start, count });
            }
        }
        let c = st.cache.take().expect("the cache the write-back took");
        assert_eq!(
            c.blocks.len(),
            blocks.len(),
            "inode {}: its cache changed under the op lock",
            e.ino
        );
        self.mark_dirty(&e, &mut st);
        let size = st.d.size;
        let generation = st.d.generation;
        drop(st);
        self.unpin(&c);
        drop(_g);
        self.record(crate::fs::intent::records::IntentOp::WrittenBack {
            ino: e.ino,
            generation,
        });
        if let Some(o) = outer {
            crate::intent::set_stamp(o);
        }
        self.cache
            .bytes
            .fetch_sub(blocks.len() as u64 * bs, Ordering::AcqRel);
        self.cache.charge.fetch_sub(c.charge, Ordering::AcqRel);
        self.forget_cached(&e);
        // The block that holds a partial end of the file, as it went to the device.
        if size % bs != 0 {
            let last = (size - 1) / bs;
            if let Some(k) = blocks.iter().position(|b| b.n == last) {
                let len = (size % bs) as usize;
                assert!(
                    lens[k] >= len,
                    "inode {}: tail of block {last} written",
                    e.ino
                );
                let bytes = &blocks[k].data[..len];
                self.cache.keep_tail(e.ino, last, addrs[k], size, bytes);
            }
        }
    }

    /// Write `e`'s cached data back (takes its op lock: the caller holds none of a higher
    /// inode).
    pub(crate) fn writeback_file(&self, e: &Arc<InodeEntry>) -> Result<()> {
        if e.state.read().cache.is_none() {
            return Ok(());
        }
        let _op = e.op.lock_arc();
        self.writeback_locked(e)
    }

    /// Write every file's cached data back (the caller holds no op lock): before a log
    /// write that must carry everything written so far. The first error is returned once
    /// every batch was tried.
    pub(crate) fn writeback_all(&self) -> Result<()> {
        self.writeback_batches(self.cache.files())
    }

    /// Write back the files whose write-back will dirty indirect blocks (their charge
    /// counts in the log's pending space): what a writer short of log room needs written.
    pub(crate) fn writeback_charged(&self) -> Result<()> {
        let charged: Vec<Arc<InodeEntry>> = self
            .cache
            .files()
            .into_iter()
            .filter(|e| e.state.read().cache.as_ref().is_some_and(|c| c.charge > 0))
            .collect();
        self.writeback_batches(charged)
    }

    /// Write back the files whose oldest cached data is `age` old or older (the periodic
    /// flush: data_expire, as the kernel's dirty_expire_centisecs).
    pub(crate) fn writeback_expired(&self, age: std::time::Duration) -> Result<()> {
        let old: Vec<Arc<InodeEntry>> = self
            .cache
            .files()
            .into_iter()
            .filter(|e| {
                e.state
                    .read()
                    .cache
                    .as_ref()
                    .and_then(|c| c.since)
                    .is_some_and(|t| t.elapsed() >= age)
            })
            .collect();
        self.writeback_batches(old)
    }

    /// A writer filled the cache past its budget: it writes files back, those cached longest
    /// first (as the kernel's write-back takes inodes in the order they were dirtied), until
    /// half the budget is left. The youngest stay: a workload that writes files and deletes
    /// most of them soon (a copy then a cleanup, mail, a build's temporary files) deletes
    /// them from the cache. By inode number instead, the new files took the numbers the
    /// last deletes freed and went out first. The caller holds no op lock.
    pub(crate) fn writeback_over_budget(&self) -> Result<()> {
        let bytes = self.cache.bytes();
        // While a replay overcommits, the cache holds what it restores until the end, where
        // the mount writes it all back.
        if bytes <= self.cache.budget || self.alloc.overcommitting() {
            return Ok(());
        }
        let bs = self.sb.block_size as u64;
        let mut files: Vec<(Option<std::time::Instant>, u64, Arc<InodeEntry>)> = self
            .cache
            .files()
            .into_iter()
            .filter_map(|e| {
                let (since, held) = e
                    .state
                    .read()
                    .cache
                    .as_ref()
                    .map(|c| (c.since, c.blocks.len() as u64 * bs))?;
                Some((since, held, e))
            })
            .collect();
        // Oldest first; a file with nothing cached any more (since None) costs nothing.
        files.sort_by_key(|(since, _, e)| (since.is_none(), *since, e.ino));
        let mut to_free = bytes - self.cache.budget / 2;
        let mut chosen = Vec::new();
        for (_, held, e) in files {
            if to_free == 0 {
                break;
            }
            to_free = to_free.saturating_sub(held);
            chosen.push(e);
        }
        // Batches lock their files in ascending inode order.
        chosen.sort_by_key(|e| e.ino);
        self.writeback_batches(chosen)
    }

    /// Write `files` (in ascending inode order) back, `WRITEBACK_BATCH` at a time; the first
    /// error is returned once every batch was tried.
    fn writeback_batches(&self, files: Vec<Arc<InodeEntry>>) -> Result<()> {
        let mut first_err = None;
        for batch in files.chunks(WRITEBACK_BATCH) {
            if let Err(err) = self.writeback_batch(batch) {
                first_err.get_or_insert(err);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Drop a freed inode's cached data (its op and state locks held).
    pub(crate) fn drop_cached(&self, e: &Arc<InodeEntry>, st: &mut InodeState) {
        self.drop_cached_from(e, st, 0, 0);
    }
}
