//! Pass 1: checkpoints. Both regions are read (valid? which serial? the newest is used, as
//! mount does), the tables the newest names are loaded, and the log written after it is rolled
//! forward in memory exactly as mount would, so the later passes check the state a mount sees.
//!
//! After a clean unmount nothing follows a CLEAN checkpoint; a log after a checkpoint without
//! the flag is normal crash recovery and only worth a warning.

use super::context::{damage_or_failure, LogReader, Sink};
use crate::format::checkpoint::{Checkpoint, CP_REGION_A, CP_REGION_B};
use crate::format::meta::{decode_meta_block, SEG_ACTIVE};
use crate::format::IFILE_ID;
use crate::log::recovery::{load_tables, roll_forward};
use crate::log::LogHead;
use crate::meta::Tables;
use crate::Result;

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
    let sb = log.sb.clone();
    let regions = [
        (CP_REGION_A, read_region(log, CP_REGION_A)?),
        (CP_REGION_B, read_region(log, CP_REGION_B)?),
    ];
    let newest = regions
        .iter()
        .filter_map(|(r, s)| match s {
            Region::Valid(cp) => Some((*r, (**cp).clone())),
            _ => None,
        })
        .max_by_key(|(_, cp)| cp.serial);
    let Some((newest_region, cp)) = newest else {
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
        return Ok(None);
    };
    sink.stats.checkpoint_serial = cp.serial;
    sink.stats.checkpoint_clean = cp.is_clean();
    sink.note(|| {
        format!(
            "using checkpoint {} from region {}{}",
            cp.serial,
            region_name(newest_region),
            if cp.is_clean() { " (clean)" } else { "" }
        )
    });

    // The other region is the fallback should the newest be lost.
    let (other_region, other) = if newest_region == CP_REGION_A {
        &regions[1]
    } else {
        &regions[0]
    };
    let other_name = region_name(*other_region);
    match other {
        Region::Valid(old) if old.serial.checked_add(1) != Some(cp.serial) => sink.warning(
            NAME,
            format!(
                "region {other_name} holds checkpoint {}, not the one before {} as expected",
                old.serial, cp.serial
            ),
        ),
        Region::Valid(_) => {}
        Region::Empty if cp.serial <= 1 => sink
            .note(|| format!("region {other_name} is empty: only one checkpoint was ever written")),
        // It held the checkpoint before this one, or one after it that was lost.
        Region::Empty => sink.warning(
            NAME,
            format!(
                "region {other_name} is empty, but checkpoint {} is not the first: the other \
                 checkpoint (the fallback, or a newer one) is lost",
                cp.serial
            ),
        ),
        Region::Unusable(why) => sink.warning(
            NAME,
            format!(
                "region {other_name} is unusable ({why}): the other checkpoint (the fallback, \
                 or a newer one) is lost"
            ),
        ),
    }

    // Where the log continues: roll-forward indexes the usage table by these segments.
    let head_seg = log.segment_of(cp.log_head);
    if head_seg == 0 || head_seg >= sb.segments {
        sink.error(
            NAME,
            format!(
                "checkpoint {}: log head {} is outside the log; nothing more can be checked",
                cp.serial, cp.log_head
            ),
        );
        return Ok(None);
    }
    if cp.next_segment == 0 || cp.next_segment >= sb.segments {
        sink.error(
            NAME,
            format!(
                "checkpoint {}: next segment {} is outside the log; nothing more can be checked",
                cp.serial, cp.next_segment
            ),
        );
        return Ok(None);
    }
    if cp.next_segment == head_seg {
        sink.error(
            NAME,
            format!(
                "checkpoint {}: the log continues in segment {head_seg}, the segment it is in",
                cp.serial
            ),
        );
    }
    // The writer leaves a segment once fewer than 2 blocks remain, and skips a superblock copy.
    if cp.log_head < sb.segment_start(head_seg) || sb.segment_end(head_seg) - cp.log_head < 2 {
        sink.error(
            NAME,
            format!(
                "checkpoint {}: log head {} is not a place a partial segment can start",
                cp.serial, cp.log_head
            ),
        );
    }
    if cp.next_node_id < 2 {
        sink.error(
            NAME,
            format!(
                "checkpoint {}: next node id {} (node 1, the root, is always in use)",
                cp.serial, cp.next_node_id
            ),
        );
    }

    let mut tables = match load_tables(&sb, log.device(), &cp) {
        Ok(t) => t,
        Err(e) => {
            let why = damage_or_failure(e)?;
            sink.error(
                NAME,
                format!(
                    "the tables of checkpoint {} cannot be loaded ({why}); nothing more can be \
                     checked",
                    cp.serial
                ),
            );
            return Ok(None);
        }
    };
    let ifile_at_checkpoint = read_ifile_bodies(sink, log, &tables)?;

    // Figures the checkpoint repeats (informative; they only matter if nothing follows it).
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
    for seg in [head_seg, cp.next_segment] {
        let flags = tables.ifile.usage.get(seg as usize).map_or(0, |u| u.flags);
        if flags & SEG_ACTIVE == 0 {
            sink.warning(
                NAME,
                format!(
                    "checkpoint {}: segment {seg} is where the log continues but is not marked \
                     active",
                    cp.serial
                ),
            );
        }
    }

    // Roll forward in memory; the device is read-only (see BoundedDevice).
    let head = match roll_forward(&sb, log.device(), &mut tables, &cp) {
        Ok((head, rep)) => {
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
            sink.note(|| format!("roll-forward stopped: {}", rep.stop_reason));
            head
        }
        Err(e) => {
            let why = damage_or_failure(e)?;
            sink.error(
                NAME,
                format!(
                    "roll-forward from checkpoint {} fails ({why}): mount would fail; the rest of \
                     the check covers the state at the checkpoint",
                    cp.serial
                ),
            );
            tables = match load_tables(&sb, log.device(), &cp) {
                Ok(t) => t,
                Err(e) => {
                    let why = damage_or_failure(e)?;
                    sink.error(NAME, format!("reloading the tables fails: {why}"));
                    return Ok(None);
                }
            };
            LogHead {
                addr: cp.log_head,
                next_segment: cp.next_segment,
                serial: cp.next_serial,
                ckpt_serial: cp.serial,
            }
        }
    };
    Ok(Some(Loaded {
        cp,
        tables,
        head,
        ifile_at_checkpoint,
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
