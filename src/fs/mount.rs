//! Bringing a file system up (mount, or a fresh one for mkfs) and down (unmount).

use super::inode::InodeEntry;
use super::{Fs, MountOptions, Recovery};
use crate::betree::BeTree;
use crate::device::fence::Fence;
use crate::device::readahead::{Clusters, Window};
use crate::device::BlockDevice;
use crate::format::meta::{pointers_per_block, IMAP_ORPHAN, SEG_ACTIVE};
use crate::format::superblock::{Role, Superblock};
use crate::log::checkpoint::read_newest;
use crate::log::recovery::{load_tables, roll_forward};
use crate::log::{LogHead, LogWriter};
use crate::meta::Tables;
use crate::{FsError, Result};
use std::sync::Arc;

/// The share of the metadata cache budget (`cache_size`) that log blocks read ahead may
/// take. Large, because they are metadata a cold walk comes back for, often much later: a
/// compile opens one file of a directory now and its neighbours minutes later, and with a
/// thirty-second of the budget it read a quarter of the log twice (bench/RESULTS.md, "The
/// compile on one disk: the log read once, trees kept together").
const LOG_READAHEAD_SHARE: u64 = 4;
/// The same for file data read ahead, which the kernel's page cache keeps once it is used.
const DATA_READAHEAD_SHARE: u64 = 32;

/// Read and check a device's superblock.
pub fn read_superblock(dev: &dyn BlockDevice) -> Result<Superblock> {
    if dev.size() < crate::format::superblock::SB_SIZE as u64 {
        return Err(FsError::Refused(format!(
            "{}: too small to hold a DualFS",
            dev.describe()
        )));
    }
    let mut b = vec![0u8; crate::format::superblock::SB_SIZE];
    dev.read_at(&mut b, 0)?;
    Superblock::decode(&b).map_err(|e| match e {
        FsError::Corrupt { detail, .. }
            if detail.starts_with("not a DualFS") || detail.starts_with("damaged") =>
        {
            FsError::Refused(format!("{}: {detail}", dev.describe()))
        }
        FsError::Corrupt { detail, .. } => FsError::Refused(format!(
            "{}: not a usable DualFS device: {detail}",
            dev.describe()
        )),
        other => other,
    })
}

