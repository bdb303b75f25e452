//! Read-ahead: a small read that misses reads the cluster around it, and the cluster's other
//! blocks wait in memory for the reads that follow. Under the log (aligned clusters) and,
//! for file data, under the data device (clusters from the read on).
//!
//! The log lays out together what was written together: the inodes of files made in one
//! directory share blocks, and those blocks lie next to the directory's index nodes and
//! indirect blocks of the same transactions. Reading such metadata cold (a `find`, a compile's
//! first `stat`s and opens, the cleaner's live blocks) reads its neighbours next, but one block
//! at a time, each a seek and a rotation on a disk whose own read-ahead is lost as soon as the
//! head goes to the data device. One read of a cluster costs little more than one of a block.
//!
//! A block that was read ahead is handed out once and dropped (whoever asked keeps it in
//! its own cache: inode blocks, tree nodes, indirect blocks), so this holds only blocks nobody
//! has used yet, up to a budget, least recently read ahead going first.
//!
//! The cluster size adapts, as the kernel's read-ahead window does: from the size asked for,
//! it halves while fewer than one in `SHRINK_BELOW` of the blocks read ahead are used (random
//! reads of one block each, as PostMark's of its files' last blocks: the rest of each cluster
//! is transfer time for nothing) and doubles back while more than one in `GROW_ABOVE` are,
//! never below `MIN_WINDOW_BLOCKS`. On a disk a block read ahead costs its transfer (0.3 ms at
//! 14 MB/s) and one used saves a seek and a rotation (8 ms and more), so a cluster pays when a
//! small share of it is used: a compile that uses a sixth of its clusters still gains.
//!
//! A log address can be written again (its segment cleaned and reused, the head's segment
//! past the head), so every write drops the blocks it covers, and a cluster read while any
//! write was under way, or that a write began during, is not kept: what it read of the
//! written blocks may be older than the write.

use super::BlockDevice;
use crate::lockcheck::Mutex;
use lru::LruCache;
use std::io;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The smallest cluster the window shrinks to, in blocks.
const MIN_WINDOW_BLOCKS: u64 = 4;
/// Blocks read ahead between two looks at how many of them were used.
const ADAPT_BLOCKS: u64 = 256;
/// The window halves while fewer than 1 in this many blocks read ahead are used...
const SHRINK_BELOW: u64 = 16;
/// ...and doubles while more than 1 in this many are.
const GROW_ABOVE: u64 = 8;

/// Where clusters lie on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clusters {
    /// Bytes of a block, the unit blocks are kept in.
    pub block: u64,
    /// Bytes of a cluster, a multiple of `block`; 0 turns read-ahead off.
    pub cluster: u64,
    /// Bytes of the device's units (log segments) a cluster never crosses.
    pub unit: u64,
    /// Reads below this offset are never read ahead (the superblock and checkpoint regions).
    pub first: u64,
    /// Bytes of blocks read ahead kept at most.
    pub budget: u64,
    pub window: Window,
}

/// Where a cluster starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// At the multiple of the cluster size below the read (the log: what was written with a
    /// block lies on both sides of it).
    Aligned,
    /// At the read (file data: read from its start on).
    Forward,
}

