//! Log commit, a component of `Fs` (docs/DESIGN.md, "The components of Fs"): the
//! metadata device and the log writer, the gate, what the next transaction holds (the dirty
//! inodes, the records), the tables the log applies its transactions to (the IFile and the
//! node map; the data bitmaps are the data allocator's, lent to `lock_tables`), the snapshot
//! numbers fsync waits on, the failure state, the counters and the background thread.
//!
//! The gate and the records lock themselves (their own methods are their interface), so the
//! component hands them out; the rest is behind the methods here. The transaction itself and
//! the checkpoint are `Fs`'s (transaction.rs, checkpoint.rs): they take the dirty objects of
//! the namespace.

use crate::device::fence::Fence;
use crate::device::readahead::{Clusters, ReadAhead};
use crate::device::BlockDevice;
use crate::format::meta::ImapEntry;
use crate::format::superblock::Superblock;
use crate::fs::data::alloc::DataAlloc;
use crate::fs::inode::Placing;
use crate::fs::{NoIoGuard, Stats};
use crate::lockcheck::{Mutex as NoIoMutex, Rank};
use crate::log::{LogHead, LogWriter};
use crate::meta::datamap::DataMap;
use crate::meta::ifile::Ifile;
use crate::meta::nodemap::NodeMap;
use crate::meta::TablesMut;
use crate::{FsError, Result};
#[cfg(test)]
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// State owned by whoever holds the flush lock.
pub(crate) struct FlushState {
    pub(in crate::fs) writer: LogWriter,
    pub(in crate::fs) ckpt_serial: u64,
    pub(in crate::fs) segments_since_ckpt: u64,
    pub(in crate::fs) last_ckpt: Instant,
}

/// The three tables locked together, in the one order (`Rank::IFILE`, `NODE_MAP`,
/// `DATA_MAP`): for whoever needs more than one at a time (applying a transaction, a
/// checkpoint, the cleaner's bounds, the figures admission reads).
pub(crate) struct TableGuards<'a> {
    sb: &'a Superblock,
    ifile: NoIoGuard<'a, Ifile>,
    nodes: NoIoGuard<'a, NodeMap>,
    data: NoIoGuard<'a, DataMap>,
}

impl TableGuards<'_> {
    pub(crate) fn tables(&mut self) -> TablesMut<'_> {
        TablesMut {
            sb: self.sb,
            ifile: &mut self.ifile,
            data: &mut self.data,
            nodes: &mut self.nodes,
        }
    }
}

pub(crate) struct LogCommit {
    sb: Arc<Superblock>,
    /// The fence `shutdown` cuts in front of the metadata device.
    fence: Arc<Fence>,
    /// The metadata device as the log reads and writes it: through the fence, with
    /// read-ahead of its clusters.
    meta: Arc<ReadAhead>,
    /// The IFile (inode map and segment usage: one meta file) and the node map, each under
    /// its own lock (`Rank::IFILE`, `Rank::NODE_MAP`).
    ifile: NoIoMutex<Ifile>,
    node_map: NoIoMutex<NodeMap>,
    /// Mutations hold it shared, the log writer's snapshot exclusively.
    pub(in crate::fs) gate: crate::lockcheck::Gate,
    /// The inodes the next transaction writes (dirty.rs), and what their dirty blocks add up
    /// to with the snapshot being placed (inode/placing.rs): both lock themselves.
    pub(in crate::fs) dirty: super::dirty::DirtySet,
    pub(in crate::fs) placing: Arc<Placing>,
    /// Records of changes no block shows, in the order they happened.
    pub(in crate::fs) records: super::records::RecordLog,
    flusher: crate::lockcheck::Mutex<FlushState>,
    /// Number of the last snapshot the log writer took, and of the last one made durable.
    snap_seq: AtomicU64,
    durable_seq: AtomicU64,
    /// Set after a failed log write: nothing more may be written.
    failed: NoIoMutex<Option<String>>,
    /// `failed` is set (read by every operation without taking the lock).
    has_failed: AtomicBool,
    unmounted: AtomicBool,
    stats: NoIoMutex<Stats>,
    /// The background thread's stop flag (leaves of the lock order, never across I/O).
    stop: (NoIoMutex<bool>, crate::lockcheck::Condvar),
    background: NoIoMutex<Option<std::thread::JoinHandle<()>>>,
    /// Tests: run once by the next log write right after it released the gate, before it
    /// encodes and writes its snapshot (other operations then change the live state).
    #[cfg(test)]
    #[allow(clippy::type_complexity)]
    pub(in crate::fs) after_snapshot: Mutex<Option<Box<dyn FnOnce(&crate::fs::Fs) + Send>>>,
    /// Tests: the next log write's plan fails with ENOSPC, as on a full log.
    #[cfg(test)]
    pub(in crate::fs) fail_next_plan: AtomicBool,
}

