//! Planning the namespace repairs from the entries the tree holds, as e2fsck's passes 2-4 do:
//! entries that cannot stand go (or are rewritten with the right hash or type), directories
//! keep one name, whatever cannot be reached from the root is reconnected under /lost+found
//! (made if missing) as `#<ino>`, and then every link count, directory size and '..' is set
//! to what the entries say.
//!
//! Three sets of inodes matter: *valid* ones (read fine, not being freed), *doomed* ones
//! (being freed by this repair) and *opaque* ones (allocated but unreadable, left as they
//! are: entries naming them or held in them are kept, and they are taken as reachable through,
//! because nothing can be judged about them).

use super::fixes::{FixClass, Planned, SessionFix, NEW_LOST_FOUND};
use crate::check::entry::Entry;
use crate::check::pass2_inodes::{InodeInfo, Inodes};
use crate::check::pass6_tree::Namespace;
use crate::format::kind::FileKind;
use crate::format::{LOST_FOUND_INO, NAME_MAX, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// What the namespace repair may do.
#[derive(Clone, Copy, Debug)]
pub struct Allowed {
    /// Fix entries that name nothing, sit in non-directories, or carry a wrong hash or type.
    pub entries: bool,
    /// Remove names that are illegal, extra names of directories, names of the root.
    pub remove_names: bool,
    /// Reconnect unreachable inodes under /lost+found.
    pub reconnect: bool,
    /// Free unattached regular files holding nothing (no data, no extended attributes).
    pub free_empty: bool,
    /// Free orphans: files unlinked while open, whose last user is gone (a mount would free
    /// them; fsck does it as e2fsck clears its orphan list).
    pub free_orphans: bool,
    /// Set link counts, directory sizes and '..'.
    pub counts: bool,
}

/// What the rest of the repair does to inodes, which the namespace must follow.
pub struct Context<'a> {
    pub inodes: &'a Inodes,
    pub ns: &'a Namespace,
    /// Inodes being freed (by earlier repairs: lost, broken symlinks).
    pub doomed: &'a BTreeSet<u64>,
    /// Inodes whose ORPHAN flag is being cleared.
    pub unflagged: &'a BTreeSet<u64>,
    /// Inodes with a pointer that cannot be followed and stays (they cannot be freed).
    pub bad_pointers: &'a BTreeSet<u64>,
    /// The root is made anew (it was lost): its old entries become reachable again.
    pub new_root: bool,
}

impl Context<'_> {
    fn info(&self, ino: u64) -> Option<&InodeInfo> {
        if self.doomed.contains(&ino) {
            return None;
        }
        self.inodes.good.get(&ino)
    }

    fn valid(&self, ino: u64) -> bool {
        self.info(ino).is_some() || (ino == ROOT_INO && self.new_root)
    }

    fn is_dir(&self, ino: u64) -> bool {
        self.info(ino).is_some_and(|i| i.is_dir()) || (ino == ROOT_INO && self.new_root)
    }

    fn opaque(&self, ino: u64) -> bool {
        self.inodes.unreadable.contains(&ino) && !self.doomed.contains(&ino)
    }

    fn kind(&self, ino: u64) -> Option<FileKind> {
        self.info(ino).and_then(|i| i.kind())
    }

    /// Flagged orphan with no links: open and unlinked when it was last mounted (the next
    /// mount frees it), if nothing names it.
    fn open_unlinked(&self, ino: u64) -> bool {
        self.info(ino)
            .is_some_and(|i| i.orphan && !self.unflagged.contains(&ino) && i.disk.nlink == 0)
    }
}

fn legal_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && !name.contains(&b'/')
        && !name.contains(&0)
        && name != b"."
        && name != b".."
}

fn shown(name: &[u8]) -> String {
    name.escape_ascii().to_string()
}

/// A kept entry: (dir, name) -> (ino, kind code), after rewrites.
type Kept = BTreeMap<(u64, Vec<u8>), (u64, u8)>;

/// Whether the root must be made anew (it is lost, or not a directory).
pub fn root_lost(inodes: &Inodes, doomed: &BTreeSet<u64>) -> bool {
    if doomed.contains(&ROOT_INO) {
        return true;
    }
    let is_dir = inodes.good.get(&ROOT_INO).is_some_and(|r| r.is_dir());
    // An unreadable root is opaque: it is neither made again nor judged.
    !is_dir && !inodes.unreadable.contains(&ROOT_INO)
}

