//! What a repair can do: the classes of repair a policy allows or declines, and the fixes a
//! plan is made of. Both the planner (`plan`) and the namespace planner (`namespace`) build
//! them; the session and the superblock writer carry them out.

use crate::check::findings::PtrAt;
use std::collections::{BTreeMap, BTreeSet};

/// Stands for the lost+found a repair makes, until it has an inode number.
pub const NEW_LOST_FOUND: u64 = u64::MAX;

/// Kinds of repair, in the order they are asked about. "Safe" ones lose nothing (they make
/// a count, a table or a copy agree with what the file system holds, or give a name to
/// something that had none); the others give something up to make the rest consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FixClass {
    /// Rewrite superblock copies, or the data superblock's informational fields.
    SuperblockCopies,
    /// Replace the primary superblock with a copy, or rebuild an unreadable data superblock.
    RestoreSuperblock,
    /// Go back to the previous checkpoint (the newest one's tables cannot be read).
    OlderCheckpoint,
    /// Cut the log before a transaction that cannot be applied.
    CutLog,
    /// Continue the log in a fresh segment (the checkpoint's head is unusable).
    NewLogHead,
    /// Free inodes that cannot be read.
    FreeLostInodes,
    /// Clear block pointers to blocks outside the devices, of other owners, or not what they
    /// should be; and second uses of data blocks.
    ClearPointers,
    /// Free symbolic links whose target cannot be read.
    FreeBadSymlinks,
    /// Inode map entries (misplaced slots, flags), the free-inode list, inode fields (sizes
    /// grown over mapped blocks, block counts, flags, home group).
    Inodes,
    /// Entries that name nothing or sit in something that is not a directory; wrong hashes
    /// and types.
    Entries,
    /// Remove illegal names, extra names of directories and names of the root.
    RemoveNames,
    /// Reconnect unreachable inodes under /lost+found.
    Reconnect,
    /// Free unattached empty files.
    FreeEmpty,
    /// Free orphans (unlinked while open; mount would free them).
    FreeOrphans,
    /// Link counts, directory sizes, '..'.
    LinkCounts,
    /// Rebuild a damaged directory tree from the entries that can still be read.
    RebuildTree,
    /// Remove extended attributes that belong to no inode, break Linux's rules, cannot be
    /// read, or are past their inode's limits.
    Attributes,
    /// Data bitmaps, group descriptors, segment usage, node map, where the log writes next,
    /// checkpoint figures.
    Tables,
}

impl FixClass {
    pub fn is_safe(self) -> bool {
        !matches!(
            self,
            FixClass::RestoreSuperblock
                | FixClass::OlderCheckpoint
                | FixClass::CutLog
                | FixClass::NewLogHead
                | FixClass::FreeLostInodes
                | FixClass::ClearPointers
                | FixClass::FreeBadSymlinks
                | FixClass::RemoveNames
                | FixClass::RebuildTree
                | FixClass::Attributes
        )
    }

    /// A question about this class: "<description>?"
    pub fn description(self) -> &'static str {
        match self {
            FixClass::SuperblockCopies => "Rewrite damaged superblock copies from the primary",
            FixClass::RestoreSuperblock => {
                "Replace a damaged superblock (the primary from a copy, or the data device's \
                 from the metadata device's)"
            }
            FixClass::OlderCheckpoint => {
                "Go back to the previous checkpoint, whose tables can be read (what was written \
                 after the newest checkpoint is lost)"
            }
            FixClass::CutLog => {
                "Cut the log before the transaction that cannot be applied (what follows is lost)"
            }
            FixClass::NewLogHead => {
                "Continue the log in a fresh segment (whatever was written after the checkpoint \
                 is lost)"
            }
            FixClass::FreeLostInodes => "Free inodes that cannot be read",
            FixClass::ClearPointers => {
                "Clear block pointers that cannot be followed or that share a data block"
            }
            FixClass::FreeBadSymlinks => "Free symbolic links whose target cannot be read",
            FixClass::Inodes => "Fix inode map entries, the free-inode list and inode fields",
            FixClass::Entries => {
                "Fix directory entries that name nothing or carry a wrong hash or type"
            }
            FixClass::RemoveNames => {
                "Remove illegal names, extra names of directories and names of the root"
            }
            FixClass::Reconnect => "Reconnect unreachable inodes under /lost+found",
            FixClass::FreeEmpty => "Free unattached empty files",
            FixClass::FreeOrphans => {
                "Free orphans: files unlinked while open whose last user is gone"
            }
            FixClass::LinkCounts => "Fix link counts, directory sizes and '..'",
            FixClass::RebuildTree => {
                "Rebuild the damaged directory tree from the entries that can be read (names in \
                 unreadable nodes are lost; their files go to /lost+found)"
            }
            FixClass::Tables => {
                "Rebuild data bitmaps, group descriptors, segment usage and the node map"
            }
            FixClass::Attributes => {
                "Remove extended attributes of free inodes, with names or values Linux never \
                 stores there, whose value cannot be read, or past their inode's limits"
            }
        }
    }
}

/// Which classes may be applied. Built by the caller from -p/-y or from answers.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    allowed: BTreeSet<FixClass>,
}

impl Policy {
    /// Every repair (fsck -y).
    pub fn all() -> Policy {
        Policy {
            allowed: ALL.iter().copied().collect(),
        }
    }

    /// The repairs that lose nothing (fsck -p).
    pub fn safe() -> Policy {
        Policy {
            allowed: ALL.iter().copied().filter(|c| c.is_safe()).collect(),
        }
    }

    /// Nothing.
    pub fn none() -> Policy {
        Policy::default()
    }

    pub fn allows(&self, c: FixClass) -> bool {
        self.allowed.contains(&c)
    }