impl LogCommit {
    /// The log of the metadata device `meta`, continuing at `head`, over its tables.
    pub(crate) fn new(
        sb: Arc<Superblock>,
        meta: Arc<dyn BlockDevice>,
        ifile: Ifile,
        node_map: NodeMap,
        head: LogHead,
        read_ahead: Clusters,
    ) -> LogCommit {
        let fence = Arc::new(Fence::new(meta));
        let meta = Arc::new(ReadAhead::new(fence.clone(), read_ahead));
        let writer = LogWriter::new(sb.clone(), meta.clone(), head);
        LogCommit {
            ifile: NoIoMutex::ranked("ifile", Rank::IFILE, ifile),
            node_map: NoIoMutex::ranked("node map", Rank::NODE_MAP, node_map),
            gate: crate::lockcheck::Gate::new(),
            dirty: super::dirty::DirtySet::new(crate::format::meta::entries16_per_block(
                sb.block_size,
            ) as u64),
            placing: Placing::new(crate::format::meta::symlink_bytes_per_block(sb.block_size)),
            records: super::records::RecordLog::new(sb.blocks_per_group, sb.block_size),
            flusher: crate::lockcheck::Mutex::across_io(
                "flusher",
                Rank::FLUSHER,
                0,
                FlushState {
                    writer,
                    ckpt_serial: head.ckpt_serial,
                    segments_since_ckpt: 0,
                    last_ckpt: Instant::now(),
                },
            ),
            snap_seq: AtomicU64::new(0),
            durable_seq: AtomicU64::new(0),
            failed: NoIoMutex::new("failed", None),
            has_failed: AtomicBool::new(false),
            unmounted: AtomicBool::new(false),
            stats: NoIoMutex::new("stats", Stats::default()),
            stop: (
                crate::lockcheck::Mutex::new("stop", false),
                crate::lockcheck::Condvar::new(),
            ),
            background: crate::lockcheck::Mutex::new("background", None),
            #[cfg(test)]
            after_snapshot: Mutex::new(None),
            #[cfg(test)]
            fail_next_plan: AtomicBool::new(false),
            sb,
            fence,
            meta,
        }
    }

    // ---- The device.

    /// The metadata device (reads of the log, checkpoint regions).
    pub(crate) fn dev(&self) -> &dyn BlockDevice {
        &*self.meta
    }

    /// Stop every access to the metadata device (`Fs::shutdown`).
    pub(crate) fn cut(&self) {
        self.fence.cut();
    }

    pub(crate) fn is_cut(&self) -> bool {
        self.fence.is_cut()
    }

    // ---- The tables.

