//! The file system core: POSIX operations over the log, the data device and the directory tree.
//!
//! Concurrency: every operation takes `&self`. Operations change cached objects in memory and
//! mark them dirty; the log writer (`flush.rs`) turns everything dirty into one transaction.
//! The `gate` makes that atomic: each mutation holds it shared while it changes memory, the
//! writer holds it exclusively only while it takes its snapshot. Reads and lookups never take
//! the gate, and no lock they need is held across device I/O.

pub mod acl;
mod alloc;
mod attr;
mod blockcache;
mod bmap;
pub mod clean;
mod copy;
mod dir;
mod fallocate;
mod file;
mod flags;
mod flush;
pub mod inode;
mod kernel_refs;
mod mount;
mod privileges;
mod records;
mod rename;
mod repair;
mod seek;
pub mod types;
mod xattr;

pub(crate) use acl::valid_acl;
pub use copy::COPY_MAX;
pub use mount::{check_pair, read_superblock};
pub use seek::Whence;
pub use types::*;
pub(crate) use xattr::{namespace as xattr_namespace, Namespace as XattrNamespace};
pub use xattr::{XATTR_NAMES_TOTAL_MAX, XATTR_NAME_MAX, XATTR_TOTAL_MAX};

use crate::betree::{BeTree, NodeLoader};
use crate::device::BlockDevice;
use crate::format::summary::Record;
use crate::format::superblock::Superblock;
use crate::lockcheck::Mutex as NoIoMutex;
use crate::log::LogWriter;
use crate::meta::Tables;
use crate::{FsError, Result};
use inode::{InoAllocator, InodeCache, InodeEntry};
#[cfg(test)]
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Mount-time settings.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Never write to either device; recovery happens in memory only.
    pub read_only: bool,
    /// Budget for cached metadata (inodes, indirect blocks, tree nodes), bytes.
    pub cache_bytes: u64,
    /// How often dirty metadata is written to the log (bounds what a crash loses).
    pub flush_interval: Duration,
    /// How often a checkpoint is written (bounds recovery time).
    pub checkpoint_interval: Duration,
    /// Also checkpoint after this many segments of log.
    pub checkpoint_segments: u64,
    /// Never update access times (`noatime`); otherwise they follow Linux's `relatime`, or
    /// `strictatime`. An inode flagged FS_NOATIME_FL never gets them either.
    pub noatime: bool,
    /// Make every directory change (create, mknod, mkdir, symlink, link, unlink, rmdir,
    /// rename) durable before it returns (`dirsync`, and `sync`, which implies it).
    pub dirsync: bool,
    /// Update the access time at every read and listing (`strictatime`). The kernel only asks
    /// DualFS for reads its page cache cannot serve, so the adapter then opens files for
    /// direct I/O and keeps no directory listings.
    pub strictatime: bool,
    /// Never update directories' access times (`nodiratime`).
    pub nodiratime: bool,
    /// Clean segments on the mount's own thread by the cleaning thresholds (unless a cleaner
    /// daemon is attached); without it only operations short of room, and passes asked for,
    /// clean.
    pub background_cleaning: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            cache_bytes: 256 << 20,
            flush_interval: Duration::from_secs(5),
            checkpoint_interval: Duration::from_secs(30),
            checkpoint_segments: 32,
            noatime: false,
            dirsync: false,
            strictatime: false,
            nodiratime: false,
            background_cleaning: true,
        }
    }
}

/// State owned by whoever holds the flush lock.
pub(crate) struct FlushState {
    writer: LogWriter,
    ckpt_serial: u64,
    segments_since_ckpt: u64,
    last_ckpt: Instant,
}

/// The handle of a file the kernel opened without telling DualFS (no-open support: the
/// kernel then sends file handle 0; DualFS's own handles start at 1).
pub const NO_HANDLE: u64 = 0;

/// An open file or directory.
#[derive(Clone, Copy, Debug)]
struct Handle {
    ino: u64,
    /// Writes go to the end of the file (O_APPEND, unless the kernel's cache positions them).
    append: bool,
    /// Opened with O_APPEND: writes to an append-only file are allowed.
    opened_append: bool,
}

/// Counters for tests and the status command.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub flushes: u64,
    pub checkpoints: u64,
    /// Log blocks written by transactions and checkpoints (summaries included).
    pub log_blocks_written: u64,
    /// Of those, by checkpoints.
    pub checkpoint_blocks_written: u64,
}