/// Check that `meta` and `data` are the two halves of one DualFS.
pub fn check_pair(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<Superblock> {
    let sb = read_superblock(meta)?;
    if sb.role != Role::Meta {
        return Err(FsError::Refused(format!(
            "{} is the data device of a DualFS; give the metadata device first",
            meta.describe()
        )));
    }
    let dsb = read_superblock(data)?;
    if dsb.role != Role::Data {
        return Err(FsError::Refused(format!(
            "{} is a DualFS metadata device, not a data device",
            data.describe()
        )));
    }
    if !sb.pairs_with(&dsb) {
        return Err(FsError::Refused(format!(
            "{} and {} are not a pair: they belong to different file systems",
            meta.describe(),
            data.describe()
        )));
    }
    let need_meta = sb.meta_blocks * sb.block_size as u64;
    let need_data = sb.data_blocks * sb.block_size as u64;
    if meta.size() < need_meta || data.size() < need_data {
        return Err(FsError::Refused(format!(
            "a device is smaller than its file system ({} < {} or {} < {})",
            meta.size(),
            need_meta,
            data.size(),
            need_data
        )));
    }
    Ok(sb)
}

/// Where a mount after a crash continues the log.
///
/// Beyond the recovered head the log may hold parts of a transaction that never completed:
/// its first partial segment torn, later ones intact, numbered as if they continued the log.
/// If this mount wrote at the head under the old checkpoint (its own checkpoint's meta blocks
/// come first) and crashed before its checkpoint region was durable, the next roll-forward
/// from the same checkpoint would read this mount's partial segment and then, where the log
/// continues, take the stale parts for the rest of the log: half a transaction applied. So
/// the log continues at the start of a clean segment that is neither the head's nor its
/// successor (where the stale parts may be): roll-forward from the old checkpoint still stops
/// at the old head, and once the new checkpoint is durable nothing stale carries its serial.
/// The rest of the old head's segment stays unused until the segment is cleaned.
fn continue_in_fresh_segment(sb: &Superblock, t: &mut Tables, head: LogHead) -> LogHead {
    let cur = sb.segment_of(head.addr);
    let next = head.next_segment;
    let Some(fresh) = LogWriter::pick_segment(sb, &t.ifile, next, &[cur, next]) else {
        log::warn!(
            "no clean segment to continue the log in after recovery; continuing at the head"
        );
        return head;
    };
    let Some(after) = LogWriter::pick_segment(sb, &t.ifile, fresh, &[cur, next, fresh]) else {
        log::warn!(
            "no clean segment to continue the log in after recovery; continuing at the head"
        );
        return head;
    };
    // The old head's segment holds recovered log (DIRTY since roll-forward passed it); its
    // successor held nothing committed and becomes clean again.
    for s in [cur, next] {
        t.ifile.set_seg_flags(s, 0, SEG_ACTIVE);
    }
    for s in [fresh, after] {
        t.ifile.set_seg_flags(s, SEG_ACTIVE, 0);
    }
    LogHead {
        addr: sb.segment_start(fresh),
        next_segment: after,
        ..head
    }
}

impl Fs {
    /// An `Fs` over loaded tables and a log head (mount, mkfs, and fsck's repair sessions).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn assemble(
        sb: Arc<Superblock>,
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        opts: MountOptions,
        tables: Tables,
        tree: BeTree,
        head: LogHead,
        recovery: Recovery,
    ) -> Fs {
        let free: Vec<u64> = tables.ifile.free.iter().copied().collect();
        let next_new = tables.ifile.imap.len() as u64;
        let Tables {
            ifile,
            data: data_map,
            nodes: node_map,
            ..
        } = tables;
        let ppb = pointers_per_block(sb.block_size) as u64;
        let fs = Fs {
            ppb,
            log: super::commit::log_commit::LogCommit::new(
                sb.clone(),
                meta,
                ifile,
                node_map,
                head,
                Clusters {
                    block: sb.block_size as u64,
                    cluster: opts.log_readahead - opts.log_readahead % sb.block_size as u64,
                    unit: sb.segment_blocks as u64 * sb.block_size as u64,
                    first: sb.segment_blocks as u64 * sb.block_size as u64,
                    budget: opts.cache_bytes / LOG_READAHEAD_SHARE,
                    window: Window::Aligned,
                },
            ),
            alloc: super::data::alloc::DataAlloc::new(
                Arc::new(Fence::new(data)),
                data_map,
                ppb,
                Clusters {
                    block: sb.block_size as u64,
                    cluster: opts.data_readahead - opts.data_readahead % sb.block_size as u64,
                    unit: 0,
                    first: sb.block_size as u64,
                    budget: opts.cache_bytes / DATA_READAHEAD_SHARE,
                    window: Window::Forward,
                },
            ),
            ns: super::namespace::Namespace::new(
                tree,
                (opts.cache_bytes / 8 / sb.block_size as u64) as usize,
                free,
                next_new,
            ),
            cleaner: super::clean::CleanerState::new(),
            cache: super::data::data_cache::DataCache::new(if opts.read_only {
                0
            } else {
                opts.data_cache_bytes
            }),
            recovery,
            intent: None,
            intent_replay: Default::default(),
            answered: Default::default(),
            sb,
            opts,
            remounted_read_only: std::sync::atomic::AtomicBool::new(false),
        };
        fs.tables_changed(&fs.lock_tables().tables());
        fs
    }

    /// Open a formatted pair of devices: check superblocks and pairing, load the newest
    /// checkpoint, roll the log forward. A read-write mount then writes a checkpoint (so the
    /// recovered state is durable and the log starts a new epoch) and frees orphans.
    pub fn mount(
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        opts: MountOptions,
    ) -> Result<Arc<Fs>> {
        let sb = Arc::new(check_pair(&*meta, &*data)?);
        let cp = read_newest(&sb, &*meta)?;
        let mut tables = load_tables(&sb, &*meta, &cp)?;
        let (mut head, report) = roll_forward(&sb, &*meta, &mut tables, &cp)?;
        // The log holds every partial segment below this serial: the intent log's markers
        // say which operations that includes.
        let recovered_serial = head.serial;
        let (intent, found) = open_intent_log(&sb, &opts)?;
        let crashed = !cp.is_clean() || report.transactions > 0 || report.discarded > 0;
        if !crashed {
            log::info!(
                "mounting a cleanly unmounted file system (checkpoint {})",
                cp.serial
            );
        } else {
            log::info!(
                "not unmounted cleanly: recovery from checkpoint {}{}: {} transactions ({} partial segments, {} blocks) rolled forward, {} partial segments of an incomplete transaction discarded; {}: {}",
                cp.serial,
                if cp.is_clean() { " (clean)" } else { "" },
                report.transactions,
                report.partial_segments,
                report.blocks,
                report.discarded,
                if report.end_of_log { "end of the log" } else { "stopped" },
                report.stop_reason
            );
        }
        if crashed && !opts.read_only {
            head = continue_in_fresh_segment(&sb, &mut tables, head);
        }
        // Nodes made after the checkpoint and rolled forward have ids at or above the
        // checkpoint's next id: those are in use now.
        let next_node_id = cp.next_node_id.max(tables.nodes.used_limit());
        let free_nodes = tables.nodes.free_ids(next_node_id);
        let tree = BeTree::open(
            sb.block_size,
            sb.hash_seed,
            opts.cache_bytes / 2,
            next_node_id,
            free_nodes,
        );
        let orphans: Vec<u64> = tables
            .ifile
            .imap
            .iter()
            .enumerate()
            .filter(|(_, e)| e.allocated() && e.flags & IMAP_ORPHAN != 0)
            .map(|(i, _)| i as u64)
            .collect();
        let recovery = Recovery {
            checkpoint_serial: cp.serial,
            checkpoint_clean: cp.is_clean(),
            report,
            orphans_freed: if opts.read_only || opts.successor_of_dead.is_some() {
                0
            } else {
                orphans.len() as u64
            },
        };
        let mut fs = Fs::assemble(sb, meta, data, opts, tables, tree, head, recovery);
        fs.intent = intent;
        let fs = Arc::new(fs);
        let successor = fs.opts.successor_of_dead;
        if let Some(incarnation) = successor {
            // Before the replay: a removed file the kernel may still hold stays.
            fs.ns.kernel_refs.inherit();
            fs.ns.set_incarnation(incarnation);
            if let Some(found) = &found {
                *fs.answered.lock() = found.requests();
            }
        }
        if !fs.opts.read_only {
            if let (Some(found), Some(_)) = (&found, &fs.intent) {
                let replay = fs.replay_intents(found, recovered_serial);
                if replay != crate::fs::IntentReplay::default() {
                    log::info!(
                        "intent log: {} operations replayed, {} cached writes restored, {} torn records left out, {} failed",
                        replay.operations, replay.cached_writes, replay.torn, replay.failed
                    );
                }
                *fs.intent_replay.lock() = replay;
                // What the replay put back into the data cache goes to the device now, so
                // the checkpoint below holds everything the old records describe.
                fs.writeback_all()?;
                fs.cache.force(false);
            }
            if successor.is_some() {
                // Numbers free now may be held by the kernel, and orphans may be open there:
                // they stay until its FORGET, or the next mount.
                fs.ns.set_aside_free_inos();
            } else {
                for ino in orphans {
                    fs.free_orphan(ino)?;
                }
            }
            fs.checkpoint(false)?;
            // The log holds it all now: the dead daemon's records go (a death from here on
            // replays only what this daemon records).
            if let (Some(found), Some(log)) = (&found, &fs.intent) {
                log.remove_found(found);
            }
            let weak = Arc::downgrade(&fs);
            let h = std::thread::Builder::new()
                .name("dualfs-log".into())
                .spawn(move || Fs::background(weak))?;
            fs.log.set_background(h);
            fs.start_cleaner()?;
        }
        Ok(fs)
    }

    /// A brand-new, empty file system on formatted devices (used by mkfs): the log starts in
    /// the first clean segment; `populate` adds the root and lost+found; then a clean checkpoint.
    pub(crate) fn create_fresh(
        sb: Arc<Superblock>,
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
    ) -> Result<Arc<Fs>> {
        let mut tables = Tables::new(sb.clone());
        let first = LogWriter::pick_segment(&sb, &tables.ifile, 0, &[])
            .ok_or(FsError::Errno(libc::ENOSPC))?;
        let next = LogWriter::pick_segment(&sb, &tables.ifile, first, &[first])
            .ok_or(FsError::Errno(libc::ENOSPC))?;
        for s in [first, next] {
            tables
                .ifile
                .set_seg_flags(s, crate::format::meta::SEG_ACTIVE, 0);
        }
        let head = LogHead {
            addr: sb.segment_start(first),
            next_segment: next,
            serial: 1,
            ckpt_serial: 0,
        };
        let tree = BeTree::new_empty(sb.block_size, sb.hash_seed, 16 << 20);
        let opts = MountOptions {
            cache_bytes: 32 << 20,
            ..MountOptions::default()
        };
        Ok(Arc::new(Fs::assemble(
            sb,
            meta,
            data,
            opts,
            tables,
            tree,
            head,
            Recovery::default(),
        )))
    }

    /// Install the root directory of a fresh file system (mkfs only).
    pub(crate) fn make_root(&self, d: crate::format::inode::DiskInode) {
        let _g = self.log.gate.read();
        let e = self.new_inode_entry(d);
        self.ns.claim_ino(crate::format::ROOT_INO);
        let mut st = e.state.write();
        self.mark_dirty(&e, &mut st);
        self.push_record(crate::format::summary::Record::GroupDirs { group: 0, delta: 1 });
    }

    /// Write everything and a checkpoint (sync(2)).
    pub fn sync(&self) -> Result<()> {
        self.writable()?;
        self.writeback_all()?;
        self.checkpoint(false)
    }

    /// Stop every write now, as a power failure would (FS_IOC_SHUTDOWN, "going down"): once
    /// this returns nothing more reaches either device (writes under way finish first), every
    /// later operation fails with EIO, and unmount writes nothing. The next mount recovers from
    /// the log as after a crash: what was durable before (fsync'd, or logged by a completed
    /// flush) is there.
    pub fn shutdown(&self) {
        // What every operation checks first (`alive`): from now on each answers EIO, also
        // those that would not touch a device (a create the write-back cache keeps in memory).
        self.log
            .set_failed("the file system was shut down (FS_IOC_SHUTDOWN)".into());
        self.log.cut();
        self.alloc.cut();
        log::warn!("shut down: nothing more is written to either device");
    }

    /// `shutdown` was called.
    pub fn is_shut_down(&self) -> bool {
        self.log.is_cut() || self.alloc.is_cut()
    }

    /// Write everything and a clean checkpoint. Later calls fail with EIO. After `shutdown`
    /// nothing is written and the next mount recovers.
    pub fn unmount(&self) -> Result<()> {
        // Cached data reaches the device first (its log write is the final checkpoint).
        if !self.is_read_only() && self.alive().is_ok() {
            self.writeback_all()?;
        }
        if !self.log.set_unmounted() {
            return Ok(());
        }
        // A pass in progress ends first: the final checkpoint comes after it.
        self.stop_cleaner();
        self.log.stop_background();
        // Turned read-only, it wrote its clean checkpoint then.
        if self.is_read_only() {
            self.discard_intents();
            return Ok(());
        }
        if self.is_shut_down() {
            log::warn!("unmounting a file system that was shut down: no final checkpoint");
            return Ok(());
        }
        // Reserved but unused data blocks go back (in memory only; nothing durable names them).
        for e in self.ns.inodes.all() {
            self.alloc.return_window(&e, &mut e.state.write());
        }
        self.checkpoint(true)?;
        self.log.dev().flush()?;
        self.alloc.dev().flush()?;
        self.discard_intents();
        log::info!("unmounted cleanly");
        Ok(())
    }

    /// Read the newest checkpoint (for status and tests).
    pub fn checkpoint_serial(&self) -> u64 {
        self.log.flusher().ckpt_serial
    }

    /// A new cached inode, dirty, numbered by the allocator.
    pub(crate) fn new_inode_entry(&self, d: crate::format::inode::DiskInode) -> Arc<InodeEntry> {
        let e = InodeEntry::new(d, &self.log.placing);
        e.state.write().fresh = true;
        self.ns.inodes.insert_new(e.clone());
        e
    }
}

