//! memfs — the FUSE ceiling for DualFS's benchmarks: an in-memory file system (nothing
//! persists) with every speed lever the kernel's FUSE client offers turned on, so what it
//! achieves on a workload is about the best any FUSE file system can do on the same machine.
//!
//!     memfs MOUNTPOINT [--threads N]        # stop it with `umount MOUNTPOINT`
//!
//! The levers: the kernel's writeback cache (writes stay in the page cache until writeback),
//! no-open and no-opendir (the kernel never sends OPEN/OPENDIR/FLUSH/RELEASE for them and
//! keeps file pages and directory listings cached across opens), attribute, entry and symlink
//! caching for an hour, 1 MiB requests, and N worker threads (default 4), each with its own
//! /dev/fuse descriptor (clone_fd).
//!
//! It is a real POSIX tree, enough to unpack and build a kernel on it: files, directories,
//! symlinks, hard links, device nodes and fifos, rename (with RENAME_NOREPLACE and
//! RENAME_EXCHANGE), truncate, times and modes; an unlinked inode lives on while the kernel
//! still knows it (its lookup count), as open-unlinked files need; extended attributes (a map
//! per inode, no ACLs: the kernel's own checks only), taking set-ID bits away on write and
//! chown itself (FUSE_HANDLE_KILLPRIV_V2, as DualFS, so that the kernel does not ask for
//! `security.capability` before every write). No locks (the kernel keeps flock/POSIX locks
//! locally), no persistence.
//!
//! One reader-writer lock guards the whole tree: every critical section is a hash lookup or a
//! memcpy of at most one request (1 MiB), far shorter than the FUSE round trip around it.

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, SystemTime};

/// How long the kernel may trust entries, attributes and symlink targets: nothing changes
/// behind its back, so "forever" is right; an hour is long enough for any benchmark.
const TTL: Duration = Duration::from_secs(3600);
const ROOT: u64 = 1;
const BLOCK: u64 = 4096;
const NAME_MAX: usize = 255;
/// The first directory cookie after "." (1) and ".." (2).
const FIRST_COOKIE: u64 = 3;

struct Dir {
    parent: u64,
    /// name -> (inode, cookie); the cookie is the entry's stable readdir offset.
    entries: HashMap<OsString, (u64, u64)>,
    by_cookie: BTreeMap<u64, OsString>,
    next_cookie: u64,
}

impl Dir {
    fn new(parent: u64) -> Dir {
        Dir {
            parent,
            entries: HashMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
        }
    }
    fn get(&self, name: &OsStr) -> Option<u64> {
        self.entries.get(name).map(|&(ino, _)| ino)
    }
    fn insert(&mut self, name: &OsStr, ino: u64) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        if let Some((_, old)) = self.entries.insert(name.to_os_string(), (ino, cookie)) {
            self.by_cookie.remove(&old);
        }
        self.by_cookie.insert(cookie, name.to_os_string());
    }
    fn remove(&mut self, name: &OsStr) -> Option<u64> {
        let (ino, cookie) = self.entries.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }
}

enum Content {
    File(Vec<u8>),
    Dir(Dir),
    Symlink(OsString),
    /// Device nodes, fifos and sockets: only their attributes (kind and device number).
    Special(FileType, u32),
}

struct Node {
    attr: FileAttr,
    content: Content,
    /// References the kernel holds (entries replied minus forgotten). Atomic so that lookups
    /// only need the tree's read lock.
    lookups: AtomicU64,
    xattrs: BTreeMap<OsString, Vec<u8>>,
}

impl Node {
    fn dir(&self) -> Option<&Dir> {
        match &self.content {
            Content::Dir(d) => Some(d),
            _ => None,
        }
    }
    fn dir_mut(&mut self) -> Option<&mut Dir> {
        match &mut self.content {
            Content::Dir(d) => Some(d),
            _ => None,
        }
    }
    fn is_dir(&self) -> bool {
        matches!(self.content, Content::Dir(_))
    }
}

struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Bytes of file contents held (for statfs).
    data_bytes: u64,
}

