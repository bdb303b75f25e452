//! Pass 7: the namespace, entries against inodes. Each entry lives in an allocated directory,
//! names an allocated inode of the type it says, has a legal name and the hash the tree would
//! compute. Each directory's entry count is its `i_size` and its link count 2 plus its
//! subdirectories; every directory but the root has exactly one name, and its '..' is the
//! directory holding that name; other inodes have as many links as names (none at all is fine
//! for an orphan: open and unlinked). Everything allocated is reachable from the root, and the
//! '..' chains lead to the root without loops.

use super::context::{list, Sink};
use super::findings::Finding;
use super::pass2_inodes::{InodeInfo, Inodes};
use super::pass6_tree::Namespace;
use crate::format::{NAME_MAX, ROOT_INO};
use crate::fs::FileKind;
use std::collections::{BTreeMap, HashMap, HashSet};

pub const NAME: &str = "namespace";

fn is_dir(info: &InodeInfo) -> bool {
    info.kind() == Some(FileKind::Directory)
}

/// Open and unlinked: no links, no names, flagged for mount to free.
fn unlinked(info: &InodeInfo, names: usize) -> bool {
    info.orphan && info.disk.nlink == 0 && names == 0
}

fn kind_name(code: u8) -> String {
    match FileKind::from_code(code) {
        Some(k) => format!("{k:?}").to_lowercase(),
        None => format!("unknown type {code}"),
    }
}

pub fn run(sink: &mut Sink, ns: &Namespace, inodes: &Inodes) {
    let before = sink.problems_count();
    check(sink, ns, inodes);
    if sink.problems_count() > before {
        sink.found(Finding::Namespace);
    }
}

fn check(sink: &mut Sink, ns: &Namespace, inodes: &Inodes) {
    let mut entries_in: HashMap<u64, u64> = HashMap::new();
    let mut subdirs_in: HashMap<u64, u64> = HashMap::new();
    // Who names each inode (the directories holding its entries), and what each names.
    let mut names_of: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
    let total = ns.entries.len() as u64;
    for (done, e) in ns.entries.iter().enumerate() {
        if done % 65536 == 0 {
            sink.progress(7, NAME, done as u64, total);
        }
        let at = || format!("entry '{}' in directory {}", e.name.escape_ascii(), e.dir);
        if e.name.is_empty()
            || e.name.len() > NAME_MAX
            || e.name.contains(&b'/')
            || e.name.contains(&0)
            || e.name == b"."
            || e.name == b".."
        {
            sink.error(
                NAME,
                format!("{}: illegal name ({} bytes)", at(), e.name.len()),
            );
        }
        let hash = ns.tree.hash(&e.name);
        if e.hash != hash {
            sink.error(
                NAME,
                format!(
                    "{}: stored hash {:#x}, the name hashes to {hash:#x}",
                    at(),
                    e.hash
                ),
            );
        }
        match inodes.good.get(&e.dir) {
            Some(d) if is_dir(d) => {}
            Some(_) => sink.error(
                NAME,
                format!("{}: inode {} is not a directory", at(), e.dir),
            ),
            None if inodes.unreadable.contains(&e.dir) => {}
            None => sink.error(
                NAME,
                format!("{}: directory {} is not an allocated inode", at(), e.dir),
            ),
        }
        *entries_in.entry(e.dir).or_default() += 1;
        let names_dir = match inodes.good.get(&e.ino) {
            Some(target) => {
                let code = target.kind().map(|k| k.code());
                if code != Some(e.kind) {
                    sink.error(
                        NAME,
                        format!(
                            "{} says inode {} is a {}, but it is a {}",
                            at(),
                            e.ino,
                            kind_name(e.kind),
                            kind_name(code.unwrap_or(0))
                        ),
                    );
                }
                is_dir(target)
            }
            None if inodes.unreadable.contains(&e.ino) => e.kind == FileKind::Directory.code(),
            None => {
                sink.error(
                    NAME,
                    format!("{} names inode {}, which is not allocated", at(), e.ino),
                );
                false
            }
        };
        if names_dir {
            *subdirs_in.entry(e.dir).or_default() += 1;
        }
        names_of.entry(e.ino).or_default().push(e.dir);
        children.entry(e.dir).or_default().push(e.ino);
    }

    let no_names: Vec<u64> = Vec::new();
    for (&ino, info) in &inodes.good {
        let names = names_of.get(&ino).unwrap_or(&no_names);
        if unlinked(info, names.len()) {
            continue;
        }
        let d = &info.disk;
        if !is_dir(info) {
            if d.nlink as usize != names.len() {
                sink.error(
                    NAME,
                    format!(
                        "inode {ino} has {} links but {} entries name it",
                        d.nlink,
                        names.len()
                    ),
                );
            }
            continue;
        }
        let count = entries_in.get(&ino).copied().unwrap_or(0);
        if d.size != count {
            sink.error(
                NAME,
                format!(
                    "directory {ino} holds {count} entries but its size says {}",
                    d.size
                ),
            );
        }
        let subdirs = subdirs_in.get(&ino).copied().unwrap_or(0);
        if d.nlink as u64 != 2 + subdirs {
            sink.error(
                NAME,
                format!(
                    "directory {ino} has {} links; 2 plus {subdirs} subdirectories make {}",
                    d.nlink,
                    2 + subdirs
                ),
            );
        }
        if ino == ROOT_INO {
            if d.parent != ROOT_INO {
                sink.error(
                    NAME,
                    format!("the root directory's '..' is {}, not itself", d.parent),
                );
            }
            if !names.is_empty() {
                sink.error(
                    NAME,
                    format!(
                        "the root directory is named by entries in directories {}",
                        list(names, 8)
                    ),
                );
            }
        } else if names.len() > 1 {
            sink.error(
                NAME,
                format!(
                    "directory {ino} has {} names (in directories {}); directories have one",
                    names.len(),
                    list(names, 8)
                ),
            );
        } else if let Some(&holder) = names.first() {
            if d.parent != holder {
                sink.error(
                    NAME,
                    format!(
                        "directory {ino}: '..' is {} but its name is in directory {holder}",
                        d.parent
                    ),
                );
            }
        }
    }

    match inodes.good.get(&ROOT_INO) {
        Some(root) if is_dir(root) => {}
        Some(_) => sink.error(NAME, "the root (inode 1) is not a directory"),
        None if inodes.unreadable.contains(&ROOT_INO) => {}
        None => sink.error(NAME, "the root directory (inode 1) is not allocated"),
    }

    reachability(sink, inodes, &names_of, &children);
    dotdot_chains(sink, inodes, &names_of);
    sink.progress(7, NAME, total, total);
}

