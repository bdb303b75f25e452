//! Pass 1: checkpoints. Both regions are read (valid? which serial? the newest is used, as
//! mount does), the tables the newest names are loaded, and the log written after it is rolled
//! forward in memory exactly as mount would, so the later passes check the state a mount sees.
//!
//! After a clean unmount nothing follows a CLEAN checkpoint; a log after a checkpoint without
//! the flag is normal crash recovery and only worth a warning.

use super::context::{damage_or_failure, LogReader, Sink};
use super::findings::Finding;
use crate::format::checkpoint::{Checkpoint, CP_REGION_A, CP_REGION_B};
use crate::format::meta::{decode_meta_block, SEG_ACTIVE};
use crate::format::superblock::Superblock;
use crate::format::{BITMAP_ID, IFILE_ID, NODEMAP_ID};
use crate::log::recovery::{load_tables, roll_forward_limited, RecoveryReport};
use crate::log::{LogHead, LogWriter};
use crate::meta::datamap::DataMap;
use crate::meta::ifile::Ifile;
use crate::meta::metafile::MetaFile;
use crate::meta::nodemap::NodeMap;
use crate::meta::Tables;
use crate::Result;
use std::sync::Arc;

pub const NAME: &str = "checkpoints";

/// What the later passes check: the tables as mount would have them.
pub struct Loaded {
    /// The checkpoint the check started from.
    pub cp: Checkpoint,
    /// Its tables after roll-forward.
    pub tables: Tables,
    /// Where the log continues after roll-forward.
    pub head: LogHead,
    /// The IFile block bodies exactly as the checkpoint wrote them (empty if unreadable).
    pub ifile_at_checkpoint: Vec<Vec<u8>>,
}

enum Region {
    Valid(Box<Checkpoint>),
    /// All zero: never written (mkfs clears both, the first checkpoint fills only one).
    Empty,
    Unusable(String),
}

fn region_name(region: u64) -> &'static str {
    if region == CP_REGION_A {
        "A"
    } else {
        "B"
    }
}

fn read_region(log: &LogReader, region: u64) -> Result<Region> {
    let raw = match log.read_any(region)? {
        Ok(b) => b,
        Err(why) => return Ok(Region::Unusable(why)),
    };
    if raw.iter().all(|&b| b == 0) {
        return Ok(Region::Empty);
    }
    Ok(match Checkpoint::decode(&raw, log.sb.uuid_tag()) {
        Err(e) => Region::Unusable(e.to_string()),
        Ok(cp) if Checkpoint::region(cp.serial) != region => Region::Unusable(format!(
            "it holds checkpoint {}, which belongs in region {}",
            cp.serial,
            region_name(Checkpoint::region(cp.serial))
        )),
        Ok(cp) => Region::Valid(Box::new(cp)),
    })
}

pub fn run(sink: &mut Sink, log: &LogReader) -> Result<Option<Loaded>> {
    let regions = [
        (CP_REGION_A, read_region(log, CP_REGION_A)?),
        (CP_REGION_B, read_region(log, CP_REGION_B)?),
    ];
    let Some((newest_region, cp)) = newest_checkpoint(sink, &regions) else {
        return Ok(None);
    };
    // The other region is the fallback should the newest be lost.
    let other = if newest_region == CP_REGION_A {
        &regions[1]
    } else {
        &regions[0]
    };
    let mut pass = Pass {
        sink,
        log,
        sb: log.sb.clone(),
        cp,
        head_ok: false,
    };
    pass.check_fallback(other);
    pass.head_ok = check_head(pass.sink, &pass.sb, &pass.cp);
    pass.check_next_node_id();
    let Some(mut tables) = pass.load_checkpoint_tables(&other.1)? else {
        return Ok(None);
    };
    let ifile_at_checkpoint = read_ifile_bodies(pass.sink, log, &tables)?;
    pass.check_repeated_figures(&tables);

    // Roll forward in memory; the device is read-only (see BoundedDevice).
    pass.sink.progress(1, NAME, 0, 1);
    let Some(head) = pass.continue_log(&mut tables)? else {
        return Ok(None);
    };
    pass.sink.progress(1, NAME, 1, 1);
    Ok(Some(Loaded {
        cp: pass.cp,
        tables,
        head,
        ifile_at_checkpoint,
    }))
}

