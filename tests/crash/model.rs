//! The oracle's model: a tiny in-memory file system that replays the workload's operations,
//! plus the views of a tree (model or real) that crash states are compared on.

use std::collections::{BTreeMap, BTreeSet};

use super::ops::{pattern, xattr_value, Falloc, Op};

/// Block size of the crash harness's file systems.
pub const BS: u64 = 4096;

pub type Id = u64;
pub const ROOT: Id = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    File(Vec<u8>),
    Dir(BTreeMap<String, Id>),
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
pub struct Inode {
    pub body: Body,
    pub perm: u16,
    pub nlink: u32,
    /// Extended attributes, by name.
    pub attrs: BTreeMap<String, Vec<u8>>,
}

impl Inode {
    pub fn kind(&self) -> Kind {
        match self.body {
            Body::File(_) => Kind::File,
            Body::Dir(_) => Kind::Dir,
            Body::Symlink(_) => Kind::Symlink,
        }
    }
}

/// Bytes an operation put (or may have put) at file offsets: the only values besides the
/// committed content a crashed file may show there.
#[derive(Clone, Copy, Debug)]
pub struct DataWrite {
    /// Global index of the operation (it seeds the bytes' pattern).
    pub op: usize,
    pub off: u64,
    pub len: u64,
    /// Zeros (the gap a write past the end or a truncate up opens) rather than the pattern.
    pub zeros: bool,
}

impl DataWrite {
    pub fn value_at(&self, o: u64) -> Option<u8> {
        (o >= self.off && o < self.off + self.len).then(|| {
            if self.zeros {
                0
            } else {
                pattern(self.op, o)
            }
        })
    }
}

#[derive(Clone, Debug)]
pub struct Model {
    pub inodes: BTreeMap<Id, Inode>,
    next: Id,
    /// Per file, the blocks that hold written data (SEEK_DATA finds them): written, and not
    /// truncated, punched or zeroed whole since. Preallocated blocks are holes.
    written: BTreeMap<Id, BTreeSet<u64>>,
}

pub type Errno = i32;

/// What resolving a path found.
enum Found {
    /// (parent, name, the inode if the name exists)
    At(Id, String, Option<Id>),
}

impl Model {
    /// A fresh DualFS: the root and /lost+found.
    pub fn new() -> Model {
        let mut inodes = BTreeMap::new();
        let mut root = BTreeMap::new();
        root.insert("lost+found".to_string(), 2);
        inodes.insert(
            ROOT,
            Inode {
                body: Body::Dir(root),
                perm: 0o755,
                nlink: 3,
                attrs: BTreeMap::new(),
            },
        );
        inodes.insert(
            2,
            Inode {
                body: Body::Dir(BTreeMap::new()),
                perm: 0o700,
                nlink: 2,
                attrs: BTreeMap::new(),
            },
        );
        Model {
            inodes,
            next: 3,
            written: BTreeMap::new(),
        }
    }

    fn get(&self, id: Id) -> &Inode {
        &self.inodes[&id]
    }

    fn entries(&self, id: Id) -> &BTreeMap<String, Id> {
        match &self.get(id).body {
            Body::Dir(e) => e,
            _ => panic!("model: {id} is not a directory"),
        }
    }

    fn entries_mut(&mut self, id: Id) -> &mut BTreeMap<String, Id> {
        match &mut self.inodes.get_mut(&id).unwrap().body {
            Body::Dir(e) => e,
            _ => panic!("model: {id} is not a directory"),
        }
    }

    /// Resolve the directory `path` ("" is the root), as the executor does by lookups.
    pub fn dir_of(&self, path: &str) -> Result<Id, Errno> {
        let mut cur = ROOT;
        for comp in path.split('/').filter(|c| !c.is_empty()) {
            if self.get(cur).kind() != Kind::Dir {
                return Err(libc::ENOTDIR);
            }
            cur = *self.entries(cur).get(comp).ok_or(libc::ENOENT)?;
        }
        if self.get(cur).kind() != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        Ok(cur)
    }

