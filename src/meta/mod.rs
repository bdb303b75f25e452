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

/// The three tables, each borrowed: what `apply` and a checkpoint work on. Owned tables
/// (mount, roll-forward, the checker) lend themselves as one (`Tables::parts_mut`); a mounted
/// file system keeps each table under its own lock and builds one from the three guards,
/// taken in the one order (`fs::TableGuards`).
pub struct TablesMut<'a> {
    pub sb: &'a Superblock,
    pub ifile: &'a mut Ifile,
    pub data: &'a mut DataMap,
    pub nodes: &'a mut NodeMap,
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

    pub fn parts_mut(&mut self) -> TablesMut<'_> {
        TablesMut {
            sb: &self.sb,
            ifile: &mut self.ifile,
            data: &mut self.data,
            nodes: &mut self.nodes,
        }
    }

    /// Apply one transaction (`TablesMut::apply`).
    pub fn apply(&mut self, blocks: &[PlacedBlock], records: &[Record], now: u64) -> Result<()> {
        self.parts_mut().apply(blocks, records, now)
    }
}

impl TablesMut<'_> {
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

    /// Inode numbers are handed out lowest free first, so none exceeds the number of inodes
    /// the log can hold; a larger one in a transaction is a lie that would make the inode map
    /// grow past any memory.
    fn check_ino(&self, ino: u64) -> Result<()> {
        let per_block = crate::format::inode::inodes_per_block(self.sb.block_size) as u64;
        let limit = MAX_INO.min(
            self.sb
                .meta_blocks
                .saturating_mul(per_block)
                .saturating_add(16),
        );
        if ino == 0 || ino >= limit {
            return Err(crate::FsError::corrupt(
                "transaction",
                format!("inode number {ino}"),
            ));
        }
        Ok(())
    }

    /// Node ids are reused before new ones are taken, and each live node has a log block:
    /// none exceeds twice the log's blocks (freed ids wait a transaction before reuse).
    fn check_node(&self, id: u64) -> Result<()> {
        let limit = MAX_NODE_ID.min(self.sb.meta_blocks.saturating_mul(2).saturating_add(16));
        if id == 0 || id >= limit {
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
                        self.check_ino(i.ino)?;
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
                // A value block's id is a node id: the node map finds it too.
                BlockKind::Node | BlockKind::Value => {
                    self.check_node(b.desc.owner)?;
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
                Record::IFree { ino, generation } => {
                    self.check_ino(ino)?;
                    if let Some(old) = self.ifile.free_inode(ino, generation) {
                        let old_seg = self.seg(old);
                        self.ifile.add_live(old_seg, -Ifile::INODE_BYTES, now)?;
                    }
                }
                Record::NFree { node } => {
                    self.check_node(node)?;
                    // An id the map never reached names no block: nothing to free (and the
                    // map must not grow to say so).
                    let old = if (node as usize) < self.nodes.addrs.len() {
                        self.nodes.set(node, 0)
                    } else {
                        0
                    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::summary::Descriptor;
    use crate::format::superblock::{Role, Superblock};

    fn tables() -> Tables {
        let sb = Superblock {
            uuid: [1; 16],
            role: Role::Meta,
            block_size: 4096,
            meta_blocks: 16 * 64,
            data_blocks: 4096,
            segment_blocks: 64,
            blocks_per_group: 1024,
            segments: 16,
            groups: 4,
            hash_seed: 0,
            created: 0,
            label: String::new(),
            copy_segments: vec![2],
            data_path: Vec::new(),
        };
        Tables::new(Arc::new(sb))
    }

    /// Regression: a hostile log naming node 2^39 (or inode 2^31) made the tables grow to
    /// terabytes (an abort, found by the hostile-image test), though both were below the
    /// old absolute limits.
    #[test]
    fn hostile_ids_do_not_grow_the_tables() {
        let mut t = tables();
        let node = |owner| PlacedBlock {
            addr: 64,
            desc: Descriptor {
                kind: BlockKind::Node,
                level: 0,
                owner,
                index: 0,
            },
            inodes: Vec::new(),
        };
        assert!(t.apply(&[node(1 << 39)], &[], 0).is_err());
        assert!(t.apply(&[], &[Record::NFree { node: 1 << 39 }], 0).is_err());
        // Inside the limit but past the map: freeing it is a no-op that grows nothing.
        t.apply(&[], &[Record::NFree { node: 2000 }], 0).unwrap();
        assert!(t.nodes.addrs.len() < 2000);
        let inode = |ino| PlacedBlock {
            addr: 64,
            desc: Descriptor {
                kind: BlockKind::Inodes,
                level: 0,
                owner: 0,
                index: 0,
            },
            inodes: vec![InodeLoc {
                ino,
                generation: 1,
                slot: 1,
                orphan: false,
            }],
        };
        assert!(t.apply(&[inode(1 << 31)], &[], 0).is_err());
        assert!(t.ifile.imap.len() < 1 << 20);
        t.apply(&[inode(100)], &[], 0).unwrap();
        t.apply(&[node(5)], &[], 0).unwrap();
    }
}
