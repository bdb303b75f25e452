//! The log transaction: turning everything dirty into one transaction (docs/DESIGN.md,
//! "Transactions"), the placing of each inode's part of it, and group commit for fsync.

use super::dirty::TakenSet;
use super::log_commit::FlushState;
use crate::betree::{DirtySnapshots, TakenNodes};
use crate::format::inode::{encode_inode_block, inodes_per_block, DiskInode};
use crate::format::meta::{encode_pointer_block, encode_symlink_block, symlink_bytes_per_block};
use crate::format::summary::{Descriptor, Record};
use crate::format::{BlockKind, INODE_SIZE};
use crate::fs::inode::{InodeEntry, SnapshotPlan, TakenBlock};
use crate::fs::{Attr, Fs};
use crate::log::writer::Plan;
use crate::log::{now_secs, TxnBlock};
use crate::meta::{InodeLoc, PlacedBlock};
use crate::{FsError, Result};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

impl Pending {
    /// The block an inode's placing took (`place_snapshot`), owned by inode `ino`.
    fn from_taken(ino: u64, b: TakenBlock) -> Pending {
        match b {
            TakenBlock::Ptr { level, index, ptrs } => Pending::Ptr {
                desc: Descriptor {
                    kind: BlockKind::Indirect,
                    level,
                    owner: ino,
                    index,
                },
                ptrs,
            },
            TakenBlock::Symlink { index, bytes } => Pending::Symlink { ino, index, bytes },
        }
    }

    /// Encode the block: its descriptor, its bytes and, for an inode block, where its inodes
    /// are. A tree node takes the next of `nodes`, the tree's snapshots encoded in order.
    fn encode(
        self,
        nodes: &mut impl Iterator<Item = (u64, Vec<u8>)>,
        bs: u32,
    ) -> (Descriptor, Vec<u8>, Vec<InodeLoc>) {
        match self {
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
        }
    }
}

/// Encode the blocks after the gate, in the plan's order, with the addresses the plan gives
/// them: the blocks to write and what applying them tells the tables.
fn encode_blocks(
    pending: Vec<Pending>,
    nodes: DirtySnapshots,
    addrs: &[u64],
    bs: u32,
) -> (Vec<TxnBlock>, Vec<PlacedBlock>) {
    let mut nodes = nodes.encode().nodes.into_iter();
    let mut blocks = Vec::with_capacity(pending.len());
    let mut placed = Vec::with_capacity(pending.len());
    for (pb, &addr) in pending.into_iter().zip(addrs) {
        let (desc, bytes, inodes) = pb.encode(&mut nodes, bs);
        placed.push(PlacedBlock { addr, desc, inodes });
        blocks.push(TxnBlock { desc, bytes });
    }
    (blocks, placed)
}

/// What the exclusive phase took.
// Made once per transaction and moved once: boxing the snapshot would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Taken {
    /// Nothing dirty: snapshot `seq` is durable once the data device is.
    Nothing(u64),
    Snapshot(Snapshot),
}

/// What the exclusive phase hands to the rest of the transaction.
struct Snapshot {
    seq: u64,
    /// Every mutation stamped below this is in the snapshot (the intent log's cover).
    intent_seq: u64,
    set: TakenSet,
    /// The inode-owned blocks the plan reserves first: dirty indirect blocks and the blocks of
    /// long symlink targets (`n_ptr + n_sym`).
    n_owned: usize,
    nblocks: usize,
    max_records: usize,
    plan: Plan,
    nodes: TakenNodes,
    records: Vec<Record>,
    freed_inos: Vec<u64>,
}

/// What the inodes of a snapshot placed, taken by the writer after the gate.
struct InodeParts {
    /// Their blocks, in the plan's order.
    owned: Vec<Pending>,
    /// The addresses those blocks replace.
    dead: Vec<u64>,
    /// The inodes as the snapshot took them, in inode number order.
    copies: Vec<DiskInode>,
    /// Inodes freed before the gate.
    tombstones: Vec<u64>,
}

