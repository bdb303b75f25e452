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
use crate::format::kind::FileKind;
use crate::format::{NAME_MAX, ROOT_INO};
use std::collections::HashMap;

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

/// Per-inode counts, dense by inode number (numbers at or past `len` are never allocated).
struct Counts {
    entries_in: Vec<u32>,
    subdirs_in: Vec<u32>,
    names: Vec<u32>,
    /// The directory holding the first name seen (0: none).
    first_holder: Vec<u64>,
}

impl Counts {
    fn new(len: usize) -> Counts {
        Counts {
            entries_in: vec![0; len],
            subdirs_in: vec![0; len],
            names: vec![0; len],
            first_holder: vec![0; len],
        }
    }
}

fn bump(v: &mut [u32], i: u64) {
    if let Some(x) = v.get_mut(i as usize) {
        *x = x.saturating_add(1);
    }
}

fn at(v: &[u32], i: u64) -> u64 {
    v.get(i as usize).copied().unwrap_or(0) as u64
}

/// The directories holding the names of `ino` (rare: for messages only).
fn holders_of(ns: &Namespace, ino: u64) -> Vec<u64> {
    ns.entries
        .iter()
        .filter(|e| e.ino == ino)
        .map(|e| e.dir)
        .collect()
}

fn check(sink: &mut Sink, ns: &Namespace, inodes: &Inodes) {
    let len = inodes
        .good
        .keys()
        .last()
        .copied()
        .max(inodes.unreadable.iter().next_back().copied())
        .map_or(0, |m| m as usize + 1);
    let mut c = Counts::new(len);
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
        // Type codes come from a byte array: this loop runs once per entry and must not
        // touch each inode's whole record.
        let dir_code = FileKind::Directory.code();
        match inodes.good.kind_code(e.dir) {
            Some(k) if k == dir_code => {}
            Some(_) => sink.error(
                NAME,
                format!("{}: inode {} is not a directory", at(), e.dir),
            ),
            None if inodes.good.contains_key(&e.dir) => sink.error(
                NAME,
                format!("{}: inode {} is not a directory", at(), e.dir),
            ),
            None if inodes.unreadable.contains(&e.dir) => {}
            None => sink.error(
                NAME,
                format!("{}: directory {} is not an allocated inode", at(), e.dir),
            ),
        }
        bump(&mut c.entries_in, e.dir);
        let target = inodes
            .good
            .kind_code(e.ino)
            .map(Some)
            .or_else(|| inodes.good.contains_key(&e.ino).then_some(None));
        let names_dir = match target {
            Some(code) => {
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
                code == Some(dir_code)
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
            bump(&mut c.subdirs_in, e.dir);
        }
        bump(&mut c.names, e.ino);
        if let Some(h) = c.first_holder.get_mut(e.ino as usize) {
            if *h == 0 {
                *h = e.dir;
            }
        }
    }

    for (&ino, info) in &inodes.good {
        let names = at(&c.names, ino) as usize;
        if unlinked(info, names) {
            continue;
        }
        let d = &info.disk;
        if !is_dir(info) {
            if d.nlink as usize != names {
                sink.error(
                    NAME,
                    format!(
                        "inode {ino} has {} links but {names} entries name it",
                        d.nlink
                    ),
                );
            }
            continue;
        }
        let count = at(&c.entries_in, ino);
        if d.size != count {
            sink.error(
                NAME,
                format!(
                    "directory {ino} holds {count} entries but its size says {}",
                    d.size
                ),
            );
        }
        let subdirs = at(&c.subdirs_in, ino);
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
            if names > 0 {
                sink.error(
                    NAME,
                    format!(
                        "the root directory is named by entries in directories {}",
                        list(&holders_of(ns, ino), 8)
                    ),
                );
            }
        } else if names > 1 {
            sink.error(
                NAME,
                format!(
                    "directory {ino} has {names} names (in directories {}); directories have one",
                    list(&holders_of(ns, ino), 8)
                ),
            );
        } else if names == 1 {
            let holder = c.first_holder[ino as usize];
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

    reachability(sink, ns, inodes, &c, len);
    dotdot_chains(sink, inodes, &c, len);
    sink.progress(7, NAME, total, total);
}

/// Everything allocated can be found from the root through directories.
fn reachability(sink: &mut Sink, ns: &Namespace, inodes: &Inodes, c: &Counts, len: usize) {
    // Each directory's entries: the ranges of `ns.entries` it holds (they come in key
    // order, so usually one range per directory).
    let mut ranges: HashMap<u64, Vec<(usize, usize)>> = HashMap::new();
    let mut i = 0;
    while i < ns.entries.len() {
        let dir = ns.entries[i].dir;
        let mut j = i + 1;
        while j < ns.entries.len() && ns.entries[j].dir == dir {
            j += 1;
        }
        ranges.entry(dir).or_default().push((i, j));
        i = j;
    }
    let mut reached = vec![false; len];
    let mut queue = Vec::new();
    if inodes.good.get(&ROOT_INO).is_some_and(is_dir) {
        reached[ROOT_INO as usize] = true;
        queue.push(ROOT_INO);
    }
    // Each directory is queued once (when first reached), so this ends.
    while let Some(dir) = queue.pop() {
        for &(from, to) in ranges.get(&dir).map(|v| v.as_slice()).unwrap_or(&[]) {
            for e in &ns.entries[from..to] {
                let child = e.ino;
                let Some(r) = reached.get_mut(child as usize) else {
                    continue; // never allocated
                };
                if !*r {
                    *r = true;
                    if inodes.good.is_dir(child) {
                        queue.push(child);
                    }
                }
            }
        }
    }
    for (&ino, info) in &inodes.good {
        let names = at(&c.names, ino) as usize;
        if reached[ino as usize] || unlinked(info, names) {
            continue;
        }
        let kind = info.kind().map(|k| k.code()).unwrap_or(0);
        let why = if names == 0 {
            "no entry names it".to_string()
        } else {
            format!(
                "it is named only in unreachable directories {}",
                list(&holders_of(ns, ino), 8)
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

const UNSEEN: u8 = 0;
const ON_PATH: u8 = 1;
const REACHES_ROOT: u8 = 2;
const BROKEN: u8 = 3;

/// Following '..' from any directory reaches the root. Each directory's state is settled
/// once, so all walks together take one step per directory.
fn dotdot_chains(sink: &mut Sink, inodes: &Inodes, c: &Counts, len: usize) {
    let mut state = vec![UNSEEN; len];
    let get = |state: &[u8], i: u64| state.get(i as usize).copied().unwrap_or(UNSEEN);
    for (&start, info) in &inodes.good {
        let names = at(&c.names, start) as usize;
        if !is_dir(info) || unlinked(info, names) || get(&state, start) != UNSEEN {
            continue;
        }
        let mut path: Vec<u64> = Vec::new();
        let mut cur = start;
        let outcome = loop {
            match get(&state, cur) {
                REACHES_ROOT => break REACHES_ROOT,
                BROKEN => break BROKEN,
                ON_PATH => {
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
                    break BROKEN;
                }
                _ => {}
            }
            if cur == ROOT_INO {
                state[cur as usize] = REACHES_ROOT;
                break REACHES_ROOT;
            }
            match inodes.good.get(&cur) {
                Some(d) if is_dir(d) => {
                    state[cur as usize] = ON_PATH;
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
                    break BROKEN;
                }
            }
        };
        for d in path {
            state[d as usize] = outcome;
        }
    }
}