/// What mount found and did: the checkpoint it started from and what roll-forward replayed.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    /// Serial of the newest valid checkpoint, the one mount started from.
    pub checkpoint_serial: u64,
    /// That checkpoint was written by a clean unmount.
    pub checkpoint_clean: bool,
    /// What roll-forward applied after it (and the incomplete tail it discarded).
    pub report: crate::log::recovery::RecoveryReport,
    /// Orphan inodes (no links, kept for an open file at the crash) freed by the mount.
    pub orphans_freed: u64,
}

impl Recovery {
    /// The file system had not been unmounted cleanly: its newest checkpoint is not a clean
    /// one, or log was written after it.
    pub fn crashed(&self) -> bool {
        !self.checkpoint_clean || self.report.transactions > 0 || self.report.discarded > 0
    }
}

/// A mounted DualFS. Every method takes `&self` and may be called from many threads.
pub struct Fs {
    sb: Arc<Superblock>,
    /// The devices, behind fences that `shutdown` cuts.
    meta: Arc<dyn BlockDevice>,
    data: Arc<dyn BlockDevice>,
    fences: [Arc<crate::device::fence::Fence>; 2],
    opts: MountOptions,
    /// Pointers per indirect block.
    ppb: u64,
    tables: NoIoMutex<Tables>,
    tree: BeTree,
    inodes: InodeCache,
    /// Inode blocks recently read.
    inode_blocks: blockcache::BlockCache,
    ino_alloc: NoIoMutex<InoAllocator>,
    /// The kernel's lookup counts: numbers it holds are not reused (kernel_refs.rs).
    kernel_refs: kernel_refs::KernelRefs,
    /// Writes come from the kernel's write-back cache (`begin_kernel_session`): it positions
    /// O_APPEND writes and keeps mtime and ctime of regular files itself.
    writeback_cache: AtomicBool,
    gate: crate::lockcheck::Gate,
    dirty: NoIoMutex<HashMap<u64, Arc<InodeEntry>>>,
    /// Records of changes no block shows, in the order they happened.
    records: records::RecordLog,
    flusher: crate::lockcheck::Mutex<FlushState>,
    /// Number of the last snapshot the log writer took, and of the last one made durable.
    snap_seq: AtomicU64,
    durable_seq: AtomicU64,
    /// File data was written since the last data-device flush.
    data_dirty: AtomicBool,
    /// Set after a failed log write: nothing more may be written.
    failed: NoIoMutex<Option<String>>,
    /// `failed` is set (read by every operation without taking the lock).
    has_failed: AtomicBool,
    unmounted: AtomicBool,
    handles: NoIoMutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    rename_lock: crate::lockcheck::Mutex<()>,
    /// Data blocks reserved for files' next writes (alloc.rs).
    windows: alloc::Windows,
    /// One cleaning pass at a time.
    cleaning: crate::lockcheck::Mutex<()>,
    /// Cleaning and admission state: thresholds, counters, charges of pending work.
    cleaner: clean::CleanerState,
    stats: NoIoMutex<Stats>,
    recovery: Recovery,
    /// The background thread's stop flag (leaves of the lock order, never across I/O).
    stop: (NoIoMutex<bool>, crate::lockcheck::Condvar),
    background: NoIoMutex<Option<std::thread::JoinHandle<()>>>,
    /// Tests: run once by the next log write right after it released the gate, before it
    /// encodes and writes its snapshot (other operations then change the live state).
    #[cfg(test)]
    after_snapshot: Mutex<Option<Box<dyn FnOnce(&Fs) + Send>>>,
}

/// Reads tree nodes through the node map.
struct Nodes<'a>(&'a Fs);

impl NodeLoader for Nodes<'_> {
    fn load_node(&self, id: u64) -> Result<Vec<u8>> {
        let addr = self.0.tables.lock().nodes.get(id);
        if addr == 0 {
            return Err(FsError::corrupt(
                "directory tree",
                format!("node {id} has no address"),
            ));
        }
        self.0.read_log_block(addr)
    }
}

impl Fs {
    pub fn block_size(&self) -> u32 {
        self.sb.block_size
    }

    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    pub fn stats(&self) -> Stats {
        *self.stats.lock()
    }

