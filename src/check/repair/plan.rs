//! From what the check found to what the repair does: every finding becomes a fix of some
//! class (or is named uncorrectable), and a policy says which classes may be applied.

use super::fixes::{FixClass, Plan, Planned, Policy, RawFix, SessionFix, TableFix};
use super::namespace::{self, Allowed, Context};
use crate::check::findings::{Finding, Lost, PtrAt};
use crate::check::State;
use crate::format::ROOT_INO;
use std::collections::BTreeSet;

/// Plan a round from the findings (and the state, when the check got that far).
pub fn plan(findings: &[Finding], state: Option<&State>, policy: &Policy) -> Plan {
    let mut p = Plan::default();
    if findings.contains(&Finding::NotAPair) {
        p.uncorrectable.push(
            "the devices are not the two halves of one file system: nothing is repaired (give \
             the right pair)"
                .into(),
        );
        return p;
    }
    if findings.contains(&Finding::DeviceTooSmall) {
        p.uncorrectable.push(
            "a device is smaller than its file system: nothing is repaired (was an image \
             truncated, or a partition shrunk?)"
                .into(),
        );
        return p;
    }
    superblock_fixes(findings, policy, &mut p);
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

/// Superblocks: written directly, then everything is checked again.
fn superblock_fixes(findings: &[Finding], policy: &Policy, p: &mut Plan) {
    let mut add_raw = |class: FixClass, fix: RawFix, message: String| {
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
    let primary_suspect = has(&Finding::PrimarySuperblock);
    if primary_suspect {
        add_raw(
            FixClass::RestoreSuperblock,
            RawFix::RestorePrimary,
            "the metadata superblock is unusable or disagrees with its copies: replaced by a copy \
             from the log"
                .into(),
        );
    }
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
            FixClass::SuperblockCopies,
            RawFix::RewriteCopy { segment },
            format!("superblock copy in segment {segment}: rewritten from the primary"),
        );
    }
    for unusable in [true, false] {
        if has(&Finding::DataSuperblock { unusable }) {
            // Writing over an unusable one claims a device nothing identifies as ours.
            let class = if unusable {
                FixClass::RestoreSuperblock
            } else {
                FixClass::SuperblockCopies
            };
            add_raw(
                class,
                RawFix::RewriteDataSuperblock,
                "the data device's superblock: rewritten from the metadata device's".into(),
            );
            break;
        }
    }
}

/// Plan the repairs made through the tables and the opened file system, phase by phase.
fn plan_tables_and_files(findings: &[Finding], state: &State, policy: &Policy, p: &mut Plan) {
    let mut planner = Planner {
        findings,
        state,
        policy,
        tree_damaged: findings.contains(&Finding::TreeDamaged),
        plan: p,
        tables: Vec::new(),
        session: Vec::new(),
        doomed: BTreeSet::new(),
        unflagged: BTreeSet::new(),
        rewrite_ifile: false,
        recount: BTreeSet::new(),
        cleared: BTreeSet::new(),
        bad_pointers: BTreeSet::new(),
    };
    if !planner.log_continuation() {
        return;
    }
    planner.inode_fixes();
    planner.block_map_fixes();
    planner.tree_rebuild();
    planner.namespace_fixes();
    planner.attribute_fixes();
    planner.table_fixes();
    planner.finish();
}

/// What the phases of `plan_tables_and_files` share: the fixes planned so far and what they
/// do to inodes, which later phases must follow.
struct Planner<'a> {
    findings: &'a [Finding],
    state: &'a State,
    policy: &'a Policy,
    /// The tree is to be rebuilt (or cannot be): names are not judged this round.
    tree_damaged: bool,
    /// Takes the declined and uncorrectable messages as they come, the fixes at the end.
    plan: &'a mut Plan,
    tables: Vec<Planned<TableFix>>,
    session: Vec<Planned<SessionFix>>,
    /// Inodes this repair frees.
    doomed: BTreeSet<u64>,
    /// Inodes whose ORPHAN flag is cleared.
    unflagged: BTreeSet<u64>,
    /// The inode map, free-inode list and IFile header are written again.
    rewrite_ifile: bool,
    /// Inodes whose block counts are wrong.
    recount: BTreeSet<u64>,
    /// Inodes losing a pointer.
    cleared: BTreeSet<u64>,
    /// Inodes with a pointer that cannot be followed.
    bad_pointers: BTreeSet<u64>,
}

