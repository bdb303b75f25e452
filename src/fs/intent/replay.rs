//! Replaying the intent log at mount (docs/DESIGN.md, "Surviving the daemon"): after
//! roll-forward, every operation the recovered log does not hold is carried out again, in
//! stamp order, as it was: with its time, the inode numbers it made, the modes and owners it
//! left. Writes of cached data the log holds no trace of (the file's cache was never written
//! back) are put back into the cache.

use super::records::{IntentOp, IntentRecord};
use crate::fs::types::{Caller, Timespec};
use crate::fs::{Fs, NO_HANDLE};
use crate::intent::Found;
use std::collections::HashMap;

/// What a mount replayed from the intent log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntentReplay {
    /// Operations carried out again (the recovered log did not hold them).
    pub operations: u64,
    /// Writes of data that was cached when the daemon died, put back into the cache.
    pub cached_writes: u64,
    /// Records that could not be carried out (each logged): a bug if ever non-zero.
    pub failed: u64,
    /// Records whose copy had not finished when the daemon died (never acknowledged).
    pub torn: u64,
    /// Everything stamped below this was in the recovered log already.
    pub cover: u64,
    /// What the first failures were (at most five).
    pub failures: Vec<String>,
}

impl Fs {
    /// Replay what `found` holds on top of a log recovered up to serial `next_serial`.
    pub(crate) fn replay_intents(&self, found: &Found, next_serial: u64) -> IntentReplay {
        let Some(log) = &self.intent else {
            return IntentReplay::default();
        };
        let cover = found.cover(next_serial);
        let mut out = IntentReplay {
            torn: found.torn(),
            cover: cover.seq,
            ..IntentReplay::default()
        };
        let mut records = Vec::new();
        for raw in found.records() {
            match IntentRecord::decode(raw.kind, &raw.payload) {
                Ok(r) => records.push((raw.seq, r)),
                Err(e) => {
                    log::error!("intent log: record {} unreadable: {e}", raw.seq);
                    out.failed += 1;
                }
            }
        }
        // What the log holds of each file: its data up to its newest covered write-back, and
        // every change below the cover while it had nothing cached. So its records below the
        // cover are replayed from its first write into the cache after that write-back: what
        // was cached when the daemon died, and the truncates and fallocates it went through.
        let mut written_back: HashMap<(u64, u32), u64> = HashMap::new();
        for (seq, r) in &records {
            if let IntentOp::WrittenBack { ino, generation } = r.op {
                if *seq < cover.seq {
                    written_back.insert((ino, generation), *seq);
                }
            }
        }
        let mut cached_from: HashMap<(u64, u32), u64> = HashMap::new();
        for (seq, r) in &records {
            if let IntentOp::Write {
                ino,
                generation,
                cached: true,
                ..
            } = r.op
            {
                let file = (ino, generation);
                if *seq < cover.seq && written_back.get(&file).is_none_or(|&w| w < *seq) {
                    cached_from.entry(file).or_insert(*seq);
                }
            }
        }
        crate::intent::set_replaying(true);
        log.set_floor(cover.seq);
        // Cached writes come back on top of the log's later allocations: their promises may
        // exceed the free blocks until the last is back (`DataAlloc::overcommit`).
        self.alloc.overcommit(true);
        self.cache.force(true);
        for (seq, r) in &records {
            if *seq >= cover.seq {
                self.end_overcommit(&mut out);
            }
            let result = if *seq < cover.seq {
                match r.op.data_of() {
                    Some((ino, generation, false))
                        if cached_from
                            .get(&(ino, generation))
                            .is_some_and(|&c| c <= *seq) =>
                    {
                        out.cached_writes += 1;
                        self.replay_cached(*seq, r, ino, generation)
                    }
                    _ => continue,
                }
            } else {
                out.operations += 1;
                self.replay_operation(*seq, r)
            };
            if let Err(e) = result {
                let mut op = format!("{:?}", r.op);
                op.truncate(op.char_indices().nth(120).map_or(op.len(), |(i, _)| i));
                let why = format!("record {seq} ({op}): {e}");
                log::error!("intent log: replaying {why}");
                out.failed += 1;
                if out.failures.len() < 5 {
                    out.failures.push(why);
                }
            }
        }
        self.end_overcommit(&mut out);
        Timespec::replay_clock(None);
        crate::intent::clear_stamp();
        log.set_next_seq(log.next_seq().max(found.max_seq() + 1));
        crate::intent::set_replaying(false);
        out
    }

    /// Every cached write is back: hold promises to the free blocks again. They fit, as the
    /// dead daemon's did, once what replayed truncates and punches freed is logged.
    fn end_overcommit(&self, out: &mut IntentReplay) {
        if !self.alloc.overcommitting() {
            return;
        }
        let mut over = self.alloc.overcommit(false);
        if over > 0 && self.data_frees_pending() {
            if let Err(e) = self.sync_log() {
                log::error!("intent log: logging the replay's frees: {e}");
            }
            over = self.alloc.overcommit(false);
        }
        if over > 0 {
            let why = format!("the cached writes restored need {over} blocks more than are free");
            log::error!("intent log: {why}");
            out.failed += 1;
            if out.failures.len() < 5 {
                out.failures.push(why);
            }
        }
    }