impl Tree {
    fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }
    fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }
    fn dir(&self, ino: u64) -> Result<&Dir, Errno> {
        self.node(ino)?.dir().ok_or(Errno::ENOTDIR)
    }
    fn dir_mut(&mut self, ino: u64) -> Result<&mut Dir, Errno> {
        self.node_mut(ino)?.dir_mut().ok_or(Errno::ENOTDIR)
    }

    /// A directory's mtime and ctime move when its entries change.
    fn touch_dir(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            let now = SystemTime::now();
            n.attr.mtime = now;
            n.attr.ctime = now;
        }
    }

    fn add_nlink(&mut self, ino: u64, delta: i32) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.attr.nlink = n.attr.nlink.saturating_add_signed(delta);
            n.attr.ctime = SystemTime::now();
        }
    }

    /// Drop an inode that has no names left and that the kernel no longer knows.
    fn reap(&mut self, ino: u64) {
        let gone = self
            .nodes
            .get(&ino)
            .is_some_and(|n| n.attr.nlink == 0 && n.lookups.load(Ordering::Relaxed) == 0);
        if gone && ino != ROOT {
            if let Some(Node {
                content: Content::File(data),
                ..
            }) = self.nodes.remove(&ino)
            {
                self.data_bytes -= data.len() as u64;
            }
        }
    }

    /// Take one name away from `ino` (unlink, rmdir, or a rename's replaced target).
    fn drop_name(&mut self, parent: u64, ino: u64) {
        let is_dir = self.nodes.get(&ino).is_some_and(Node::is_dir);
        if is_dir {
            // An empty directory's own "." link goes with its name.
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.attr.nlink = 0;
            }
            self.add_nlink(parent, -1);
        } else {
            self.add_nlink(ino, -1);
        }
        self.reap(ino);
    }

    fn set_size(&mut self, ino: u64, size: u64) -> Result<(), Errno> {
        let n = self.node_mut(ino)?;
        let Content::File(data) = &mut n.content else {
            return Err(if n.is_dir() {
                Errno::EISDIR
            } else {
                Errno::EINVAL
            });
        };
        let old = data.len() as u64;
        data.resize(usize::try_from(size).map_err(|_| Errno::EFBIG)?, 0);
        n.attr.size = size;
        n.attr.blocks = size.div_ceil(512);
        self.data_bytes = self.data_bytes - old + size;
        Ok(())
    }
}

struct MemFs {
    tree: RwLock<Tree>,
}

fn new_attr(ino: u64, kind: FileType, perm: u32, req: &Request, rdev: u32) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm: (perm & 0o7777) as u16,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: req.uid(),
        gid: req.gid(),
        rdev,
        blksize: BLOCK as u32,
        flags: 0,
    }
}

fn kind_of_mode(mode: u32) -> Result<FileType, Errno> {
    Ok(match mode & libc::S_IFMT {
        0 | libc::S_IFREG => FileType::RegularFile,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFSOCK => FileType::Socket,
        _ => return Err(Errno::EINVAL),
    })
}