/// The mount's intent log, when `opts` ask for one, and what an earlier daemon left in it.
/// A read-only mount replays nothing (it writes nothing): it says what it leaves.
fn open_intent_log(
    sb: &Superblock,
    opts: &MountOptions,
) -> Result<(
    Option<crate::intent::IntentLog>,
    Option<crate::intent::Found>,
)> {
    let Some(base) = &opts.intent_dir else {
        return Ok((None, None));
    };
    let dir = crate::intent::dir_for(base, &sb.uuid);
    let found = crate::intent::find(&dir, &sb.uuid).map_err(|e| {
        FsError::Io(std::io::Error::other(format!(
            "intent log {}: {e}",
            dir.display()
        )))
    })?;
    for (path, why) in &found.refused {
        log::warn!("intent log: {} left alone: {why}", path.display());
    }
    if opts.read_only {
        if !found.chunks.is_empty() {
            log::warn!(
                "intent log {}: a daemon died with operations not yet in the log; mounted \
                 read-only, they are not replayed (mount read-write to recover them)",
                dir.display()
            );
        }
        return Ok((None, None));
    }
    let log = crate::intent::IntentLog::open(&dir, sb.uuid, &found, crate::intent::CHUNK_SIZE)
        .map_err(|e| {
            FsError::Io(std::io::Error::other(format!(
                "intent log {}: {e}",
                dir.display()
            )))
        })?;
    Ok((Some(log), Some(found)))
}
