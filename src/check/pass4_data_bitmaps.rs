//! Pass 4: the data device's allocation state (bitmaps and group descriptors, after
//! roll-forward) against the blocks files actually use. A block is allocated exactly when a
//! file maps it, except block 0, the data superblock, which is always allocated. Leaked blocks
//! (allocated, unused: space lost) and unallocated used blocks (free, yet a file's: the next
//! allocation corrupts that file) are reported separately, as runs.

use super::context::Sink;
use super::findings::Finding;
use super::pass2_inodes::Inodes;
use super::pass3_block_maps::DataUse;
use crate::format::kind::FileKind;
use crate::meta::Tables;
use std::collections::BTreeMap;

pub const NAME: &str = "data bitmaps";

/// Runs of consecutive block numbers.
#[derive(Default)]
struct Runs(Vec<(u64, u64)>);

impl Runs {
    fn add(&mut self, b: u64) {
        match self.0.last_mut() {
            Some((start, len)) if *start + *len == b => *len += 1,
            _ => self.0.push((b, 1)),
        }
    }
}

/// ("data block 7 is", "it") / ("data blocks 7..=9 (3 blocks) are", "them").
fn blocks_are(start: u64, len: u64) -> (String, &'static str) {
    if len == 1 {
        (format!("data block {start} is"), "it")
    } else {
        (
            format!(
                "data blocks {start}..={} ({len} blocks) are",
                start + len - 1
            ),
            "them",
        )
    }
}

pub fn run(sink: &mut Sink, tables: &Tables, inodes: &Inodes, data_use: &DataUse) {
    let map = &tables.data;
    let per_group = map.blocks_per_group;
    let groups = map.ngroups();
    let mut leaked = Runs::default();
    let mut unallocated = Runs::default();
    let mut allocated_in_group = vec![0u64; groups as usize];
    for b in 0..map.data_blocks {
        if b % (1 << 20) == 0 {
            sink.progress(4, NAME, b, map.data_blocks);
        }
        let allocated = map.is_committed(b);
        let used = b == 0 || data_use.referenced.get(b as usize).is_some_and(|bit| *bit);
        if allocated {
            if let Some(n) = allocated_in_group.get_mut((b / per_group) as usize) {
                *n += 1;
            }
        }
        if allocated && !used {
            leaked.add(b);
        }
        if used && !allocated {
            unallocated.add(b);
        }
    }
    sink.progress(4, NAME, map.data_blocks, map.data_blocks);
    let wrong_before = sink.findings.len();
    for &(start, len) in &leaked.0 {
        sink.found(Finding::DataBitmaps);
        let (blocks, them) = blocks_are(start, len);
        sink.error(
            NAME,
            format!("{blocks} allocated in the bitmap, but no file uses {them} (leaked)"),
        );
    }
    for &(start, len) in &unallocated.0 {
        sink.found(Finding::DataBitmaps);
        let whose = if start == 0 {
            "the data superblock's"
        } else {
            "used by files"
        };
        let (blocks, them) = blocks_are(start, len);
        sink.error(
            NAME,
            format!(
                "{blocks} {whose} but free in the bitmap (the next allocation would hand {them} \
                 out again)"
            ),
        );
    }

    // Group descriptors: free counts match the bitmaps; the bits of the last group past the
    // device's end stay set so they are never handed out.
    let mut dirs_by_group: BTreeMap<u64, u64> = BTreeMap::new();
    for info in inodes.good.values() {
        if info.kind() == Some(FileKind::Directory) {
            *dirs_by_group.entry(info.disk.group as u64).or_default() += 1;
        }
    }
    for (g, gd) in map.groups.iter().enumerate() {
        let g = g as u64;
        // Only the group's own blocks, each once, were counted.
        assert!(
            allocated_in_group[g as usize] <= map.group_len(g),
            "group {g} has more blocks allocated than it holds"
        );
        let free = map.group_len(g) - allocated_in_group[g as usize];
        if gd.free_blocks as u64 != free {
            sink.found(Finding::DataBitmaps);
            sink.error(
                NAME,
                format!(
                    "group {g}: descriptor says {} free blocks, its bitmap has {free}",
                    gd.free_blocks
                ),
            );
        }
        let dirs = dirs_by_group.get(&g).copied().unwrap_or(0);
        if gd.dirs as u64 != dirs {
            sink.found(Finding::DataBitmaps);
            sink.warning(
                NAME,
                format!(
                    "group {g}: descriptor counts {} directories, {dirs} have their home there \
                     (this only steers where new directories go)",
                    gd.dirs
                ),
            );
        }
        if gd.flags != 0 {
            sink.found(Finding::DataBitmaps);
            sink.warning(
                NAME,
                format!("group {g}: descriptor flags {:#x}, not 0", gd.flags),
            );
        }
    }
    let padded_end = groups.saturating_mul(per_group);
    let clear_padding = (map.data_blocks..padded_end)
        .filter(|&b| !map.is_committed(b))
        .count();
    if clear_padding > 0 {
        sink.found(Finding::DataBitmaps);
        sink.error(
            NAME,
            format!(
                "the last group's bitmap marks {clear_padding} blocks past the end of the device \
                 as free"
            ),
        );
    }
    // One finding is enough: the repair rebuilds everything.
    if sink.findings.len() > wrong_before {
        sink.findings.truncate(wrong_before);
        sink.found(Finding::DataBitmaps);
    }
}