    /// The generation of live inode `ino`, if it is live.
    fn live_generation(&self, ino: u64) -> Option<u32> {
        let e = self.inode(ino).ok()?;
        let st = e.state.read();
        (!st.deleted).then_some(st.d.generation)
    }

    /// Put a write (or a truncate, an fallocate) of a file whose cache the log never saw
    /// written back into the file again, leaving its times and mode as the log has them.
    fn replay_cached(
        &self,
        seq: u64,
        r: &IntentRecord,
        ino: u64,
        generation: u32,
    ) -> crate::Result<()> {
        if self.live_generation(ino) != Some(generation) {
            return Ok(()); // freed since: nothing of it is left to restore
        }
        let d = self.inode(ino)?.state.read().d.clone();
        self.replay_operation(seq, r)?;
        self.repair_inode(ino, |n| {
            n.atime = d.atime;
            n.mtime = d.mtime;
            n.ctime = d.ctime;
            n.mode = d.mode;
        })
    }

    /// Carry out `r` again as it was done: stamped `seq`, at its time.
    fn replay_operation(&self, seq: u64, r: &IntentRecord) -> crate::Result<()> {
        let log = self.intent.as_ref().expect("replaying an intent log");
        log.set_next_seq(seq);
        Timespec::replay_clock(Some(r.time));
        let root = Caller::ROOT;
        let owner = |ino: u64, mode: u32, ids: Option<(u32, u32)>| {
            self.repair_inode(ino, |d| {
                d.mode = mode;
                if let Some((uid, gid)) = ids {
                    d.uid = uid;
                    d.gid = gid;
                }
            })
        };
        match &r.op {
            IntentOp::Make {
                parent,
                name,
                ino,
                generation,
                mode,
                uid,
                gid,
                rdev,
                target,
            } => {
                super::force_inode(*ino, *generation);
                let made = match (*mode & libc::S_IFMT, target) {
                    (libc::S_IFDIR, _) => {
                        self.mkdir(&root, *parent, name, *mode & 0o7777).map(|_| ())
                    }
                    (libc::S_IFLNK, Some(t)) => self.symlink(&root, *parent, name, t).map(|_| ()),
                    _ => self.mknod(&root, *parent, name, *mode, *rdev).map(|_| ()),
                };
                super::take_forced_inode();
                made?;
                owner(*ino, *mode, Some((*uid, *gid)))
            }
            IntentOp::MakeUnnamed {
                parent,
                ino,
                generation,
                mode,
                uid,
                gid,
            } => {
                super::force_inode(*ino, *generation);
                // Linkable: the kernel, which holds it open, alone knows whether O_EXCL forbade
                // a name, and sends no LINK then.
                let made = self.make_unnamed(&root, *parent, *mode, false, true);
                super::take_forced_inode();
                made?;
                owner(*ino, *mode, Some((*uid, *gid)))
            }
            IntentOp::Link { ino, parent, name } => {
                self.link(&root, *ino, *parent, name).map(|_| ())
            }
            IntentOp::Unlink { parent, name } => self.unlink(&root, *parent, name),
            IntentOp::Rmdir { parent, name } => self.rmdir(&root, *parent, name),
            IntentOp::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
            } => self.rename(&root, *parent, name, *new_parent, new_name, *flags),
            IntentOp::SetAttr {
                ino,
                generation,
                set,
                mode,
                uid,
                gid,
                mtime,
                ctime,
            } => {
                if self.live_generation(*ino) != Some(*generation) {
                    return Ok(());
                }
                self.setattr(&root, *ino, set)?;
                let t = crate::fs::inode::to_disk_time;
                self.repair_inode(*ino, |d| {
                    d.mode = *mode;
                    d.uid = *uid;
                    d.gid = *gid;
                    d.mtime = t(*mtime);
                    d.ctime = t(*ctime);
                })
            }
            IntentOp::Write {
                ino,
                generation,
                offset,
                mode,
                data,
                ..
            } => {
                if self.live_generation(*ino) != Some(*generation) {
                    return Ok(());
                }
                self.write_as(*ino, NO_HANDLE, 0, *offset, data, None)?;
                owner(*ino, *mode, None)
            }
            IntentOp::Fallocate {
                ino,
                generation,
                offset,
                len,
                mode,
            } => {
                if self.live_generation(*ino) != Some(*generation) {
                    return Ok(());
                }
                self.fallocate_as(&root, *ino, NO_HANDLE, *offset, *len, *mode)
            }
            IntentOp::SetXattr {
                ino,
                name,
                value,
                flags,
                mode,
            } => {
                self.setxattr(&root, *ino, name, value, *flags)?;
                owner(*ino, *mode, None)
            }
            IntentOp::RemoveXattr { ino, name, mode } => {
                self.removexattr(&root, *ino, name)?;
                owner(*ino, *mode, None)
            }
            IntentOp::SetFlags { ino, flags } => self.set_inode_flags(&root, *ino, *flags),
            IntentOp::WrittenBack { .. } => Ok(()),
        }
    }
}
