//! The file system core: POSIX operations over the log, the data device and the directory tree.
//!
//! Concurrency: every operation takes `&self`. Operations change cached objects in memory and
//! mark them dirty; the log writer (`commit/transaction.rs`) turns everything dirty into one transaction.
//! The `gate` makes that atomic: each mutation holds it shared while it changes memory, the
//! writer holds it exclusively only while it takes its snapshot. Reads and lookups never take
//! the gate, and no lock they need is held across device I/O.

mod attrs;
pub mod clean;
mod commit;
mod data;
pub mod inode;
mod intent;
mod mount;
mod namespace;
mod read_only;
mod repair_ops;
pub mod types;

pub use attrs::acl;
pub(crate) use attrs::acl::valid_acl;
pub(crate) use attrs::xattr::{namespace as xattr_namespace, Namespace as XattrNamespace};
pub use attrs::xattr::{XATTR_NAMES_TOTAL_MAX, XATTR_NAME_MAX, XATTR_TOTAL_MAX};
pub use data::copy::COPY_MAX;
pub use data::seek::Whence;
pub use intent::replay::IntentReplay;
pub use mount::{check_pair, read_superblock};
pub use types::*;

use crate::betree::NodeLoader;
#[cfg(test)]
use crate::device::BlockDevice;
use crate::format::summary::Record;
use crate::format::superblock::Superblock;
use crate::{FsError, Result};
use inode::InodeEntry;
#[cfg(test)]
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Mount-time settings.
#[derive(Clone, Debug, PartialEq)]
pub struct MountOptions {
    /// Never write to either device; recovery happens in memory only.
    pub read_only: bool,
    /// Budget for cached metadata (inodes, indirect blocks, tree nodes), bytes.
    pub cache_bytes: u64,
    /// Bytes a cold read of one log block reads around it (its aligned cluster, inside its
    /// segment), keeping the rest for the reads that follow (device/readahead.rs); 0 or one
    /// block: none. Kept blocks take at most `cache_bytes` / 4 (`LOG_READAHEAD_SHARE`).
    pub log_readahead: u64,
    /// Bytes a small read of file data that misses reads from its start on, keeping the rest
    /// for the reads that follow (the next files of a directory written together); 0 or one
    /// block: none. Kept blocks take at most `cache_bytes` / 32 (`DATA_READAHEAD_SHARE`).
    pub data_readahead: u64,
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
    /// Bytes of written file data held in the daemon before it gets data blocks (delayed
    /// allocation: data/data_cache.rs); 0 writes every request's data to the device at once.
    pub data_cache_bytes: u64,
    /// Cached data this old is written back by the next periodic flush (as the kernel's
    /// `dirty_expire_centisecs`, 30 s by default there too): the most a crash loses of it.
    pub data_expire: Duration,
    /// Where the intent log lives (a directory on tmpfs; the file system's UUID names its
    /// subdirectory): every acknowledged operation is recorded there until the log holds
    /// it, so the daemon's death loses nothing (docs/DESIGN.md, "Surviving the daemon").
    /// `None`: no intent log.
    pub intent_dir: Option<std::path::PathBuf>,
    /// This mount takes over the kernel connection of a dead daemon, as its `n`th successor
    /// (docs/DESIGN.md, "Surviving the daemon"): what the kernel holds of the dead one's
    /// (inode numbers, open handles, removed files) stays valid, and requests the kernel
    /// resends are answered from what they did (`Fs::answered_before`).
    pub successor_of_dead: Option<u32>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            cache_bytes: 256 << 20,
            log_readahead: 64 << 10,
            data_readahead: 64 << 10,
            flush_interval: Duration::from_secs(5),
            checkpoint_interval: Duration::from_secs(30),
            checkpoint_segments: 32,
            noatime: false,
            dirsync: false,
            strictatime: false,
            nodiratime: false,
            background_cleaning: true,
            data_cache_bytes: 256 << 20,
            data_expire: Duration::from_secs(30),
            intent_dir: None,
            successor_of_dead: None,
        }
    }
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
    /// Clusters read around a log block read that missed (`log_readahead`), and block reads
    /// those clusters served afterwards without the device.
    pub log_clusters_read: u64,
    pub log_blocks_read_ahead_used: u64,
    /// The same for file data (`data_readahead`).
    pub data_clusters_read: u64,
    pub data_blocks_read_ahead_used: u64,
    /// Bytes of the cluster a miss reads now in the log and of file data (each adapts to how
    /// much of what it reads ahead is used: device/readahead.rs).
    pub log_readahead_window: u64,
    pub data_readahead_window: u64,
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
///
/// The POSIX facade over four components, each owning its state and its locks
/// (docs/DESIGN.md, "The components of Fs"), and the parts they all read.
pub struct Fs {
    sb: Arc<Superblock>,
    opts: MountOptions,
    /// Pointers per indirect block.
    ppb: u64,
    /// Log commit: the metadata device, the log writer and the gate, what the next
    /// transaction holds, the IFile and the node map, the failure state.
    log: commit::log_commit::LogCommit,
    /// Data allocation: the data device, its bitmaps, the files' reservation windows.
    alloc: data::alloc::DataAlloc,
    /// The namespace: directory tree, inode cache, inode numbers, handles.
    ns: namespace::Namespace,
    /// Space and admission: thresholds, counters, charges of pending work, one pass at a time.
    cleaner: clean::CleanerState,
    /// File data written and not yet allocated (delayed allocation).
    cache: data::data_cache::DataCache,
    /// The intent log: what was acknowledged since the last durable transaction.
    intent: Option<crate::intent::IntentLog>,
    /// What mount replayed from it.
    intent_replay: parking_lot::Mutex<IntentReplay>,
    /// A successor's mount: the operations each FUSE request of the dead daemon made, by the
    /// request's id, for the kernel's resend of requests whose replies may not have reached it.
    answered: parking_lot::Mutex<std::collections::HashSet<u64>>,
    recovery: Recovery,
    /// Turned read-only while mounted (`set_read_only`, a remount): nothing is written.
    remounted_read_only: std::sync::atomic::AtomicBool,
}

