//! Pass 0: superblocks. Both decode, they are a pair, the copies in the log equal the
//! primary, and the devices are at least as large as the file system.
//!
//! Without a usable metadata superblock nothing else can be checked; without a usable data
//! superblock the check goes on (every later pass takes the geometry from the metadata one).

use super::context::Sink;
use super::findings::Finding;
use crate::device::BlockDevice;
use crate::format::superblock::{Role, Superblock, SB_SIZE};
use crate::Result;
use std::sync::Arc;

pub const NAME: &str = "superblocks";

/// The raw first `SB_SIZE` bytes of a device, or why there are none.
fn read_raw(dev: &dyn BlockDevice, offset: u64) -> Result<std::result::Result<Vec<u8>, String>> {
    let end = offset.checked_add(SB_SIZE as u64);
    if end.is_none_or(|e| e > dev.size()) {
        return Ok(Err(format!(
            "the device ({} bytes) ends before byte {}",
            dev.size(),
            offset.saturating_add(SB_SIZE as u64)
        )));
    }
    let mut b = vec![0u8; SB_SIZE];
    dev.read_at(&mut b, offset)?;
    Ok(Ok(b))
}

pub fn run(
    sink: &mut Sink,
    meta: &dyn BlockDevice,
    data: &dyn BlockDevice,
) -> Result<Option<Arc<Superblock>>> {
    let primary = match read_raw(meta, 0)? {
        Ok(b) => b,
        Err(why) => {
            sink.error(NAME, format!("metadata device has no superblock: {why}"));
            return Ok(None);
        }
    };
    let sb = match Superblock::decode(&primary) {
        Ok(sb) => sb,
        Err(e) => {
            sink.error(NAME, format!("metadata device superblock is unusable: {e}"));
            sink.found(Finding::PrimarySuperblock);
            return Ok(None);
        }
    };
    if sb.role != Role::Meta {
        sink.error(
            NAME,
            "the metadata device holds a data-device superblock (devices given in the wrong \
             order?)",
        );
        sink.found(Finding::NotAPair);
        return Ok(None);
    }
    let bs = sb.block_size as u64;
    sink.note(|| {
        format!(
            "{} byte blocks; log of {} segments of {} blocks; {} data blocks in {} groups of {}",
            bs, sb.segments, sb.segment_blocks, sb.data_blocks, sb.groups, sb.blocks_per_group
        )
    });

    check_partner(sink, &sb, data)?;

    // The devices must hold the whole file system (mount refuses otherwise).
    for (what, dev, blocks) in [
        ("metadata", meta, sb.meta_blocks),
        ("data", data, sb.data_blocks),
    ] {
        let need = blocks.saturating_mul(bs);
        if dev.size() < need {
            sink.found(Finding::DeviceTooSmall);
            sink.error(
                NAME,
                format!(
                    "the {what} device has {} bytes, the file system needs {need}",
                    dev.size()
                ),
            );
        }
    }

    // Superblock copies: identical to the primary, byte for byte.
    let mut same = 0usize;
    let mut differing: Vec<(u64, Vec<u8>)> = Vec::new();
    for &seg in &sb.copy_segments {
        let addr = seg.saturating_mul(sb.segment_blocks as u64);
        let raw = match read_raw(meta, addr.saturating_mul(bs))? {
            Ok(b) => b,
            Err(why) => {
                // Past the end of the device: reported as a device too small.
                sink.error(
                    NAME,
                    format!("superblock copy in segment {seg} (block {addr}) is missing: {why}"),
                );
                continue;
            }
        };
        if raw == primary {
            same += 1;
            continue;
        }
        differing.push((seg, raw.clone()));
        match Superblock::decode(&raw) {
            Err(e) => sink.error(
                NAME,
                format!("superblock copy in segment {seg} (block {addr}) is damaged: {e}"),
            ),
            Ok(_) => sink.error(
                NAME,
                format!("superblock copy in segment {seg} (block {addr}) differs from the primary"),
            ),
        }
    }
    judge_copies(sink, same, &differing);
    Ok(Some(Arc::new(sb)))
}