pub fn plan(
    cx: &Context,
    allowed: Allowed,
    out: &mut Vec<Planned>,
    uncorrectable: &mut Vec<String>,
) {
    if !cx.is_dir(ROOT_INO) {
        if !cx.opaque(ROOT_INO) {
            uncorrectable.push(
                "the root directory is missing or not a directory: the namespace cannot be \
                 repaired"
                    .into(),
            );
        }
        return;
    }
    if cx.new_root {
        out.push(Planned {
            class: FixClass::Reconnect,
            fix: SessionFix::MakeRoot,
            message: "the root directory (inode 1) is lost: made anew (its entries are found \
                      again)"
                .into(),
        });
    }
    let mut planner = Planner {
        cx,
        allowed,
        out,
        kept: Kept::new(),
    };
    planner.judge_entries();
    if allowed.remove_names {
        planner.one_name_per_directory();
    }
    let made_lost_found = planner.reconnect_unreachable();
    if allowed.free_orphans {
        planner.free_orphans();
    }
    if allowed.counts {
        planner.set_counts(made_lost_found);
    }
}

/// What the phases of the namespace plan share: the entries that stay as the plan goes.
struct Planner<'a, 'c> {
    cx: &'a Context<'c>,
    allowed: Allowed,
    out: &'a mut Vec<Planned>,
    kept: Kept,
}

/// Where unreachable inodes go, and what went there.
struct LostFound {
    /// Its inode number; `NEW_LOST_FOUND` when it is made.
    ino: u64,
    /// Directory 2 exists but nothing names it: it is named /lost+found again.
    relink: bool,
    /// (ino, kind code, name) of each inode placed in it.
    placed: Vec<(u64, u8, Vec<u8>)>,
}

const LOST_FOUND_NAME: &[u8] = b"lost+found";

impl Planner<'_, '_> {
    fn hash(&self, name: &[u8]) -> u64 {
        self.cx.ns.tree.hash(name)
    }

    fn remove_entry(&mut self, e: &Entry, class: FixClass, why: String) {
        self.out.push(Planned {
            class,
            fix: SessionFix::RemoveEntry {
                dir: e.dir,
                hash: e.hash,
                name: e.name.clone(),
            },
            message: format!("{}: {why}: removed", at(e)),
        });
    }

    /// Entries one by one: those that cannot stand go, wrong hashes and types are written
    /// again; the rest are kept.
    fn judge_entries(&mut self) {
        let cx = self.cx;
        let entries = &cx.ns.entries;
        let rightly_hashed: HashSet<(u64, &[u8])> = entries
            .iter()
            .filter(|e| e.hash == cx.ns.tree.hash(&e.name))
            .map(|e| (e.dir, e.name.as_slice()))
            .collect();
        for e in entries {
            if let Some(kind) = self.judge_entry(e, &rightly_hashed) {
                self.kept
                    .entry((e.dir, e.name.clone()))
                    .or_insert((e.ino, kind));
            }
        }
    }

    /// The kind code `e` is kept with, or None when it is not part of the namespace.
    fn judge_entry(&mut self, e: &Entry, rightly_hashed: &HashSet<(u64, &[u8])>) -> Option<u8> {
        let (cx, allowed) = (self.cx, self.allowed);
        let dir_ok = cx.is_dir(e.dir) || cx.opaque(e.dir);
        if !dir_ok {
            if allowed.entries {
                let why = if cx.valid(e.dir) {
                    format!("inode {} is not a directory", e.dir)
                } else {
                    format!("directory {} does not exist", e.dir)
                };
                self.remove_entry(e, FixClass::Entries, why);
            }
            return None; // not part of the namespace either way
        }
        if !cx.valid(e.ino) && !cx.opaque(e.ino) {
            if allowed.entries {
                let why = format!("inode {} is not allocated", e.ino);
                self.remove_entry(e, FixClass::Entries, why);
            }
            return None;
        }
        if e.ino == ROOT_INO && allowed.remove_names {
            self.remove_entry(e, FixClass::RemoveNames, "it names the root".into());
            return None;
        }
        if !legal_name(&e.name) && allowed.remove_names {
            self.remove_entry(e, FixClass::RemoveNames, "an illegal name".into());
            return None;
        }
        // Wrong hash or wrong type: the entry is written again, right.
        let kind = match cx.kind(e.ino) {
            Some(k) => k.code(),
            None => e.kind, // opaque: nothing to compare with
        };
        let right_hash = self.hash(&e.name);
        if e.hash != right_hash && allowed.entries {
            if rightly_hashed.contains(&(e.dir, e.name.as_slice())) {
                let why = format!(
                    "its hash {:#x} is wrong and an entry of that name exists",
                    e.hash
                );
                self.remove_entry(e, FixClass::Entries, why);
                return None;
            }
            let why = format!("its hash {:#x} should be {right_hash:#x}", e.hash);
            self.remove_entry(e, FixClass::Entries, why);
            if !legal_name(&e.name) {
                return None; // cannot be stored again (and removing names is not allowed)
            }
            self.insert_entry(
                e,
                kind,
                format!("{}: stored again under its right hash", at(e)),
            );
        } else if kind != e.kind && allowed.entries {
            let message = format!(
                "{}: says inode {} is a {}; it is a {}: corrected",
                at(e),
                e.ino,
                kind_name(e.kind),
                kind_name(kind)
            );
            self.insert_entry(e, kind, message);
        }
        Some(kind)
    }

