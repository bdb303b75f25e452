//! Writing checkpoints: every dirty meta-file block goes to the log, then the checkpoint
//! region that names the meta files' inodes and the log head.
//!
//! Writing meta blocks changes segment usage, which lives in a meta file itself. The set of
//! blocks to write is therefore grown until it is closed: every usage block that the write
//! will change is in the set before anything is encoded.

use super::writer::{LogWriter, TxnBlock};
use super::{now_secs, read_block};
use crate::device::BlockDevice;
use crate::format::checkpoint::{Checkpoint, CP_CLEAN, CP_REGION_A, CP_REGION_B};
use crate::format::inode::DiskInode;
use crate::format::meta::{encode_meta_block, encode_pointer_block, SEG_ACTIVE, SEG_DIRTY};
use crate::format::summary::{Descriptor, SS_CHECKPOINT};
use crate::format::superblock::Superblock;
use crate::format::{BlockKind, BITMAP_ID, IFILE_ID, NODEMAP_ID};
use crate::meta::metafile::MetaFile;
use crate::meta::TablesMut;
use crate::{FsError, Result};
use std::collections::{BTreeSet, HashSet};

/// One block a checkpoint writes: a meta-file block or one of a meta file's indirect blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Item {
    Block { file: u64, index: u64 },
    Indirect { file: u64, level: u8, index: u64 },
}

/// Add to `set` what a checkpoint writes when block `index` of meta file `file` is dirty:
/// the block and every indirect block on the way to it.
pub fn add_with_ancestors(set: &mut BTreeSet<Item>, f: &MetaFile, file: u64, index: u64) {
    set.insert(Item::Block { file, index });
    for s in f.ancestors(index) {
        set.insert(Item::Indirect {
            file,
            level: s.level,
            index: s.index,
        });
    }
}

fn metafile<'a>(t: &'a TablesMut, id: u64) -> &'a MetaFile {
    match id {
        IFILE_ID => &t.ifile.file,
        BITMAP_ID => &t.data.file,
        _ => &t.nodes.file,
    }
}

fn metafile_mut<'a>(t: &'a mut TablesMut, id: u64) -> &'a mut MetaFile {
    match id {
        IFILE_ID => &mut t.ifile.file,
        BITMAP_ID => &mut t.data.file,
        _ => &mut t.nodes.file,
    }
}

/// The template of a meta file's inode (everything but its pointers).
pub fn meta_inode_template(id: u64) -> DiskInode {
    DiskInode {
        ino: id,
        mode: libc::S_IFREG | 0o600,
        nlink: 1,
        ..Default::default()
    }
}

fn collect(t: &TablesMut) -> Vec<Item> {
    let mut set = BTreeSet::new();
    for id in [IFILE_ID, BITMAP_ID, NODEMAP_ID] {
        let f = metafile(t, id);
        for &b in &f.dirty {
            add_with_ancestors(&mut set, f, id, b);
        }
    }
    set.into_iter().collect()
}

fn old_addr(t: &TablesMut, it: Item) -> u64 {
    match it {
        Item::Block { file, index } => metafile(t, file).blocks[index as usize],
        Item::Indirect { file, level, index } => metafile(t, file)
            .indirect
            .get(&(level, index))
            .copied()
            .unwrap_or(0),
    }
}

pub struct CheckpointInfo {
    pub serial: u64,
    pub next_node_id: u64,
    pub clean: bool,
}

/// A checkpoint laid out and encoded, ready to be written.
pub struct PreparedCheckpoint {
    plan: super::writer::Plan,
    blocks: Vec<TxnBlock>,
    /// What `blocks` are, in the same order.
    pub items: Vec<Item>,
    pub cp: Checkpoint,
    /// Segments this checkpoint makes reusable.
    pub cleaned: Vec<u64>,
}

impl PreparedCheckpoint {
    /// Log blocks `finish_checkpoint` writes (summaries included), region not counted.
    pub fn log_blocks(&self) -> u64 {
        if self.blocks.is_empty() {
            return 0;
        }
        self.plan
            .parts
            .iter()
            .map(|p| p.summary_blocks as u64 + p.nblocks as u64)
            .sum()
    }
}

