//! Pass 3: block maps. Every regular file's direct and indirect pointers are followed: each
//! indirect block must be the one its parent pointer asks for (kind INDIRECT, owner, level,
//! first block mapped), data addresses must be on the data device (an unwritten pointer's
//! too: its flag is not part of the address), nothing written may be mapped at or past the
//! end of the file (unwritten blocks may: fallocate with KEEP_SIZE puts them there), no data
//! block may belong to two files (or twice to one), and `i_blocks` / `i_meta_blocks` must
//! count what was found (unwritten blocks are allocated blocks). Symlinks keep short targets inline
//! and long ones in SYMLINK blocks; directories and special files own no blocks at all.
//!
//! Data blocks in use are collected for pass 4 in a bitmap. A second owner of a block is
//! noticed when its bit is already set; the first owners of such blocks are then found by
//! walking the maps once more (as e2fsck's pass 1B does), so memory stays one bit per block.

use super::context::{Claims, LogReader, LogUse, Sink};
use super::findings::{Finding, PtrAt};
use super::pass2_inodes::{InodeInfo, Inodes};
use crate::format::bmap::{child_index, max_blocks, path, tree_start, BlockPath, DataPtr};
use crate::format::inode::{DiskInode, NDIRECT};
use crate::format::kind::FileKind;
use crate::format::meta::{
    decode_pointer_block, decode_symlink_block, pointers_per_block, symlink_bytes_per_block,
};
use crate::format::{BlockHeader, BlockKind, SYMLINK_MAX};
use crate::Result;
use bitvec::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

pub const NAME: &str = "block maps";

/// Data blocks referenced by files.
pub struct DataUse {
    /// Bit `b` set: some file maps data block `b`.
    pub referenced: BitVec<u64, Lsb0>,
}

pub fn run(
    sink: &mut Sink,
    log: &LogReader,
    claims: &mut Claims,
    inodes: &Inodes,
) -> Result<DataUse> {
    let data_blocks = log.sb.data_blocks;
    let mut referenced: BitVec<u64, Lsb0> = BitVec::repeat(false, data_blocks as usize);
    // Blocks seen a second time (their owners are looked up afterwards).
    let mut shared: BTreeSet<u64> = BTreeSet::new();
    let total = inodes.good.len() as u64;
    for (done, (&ino, info)) in inodes.good.iter().enumerate() {
        if done % 4096 == 0 {
            sink.progress(3, NAME, done as u64, total);
        }
        match info.kind() {
            Some(FileKind::Regular) => {
                let mut w = Walk::new(log, ino, &info.disk, Mode::Check);
                w.file(sink, claims, &mut |block, _file_block| {
                    // The walk reports pointers off the device instead of handing them over.
                    debug_assert!(
                        block != 0 && block < data_blocks,
                        "data block {block} is not on the device"
                    );
                    if referenced.replace(block as usize, true) {
                        shared.insert(block);
                    }
                })?;
            }
            Some(FileKind::Symlink) => symlink(sink, log, claims, ino, info)?,
            Some(kind) => owns_nothing(sink, ino, kind, &info.disk),
            None => {} // reported by pass 2
        }
    }
    sink.progress(3, NAME, total, total);
    if !shared.is_empty() {
        report_shared_blocks(sink, log, inodes, &shared)?;
    }
    sink.stats.data_blocks_used = referenced.count_ones() as u64;
    Ok(DataUse { referenced })
}

