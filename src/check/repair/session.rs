//! Carrying a plan out: the tables are prepared in memory (inode map, node map, bitmaps,
//! segment usage, where the log continues), the file system is opened on them, a checkpoint
//! starts a new log epoch, the inode and namespace repairs run through the core, and the
//! unmount writes a clean checkpoint.
//!
//! Segment usage while files change: every log block the core kills in the session must be
//! counted live first, or the table would go negative (and the transaction fail). When the
//! session changes files, each segment's count is raised by a segment's worth of bytes, which
//! no session can kill; the next round of the repair sets the exact values.

use super::fixes::{Plan, Planned, SessionFix, TableFix, NEW_LOST_FOUND};
use crate::check::context::{Claims, LogUse};
use crate::check::findings::PtrAt;
use crate::check::pass1_checkpoints::fresh_head;
use crate::check::State;
use crate::device::BlockDevice;
use crate::format::bmap::{child_index, tree_start};
use crate::format::kind::FileKind;
use crate::format::meta::{
    pointers_per_block, IMAP_ALLOCATED, IMAP_ORPHAN, SEG_ACTIVE, SEG_DIRTY, SEG_RESERVED,
    SEG_SUPERBLOCK,
};
use crate::format::{INODE_SIZE, ROOT_INO};
use crate::fs::Fs;
use crate::meta::Tables;
use crate::{FsError, Result};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// What a session did.
#[derive(Default)]
pub struct Done {
    pub done: Vec<String>,
    pub failed: Vec<String>,
}