/// The newest valid checkpoint and its region (reported as the one used), or None when
/// neither region holds one (reported as an error).
fn newest_checkpoint(sink: &mut Sink, regions: &[(u64, Region); 2]) -> Option<(u64, Checkpoint)> {
    let newest = regions
        .iter()
        .filter_map(|(r, s)| match s {
            Region::Valid(cp) => Some((*r, (**cp).clone())),
            _ => None,
        })
        .max_by_key(|(_, cp)| cp.serial);
    let Some((region, cp)) = newest else {
        let why: Vec<String> = regions
            .iter()
            .map(|(r, s)| match s {
                Region::Empty => format!("region {} is empty", region_name(*r)),
                Region::Unusable(w) => format!("region {}: {w}", region_name(*r)),
                Region::Valid(_) => String::new(),
            })
            .collect();
        sink.error(
            NAME,
            format!(
                "no usable checkpoint ({}); nothing more can be checked",
                why.join("; ")
            ),
        );
        return None;
    };
    sink.stats.checkpoint_serial = cp.serial;
    sink.stats.checkpoint_clean = cp.is_clean();
    sink.note(|| {
        format!(
            "using checkpoint {} from region {}{}",
            cp.serial,
            region_name(region),
            if cp.is_clean() { " (clean)" } else { "" }
        )
    });
    Some((region, cp))
}

/// What the steps of the pass share once the checkpoint to start from is chosen.
struct Pass<'s, 'l> {
    sink: &'s mut Sink,
    log: &'s LogReader<'l>,
    sb: Arc<Superblock>,
    /// The checkpoint the check starts from: the newest, or the one before it when the
    /// newest's tables cannot be loaded.
    cp: Checkpoint,
    /// The log can continue where `cp` says (`check_head`).
    head_ok: bool,
}

impl Pass<'_, '_> {
    /// The other region should hold the checkpoint before this one (or nothing, if this is
    /// the first).
    fn check_fallback(&mut self, (other_region, other): &(u64, Region)) {
        let (sink, cp) = (&mut *self.sink, &self.cp);
        let other_name = region_name(*other_region);
        let fallback_fine = match other {
            Region::Valid(old) => old.serial.checked_add(1) == Some(cp.serial),
            Region::Empty => cp.serial <= 1,
            Region::Unusable(_) => false,
        };
        if !fallback_fine {
            sink.found(Finding::FallbackCheckpoint);
        }
        match other {
            Region::Valid(old) if old.serial.checked_add(1) != Some(cp.serial) => sink.warning(
                NAME,
                format!(
                    "region {other_name} holds checkpoint {}, not the one before {} as expected",
                    old.serial, cp.serial
                ),
            ),
            Region::Valid(_) => {}
            Region::Empty if cp.serial <= 1 => sink.note(|| {
                format!("region {other_name} is empty: only one checkpoint was ever written")
            }),
            // It held the checkpoint before this one, or one after it that was lost.
            Region::Empty => sink.warning(
                NAME,
                format!(
                    "region {other_name} is empty, but checkpoint {} is not the first: the \
                     other checkpoint (the fallback, or a newer one) is lost",
                    cp.serial
                ),
            ),
            Region::Unusable(why) => sink.warning(
                NAME,
                format!(
                    "region {other_name} is unusable ({why}): the other checkpoint (the \
                     fallback, or a newer one) is lost"
                ),
            ),
        }
    }

    fn check_next_node_id(&mut self) {
        let cp = &self.cp;
        if cp.next_node_id < 2 {
            self.sink.error(
                NAME,
                format!(
                    "checkpoint {}: next node id {} (node 1, the root, is always in use)",
                    cp.serial, cp.next_node_id
                ),
            );
            self.sink.found(Finding::NextNodeId);
        }
    }

    /// The tables the checkpoint names: as mount loads them, else with a damaged bitmap file
    /// taken as far as it can be read, else those of the previous checkpoint (`other`).
    /// None when nothing more can be checked (reported).
    fn load_checkpoint_tables(&mut self, other: &Region) -> Result<Option<Tables>> {
        let e = match load_tables(&self.sb, self.log.device(), &self.cp) {
            Ok(t) => return Ok(Some(t)),
            Err(e) => e,
        };
        let why = damage_or_failure(e)?;
        if let Some(t) = load_tables_lenient(self.log, &self.cp)? {
            self.sink.error(
                NAME,
                format!(
                    "the bitmap file of checkpoint {} is damaged ({why}); the check goes on \
                     with the bitmaps as far as they can be read",
                    self.cp.serial
                ),
            );
            self.sink.found(Finding::BitmapFile);
            return Ok(Some(t));
        }
        self.fall_back_to_older(other, &why)
    }