    pub(crate) fn lock_ifile(&self) -> NoIoGuard<'_, Ifile> {
        self.ifile.lock()
    }

    #[cfg(test)]
    pub(crate) fn lock_node_map(&self) -> NoIoGuard<'_, NodeMap> {
        self.node_map.lock()
    }

    /// Where the inode map puts inode `ino`, if it is allocated.
    pub(crate) fn inode_loc(&self, ino: u64) -> Option<ImapEntry> {
        self.ifile.lock().entry(ino)
    }

    /// The log address of tree node `id` (0: none).
    pub(crate) fn node_addr(&self, id: u64) -> u64 {
        self.node_map.lock().get(id)
    }

    /// All three tables, the data allocator's bitmaps last, locked in rank order.
    pub(crate) fn lock_tables<'a>(&'a self, data: &'a DataAlloc) -> TableGuards<'a> {
        TableGuards {
            sb: &self.sb,
            ifile: self.ifile.lock(),
            nodes: self.node_map.lock(),
            data: data.lock_map(),
        }
    }

    // ---- What the next transaction holds.

    // ---- The writer and its snapshots.

    /// The log writer's state, held by one writer at a time (`Rank::FLUSHER`).
    pub(crate) fn flusher(
        &self,
    ) -> crate::lockcheck::Guard<parking_lot::MutexGuard<'_, FlushState>> {
        self.flusher.lock()
    }

    /// The number the next snapshot gets.
    pub(crate) fn next_snapshot(&self) -> u64 {
        self.snap_seq.load(Ordering::Acquire) + 1
    }

    /// Snapshot `seq` was taken.
    pub(crate) fn snapshot_taken(&self, seq: u64) {
        self.snap_seq.store(seq, Ordering::Release);
    }

    /// Snapshot `seq` is durable.
    pub(crate) fn made_durable(&self, seq: u64) {
        self.durable_seq.store(seq, Ordering::Release);
    }

    /// The number of the last snapshot made durable.
    pub(crate) fn durable(&self) -> u64 {
        self.durable_seq.load(Ordering::Acquire)
    }

    // ---- Failure and unmount.

    /// EIO after a failed write or unmount.
    pub(crate) fn alive(&self) -> Result<()> {
        if self.unmounted.load(Ordering::Acquire) {
            return Err(FsError::Errno(libc::EIO));
        }
        if self.has_failed.load(Ordering::Acquire) {
            if let Some(why) = &*self.failed.lock() {
                log::debug!("refusing: file system failed earlier: {why}");
            }
            return Err(FsError::Errno(libc::EIO));
        }
        Ok(())
    }

    /// A log write failed, or the file system was shut down: nothing more may be written.
    /// The first reason stays: it is the cause, what fails after it follows from it.
    pub(crate) fn set_failed(&self, why: String) {
        self.failed.lock().get_or_insert(why);
        self.has_failed.store(true, Ordering::Release);
    }

    /// Why the file system failed, if it did.
    pub(crate) fn failure(&self) -> Option<String> {
        self.failed.lock().clone()
    }

    /// Mark the file system unmounted; false if it was already.
    pub(crate) fn set_unmounted(&self) -> bool {
        !self.unmounted.swap(true, Ordering::AcqRel)
    }

    // ---- Counters.

    pub(crate) fn stats(&self) -> Stats {
        let read_ahead = self.meta.stats();
        Stats {
            log_clusters_read: read_ahead.cluster_reads,
            log_blocks_read_ahead_used: read_ahead.hits,
            log_readahead_window: read_ahead.window,
            ..*self.stats.lock()
        }
    }

    /// A transaction of `log_blocks` blocks (summaries included) was written.
    pub(crate) fn count_flush(&self, log_blocks: u64) {
        let mut s = self.stats.lock();
        s.flushes += 1;
        s.log_blocks_written += log_blocks;
    }

    /// A checkpoint of `log_blocks` blocks was written.
    pub(crate) fn count_checkpoint(&self, log_blocks: u64) {
        let mut s = self.stats.lock();
        s.checkpoints += 1;
        s.log_blocks_written += log_blocks;
        s.checkpoint_blocks_written += log_blocks;
    }

    // ---- The background thread.

    pub(crate) fn set_background(&self, h: std::thread::JoinHandle<()>) {
        *self.background.lock() = Some(h);
    }

    /// Wait up to `timeout` for a stop; true if stopped.
    pub(crate) fn wait_for_stop(&self, timeout: Duration) -> bool {
        let mut stop = self.stop.0.lock();
        if !*stop {
            self.stop.1.wait_for(&mut stop, timeout);
        }
        *stop
    }

    /// Tell the background thread to stop, and wait for it.
    pub(crate) fn stop_background(&self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        // Not joined under the lock (a leaf: the thread it waits for does I/O).
        let background = self.background.lock().take();
        if let Some(h) = background {
            let _ = h.join();
        }
    }
}
