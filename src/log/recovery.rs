//! Mount-time reading: the meta files named by a checkpoint, then roll-forward through the
//! partial segments written after it (docs/FORMAT.md "Where the next partial segment is").

use super::writer::LogHead;
use super::{read_block, read_blocks};
use crate::device::BlockDevice;
use crate::format::checkpoint::Checkpoint;
use crate::format::inode::{check_inode_block, inode_in_block};
use crate::format::meta::{decode_meta_block, SEG_ACTIVE, SEG_DIRTY};
use crate::format::summary::{Record, Summary, SS_CHECKPOINT, SS_CONT};
use crate::format::superblock::Superblock;
use crate::format::{BlockHeader, BlockKind, BITMAP_ID, IFILE_ID, NODEMAP_ID};
use crate::meta::datamap::DataMap;
use crate::meta::ifile::Ifile;
use crate::meta::metafile::MetaFile;
use crate::meta::nodemap::NodeMap;
use crate::meta::{InodeLoc, PlacedBlock, Tables};
use crate::{FsError, Result};
use std::sync::Arc;

/// Read the tables a checkpoint names.
pub fn load_tables(sb: &Arc<Superblock>, dev: &dyn BlockDevice, cp: &Checkpoint) -> Result<Tables> {
    let bs = sb.block_size;
    let check_addr = |a: u64| -> Result<u64> {
        let s = sb.segment_of(a);
        if a == 0 || s == 0 || s >= sb.segments {
            return Err(FsError::corrupt(
                "meta file",
                format!("block address {a} outside the log"),
            ));
        }
        Ok(a)
    };
    let mut read = |a: u64| -> Result<Vec<u8>> { read_block(dev, bs, check_addr(a)?) };
    let mut load =
        |id: u64, inode: &crate::format::inode::DiskInode| -> Result<(MetaFile, Vec<Vec<u8>>)> {
            let mf = MetaFile::load(id, bs, sb.meta_blocks, inode, &mut read)?;
            let mut bodies = Vec::with_capacity(mf.blocks.len());
            for (i, &a) in mf.blocks.iter().enumerate() {
                let raw = read_block(dev, bs, check_addr(a)?)?;
                bodies.push(decode_meta_block(&raw, id, i as u64)?.to_vec());
            }
            Ok((mf, bodies))
        };
    let (f, b) = load(IFILE_ID, &cp.ifile)?;
    let ifile = Ifile::decode(f, bs, sb.segments, &b)?;
    let (f, b) = load(BITMAP_ID, &cp.bitmap)?;
    let data = DataMap::decode(f, bs, sb.data_blocks, sb.blocks_per_group as u64, &b)?;
    let (f, b) = load(NODEMAP_ID, &cp.nodemap)?;
    let nodes = NodeMap::decode(f, bs, &b)?;
    Ok(Tables {
        sb: sb.clone(),
        ifile,
        data,
        nodes,
    })
}

/// What roll-forward did.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub transactions: u64,
    pub partial_segments: u64,
    pub blocks: u64,
    /// Valid partial segments of an incomplete transaction at the end, discarded.
    pub discarded: u64,
    /// Roll-forward reached the normal end of the log: no partial segment of it follows
    /// (`stop_reason` says what is there instead). False when it stopped at damage (a torn
    /// or corrupt partial segment, named by `stop_reason`) or at fsck's limit.
    pub end_of_log: bool,
    pub stop_reason: String,
}

/// A partial segment read back and checked.
struct Part {
    summary: Summary,
    placed: Vec<PlacedBlock>,
}

/// What is where the log's next partial segment would be.
enum Next {
    Part(Part),
    /// No partial segment of this log: it ends before this address. What is there instead.
    EndOfLog(String),
}

