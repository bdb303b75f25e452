//! From what the check found to what the repair does: every finding becomes a fix of some
//! class (or is named uncorrectable), and a policy says which classes may be applied.

use super::namespace::{self, Allowed, Context};
use crate::check::findings::{Finding, Lost, PtrAt};
use crate::check::State;
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
    fn stage(&self) -> u8 {
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

/// Plan a round from the findings (and the state, when the check got that far).
pub fn plan(findings: &[Finding], state: Option<&State>, policy: &Policy) -> Plan {
    let mut p = Plan::default();
    let add_raw = |p: &mut Plan, class: FixClass, fix: RawFix, message: String| {
        if policy.allows(class) {
            p.raw.push(Planned {
                class,
                fix,
                message,
            });
        } else {
            p.declined.push((class, message));
        }
    };
    let has = |f: &Finding| findings.contains(f);
    if has(&Finding::NotAPair) {
        p.uncorrectable.push(
            "the devices are not the two halves of one file system: nothing is repaired (give \
             the right pair)"
                .into(),
        );
        return p;
    }
    if has(&Finding::DeviceTooSmall) {
        p.uncorrectable.push(
            "a device is smaller than its file system: nothing is repaired (was an image \
             truncated, or a partition shrunk?)"
                .into(),
        );
        return p;
    }

    // ---- Superblocks: written directly, then everything is checked again.
    if has(&Finding::PrimarySuperblock) {
        add_raw(
            &mut p,
            FixClass::RestoreSuperblock,
            RawFix::RestorePrimary,
            "the metadata superblock is unusable or disagrees with its copies: replaced by a copy \
             from the log"
                .into(),
        );
    }
    let primary_suspect = has(&Finding::PrimarySuperblock);
    let mut copies: Vec<u64> = findings
        .iter()
        .filter_map(|f| match f {
            Finding::SuperblockCopy { segment } => Some(*segment),
            _ => None,
        })
        .collect();
    copies.sort_unstable();
    copies.dedup();
    if primary_suspect {
        copies.clear(); // the restored primary decides what the copies must be
    }
    for segment in copies {
        add_raw(
            &mut p,
            FixClass::SuperblockCopies,
            RawFix::RewriteCopy { segment },
            format!("superblock copy in segment {segment}: rewritten from the primary"),
        );
    }
    for unusable in [true, false] {
        if has(&Finding::DataSuperblock { unusable }) {
            // Writing over an unusable one claims a device nothing identifies as ours.
            add_raw(
                &mut p,
                if unusable {
                    FixClass::RestoreSuperblock
                } else {
                    FixClass::SuperblockCopies
                },
                RawFix::RewriteDataSuperblock,
                "the data device's superblock: rewritten from the metadata device's".into(),
            );
            break;
        }
    }
    if !p.raw.is_empty() {
        return p; // the rest waits for the next round, on sound superblocks
    }
    let Some(state) = state else {
        if p.declined.is_empty() {
            p.uncorrectable
                .push("no usable checkpoint or tables: nothing more can be repaired".into());
        }
        return p;
    };
    plan_tables_and_files(findings, state, policy, &mut p);
    p
}

/// Attributes to remove, and attribute flags to set from what stays.
fn plan_attributes(
    findings: &[Finding],
    ns: &crate::check::pass6_tree::Namespace,
    good: &crate::check::pass2_inodes::InodeTable,
    doomed: &BTreeSet<u64>,
    want: &mut impl FnMut(FixClass, String) -> bool,
    session: &mut Vec<Planned<SessionFix>>,
) {
    let mut flags: BTreeSet<u64> = BTreeSet::new();
    for f in findings {
        match f {
            Finding::Attribute { ino, hash, name } => {
                let m = format!(
                    "inode {ino}: extended attribute '{}' removed",
                    name.escape_ascii()
                );
                if !want(FixClass::Attributes, m.clone()) {
                    continue;
                }
                let free = ns
                    .attrs
                    .iter()
                    .find(|a| a.ino == *ino && a.hash == *hash && a.name == *name)
                    .map(|a| a.ids.clone())
                    .unwrap_or_default();
                session.push(Planned {
                    class: FixClass::Attributes,
                    fix: SessionFix::RemoveAttribute {
                        ino: *ino,
                        hash: *hash,
                        name: name.clone(),
                        free,
                    },
                    message: m,
                });
                flags.insert(*ino);
            }
            Finding::AttrFlags { ino } => {
                flags.insert(*ino);
            }
            _ => {}
        }
    }
    for ino in flags {
        // Inodes freed by this repair lose their attributes with them.
        if doomed.contains(&ino) || !good.contains_key(&ino) {
            continue;
        }
        let m = format!("inode {ino}: attribute flags set from its attributes");
        if want(FixClass::Inodes, m.clone()) {
            session.push(Planned {
                class: FixClass::Inodes,
                fix: SessionFix::AttrFlags { ino },
                message: m,
            });
        }
    }
}

fn plan_tables_and_files(findings: &[Finding], state: &State, policy: &Policy, p: &mut Plan) {
    let good = &state.inodes.good;
    let mut tables: Vec<Planned<TableFix>> = Vec::new();
    let mut session: Vec<Planned<SessionFix>> = Vec::new();
    let mut declined: Vec<(FixClass, String)> = Vec::new();
    let mut want = |class: FixClass, message: String| -> bool {
        if policy.allows(class) {
            true
        } else {
            declined.push((class, message));
            false
        }
    };

    // ---- Where the log continues. Without these nothing may be written at all.
    if let Some(newest) = findings.iter().find_map(|f| match f {
        Finding::OlderCheckpoint { newest } => Some(*newest),
        _ => None,
    }) {
        let m = format!(
            "the tables of checkpoint {newest} cannot be read: the file system goes back to \
             checkpoint {} (and the log after it)",
            state.loaded.cp.serial
        );
        if !want(FixClass::OlderCheckpoint, m.clone()) {
            p.declined.append(&mut declined);
            p.uncorrectable.push(
                "nothing can be written while the newest checkpoint's tables cannot be read".into(),
            );
            return;
        }
        tables.push(Planned {
            class: FixClass::OlderCheckpoint,
            fix: TableFix::OlderCheckpoint { newest },
            message: m,
        });
    }
    if let Some(applied) = findings.iter().find_map(|f| match f {
        Finding::RollForward { applied } => Some(*applied),
        _ => None,
    }) {
        let m = format!(
            "the log is cut after the first {applied} transactions following checkpoint {} \
             (the next one cannot be applied)",
            state.loaded.cp.serial
        );
        if !want(FixClass::CutLog, m.clone()) {
            p.declined.append(&mut declined);
            p.uncorrectable
                .push("nothing can be written while the log cannot be rolled forward".into());
            return;
        }
        tables.push(Planned {
            class: FixClass::CutLog,
            fix: TableFix::CutLog,
            message: m,
        });
    }
    if findings.contains(&Finding::LogHead) {
        let m = format!(
            "the log head of checkpoint {} is unusable: the log continues in segment {}",
            state.loaded.cp.serial,
            state.sb.segment_of(state.loaded.head.addr)
        );
        if !want(FixClass::NewLogHead, m.clone()) {
            p.declined.append(&mut declined);
            p.uncorrectable
                .push("nothing can be written while the log head is unusable".into());
            return;
        }
        tables.push(Planned {
            class: FixClass::NewLogHead,
            fix: TableFix::NewHead,
            message: m,
        });
    }

    // ---- Inodes.
    let mut doomed: BTreeSet<u64> = BTreeSet::new();
    let mut unflagged: BTreeSet<u64> = BTreeSet::new();
    let mut rewrite_ifile = false;
    let mut recount: BTreeSet<u64> = BTreeSet::new();
    let mut cleared: BTreeSet<u64> = BTreeSet::new();
    let mut bad_pointers: BTreeSet<u64> = BTreeSet::new();
    for f in findings {
        match *f {
            Finding::InodeLost {
                ino,
                how: Lost::Gone,
            } => {
                let m = format!("inode {ino} cannot be read: its number is freed");
                if want(FixClass::FreeLostInodes, m.clone()) {
                    doomed.insert(ino);
                    rewrite_ifile = true;
                    tables.push(Planned {
                        class: FixClass::FreeLostInodes,
                        fix: TableFix::FreeLostInode { ino },
                        message: m,
                    });
                }
            }
            Finding::InodeLost {
                ino,
                how: Lost::Misplaced { slot, generation },
            } => {
                let m = format!(
                    "inode {ino}: the inode map entry is corrected to slot {slot}, generation \
                     {generation} (where the inode is)"
                );
                if want(FixClass::Inodes, m.clone()) {
                    rewrite_ifile = true;
                    tables.push(Planned {
                        class: FixClass::Inodes,
                        fix: TableFix::FixImapEntry {
                            ino,
                            slot,
                            generation,
                        },
                        message: m,
                    });
                }
            }
            Finding::OrphanFlag { ino } => {
                let m = format!("inode {ino} has links: its ORPHAN flag is cleared");
                if want(FixClass::Inodes, m.clone()) {
                    unflagged.insert(ino);
                    rewrite_ifile = true;
                    tables.push(Planned {
                        class: FixClass::Inodes,
                        fix: TableFix::ClearOrphanFlag { ino },
                        message: m,
                    });
                }
            }
            Finding::ImapFlags { ino } => {
                let m = format!("inode {ino}: unknown inode map flags cleared");
                if want(FixClass::Inodes, m.clone()) {
                    rewrite_ifile = true;
                    tables.push(Planned {
                        class: FixClass::Inodes,
                        fix: TableFix::ClearImapFlags { ino },
                        message: m,
                    });
                }
            }
            Finding::ImapEntryZero => {
                let m = "inode map entry 0 cleared".to_string();
                if want(FixClass::Inodes, m.clone()) {
                    rewrite_ifile = true;
                    tables.push(Planned {
                        class: FixClass::Inodes,
                        fix: TableFix::ClearImapZero,
                        message: m,
                    });
                }
            }
            Finding::FreeList
                if want(
                    FixClass::Inodes,
                    "the free-inode list and IFile header are rewritten".into(),
                ) =>
            {
                rewrite_ifile = true;
            }
            Finding::BadSymlink { ino } if good.contains_key(&ino) => {
                let m = format!("symbolic link {ino}: its target cannot be read: freed");
                if want(FixClass::FreeBadSymlinks, m.clone()) && doomed.insert(ino) {
                    session.push(Planned {
                        class: FixClass::FreeBadSymlinks,
                        fix: SessionFix::ClearAllPointers { ino },
                        message: m,
                    });
                    session.push(Planned {
                        class: FixClass::FreeBadSymlinks,
                        fix: SessionFix::FreeInode { ino },
                        message: format!("symbolic link {ino} freed"),
                    });
                }
            }
            _ => {}
        }
    }
    if let Some(root) = good.get(&crate::format::ROOT_INO) {
        if !root.is_dir() && !doomed.contains(&crate::format::ROOT_INO) {
            let m = "inode 1 (the root) is not a directory: its number is freed (the root is \
                     made anew)"
                .to_string();
            if want(FixClass::FreeLostInodes, m.clone()) {
                doomed.insert(crate::format::ROOT_INO);
                rewrite_ifile = true;
                tables.push(Planned {
                    class: FixClass::FreeLostInodes,
                    fix: TableFix::FreeLostInode {
                        ino: crate::format::ROOT_INO,
                    },
                    message: m,
                });
            }
        }
    }
    if rewrite_ifile {
        tables.push(Planned {
            class: FixClass::Inodes,
            fix: TableFix::RewriteIfile,
            message: "the inode map, free-inode list and IFile header are rewritten".into(),
        });
    }

    // ---- Block maps (only of inodes that stay).
    let mut seen_ptr: BTreeSet<(u64, PtrAt)> = BTreeSet::new();
    for f in findings {
        match *f {
            Finding::ClearPointer { ino, at } => {
                if doomed.contains(&ino) || !good.contains_key(&ino) {
                    continue;
                }
                bad_pointers.insert(ino);
                if !seen_ptr.insert((ino, at)) {
                    continue;
                }
                let m = format!("inode {ino}: {} cleared", describe_ptr(at));
                if want(FixClass::ClearPointers, m.clone()) {
                    cleared.insert(ino);
                    session.push(Planned {
                        class: FixClass::ClearPointers,
                        fix: SessionFix::ClearPointer { ino, at },
                        message: m,
                    });
                }
            }
            Finding::OwnsBlocks { ino } if !doomed.contains(&ino) && good.contains_key(&ino) => {
                let m = format!(
                    "inode {ino}: a directory or special file owns no blocks: its pointers and \
                     block counts are cleared"
                );
                if want(FixClass::Inodes, m.clone()) {
                    session.push(Planned {
                        class: FixClass::Inodes,
                        fix: SessionFix::ClearAllPointers { ino },
                        message: m,
                    });
                }
            }
            Finding::SizeTooSmall { ino, size } | Finding::SizeTooLarge { ino, size }
                if !doomed.contains(&ino) && good.contains_key(&ino) =>
            {
                let old = good[&ino].disk.size;
                let m = format!("inode {ino}: size {old} -> {size} (to cover its mapped blocks)");
                if want(FixClass::Inodes, m.clone()) {
                    session.push(Planned {
                        class: FixClass::Inodes,
                        fix: SessionFix::SetSize { ino, size },
                        message: m,
                    });
                }
            }
            Finding::InodeFields { ino } if !doomed.contains(&ino) && good.contains_key(&ino) => {
                let m = format!(
                    "inode {ino}: unknown i_flags bits cleared, home group or '..' field corrected"
                );
                if want(FixClass::Inodes, m.clone()) {
                    session.push(Planned {
                        class: FixClass::Inodes,
                        fix: SessionFix::InodeFields { ino },
                        message: m,
                    });
                }
            }
            Finding::BlockCounts { ino } if !doomed.contains(&ino) && good.contains_key(&ino) => {
                recount.insert(ino);
            }
            _ => {}
        }
    }
    // Counts are redone where pointers went, unless a pointer that stays cannot be followed.
    for ino in recount.union(&cleared).copied().collect::<Vec<u64>>() {
        if bad_pointers.contains(&ino) && !policy.allows(FixClass::ClearPointers) {
            continue;
        }
        let m = format!("inode {ino}: i_blocks and i_meta_blocks recounted");
        if want(FixClass::Inodes, m.clone()) {
            session.push(Planned {
                class: FixClass::Inodes,
                fix: SessionFix::Recount { ino },
                message: m,
            });
        }
    }

    // ---- The namespace.
    let tree_damaged = findings.contains(&Finding::TreeDamaged);
    match (&state.salvaged, tree_damaged) {
        (Some(s), true) => {
            let m = format!(
                "the directory tree is rebuilt from the {} entries that can be read ({} of its \
                 nodes cannot be; names in them are lost, their files go to /lost+found)",
                s.entries.len(),
                s.nodes_lost
            );
            if want(FixClass::RebuildTree, m.clone()) {
                session.push(Planned {
                    class: FixClass::RebuildTree,
                    fix: SessionFix::RebuildTree {
                        entries: s.entries.clone(),
                        attrs: s.attrs.clone(),
                    },
                    message: m,
                });
            }
        }
        (None, true) => p.uncorrectable.push(
            "the directory tree is damaged: names, link counts and reachability are not \
             repaired (the rest is)"
                .into(),
        ),
        _ => {}
    }
    if let (Some(ns), false) = (&state.namespace, tree_damaged) {
        if ns.tree_ok {
            let stuck_pointers: BTreeSet<u64> = if policy.allows(FixClass::ClearPointers) {
                BTreeSet::new()
            } else {
                bad_pointers.clone()
            };
            let new_root =
                namespace::root_lost(&state.inodes, &doomed) && policy.allows(FixClass::Reconnect);
            let cx = Context {
                inodes: &state.inodes,
                ns,
                doomed: &doomed,
                unflagged: &unflagged,
                bad_pointers: &stuck_pointers,
                new_root,
            };
            let allowed = Allowed {
                entries: policy.allows(FixClass::Entries),
                remove_names: policy.allows(FixClass::RemoveNames),
                reconnect: policy.allows(FixClass::Reconnect),
                free_empty: policy.allows(FixClass::FreeEmpty),
                free_orphans: policy.allows(FixClass::FreeOrphans),
                counts: policy.allows(FixClass::LinkCounts),
            };
            let mut ns_fixes = Vec::new();
            namespace::plan(&cx, allowed, &mut ns_fixes, &mut p.uncorrectable);
            session.extend(ns_fixes);
            // What a repair with every namespace class allowed would do that this one may not.
            let everything = Allowed {
                entries: true,
                remove_names: true,
                reconnect: true,
                free_empty: true,
                free_orphans: true,
                counts: true,
            };
            let mut full = Vec::new();
            namespace::plan(&cx, everything, &mut full, &mut Vec::new());
            for f in full {
                if !policy.allows(f.class) {
                    want(f.class, f.message);
                }
            }
        }
    }

    // ---- Attributes (with a sound tree: a rebuilt one is checked again first).
    if let (Some(ns), false) = (&state.namespace, tree_damaged) {
        plan_attributes(findings, ns, good, &doomed, &mut want, &mut session);
    }

    // ---- Tables.
    let mut node_entries: Vec<u64> = findings
        .iter()
        .filter_map(|f| match f {
            Finding::NodeMapEntry { id } => Some(*id),
            _ => None,
        })
        .collect();
    node_entries.sort_unstable();
    node_entries.dedup();
    let reached_nodes = state.namespace.as_ref().map(|n| &n.nodes);
    for id in node_entries {
        if reached_nodes.is_some_and(|r| r.contains(&id)) {
            continue;
        }
        let m = format!("node map entry {id}: names a block the tree does not use: cleared");
        if want(FixClass::Tables, m.clone()) {
            tables.push(Planned {
                class: FixClass::Tables,
                fix: TableFix::ClearNodeMapEntry { id },
                message: m,
            });
        }
    }
    if findings.contains(&Finding::NextNodeId)
        && want(FixClass::Tables, "the next node id is raised".into())
    {
        tables.push(Planned {
            class: FixClass::Tables,
            fix: TableFix::NextNodeId,
            message: "the checkpoint's next node id is raised above every id in use".into(),
        });
    }
    let any = |f: &Finding| findings.contains(f);
    if (any(&Finding::DataBitmaps) || any(&Finding::BitmapFile))
        && want(FixClass::Tables, "data bitmaps rebuilt".into())
    {
        tables.push(Planned {
            class: FixClass::Tables,
            fix: TableFix::RebuildBitmaps,
            message: "data bitmaps and group descriptors rebuilt from the blocks files use".into(),
        });
    }
    let files_change = !session.is_empty() || !doomed.is_empty();
    if (any(&Finding::SegmentUsage)
        || files_change
        || tables.iter().any(|t| {
            matches!(
                t.fix,
                TableFix::NewHead | TableFix::ClearNodeMapEntry { .. }
            )
        }))
        && want(FixClass::Tables, "segment usage recomputed".into())
    {
        tables.push(Planned {
            class: FixClass::Tables,
            fix: TableFix::SegmentUsage,
            message: "segment usage recomputed from what is reachable".into(),
        });
    }
    if any(&Finding::LogInTheWay)
        && !tables.iter().any(|t| t.fix == TableFix::NewHead)
        && want(FixClass::Tables, "the log moves to a fresh segment".into())
    {
        tables.push(Planned {
            class: FixClass::Tables,
            fix: TableFix::NewHead,
            message: "live blocks lie where the log writes next: the log continues in a fresh \
                      segment"
                .into(),
        });
    }
    let something = !tables.is_empty() || !session.is_empty();
    if (any(&Finding::FallbackCheckpoint) || any(&Finding::CheckpointFigures))
        && (something || policy.allows(FixClass::Tables))
    {
        tables.push(Planned {
            class: FixClass::Tables,
            fix: TableFix::Checkpoint,
            message: "a new checkpoint is written (the fallback region and the figures it \
                      repeats are renewed)"
                .into(),
        });
    }
    session.sort_by_key(|s| s.fix.stage());
    p.tables = tables;
    p.session = session;
    p.declined.append(&mut declined);
}

fn describe_ptr(at: PtrAt) -> String {
    match at {
        PtrAt::Direct(k) => format!("direct pointer {k}"),
        PtrAt::Top(t) => format!(
            "{} indirect pointer",
            ["single", "double", "triple"]
                .get(t)
                .copied()
                .unwrap_or("?")
        ),
        PtrAt::Slot { level, index, slot } => {
            format!("pointer {slot} of its level-{level} indirect block for file block {index}")
        }
    }
}
