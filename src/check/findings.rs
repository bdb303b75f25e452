//! The machine-readable side of the report: what the repairer (`check::repair`) can act on.
//!
//! Passes record a `Finding` next to the problem text they report, naming the object and what
//! is wrong with it in the terms a repair needs (inode numbers, pointer positions, segments),
//! so no repair ever parses a message. Findings that only restate what another repair
//! recomputes anyway (a usage table or bitmap rebuilt from scratch) are recorded once.

pub use crate::format::bmap::PtrAt;

/// Why an allocated inode could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The inode is gone (address unusable, block unreadable or not an inode block, slot
    /// empty or holding something else): its number is freed.
    Gone,
    /// The block named by the inode map holds the inode, in another slot or with another
    /// generation: the map entry is corrected.
    Misplaced { slot: u16, generation: u32 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    // ---- pass 0: superblocks
    /// The metadata device's superblock is unusable (a copy in the log may replace it).
    PrimarySuperblock,
    /// The superblock copy at the start of `segment` differs from the primary.
    SuperblockCopy {
        segment: u64,
    },
    /// The data device's superblock is unusable, or (`unusable` false) disagrees with the
    /// metadata one on something mkfs writes identically but that does not pair them.
    DataSuperblock {
        unusable: bool,
    },
    /// The devices belong to different file systems, or the data device holds a metadata
    /// superblock: nothing is repaired.
    NotAPair,
    /// A device is smaller than its file system: nothing is repaired.
    DeviceTooSmall,

    // ---- pass 1: checkpoints
    /// The checkpoint that is not the newest is lost or odd; any new checkpoint replaces it.
    FallbackCheckpoint,
    /// The newest checkpoint's log head, or the segment after it, is unusable: the log must
    /// continue somewhere new.
    LogHead,
    /// The checkpoint's next node id is below an id in use.
    NextNodeId,
    /// The bitmap file could not be loaded as written; the check went on with one rebuilt
    /// from what the files use.
    BitmapFile,
    /// The tables of checkpoint `newest` cannot be loaded; the check used the one before.
    OlderCheckpoint {
        newest: u64,
    },
    /// Roll-forward fails at a transaction after `applied` good ones: the log is cut there.
    RollForward {
        applied: u64,
    },
    /// Figures the checkpoint repeats are stale (a new checkpoint rewrites them).
    CheckpointFigures,

    // ---- pass 2: inodes
    /// Inode map entry 0 is allocated.
    ImapEntryZero,
    /// An inode map entry carries flags nobody knows.
    ImapFlags {
        ino: u64,
    },
    /// An allocated inode that cannot be used.
    InodeLost {
        ino: u64,
        how: Lost,
    },
    /// An inode with links flagged orphan (mount would free it).
    OrphanFlag {
        ino: u64,
    },
    /// `i_flags`, the home group or a non-directory's '..' field is wrong.
    InodeFields {
        ino: u64,
    },
    /// The on-disk free list or IFile header counts are wrong.
    FreeList,

    // ---- pass 3: block maps
    /// A pointer that cannot be followed (outside the device, another owner's, a block that
    /// is not the one asked for) or a data block another file owns too: cleared.
    ClearPointer {
        ino: u64,
        at: PtrAt,
    },
    /// Blocks are mapped past the end of the file: the size grows to cover them.
    SizeTooSmall {
        ino: u64,
        size: u64,
    },
    /// The size is beyond the largest file: it shrinks to cover the mapped blocks.
    SizeTooLarge {
        ino: u64,
        size: u64,
    },
    /// `i_blocks` or `i_meta_blocks` do not count what the block map holds.
    BlockCounts {
        ino: u64,
    },
    /// A symlink whose target cannot be read (or has an impossible length): it is freed.
    BadSymlink {
        ino: u64,
    },
    /// A directory or special file with block pointers or block counts.
    OwnsBlocks {
        ino: u64,
    },

    // ---- passes 4 and 5: allocation tables
    /// Data bitmaps or group descriptors differ from what the files use.
    DataBitmaps,
    /// Segment usage differs from what is reachable (live bytes or flags).
    SegmentUsage,
    /// Live blocks lie where the log writes next.
    LogInTheWay,

    // ---- pass 6: tree
    /// A node map entry that names a block the tree does not use.
    NodeMapEntry {
        id: u64,
    },
    /// The tree cannot be read or breaks its invariants: a repair rebuilds it from the entries
    /// that can be read (`salvage`).
    TreeDamaged,

    // ---- pass 7: namespace (the repair plans from the entries themselves)
    Namespace,
    /// An extended attribute that must go: of an inode that is free or of another
    /// generation, with a name or value Linux would never store there, whose value cannot be
    /// read, or past its inode's limits.
    Attribute {
        ino: u64,
        hash: u64,
        name: Vec<u8>,
    },
    /// The inode's attribute flags (`i_flags`) do not say what attributes it has.
    AttrFlags {
        ino: u64,
    },
}

impl Finding {
    /// Nothing can be done about it.
    pub fn is_uncorrectable(&self) -> bool {
        matches!(self, Finding::NotAPair | Finding::DeviceTooSmall)
    }
}