/// A lock guard of this crate's no-I/O mutexes.
type NoIoGuard<'a, T> = crate::lockcheck::Guard<parking_lot::MutexGuard<'a, T>>;

/// Reads tree nodes through the node map.
struct Nodes<'a>(&'a Fs);

impl NodeLoader for Nodes<'_> {
    fn load_node(&self, id: u64) -> Result<Vec<u8>> {
        let addr = self.0.log.node_addr(id);
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
        let data = self.alloc.read_ahead_stats();
        Stats {
            data_clusters_read: data.cluster_reads,
            data_blocks_read_ahead_used: data.hits,
            data_readahead_window: data.window,
            ..self.log.stats()
        }
    }

    /// What the mount found and recovered.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// What the mount replayed from the intent log.
    pub fn intent_replay(&self) -> IntentReplay {
        self.intent_replay.lock().clone()
    }

    /// How many daemons died before the one serving this mount (`successor_of_dead`).
    pub fn restarts(&self) -> u32 {
        self.opts.successor_of_dead.unwrap_or(0)
    }

    /// Did FUSE request `unique` of a dead predecessor make a change the intent log recorded
    /// (then it was carried out, and only its reply may be missing)? Asked once per request.
    pub fn answered_before(&self, unique: u64) -> bool {
        let mut answered = self.answered.lock();
        !answered.is_empty() && answered.remove(&unique)
    }

    fn nodes(&self) -> Nodes<'_> {
        Nodes(self)
    }

    /// All three tables, locked in rank order.
    fn lock_tables(&self) -> commit::log_commit::TableGuards<'_> {
        self.log.lock_tables(&self.alloc)
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
        crate::log::read_block(self.log.dev(), self.sb.block_size, addr)
    }

    /// EROFS on a read-only mount, EIO after a failed write or unmount.
    fn writable(&self) -> Result<()> {
        self.alive()?;
        if self.is_read_only() {
            return Err(FsError::Errno(libc::EROFS));
        }
        Ok(())
    }

    /// EIO after a failed write or unmount.
    fn alive(&self) -> Result<()> {
        self.log.alive()
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
                self.ns.inodes.get(ino)
            } else {
                self.ns.inodes.peek(ino)
            };
            if let Some(e) = cached {
                if e.state.read().deleted {
                    return Err(FsError::Errno(libc::ENOENT));
                }
                return Ok(e);
            }
            let seen = self.ns.inodes.eviction_count();
            let loc = self.log.inode_loc(ino);
            let Some(loc) = loc else {
                return Err(FsError::Errno(libc::ENOENT));
            };
            let block = match self.ns.inode_blocks.get(loc.addr) {
                Some(b) => b,
                None => {
                    let b = Arc::new(self.read_log_block(loc.addr)?);
                    crate::format::inode::check_inode_block(&b)?;
                    self.ns.inode_blocks.put(loc.addr, b.clone());
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
            if let Some(e) =
                self.ns
                    .inodes
                    .insert_loaded(InodeEntry::new(d, &self.log.placing), seen, use_now)
            {
                return Ok(e);
            }
        }
    }

    /// Record that `e` changed (the caller holds its state lock, and the gate unless the change
    /// is one that may land in any transaction by itself: an access time, `touch_atime`).
    /// An inode whose state says dirty is in the current set already: a hold of the lock
    /// never sees one a snapshot took and did not place (`inode::StateLock`).
    fn mark_dirty(&self, e: &Arc<InodeEntry>, st: &mut inode::InodeState) {
        if !st.dirty {
            st.dirty_epoch = self
                .log
                .dirty
                .insert(e, st.deleted, st.fresh, &self.cleaner.counts);
            st.dirty = true;
        }
    }

    fn push_record(&self, r: Record) {
        self.log.records.lock().push(r);
    }
}

/// An `op` lock held by an operation.
pub(crate) type OpGuard =
    crate::lockcheck::Guard<parking_lot::ArcMutexGuard<parking_lot::RawMutex, ()>>;

/// Lock the `op` mutexes of several inodes in ascending inode order (the one lock order used
/// everywhere, so multi-inode operations cannot deadlock).
fn lock_ops(entries: &[&Arc<InodeEntry>]) -> Vec<OpGuard> {
    let mut v: Vec<&Arc<InodeEntry>> = entries.to_vec();
    v.sort_by_key(|e| e.ino);
    v.dedup_by_key(|e| e.ino);
    v.into_iter().map(|e| e.op.lock_arc()).collect()
}

#[cfg(test)]
mod tests;