pub fn run(
    meta: &Arc<dyn BlockDevice>,
    data: &Arc<dyn BlockDevice>,
    state: State,
    plan: &Plan,
) -> Result<Done> {
    let mut out = Done::default();
    let State {
        sb,
        loaded,
        inodes,
        data_use,
        namespace,
        claims,
        ..
    } = state;
    let mut t = loaded.tables;
    let mut head = loaded.head;
    let cp = loaded.cp;
    // Going back to an older checkpoint: the session's checkpoints are numbered past the lost
    // newest one (so the first lands in its region, never the older one's, and no log the
    // lost one's epoch left behind can be taken for a continuation).
    for p in &plan.tables {
        if let TableFix::OlderCheckpoint { newest } = p.fix {
            head.ckpt_serial = head.ckpt_serial.max(newest + 1);
        }
    }
    let has = |f: &TableFix| plan.tables.iter().any(|p| &p.fix == f);

    // ---- The inode map.
    let mut freed: BTreeSet<u64> = BTreeSet::new();
    for p in &plan.tables {
        match p.fix {
            TableFix::FreeLostInode { ino } => {
                t.ifile.free_inode(ino, 0);
                freed.insert(ino);
            }
            TableFix::FixImapEntry {
                ino,
                slot,
                generation,
            } => {
                if let Some(e) = t.ifile.imap.get_mut(ino as usize) {
                    e.slot = slot;
                    e.generation = generation;
                }
            }
            TableFix::ClearOrphanFlag { ino } => {
                if let Some(e) = t.ifile.imap.get_mut(ino as usize) {
                    e.flags &= !IMAP_ORPHAN;
                }
            }
            TableFix::ClearImapFlags { ino } => {
                if let Some(e) = t.ifile.imap.get_mut(ino as usize) {
                    e.flags &= IMAP_ALLOCATED | IMAP_ORPHAN;
                }
            }
            TableFix::ClearNodeMapEntry { id } => {
                if (id as usize) < t.nodes.addrs.len() {
                    t.nodes.set(id, 0);
                }
            }
            _ => continue,
        }
        out.done.push(p.message.clone());
    }
    if has(&TableFix::RewriteIfile) {
        for b in 0..t.ifile.file.len() {
            t.ifile.file.mark_dirty(b);
        }
        out.done
            .push("the inode map, free-inode list and IFile header rewritten".into());
    }

    // ---- Data bitmaps and group descriptors.
    if has(&TableFix::RebuildBitmaps) {
        let groups = t.data.ngroups() as usize;
        let mut dirs = vec![0u32; groups];
        for (ino, info) in &inodes.good {
            if info.is_dir() && !freed.contains(ino) {
                let g = info.disk.group as usize;
                let g = if g < groups { g } else { 0 };
                dirs[g] = dirs[g].saturating_add(1);
            }
        }
        let referenced = &data_use.referenced;
        t.data.rebuild(
            &|b| referenced.get(b as usize).is_some_and(|bit| *bit),
            &dirs,
        );
        out.done
            .push("data bitmaps and group descriptors rebuilt from the blocks files use".into());
    }

    // ---- Where the log continues, and segment usage.
    let changes_files = plan.changes_files();
    let excluded = excluded_claims(plan, pointers_per_block(sb.block_size) as u64);
    let live = live_bytes(&t, &claims, &excluded);
    if has(&TableFix::NewHead) {
        // The fresh head must not be where anything lives.
        for s in [sb.segment_of(head.addr), head.next_segment] {
            if (s as usize) < t.ifile.usage.len() {
                t.ifile.set_seg_flags(s, 0, SEG_ACTIVE);
            }
        }
        for (s, &v) in live.iter().enumerate() {
            if v > 0 {
                t.ifile.set_seg_flags(s as u64, SEG_DIRTY, 0);
            }
        }
        head = fresh_head(&sb, &mut t, &cp).ok_or(FsError::Errno(libc::ENOSPC))?;
        out.done.push(format!(
            "the log continues in segment {}",
            sb.segment_of(head.addr)
        ));
    }
    if has(&TableFix::SegmentUsage) {
        let slack = if changes_files {
            (sb.segment_blocks as u64).saturating_mul(sb.block_size as u64)
        } else {
            0
        };
        set_usage(&mut t, &live, slack, head.addr, head.next_segment);
        out.done.push(if changes_files {
            "segment usage recomputed (with a margin while files change; the next round \
             makes it exact)"
                .into()
        } else {
            "segment usage recomputed from what is reachable".into()
        });
    }
    for p in &plan.tables {
        if matches!(
            p.fix,
            TableFix::CutLog | TableFix::Checkpoint | TableFix::OlderCheckpoint { .. }
        ) {
            out.done.push(p.message.clone());
        }
    }

    // ---- Node ids: above every id the node map uses.
    let max_used = t
        .nodes
        .addrs
        .iter()
        .rposition(|&a| a != 0)
        .map_or(0, |i| i as u64);
    let next_node_id = cp.next_node_id.max(max_used + 1).max(2);
    if has(&TableFix::NextNodeId) {
        out.done.push(format!("the next node id is {next_node_id}"));
    }
    drop(namespace);

    // ---- Open, start a new epoch, repair files, unmount.
    let fs = Fs::open_for_repair(
        sb.clone(),
        meta.clone(),
        data.clone(),
        t,
        head,
        next_node_id,
    );
    if !plan.session.is_empty() {
        // Everything written from here on follows this checkpoint: a crash before the end
        // can never take stale log behind the head for a continuation.
        fs.repair_checkpoint()?;
    }
    let mut lost_found: Option<u64> = None;
    let resolve = |ino: u64, lf: Option<u64>| -> Option<u64> {
        if ino == NEW_LOST_FOUND {
            lf
        } else {
            Some(ino)
        }
    };
    for p in &plan.session {
        let r = apply(&fs, &p.fix, &mut lost_found, resolve);
        match r {
            Ok(()) => out.done.push(p.message.clone()),
            Err(e) => {
                out.failed.push(format!("{}: not done: {e}", p.message));
                if fs_failed(&e) {
                    return Err(e);
                }
            }
        }
    }
    fs.unmount()?;
    Ok(out)
}

/// Errors that mean the file system cannot go on (a write failed).
fn fs_failed(e: &FsError) -> bool {
    matches!(e, FsError::Io(_))
}