fn time_of(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl MemFs {
    fn new() -> MemFs {
        let now = SystemTime::now();
        let root = Node {
            attr: FileAttr {
                ino: INodeNo(ROOT),
                size: 0,
                blocks: 0,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: now,
                kind: FileType::Directory,
                perm: 0o755,
                nlink: 2,
                uid: unsafe { libc::getuid() },
                gid: unsafe { libc::getgid() },
                rdev: 0,
                blksize: BLOCK as u32,
                flags: 0,
            },
            content: Content::Dir(Dir::new(ROOT)),
            lookups: AtomicU64::new(0),
            xattrs: BTreeMap::new(),
        };
        MemFs {
            tree: RwLock::new(Tree {
                nodes: HashMap::from([(ROOT, root)]),
                next_ino: ROOT + 1,
                data_bytes: 0,
            }),
        }
    }

    /// Make a new inode named `name` in `parent`; the reply's entry counts as a lookup.
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        perm: u32,
        content: Content,
    ) -> Result<FileAttr, Errno> {
        let (kind, rdev) = match &content {
            Content::File(_) => (FileType::RegularFile, 0),
            Content::Dir(_) => (FileType::Directory, 0),
            Content::Symlink(_) => (FileType::Symlink, 0),
            Content::Special(kind, rdev) => (*kind, *rdev),
        };
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let mut t = self.tree.write().unwrap();
        let p = u64::from(parent);
        if t.dir(p)?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = t.next_ino;
        t.next_ino += 1;
        let mut attr = new_attr(ino, kind, perm, req, rdev);
        if let Content::Symlink(target) = &content {
            attr.size = target.len() as u64;
        }
        t.nodes.insert(
            ino,
            Node {
                attr,
                content,
                lookups: AtomicU64::new(1),
                xattrs: BTreeMap::new(),
            },
        );
        t.dir_mut(p)?.insert(name, ino);
        if kind == FileType::Directory {
            t.add_nlink(p, 1);
        }
        t.touch_dir(p);
        Ok(attr)
    }

    fn remove(&self, parent: INodeNo, name: &OsStr, want_dir: bool) -> Result<(), Errno> {
        let mut t = self.tree.write().unwrap();
        let p = u64::from(parent);
        let ino = t.dir(p)?.get(name).ok_or(Errno::ENOENT)?;
        let node = t.node(ino)?;
        match (want_dir, node.dir()) {
            (true, None) => return Err(Errno::ENOTDIR),
            (false, Some(_)) => return Err(Errno::EISDIR),
            (true, Some(d)) if !d.entries.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        t.dir_mut(p)?.remove(name);
        t.touch_dir(p);
        t.drop_name(p, ino);
        Ok(())
    }

    fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if new_name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let mut t = self.tree.write().unwrap();
        let ino = t.dir(parent)?.get(name).ok_or(Errno::ENOENT)?;
        let target = t.dir(new_parent)?.get(new_name);
        let src_is_dir = t.node(ino)?.is_dir();
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let other = target.ok_or(Errno::ENOENT)?;
            let other_is_dir = t.node(other)?.is_dir();
            t.dir_mut(parent)?.insert(name, other);
            t.dir_mut(new_parent)?.insert(new_name, ino);
            if parent != new_parent {
                for (moved, is_dir, to, from) in [
                    (ino, src_is_dir, new_parent, parent),
                    (other, other_is_dir, parent, new_parent),
                ] {
                    if is_dir {
                        t.dir_mut(moved)?.parent = to;
                        t.add_nlink(to, 1);
                        t.add_nlink(from, -1);
                    }
                }
            }
            for i in [ino, other] {
                t.node_mut(i)?.attr.ctime = SystemTime::now();
            }
            t.touch_dir(parent);
            t.touch_dir(new_parent);
            return Ok(());
        }
        if let Some(old) = target {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if old == ino {
                return Ok(()); // two names of one inode: POSIX says do nothing
            }
            match (src_is_dir, t.node(old)?.dir()) {
                (true, None) => return Err(Errno::ENOTDIR),
                (false, Some(_)) => return Err(Errno::EISDIR),
                (true, Some(d)) if !d.entries.is_empty() => return Err(Errno::ENOTEMPTY),
                _ => {}
            }
            t.dir_mut(new_parent)?.remove(new_name);
            t.drop_name(new_parent, old);
        }
        t.dir_mut(parent)?.remove(name);
        t.dir_mut(new_parent)?.insert(new_name, ino);
        if src_is_dir && parent != new_parent {
            t.dir_mut(ino)?.parent = new_parent;
            t.add_nlink(parent, -1);
            t.add_nlink(new_parent, 1);
        }
        t.node_mut(ino)?.attr.ctime = SystemTime::now();
        t.touch_dir(parent);
        t.touch_dir(new_parent);
        Ok(())
    }

    fn link(&self, ino: u64, new_parent: u64, new_name: &OsStr) -> Result<FileAttr, Errno> {
        if new_name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let mut t = self.tree.write().unwrap();
        if t.node(ino)?.is_dir() {
            return Err(Errno::EPERM);
        }
        if t.dir(new_parent)?.get(new_name).is_some() {
            return Err(Errno::EEXIST);
        }
        t.dir_mut(new_parent)?.insert(new_name, ino);
        t.add_nlink(ino, 1);
        t.touch_dir(new_parent);
        let n = t.node(ino)?;
        n.lookups.fetch_add(1, Ordering::Relaxed);
        Ok(n.attr)
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
    ) -> Result<FileAttr, Errno> {
        let mut t = self.tree.write().unwrap();
        if let Some(size) = size {
            t.set_size(ino, size)?;
        }
        let n = t.node_mut(ino)?;
        let a = &mut n.attr;
        if let Some(m) = mode {
            a.perm = (m & 0o7777) as u16;
        }
        if let Some(u) = uid {
            a.uid = u;
        }
        if let Some(g) = gid {
            a.gid = g;
        }
        if (uid.is_some() || gid.is_some()) && a.kind == FileType::RegularFile {
            a.perm = without_set_ids(a.perm);
        }
        if let Some(at) = atime {
            a.atime = time_of(at);
        }
        if let Some(mt) = mtime {
            a.mtime = time_of(mt);
        }
        a.ctime = ctime.unwrap_or_else(SystemTime::now);
        Ok(*a)
    }

    fn write(&self, ino: u64, offset: u64, data: &[u8], kill_set_ids: bool) -> Result<u32, Errno> {
        let mut t = self.tree.write().unwrap();
        let end = offset
            .checked_add(data.len() as u64)
            .and_then(|e| usize::try_from(e).ok())
            .ok_or(Errno::EFBIG)?;
        let n = t.node_mut(ino)?;
        let Content::File(bytes) = &mut n.content else {
            return Err(Errno::EISDIR);
        };
        let old = bytes.len();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[offset as usize..end].copy_from_slice(data);
        let len = bytes.len() as u64;
        n.attr.size = len;
        n.attr.blocks = len.div_ceil(512);
        if kill_set_ids {
            n.attr.perm = without_set_ids(n.attr.perm);
        }
        let now = SystemTime::now();
        n.attr.mtime = now;
        n.attr.ctime = now;
        t.data_bytes += len - old as u64;
        Ok(data.len() as u32)
    }
}