    /// The newest checkpoint's tables cannot be loaded (`why`): the previous checkpoint, if
    /// it is still there, is a consistent state to check instead.
    fn fall_back_to_older(&mut self, other: &Region, why: &str) -> Result<Option<Tables>> {
        let older = match other {
            Region::Valid(o) if o.serial < self.cp.serial => Some((**o).clone()),
            _ => None,
        };
        let loaded = match &older {
            Some(o) => match load_tables(&self.sb, self.log.device(), o) {
                Ok(t) => Some(t),
                Err(_) => load_tables_lenient(self.log, o)?,
            },
            None => None,
        };
        let (Some(o), Some(t)) = (older, loaded) else {
            self.sink.error(
                NAME,
                format!(
                    "the tables of checkpoint {} cannot be loaded ({why}); nothing more can be \
                     checked",
                    self.cp.serial
                ),
            );
            return Ok(None);
        };
        self.sink.error(
            NAME,
            format!(
                "the tables of checkpoint {} cannot be loaded ({why}); the check goes on from \
                 the previous checkpoint, {} (mount fails until a repair goes back to it)",
                self.cp.serial, o.serial
            ),
        );
        self.sink.found(Finding::OlderCheckpoint {
            newest: self.cp.serial,
        });
        self.sink.stats.checkpoint_serial = o.serial;
        self.sink.stats.checkpoint_clean = o.is_clean();
        self.head_ok = check_head(self.sink, &self.sb, &o);
        self.cp = o;
        Ok(Some(t))
    }

    /// Figures the checkpoint repeats (informative; they only matter if nothing follows it),
    /// and the segments the log continues in, which must be marked active.
    fn check_repeated_figures(&mut self, tables: &Tables) {
        let (sink, cp) = (&mut *self.sink, &self.cp);
        if cp.live_inodes != tables.ifile.live_inodes
            || cp.free_data_blocks != tables.data.committed_free()
        {
            sink.found(Finding::CheckpointFigures);
        }
        if cp.live_inodes != tables.ifile.live_inodes {
            sink.warning(
                NAME,
                format!(
                    "checkpoint {} says {} live inodes, its inode map holds {}",
                    cp.serial, cp.live_inodes, tables.ifile.live_inodes
                ),
            );
        }
        if cp.free_data_blocks != tables.data.committed_free() {
            sink.warning(
                NAME,
                format!(
                    "checkpoint {} says {} free data blocks, its group descriptors {}",
                    cp.serial,
                    cp.free_data_blocks,
                    tables.data.committed_free()
                ),
            );
        }
        for seg in [self.sb.segment_of(cp.log_head), cp.next_segment] {
            let flags = tables.ifile.usage.get(seg as usize).map_or(0, |u| u.flags);
            if flags & SEG_ACTIVE == 0 && self.head_ok {
                sink.found(Finding::SegmentUsage);
                sink.warning(
                    NAME,
                    format!(
                        "checkpoint {}: segment {seg} is where the log continues but is not \
                         marked active",
                        cp.serial
                    ),
                );
            }
        }
    }

    /// Where the log continues after the checkpoint: rolled forward as mount would, or a
    /// fresh head when the checkpoint's is unusable. None when nothing more can be checked
    /// (reported).
    fn continue_log(&mut self, tables: &mut Tables) -> Result<Option<LogHead>> {
        if !self.head_ok {
            let head = fresh_head(&self.sb, tables, &self.cp);
            if head.is_none() {
                self.sink.error(
                    NAME,
                    "no clean segment is left for the log to continue in; nothing more can be \
                     checked",
                );
            }
            return Ok(head);
        }
        let mut rep = RecoveryReport::default();
        match roll_forward_limited(
            &self.sb,
            self.log.device(),
            tables,
            &self.cp,
            None,
            &mut rep,
        ) {
            Ok(head) => {
                report_roll_forward(self.sink, &self.cp, &rep);
                Ok(Some(head))
            }
            Err(e) => {
                let why = damage_or_failure(e)?;
                self.roll_forward_before_failure(tables, &why, rep.transactions)
            }
        }
    }