/// Read and check the partial segment at `addr` expecting `serial`: the part, the end of the
/// log, or Err explaining the damage that stops the log there.
fn read_part(
    sb: &Superblock,
    dev: &dyn BlockDevice,
    addr: u64,
    serial: u64,
    ckpt_serial: u64,
) -> Result<Next> {
    let bs = sb.block_size;
    let seg_end = sb.segment_end(sb.segment_of(addr));
    let first = read_block(dev, bs, addr)?;
    if !Summary::starts_here(&first, sb.uuid_tag()) {
        return Ok(Next::EndOfLog(
            "no summary of this file system follows".into(),
        ));
    }
    let n = Summary::peek_len(&first, sb.uuid_tag())? as u64;
    if addr + n > seg_end {
        return Err(FsError::corrupt(
            "segment summary",
            "summary crosses its segment end",
        ));
    }
    let raw = if n == 1 {
        first
    } else {
        read_blocks(dev, bs, addr, n)?
    };
    let summary = Summary::decode(&raw, sb.uuid_tag())?;
    // An intact summary of another serial was left by an earlier pass of the log over this
    // segment: the log ends here.
    if summary.serial != serial || summary.ckpt_serial != ckpt_serial {
        return Ok(Next::EndOfLog(format!(
            "a stale partial segment follows (serial {}/{} where {serial}/{ckpt_serial} was \
             expected)",
            summary.serial, summary.ckpt_serial
        )));
    }
    let nb = summary.block_count();
    if addr + n + nb > seg_end {
        return Err(FsError::corrupt(
            "segment summary",
            "partial segment crosses its segment end",
        ));
    }
    if summary.next_segment == 0 || summary.next_segment >= sb.segments {
        return Err(FsError::corrupt(
            "segment summary",
            format!("next segment {}", summary.next_segment),
        ));
    }
    let data = read_blocks(dev, bs, addr + n, nb)?;
    if crc32fast::hash(&data) != summary.data_crc {
        return Err(FsError::corrupt(
            "partial segment",
            "data CRC mismatch (torn write)",
        ));
    }
    let mut placed = Vec::with_capacity(nb as usize);
    for (i, d) in summary.descriptors.iter().enumerate() {
        let block = &data[i * bs as usize..(i + 1) * bs as usize];
        let mut inodes = Vec::new();
        if d.kind == BlockKind::Inodes {
            let count = check_inode_block(block)?;
            for slot in 1..=count {
                let ino = inode_in_block(block, slot)?;
                inodes.push(InodeLoc {
                    ino: ino.ino,
                    generation: ino.generation,
                    slot: slot as u16,
                    orphan: ino.nlink == 0,
                });
            }
        } else if summary.flags & SS_CHECKPOINT == 0 {
            BlockHeader::expect(block, d.header())?;
        }
        placed.push(PlacedBlock {
            addr: addr + n + i as u64,
            desc: *d,
            inodes,
        });
    }
    Ok(Next::Part(Part { summary, placed }))
}

/// Apply every complete transaction after checkpoint `cp` to `t`; returns the log head after
/// the last one.
pub fn roll_forward(
    sb: &Superblock,
    dev: &dyn BlockDevice,
    t: &mut Tables,
    cp: &Checkpoint,
) -> Result<(LogHead, RecoveryReport)> {
    let mut report = RecoveryReport::default();
    let head = roll_forward_limited(sb, dev, t, cp, None, &mut report)?;
    Ok((head, report))
}

