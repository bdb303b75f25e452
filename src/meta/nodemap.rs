//! The node map: B-epsilon tree node id → log address (docs/FORMAT.md "Node map").

use super::metafile::MetaFile;
use crate::format::meta::pointers_per_block;
use crate::format::{get_u64, put_u64, NODEMAP_ID};
use crate::Result;

pub struct NodeMap {
    pub file: MetaFile,
    block_size: u32,
    per_block: u64,
    pub addrs: Vec<u64>,
}

impl NodeMap {
    pub fn new(block_size: u32) -> NodeMap {
        let mut m = NodeMap {
            file: MetaFile::new(NODEMAP_ID, block_size, 0),
            block_size,
            per_block: pointers_per_block(block_size) as u64,
            addrs: Vec::new(),
        };
        m.grow(2);
        m
    }

    fn grow(&mut self, n: u64) {
        let want = n.div_ceil(self.per_block) * self.per_block;
        if want > self.addrs.len() as u64 {
            self.addrs.resize(want as usize, 0);
            self.file.grow(want / self.per_block);
        }
    }

    pub fn get(&self, id: u64) -> u64 {
        self.addrs.get(id as usize).copied().unwrap_or(0)
    }

    /// Set node `id`'s address; returns the old one (0 if none).
    pub fn set(&mut self, id: u64, addr: u64) -> u64 {
        self.grow(id + 1);
        let old = std::mem::replace(&mut self.addrs[id as usize], addr);
        self.file.mark_dirty(id / self.per_block);
        old
    }

    /// One past the highest id that has an address (ids at or above it name no node).
    pub fn used_limit(&self) -> u64 {
        self.addrs
            .iter()
            .rposition(|&a| a != 0)
            .map_or(0, |i| i as u64 + 1)
    }

    /// Ids below `limit` that are free.
    pub fn free_ids(&self, limit: u64) -> Vec<u64> {
        (2..limit).filter(|&i| self.get(i) == 0).collect()
    }

    pub fn encode_block(&self, b: u64) -> Vec<u8> {
        let mut body = vec![0u8; self.block_size as usize - crate::format::HEADER_SIZE];
        for i in 0..self.per_block {
            put_u64(
                &mut body,
                8 * i as usize,
                self.addrs[(b * self.per_block + i) as usize],
            );
        }
        body
    }

    pub fn decode(file: MetaFile, block_size: u32, bodies: &[Vec<u8>]) -> Result<NodeMap> {
        let per_block = pointers_per_block(block_size) as u64;
        let mut addrs = Vec::with_capacity(bodies.len() * per_block as usize);
        for body in bodies {
            for i in 0..per_block {
                addrs.push(get_u64(body, 8 * i as usize));
            }
        }
        Ok(NodeMap {
            file,
            block_size,
            per_block,
            addrs,
        })
    }
}
