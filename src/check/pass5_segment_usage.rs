//! Pass 5: segment usage, recomputed from everything reachable. Live bytes of a segment are
//! 256 per live inode in it plus one block for each indirect, symlink, tree node (named by the
//! node map), meta-file and meta-indirect block in it (the meta files as the tables name them
//! after roll-forward). Each segment's `su_live_bytes` must equal that sum, a segment holding
//! live blocks must not be clean (the writer would overwrite it), segment 0 alone is RESERVED,
//! the SUPERBLOCK flag marks exactly the segments listed in the superblock, and no live block
//! may lie where the log writes next.

use super::context::{list, Claims, LogReader, LogUse, Sink};
use super::findings::Finding;
use super::pass1_checkpoints::Loaded;
use crate::format::meta::{SEG_ACTIVE, SEG_DIRTY, SEG_RESERVED, SEG_SUPERBLOCK};
use crate::format::{BITMAP_ID, IFILE_ID, INODE_SIZE, NODEMAP_ID};
use crate::meta::metafile::MetaFile;

pub const NAME: &str = "segment usage";

pub fn run(sink: &mut Sink, log: &LogReader, claims: &mut Claims, state: &Loaded) {
    sink.progress(5, NAME, 0, 1);
    let t = &state.tables;
    for (id, &addr) in t.nodes.addrs.iter().enumerate() {
        if addr != 0 {
            claim(sink, log, claims, addr, LogUse::Node { id: id as u64 });
        }
    }
    for (file, mf) in [
        (IFILE_ID, &t.ifile.file),
        (BITMAP_ID, &t.data.file),
        (NODEMAP_ID, &t.nodes.file),
    ] {
        claim_meta_file(sink, log, claims, file, mf);
    }
    sink.stats.log_blocks_live = claims.len() as u64;

    let segments = log.sb.segments;
    let bs = log.block_size();
    let mut live = vec![0u64; segments as usize];
    for (addr, what) in claims.iter() {
        // Claims hold checked log addresses only, so the segment is in range.
        debug_assert!(
            log.bad_address(addr).is_none(),
            "log block {addr} was claimed unchecked"
        );
        let Some(bytes) = live.get_mut(log.segment_of(addr) as usize) else {
            continue;
        };
        *bytes += match what {
            LogUse::Inodes(n) => INODE_SIZE as u64 * n as u64,
            _ => bs,
        };
    }

    let head_seg = log.segment_of(state.head.addr);
    let mut wrong = false;
    for (s, u) in t.ifile.usage.iter().enumerate() {
        let s = s as u64;
        let counted = live.get(s as usize).copied().unwrap_or(0);
        if u.live_bytes as u64 != counted {
            wrong = true;
            sink.error(
                NAME,
                format!(
                    "segment {s}: the usage table says {} live bytes, its live blocks add up to \
                     {counted}",
                    u.live_bytes
                ),
            );
        }
        let f = u.flags;
        if (s == 0) != (f & SEG_RESERVED != 0) {
            wrong = true;
            sink.error(
                NAME,
                format!(
                    "segment {s}: RESERVED flag {} (only segment 0 has it)",
                    on_off(f, SEG_RESERVED)
                ),
            );
        }
        let has_copy = log.sb.copy_segments.contains(&s);
        if has_copy != (f & SEG_SUPERBLOCK != 0) {
            wrong = true;
            sink.error(
                NAME,
                format!(
                    "segment {s}: SUPERBLOCK flag {} but the superblock {} a copy there",
                    on_off(f, SEG_SUPERBLOCK),
                    if has_copy { "lists" } else { "does not list" }
                ),
            );
        }
        if counted > 0 && f & (SEG_DIRTY | SEG_ACTIVE) == 0 {
            wrong = true;
            sink.error(
                NAME,
                format!(
                    "segment {s} holds {counted} live bytes but is marked clean (the log may \
                     overwrite it)"
                ),
            );
        }
        if f & SEG_ACTIVE != 0 && s != head_seg && s != state.head.next_segment {
            wrong = true;
            sink.warning(
                NAME,
                format!(
                    "segment {s} is marked active but the log is not there (it is never cleaned)"
                ),
            );
        }
        let known = SEG_DIRTY | SEG_ACTIVE | SEG_SUPERBLOCK | SEG_RESERVED;
        if f & !known != 0 {
            wrong = true;
            sink.warning(
                NAME,
                format!("segment {s}: unknown flags {:#x}", f & !known),
            );
        }
    }

    // The next partial segment goes at the head; when its segment fills, the log continues at
    // the start of the next segment. Live blocks there would be overwritten.
    let mut in_the_way: Vec<u64> = claims
        .iter()
        .filter(|&(a, _)| {
            let s = log.segment_of(a);
            (s == head_seg && a >= state.head.addr) || s == state.head.next_segment
        })
        .map(|(a, _)| a)
        .collect();
    if !in_the_way.is_empty() {
        sink.found(Finding::LogInTheWay);
        in_the_way.sort_unstable();
        sink.error(
            NAME,
            format!(
                "live log blocks {} lie where the log writes next (head {}, then segment {})",
                list(&in_the_way, 8),
                state.head.addr,
                state.head.next_segment
            ),
        );
    }
    if wrong {
        sink.found(Finding::SegmentUsage);
    }
    sink.progress(5, NAME, 1, 1);
}

fn on_off(flags: u32, bit: u32) -> &'static str {
    if flags & bit != 0 {
        "set"
    } else {
        "clear"
    }
}

fn claim(sink: &mut Sink, log: &LogReader, claims: &mut Claims, addr: u64, what: LogUse) {
    if let Some(why) = log.bad_address(addr) {
        sink.error(NAME, format!("{what}: {why}"));
        sink.found(Finding::SegmentUsage);
    } else if let Err(other) = claims.claim_block(addr, what) {
        sink.error(NAME, format!("{what}: log block {addr} is already {other}"));
        sink.found(Finding::SegmentUsage);
    }
}

/// Every block and indirect block of a meta file. Blocks the tables added after the
/// checkpoint (address 0) are not on disk yet.
fn claim_meta_file(
    sink: &mut Sink,
    log: &LogReader,
    claims: &mut Claims,
    file: u64,
    mf: &MetaFile,
) {
    for (index, &addr) in mf.blocks.iter().enumerate() {
        if addr != 0 {
            let what = LogUse::Meta {
                file,
                index: index as u64,
            };
            claim(sink, log, claims, addr, what);
        }
    }
    for (&(level, index), &addr) in &mf.indirect {
        claim(
            sink,
            log,
            claims,
            addr,
            LogUse::MetaIndirect { file, level, index },
        );
    }
}