    fn find(&self, path: &str) -> Result<Found, Errno> {
        let (parent, name) = split(path);
        let p = self.dir_of(parent)?;
        Ok(Found::At(
            p,
            name.to_string(),
            self.entries(p).get(name).copied(),
        ))
    }

    /// The inode at `path`.
    pub fn resolve(&self, path: &str) -> Result<Id, Errno> {
        let Found::At(_, _, id) = self.find(path)?;
        id.ok_or(libc::ENOENT)
    }

    fn alloc(&mut self, body: Body, perm: u16) -> Id {
        let id = self.next;
        self.next += 1;
        let nlink = if matches!(body, Body::Dir(_)) { 2 } else { 1 };
        self.inodes.insert(
            id,
            Inode {
                body,
                perm,
                nlink,
                attrs: BTreeMap::new(),
            },
        );
        id
    }

    fn file_mut(&mut self, id: Id) -> &mut Vec<u8> {
        match &mut self.inodes.get_mut(&id).unwrap().body {
            Body::File(d) => d,
            _ => panic!("not a file"),
        }
    }

    /// Drop one name of `id` (already removed from its directory).
    fn drop_link(&mut self, id: Id) {
        let ino = self.inodes.get_mut(&id).unwrap();
        if ino.kind() == Kind::Dir {
            ino.nlink = 0;
        } else {
            ino.nlink -= 1;
        }
        if ino.nlink == 0 {
            self.inodes.remove(&id);
        }
    }

    fn is_within(&self, mut dir: Id, anc: Id) -> bool {
        // Walk up through parents: find each directory's parent by search (the model is tiny).
        loop {
            if dir == anc {
                return true;
            }
            if dir == ROOT {
                return false;
            }
            dir = self.parent_of(dir).expect("every directory has a parent");
        }
    }

    fn parent_of(&self, dir: Id) -> Option<Id> {
        self.inodes.iter().find_map(|(&p, ino)| match &ino.body {
            Body::Dir(e) if e.values().any(|&c| c == dir) => Some(p),
            _ => None,
        })
    }

