//! From what the check found to what the repair does: every finding becomes a fix of some
//! class (or is named uncorrectable), and a policy says which classes may be applied.

use super::fixes::{FixClass, Plan, Planned, Policy, RawFix, SessionFix, TableFix};
use super::namespace::{self, Allowed, Context};
use crate::check::findings::{Finding, Lost, PtrAt};
use crate::check::State;
use std::collections::BTreeSet;

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