/// Lay out every dirty meta block at the log head and build checkpoint `info.serial`. Only
/// memory is touched: the tables describe the state as if the write had happened. The
/// caller has written and applied every transaction first, holds the flush lock, and must
/// call `finish_checkpoint` next.
pub fn prepare_checkpoint(
    sb: &Superblock,
    w: &mut LogWriter,
    t: &mut TablesMut,
    info: CheckpointInfo,
) -> Result<PreparedCheckpoint> {
    let bs = sb.block_size;
    let now = now_secs();
    // Segments dead at this checkpoint become clean once it is durable; nothing written
    // since the previous checkpoint is needed to roll forward from this one.
    let active: HashSet<u64> = [sb.segment_of(w.head.addr), w.head.next_segment].into();
    let to_clean: Vec<u64> = (1..sb.segments)
        .filter(|&s| {
            let u = t.ifile.usage[s as usize];
            u.flags & SEG_DIRTY != 0
                && u.flags & SEG_ACTIVE == 0
                && u.live_bytes == 0
                && !active.contains(&s)
        })
        .collect();
    for &s in &to_clean {
        let b = t.ifile.usage_block_of(s);
        t.ifile.file.mark_dirty(b);
    }
    t.ifile.file.mark_dirty(0);

    // Grow the set of blocks until every usage block the write touches is in it.
    let (items, plan) = loop {
        let items = collect(t);
        let plan = w.plan(t.ifile, items.len(), 0)?;
        let mut touched: BTreeSet<u64> = plan.segments.iter().copied().collect();
        touched.insert(sb.segment_of(w.head.addr));
        touched.insert(w.head.next_segment);
        touched.insert(plan.end.next_segment);
        for &it in &items {
            let a = old_addr(t, it);
            if a != 0 {
                touched.insert(sb.segment_of(a));
            }
        }
        let missing: Vec<u64> = touched
            .iter()
            .map(|&s| t.ifile.usage_block_of(s))
            .filter(|b| !t.ifile.file.dirty.contains(b))
            .collect();
        if missing.is_empty() {
            break (items, plan);
        }
        for b in missing {
            t.ifile.file.mark_dirty(b);
        }
    };

    w.commit(t.ifile, &plan);
    for (&it, &addr) in items.iter().zip(&plan.addrs) {
        let old = match it {
            Item::Block { file, index } => {
                std::mem::replace(&mut metafile_mut(t, file).blocks[index as usize], addr)
            }
            Item::Indirect { file, level, index } => metafile_mut(t, file)
                .indirect
                .insert((level, index), addr)
                .unwrap_or(0),
        };
        t.ifile.add_live(sb.segment_of(addr), bs as i64, now)?;
        if old != 0 {
            t.ifile.add_live(sb.segment_of(old), -(bs as i64), now)?;
        }
    }
    for &s in &to_clean {
        t.ifile.set_seg_flags(s, 0, SEG_DIRTY);
    }

    // Everything is final: encode.
    let written: BTreeSet<Item> = items.iter().copied().collect();
    for id in [IFILE_ID, BITMAP_ID, NODEMAP_ID] {
        for &b in &metafile(t, id).dirty {
            assert!(
                written.contains(&Item::Block { file: id, index: b }),
                "checkpoint set not closed: {id}/{b}"
            );
        }
    }
    let blocks: Vec<TxnBlock> = items
        .iter()
        .map(|&it| match it {
            Item::Block { file, index } => {
                let body = match file {
                    IFILE_ID => t.ifile.encode_block(index),
                    BITMAP_ID => t.data.encode_block(index),
                    _ => t.nodes.encode_block(index),
                };
                TxnBlock {
                    desc: Descriptor {
                        kind: BlockKind::Meta,
                        level: 0,
                        owner: file,
                        index,
                    },
                    bytes: encode_meta_block(file, index, &body, bs),
                }
            }
            Item::Indirect { file, level, index } => {
                let h = Descriptor {
                    kind: BlockKind::MetaIndirect,
                    level,
                    owner: file,
                    index,
                };
                let ptrs = metafile(t, file).pointer_block(level, index);
                TxnBlock {
                    desc: h,
                    bytes: encode_pointer_block(h.header(), &ptrs, bs),
                }
            }
        })
        .collect();
    for id in [IFILE_ID, BITMAP_ID, NODEMAP_ID] {
        metafile_mut(t, id).dirty.clear();
    }
    let cp = Checkpoint {
        serial: info.serial,
        uuid_tag: sb.uuid_tag(),
        log_head: w.head.addr,
        next_segment: w.head.next_segment,
        next_serial: w.head.serial,
        time_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64,
        flags: if info.clean { CP_CLEAN } else { 0 },
        next_node_id: info.next_node_id,
        free_data_blocks: t.data.committed_free(),
        live_inodes: t.ifile.live_inodes,
        ifile: t.ifile.file.inode(&meta_inode_template(IFILE_ID)),
        bitmap: t.data.file.inode(&meta_inode_template(BITMAP_ID)),
        nodemap: t.nodes.file.inode(&meta_inode_template(NODEMAP_ID)),
    };
    Ok(PreparedCheckpoint {
        plan,
        blocks,
        items,
        cp,
        cleaned: to_clean,
    })
}

/// Write the meta blocks, make them durable, then write and flush the checkpoint region.
/// From here on the log follows the new checkpoint.
pub fn finish_checkpoint(
    sb: &Superblock,
    dev: &dyn BlockDevice,
    w: &mut LogWriter,
    p: PreparedCheckpoint,
) -> Result<Checkpoint> {
    if !p.blocks.is_empty() {
        w.write(&p.plan, &p.blocks, &[], SS_CHECKPOINT)?;
        w.flush()?;
    }
    dev.write_at(
        &p.cp.encode(sb.block_size),
        Checkpoint::region(p.cp.serial) * sb.block_size as u64,
    )?;
    dev.flush()?;
    w.head.ckpt_serial = p.cp.serial;
    Ok(p.cp)
}

/// The newest valid checkpoint of the two regions.
pub fn read_newest(sb: &Superblock, dev: &dyn BlockDevice) -> Result<Checkpoint> {
    let mut best: Option<Checkpoint> = None;
    let mut errors = Vec::new();
    for region in [CP_REGION_A, CP_REGION_B] {
        match read_block(dev, sb.block_size, region)
            .and_then(|b| Checkpoint::decode(&b, sb.uuid_tag()))
        {
            Ok(cp) if Checkpoint::region(cp.serial) == region => {
                if best.as_ref().is_none_or(|b| cp.serial > b.serial) {
                    best = Some(cp);
                }
            }
            Ok(cp) => errors.push(format!(
                "region {region} holds serial {} that belongs elsewhere",
                cp.serial
            )),
            Err(e) => errors.push(format!("region {region}: {e}")),
        }
    }
    best.ok_or_else(|| {
        FsError::corrupt(
            "checkpoint",
            format!("no valid checkpoint ({})", errors.join("; ")),
        )
    })
}