    /// Apply operation `op` (global index `gi`), as DualFS's core API does it. Returns the
    /// errno the real call must fail with, and the data writes it did, on `writes`.
    pub fn apply(
        &mut self,
        gi: usize,
        op: &Op,
        writes: &mut BTreeMap<Id, Vec<DataWrite>>,
    ) -> Result<(), Errno> {
        match op {
            Op::Creat(p) => {
                let Found::At(parent, name, existing) = self.find(p)?;
                match existing {
                    None => {
                        let id = self.alloc(Body::File(Vec::new()), 0o644);
                        self.entries_mut(parent).insert(name, id);
                        Ok(())
                    }
                    Some(id) => match self.get(id).kind() {
                        Kind::Dir => Err(libc::EISDIR),
                        // The core opens what the name holds; a symlink is not truncated.
                        Kind::Symlink => Ok(()),
                        Kind::File => {
                            self.file_mut(id).clear();
                            self.written.remove(&id);
                            Ok(())
                        }
                    },
                }
            }
            Op::Mkdir(p) => {
                let Found::At(parent, name, existing) = self.find(p)?;
                if existing.is_some() {
                    return Err(libc::EEXIST);
                }
                let id = self.alloc(Body::Dir(BTreeMap::new()), 0o755);
                self.entries_mut(parent).insert(name, id);
                self.inodes.get_mut(&parent).unwrap().nlink += 1;
                Ok(())
            }
            Op::Write { path, off, len } => self.write(gi, path, Some(*off), *len, writes),
            Op::Append { path, len } => self.write(gi, path, None, *len, writes),
            Op::Truncate { path, size } => {
                let id = self.regular_file(path, libc::EINVAL)?;
                let d = self.file_mut(id);
                let old = d.len() as u64;
                d.resize(*size as usize, 0);
                let keep = size.div_ceil(BS);
                self.written.entry(id).or_default().retain(|&b| b < keep);
                if *size > old {
                    writes.entry(id).or_default().push(DataWrite {
                        op: gi,
                        off: old,
                        len: size - old,
                        zeros: true,
                    });
                }
                Ok(())
            }
            Op::Link { from, to } => {
                let src = self.resolve(from)?;
                let Found::At(parent, name, existing) = self.find(to)?;
                if self.get(src).kind() == Kind::Dir {
                    return Err(libc::EPERM);
                }
                if existing.is_some() {
                    return Err(libc::EEXIST);
                }
                self.entries_mut(parent).insert(name, src);
                self.inodes.get_mut(&src).unwrap().nlink += 1;
                Ok(())
            }
            Op::Unlink(p) => {
                let Found::At(parent, name, existing) = self.find(p)?;
                let id = existing.ok_or(libc::ENOENT)?;
                if self.get(id).kind() == Kind::Dir {
                    return Err(libc::EISDIR);
                }
                self.entries_mut(parent).remove(&name);
                self.drop_link(id);
                Ok(())
            }
            Op::Rmdir(p) => {
                let Found::At(parent, name, existing) = self.find(p)?;
                let id = existing.ok_or(libc::ENOENT)?;
                if self.get(id).kind() != Kind::Dir {
                    return Err(libc::ENOTDIR);
                }
                if !self.entries(id).is_empty() {
                    return Err(libc::ENOTEMPTY);
                }
                self.entries_mut(parent).remove(&name);
                self.inodes.get_mut(&parent).unwrap().nlink -= 1;
                self.drop_link(id);
                Ok(())
            }
            Op::Rename { from, to } => self.rename(from, to),
            Op::Symlink { path, target } => {
                let Found::At(parent, name, existing) = self.find(path)?;
                if existing.is_some() {
                    return Err(libc::EEXIST);
                }
                let id = self.alloc(Body::Symlink(target.clone()), 0o777);
                self.entries_mut(parent).insert(name, id);
                Ok(())
            }
            Op::Chmod { path, perm } => {
                let id = self.resolve(path)?;
                self.inodes.get_mut(&id).unwrap().perm = *perm;
                Ok(())
            }
            Op::Fallocate {
                path,
                mode,
                off,
                len,
            } => self.fallocate(gi, path, *mode, *off, *len, writes),
            Op::Hold(p) => self.resolve(p).map(drop),
            Op::Persist(..) | Op::Release | Op::Clean | Op::Mount | Op::Unmount => Ok(()),
            Op::SetXattr { path, name, len } => {
                let id = self.resolve(path)?;
                let ino = self.inodes.get_mut(&id).unwrap();
                // user.* only on regular files and directories (the core follows Linux).
                if name.starts_with("user.") && ino.kind() == Kind::Symlink {
                    return Err(libc::EPERM);
                }
                ino.attrs.insert(name.clone(), xattr_value(gi, *len));
                Ok(())
            }
            Op::RemoveXattr { path, name } => {
                let id = self.resolve(path)?;
                let ino = self.inodes.get_mut(&id).unwrap();
                if name.starts_with("user.") && ino.kind() == Kind::Symlink {
                    return Err(libc::EPERM);
                }
                ino.attrs.remove(name).map(drop).ok_or(libc::ENODATA)
            }
            Op::Tmpfile { path, len } => {
                // The link is what can fail (the file, closed unnamed, is freed: no change);
                // linked, the file is Creat's with one Write at 0 (its data bytes are the op's,
                // and a crash may lose them as a Write's: see `Recording::born_empty`).
                let Found::At(parent, name, existing) = self.find(path)?;
                if existing.is_some() {
                    return Err(libc::EEXIST);
                }
                let id = self.alloc(Body::File(Vec::new()), 0o644);
                self.entries_mut(parent).insert(name, id);
                self.write(gi, path, Some(0), *len, writes)
            }
        }
    }