fn apply(
    fs: &Fs,
    fix: &SessionFix,
    lost_found: &mut Option<u64>,
    resolve: impl Fn(u64, Option<u64>) -> Option<u64>,
) -> Result<()> {
    let missing = || FsError::corrupt("repair", "the new lost+found was not made");
    match fix {
        SessionFix::ClearPointer { ino, at } => fs.repair_clear_pointer(*ino, *at),
        SessionFix::ClearAllPointers { ino } => fs.repair_clear_all_pointers(*ino),
        SessionFix::SetSize { ino, size } => fs.repair_inode(*ino, |d| d.size = *size),
        SessionFix::InodeFields { ino } => {
            let groups = fs.superblock().groups;
            fs.repair_inode(*ino, |d| {
                d.flags &= crate::format::inode::KNOWN_INODE_FLAGS;
                if d.group as u64 >= groups {
                    d.group = 0;
                }
                if d.mode & libc::S_IFMT != libc::S_IFDIR {
                    d.parent = 0;
                }
            })
        }
        SessionFix::Recount { ino } => fs.repair_recount(*ino),
        SessionFix::RemoveEntry { dir, hash, name } => fs.repair_remove_entry(*dir, *hash, name),
        SessionFix::MakeRoot => fs.repair_make_root(),
        SessionFix::RebuildTree { entries, attrs } => {
            // After the session's first checkpoint, which still holds the old tree: a crash
            // before the new one is written whole leaves the old one for the next fsck.
            fs.repair_reset_tree();
            for e in entries {
                // A type code no inode has: the entry is dropped (its inode is reconnected).
                let Some(kind) = FileKind::from_code(e.kind) else {
                    continue;
                };
                match fs.repair_insert_entry(e.dir, &e.name, e.ino, kind) {
                    Ok(()) => {}
                    Err(err) if fs_failed(&err) => return Err(err),
                    Err(_) => {}
                }
            }
            for a in attrs {
                match fs.repair_set_attr(a.ino, a.hash, &a.name, &a.value) {
                    Ok(()) => {}
                    Err(err) if fs_failed(&err) => return Err(err),
                    Err(_) => {}
                }
            }
            Ok(())
        }
        SessionFix::RemoveAttribute {
            ino,
            hash,
            name,
            free,
        } => fs.repair_remove_attr(*ino, *hash, name, free),
        SessionFix::AttrFlags { ino } => fs.repair_attr_flags(*ino),
        SessionFix::MakeLostFound { name } => {
            *lost_found = Some(fs.repair_mkdir(ROOT_INO, name)?);
            Ok(())
        }
        SessionFix::InsertEntry {
            dir,
            name,
            ino,
            kind,
        } => {
            let dir = resolve(*dir, *lost_found).ok_or_else(missing)?;
            let kind = FileKind::from_code(*kind)
                .ok_or_else(|| FsError::corrupt("repair", format!("type {kind}")))?;
            fs.repair_insert_entry(dir, name, *ino, kind)?;
            if kind == FileKind::Directory {
                fs.repair_inode(*ino, |d| d.parent = dir)?;
            }
            Ok(())
        }
        SessionFix::SetLinks {
            ino,
            nlink,
            size,
            parent,
        } => {
            let ino = resolve(*ino, *lost_found).ok_or_else(missing)?;
            let parent = match parent {
                Some(p) => Some(resolve(*p, *lost_found).ok_or_else(missing)?),
                None => None,
            };
            fs.repair_inode(ino, |d| {
                if let Some(n) = nlink {
                    d.nlink = *n;
                }
                if let Some(s) = size {
                    d.size = *s;
                }
                if let Some(p) = parent {
                    d.parent = p;
                }
            })
        }
        SessionFix::FreeInode { ino } => fs.repair_free_inode(*ino),
    }
}

/// Log blocks the plan stops using without the core killing them: the indirect blocks
/// behind cleared pointers (ino, level, first file block), and the blocks of symlinks freed
/// with their pointers cleared (by owner).
struct Excluded {
    indirect: HashSet<(u64, u8, u64)>,
    symlinks: HashSet<u64>,
}

