//! Finding what is still live in a segment, and moving it to the log head.

use super::*;
use crate::format::bmap::{self, BlockPath};
use crate::format::inode::{check_inode_block, inode_in_block};
use crate::format::meta::symlink_bytes_per_block;
use crate::format::summary::Summary;
use crate::format::{BlockKind, BITMAP_ID, IFILE_ID, NODEMAP_ID};
use crate::fs::Fs;
use crate::log::read_blocks;
use crate::meta::metafile::MetaFile;
use crate::{FsError, Result};

/// A victim's blocks as one read brought them: on a disk a segment costs one seek and
/// rotation read whole, where its summaries and inode blocks read one at a time cost one each
/// (Sprite LFS's cleaner reads whole segments too). Blocks the read did not bring (it failed:
/// a bad block anywhere in the segment) are read alone, as they are needed.
struct SegmentImage<'a> {
    dev: &'a dyn crate::device::BlockDevice,
    block_size: u32,
    start: u64,
    bytes: Option<Vec<u8>>,
}

impl SegmentImage<'_> {
    /// `n` blocks from `addr`, all in the segment.
    fn blocks(&self, addr: u64, n: u64) -> Result<std::borrow::Cow<'_, [u8]>> {
        let bs = self.block_size as u64;
        match &self.bytes {
            Some(b) if addr >= self.start && (addr - self.start + n) * bs <= b.len() as u64 => {
                let at = ((addr - self.start) * bs) as usize;
                Ok(std::borrow::Cow::Borrowed(&b[at..at + (n * bs) as usize]))
            }
            _ => Ok(std::borrow::Cow::Owned(read_blocks(
                self.dev,
                self.block_size,
                addr,
                n,
            )?)),
        }
    }
}