    /// `e` written again with type `kind` (under its right hash).
    fn insert_entry(&mut self, e: &Entry, kind: u8, message: String) {
        self.out.push(Planned {
            class: FixClass::Entries,
            fix: SessionFix::InsertEntry {
                dir: e.dir,
                name: e.name.clone(),
                ino: e.ino,
                kind,
            },
            message,
        });
    }

    /// A directory has one name: the one in its '..' directory, else the first.
    fn one_name_per_directory(&mut self) {
        let cx = self.cx;
        let mut names_of_dir: BTreeMap<u64, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
        for ((dir, name), &(ino, _)) in &self.kept {
            if cx.is_dir(ino) && ino != ROOT_INO {
                names_of_dir
                    .entry(ino)
                    .or_default()
                    .push((*dir, name.clone()));
            }
        }
        for (ino, names) in names_of_dir {
            if names.len() < 2 {
                continue;
            }
            let parent = cx.info(ino).map_or(0, |i| i.disk.parent);
            let keep = names.iter().position(|(d, _)| *d == parent).unwrap_or(0);
            for (k, (dir, name)) in names.into_iter().enumerate() {
                if k == keep {
                    continue;
                }
                self.kept.remove(&(dir, name.clone()));
                let hash = self.hash(&name);
                self.out.push(Planned {
                    class: FixClass::RemoveNames,
                    fix: SessionFix::RemoveEntry {
                        dir,
                        hash,
                        name: name.clone(),
                    },
                    message: format!(
                        "entry '{}' in directory {dir}: an extra name of directory {ino} \
                         (directories have one): removed",
                        shown(&name)
                    ),
                });
            }
        }
    }

    /// Reachability: what cannot be reached from the root goes to lost+found (made or named
    /// again if need be), or is freed when it is an empty file. True when a new lost+found
    /// is made.
    fn reconnect_unreachable(&mut self) -> bool {
        let mut lf = self.choose_lost_found();
        let mut frees = Vec::new();
        if self.allowed.reconnect {
            let reached = self.reconnect_directories(&mut lf);
            frees = self.reconnect_files(&mut lf, &reached);
        }
        let made = self.name_lost_found(&lf);
        let lf_shown = made.as_deref().map_or("lost+found".into(), shown);
        for (ino, kind, name) in lf.placed {
            self.out.push(Planned {
                class: FixClass::Reconnect,
                fix: SessionFix::InsertEntry {
                    dir: lf.ino,
                    name: name.clone(),
                    ino,
                    kind,
                },
                message: format!(
                    "inode {ino} ({}) cannot be reached from the root: reconnected as \
                     /{lf_shown}/{}",
                    kind_name(kind),
                    shown(&name)
                ),
            });
        }
        for ino in frees {
            self.out.push(Planned {
                class: FixClass::FreeEmpty,
                fix: SessionFix::FreeInode { ino },
                message: format!(
                    "inode {ino} (an empty regular file) cannot be reached from the root: freed"
                ),
            });
        }
        made.is_some()
    }