/// Name every owner of each block found twice.
fn report_shared_blocks(
    sink: &mut Sink,
    log: &LogReader,
    inodes: &Inodes,
    shared: &BTreeSet<u64>,
) -> Result<()> {
    let mut owners: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for (&ino, info) in &inodes.good {
        if info.kind() != Some(FileKind::Regular) {
            continue;
        }
        // Problems were reported by the first walk; this one only looks.
        let mut quiet = Sink::new(&Default::default());
        let mut no_claims = Claims::default();
        let mut w = Walk::new(log, ino, &info.disk, Mode::FindOwners);
        w.file(&mut quiet, &mut no_claims, &mut |block, file_block| {
            if shared.contains(&block) {
                owners.entry(block).or_default().push((ino, file_block));
            }
        })?;
    }
    let p = pointers_per_block(log.sb.block_size) as u64;
    for (block, users) in owners {
        // The first owner keeps it; every other use of it goes.
        for &(ino, file_block) in users.iter().skip(1) {
            let at = match path(file_block, p) {
                Some(BlockPath::Direct(k)) => PtrAt::Direct(k),
                Some(BlockPath::Indirect { steps, .. }) => {
                    let last = steps[steps.len() - 1];
                    PtrAt::Slot {
                        level: last.level,
                        index: last.index,
                        slot: last.slot,
                    }
                }
                None => continue,
            };
            sink.found(Finding::ClearPointer { ino, at });
        }
        let who: Vec<String> = users
            .iter()
            .map(|(ino, fb)| format!("inode {ino} (file block {fb})"))
            .collect();
        sink.error(
            NAME,
            format!(
                "data block {block} is used {} times: by {}",
                users.len(),
                who.join(", ")
            ),
        );
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Report problems and claim indirect blocks.
    Check,
    /// Only visit data pointers (the walk has been checked already).
    FindOwners,
}

/// One regular file's block map walk.
struct Walk<'a, 'b> {
    log: &'a LogReader<'b>,
    ino: u64,
    d: &'a DiskInode,
    mode: Mode,
    /// Pointers per indirect block.
    p: u64,
    /// File blocks at or past this are beyond the end of the file.
    end_block: u64,
    data_found: u64,
    /// Of `data_found`, unwritten blocks.
    unwritten_found: u64,
    indirect_found: u64,
    /// Some indirect block could not be read: the counts are incomplete.
    incomplete: bool,
    /// One past the last file block something written is mapped at (an indirect block that
    /// maps no unwritten block counts for the first block it maps).
    mapped_end: u64,
}

impl<'a, 'b> Walk<'a, 'b> {
    fn new(log: &'a LogReader<'b>, ino: u64, d: &'a DiskInode, mode: Mode) -> Self {
        let bs = log.block_size();
        Walk {
            log,
            ino,
            d,
            mode,
            p: pointers_per_block(log.sb.block_size) as u64,
            end_block: d.size.div_ceil(bs),
            data_found: 0,
            unwritten_found: 0,
            indirect_found: 0,
            incomplete: false,
            mapped_end: 0,
        }
    }

    fn found(&self, sink: &mut Sink, f: Finding) {
        if self.mode == Mode::Check {
            sink.found(f);
        }
    }

    fn problem(&self, sink: &mut Sink, message: String) {
        if self.mode == Mode::Check {
            sink.error(NAME, message);
        }
    }

    fn file(
        &mut self,
        sink: &mut Sink,
        claims: &mut Claims,
        found: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        let ino = self.ino;
        let largest = max_blocks(self.p).saturating_mul(self.log.block_size());
        if self.d.size > largest {
            self.problem(
                sink,
                format!(
                    "inode {ino}: size {} exceeds the largest file ({largest})",
                    self.d.size
                ),
            );
        }
        for (k, &a) in self.d.direct.iter().enumerate() {
            if a != 0 {
                self.data(sink, k as u64, a, PtrAt::Direct(k), found);
            }
        }
        for tree in 0..3 {
            let top = self.d.indirect[tree];
            if top != 0 {
                self.indirect(
                    sink,
                    claims,
                    tree as u8 + 1,
                    tree_start(tree, self.p),
                    top,
                    PtrAt::Top(tree),
                    found,
                )?;
            }
        }
        let bs = self.log.block_size();
        if self.d.size > largest {
            let size = self.mapped_end.saturating_mul(bs).min(largest);
            self.found(sink, Finding::SizeTooLarge { ino, size });
        } else if self.mapped_end > self.end_block {
            self.found(
                sink,
                Finding::SizeTooSmall {
                    ino,
                    size: self.mapped_end.saturating_mul(bs).min(largest),
                },
            );
        }
        if self.mode == Mode::Check
            && (self.incomplete
                || self.data_found != self.d.blocks
                || self.indirect_found != self.d.meta_blocks)
        {
            // Pointers that go are not counted: the repair counts what is left.
            sink.found(Finding::BlockCounts { ino });
        }
        if self.mode == Mode::Check && !self.incomplete {
            if self.data_found != self.d.blocks {
                sink.error(
                    NAME,
                    format!(
                        "inode {ino}: i_blocks is {}, its block map holds {} data blocks",
                        self.d.blocks, self.data_found
                    ),
                );
            }
            if self.indirect_found != self.d.meta_blocks {
                sink.error(
                    NAME,
                    format!(
                        "inode {ino}: i_meta_blocks is {}, its block map holds {} indirect blocks",
                        self.d.meta_blocks, self.indirect_found
                    ),
                );
            }
        }
        Ok(())
    }

    /// File block `file_block` has data pointer `raw` (not 0), found at `at`.
    fn data(
        &mut self,
        sink: &mut Sink,
        file_block: u64,
        raw: u64,
        at: PtrAt,
        found: &mut dyn FnMut(u64, u64),
    ) {
        self.data_found += 1;
        let ptr = DataPtr::decode(raw);
        let a = ptr.addr().unwrap_or(0);
        let what = if ptr.is_written() {
            "points at"
        } else {
            self.unwritten_found += 1;
            "is preallocated (unwritten) at"
        };
        let on_device = a != 0 && a < self.log.sb.data_blocks;
        if ptr.is_written() {
            if on_device {
                self.mapped_end = self.mapped_end.max(file_block + 1);
            }
            if file_block >= self.end_block {
                self.problem(
                    sink,
                    format!(
                        "inode {}: file block {file_block} is mapped (data block {a}) but the \
                         file ends at {} bytes",
                        self.ino, self.d.size
                    ),
                );
            }
        }
        if !on_device {
            let place = if a == 0 {
                "the data superblock".to_string()
            } else {
                format!(
                    "past the end of the data device ({} blocks)",
                    self.log.sb.data_blocks
                )
            };
            self.problem(
                sink,
                format!(
                    "inode {}: file block {file_block} {what} data block {a}, {place}",
                    self.ino
                ),
            );
            self.found(sink, Finding::ClearPointer { ino: self.ino, at });
            return;
        }
        found(a, file_block);
    }

    #[allow(clippy::too_many_arguments)]
    /// Indirect block (`level`, `index`) at log address `addr`, named by its parent. The level
    /// strictly decreases on the way down, so recursion is at most three deep.
    fn indirect(
        &mut self,
        sink: &mut Sink,
        claims: &mut Claims,
        level: u8,
        index: u64,
        addr: u64,
        at: PtrAt,
        found: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        let ino = self.ino;
        self.indirect_found += 1;
        let clear = Finding::ClearPointer { ino, at };
        let name = format!("inode {ino}: level-{level} indirect block for file block {index}");
        if self.mode == Mode::Check {
            if let Some(why) = self.log.bad_address(addr) {
                sink.error(NAME, format!("{name}: {why}"));
                sink.found(clear);
                self.incomplete = true;
                return Ok(());
            }
        }
        let raw = match self.log.read(addr)? {
            Ok(b) => b,
            Err(_) => {
                self.incomplete = true;
                return Ok(());
            }
        };
        // Only a block that is what the pointer asks for is claimed: a pointer into another
        // file's block must not take it from its owner.
        let want = BlockHeader::new(BlockKind::Indirect, level, ino, index);
        let ptrs = match decode_pointer_block(&raw, want) {
            Ok(p) => p,
            Err(e) => {
                self.problem(sink, format!("{name} at {addr}: {e}"));
                self.found(sink, clear);
                self.incomplete = true;
                return Ok(());
            }
        };
        if self.mode == Mode::Check {
            if let Err(other) = claims.claim_block(addr, LogUse::Indirect { ino, level, index }) {
                sink.error(NAME, format!("{name}: log block {addr} is already {other}"));
                sink.found(clear);
                self.incomplete = true;
                return Ok(());
            }
        }
        let unwritten_before = self.unwritten_found;
        for (slot, &child) in ptrs.iter().enumerate() {
            if child == 0 {
                continue;
            }
            let child_index = child_index(level, index, slot, self.p);
            let at = PtrAt::Slot { level, index, slot };
            if level == 1 {
                self.data(sink, child_index, child, at, found);
            } else {
                self.indirect(sink, claims, level - 1, child_index, child, at, found)?;
            }
        }
        // Past the end of the file an indirect block must map preallocated blocks; one that
        // does not is as if something were mapped there.
        if index >= self.end_block && self.unwritten_found == unwritten_before {
            self.mapped_end = self.mapped_end.max(index + 1);
            self.problem(
                sink,
                format!(
                    "{name} (at {addr}) lies past the end of the file ({} bytes)",
                    self.d.size
                ),
            );
        }
        Ok(())
    }
}

/// A symlink: target inline (at most 120 bytes) or in SYMLINK blocks named by `i_direct`.
fn symlink(
    sink: &mut Sink,
    log: &LogReader,
    claims: &mut Claims,
    ino: u64,
    info: &InodeInfo,
) -> Result<()> {
    let d = &info.disk;
    if d.size == 0 || d.size > SYMLINK_MAX as u64 {
        sink.error(
            NAME,
            format!("inode {ino}: symlink target of {} bytes", d.size),
        );
        sink.found(Finding::BadSymlink { ino });
        return Ok(());
    }
    if d.blocks != 0 {
        sink.found(Finding::BlockCounts { ino });
        sink.error(
            NAME,
            format!(
                "inode {ino}: a symlink with i_blocks {} (symlinks own no data blocks)",
                d.blocks
            ),
        );
    }
    if let Some(target) = &d.inline {
        if d.meta_blocks != 0 {
            sink.found(Finding::BlockCounts { ino });
            sink.error(
                NAME,
                format!(
                    "inode {ino}: inline symlink with i_meta_blocks {}",
                    d.meta_blocks
                ),
            );
        }
        if target.contains(&0) {
            sink.warning(
                NAME,
                format!("inode {ino}: symlink target contains a NUL byte"),
            );
        }
        return Ok(());
    }
    // Longer than INLINE_SYMLINK_MAX: the decoder filled the pointers instead.
    let per = symlink_bytes_per_block(log.sb.block_size) as u64;
    let nblocks = d.size.div_ceil(per);
    for k in 0..NDIRECT as u64 {
        let a = d.direct[k as usize];
        if k >= nblocks {
            if a != 0 {
                sink.found(Finding::ClearPointer {
                    ino,
                    at: PtrAt::Direct(k as usize),
                });
                sink.error(
                    NAME,
                    format!(
                        "inode {ino}: symlink of {} bytes has a pointer in slot {k}",
                        d.size
                    ),
                );
            }
            continue;
        }
        if a == 0 {
            sink.error(NAME, format!("inode {ino}: symlink block {k} is missing"));
            sink.found(Finding::BadSymlink { ino });
            continue;
        }
        if let Some(why) = log.bad_address(a) {
            sink.error(NAME, format!("inode {ino}: symlink block {k}: {why}"));
            sink.found(Finding::BadSymlink { ino });
            continue;
        }
        let raw = match log.read(a)? {
            Ok(b) => b,
            Err(why) => {
                sink.error(NAME, format!("inode {ino}: symlink block {k}: {why}"));
                sink.found(Finding::BadSymlink { ino });
                continue;
            }
        };
        // Claimed only once it is the block asked for (see `Walk::indirect`).
        let decoded = decode_symlink_block(&raw, ino, k);
        if decoded.is_ok() {
            if let Err(other) = claims.claim_block(a, LogUse::Symlink { ino, index: k }) {
                sink.found(Finding::BadSymlink { ino });
                sink.error(
                    NAME,
                    format!("inode {ino}: symlink block {k} at {a} is already {other}"),
                );
                continue;
            }
        }
        match decoded {
            Err(e) => {
                sink.error(NAME, format!("inode {ino}: symlink block {k} at {a}: {e}"));
                sink.found(Finding::BadSymlink { ino });
            }
            Ok(body) => {
                let len = (d.size - k * per).min(per) as usize;
                if body[..len].contains(&0) {
                    sink.warning(
                        NAME,
                        format!("inode {ino}: symlink target contains a NUL byte"),
                    );
                }
            }
        }
    }
    for tree in 0..3 {
        if d.indirect[tree] != 0 {
            sink.found(Finding::ClearPointer {
                ino,
                at: PtrAt::Top(tree),
            });
        }
    }
    if d.indirect.iter().any(|&a| a != 0) {
        sink.error(NAME, format!("inode {ino}: symlink with indirect pointers"));
    }
    if d.meta_blocks != nblocks {
        sink.found(Finding::BlockCounts { ino });
        sink.error(
            NAME,
            format!(
                "inode {ino}: i_meta_blocks is {}, a {}-byte target takes {nblocks} symlink blocks",
                d.meta_blocks, d.size
            ),
        );
    }
    Ok(())
}

/// Directories (entries live in the tree) and special files own no blocks.
fn owns_nothing(sink: &mut Sink, ino: u64, kind: FileKind, d: &DiskInode) {
    let what = if kind == FileKind::Directory {
        "directory"
    } else {
        "special file"
    };
    let pointers = d.direct.iter().chain(d.indirect.iter()).any(|&a| a != 0);
    if pointers || d.blocks != 0 || d.meta_blocks != 0 {
        sink.found(Finding::OwnsBlocks { ino });
    }
    if pointers {
        sink.error(NAME, format!("inode {ino}: a {what} with block pointers"));
    }
    if d.blocks != 0 || d.meta_blocks != 0 {
        sink.error(
            NAME,
            format!(
                "inode {ino}: a {what} with i_blocks {} and i_meta_blocks {} (it owns no blocks)",
                d.blocks, d.meta_blocks
            ),
        );
    }
    if kind != FileKind::Directory && d.size != 0 {
        sink.warning(
            NAME,
            format!("inode {ino}: special file of size {}", d.size),
        );
    }
}