impl Planner<'_> {
    /// May `class` be done? If not, `message` is declined.
    fn want(&mut self, class: FixClass, message: String) -> bool {
        if self.policy.allows(class) {
            true
        } else {
            self.plan.declined.push((class, message));
            false
        }
    }

    /// A table fix without which nothing may be written: planned, or false and `refusal`
    /// named uncorrectable.
    fn required(&mut self, class: FixClass, fix: TableFix, message: String, refusal: &str) -> bool {
        if !self.want(class, message.clone()) {
            self.plan.uncorrectable.push(refusal.into());
            return false;
        }
        self.tables.push(Planned {
            class,
            fix,
            message,
        });
        true
    }

    fn table(&mut self, class: FixClass, fix: TableFix, message: String) {
        self.tables.push(Planned {
            class,
            fix,
            message,
        });
    }

    fn session(&mut self, class: FixClass, fix: SessionFix, message: String) {
        self.session.push(Planned {
            class,
            fix,
            message,
        });
    }

    /// Whether `ino` is read fine and stays.
    fn stays(&self, ino: u64) -> bool {
        !self.doomed.contains(&ino) && self.state.inodes.good.contains_key(&ino)
    }

    /// Where the log continues (the previous checkpoint, a cut log, a fresh head). False when
    /// one of these is declined: nothing may be written then.
    fn log_continuation(&mut self) -> bool {
        let findings = self.findings;
        let serial = self.state.loaded.cp.serial;
        if let Some(newest) = findings.iter().find_map(|f| match f {
            Finding::OlderCheckpoint { newest } => Some(*newest),
            _ => None,
        }) {
            let m = format!(
                "the tables of checkpoint {newest} cannot be read: the file system goes back to \
                 checkpoint {serial} (and the log after it)"
            );
            if !self.required(
                FixClass::OlderCheckpoint,
                TableFix::OlderCheckpoint { newest },
                m,
                "nothing can be written while the newest checkpoint's tables cannot be read",
            ) {
                return false;
            }
        }
        if let Some(applied) = findings.iter().find_map(|f| match f {
            Finding::RollForward { applied } => Some(*applied),
            _ => None,
        }) {
            let m = format!(
                "the log is cut after the first {applied} transactions following checkpoint \
                 {serial} (the next one cannot be applied)"
            );
            if !self.required(
                FixClass::CutLog,
                TableFix::CutLog,
                m,
                "nothing can be written while the log cannot be rolled forward",
            ) {
                return false;
            }
        }
        if findings.contains(&Finding::LogHead) {
            let m = format!(
                "the log head of checkpoint {serial} is unusable: the log continues in segment {}",
                self.state.sb.segment_of(self.state.loaded.head.addr)
            );
            if !self.required(
                FixClass::NewLogHead,
                TableFix::NewHead,
                m,
                "nothing can be written while the log head is unusable",
            ) {
                return false;
            }
        }
        true
    }

    /// Inodes that cannot be read are freed, inode map entries and flags corrected,
    /// symbolic links with unreadable targets freed, a root that is no directory let go.
    fn inode_fixes(&mut self) {
        let findings = self.findings;
        let state = self.state;
        let good = &state.inodes.good;
        for f in findings {
            match *f {
                Finding::InodeLost {
                    ino,
                    how: Lost::Gone,
                } => {
                    let m = format!("inode {ino} cannot be read: its number is freed");
                    if self.want(FixClass::FreeLostInodes, m.clone()) {
                        self.doomed.insert(ino);
                        self.rewrite_ifile = true;
                        self.table(FixClass::FreeLostInodes, TableFix::FreeLostInode { ino }, m);
                    }
                }
                Finding::InodeLost {
                    ino,
                    how: Lost::Misplaced { slot, generation },
                } => {
                    let m = format!(
                        "inode {ino}: the inode map entry is corrected to slot {slot}, \
                         generation {generation} (where the inode is)"
                    );
                    if self.want(FixClass::Inodes, m.clone()) {
                        self.rewrite_ifile = true;
                        let fix = TableFix::FixImapEntry {
                            ino,
                            slot,
                            generation,
                        };
                        self.table(FixClass::Inodes, fix, m);
                    }
                }
                Finding::OrphanFlag { ino } => {
                    let m = format!("inode {ino} has links: its ORPHAN flag is cleared");
                    if self.want(FixClass::Inodes, m.clone()) {
                        self.unflagged.insert(ino);
                        self.rewrite_ifile = true;
                        self.table(FixClass::Inodes, TableFix::ClearOrphanFlag { ino }, m);
                    }
                }
                Finding::ImapFlags { ino } => {
                    let m = format!("inode {ino}: unknown inode map flags cleared");
                    if self.want(FixClass::Inodes, m.clone()) {
                        self.rewrite_ifile = true;
                        self.table(FixClass::Inodes, TableFix::ClearImapFlags { ino }, m);
                    }
                }
                Finding::ImapEntryZero => {
                    let m = "inode map entry 0 cleared".to_string();
                    if self.want(FixClass::Inodes, m.clone()) {
                        self.rewrite_ifile = true;
                        self.table(FixClass::Inodes, TableFix::ClearImapZero, m);
                    }
                }
                Finding::FreeList
                    if self.want(
                        FixClass::Inodes,
                        "the free-inode list and IFile header are rewritten".into(),
                    ) =>
                {
                    self.rewrite_ifile = true;
                }
                Finding::BadSymlink { ino } if good.contains_key(&ino) => {
                    let m = format!("symbolic link {ino}: its target cannot be read: freed");
                    if self.want(FixClass::FreeBadSymlinks, m.clone()) && self.doomed.insert(ino) {
                        self.session(
                            FixClass::FreeBadSymlinks,
                            SessionFix::ClearAllPointers { ino },
                            m,
                        );
                        self.session(
                            FixClass::FreeBadSymlinks,
                            SessionFix::FreeInode { ino },
                            format!("symbolic link {ino} freed"),
                        );
                    }
                }
                _ => {}
            }
        }
        self.free_root_if_not_a_directory();
        if self.rewrite_ifile {
            self.table(
                FixClass::Inodes,
                TableFix::RewriteIfile,
                "the inode map, free-inode list and IFile header are rewritten".into(),
            );
        }
    }

    /// A root that is not a directory gives up its number (the namespace makes it anew).
    fn free_root_if_not_a_directory(&mut self) {
        if let Some(root) = self.state.inodes.good.get(&ROOT_INO) {
            if !root.is_dir() && !self.doomed.contains(&ROOT_INO) {
                let m = "inode 1 (the root) is not a directory: its number is freed (the root \
                         is made anew)"
                    .to_string();
                if self.want(FixClass::FreeLostInodes, m.clone()) {
                    self.doomed.insert(ROOT_INO);
                    self.rewrite_ifile = true;
                    self.table(
                        FixClass::FreeLostInodes,
                        TableFix::FreeLostInode { ino: ROOT_INO },
                        m,
                    );
                }
            }
        }
    }

    /// Pointers cleared, sizes, fields and block counts corrected (only of inodes that stay).
    fn block_map_fixes(&mut self) {
        let findings = self.findings;
        let state = self.state;
        let good = &state.inodes.good;
        let mut seen_ptr: BTreeSet<(u64, PtrAt)> = BTreeSet::new();
        for f in findings {
            match *f {
                Finding::ClearPointer { ino, at } => {
                    if !self.stays(ino) {
                        continue;
                    }
                    self.bad_pointers.insert(ino);
                    if !seen_ptr.insert((ino, at)) {
                        continue;
                    }
                    let m = format!("inode {ino}: {} cleared", describe_ptr(at));
                    if self.want(FixClass::ClearPointers, m.clone()) {
                        self.cleared.insert(ino);
                        self.session(
                            FixClass::ClearPointers,
                            SessionFix::ClearPointer { ino, at },
                            m,
                        );
                    }
                }
                Finding::OwnsBlocks { ino } if self.stays(ino) => {
                    let m = format!(
                        "inode {ino}: a directory or special file owns no blocks: its pointers \
                         and block counts are cleared"
                    );
                    if self.want(FixClass::Inodes, m.clone()) {
                        self.session(FixClass::Inodes, SessionFix::ClearAllPointers { ino }, m);
                    }
                }
                Finding::SizeTooSmall { ino, size } | Finding::SizeTooLarge { ino, size }
                    if self.stays(ino) =>
                {
                    let old = good[&ino].disk.size;
                    let m =
                        format!("inode {ino}: size {old} -> {size} (to cover its mapped blocks)");
                    if self.want(FixClass::Inodes, m.clone()) {
                        self.session(FixClass::Inodes, SessionFix::SetSize { ino, size }, m);
                    }
                }
                Finding::InodeFields { ino } if self.stays(ino) => {
                    let m = format!(
                        "inode {ino}: unknown i_flags bits cleared, home group or '..' field \
                         corrected"
                    );
                    if self.want(FixClass::Inodes, m.clone()) {
                        self.session(FixClass::Inodes, SessionFix::InodeFields { ino }, m);
                    }
                }
                Finding::BlockCounts { ino } if self.stays(ino) => {
                    self.recount.insert(ino);
                }
                _ => {}
            }
        }
        // Counts are redone where pointers went, unless a pointer that stays cannot be followed.
        let recount: Vec<u64> = self.recount.union(&self.cleared).copied().collect();
        for ino in recount {
            if self.bad_pointers.contains(&ino) && !self.policy.allows(FixClass::ClearPointers) {
                continue;
            }
            let m = format!("inode {ino}: i_blocks and i_meta_blocks recounted");
            if self.want(FixClass::Inodes, m.clone()) {
                self.session(FixClass::Inodes, SessionFix::Recount { ino }, m);
            }
        }
    }

    /// A damaged tree is rebuilt from the entries salvaged from it, or named uncorrectable.
    fn tree_rebuild(&mut self) {
        if !self.tree_damaged {
            return;
        }
        let state = self.state;
        let Some(s) = &state.salvaged else {
            self.plan.uncorrectable.push(
                "the directory tree is damaged: names, link counts and reachability are not \
                 repaired (the rest is)"
                    .into(),
            );
            return;
        };
        let m = format!(
            "the directory tree is rebuilt from the {} entries that can be read ({} of its \
             nodes cannot be; names in them are lost, their files go to /lost+found)",
            s.entries.len(),
            s.nodes_lost
        );
        if self.want(FixClass::RebuildTree, m.clone()) {
            let fix = SessionFix::RebuildTree {
                entries: s.entries.clone(),
                attrs: s.attrs.clone(),
            };
            self.session(FixClass::RebuildTree, fix, m);
        }
    }

    /// With a sound tree: entries, names, reconnection and counts (`namespace::plan`), and
    /// what a repair allowed everything would do there, declined.
    fn namespace_fixes(&mut self) {
        let state = self.state;
        let Some(ns) = state.namespace.as_ref().filter(|ns| ns.tree_ok) else {
            return;
        };
        if self.tree_damaged {
            return;
        }
        let policy = self.policy;
        let stuck_pointers: BTreeSet<u64> = if policy.allows(FixClass::ClearPointers) {
            BTreeSet::new()
        } else {
            self.bad_pointers.clone()
        };
        let new_root =
            namespace::root_lost(&state.inodes, &self.doomed) && policy.allows(FixClass::Reconnect);
        let cx = Context {
            inodes: &state.inodes,
            ns,
            doomed: &self.doomed,
            unflagged: &self.unflagged,
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
        namespace::plan(&cx, allowed, &mut ns_fixes, &mut self.plan.uncorrectable);
        self.session.extend(ns_fixes);
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
                self.want(f.class, f.message);
            }
        }
    }

    /// Attributes to remove, and attribute flags to set from what stays (with a sound tree: a
    /// rebuilt one is checked again first).
    fn attribute_fixes(&mut self) {
        let (findings, state) = (self.findings, self.state);
        let (Some(ns), false) = (&state.namespace, self.tree_damaged) else {
            return;
        };
        let mut flags: BTreeSet<u64> = BTreeSet::new();
        for f in findings {
            match f {
                Finding::Attribute { ino, hash, name } => {
                    let m = format!(
                        "inode {ino}: extended attribute '{}' removed",
                        name.escape_ascii()
                    );
                    if !self.want(FixClass::Attributes, m.clone()) {
                        continue;
                    }
                    let free = ns
                        .attrs
                        .iter()
                        .find(|a| a.ino == *ino && a.hash == *hash && a.name == *name)
                        .map(|a| a.ids.clone())
                        .unwrap_or_default();
                    let fix = SessionFix::RemoveAttribute {
                        ino: *ino,
                        hash: *hash,
                        name: name.clone(),
                        free,
                    };
                    self.session(FixClass::Attributes, fix, m);
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
            if !self.stays(ino) {
                continue;
            }
            let m = format!("inode {ino}: attribute flags set from its attributes");
            if self.want(FixClass::Inodes, m.clone()) {
                self.session(FixClass::Inodes, SessionFix::AttrFlags { ino }, m);
            }
        }
    }

    /// The node map, the next node id, the data bitmaps, segment usage, a fresh log head and
    /// a new checkpoint, as what the other phases planned requires.
    fn table_fixes(&mut self) {
        let (findings, state) = (self.findings, self.state);
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
            if self.want(FixClass::Tables, m.clone()) {
                self.table(FixClass::Tables, TableFix::ClearNodeMapEntry { id }, m);
            }
        }
        if findings.contains(&Finding::NextNodeId)
            && self.want(FixClass::Tables, "the next node id is raised".into())
        {
            self.table(
                FixClass::Tables,
                TableFix::NextNodeId,
                "the checkpoint's next node id is raised above every id in use".into(),
            );
        }
        let any = |f: &Finding| findings.contains(f);
        if (any(&Finding::DataBitmaps) || any(&Finding::BitmapFile))
            && self.want(FixClass::Tables, "data bitmaps rebuilt".into())
        {
            self.table(
                FixClass::Tables,
                TableFix::RebuildBitmaps,
                "data bitmaps and group descriptors rebuilt from the blocks files use".into(),
            );
        }
        let files_change = !self.session.is_empty() || !self.doomed.is_empty();
        let moves_blocks = self.tables.iter().any(|t| {
            matches!(
                t.fix,
                TableFix::NewHead | TableFix::ClearNodeMapEntry { .. }
            )
        });
        if (any(&Finding::SegmentUsage) || files_change || moves_blocks)
            && self.want(FixClass::Tables, "segment usage recomputed".into())
        {
            self.table(
                FixClass::Tables,
                TableFix::SegmentUsage,
                "segment usage recomputed from what is reachable".into(),
            );
        }
        if any(&Finding::LogInTheWay)
            && !self.tables.iter().any(|t| t.fix == TableFix::NewHead)
            && self.want(FixClass::Tables, "the log moves to a fresh segment".into())
        {
            self.table(
                FixClass::Tables,
                TableFix::NewHead,
                "live blocks lie where the log writes next: the log continues in a fresh \
                 segment"
                    .into(),
            );
        }
        let something = !self.tables.is_empty() || !self.session.is_empty();
        if (any(&Finding::FallbackCheckpoint) || any(&Finding::CheckpointFigures))
            && (something || self.policy.allows(FixClass::Tables))
        {
            self.table(
                FixClass::Tables,
                TableFix::Checkpoint,
                "a new checkpoint is written (the fallback region and the figures it repeats \
                 are renewed)"
                    .into(),
            );
        }
    }

    /// Hand the fixes to the plan, the session's in the order they must run.
    fn finish(self) {
        let mut session = self.session;
        session.sort_by_key(|s| s.fix.stage());
        self.plan.tables = self.tables;
        self.plan.session = session;
    }
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