    /// Where reconnected inodes go: the existing /lost+found, directory 2 named again, or a
    /// new directory (made only if something is reconnected).
    fn choose_lost_found(&self) -> LostFound {
        let (cx, kept) = (self.cx, &self.kept);
        let reached = reach(cx, kept, &[ROOT_INO]);
        let (ino, relink) = match kept.get(&(ROOT_INO, LOST_FOUND_NAME.to_vec())) {
            Some(&(ino, _)) if cx.is_dir(ino) => (ino, false),
            Some(_) => (NEW_LOST_FOUND, false),
            None if cx.is_dir(LOST_FOUND_INO)
                && !reached.contains(&LOST_FOUND_INO)
                && !holders(kept).contains_key(&LOST_FOUND_INO)
                && self.allowed.reconnect =>
            {
                (LOST_FOUND_INO, true)
            }
            None => (NEW_LOST_FOUND, false),
        };
        LostFound {
            ino,
            relink,
            placed: Vec::new(),
        }
    }

    /// Place `ino` in lost+found as `#<ino>` (or `#<ino>.<n>` if that is taken).
    fn place(&mut self, lf: &mut LostFound, ino: u64, kind: u8) {
        let mut name = format!("#{ino}").into_bytes();
        let mut n = 1;
        while self.kept.contains_key(&(lf.ino, name.clone())) {
            name = format!("#{ino}.{n}").into_bytes();
            n += 1;
        }
        self.kept.insert((lf.ino, name.clone()), (ino, kind));
        lf.placed.push((ino, kind, name));
    }

    /// Each unreachable directory tree is reconnected at its top (a loop of directories is
    /// cut first). Returns what is reachable afterwards, from the root and lost+found.
    fn reconnect_directories(&mut self, lf: &mut LostFound) -> HashSet<u64> {
        let cx = self.cx;
        let mut reached = reach(cx, &self.kept, &[ROOT_INO, lf.ino]);
        let unreachable_dirs: Vec<u64> = cx
            .inodes
            .good
            .iter()
            .filter(|(&ino, i)| {
                i.is_dir() && cx.valid(ino) && !reached.contains(&ino) && !cx.open_unlinked(ino)
            })
            .map(|(&ino, _)| ino)
            .collect();
        for d in unreachable_dirs {
            if reached.contains(&d) {
                continue;
            }
            let Some(top) = self.top_of_unreachable(d) else {
                continue; // under an unreadable directory: left alone
            };
            if !(lf.relink && top == lf.ino) {
                self.place(lf, top, FileKind::Directory.code());
            }
            reached = reach(cx, &self.kept, &[ROOT_INO, lf.ino]);
        }
        reached
    }

    /// Climb the names of unreachable directory `d` up to a directory that has none, or
    /// around a loop (whose closing entry is removed): the directory to reconnect. None when
    /// the climb reaches an unreadable directory.
    fn top_of_unreachable(&mut self, d: u64) -> Option<u64> {
        let cx = self.cx;
        let h = holders(&self.kept);
        let mut cur = d;
        let mut seen = HashSet::from([d]);
        let cut = loop {
            match h.get(&cur).and_then(|v| v.first()) {
                None => break None,
                Some((dir, name)) => {
                    if !cx.is_dir(*dir) {
                        return None;
                    }
                    if !seen.insert(*dir) {
                        break Some((*dir, name.clone()));
                    }
                    cur = *dir;
                }
            }
        };
        let top = cur;
        if let Some((dir, name)) = cut {
            self.kept.remove(&(dir, name.clone()));
            let hash = self.hash(&name);
            self.out.push(Planned {
                class: FixClass::Reconnect,
                fix: SessionFix::RemoveEntry {
                    dir,
                    hash,
                    name: name.clone(),
                },
                message: format!(
                    "entry '{}' in directory {dir} names directory {top}, on a loop of \
                     directories cut off from the root: removed",
                    shown(&name)
                ),
            });
        }
        Some(top)
    }

    /// Unreachable files nothing names go to lost+found; empty regular files are freed
    /// instead (when allowed): returned.
    fn reconnect_files(&mut self, lf: &mut LostFound, reached: &HashSet<u64>) -> Vec<u64> {
        let cx = self.cx;
        let mut frees = Vec::new();
        let h = holders(&self.kept);
        for (&ino, info) in &cx.inodes.good {
            if info.is_dir()
                || !cx.valid(ino)
                || reached.contains(&ino)
                || h.contains_key(&ino)
                || cx.open_unlinked(ino)
            {
                continue;
            }
            let Some(kind) = info.kind() else { continue };
            let d = &info.disk;
            let owns_nothing = d.direct.iter().chain(d.indirect.iter()).all(|&a| a == 0);
            // Extended attributes are something the file holds: it goes to lost+found.
            let has_attrs = d.flags & crate::format::inode::IFLAG_XATTRS != 0;
            let empty = kind == FileKind::Regular && d.size == 0 && owns_nothing && !has_attrs;
            if empty && self.allowed.free_empty {
                frees.push(ino);
                continue;
            }
            self.place(lf, ino, kind.code());
        }
        frees
    }