    pub fn set(&mut self, c: FixClass, allowed: bool) {
        if allowed {
            self.allowed.insert(c);
        } else {
            self.allowed.remove(&c);
        }
    }
}

pub const ALL: [FixClass; 18] = [
    FixClass::SuperblockCopies,
    FixClass::RestoreSuperblock,
    FixClass::OlderCheckpoint,
    FixClass::CutLog,
    FixClass::NewLogHead,
    FixClass::FreeLostInodes,
    FixClass::ClearPointers,
    FixClass::FreeBadSymlinks,
    FixClass::Inodes,
    FixClass::Entries,
    FixClass::RemoveNames,
    FixClass::Reconnect,
    FixClass::FreeEmpty,
    FixClass::FreeOrphans,
    FixClass::LinkCounts,
    FixClass::RebuildTree,
    FixClass::Attributes,
    FixClass::Tables,
];

/// A repair done by writing a device directly, before anything is loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawFix {
    RestorePrimary,
    RewriteCopy { segment: u64 },
    RewriteDataSuperblock,
}

/// A repair made to the tables before the file system is opened on them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableFix {
    FreeLostInode {
        ino: u64,
    },
    FixImapEntry {
        ino: u64,
        slot: u16,
        generation: u32,
    },
    ClearOrphanFlag {
        ino: u64,
    },
    ClearImapFlags {
        ino: u64,
    },
    ClearImapZero,
    RewriteIfile,
    ClearNodeMapEntry {
        id: u64,
    },
    NextNodeId,
    RebuildBitmaps,
    SegmentUsage,
    /// Continue the log in fresh segments.
    NewHead,
    /// The state loaded already stops before the failing transaction.
    CutLog,
    /// The state loaded is the previous checkpoint's; checkpoints from now on must be
    /// numbered past `newest` (the one whose tables are lost).
    OlderCheckpoint {
        newest: u64,
    },
    /// A new checkpoint (the fallback region, stale figures).
    Checkpoint,
}

/// A repair made through the opened file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionFix {
    ClearPointer {
        ino: u64,
        at: PtrAt,
    },
    ClearAllPointers {
        ino: u64,
    },
    SetSize {
        ino: u64,
        size: u64,
    },
    InodeFields {
        ino: u64,
    },
    Recount {
        ino: u64,
    },
    RemoveEntry {
        dir: u64,
        hash: u64,
        name: Vec<u8>,
    },
    /// Make the root directory again (inode 1, empty).
    MakeRoot,
    /// Set the damaged tree aside for an empty one and insert the salvaged entries and
    /// attributes.
    RebuildTree {
        entries: Vec<crate::check::entry::Entry>,
        attrs: Vec<crate::check::salvage::SalvagedAttr>,
    },
    /// Remove the attribute record under (`ino`, `hash`, `name`), freeing the value blocks
    /// `free` (those the check found to be its own).
    RemoveAttribute {
        ino: u64,
        hash: u64,
        name: Vec<u8>,
        free: Vec<u64>,
    },
    /// Set the inode's attribute flags from the attributes it has.
    AttrFlags {
        ino: u64,
    },
    MakeLostFound {
        name: Vec<u8>,
    },
    /// `dir` may be `NEW_LOST_FOUND`; `kind` is a type code.
    InsertEntry {
        dir: u64,
        name: Vec<u8>,
        ino: u64,
        kind: u8,
    },
    /// `ino` may be `NEW_LOST_FOUND`.
    SetLinks {
        ino: u64,
        nlink: Option<u32>,
        size: Option<u64>,
        parent: Option<u64>,
    },
    FreeInode {
        ino: u64,
    },
}

impl SessionFix {
    /// Execution order: pointers, fields, counts, then names, then frees.
    pub(super) fn stage(&self) -> u8 {
        match self {
            SessionFix::ClearPointer { .. } | SessionFix::ClearAllPointers { .. } => 0,
            SessionFix::SetSize { .. } | SessionFix::InodeFields { .. } => 1,
            SessionFix::Recount { .. } => 2,
            SessionFix::RemoveEntry { .. }
            | SessionFix::RebuildTree { .. }
            | SessionFix::RemoveAttribute { .. } => 3,
            SessionFix::MakeRoot | SessionFix::MakeLostFound { .. } => 4,
            SessionFix::InsertEntry { .. } => 5,
            SessionFix::SetLinks { .. } | SessionFix::AttrFlags { .. } => 6,
            SessionFix::FreeInode { .. } => 7,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Planned<F = SessionFix> {
    pub class: FixClass,
    pub fix: F,
    pub message: String,
}

/// Everything one round of repair does.
#[derive(Default)]
pub struct Plan {
    pub raw: Vec<Planned<RawFix>>,
    pub tables: Vec<Planned<TableFix>>,
    pub session: Vec<Planned<SessionFix>>,
    /// What was found but may not be done (policy), as messages with their class.
    pub declined: Vec<(FixClass, String)>,
    /// What nothing can repair.
    pub uncorrectable: Vec<String>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty() && self.tables.is_empty() && self.session.is_empty()
    }

    /// The classes the plan uses, with the messages of each (for questions).
    pub fn by_class(&self) -> BTreeMap<FixClass, Vec<String>> {
        let mut m: BTreeMap<FixClass, Vec<String>> = BTreeMap::new();
        for p in &self.raw {
            m.entry(p.class).or_default().push(p.message.clone());
        }
        for p in &self.tables {
            m.entry(p.class).or_default().push(p.message.clone());
        }
        for p in &self.session {
            m.entry(p.class).or_default().push(p.message.clone());
        }
        m
    }

    /// Does the session change inodes or entries (not only tables)?
    pub fn changes_files(&self) -> bool {
        !self.session.is_empty()
    }
}