    /// Roll-forward failed (`why`) after `applied` transactions: mount would fail. The check
    /// goes on with the state before the failing transaction, from the tables loaded again.
    fn roll_forward_before_failure(
        &mut self,
        tables: &mut Tables,
        why: &str,
        applied: u64,
    ) -> Result<Option<LogHead>> {
        let (log, cp) = (self.log, &self.cp);
        self.sink.error(
            NAME,
            format!(
                "roll-forward from checkpoint {} fails ({why}) at the transaction after the \
                 first {applied}: mount would fail; the rest of the check covers the state \
                 before that transaction",
                cp.serial
            ),
        );
        self.sink.found(Finding::RollForward { applied });
        *tables = match load_tables(&self.sb, log.device(), cp) {
            Ok(t) => t,
            Err(_) => match load_tables_lenient(log, cp)? {
                Some(t) => t,
                None => {
                    self.sink.error(NAME, "reloading the tables fails");
                    return Ok(None);
                }
            },
        };
        let mut rep = RecoveryReport::default();
        let limited =
            roll_forward_limited(&self.sb, log.device(), tables, cp, Some(applied), &mut rep);
        match limited {
            Ok(head) => {
                let s = &mut self.sink.stats;
                s.transactions_rolled_forward = rep.transactions;
                s.partial_segments_rolled_forward = rep.partial_segments;
                Ok(Some(head))
            }
            Err(e) => {
                let why = damage_or_failure(e)?;
                self.sink.error(
                    NAME,
                    format!("rolling the good transactions forward again fails: {why}"),
                );
                Ok(None)
            }
        }
    }
}

fn report_roll_forward(sink: &mut Sink, cp: &Checkpoint, rep: &RecoveryReport) {
    let s = &mut sink.stats;
    s.transactions_rolled_forward = rep.transactions;
    s.partial_segments_rolled_forward = rep.partial_segments;
    s.partial_segments_discarded = rep.discarded;
    let what = format!(
        "{} transactions ({} partial segments, {} blocks) and {} partial segments of an \
         incomplete transaction",
        rep.transactions, rep.partial_segments, rep.blocks, rep.discarded
    );
    if cp.is_clean() && (rep.transactions > 0 || rep.discarded > 0) {
        sink.warning(
            NAME,
            format!(
                "the log continues after clean checkpoint {}: {what}",
                cp.serial
            ),
        );
    } else if !cp.is_clean() {
        sink.warning(
            NAME,
            format!(
                "not cleanly unmounted: after checkpoint {} the log holds {what} (the \
                 latter discarded); the check covers the state after roll-forward",
                cp.serial
            ),
        );
    }
    if rep.end_of_log {
        sink.note(|| {
            format!(
                "roll-forward: end of the log after {} partial segments since checkpoint {} \
                 ({})",
                rep.partial_segments + rep.discarded,
                cp.serial,
                rep.stop_reason
            )
        });
    } else {
        sink.note(|| format!("roll-forward stopped: {}", rep.stop_reason));
    }
}

/// The checkpoint's log head and next segment can be where the log continues (errors
/// reported otherwise).
fn check_head(sink: &mut Sink, sb: &Superblock, cp: &Checkpoint) -> bool {
    // Where the log continues: roll-forward indexes the usage table by these segments. An
    // unusable head leaves the log after the checkpoint unreachable: the check covers the
    // state at the checkpoint, and the log goes on in a fresh segment (as a repair does).
    let head_seg = sb.segment_of(cp.log_head);
    let mut head_ok = true;
    if head_seg == 0 || head_seg >= sb.segments {
        sink.error(
            NAME,
            format!(
                "checkpoint {}: log head {} is outside the log (whatever was written after the \
                 checkpoint cannot be found)",
                cp.serial, cp.log_head
            ),
        );
        head_ok = false;
    } else if cp.log_head < sb.segment_start(head_seg) || sb.segment_end(head_seg) - cp.log_head < 2
    {
        // The writer leaves a segment once fewer than 2 blocks remain, and skips a superblock copy.
        sink.error(
            NAME,
            format!(
                "checkpoint {}: log head {} is not a place a partial segment can start",
                cp.serial, cp.log_head
            ),
        );
        head_ok = false;
    }
    if cp.next_segment == 0 || cp.next_segment >= sb.segments {
        sink.error(
            NAME,
            format!(
                "checkpoint {}: next segment {} is outside the log",
                cp.serial, cp.next_segment
            ),
        );
        head_ok = false;
    } else if cp.next_segment == head_seg {
        sink.error(
            NAME,
            format!(
                "checkpoint {}: the log continues in segment {head_seg}, the segment it is in",
                cp.serial
            ),
        );
        head_ok = false;
    }
    if !head_ok {
        sink.found(Finding::LogHead);
    }
    head_ok
}