    /// Directory 2 named /lost+found again, or a new lost+found made when something goes
    /// there: its name if made.
    fn name_lost_found(&mut self, lf: &LostFound) -> Option<Vec<u8>> {
        let dir_code = FileKind::Directory.code();
        if lf.relink {
            self.kept.insert(
                (ROOT_INO, LOST_FOUND_NAME.to_vec()),
                (LOST_FOUND_INO, dir_code),
            );
            self.out.push(Planned {
                class: FixClass::Reconnect,
                fix: SessionFix::InsertEntry {
                    dir: ROOT_INO,
                    name: LOST_FOUND_NAME.to_vec(),
                    ino: LOST_FOUND_INO,
                    kind: dir_code,
                },
                message: "directory 2 (lost+found) cannot be reached from the root: named \
                          /lost+found again"
                    .into(),
            });
            return None;
        }
        if lf.ino != NEW_LOST_FOUND || lf.placed.is_empty() {
            return None;
        }
        let mut name = LOST_FOUND_NAME.to_vec();
        let mut n = 1;
        while self.kept.contains_key(&(ROOT_INO, name.clone())) {
            name = format!("lost+found.{n}").into_bytes();
            n += 1;
        }
        self.out.push(Planned {
            class: FixClass::Reconnect,
            fix: SessionFix::MakeLostFound { name: name.clone() },
            message: format!("/{} made, to reconnect inodes into", shown(&name)),
        });
        self.kept
            .insert((ROOT_INO, name.clone()), (NEW_LOST_FOUND, dir_code));
        Some(name)
    }

    /// Orphans: nothing names them and nobody has them open any more.
    fn free_orphans(&mut self) {
        let cx = self.cx;
        let h = holders(&self.kept);
        for &ino in cx.inodes.good.keys() {
            if cx.open_unlinked(ino) && !h.contains_key(&ino) && !cx.bad_pointers.contains(&ino) {
                self.out.push(Planned {
                    class: FixClass::FreeOrphans,
                    fix: SessionFix::FreeInode { ino },
                    message: format!(
                        "inode {ino}: an orphan (unlinked while open, now closed): freed"
                    ),
                });
            }
        }
    }

    /// Link counts, sizes and '..' from the final entries (`made_lost_found`: a new
    /// lost+found is among them).
    fn set_counts(&mut self, made_lost_found: bool) {
        let cx = self.cx;
        let reached = reach(cx, &self.kept, &[ROOT_INO]);
        let mut names: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut entries_in: HashMap<u64, u64> = HashMap::new();
        let mut subdirs_in: HashMap<u64, u64> = HashMap::new();
        for ((dir, _), &(ino, kind)) in &self.kept {
            names.entry(ino).or_default().push(*dir);
            *entries_in.entry(*dir).or_default() += 1;
            if goes_into(cx, ino, kind) {
                *subdirs_in.entry(*dir).or_default() += 1;
            }
        }
        let mut inos: Vec<u64> = cx
            .inodes
            .good
            .keys()
            .copied()
            .filter(|&i| cx.valid(i) && cx.info(i).is_some())
            .collect();
        if cx.new_root {
            inos.insert(0, ROOT_INO);
        }
        if made_lost_found {
            inos.push(NEW_LOST_FOUND);
        }
        let no_names = Vec::new();
        for ino in inos {
            let named_in = names.get(&ino).unwrap_or(&no_names);
            // Open-unlinked, freed, or left unreachable: not the namespace's to count.
            if (named_in.is_empty() && ino != ROOT_INO) || !reached.contains(&ino) {
                continue;
            }
            let subdirs = subdirs_in.get(&ino).copied().unwrap_or(0);
            let entries = entries_in.get(&ino).copied().unwrap_or(0);
            if let Some(fix) = count_fix(cx, ino, named_in, subdirs, entries) {
                self.out.push(fix);
            }
        }
    }
}