    /// What the mount found and recovered.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    fn nodes(&self) -> Nodes<'_> {
        Nodes(self)
    }

    /// A block of the log named by something read from disk (an inode's indirect or symlink
    /// block, a map entry): the address is checked to lie in the log first.
    fn read_log_block(&self, addr: u64) -> Result<Vec<u8>> {
        let seg = self.sb.segment_of(addr);
        if seg == 0 || seg >= self.sb.segments {
            return Err(FsError::corrupt(
                "log address",
                format!("{addr} outside the log"),
            ));
        }
        crate::log::read_block(&*self.meta, self.sb.block_size, addr)
    }

    /// EROFS on a read-only mount, EIO after a failed write or unmount.
    fn writable(&self) -> Result<()> {
        self.alive()?;
        if self.opts.read_only {
            return Err(FsError::Errno(libc::EROFS));
        }
        Ok(())
    }

    fn alive(&self) -> Result<()> {
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
    fn set_failed(&self, why: String) {
        self.failed.lock().get_or_insert(why);
        self.has_failed.store(true, Ordering::Release);
    }

    /// The cached inode `ino`, loading it if needed.
    fn inode(&self, ino: u64) -> Result<Arc<InodeEntry>> {
        self.inode_used(ino, true)
    }

    /// `inode`, and whether this counts as a use of it for the cache's eviction order (the
    /// cleaner's loads do not: `InodeCache::peek`).
    fn inode_used(&self, ino: u64, use_now: bool) -> Result<Arc<InodeEntry>> {
        loop {
            let cached = if use_now {
                self.inodes.get(ino)
            } else {
                self.inodes.peek(ino)
            };
            if let Some(e) = cached {
                if e.state.read().deleted {
                    return Err(FsError::Errno(libc::ENOENT));
                }
                return Ok(e);
            }
            let seen = self.inodes.eviction_count();
            let loc = self.tables.lock().ifile.entry(ino);
            let Some(loc) = loc else {
                return Err(FsError::Errno(libc::ENOENT));
            };
            let block = match self.inode_blocks.get(loc.addr) {
                Some(b) => b,
                None => {
                    let b = Arc::new(self.read_log_block(loc.addr)?);
                    crate::format::inode::check_inode_block(&b)?;
                    self.inode_blocks.put(loc.addr, b.clone());
                    b
                }
            };
            let d = crate::format::inode::inode_in_block(&block, loc.slot as usize)?;
            if d.ino != ino || d.generation != loc.generation {
                return Err(FsError::corrupt(
                    "inode",
                    format!(
                        "inode map names {ino}/{} at {}:{}, found {}/{}",
                        loc.generation, loc.addr, loc.slot, d.ino, d.generation
                    ),
                ));
            }
            if let Some(e) = self
                .inodes
                .insert_loaded(InodeEntry::new(d, false), seen, use_now)
            {
                return Ok(e);
            }
        }
    }

    /// Record that `e` changed (the caller holds its state lock, and the gate unless the change
    /// is one that may land in any transaction by itself: an access time, `touch_atime`).
    fn mark_dirty(&self, e: &Arc<InodeEntry>, st: &mut inode::InodeState) {
        st.dirty = true;
        let mut dirty = self.dirty.lock();
        if let std::collections::hash_map::Entry::Vacant(v) = dirty.entry(e.ino) {
            v.insert(e.clone());
            // Under the map's lock, so the count is the map's size (admission reads it).
            self.cleaner
                .counts
                .dirty_inodes
                .store(dirty.len() as u64, Ordering::Release);
        }
    }

    /// The log writer's snapshot took `entries` (collected from the dirty map earlier under
    /// the same hold of the gate): take them, and only them, out of the map. An entry marked
    /// dirty meanwhile without the gate (an access time) stays for the next snapshot; one of
    /// `entries` changed meanwhile is written with the snapshot's copy, taken after this.
    fn forget_dirty(&self, entries: &[Arc<InodeEntry>]) {
        let mut dirty = self.dirty.lock();
        for e in entries {
            dirty.remove(&e.ino);
        }
        self.cleaner
            .counts
            .dirty_inodes
            .store(dirty.len() as u64, Ordering::Release);
        self.cleaner.counts.tombstones.store(0, Ordering::Release);
    }

    fn push_record(&self, r: Record) {
        self.records.lock().push(r);
    }
}

/// An `op` lock held by an operation.
type OpGuard = crate::lockcheck::Guard<parking_lot::ArcMutexGuard<parking_lot::RawMutex, ()>>;

/// Lock the `op` mutexes of several inodes in ascending inode order (the one lock order used
/// everywhere, so multi-inode operations cannot deadlock).
fn lock_ops(entries: &[&Arc<InodeEntry>]) -> Vec<OpGuard> {
    let mut v: Vec<&Arc<InodeEntry>> = entries.to_vec();
    v.sort_by_key(|e| e.ino);
    v.dedup_by_key(|e| e.ino);
    v.into_iter().map(|e| e.op.lock_arc()).collect()
}

#[cfg(test)]
mod alloc_tests;
#[cfg(test)]
mod falloc_tests;
#[cfg(test)]
mod flags_tests;
#[cfg(test)]
mod lifetime_tests;
#[cfg(test)]
mod lock_tests;
#[cfg(test)]
mod node_id_tests;
#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;
