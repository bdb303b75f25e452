//! The log writer's side of the core: turning everything dirty into one transaction, group
//! commit for fsync, checkpoints, and the background thread that does both periodically.

use super::inode::{InodeEntry, InodeState, SnapshotPart, SnapshotPlan, TakenBlock};
use super::{FlushState, Fs};
use crate::format::bmap::{self, Parent};
use crate::format::inode::{encode_inode_block, inodes_per_block, DiskInode};
use crate::format::meta::{encode_pointer_block, encode_symlink_block, symlink_bytes_per_block};
use crate::format::summary::{Descriptor, Record};
use crate::format::{BlockKind, INODE_SIZE};
use crate::log::checkpoint::{finish_checkpoint, prepare_checkpoint, CheckpointInfo};
use crate::log::{now_secs, TxnBlock};
use crate::meta::{InodeLoc, PlacedBlock};
use crate::{FsError, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// A block of the snapshot, encoded after the gate is released.
enum Pending {
    Ptr {
        desc: Descriptor,
        ptrs: Arc<Vec<u64>>,
    },
    Symlink {
        ino: u64,
        index: u64,
        bytes: Vec<u8>,
    },
    /// A tree node or value block, encoded from the tree's snapshot after the gate.
    Node { id: u64 },
    /// Copies of the inodes as the snapshot took them, encoded after the gate.
    Inodes { inodes: Vec<DiskInode> },
}

/// Merge log addresses into runs.
fn runs(mut addrs: Vec<u64>) -> Vec<(u64, u64)> {
    addrs.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for a in addrs {
        match out.last_mut() {
            Some(r) if r.0 + r.1 == a => r.1 += 1,
            _ => out.push((a, 1)),
        }
    }
    out
}

/// Carry out the plan the log writer's gate left in an inode's state (`StateLock` calls this
/// at the first hold of the lock after the gate, so the state is still exactly as the
/// snapshot took it): give each dirty indirect block (children before parents) and each
/// block of a dirty long symlink target its address from the plan, in the block, its
/// parent's slot (copy-on-write, `Arc::make_mut`, of an array a write in progress still
/// shares) or the inode's pointers; mark them clean, take `Arc` clones of the pointer
/// arrays and a copy of the inode, and clear its dirty flag. The result waits in
/// `snapshot_part` for the writer.
pub(super) fn place_snapshot(st: &mut InodeState) {
    let plan = st.snapshot_plan.take().expect("a snapshot plan");
    let p = plan.ppb;
    let mut addrs =
        crate::log::part_addrs(&plan.parts, plan.first, plan.n_ptr + plan.n_sym).into_iter();
    let mut keys: Vec<(u8, u64)> = st
        .ptrs
        .iter()
        .filter(|(_, b)| b.dirty())
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(
        keys.len(),
        plan.n_ptr,
        "dirty indirect blocks changed between the gate and their placing"
    );
    keys.sort_unstable(); // children (lower levels) before parents
    let mut blocks = Vec::with_capacity(plan.n_ptr + plan.n_sym);
    let mut dead = Vec::new();
    for (level, index) in keys {
        let a = addrs.next().expect("plan covers every block");
        crate::lockcheck::count_placement();
        let (old, ptrs) = st.ptrs.placed((level, index), a);
        if old != 0 {
            dead.push(old);
        }
        blocks.push(TakenBlock::Ptr { level, index, ptrs });
        match bmap::parent(level, index, p) {
            Parent::Inode { tree } => st.d.indirect[tree] = a,
            Parent::Block { level, index, slot } => {
                let pb = st.ptrs.get_mut(&(level, index)).unwrap();
                assert!(pb.dirty(), "parent of a rewritten block not dirty");
                Arc::make_mut(&mut pb.ptrs)[slot] = a;
            }
        }
    }
    if plan.n_sym > 0 {
        assert!(
            st.target_dirty,
            "symlink target clean between the gate and its placing"
        );
        let target = st.long_target.clone().expect("a planned symlink target");
        st.target_dirty = false;
        let parts = target.chunks(plan.sym_bytes);
        assert_eq!(
            parts.len(),
            plan.n_sym,
            "symlink target changed since the gate"
        );
        for (k, part) in parts.enumerate() {
            let a = addrs.next().expect("plan covers every block");
            crate::lockcheck::count_placement();
            // A target rewritten by the cleaner leaves its old block behind.
            if st.d.direct[k] != 0 {
                dead.push(st.d.direct[k]);
            }
            st.d.direct[k] = a;
            blocks.push(TakenBlock::Symlink {
                index: k as u64,
                bytes: part.to_vec(),
            });
        }
    }
    assert!(
        addrs.next().is_none(),
        "plan has more blocks than the inode"
    );
    assert_eq!(
        st.ptrs.ndirty(),
        0,
        "the dirty count and the dirty flags disagree"
    );
    // Clean from here: a change after this marks it dirty again, for the next snapshot
    // (`forget_dirty` ran under the gate).
    st.dirty = false;
    st.snapshot_part = Some(SnapshotPart {
        blocks,
        dead,
        inode: st.d.clone(),
    });
}

impl Fs {
    /// Make everything done so far durable. Concurrent callers share one log write: if a
    /// snapshot was taken after this call began, its completion is enough (group commit).
    pub(crate) fn sync_log(&self) -> Result<()> {
        // Any snapshot numbered `target` or later was taken after this call began.
        let target = self.snap_seq.load(Ordering::Acquire) + 1;
        let mut fl = self.flusher.lock();
        if self.durable_seq.load(Ordering::Acquire) >= target {
            return self.alive();
        }
        self.flush_locked(&mut fl)
    }

    /// Make everything done before this call durable: one log transaction of everything
    /// dirty (every file's metadata, the directory tree, the tables' records), the data
    /// device flushed before it and the metadata device after. What `dualfs sync` asks for;
    /// fsync and fsyncdir of any file or directory do the same.
    pub fn commit(&self) -> Result<()> {
        self.writable()?;
        self.sync_log()
    }

    /// Under `dirsync` a directory change is durable before its operation returns. Called
    /// once the operation let go of its locks (the commit takes the gate exclusively).
    pub(crate) fn commit_dir_change(&self) -> Result<()> {
        if self.opts.dirsync {
            self.sync_log()
        } else {
            Ok(())
        }
    }

    /// `value`, once the directory change that made it is committed (under `dirsync`).
    pub(crate) fn dir_changed<T>(&self, value: T) -> Result<T> {
        self.commit_dir_change().map(|()| value)
    }

    /// Write every dirty object as one transaction, data first.
    pub(crate) fn flush_locked(&self, fl: &mut FlushState) -> Result<()> {
        if self.opts.read_only {
            return Ok(());
        }
        if let Some(why) = &*self.failed.lock() {
            return Err(FsError::Io(std::io::Error::other(format!(
                "file system failed earlier: {why}"
            ))));
        }
        let result = self.write_transaction(fl);
        if let Err(e) = &result {
            self.cleaner.counts.writing.store(0, Ordering::Release);
            self.cleaner.counts.writing_meta.store(0, Ordering::Release);
            if !matches!(e, FsError::Errno(libc::ENOSPC)) {
                log::error!("log write failed, no further writes: {e}");
                self.set_failed(e.to_string());
            }
        }
        result
    }

    fn write_transaction(&self, fl: &mut FlushState) -> Result<()> {
        let bs = self.sb.block_size;
        let p = self.ppb;
        // ---- Phase 1: snapshot, in memory, under the gate.
        let gate = self.gate.write();
        let seq = self.snap_seq.load(Ordering::Acquire) + 1;
        let mut entries: Vec<Arc<InodeEntry>> = self.dirty.lock().values().cloned().collect();
        entries.sort_by_key(|e| e.ino);
        let n_nodes = self.tree.dirty_count();
        let n_records = self.records.lock().len();
        if entries.is_empty() && n_nodes == 0 && n_records == 0 {
            self.snap_seq.store(seq, Ordering::Release);
            drop(gate);
            if self.data_dirty.swap(false, Ordering::AcqRel) {
                self.data.flush()?;
            }
            self.durable_seq.store(seq, Ordering::Release);
            return Ok(());
        }
        // What each live inode contributes, from counts kept where blocks change: its dirty
        // indirect blocks (`PtrMap::ndirty`; every dirty block's parents are dirty already,
        // `bmap::mark_block_dirty`) and the blocks of a dirty long symlink target. Nothing
        // here walks an inode's blocks.
        let sym_bytes = symlink_bytes_per_block(bs);
        let (mut n_ptr, mut n_sym) = (0usize, 0usize);
        let mut live: Vec<(Arc<InodeEntry>, usize, usize)> = Vec::with_capacity(entries.len());
        let mut tombstones = Vec::new();
        for e in &entries {
            let st = e.state.read();
            if st.deleted {
                tombstones.push(e.ino);
                continue;
            }
            let ptr = st.ptrs.ndirty();
            let sym = match (st.target_dirty, &st.long_target) {
                (true, Some(t)) => t.len().div_ceil(sym_bytes),
                _ => 0,
            };
            n_ptr += ptr;
            n_sym += sym;
            live.push((e.clone(), ptr, sym));
        }
        let n_inodes = live.len();
        let per_block = inodes_per_block(bs);
        let nblocks = n_ptr + n_sym + n_nodes + n_inodes.div_ceil(per_block);
        let max_records = n_records + n_ptr + n_sym + self.tree.freed_count();
        // Parts only: the list of addresses is made after the gate.
        let mut plan = fl
            .writer
            .plan_parts(&self.tables.lock(), nblocks, max_records)?;
        // From the snapshot until the tables show it, admission counts the transaction here.
        let planned: u64 = plan
            .parts
            .iter()
            .map(|p| p.summary_blocks as u64 + p.nblocks as u64)
            .sum();
        self.cleaner
            .counts
            .writing
            .store(planned, Ordering::Release);
        // ... and the meta blocks applying it dirties (the counts it came from empty now).
        let touched =
            (n_inodes + n_nodes + self.tree.freed_count()) as u64 + self.records.meta_blocks();
        self.cleaner
            .counts
            .writing_meta
            .store(touched, Ordering::Release);

        // From here on the snapshot is taken: nothing may fail until it is written.
        self.snap_seq.store(seq, Ordering::Release);
        self.cleaner.snapshot_taken();
        self.forget_dirty(&entries);
        // Each live inode gets its range of the plan's addresses, in inode order, and places
        // its blocks (and copies its inode) at the first hold of its state lock after the gate
        // (`place_snapshot`): here only the plan is left with it.
        let parts = Arc::new(plan.parts.clone());
        let mut first = 0;
        for (e, ptr, sym) in &live {
            e.state.plan(SnapshotPlan {
                parts: parts.clone(),
                first,
                n_ptr: *ptr,
                n_sym: *sym,
                ppb: p,
                sym_bytes,
            });
            first += ptr + sym;
        }
        // The nodes by pointer only: they are encoded after the gate is released.
        let taken = self.tree.take_snapshots();
        assert_eq!(taken.len(), n_nodes, "tree changed under the gate");
        let mut records = self.records.take();
        let freed_inos = self.ino_alloc.lock().take_held();
        drop(gate);
        #[cfg(test)]
        if let Some(hook) = self.after_snapshot.lock().take() {
            hook(self);
        }

        // ---- Phase 2: place what no operation placed already, encode and write, data first.
        plan.addrs = crate::log::part_addrs(&plan.parts, 0, nblocks);
        let mut pending = Vec::with_capacity(nblocks);
        let mut dead = Vec::new();
        let mut copies = Vec::with_capacity(n_inodes);
        for (e, ptr, sym) in live {
            // Taking the lock places the inode's part if no operation did since the gate.
            let part = e
                .state
                .write()
                .snapshot_part
                .take()
                .expect("a placed snapshot part");
            assert_eq!(part.blocks.len(), ptr + sym, "snapshot part not as planned");
            for b in part.blocks {
                pending.push(match b {
                    TakenBlock::Ptr { level, index, ptrs } => Pending::Ptr {
                        desc: Descriptor {
                            kind: BlockKind::Indirect,
                            level,
                            owner: e.ino,
                            index,
                        },
                        ptrs,
                    },
                    TakenBlock::Symlink { index, bytes } => Pending::Symlink {
                        ino: e.ino,
                        index,
                        bytes,
                    },
                });
            }
            dead.extend(part.dead);
            copies.push(part.inode);
        }
        let node_ids = taken.ids();
        for &id in &node_ids {
            pending.push(Pending::Node { id });
        }
        let mut copies = copies.into_iter();
        for _ in 0..n_inodes.div_ceil(per_block) {
            pending.push(Pending::Inodes {
                inodes: copies.by_ref().take(per_block).collect(),
            });
        }
        assert_eq!(pending.len(), plan.addrs.len(), "plan and snapshot differ");
        records.extend(
            runs(dead)
                .into_iter()
                .map(|(addr, count)| Record::Dead { addr, count }),
        );
        records.extend(taken.freed.iter().map(|&node| Record::NFree { node }));
        assert!(records.len() <= max_records, "more records than planned");

        let mut nodes = taken.encode().nodes.into_iter();
        let mut blocks = Vec::with_capacity(pending.len());
        let mut placed = Vec::with_capacity(pending.len());
        for (pb, &addr) in pending.into_iter().zip(&plan.addrs) {
            let (desc, bytes, inodes) = match pb {
                Pending::Ptr { desc, ptrs } => (
                    desc,
                    encode_pointer_block(desc.header(), &ptrs, bs),
                    Vec::new(),
                ),
                Pending::Symlink { ino, index, bytes } => (
                    Descriptor {
                        kind: BlockKind::Symlink,
                        level: 0,
                        owner: ino,
                        index,
                    },
                    encode_symlink_block(ino, index, &bytes, bs),
                    Vec::new(),
                ),
                // A tree node or a value block: its header says which.
                Pending::Node { id } => {
                    let (encoded_id, bytes) = nodes.next().expect("a snapshot for every node");
                    assert_eq!(encoded_id, id, "tree snapshots out of order");
                    (
                        Descriptor {
                            kind: BlockKind::from_u8(bytes[4]).expect("encoded node kind"),
                            level: bytes[5],
                            owner: id,
                            index: crate::format::get_u64(&bytes, 24),
                        },
                        bytes,
                        Vec::new(),
                    )
                }
                Pending::Inodes { inodes } => {
                    let slots: Vec<[u8; INODE_SIZE]> = inodes.iter().map(|d| d.encode()).collect();
                    let locs = inodes
                        .iter()
                        .enumerate()
                        .map(|(i, d)| InodeLoc {
                            ino: d.ino,
                            generation: d.generation,
                            slot: i as u16 + 1,
                            orphan: d.nlink == 0,
                        })
                        .collect();
                    (
                        Descriptor {
                            kind: BlockKind::Inodes,
                            level: 0,
                            owner: 0,
                            index: 0,
                        },
                        encode_inode_block(bs, &slots),
                        locs,
                    )
                }
            };
            placed.push(PlacedBlock { addr, desc, inodes });
            blocks.push(TxnBlock { desc, bytes });
        }
        if self.data_dirty.swap(false, Ordering::AcqRel) {
            self.data.flush()?;
        }
        fl.writer.write(&plan, &blocks, &records, 0)?;
        fl.writer.flush()?;

        // ---- Phase 3: the transaction is durable; the tables follow it.
        {
            let mut t = self.tables.lock();
            t.apply(&placed, &records, now_secs())?;
            fl.writer.commit(&mut t, &plan);
            self.tables_changed(&t);
            self.cleaner.counts.writing.store(0, Ordering::Release);
            self.cleaner.counts.writing_meta.store(0, Ordering::Release);
        }
        self.durable_seq.store(seq, Ordering::Release);
        self.tree.written(&node_ids);
        for ino in tombstones {
            self.inodes.remove(ino);
        }
        // Only now can a freed number be reused: its tombstone no longer occupies the cache.
        // Numbers the kernel still holds wait for its FORGET.
        let reusable: Vec<u64> = freed_inos
            .into_iter()
            .filter(|&ino| !self.kernel_refs.park_if_held(ino))
            .collect();
        self.ino_alloc.lock().release(reusable);
        fl.segments_since_ckpt += plan.segments.len() as u64 - 1;
        let mut s = self.stats.lock();
        s.flushes += 1;
        s.log_blocks_written += plan
            .parts
            .iter()
            .map(|p| p.summary_blocks as u64 + p.nblocks as u64)
            .sum::<u64>();
        Ok(())
    }

    /// Write everything and a checkpoint.
    pub(crate) fn checkpoint(&self, clean: bool) -> Result<()> {
        let mut fl = self.flusher.lock();
        self.checkpoint_locked(&mut fl, clean)
    }

    pub(crate) fn checkpoint_locked(&self, fl: &mut FlushState, clean: bool) -> Result<()> {
        self.checkpoint_written(fl, clean).map(|_| ())
    }

    /// `checkpoint_locked`, saying which meta blocks the checkpoint wrote.
    pub(crate) fn checkpoint_written(
        &self,
        fl: &mut FlushState,
        clean: bool,
    ) -> Result<Vec<crate::log::checkpoint::Item>> {
        if self.opts.read_only {
            return Ok(Vec::new());
        }
        self.flush_locked(fl)?;
        let result = (|| {
            let prepared = {
                let next_node_id = self.tree.next_node_id(); // the tree lock ranks before `tables`
                let mut t = self.tables.lock();
                let info = CheckpointInfo {
                    serial: fl.ckpt_serial + 1,
                    next_node_id,
                    clean,
                };
                let prepared = prepare_checkpoint(&self.sb, &mut fl.writer, &mut t, info);
                self.tables_changed(&t);
                prepared?
            };
            // Nothing may be written into a segment this checkpoint frees before the flush
            // lock is released, so its blocks can leave the cache now.
            let freed: std::collections::HashSet<u64> = prepared.cleaned.iter().copied().collect();
            if !freed.is_empty() {
                self.inode_blocks
                    .forget(|a| freed.contains(&self.sb.segment_of(a)));
            }
            let blocks = prepared.log_blocks();
            let items = prepared.items.clone();
            finish_checkpoint(&self.sb, &*self.meta, &mut fl.writer, prepared)
                .map(|cp| (cp, blocks, items))
        })();
        match result {
            Ok((cp, blocks, items)) => {
                fl.ckpt_serial = cp.serial;
                fl.segments_since_ckpt = 0;
                fl.last_ckpt = Instant::now();
                let mut s = self.stats.lock();
                s.checkpoints += 1;
                s.log_blocks_written += blocks;
                s.checkpoint_blocks_written += blocks;
                Ok(items)
            }
            Err(e) => {
                if !matches!(e, FsError::Errno(libc::ENOSPC)) {
                    log::error!("checkpoint failed, no further writes: {e}");
                    self.set_failed(e.to_string());
                }
                Err(e)
            }
        }
    }

    /// The background thread: periodic log flushes and checkpoints, cache trimming.
    pub(crate) fn background(fs: std::sync::Weak<Fs>) {
        loop {
            let Some(me) = fs.upgrade() else { return };
            if me.is_shut_down() {
                return;
            }
            {
                let mut stop = me.stop.0.lock();
                if !*stop {
                    me.stop.1.wait_for(&mut stop, me.opts.flush_interval);
                }
                if *stop {
                    return;
                }
            }
            let mut fl = me.flusher.lock();
            let due = fl.last_ckpt.elapsed() >= me.opts.checkpoint_interval
                || fl.segments_since_ckpt >= me.opts.checkpoint_segments;
            let r = if due {
                me.checkpoint_locked(&mut fl, false)
            } else {
                me.flush_locked(&mut fl)
            };
            drop(fl);
            if let Err(e) = r {
                log::warn!("periodic log write: {e}");
            }
            me.return_idle_windows();
            me.trim_caches();
        }
    }

    /// Keep cached metadata within budget: half for inodes and indirect blocks, half for tree
    /// nodes (the tree trims itself).
    pub(crate) fn trim_caches(&self) {
        let budget = self.opts.cache_bytes / 2;
        if self.inodes.bytes(self.sb.block_size) > budget {
            self.inodes.evict(budget * 3 / 4, self.sb.block_size);
        }
    }
}
