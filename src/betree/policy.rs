//! How full nodes may get: fanout, structure and underflow limits for a block size.
//! The reasoning is in the module documentation of `betree`.

use crate::format::node as fmt;
use crate::format::{MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};

#[derive(Clone, Debug)]
pub(crate) struct Policy {
    /// `B`: every node must encode into this many bytes.
    pub block_size: usize,
    /// Most children of an internal node: `sqrt(B / 16)` (16 for 4 KiB, 64 for 64 KiB).
    pub max_fanout: usize,
    /// An internal node with fewer children (and a small structure) is underfull: `F/3`
    /// (5 for 4 KiB). Far enough below the `F/2` a split leaves for no split/merge churn,
    /// high enough that few internal nodes — each able to hold a block of pending deletes —
    /// survive a mass deletion (with `F/4`, removing 100,000 random entries left 199 nodes;
    /// with `F/3`, 4).
    pub min_fanout: usize,
    /// Most bytes child ids plus pivots may take, so at least half a node is buffer even
    /// when hash collisions force long pivots.
    pub max_structure_bytes: usize,
    /// A leaf whose entries take fewer bytes is underfull: a quarter block, well below the
    /// half a split leaves, so a leaf is not redistributed again right after splitting.
    pub min_leaf_bytes: usize,
}

impl Policy {
    pub fn new(block_size: u32) -> Policy {
        assert!(
            (MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) && block_size.is_power_of_two(),
            "block size {block_size} is not a power of two in 4096..=65536"
        );
        let block_size = block_size as usize;
        let max_fanout = (block_size / 16).isqrt();
        Policy {
            block_size,
            max_fanout,
            min_fanout: max_fanout / 3,
            max_structure_bytes: block_size / 2,
            min_leaf_bytes: (block_size - fmt::at::BODY) / 4,
        }
    }

    /// Bytes of a block available to the body.
    pub fn usable(&self) -> usize {
        self.block_size - fmt::at::BODY
    }
}