    fn write(
        &mut self,
        gi: usize,
        path: &str,
        off: Option<u64>,
        len: u64,
        writes: &mut BTreeMap<Id, Vec<DataWrite>>,
    ) -> Result<(), Errno> {
        let id = self.regular_file(path, libc::EINVAL)?;
        let d = self.file_mut(id);
        let size = d.len() as u64;
        let off = off.unwrap_or(size);
        let end = off + len;
        if end as usize > d.len() {
            d.resize(end as usize, 0);
        }
        for o in off..end {
            d[o as usize] = pattern(gi, o);
        }
        if len > 0 {
            let blocks = off / BS..=(end - 1) / BS;
            self.written.entry(id).or_default().extend(blocks);
        }
        let w = writes.entry(id).or_default();
        if off > size {
            w.push(DataWrite {
                op: gi,
                off: size,
                len: off - size,
                zeros: true,
            });
        }
        w.push(DataWrite {
            op: gi,
            off,
            len,
            zeros: false,
        });
        Ok(())
    }

    /// The regular file at `path`: EISDIR for a directory, `on_symlink` for a symlink.
    fn regular_file(&self, path: &str, on_symlink: Errno) -> Result<Id, Errno> {
        let id = self.resolve(path)?;
        match self.get(id).kind() {
            Kind::Dir => Err(libc::EISDIR),
            Kind::Symlink => Err(on_symlink),
            Kind::File => Ok(id),
        }
    }

    /// fallocate as DualFS does it: preallocation changes no byte (but a size that grows);
    /// punching and zeroing make the range read as zeros and its whole blocks holes.
    fn fallocate(
        &mut self,
        gi: usize,
        path: &str,
        mode: Falloc,
        off: u64,
        len: u64,
        writes: &mut BTreeMap<Id, Vec<DataWrite>>,
    ) -> Result<(), Errno> {
        let id = self.regular_file(path, libc::ENODEV)?;
        let end = off + len;
        let d = self.file_mut(id);
        let size = d.len() as u64;
        let grows = !mode.keeps_size() && end > size;
        if grows {
            d.resize(end as usize, 0);
        }
        let zeroes = !matches!(mode, Falloc::Allocate | Falloc::KeepSize);
        if zeroes {
            let upto = end.min(d.len() as u64);
            if off < upto {
                d[off as usize..upto as usize].fill(0);
            }
        }
        let w = writes.entry(id).or_default();
        let zeros = |off: u64, len: u64| DataWrite {
            op: gi,
            off,
            len,
            zeros: true,
        };
        if grows {
            w.push(zeros(size, end - size));
        }
        if zeroes {
            w.push(zeros(off, len));
            let (lo, hi) = (off.div_ceil(BS), end / BS);
            self.written
                .entry(id)
                .or_default()
                .retain(|&b| b < lo || b >= hi);
        }
        Ok(())
    }

    /// Which blocks of file `id` hold data, up to its end.
    pub fn data_blocks(&self, id: Id) -> Vec<bool> {
        let n = (self.content(id).len() as u64).div_ceil(BS);
        let w = self.written.get(&id);
        (0..n).map(|b| w.is_some_and(|w| w.contains(&b))).collect()
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        let Found::At(sp, sname, s) = self.find(from)?;
        let src = s.ok_or(libc::ENOENT)?;
        let Found::At(dp, dname, dst) = self.find(to)?;
        if dst == Some(src) {
            return Ok(());
        }
        let src_dir = self.get(src).kind() == Kind::Dir;
        if src_dir && sp != dp && self.is_within(dp, src) {
            return Err(libc::EINVAL);
        }
        if let Some(d) = dst {
            let dst_dir = self.get(d).kind() == Kind::Dir;
            match (src_dir, dst_dir) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !self.entries(d).is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
        }
        self.entries_mut(sp).remove(&sname);
        if let Some(d) = dst {
            self.entries_mut(dp).remove(&dname);
            if self.get(d).kind() == Kind::Dir {
                self.inodes.get_mut(&dp).unwrap().nlink -= 1;
            }
            self.drop_link(d);
        }
        self.entries_mut(dp).insert(dname, src);
        if src_dir && sp != dp {
            self.inodes.get_mut(&sp).unwrap().nlink -= 1;
            self.inodes.get_mut(&dp).unwrap().nlink += 1;
        }
        Ok(())
    }

    /// Every path (relative, without a leading '/'; the root is "") with its inode.
    pub fn paths(&self) -> Vec<(String, Id)> {
        let mut out = vec![(String::new(), ROOT)];
        let mut i = 0;
        while i < out.len() {
            let (p, id) = out[i].clone();
            if let Body::Dir(e) = &self.get(id).body {
                for (name, &c) in e {
                    out.push((join(&p, name), c));
                }
            }
            i += 1;
        }
        out
    }