/// Everything allocated can be found from the root through directories.
fn reachability(
    sink: &mut Sink,
    inodes: &Inodes,
    names_of: &BTreeMap<u64, Vec<u64>>,
    children: &HashMap<u64, Vec<u64>>,
) {
    let mut reached: HashSet<u64> = HashSet::new();
    let mut queue = Vec::new();
    if inodes.good.get(&ROOT_INO).is_some_and(is_dir) {
        reached.insert(ROOT_INO);
        queue.push(ROOT_INO);
    }
    // Each directory is queued once (when first reached), so this ends.
    while let Some(dir) = queue.pop() {
        for &child in children.get(&dir).map(|v| v.as_slice()).unwrap_or(&[]) {
            if reached.insert(child) && inodes.good.get(&child).is_some_and(is_dir) {
                queue.push(child);
            }
        }
    }
    for (&ino, info) in &inodes.good {
        let names = names_of.get(&ino).map(|v| v.as_slice()).unwrap_or(&[]);
        if reached.contains(&ino) || unlinked(info, names.len()) {
            continue;
        }
        let kind = info.kind().map(|k| k.code()).unwrap_or(0);
        let why = if names.is_empty() {
            "no entry names it".to_string()
        } else {
            format!(
                "it is named only in unreachable directories {}",
                list(names, 8)
            )
        };
        sink.error(
            NAME,
            format!(
                "inode {ino} ({}, {} links{}) is not reachable from the root: {why}",
                kind_name(kind),
                info.disk.nlink,
                if info.orphan { ", flagged orphan" } else { "" }
            ),
        );
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Chain {
    /// On the walk in progress.
    OnPath,
    ReachesRoot,
    Broken,
}

/// Following '..' from any directory reaches the root. Each directory's state is settled
/// once, so all walks together take one step per directory.
fn dotdot_chains(sink: &mut Sink, inodes: &Inodes, names_of: &BTreeMap<u64, Vec<u64>>) {
    let mut state: HashMap<u64, Chain> = HashMap::new();
    for (&start, info) in &inodes.good {
        let names = names_of.get(&start).map_or(0, |v| v.len());
        if !is_dir(info) || unlinked(info, names) || state.contains_key(&start) {
            continue;
        }
        let mut path: Vec<u64> = Vec::new();
        let mut cur = start;
        let outcome = loop {
            match state.get(&cur) {
                Some(Chain::ReachesRoot) => break Chain::ReachesRoot,
                Some(Chain::Broken) => break Chain::Broken,
                Some(Chain::OnPath) => {
                    let from = path.iter().position(|&d| d == cur).unwrap_or(0);
                    let cycle: Vec<String> = path[from..]
                        .iter()
                        .chain(std::iter::once(&cur))
                        .map(|d| d.to_string())
                        .collect();
                    sink.error(
                        NAME,
                        format!(
                            "the '..' links of directories {} form a loop that never reaches \
                             the root",
                            cycle.join(" -> ")
                        ),
                    );
                    break Chain::Broken;
                }
                None => {}
            }
            if cur == ROOT_INO {
                state.insert(cur, Chain::ReachesRoot);
                break Chain::ReachesRoot;
            }
            match inodes.good.get(&cur) {
                Some(d) if is_dir(d) => {
                    state.insert(cur, Chain::OnPath);
                    path.push(cur);
                    cur = d.disk.parent;
                }
                other => {
                    // `start` is a directory, so a previous step exists.
                    if let (Some(&child), false) = (path.last(), inodes.unreadable.contains(&cur)) {
                        let what = if other.is_some() {
                            "not a directory"
                        } else {
                            "not allocated"
                        };
                        sink.error(
                            NAME,
                            format!("directory {child}: '..' names inode {cur}, which is {what}"),
                        );
                    }
                    break Chain::Broken;
                }
            }
        };
        for d in path {
            state.insert(d, outcome);
        }
    }
}