/// A transaction after the gate: where it goes, its records, and what applying it finishes.
struct Transaction {
    seq: u64,
    intent_seq: u64,
    plan: Plan,
    records: Vec<Record>,
    /// The tree nodes it writes.
    node_ids: Vec<u64>,
    /// Inodes freed before the gate, cached as tombstones until it is applied.
    tombstones: Vec<u64>,
    /// Inode numbers freed in it, reusable once it is applied.
    freed_inos: Vec<u64>,
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
impl Fs {
    /// Make everything done so far durable. Concurrent callers share one log write: if a
    /// snapshot was taken after this call began, its completion is enough (group commit).
    pub(crate) fn sync_log(&self) -> Result<()> {
        // Any snapshot numbered `target` or later was taken after this call began.
        let target = self.log.next_snapshot();
        let mut fl = self.log.flusher();
        if self.log.durable() >= target {
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
        self.writeback_all()?;
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

    /// `attr`, an entry just made and handed out (with one kernel reference taken, and `fh`
    /// opened with it), once the directory change that made it is committed (under
    /// `dirsync`). If that fails the caller gets the error and never the entry, so the
    /// reference and the handle go back (the change itself stays, for the next log write).
    pub(crate) fn entry_committed(&self, attr: Attr, fh: Option<u64>) -> Result<Attr> {
        if let Err(e) = self.commit_dir_change() {
            if let Some(fh) = fh {
                if let Err(r) = self.release(attr.ino, fh) {
                    log::debug!("releasing the handle of a create that failed: {r}");
                }
            }
            self.forget(attr.ino, 1);
            return Err(e);
        }
        Ok(attr)
    }

    /// Write every dirty object as one transaction, data first.
    pub(crate) fn flush_locked(&self, fl: &mut FlushState) -> Result<()> {
        if self.is_read_only() {
            return Ok(());
        }
        if let Some(why) = self.log.failure() {
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
                self.log.set_failed(e.to_string());
            }
        }
        result
    }

    /// One log transaction of everything dirty, in the phases docs/DESIGN.md "Transactions"
    /// names: the snapshot under the gate, the collection of what each inode placed, the
    /// encoding, the write (data first) and the tables following it.
    fn write_transaction(&self, fl: &mut FlushState) -> Result<()> {
        let snapshot = match self.take_snapshot(fl)? {
            Taken::Nothing(seq) => {
                self.alloc.flush_written()?;
                self.log.made_durable(seq);
                return Ok(());
            }
            Taken::Snapshot(snapshot) => snapshot,
        };
        #[cfg(test)]
        if let Some(hook) = self.log.after_snapshot.lock().take() {
            hook(self);
        }
        let (txn, pending, nodes) = self.collect_snapshot(snapshot);
        let (blocks, placed) = encode_blocks(pending, nodes, &txn.plan.addrs, self.sb.block_size);
        // The intent log's marker goes first: a transaction on the device always has one.
        let serial = txn.plan.end.serial;
        let intent_seq = self.intent.as_ref().map_or(0, |i| i.clamp(txn.intent_seq));
        self.intent_cover(serial, intent_seq);
        self.write_log(fl, &txn, &blocks)?;
        self.apply_durable(fl, txn, &placed)?;
        self.intent_durable(serial, intent_seq);
        Ok(())
    }

    /// The snapshot, in memory, under the gate. Nothing here is in proportion to the number of
    /// dirty inodes: the set is taken whole, the counts were kept where blocks change
    /// (`inode::Placing`), and each inode places its blocks at the first hold of its state
    /// lock after the gate.
    fn take_snapshot(&self, fl: &FlushState) -> Result<Taken> {
        let bs = self.sb.block_size;
        let gate = self.log.gate.write();
        let seq = self.log.next_snapshot();
        let intent_seq = self.intent_position();
        // 1. The dirty inode set, whole; 2. the totals of its dirty blocks.
        let set = self.log.dirty.take(&self.cleaner.counts);
        let (n_ptr, n_sym) = self.log.placing.take_counts();
        let n_nodes = self.ns.tree.dirty_count();
        let n_records = self.log.records.lock().len();
        if set.inodes.is_empty() && n_nodes == 0 && n_records == 0 {
            assert_eq!(n_ptr + n_sym, 0, "dirty blocks of no dirty inode");
            self.log.snapshot_taken(seq);
            return Ok(Taken::Nothing(seq));
        }
        // 3. The partial segments.
        let n_inodes = set.live();
        let nblocks = n_ptr + n_sym + n_nodes + n_inodes.div_ceil(inodes_per_block(bs));
        let max_records = n_records + n_ptr + n_sym + self.ns.tree.freed_count();
        let plan = match self.plan_snapshot(fl, nblocks, max_records) {
            Ok(plan) => plan,
            Err(e) => {
                self.log.placing.give_back_counts(n_ptr, n_sym);
                self.log.dirty.restore(set, &self.cleaner.counts);
                return Err(e);
            }
        };
        self.count_in_flight(&plan, &set, n_nodes);

        // From here on the snapshot is taken: nothing may fail until it is written.
        self.log.snapshot_taken(seq);
        self.cleaner.snapshot_taken();
        // 4. The plan published: the inodes of the set place their blocks, the plan's first
        // `n_ptr + n_sym`, in ranges taken in the order they come (`place_snapshot`).
        self.log.placing.publish(Arc::new(SnapshotPlan {
            epoch: set.epoch,
            parts: plan.parts.clone(),
            blocks: n_ptr + n_sym,
            cursor: AtomicUsize::new(0),
            ppb: self.ppb,
            sym_bytes: symlink_bytes_per_block(bs),
        }));
        // The dirty nodes' set whole: they are captured and encoded after the gate is released.
        let nodes = self.ns.tree.take_snapshots();
        assert_eq!(nodes.len(), n_nodes, "tree changed under the gate");
        let records = self.log.records.take();
        let freed_inos = self.ns.take_held_inos();
        drop(gate);
        Ok(Taken::Snapshot(Snapshot {
            seq,
            intent_seq,
            set,
            n_owned: n_ptr + n_sym,
            nblocks,
            max_records,
            plan,
            nodes,
            records,
            freed_inos,
        }))
    }

    /// Plan the parts only: the list of addresses is made after the gate. A failure here is
    /// before the point of no return: the set and counts go back as they were.
    fn plan_snapshot(&self, fl: &FlushState, nblocks: usize, max_records: usize) -> Result<Plan> {
        let plan = fl
            .writer
            .plan_parts(&self.log.lock_ifile(), nblocks, max_records)?;
        #[cfg(test)]
        if self.log.fail_next_plan.swap(false, Ordering::AcqRel) {
            return Err(FsError::Errno(libc::ENOSPC));
        }
        Ok(plan)
    }

    /// From the snapshot until the tables show it, admission counts the transaction here.
    fn count_in_flight(&self, plan: &Plan, set: &TakenSet, n_nodes: usize) {
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
        let touched = (set.imap_blocks() + n_nodes + self.ns.tree.freed_count()) as u64
            + self.log.records.meta_blocks();
        self.cleaner
            .counts
            .writing_meta
            .store(touched, Ordering::Release);
    }

    /// After the gate: capture the tree's nodes, place what no operation placed already, and
    /// line up the blocks in the plan's order (inode-owned blocks, tree nodes, inode blocks),
    /// with the records of the addresses they replace.
    fn collect_snapshot(&self, snapshot: Snapshot) -> (Transaction, Vec<Pending>, DirtySnapshots) {
        let Snapshot {
            seq,
            intent_seq,
            set,
            n_owned,
            nblocks,
            max_records,
            mut plan,
            nodes,
            mut records,
            freed_inos,
        } = snapshot;
        let n_inodes = set.live();
        let per_block = inodes_per_block(self.sb.block_size);
        let nodes = self.ns.tree.capture(nodes);
        plan.addrs = crate::log::part_addrs(&plan.parts, 0, nblocks);
        let InodeParts {
            owned,
            dead,
            copies,
            tombstones,
        } = self.take_inode_parts(set, n_owned);
        let mut pending = owned;
        let node_ids = nodes.ids();
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
        records.extend(nodes.freed.iter().map(|&node| Record::NFree { node }));
        assert!(records.len() <= max_records, "more records than planned");
        let txn = Transaction {
            seq,
            intent_seq,
            plan,
            records,
            node_ids,
            tombstones,
            freed_inos,
        };
        (txn, pending, nodes)
    }

    /// Take each inode's lock in turn, which places its part if no operation did since the
    /// gate; one freed before the gate (a tombstone) has none. The cursor must have handed out
    /// exactly the planned inode-owned blocks.
    fn take_inode_parts(&self, set: TakenSet, n_owned: usize) -> InodeParts {
        let n_inodes = set.live();
        let mut entries: Vec<Arc<InodeEntry>> = set.inodes.into_values().collect();
        entries.sort_unstable_by_key(|e| e.ino);
        let mut owned: Vec<Option<Pending>> = (0..n_owned).map(|_| None).collect();
        let mut dead = Vec::new();
        let mut copies = Vec::with_capacity(n_inodes);
        let mut tombstones = Vec::new();
        for e in entries {
            let part = {
                let mut st = e.state.write();
                match st.snapshot_part.take() {
                    Some(part) => part,
                    None => {
                        assert!(st.deleted, "inode {} of the snapshot not placed", e.ino);
                        tombstones.push(e.ino);
                        continue;
                    }
                }
            };
            for (k, b) in part.blocks.into_iter().enumerate() {
                owned[part.first + k] = Some(Pending::from_taken(e.ino, b));
            }
            dead.extend(part.dead);
            copies.push(part.inode);
        }
        assert_eq!(
            self.log.placing.finish(),
            n_owned,
            "inodes placed fewer blocks than the snapshot counted"
        );
        assert_eq!(copies.len(), n_inodes, "live inodes of the snapshot");
        let owned = owned
            .into_iter()
            .map(|b| b.expect("every planned block placed"))
            .collect();
        InodeParts {
            owned,
            dead,
            copies,
            tombstones,
        }
    }

    /// Write the transaction, data first: the data device is flushed before the log is
    /// written, and the log after.
    fn write_log(&self, fl: &mut FlushState, txn: &Transaction, blocks: &[TxnBlock]) -> Result<()> {
        self.alloc.flush_written()?;
        fl.writer.write(&txn.plan, blocks, &txn.records, 0)?;
        fl.writer.flush()?;
        Ok(())
    }

    /// The transaction is durable; the tables follow it.
    fn apply_durable(
        &self,
        fl: &mut FlushState,
        txn: Transaction,
        placed: &[PlacedBlock],
    ) -> Result<()> {
        {
            let mut locked = self.lock_tables();
            let mut t = locked.tables();
            t.apply(placed, &txn.records, now_secs())?;
            fl.writer.commit(t.ifile, &txn.plan);
            self.tables_changed(&t);
            self.cleaner.counts.writing.store(0, Ordering::Release);
            self.cleaner.counts.writing_meta.store(0, Ordering::Release);
        }
        self.log.made_durable(txn.seq);
        self.ns.tree.written(&txn.node_ids);
        for ino in txn.tombstones {
            self.ns.inodes.remove(ino);
        }
        // Only now can a freed number be reused: its tombstone no longer occupies the cache.
        // Numbers the kernel still holds wait for its FORGET.
        self.ns.release_inos(txn.freed_inos);
        fl.segments_since_ckpt += txn.plan.segments.len() as u64 - 1;
        self.log.count_flush(
            txn.plan
                .parts
                .iter()
                .map(|p| p.summary_blocks as u64 + p.nblocks as u64)
                .sum::<u64>(),
        );
        Ok(())
    }
}