    /// The tree as the comparison sees it.
    pub fn view(&self) -> View {
        let mut v = View::default();
        let paths = self.paths();
        let mut first: BTreeMap<Id, String> = BTreeMap::new();
        for (p, id) in &paths {
            first
                .entry(*id)
                .and_modify(|f| {
                    if p < f {
                        *f = p.clone()
                    }
                })
                .or_insert_with(|| p.clone());
        }
        for (p, id) in paths {
            let ino = self.get(id);
            let (size, target) = match &ino.body {
                Body::File(d) => (d.len() as u64, None),
                Body::Dir(e) => (e.len() as u64, None),
                Body::Symlink(t) => (t.len() as u64, Some(t.clone())),
            };
            v.entries.insert(
                p,
                ViewEntry {
                    kind: ino.kind(),
                    perm: ino.perm,
                    nlink: ino.nlink,
                    size,
                    target,
                    first_name: first[&id].clone(),
                    id,
                    attrs: ino.attrs.clone(),
                },
            );
        }
        v
    }

    /// The size of regular file `id`, if it exists in this model.
    pub fn file_size(&self, id: Id) -> Option<u64> {
        match &self.inodes.get(&id)?.body {
            Body::File(d) => Some(d.len() as u64),
            _ => None,
        }
    }

    pub fn content(&self, id: Id) -> &[u8] {
        match &self.get(id).body {
            Body::File(d) => d,
            _ => &[],
        }
    }
}

/// ("dir/sub", "name") of "dir/sub/name"; ("", "name") of "name".
pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// One path of a tree, as compared: type, permission bits, link count, size (entries for a
/// directory), symlink target, and which paths share its inode (`first_name`: the smallest).
#[derive(Clone, Debug)]
pub struct ViewEntry {
    pub kind: Kind,
    pub perm: u16,
    pub nlink: u32,
    pub size: u64,
    pub target: Option<Vec<u8>>,
    pub first_name: String,
    /// Model inode id, or the real inode number.
    pub id: u64,
    /// Extended attributes: name and value.
    pub attrs: BTreeMap<String, Vec<u8>>,
}

impl PartialEq for ViewEntry {
    fn eq(&self, o: &Self) -> bool {
        self.kind == o.kind
            && self.perm == o.perm
            && self.nlink == o.nlink
            && self.size == o.size
            && self.target == o.target
            && self.first_name == o.first_name
            && self.attrs == o.attrs
    }
}

#[derive(Clone, Debug, Default)]
pub struct View {
    pub entries: BTreeMap<String, ViewEntry>,
}

impl View {
    /// The differences between `self` (found) and `want`, at most `max` lines.
    pub fn diff(&self, want: &View, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        for (p, w) in &want.entries {
            match self.entries.get(p) {
                None => out.push(format!("/{p}: missing (expected {})", w.describe())),
                Some(f) if f != w => out.push(format!(
                    "/{p}: found {}, expected {}",
                    f.describe(),
                    w.describe()
                )),
                _ => {}
            }
        }
        for (p, f) in &self.entries {
            if !want.entries.contains_key(p) {
                out.push(format!("/{p}: unexpected {}", f.describe()));
            }
        }
        out.truncate(max);
        out
    }
}

impl ViewEntry {
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{:?} perm {:o} nlink {} size {}",
            self.kind, self.perm, self.nlink, self.size
        );
        if let Some(t) = &self.target {
            s += &format!(" -> {:?}", String::from_utf8_lossy(&t[..t.len().min(40)]));
        }
        if self.kind != Kind::Dir && self.nlink > 1 {
            s += &format!(" (inode of /{})", self.first_name);
        }
        for (name, value) in &self.attrs {
            let digest = value
                .iter()
                .fold(0u32, |h, &b| h.wrapping_mul(31).wrapping_add(b as u32));
            s += &format!(" {name}={}b#{digest:08x}", value.len());
        }
        s
    }
}