/// The fix that sets `ino`'s link count, size and '..' to what its `holders` (the
/// directories naming it) and, for a directory, its `subdirs` and `entries` say; None when
/// they are right.
fn count_fix(
    cx: &Context,
    ino: u64,
    holders: &[u64],
    subdirs: u64,
    entries: u64,
) -> Option<Planned> {
    let (is_dir, d_nlink, d_size, d_parent) = match cx.info(ino) {
        Some(i) => (i.is_dir(), i.disk.nlink, i.disk.size, i.disk.parent),
        None => (true, 2, 0, ROOT_INO), // a new root or lost+found, as made
    };
    let (mut nlink, mut size, mut parent) = (None, None, None);
    if is_dir {
        let want_nlink = 2 + subdirs;
        let want_parent = if ino == ROOT_INO {
            Some(ROOT_INO)
        } else if holders.len() == 1 {
            Some(holders[0])
        } else {
            None
        };
        if want_nlink != d_nlink as u64 {
            nlink = Some(want_nlink.min(u32::MAX as u64) as u32);
        }
        if entries != d_size {
            size = Some(entries);
        }
        parent = want_parent.filter(|&p| p != d_parent);
    } else if holders.len() as u64 != d_nlink as u64 {
        nlink = Some(holders.len().min(u32::MAX as usize) as u32);
    }
    if nlink.is_none() && size.is_none() && parent.is_none() {
        return None;
    }
    let mut what = Vec::new();
    if let Some(n) = nlink {
        what.push(format!("link count {d_nlink} -> {n}"));
    }
    if let Some(s) = size {
        what.push(format!("entry count (size) {d_size} -> {s}"));
    }
    if let Some(p) = parent {
        what.push(format!("'..' {d_parent} -> {}", shown_ino(p)));
    }
    Some(Planned {
        class: FixClass::LinkCounts,
        message: format!(
            "{} {}: {}",
            if is_dir { "directory" } else { "inode" },
            shown_ino(ino),
            what.join(", ")
        ),
        fix: SessionFix::SetLinks {
            ino,
            nlink,
            size,
            parent,
        },
    })
}

/// Who names each inode: inode -> (dir, name) of its kept entries.
fn holders(kept: &Kept) -> HashMap<u64, Vec<(u64, Vec<u8>)>> {
    let mut h: HashMap<u64, Vec<(u64, Vec<u8>)>> = HashMap::new();
    for ((dir, name), &(ino, _)) in kept {
        h.entry(ino).or_default().push((*dir, name.clone()));
    }
    h
}

/// "entry 'NAME' in directory DIR", for messages.
fn at(e: &Entry) -> String {
    format!("entry '{}' in directory {}", shown(&e.name), e.dir)
}

/// Following an entry naming `ino` (of type `kind`) leads into a directory.
fn goes_into(cx: &Context, ino: u64, kind: u8) -> bool {
    ino == NEW_LOST_FOUND
        || cx.is_dir(ino)
        || (cx.opaque(ino) && kind == FileKind::Directory.code())
}

/// Everything reachable from `roots` through the kept entries.
fn reach(cx: &Context, kept: &Kept, roots: &[u64]) -> HashSet<u64> {
    let mut children: HashMap<u64, Vec<(u64, u8)>> = HashMap::new();
    for ((dir, _), &v) in kept {
        children.entry(*dir).or_default().push(v);
    }
    let mut reached: HashSet<u64> = roots.iter().copied().collect();
    let mut queue: Vec<u64> = roots.to_vec();
    while let Some(dir) = queue.pop() {
        for &(child, kind) in children.get(&dir).map(|v| v.as_slice()).unwrap_or(&[]) {
            if reached.insert(child) && goes_into(cx, child, kind) {
                queue.push(child);
            }
        }
    }
    reached
}

fn shown_ino(ino: u64) -> String {
    if ino == NEW_LOST_FOUND {
        "(the new lost+found)".into()
    } else {
        ino.to_string()
    }
}

fn kind_name(code: u8) -> String {
    match FileKind::from_code(code) {
        Some(FileKind::Regular) => "regular file".into(),
        Some(FileKind::Directory) => "directory".into(),
        Some(FileKind::Symlink) => "symbolic link".into(),
        Some(FileKind::CharDevice) => "character device".into(),
        Some(FileKind::BlockDevice) => "block device".into(),
        Some(FileKind::Fifo) => "FIFO".into(),
        Some(FileKind::Socket) => "socket".into(),
        None => format!("type {code}"),
    }
}