/// Copy into `buf` (the device's bytes from `offset`) what `block` (at `addr`) holds of them.
fn copy_overlap(buf: &mut [u8], offset: u64, block: &[u8], addr: u64) {
    let lo = offset.max(addr);
    let hi = (offset + buf.len() as u64).min(addr + block.len() as u64);
    if lo < hi {
        buf[(lo - offset) as usize..(hi - offset) as usize]
            .copy_from_slice(&block[(lo - addr) as usize..(hi - addr) as usize]);
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadAheadStats {
    /// Block reads served from blocks read ahead.
    pub hits: u64,
    /// Cluster reads made for a block read that missed.
    pub cluster_reads: u64,
    /// Cluster reads not kept because a write overlapped them in time.
    pub discarded: u64,
    /// Bytes of the window now (the cluster a miss reads).
    pub window: u64,
}

struct State {
    blocks: LruCache<u64, Box<[u8]>>,
    /// Writes begun, and of them still under way: a cluster read is kept only if it began with
    /// none under way and none began before it ended.
    writes_begun: u64,
    writes_under_way: u64,
    /// Blocks kept from clusters and blocks handed out since the window last changed (halved
    /// at each look, so that older evidence fades).
    kept: u64,
    used: u64,
    stats: ReadAheadStats,
}

pub struct ReadAhead {
    inner: Arc<dyn BlockDevice>,
    at: Clusters,
    /// Bytes of the cluster a miss reads now: `at.cluster` at most.
    window: AtomicU64,
    state: Mutex<State>,
}

impl ReadAhead {
    pub fn new(inner: Arc<dyn BlockDevice>, at: Clusters) -> ReadAhead {
        assert!(
            at.block > 0 && at.cluster % at.block == 0,
            "clusters of whole blocks"
        );
        assert!(at.unit % at.block == 0, "units of whole blocks");
        let capacity = (at.budget / at.block.max(1)).max(1) as usize;
        ReadAhead {
            inner,
            at,
            window: AtomicU64::new(at.cluster),
            state: Mutex::new(
                "read-ahead",
                State {
                    blocks: LruCache::new(NonZeroUsize::new(capacity).unwrap()),
                    writes_begun: 0,
                    writes_under_way: 0,
                    kept: 0,
                    used: 0,
                    stats: ReadAheadStats::default(),
                },
            ),
        }
    }

    pub fn stats(&self) -> ReadAheadStats {
        ReadAheadStats {
            window: self.window.load(Ordering::Relaxed),
            ..self.state.lock().stats
        }
    }

    /// After `ADAPT_BLOCKS` blocks kept, halve the window if under 1 in `SHRINK_BELOW` of
    /// what was kept was used, double it (up to `at.cluster`) if over 1 in `GROW_ABOVE` was
    /// (under the state lock).
    fn adapt(&self, s: &mut State) {
        if s.kept < ADAPT_BLOCKS {
            return;
        }
        let (block, most) = (self.at.block, self.at.cluster);
        let least = most.min(MIN_WINDOW_BLOCKS * block);
        let w = self.window.load(Ordering::Relaxed);
        let next = if s.used * SHRINK_BELOW < s.kept {
            (w / 2 / block * block).max(least)
        } else if s.used * GROW_ABOVE > s.kept {
            (w * 2).min(most)
        } else {
            w
        };
        self.window.store(next, Ordering::Relaxed);
        s.kept /= 2;
        s.used /= 2;
    }

    /// The blocks `[first, end)` (byte offsets) a read of `len` bytes at `offset` covers, and
    /// the cluster that holds them, inside their unit and the device. `None` when read-ahead
    /// does not apply: no clusters, a read below `first`, or one a cluster would not hold.
    fn cluster_of(&self, offset: u64, len: usize) -> Option<Covered> {
        let at = &self.at;
        let cluster = self.window.load(Ordering::Relaxed);
        if cluster <= at.block || len == 0 || offset < at.first {
            return None;
        }
        let first = offset - offset % at.block;
        let end = offset
            .checked_add(len as u64)?
            .div_ceil(at.block)
            .checked_mul(at.block)?;
        if end - first >= cluster {
            return None;
        }
        let (unit_start, unit_end) = if at.unit > 0 {
            let s = first - first % at.unit;
            (s, s.checked_add(at.unit)?)
        } else {
            (0, u64::MAX)
        };
        let limit = unit_end.min(self.inner.size() - self.inner.size() % at.block);
        let mut start = match at.window {
            Window::Aligned => first - first % cluster,
            Window::Forward => first,
        }
        .max(unit_start)
        .max(at.first);
        if start.saturating_add(cluster) < end {
            start = first; // an aligned cluster that would not reach the read's end
        }
        let stop = start.checked_add(cluster)?.min(limit);
        (end <= stop && stop - start > end - first).then_some(Covered {
            first,
            end,
            start,
            stop,
        })
    }
}

/// What `cluster_of` found: the read's blocks `[first, end)`, its cluster `[start, stop)`.
struct Covered {
    first: u64,
    end: u64,
    start: u64,
    stop: u64,
}

impl BlockDevice for ReadAhead {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let Some(mut c) = self.cluster_of(offset, buf.len()) else {
            return self.inner.read_at(buf, offset);
        };
        let bs = self.at.block;
        let (begun, quiet) = {
            let mut s = self.state.lock();
            let mut addr = c.first;
            while addr < c.end && s.blocks.contains(&addr) {
                addr += bs;
            }
            if addr == c.end {
                // Every block is here: copy the bytes asked for, and hand the blocks out.
                let mut addr = c.first;
                while addr < c.end {
                    let block = s.blocks.pop(&addr).expect("checked above");
                    copy_overlap(buf, offset, &block, addr);
                    addr += bs;
                }
                s.stats.hits += (c.end - c.first) / bs;
                s.used += (c.end - c.first) / bs;
                return Ok(());
            }
            // Blocks of the read that are here go: the cluster brings them again.
            let mut addr = c.first;
            while addr < c.end {
                s.blocks.pop(&addr);
                addr += bs;
            }
            // Blocks around the read that are here already are not read again: the
            // cluster ends before the first after the read and starts after the last
            // before it (a compile's clusters overlapped those of the files before).
            let mut addr = c.end;
            while addr < c.stop && !s.blocks.contains(&addr) {
                addr += bs;
            }
            c.stop = addr;
            let mut addr = c.first;
            while addr > c.start && !s.blocks.contains(&(addr - bs)) {
                addr -= bs;
            }
            c.start = addr;
            s.stats.cluster_reads += 1;
            (s.writes_begun, s.writes_under_way == 0)
        };
        let mut cluster = vec![0u8; (c.stop - c.start) as usize];
        if self.inner.read_at(&mut cluster, c.start).is_err() {
            // A bad block elsewhere in the cluster must not fail this read: read it alone.
            return self.inner.read_at(buf, offset);
        }
        let at = (offset - c.start) as usize;
        buf.copy_from_slice(&cluster[at..at + buf.len()]);
        let mut s = self.state.lock();
        if !quiet || s.writes_begun != begun {
            s.stats.discarded += 1;
            return Ok(());
        }
        for (i, block) in cluster.chunks_exact(bs as usize).enumerate() {
            let addr = c.start + i as u64 * bs;
            if !(c.first..c.end).contains(&addr) && !s.blocks.contains(&addr) {
                s.blocks.put(addr, block.into());
                s.kept += 1;
            }
        }
        self.adapt(&mut s);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.at.cluster <= self.at.block {
            // Read-ahead off: nothing is ever kept, so nothing to drop or to order against.
            return self.inner.write_at(buf, offset);
        }
        {
            let mut s = self.state.lock();
            s.writes_begun += 1;
            s.writes_under_way += 1;
            if !s.blocks.is_empty() {
                let bs = self.at.block;
                let first = offset - offset % bs;
                let end = offset.saturating_add(buf.len() as u64);
                let mut addr = first;
                while addr < end {
                    s.blocks.pop(&addr);
                    addr += bs;
                }
            }
        }
        let written = self.inner.write_at(buf, offset);
        self.state.lock().writes_under_way -= 1;
        written
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const BS: u64 = 4096;

    /// A memory device that counts reads and can run something in the middle of one.
    struct Counting {
        mem: MemDevice,
        reads: AtomicUsize,
        read_bytes: AtomicUsize,
        during_read: parking_lot::Mutex<Option<Box<dyn FnOnce() + Send>>>,
        bad: parking_lot::Mutex<Option<u64>>,
    }

    impl BlockDevice for Counting {
        fn size(&self) -> u64 {
            self.mem.size()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.read_bytes.fetch_add(buf.len(), Ordering::SeqCst);
            if let Some(bad) = *self.bad.lock() {
                if offset <= bad && bad < offset + buf.len() as u64 {
                    return Err(io::Error::from_raw_os_error(libc::EIO));
                }
            }
            self.mem.read_at(buf, offset)?;
            let hook = self.during_read.lock().take();
            if let Some(hook) = hook {
                hook();
            }
            Ok(())
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.mem.write_at(buf, offset)
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A device of 4 units of 16 blocks, block `i` filled with byte `i`, clusters of
    /// `cluster_blocks` above the first unit.
    fn device(cluster_blocks: u64) -> (Arc<Counting>, Arc<ReadAhead>) {
        device_with_budget(cluster_blocks, 64)
    }

    fn device_with_budget(
        cluster_blocks: u64,
        budget_blocks: u64,
    ) -> (Arc<Counting>, Arc<ReadAhead>) {
        let mut bytes = vec![0u8; (64 * BS) as usize];
        for (i, b) in bytes.chunks_exact_mut(BS as usize).enumerate() {
            b.fill(i as u8);
        }
        let dev = Arc::new(Counting {
            mem: MemDevice::from_bytes(bytes),
            reads: AtomicUsize::new(0),
            read_bytes: AtomicUsize::new(0),
            during_read: Default::default(),
            bad: Default::default(),
        });
        let ra = Arc::new(ReadAhead::new(
            dev.clone(),
            Clusters {
                block: BS,
                cluster: cluster_blocks * BS,
                unit: 16 * BS,
                first: 16 * BS,
                budget: budget_blocks * BS,
                window: Window::Aligned,
            },
        ));
        (dev, ra)
    }

    fn read(ra: &ReadAhead, block: u64) -> u8 {
        let mut b = vec![0u8; BS as usize];
        ra.read_at(&mut b, block * BS).unwrap();
        assert!(b.iter().all(|&x| x == b[0]), "a block holds one byte value");
        b[0]
    }

    #[test]
    fn a_missed_block_reads_its_cluster_and_the_neighbours_come_from_memory() {
        let (dev, ra) = device(4);
        assert_eq!(read(&ra, 18), 18);
        assert_eq!(dev.reads.load(Ordering::SeqCst), 1);
        for b in [16, 17, 19] {
            assert_eq!(read(&ra, b), b as u8);
        }
        assert_eq!(
            dev.reads.load(Ordering::SeqCst),
            1,
            "the cluster's blocks were kept"
        );
        // Each is handed out once: its reader caches it.
        assert_eq!(read(&ra, 17), 17);
        assert_eq!(dev.reads.load(Ordering::SeqCst), 2);
        assert_eq!(ra.stats().hits, 3);
    }

    #[test]
    fn clusters_stay_in_their_unit_and_skip_the_first_and_larger_reads() {
        let (dev, ra) = device(32);
        read(&ra, 40); // unit 2: blocks 32..48
        let before = dev.reads.load(Ordering::SeqCst);
        for b in 32..48 {
            if b != 40 {
                read(&ra, b);
            }
        }
        assert_eq!(dev.reads.load(Ordering::SeqCst), before);
        read(&ra, 48);
        assert_eq!(dev.reads.load(Ordering::SeqCst), before + 1);
        read(&ra, 3);
        read(&ra, 4);
        assert_eq!(
            dev.reads.load(Ordering::SeqCst),
            before + 3,
            "nothing read ahead in unit 0"
        );
        let (dev, ra) = device(4);
        let mut four = vec![0u8; 4 * BS as usize];
        ra.read_at(&mut four, 20 * BS).unwrap();
        read(&ra, 24);
        assert_eq!(
            dev.reads.load(Ordering::SeqCst),
            2,
            "a read of a cluster is read alone"
        );
    }

    #[test]
    fn parts_of_blocks_and_runs_of_them_come_from_the_cluster() {
        let (dev, ra) = device(8);
        // 100 bytes from the middle of block 17, then the rest of 17 and 18, then part of 19.
        let mut b = vec![0u8; 100];
        ra.read_at(&mut b, 17 * BS + 50).unwrap();
        assert_eq!(b, vec![17u8; 100]);
        let mut b = vec![0u8; (BS + 300) as usize];
        ra.read_at(&mut b, 18 * BS - 100).unwrap();
        assert!(b[..100].iter().all(|&x| x == 17));
        assert!(b[100..(BS + 100) as usize].iter().all(|&x| x == 18));
        assert!(b[(BS + 100) as usize..].iter().all(|&x| x == 19));
        assert_eq!(
            dev.reads.load(Ordering::SeqCst),
            2,
            "block 17 had been handed out: the second read read the cluster again"
        );
        let mut b = vec![0u8; 10];
        ra.read_at(&mut b, 20 * BS + 7).unwrap();
        assert_eq!(b, vec![20u8; 10]);
        assert_eq!(dev.reads.load(Ordering::SeqCst), 2);
    }

    /// A zeroed device of `blocks` blocks with forward clusters of `cluster_blocks`, no units,
    /// a budget of 64 blocks.
    fn forward(blocks: u64, cluster_blocks: u64) -> (Arc<Counting>, ReadAhead) {
        let dev = Arc::new(Counting {
            mem: MemDevice::new(blocks * BS),
            reads: AtomicUsize::new(0),
            read_bytes: AtomicUsize::new(0),
            during_read: Default::default(),
            bad: Default::default(),
        });
        let ra = ReadAhead::new(
            dev.clone(),
            Clusters {
                block: BS,
                cluster: cluster_blocks * BS,
                unit: 0,
                first: 0,
                budget: 64 * BS,
                window: Window::Forward,
            },
        );
        (dev, ra)
    }

    #[test]
    fn a_forward_window_starts_at_the_read() {
        let (dev, ra) = forward(64, 8);
        let mut b = vec![0u8; BS as usize];
        ra.read_at(&mut b, 6 * BS).unwrap();
        for n in 7..14 {
            ra.read_at(&mut b, n * BS).unwrap();
        }
        assert_eq!(dev.reads.load(Ordering::SeqCst), 1);
        ra.read_at(&mut b, 5 * BS).unwrap();
        assert_eq!(
            dev.reads.load(Ordering::SeqCst),
            2,
            "nothing was read behind the read"
        );
    }

    #[test]
    fn a_write_drops_the_blocks_read_ahead_it_covers() {
        let (_dev, ra) = device(4);
        read(&ra, 20);
        ra.write_at(&vec![0xee; (BS + 10) as usize], 21 * BS)
            .unwrap();
        assert_eq!(read(&ra, 21), 0xee);
        let mut b = vec![0u8; BS as usize];
        ra.read_at(&mut b, 22 * BS).unwrap();
        assert_eq!(&b[..10], &[0xee; 10]);
        assert_eq!(b[10], 22);
        assert_eq!(read(&ra, 23), 23);
    }

    #[test]
    fn a_cluster_read_while_a_write_began_is_not_kept() {
        let (dev, ra) = device(4);
        let writer = ra.clone();
        // The write lands between the device's read of the cluster and its keeping: the old
        // bytes read must not be handed out afterwards.
        *dev.during_read.lock() = Some(Box::new(move || {
            writer.write_at(&vec![0xaa; BS as usize], 25 * BS).unwrap();
        }));
        assert_eq!(read(&ra, 24), 24);
        assert_eq!(read(&ra, 25), 0xaa);
        assert_eq!(ra.stats().discarded, 1);
    }

    #[test]
    fn a_bad_block_in_the_cluster_does_not_fail_a_good_one() {
        let (dev, ra) = device(4);
        *dev.bad.lock() = Some(30 * BS);
        assert_eq!(read(&ra, 29), 29);
        let mut b = vec![0u8; BS as usize];
        assert!(
            ra.read_at(&mut b, 30 * BS).is_err(),
            "the bad block's own read fails"
        );
    }

    #[test]
    fn the_budget_bounds_what_is_kept_and_the_oldest_go_first() {
        let (dev, ra) = device_with_budget(8, 20);
        read(&ra, 16); // keeps 17..24
        read(&ra, 32); // keeps 33..40
        read(&ra, 48); // keeps 49..56: 21 blocks, one over the budget
        assert_eq!(ra.state.lock().blocks.len(), 20);
        let before = dev.reads.load(Ordering::SeqCst);
        read(&ra, 17);
        assert_eq!(
            dev.reads.load(Ordering::SeqCst),
            before + 1,
            "the oldest block went"
        );
        // Its cluster kept 16 (and read none of 18..24, which are here): the next oldest,
        // 18, went; the others stay.
        read(&ra, 19);
        read(&ra, 55);
        assert_eq!(dev.reads.load(Ordering::SeqCst), before + 1);
        read(&ra, 18);
        assert_eq!(dev.reads.load(Ordering::SeqCst), before + 2);
    }

    /// A cluster does not read again what is here already: it stops before the first block
    /// after the read that is kept, and starts after the last one before it.
    #[test]
    fn a_cluster_reads_only_what_is_not_here() {
        let (dev, ra) = forward(64, 8);
        let mut b = vec![0u8; BS as usize];
        ra.read_at(&mut b, 10 * BS).unwrap(); // keeps 11..18
        assert_eq!(dev.read_bytes.load(Ordering::SeqCst), 8 * BS as usize);
        ra.read_at(&mut b, 8 * BS).unwrap(); // 8..16, of which 11.. are here
        assert_eq!(dev.read_bytes.load(Ordering::SeqCst), 11 * BS as usize);
        assert_eq!(dev.reads.load(Ordering::SeqCst), 2);
        for block in [9, 11, 17] {
            ra.read_at(&mut b, block * BS).unwrap();
        }
        assert_eq!(dev.reads.load(Ordering::SeqCst), 2, "all kept");
        // Aligned: with 16..23 but 23 kept, a read of 23 reads 23 alone, not 16..24.
        let (dev, ra) = device_with_budget(8, 64);
        read(&ra, 17); // keeps 16, 18..24
        read(&ra, 23); // handed out
        let bytes = dev.read_bytes.load(Ordering::SeqCst);
        read(&ra, 23);
        assert_eq!(dev.reads.load(Ordering::SeqCst), 2);
        assert_eq!(dev.read_bytes.load(Ordering::SeqCst), bytes + BS as usize);
        for block in [16, 18, 22] {
            read(&ra, block);
        }
        assert_eq!(dev.reads.load(Ordering::SeqCst), 2, "the others still kept");
    }

    /// Clusters whose other blocks nobody reads shrink to `MIN_WINDOW_BLOCKS`; reads that
    /// use what is read ahead grow the window back to the size asked for.
    #[test]
    fn the_window_shrinks_while_clusters_go_unused_and_grows_back_while_they_are_used() {
        let (dev, ra) = forward(8192, 16);
        assert_eq!(ra.stats().window, 16 * BS);
        // Reads 32 blocks apart: each cluster brings 15 blocks nobody asks for.
        for i in 0..128 {
            read(&ra, i * 32);
        }
        assert_eq!(
            ra.stats().window,
            MIN_WINDOW_BLOCKS * BS,
            "after scattered reads"
        );
        // Each miss now reads 4 blocks, not 16: the next 3 come from memory, the 4th not.
        let (reads, hits) = (dev.reads.load(Ordering::SeqCst), ra.stats().hits);
        for b in 5000..5005 {
            read(&ra, b);
        }
        assert_eq!(dev.reads.load(Ordering::SeqCst), reads + 2);
        assert_eq!(ra.stats().hits, hits + 3);
        // A scan uses every block read ahead.
        for b in 6000..7000 {
            read(&ra, b);
        }
        assert_eq!(ra.stats().window, 16 * BS, "after a scan");
    }

    #[test]
    fn no_cluster_means_no_read_ahead() {
        let (dev, ra) = device(1);
        read(&ra, 20);
        read(&ra, 21);
        assert_eq!(dev.reads.load(Ordering::SeqCst), 2);
    }
}