/// Where the log continues when the checkpoint's head cannot be used: the start of a clean
/// segment, then another (both marked active, as roll-forward marks the head's).
pub fn fresh_head(sb: &Superblock, tables: &mut Tables, cp: &Checkpoint) -> Option<LogHead> {
    let first = LogWriter::pick_segment(sb, &tables.ifile, 0, &[])?;
    let next = LogWriter::pick_segment(sb, &tables.ifile, first, &[first])?;
    for seg in [first, next] {
        tables.ifile.set_seg_flags(seg, SEG_ACTIVE, 0);
    }
    Some(LogHead {
        addr: sb.segment_start(first),
        next_segment: next,
        serial: cp.next_serial,
        ckpt_serial: cp.serial,
    })
}

/// The tables of `cp` with a damaged bitmap file taken as far as it can be read (see
/// `DataMap::decode_lenient`); None when the IFile or the node map cannot be loaded either.
fn load_tables_lenient(log: &LogReader, cp: &Checkpoint) -> Result<Option<Tables>> {
    let sb = &log.sb;
    let bs = sb.block_size;
    let mut read = |a: u64| -> Result<Vec<u8>> {
        log.read(a)?
            .map_err(|why| crate::FsError::corrupt("meta file", why))
    };
    // Strict for the IFile and node map (nothing can stand in for them).
    let mut strict = |id: u64,
                      inode: &crate::format::inode::DiskInode|
     -> Result<Option<(MetaFile, Vec<Vec<u8>>)>> {
        let Ok(mf) = MetaFile::load(id, bs, sb.meta_blocks, inode, &mut read) else {
            return Ok(None);
        };
        let mut bodies = Vec::with_capacity(mf.blocks.len());
        for (i, &a) in mf.blocks.iter().enumerate() {
            let Ok(raw) = log.read(a)? else {
                return Ok(None);
            };
            match decode_meta_block(&raw, id, i as u64) {
                Ok(b) => bodies.push(b.to_vec()),
                Err(_) => return Ok(None),
            }
        }
        Ok(Some((mf, bodies)))
    };
    let Some((f, b)) = strict(IFILE_ID, &cp.ifile)? else {
        return Ok(None);
    };
    let Ok(ifile) = Ifile::decode(f, bs, sb.segments, &b) else {
        return Ok(None);
    };
    let Some((f, b)) = strict(NODEMAP_ID, &cp.nodemap)? else {
        return Ok(None);
    };
    let Ok(nodes) = NodeMap::decode(f, bs, &b) else {
        return Ok(None);
    };
    let file = MetaFile::load(BITMAP_ID, bs, sb.meta_blocks, &cp.bitmap, &mut read).ok();
    let mut bodies = Vec::new();
    if let Some(f) = &file {
        for (i, &a) in f.blocks.iter().enumerate() {
            let body = match log.read(a)? {
                Ok(raw) => decode_meta_block(&raw, BITMAP_ID, i as u64)
                    .ok()
                    .map(|b| b.to_vec()),
                Err(_) => None,
            };
            bodies.push(body);
        }
    }
    let data = DataMap::decode_lenient(
        file,
        bs,
        sb.data_blocks,
        sb.blocks_per_group as u64,
        &bodies,
    );
    Ok(Some(Tables {
        sb: Arc::clone(sb),
        ifile,
        data,
        nodes,
    }))
}

/// The IFile blocks as written (the loader keeps only what it decodes from them).
fn read_ifile_bodies(sink: &mut Sink, log: &LogReader, tables: &Tables) -> Result<Vec<Vec<u8>>> {
    let mut bodies = Vec::with_capacity(tables.ifile.file.blocks.len());
    for (i, &addr) in tables.ifile.file.blocks.iter().enumerate() {
        let body = match log.read_any(addr)? {
            Ok(raw) => decode_meta_block(&raw, IFILE_ID, i as u64)
                .map(|b| b.to_vec())
                .map_err(|e| e.to_string()),
            Err(why) => Err(why),
        };
        match body {
            Ok(b) => bodies.push(b),
            Err(why) => {
                sink.error(
                    NAME,
                    format!("IFile block {i} at {addr} cannot be reread: {why}"),
                );
                return Ok(Vec::new());
            }
        }
    }
    Ok(bodies)
}