/// `perm` without the set-ID bits a write or chown takes from a regular file.
fn without_set_ids(perm: u16) -> u16 {
    let mut p = perm & !(libc::S_ISUID as u16);
    if p & libc::S_IXGRP as u16 != 0 {
        p &= !(libc::S_ISGID as u16);
    }
    p
}

/// Reply to a getxattr or listxattr with `value`: its size for the size probe, ERANGE if
/// it does not fit `size`.
fn xattr_reply(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

/// Reply with an entry, or the error.
fn entry(reply: ReplyEntry, r: Result<FileAttr, Errno>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for MemFs {
    fn init(&mut self, _req: &Request, cfg: &mut KernelConfig) -> std::io::Result<()> {
        for flag in [
            InitFlags::FUSE_WRITEBACK_CACHE,
            InitFlags::FUSE_NO_OPEN_SUPPORT,
            InitFlags::FUSE_NO_OPENDIR_SUPPORT,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_MAX_PAGES,
            InitFlags::FUSE_ATOMIC_O_TRUNC,
            InitFlags::FUSE_ASYNC_READ,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
        ] {
            if cfg.add_capabilities(flag).is_err() {
                eprintln!("memfs: the kernel does not offer {flag:?}");
            }
        }
        let _ = cfg.set_max_write(1 << 20);
        let _ = cfg.set_max_readahead(1 << 20);
        let _ = cfg.set_max_background(64);
        let _ = cfg.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t = self.tree.read().unwrap();
        let found = t.dir(u64::from(parent)).and_then(|d| {
            let n = t.node(d.get(name).ok_or(Errno::ENOENT)?)?;
            n.lookups.fetch_add(1, Ordering::Relaxed);
            Ok(n.attr)
        });
        entry(reply, found);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut t = self.tree.write().unwrap();
        let ino = u64::from(ino);
        if let Some(n) = t.nodes.get(&ino) {
            let left = n.lookups.load(Ordering::Relaxed).saturating_sub(nlookup);
            n.lookups.store(left, Ordering::Relaxed);
            t.reap(ino);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree.read().unwrap().node(u64::from(ino)) {
            Ok(n) => reply.attr(&TTL, &n.attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.setattr(u64::from(ino), mode, uid, gid, size, atime, mtime, ctime) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let t = self.tree.read().unwrap();
        match t.node(u64::from(ino)).map(|n| &n.content) {
            Ok(Content::Symlink(target)) => reply.data(target.as_bytes()),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let made = kind_of_mode(mode).and_then(|kind| {
            let content = if kind == FileType::RegularFile {
                Content::File(Vec::new())
            } else {
                Content::Special(kind, rdev)
            };
            self.make(req, parent, name, mode, content)
        });
        entry(reply, made);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let dir = Content::Dir(Dir::new(u64::from(parent)));
        entry(reply, self.make(req, parent, name, mode, dir));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.remove(parent, name, false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.remove(parent, name, true));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let content = Content::Symlink(target.as_os_str().to_os_string());
        let made = self.make(req, parent, link_name, 0o777, content);
        entry(reply, made);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.rename(
            u64::from(parent),
            name,
            u64::from(newparent),
            newname,
            flags,
        );
        empty(reply, r);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        entry(
            reply,
            self.link(u64::from(ino), u64::from(newparent), newname),
        );
    }

    /// ENOSYS here is the no-open lever: the kernel stops sending OPEN (and FLUSH/RELEASE)
    /// and keeps the file's pages cached from one open to the next.
    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }

    /// The no-opendir lever: directory listings stay cached (FOPEN_CACHE_DIR is implied).
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let t = self.tree.read().unwrap();
        match t.node(u64::from(ino)).map(|n| &n.content) {
            Ok(Content::File(d)) => {
                let start = (offset as usize).min(d.len());
                let end = start.saturating_add(size as usize).min(d.len());
                reply.data(&d[start..end]);
            }
            Ok(_) => reply.error(Errno::EISDIR),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self.write(u64::from(ino), offset, data, kill) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    /// ENOSYS: the kernel stops sending FLUSH at every close.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        reply.ok(); // in memory: every completed write is as durable as it gets
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ds: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let t = self.tree.read().unwrap();
        let d = match t.dir(u64::from(ino)) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        let dots = [(1, u64::from(ino), "."), (2, d.parent, "..")];
        for (cookie, i, name) in dots {
            if cookie > offset && reply.add(INodeNo(i), cookie, FileType::Directory, name) {
                return reply.ok();
            }
        }
        for (&cookie, name) in d.by_cookie.range(offset.max(FIRST_COOKIE - 1) + 1..) {
            let i = d.get(name).expect("by_cookie and entries agree");
            let kind = t
                .nodes
                .get(&i)
                .map_or(FileType::RegularFile, |n| n.attr.kind);
            if reply.add(INodeNo(i), cookie, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let mut t = self.tree.write().unwrap();
        let r = t.node_mut(u64::from(ino)).and_then(|n| {
            let exists = n.xattrs.contains_key(name);
            if flags & libc::XATTR_CREATE != 0 && exists {
                return Err(Errno::EEXIST);
            }
            if flags & libc::XATTR_REPLACE != 0 && !exists {
                return Err(Errno::ENODATA);
            }
            n.xattrs.insert(name.to_os_string(), value.to_vec());
            n.attr.ctime = SystemTime::now();
            Ok(())
        });
        empty(reply, r);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let t = self.tree.read().unwrap();
        match t.node(u64::from(ino)).map(|n| n.xattrs.get(name)) {
            Ok(Some(v)) => xattr_reply(reply, size, v),
            Ok(None) => reply.error(Errno::ENODATA),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let t = self.tree.read().unwrap();
        match t.node(u64::from(ino)) {
            Ok(n) => {
                let mut names = Vec::new();
                for k in n.xattrs.keys() {
                    names.extend_from_slice(k.as_bytes());
                    names.push(0);
                }
                xattr_reply(reply, size, &names);
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut t = self.tree.write().unwrap();
        let r = t.node_mut(u64::from(ino)).and_then(|n| {
            n.xattrs.remove(name).ok_or(Errno::ENODATA)?;
            n.attr.ctime = SystemTime::now();
            Ok(())
        });
        empty(reply, r);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let t = self.tree.read().unwrap();
        let (blocks, files) = (1u64 << 26, 1u64 << 24); // 256 GiB, 16 M inodes
        let free = blocks.saturating_sub(t.data_bytes.div_ceil(BLOCK));
        let ffree = files.saturating_sub(t.nodes.len() as u64);
        reply.statfs(
            blocks,
            free,
            free,
            files,
            ffree,
            BLOCK as u32,
            NAME_MAX as u32,
            BLOCK as u32,
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let file = Content::File(Vec::new());
        match self.make(req, parent, name, mode, file) {
            Ok(a) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(e),
        }
    }
}

fn usage() -> ! {
    eprintln!("usage: memfs MOUNTPOINT [--threads N]   (stop it with: umount MOUNTPOINT)");
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut mountpoint, mut threads) = (None, 4usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => {
                threads = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| usage())
            }
            "-h" | "--help" => {
                println!(
                    "usage: memfs MOUNTPOINT [--threads N]   (stop it with: umount MOUNTPOINT)"
                );
                return;
            }
            _ if mountpoint.is_none() && !a.starts_with('-') => mountpoint = Some(a),
            _ => usage(),
        }
    }
    let mountpoint = mountpoint.unwrap_or_else(|| usage());
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("memfs".into()),
        MountOption::Subtype("memfs".into()),
        MountOption::DefaultPermissions,
    ];
    cfg.n_threads = Some(threads);
    cfg.clone_fd = true;
    if let Err(e) = fuser::mount(MemFs::new(), &mountpoint, &cfg) {
        eprintln!("memfs: {mountpoint}: {e}");
        std::process::exit(1);
    }
}
