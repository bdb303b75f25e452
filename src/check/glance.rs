//! A glance at a file system without checking it: enough for fsck to say "clean" about a file
//! system that was unmounted cleanly (as e2fsck does without -f), in a few block reads.

use super::context::{BoundedDevice, Sink};
use super::{pass0_superblocks, Options};
use crate::device::BlockDevice;
use crate::format::checkpoint::Checkpoint;
use crate::format::summary::Summary;
use crate::log::checkpoint::read_newest;
use crate::log::read_blocks;
use crate::Result;

/// What a glance sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glance {
    /// The superblocks are sound and a pair, the newest checkpoint was written at unmount
    /// and nothing follows it in the log.
    pub clean: bool,
    /// Why not, when not.
    pub why_not: Option<String>,
    pub checkpoint_serial: u64,
    /// Figures the newest checkpoint repeats.
    pub live_inodes: u64,
    pub free_data_blocks: u64,
    pub data_blocks: u64,
    pub label: String,
}

/// Glance at `meta` and `data`. `Ok(None)`: not even a superblock and a checkpoint can be
/// read (a full check says why). Nothing is written.
pub fn glance(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<Option<Glance>> {
    let meta = BoundedDevice::new(meta);
    let mut sink = Sink::new(&Options::default());
    let Some(sb) = pass0_superblocks::run(&mut sink, &meta, data)? else {
        return Ok(None);
    };
    let Ok(cp) = read_newest(&sb, &meta) else {
        return Ok(None);
    };
    let report = sink.finish();
    let why_not = if let Some(p) = report.errors().next() {
        Some(p.message.clone())
    } else if !cp.is_clean() {
        Some("not cleanly unmounted".to_string())
    } else if log_follows(&meta, &sb, &cp) {
        Some("the log continues after the clean checkpoint".to_string())
    } else {
        None
    };
    Ok(Some(Glance {
        clean: why_not.is_none(),
        why_not,
        checkpoint_serial: cp.serial,
        live_inodes: cp.live_inodes,
        free_data_blocks: cp.free_data_blocks,
        data_blocks: sb.data_blocks,
        label: sb.label.clone(),
    }))
}

/// Does a partial segment that roll-forward would take follow checkpoint `cp`?
fn log_follows(
    meta: &dyn BlockDevice,
    sb: &crate::format::superblock::Superblock,
    cp: &Checkpoint,
) -> bool {
    let tag = sb.uuid_tag();
    let seg = sb.segment_of(cp.log_head);
    if seg == 0 || seg >= sb.segments {
        return true; // a head a full check must look at
    }
    let Ok(first) = read_blocks(meta, sb.block_size, cp.log_head, 1) else {
        return true;
    };
    let Ok(n) = Summary::peek_len(&first, tag) else {
        return false;
    };
    if cp.log_head + n as u64 > sb.segment_end(seg) {
        return false; // roll-forward would not take it either
    }
    let Ok(raw) = read_blocks(meta, sb.block_size, cp.log_head, n as u64) else {
        return true;
    };
    match Summary::decode(&raw, tag) {
        Ok(s) => s.serial == cp.next_serial && s.ckpt_serial == cp.serial,
        Err(_) => false,
    }
}