impl Fs {
    /// Segment `seg`, read in one request.
    fn read_segment(&self, seg: u64) -> SegmentImage<'_> {
        let sb = &self.sb;
        let (start, end) = (sb.segment_start(seg), sb.segment_end(seg));
        let bytes = read_blocks(self.log.dev(), sb.block_size, start, end - start).ok();
        SegmentImage {
            dev: self.log.dev(),
            block_size: sb.block_size,
            start,
            bytes,
        }
    }

    /// The partial segments of `seg` (as `image` holds it), newest use only: (address,
    /// summary), in log order.
    fn summaries_in(&self, image: &SegmentImage, seg: u64) -> Result<Vec<(u64, Summary)>> {
        let sb = &self.sb;
        let end = sb.segment_end(seg);
        let mut addr = sb.segment_start(seg);
        let mut out: Vec<(u64, Summary)> = Vec::new();
        while end - addr >= 2 {
            let first = image.blocks(addr, 1)?;
            let Ok(n) = Summary::peek_len(&first, sb.uuid_tag()) else {
                break;
            };
            if addr + n as u64 > end {
                break;
            }
            let raw = image.blocks(addr, n as u64)?;
            let Ok(s) = Summary::decode(&raw, sb.uuid_tag()) else {
                break;
            };
            // A reused segment may still hold partial segments of its previous use behind the
            // new ones; serials only grow within one use.
            if out.last().is_some_and(|(_, p)| s.serial <= p.serial)
                || addr + s.total_blocks() > end
            {
                break;
            }
            let next = addr + s.total_blocks();
            out.push((addr, s));
            addr = next;
        }
        Ok(out)
    }

    /// Everything still live in `seg`, without changing anything.
    pub(super) fn scan_segment(&self, seg: u64) -> Result<SegmentScan> {
        let mut scan = SegmentScan {
            seg,
            live_bytes: self.log.lock_ifile().usage[seg as usize].live_bytes as u64,
            ..Default::default()
        };
        let image = self.read_segment(seg);
        for (addr, summary) in self.summaries_in(&image, seg)? {
            scan.partial_segments += 1;
            let first = addr + summary.summary_blocks as u64;
            for (i, d) in summary.descriptors.iter().enumerate() {
                let a = first + i as u64;
                scan.blocks_examined += 1;
                match d.kind {
                    BlockKind::Inodes => {
                        for (ino, slot) in self.live_inodes_in(&image.blocks(a, 1)?, a) {
                            scan.items.push((a, Live::Inode { ino, slot }));
                        }
                    }
                    // Value blocks are named by node ids too, and move the same way.
                    BlockKind::Node | BlockKind::Value => {
                        if self.log.node_addr(d.owner) == a {
                            scan.items.push((a, Live::Node { id: d.owner }));
                        }
                    }
                    BlockKind::Indirect => {
                        if self.indirect_is_live(d.owner, d.level, d.index, a)? {
                            let item = Live::Indirect {
                                ino: d.owner,
                                level: d.level,
                                index: d.index,
                            };
                            scan.items.push((a, item));
                        }
                    }
                    BlockKind::Symlink => {
                        if let Some(blocks) = self.symlink_is_live(d.owner, d.index, a)? {
                            let item = Live::Symlink {
                                ino: d.owner,
                                index: d.index,
                                blocks,
                            };
                            scan.items.push((a, item));
                        }
                    }
                    BlockKind::Meta | BlockKind::MetaIndirect => {
                        if self.meta_is_live(d.kind, d.owner, d.index, a) {
                            let item = Live::Meta {
                                file: d.owner,
                                index: d.index,
                            };
                            scan.items.push((a, item));
                        }
                    }
                }
            }
        }
        Ok(scan)
    }

    /// (inode, slot) of every inode the inode map places in INODES block `block`, at `a`.
    fn live_inodes_in(&self, block: &[u8], a: u64) -> Vec<(u64, u16)> {
        let Ok(n) = check_inode_block(block) else {
            return Vec::new();
        };
        let ifile = self.log.lock_ifile();
        let mut out = Vec::new();
        for slot in 1..=n {
            let Ok(d) = inode_in_block(block, slot) else {
                continue;
            };
            if ifile
                .entry(d.ino)
                .is_some_and(|e| e.addr == a && e.slot as usize == slot)
            {
                out.push((d.ino, slot as u16));
            }
        }
        out
    }

    /// The cached inode for the cleaner (None when it is gone), loaded or found without
    /// counting as a use: a pass must not evict the working set (`InodeCache::peek`).
    pub(super) fn inode_for_clean(
        &self,
        ino: u64,
    ) -> Result<Option<std::sync::Arc<crate::fs::inode::InodeEntry>>> {
        if self.log.inode_loc(ino).is_none() {
            return Ok(None);
        }
        match self.inode_used(ino, false) {
            Ok(e) => Ok(Some(e)),
            Err(FsError::Errno(libc::ENOENT)) => Ok(None),
            Err(x) => Err(x),
        }
    }

    pub(super) fn indirect_is_live(&self, ino: u64, level: u8, index: u64, a: u64) -> Result<bool> {
        if !(1..=3).contains(&level) {
            return Ok(false);
        }
        let Some(BlockPath::Indirect { steps, .. }) = bmap::path(index, self.ppb) else {
            return Ok(false);
        };
        if !steps.iter().any(|s| s.level == level && s.index == index) {
            return Ok(false);
        }
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(false);
        };
        let _op = e.op.lock_arc();
        // Walk to the block the way a lookup would, loading what is missing.
        self.resolve_for_clean(&e, index)?;
        let st = e.state.read();
        Ok(!st.deleted && st.ptrs.get(&(level, index)).is_some_and(|b| b.addr == a))
    }

    /// Blocks of the target when symlink block `index` of `ino` at `a` is live.
    pub(super) fn symlink_is_live(&self, ino: u64, index: u64, a: u64) -> Result<Option<u64>> {
        if index > 1 {
            return Ok(None);
        }
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(None);
        };
        let st = e.state.read();
        let live = st.d.is_symlink()
            && st.d.inline.is_none()
            && !st.target_dirty()
            && st.d.direct[index as usize] == a;
        Ok(live.then(|| {
            (st.d.size as usize).div_ceil(symlink_bytes_per_block(self.sb.block_size)) as u64
        }))
    }

    pub(super) fn meta_is_live(&self, kind: BlockKind, file: u64, index: u64, a: u64) -> bool {
        let mut locked = self.lock_tables();
        let t = locked.tables();
        if ![IFILE_ID, BITMAP_ID, NODEMAP_ID].contains(&file) {
            return false;
        }
        let mf = metafile(&t, file);
        match kind {
            BlockKind::Meta => mf.blocks.get(index as usize) == Some(&a),
            _ => mf.indirect.values().any(|&x| x == a) && index < mf.len(),
        }
    }

    // ------------------------------------------------------------------------------------
    // Moving it
    // ------------------------------------------------------------------------------------

    /// Make `item` (found live at `a`) dirty if it still is live; returns 1 if it was.
    pub(super) fn move_live(&self, a: u64, item: Live) -> Result<u64> {
        match item {
            Live::Inode { ino, slot } => self.move_inode(ino, slot, a),
            Live::Node { id } => self.move_node(id, a),
            Live::Indirect { ino, level, index } => self.move_indirect(ino, level, index, a),
            Live::Symlink { ino, index, .. } => self.move_symlink(ino, index, a),
            Live::Meta { file, index } => Ok(self.move_meta(file, index)),
        }
    }

    pub(super) fn move_inode(&self, ino: u64, slot: u16, a: u64) -> Result<u64> {
        let live = self
            .log
            .inode_loc(ino)
            .is_some_and(|e| e.addr == a && e.slot == slot);
        if !live {
            return Ok(0);
        }
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(0);
        };
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        if st.deleted {
            return Ok(0);
        }
        self.mark_dirty(&e, &mut st);
        Ok(1)
    }

    pub(super) fn move_node(&self, id: u64, a: u64) -> Result<u64> {
        if self.log.node_addr(id) != a {
            return Ok(0);
        }
        let _pre = self.ns.tree.preload_node(&self.nodes(), id)?;
        let _g = self.log.gate.read();
        match self.ns.tree.mark_dirty(&self.nodes(), id) {
            Ok(()) => Ok(1),
            // Freed meanwhile: its block died with it.
            Err(FsError::Errno(libc::ENOENT)) => Ok(0),
            Err(e) => Err(e),
        }
    }

    pub(super) fn move_indirect(&self, ino: u64, level: u8, index: u64, a: u64) -> Result<u64> {
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(0);
        };
        let _op = e.op.lock_arc();
        self.resolve_for_clean(&e, index)?;
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        if st.deleted {
            return Ok(0);
        }
        match st.ptrs.get(&(level, index)) {
            Some(b) if b.addr == a => {
                crate::fs::inode::bmap::mark_block_dirty(&mut st.ptrs, level, index, self.ppb);
                self.mark_dirty(&e, &mut st);
                Ok(1)
            }
            _ => Ok(0),
        }
    }

    pub(super) fn move_symlink(&self, ino: u64, index: u64, a: u64) -> Result<u64> {
        if self.symlink_is_live(ino, index, a)?.is_none() {
            return Ok(0);
        }
        let Some(e) = self.inode_for_clean(ino)? else {
            return Ok(0);
        };
        // The link may be unlinked between the check above and this read (readlink then
        // answers ENOENT): a target that is no longer live has nothing to move, and is no
        // error of the pass.
        let target = match self.readlink(ino) {
            Ok(target) => target,
            Err(err) => {
                let st = e.state.read();
                if st.deleted || st.d.direct[index as usize] != a {
                    return Ok(0);
                }
                return Err(err);
            }
        };
        let _g = self.log.gate.read();
        let mut st = e.state.write();
        if st.deleted || st.target_dirty() || st.d.direct[index as usize] != a {
            return Ok(0);
        }
        st.set_dirty_target(std::sync::Arc::new(target));
        self.mark_dirty(&e, &mut st);
        Ok(1)
    }

    /// Meta blocks are written by the checkpoint that ends the pass.
    pub(super) fn move_meta(&self, file: u64, index: u64) -> u64 {
        let mut locked = self.lock_tables();
        let t = locked.tables();
        let mf: &mut MetaFile = match file {
            IFILE_ID => &mut t.ifile.file,
            BITMAP_ID => &mut t.data.file,
            _ => &mut t.nodes.file,
        };
        // Rewriting any block below an indirect block rewrites the indirect block too.
        if index < mf.len() {
            mf.mark_dirty(index);
            self.tables_changed(&t);
            1
        } else {
            0
        }
    }
}