/// Which one lies, the primary or the copies that differ from it? Copies that are sound
/// superblocks of their own and agree with each other, outnumbering the copies equal to the
/// primary, make the primary the suspect (it is replaced by a copy). Otherwise the differing
/// copies are rewritten, except where a log block sits: the primary's copy list might be the
/// liar, and a rewrite there could destroy live metadata.
fn judge_copies(sink: &mut Sink, same: usize, differing: &[(u64, Vec<u8>)]) {
    let sound: Vec<&Vec<u8>> = differing
        .iter()
        .map(|(_, raw)| raw)
        .filter(|raw| Superblock::decode(raw).is_ok_and(|c| c.role == Role::Meta))
        .collect();
    let most_agreeing = sound
        .iter()
        .map(|a| sound.iter().filter(|b| a == *b).count())
        .max()
        .unwrap_or(0);
    if most_agreeing > same {
        sink.found(Finding::PrimarySuperblock);
        return;
    }
    for (seg, raw) in differing {
        let log_block = matches!(
            crate::format::get_u32(raw, 0),
            crate::format::header::BLOCK_MAGIC | crate::format::summary::SS_MAGIC
        );
        if log_block && same == 0 {
            sink.found(Finding::PrimarySuperblock);
        } else {
            sink.found(Finding::SuperblockCopy { segment: *seg });
        }
    }
}

/// The data device's superblock: decodes, says "data", and pairs with the metadata one.
fn check_partner(sink: &mut Sink, sb: &Superblock, data: &dyn BlockDevice) -> Result<()> {
    let raw = match read_raw(data, 0)? {
        Ok(b) => b,
        Err(why) => {
            sink.error(NAME, format!("data device has no superblock: {why}"));
            sink.found(Finding::DeviceTooSmall);
            return Ok(());
        }
    };
    let dsb = match Superblock::decode(&raw) {
        Ok(d) => d,
        Err(e) => {
            sink.error(NAME, format!("data device superblock is unusable: {e}"));
            sink.found(Finding::DataSuperblock { unusable: true });
            return Ok(());
        }
    };
    if dsb.role != Role::Data {
        sink.error(NAME, "the data device holds a metadata-device superblock");
        sink.found(Finding::NotAPair);
    }
    // What mount's pairing test compares: a mismatch means another file system's device.
    let must_agree: [(&str, String, String); 5] = [
        (
            "UUID",
            uuid::Uuid::from_bytes(sb.uuid).to_string(),
            uuid::Uuid::from_bytes(dsb.uuid).to_string(),
        ),
        (
            "block size",
            sb.block_size.to_string(),
            dsb.block_size.to_string(),
        ),
        (
            "metadata blocks",
            sb.meta_blocks.to_string(),
            dsb.meta_blocks.to_string(),
        ),
        (
            "data blocks",
            sb.data_blocks.to_string(),
            dsb.data_blocks.to_string(),
        ),
        (
            "blocks per group",
            sb.blocks_per_group.to_string(),
            dsb.blocks_per_group.to_string(),
        ),
    ];
    for (field, m, d) in must_agree {
        if m != d {
            sink.found(Finding::NotAPair);
            sink.error(
                NAME,
                format!("the devices are not a pair: {field} is {m} on the metadata device, {d} on the data device"),
            );
        }
    }
    // mkfs writes the same values to both; mount ignores these, so a difference is suspicious only.
    let should_agree: [(&str, bool); 6] = [
        ("segment size", sb.segment_blocks == dsb.segment_blocks),
        ("segment count", sb.segments == dsb.segments),
        ("group count", sb.groups == dsb.groups),
        ("hash seed", sb.hash_seed == dsb.hash_seed),
        ("label", sb.label == dsb.label),
        (
            "superblock copy list",
            sb.copy_segments == dsb.copy_segments,
        ),
    ];
    for (field, same) in should_agree {
        if !same {
            sink.found(Finding::DataSuperblock { unusable: false });
            sink.warning(NAME, format!("the superblocks disagree on the {field}"));
        }
    }
    Ok(())
}
