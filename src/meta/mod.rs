//! The tables kept in meta files — IFile (segment usage + inode map), bitmap file (data block
//! groups) and node map — and the one function that changes them: `apply`, used alike by the
//! live log writer after a write and by roll-forward after a crash, so both reach the same state.

pub mod datamap;
pub mod ifile;
pub mod metafile;
pub mod nodemap;

use crate::format::summary::{Descriptor, Record};
use crate::format::superblock::Superblock;
use crate::format::BlockKind;
use crate::Result;
use datamap::DataMap;
use ifile::Ifile;
use nodemap::NodeMap;
use std::sync::Arc;

/// An inode written in an `INODES` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InodeLoc {
    pub ino: u64,
    pub generation: u32,
    pub slot: u16,
    /// Written with no links (open but unlinked): freed at the next mount if still so.
    pub orphan: bool,
}

/// A block of a transaction and where it was written.
#[derive(Clone, Debug)]
pub struct PlacedBlock {
    pub addr: u64,
    pub desc: Descriptor,
    /// For `INODES` blocks: the inodes in it.
    pub inodes: Vec<InodeLoc>,
}

/// Inode numbers stay below 2^32 and node ids below 2^40: bounds that keep a hostile log from
/// growing the tables without limit.
pub const MAX_INO: u64 = 1 << 32;
pub const MAX_NODE_ID: u64 = 1 << 40;

pub struct Tables {
    pub sb: Arc<Superblock>,
    pub ifile: Ifile,
    pub data: DataMap,
    pub nodes: NodeMap,
}

impl Tables {
    /// Fresh tables for a new file system.
    pub fn new(sb: Arc<Superblock>) -> Tables {
        Tables {
            ifile: Ifile::new(sb.block_size, sb.segments, &sb.copy_segments),
            data: DataMap::new(sb.block_size, sb.data_blocks, sb.blocks_per_group as u64),
            nodes: NodeMap::new(sb.block_size),
            sb,
        }
    }

    fn seg(&self, addr: u64) -> u64 {
        self.sb.segment_of(addr)
    }

    fn check_log_addr(&self, addr: u64) -> Result<()> {
        let seg = self.seg(addr);
        if seg == 0 || seg >= self.sb.segments {
            return Err(crate::FsError::corrupt(
                "log address",
                format!("{addr} is outside the log"),
            ));
        }
        Ok(())
    }

    fn check_ino(ino: u64) -> Result<()> {
        if ino == 0 || ino >= MAX_INO {
            return Err(crate::FsError::corrupt(
                "transaction",
                format!("inode number {ino}"),
            ));
        }
        Ok(())
    }

    fn check_node(id: u64) -> Result<()> {
        if id == 0 || id >= MAX_NODE_ID {
            return Err(crate::FsError::corrupt(
                "transaction",
                format!("node id {id}"),
            ));
        }
        Ok(())
    }

    /// Apply one transaction: blocks in order, then records in order (docs/FORMAT.md).
    pub fn apply(&mut self, blocks: &[PlacedBlock], records: &[Record], now: u64) -> Result<()> {
        let bs = self.sb.block_size as i64;
        for b in blocks {
            self.check_log_addr(b.addr)?;
            let seg = self.seg(b.addr);
            match b.desc.kind {
                BlockKind::Inodes => {
                    for i in &b.inodes {
                        Self::check_ino(i.ino)?;
                        if let Some(old) =
                            self.ifile
                                .place_inode(i.ino, i.generation, b.addr, i.slot, i.orphan)
                        {
                            let old_seg = self.seg(old);
                            self.ifile.add_live(old_seg, -Ifile::INODE_BYTES, now)?;
                        }
                        self.ifile.add_live(seg, Ifile::INODE_BYTES, now)?;
                    }
                }
                BlockKind::Node => {
                    Self::check_node(b.desc.owner)?;
                    let old = self.nodes.set(b.desc.owner, b.addr);
                    if old != 0 {
                        let old_seg = self.seg(old);
                        self.ifile.add_live(old_seg, -bs, now)?;
                    }
                    self.ifile.add_live(seg, bs, now)?;
                }
                BlockKind::Indirect | BlockKind::Symlink => self.ifile.add_live(seg, bs, now)?,
                BlockKind::Meta | BlockKind::MetaIndirect => {
                    return Err(crate::FsError::corrupt(
                        "transaction",
                        "meta-file block outside a checkpoint",
                    ));
                }
            }
        }
        for r in records {
            match *r {
                Record::IFree { ino } => {
                    Self::check_ino(ino)?;
                    if let Some(old) = self.ifile.free_inode(ino) {
                        let old_seg = self.seg(old);
                        self.ifile.add_live(old_seg, -Ifile::INODE_BYTES, now)?;
                    }
                }
                Record::NFree { node } => {
                    Self::check_node(node)?;
                    let old = self.nodes.set(node, 0);
                    if old != 0 {
                        let old_seg = self.seg(old);
                        self.ifile.add_live(old_seg, -bs, now)?;
                    }
                }
                Record::Dead { addr, count } => {
                    for a in addr..addr.saturating_add(count) {
                        self.check_log_addr(a)?;
                        let s = self.seg(a);
                        self.ifile.add_live(s, -bs, now)?;
                    }
                }
                Record::DAlloc { start, count } => self.data.commit_alloc(start, count)?,
                Record::DFree { start, count } => self.data.commit_free(start, count)?,
                Record::GroupDirs { group, delta } => self.data.add_dirs(group, delta)?,
            }
        }
        Ok(())
    }
}