/// `roll_forward` applying at most `limit` transactions (fsck cuts the log before one that
/// cannot be applied). `report` tells how far it got even when it fails: the
/// `report.transactions` first transactions were applied, and the next one failed.
pub fn roll_forward_limited(
    sb: &Superblock,
    dev: &dyn BlockDevice,
    t: &mut Tables,
    cp: &Checkpoint,
    limit: Option<u64>,
    report: &mut RecoveryReport,
) -> Result<LogHead> {
    *report = RecoveryReport::default();
    // The checkpoint says where the log goes on; a lie there must not index the usage table
    // out of range (the checksum only proves the checkpoint was written, not that it is sane).
    let head_seg = sb.segment_of(cp.log_head);
    if head_seg == 0
        || head_seg >= sb.segments
        || cp.log_head < sb.segment_start(head_seg)
        || sb.segment_end(head_seg) - cp.log_head < 2
        || cp.next_segment == 0
        || cp.next_segment >= sb.segments
        || cp.next_segment == head_seg
    {
        return Err(FsError::corrupt(
            "checkpoint",
            format!(
                "checkpoint {}: log head {} / next segment {} is not where a log can continue",
                cp.serial, cp.log_head, cp.next_segment
            ),
        ));
    }
    let mut committed = LogHead {
        addr: cp.log_head,
        next_segment: cp.next_segment,
        serial: cp.next_serial,
        ckpt_serial: cp.serial,
    };
    let (mut addr, mut serial) = (committed.addr, committed.serial);
    let mut next_segment;
    let mut chain: Vec<Part> = Vec::new();
    let mut passed_segments = vec![sb.segment_of(addr)];
    let mut chain_segments = Vec::new();
    let now = super::now_secs();
    let mut seg = sb.segment_of(addr);
    loop {
        if limit.is_some_and(|l| report.transactions >= l) {
            report.stop_reason = format!("stopped after {} transactions", report.transactions);
            break;
        }
        let part = match read_part(sb, dev, addr, serial, cp.serial) {
            Ok(Next::Part(p)) => p,
            Ok(Next::EndOfLog(what)) => {
                report.end_of_log = true;
                report.stop_reason = what;
                break;
            }
            // A device that cannot be read is not the end of the log: stop the mount rather
            // than lose what follows.
            Err(e @ FsError::Io(_)) => return Err(e),
            Err(e) => {
                report.stop_reason = e.to_string();
                break;
            }
        };
        addr += part.summary.total_blocks();
        serial += 1;
        next_segment = part.summary.next_segment;
        // The writer leaves a segment as soon as fewer than 2 blocks remain in it.
        if sb.segment_end(seg) - addr < 2 {
            seg = next_segment;
            addr = sb.segment_start(seg);
            chain_segments.push(seg);
        }
        let cont = part.summary.flags & SS_CONT != 0;
        chain.push(part);
        if !cont {
            let blocks: Vec<PlacedBlock> = chain
                .iter()
                .filter(|p| p.summary.flags & SS_CHECKPOINT == 0)
                .flat_map(|p| p.placed.iter().cloned())
                .collect();
            let records: Vec<Record> = chain
                .iter()
                .flat_map(|p| p.summary.records.iter().copied())
                .collect();
            t.apply(&blocks, &records, now)?;
            report.transactions += 1;
            report.partial_segments += chain.len() as u64;
            report.blocks += blocks.len() as u64;
            chain.clear();
            passed_segments.append(&mut chain_segments);
            committed = LogHead {
                addr,
                next_segment,
                serial,
                ckpt_serial: cp.serial,
            };
        }
    }
    report.discarded = chain.len() as u64;
    // A transaction that ended by leaving its segment named the segment it moved to as "next";
    // the successor the writer then picked was never recorded, so pick one again.
    if committed.next_segment == sb.segment_of(committed.addr) {
        let head_seg = committed.next_segment;
        committed.next_segment =
            super::LogWriter::pick_segment(sb, &t.ifile, head_seg, &[head_seg]).ok_or_else(
                || FsError::corrupt("segment usage", "no clean segment to continue the log in"),
            )?;
    }
    // Segments holding log since the checkpoint must not be reused before the next one.
    for &s in &passed_segments {
        t.ifile.set_seg_flags(s, SEG_DIRTY, 0);
    }
    for s in [sb.segment_of(cp.log_head), cp.next_segment] {
        t.ifile.set_seg_flags(s, 0, SEG_ACTIVE);
    }
    for s in [sb.segment_of(committed.addr), committed.next_segment] {
        t.ifile.set_seg_flags(s, SEG_ACTIVE, 0);
    }
    Ok(committed)
}