fn excluded_claims(plan: &Plan, p: u64) -> Excluded {
    let mut out = Excluded {
        indirect: HashSet::new(),
        symlinks: HashSet::new(),
    };
    for Planned { fix, .. } in &plan.session {
        match *fix {
            SessionFix::ClearPointer { ino, at } => {
                let child = match at {
                    PtrAt::Top(tree) if tree < 3 => Some((tree as u8 + 1, tree_start(tree, p))),
                    PtrAt::Slot { level, index, slot } if level > 1 => {
                        Some((level - 1, child_index(level, index, slot, p)))
                    }
                    _ => None,
                };
                if let Some((level, index)) = child {
                    out.indirect.insert((ino, level, index));
                }
            }
            SessionFix::ClearAllPointers { ino } => {
                out.symlinks.insert(ino);
            }
            _ => {}
        }
    }
    out
}

/// Live bytes of every segment, from the prepared tables: 256 per allocated inode, a block
/// for each indirect and symlink block of an inode that stays (as the check claimed them,
/// less `excluded`), each node the node map names, each meta-file block.
fn live_bytes(t: &Tables, claims: &Claims, excluded: &Excluded) -> Vec<u64> {
    let sb = &t.sb;
    let bs = sb.block_size as u64;
    let mut live = vec![0u64; sb.segments as usize];
    let mut add = |addr: u64, n: u64| {
        if let Some(v) = live.get_mut(sb.segment_of(addr) as usize) {
            *v += n;
        }
    };
    for e in t.ifile.imap.iter().filter(|e| e.allocated()) {
        add(e.addr, INODE_SIZE as u64);
    }
    let allocated = |ino: u64| t.ifile.entry(ino).is_some();
    for (addr, u) in claims.iter() {
        let counts = match u {
            LogUse::Indirect { ino, level, index } => {
                allocated(ino) && !excluded.indirect.contains(&(ino, level, index))
            }
            LogUse::Symlink { ino, .. } => allocated(ino) && !excluded.symlinks.contains(&ino),
            _ => false,
        };
        if counts {
            add(addr, bs);
        }
    }
    for &a in t.nodes.addrs.iter().filter(|&&a| a != 0) {
        add(a, bs);
    }
    for mf in [&t.ifile.file, &t.data.file, &t.nodes.file] {
        for &a in mf.blocks.iter().filter(|&&a| a != 0) {
            add(a, bs);
        }
        for &a in mf.indirect.values() {
            add(a, bs);
        }
    }
    live
}

/// Set every segment's live bytes (plus `slack`) and flags: RESERVED for segment 0 only,
/// SUPERBLOCK where the superblock lists a copy, DIRTY where anything lives, ACTIVE for the
/// head's segment and the next one only.
fn set_usage(t: &mut Tables, live: &[u64], slack: u64, head: u64, next: u64) {
    let sb = t.sb.clone();
    let head_seg = sb.segment_of(head);
    for s in 0..sb.segments {
        let v = live.get(s as usize).copied().unwrap_or(0);
        let v = v.saturating_add(slack).min(u32::MAX as u64) as u32;
        let f = t.ifile.usage[s as usize].flags;
        let mut want = f & (SEG_DIRTY | SEG_ACTIVE);
        if s == 0 {
            want |= SEG_RESERVED;
        }
        if sb.copy_segments.contains(&s) {
            want |= SEG_SUPERBLOCK;
        }
        if live.get(s as usize).copied().unwrap_or(0) > 0 {
            want |= SEG_DIRTY;
        }
        if s == head_seg || s == next {
            want |= SEG_ACTIVE;
        } else {
            want &= !SEG_ACTIVE;
        }
        if want != f {
            t.ifile.set_seg_flags(s, want, !want);
        }
        if t.ifile.usage[s as usize].live_bytes != v {
            t.ifile.usage[s as usize].live_bytes = v;
            let b = t.ifile.usage_block_of(s);
            t.ifile.file.mark_dirty(b);
        }
    }
}
