//! The FUSE adapter: translates fuser requests into calls on the core (`fs::Fs`) and the
//! core's answers into replies. No file system logic lives here.
//!
//! Permission checks are the kernel's job: the mount program always mounts with
//! `default_permissions`, so the core never sees a request the caller may not make.

use crate::fs::{
    Attr, Caller, DirEntry, FileKind, Fs, RenameFlags as CoreRenameFlags, SetAttr, SetTime,
    Timespec, Whence, XattrFlags, NO_HANDLE,
};
use crate::FsError;
use fuser::{
    BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, Notifier,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use log::{debug, info, warn};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

/// How the adapter talks to the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuseConfig {
    /// How long the kernel may cache names and attributes. DualFS owns its devices and every
    /// change passes through the kernel, so this can be long.
    pub ttl: Duration,
    /// Let the kernel cache writes; it then owns mtime and size while pages are dirty.
    pub writeback_cache: bool,
    /// Keep a file's page cache across opens: nothing changes the data behind the kernel.
    pub keep_cache: bool,
    /// Largest write request, bytes; also the largest read request (fuser derives the
    /// kernel's max_pages from it). The kernel copies a whole request between the writer's
    /// buffer, /dev/fuse and the daemon without a pause, and a request woken onto that CPU
    /// waits for the copy: 256 KiB bounds the wait at about a tenth of a millisecond, where 1
    /// MiB made cached reads under a streaming writer 6-8x slower at the 99th percentile
    /// (docs/DESIGN.md, "FUSE levers").
    pub max_write: u32,
    /// Background requests (readahead, writeback) the kernel keeps in flight.
    pub max_background: u16,
    /// Open files for direct I/O: every read and write reaches DualFS, none is served from the
    /// page cache (for `strictatime`, which must see every read). Shared mappings still work
    /// (FUSE_DIRECT_IO_ALLOW_MMAP).
    pub direct_io: bool,
    /// How long the kernel keeps directory listings in its page cache.
    pub dir_cache: DirCache,
    /// With kept listings, answer the first OPENDIR with ENOSYS: the kernel then opens
    /// directories by itself (FUSE_NO_OPENDIR_SUPPORT, handles with FOPEN_CACHE_DIR and
    /// KEEP_CACHE) and sends no OPENDIR or RELEASEDIR. On by default: the core then keeps a
    /// removed directory while the kernel holds it (kernel_refs.rs), so an open directory
    /// stays usable after its rmdir, as on Linux file systems; its inode is freed at the
    /// kernel's FORGET, a moment after the rmdir.
    pub no_opendir: bool,
    /// Answer the first OPEN with ENOSYS: the kernel then opens regular files by itself
    /// (FUSE_NO_OPEN_SUPPORT, handles with FOPEN_KEEP_CACHE) and sends no OPEN, RELEASE or
    /// (after one ENOSYS) FLUSH. The core then keeps a removed file while the kernel holds
    /// it, checks immutable and append-only files at each write instead of at open, and
    /// takes O_APPEND from each write. Not with `direct_io` (only an OPEN reply can ask for
    /// it): OPEN is then answered as usual.
    pub no_open: bool,
    /// Let the kernel keep symlink targets in its page cache (FUSE_CACHE_SYMLINKS): a
    /// symlink's target never changes, a new target is a new inode.
    pub cache_symlinks: bool,
    /// When the kernel asks for READDIRPLUS (entries with their attributes) instead of
    /// READDIR.
    pub readdirplus: Readdirplus,
}

/// How long the kernel keeps a directory's listing (its page cache of the entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirCache {
    /// Not at all: every getdents reaches DualFS (`strictatime`, which must see each one).
    Off,
    /// While the directory is open (FOPEN_CACHE_DIR): each opendir drops it.
    PerOpen,
    /// Across opens too (FOPEN_CACHE_DIR with FOPEN_KEEP_CACHE): the kernel drops it when
    /// the directory's mtime or change counter moves, which every create, link, unlink,
    /// rmdir and rename through the mount does. Nothing changes a directory behind the
    /// kernel's back (DualFS owns its devices; the cleaner moves blocks, not entries).
    Kept,
}

/// When the kernel lists a directory with READDIRPLUS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readdirplus {
    /// Never: names only, each entry's attributes come from a LOOKUP when they are needed.
    Never,
    /// At the start of a listing, and after a lookup in the directory
    /// (FUSE_READDIRPLUS_AUTO).
    Auto,
    /// Always.
    Always,
}

impl Default for FuseConfig {
    fn default() -> Self {
        FuseConfig {
            ttl: Duration::from_secs(3600),
            writeback_cache: false,
            keep_cache: true,
            max_write: 256 << 10,
            max_background: 64,
            direct_io: false,
            dir_cache: DirCache::Kept,
            no_opendir: true,
            no_open: false,
            cache_symlinks: true,
            readdirplus: Readdirplus::Auto,
        }
    }
}

/// A mounted `Fs` as a fuser `Filesystem`.
pub struct DualFuse {
    fs: Arc<Fs>,
    config: FuseConfig,
    /// The session's channel for notifications to the kernel, set once the session exists.
    notifier: Arc<OnceLock<Notifier>>,
}

impl DualFuse {
    /// The adapter for a FUSE session: the core counts the kernel's lookups from now on.
    pub fn new(fs: Arc<Fs>, config: FuseConfig) -> DualFuse {
        fs.begin_kernel_session(config.writeback_cache);
        if config.no_open && config.direct_io {
            warn!("no_open ignored: direct I/O (strictatime) needs an answer to every OPEN");
        }
        let adapter = DualFuse {
            fs,
            config,
            notifier: Arc::new(OnceLock::new()),
        };
        adapter
            .fs
            .kernel_opens_unseen(adapter.no_open(), adapter.no_opendir());
        adapter
    }

    /// Where the mount program puts the session's `Notifier` before the session runs.
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    /// The directory `name` in `parent`, if it is one (before a rename moves it).
    fn subdirectory(&self, parent: u64, name: &[u8]) -> Option<u64> {
        match self.fs.lookup_entry(parent, name) {
            Ok(Some(v)) if v.kind == FileKind::Directory.code() => Some(v.ino),
            _ => None,
        }
    }

    /// A directory moved to another parent: its ".." changed, but neither its mtime nor its
    /// change counter did, so the kernel would keep serving the old ".." from a kept
    /// listing. Drop that listing (the directory's page cache) and its attributes.
    fn moved_directory(&self, ino: u64) {
        if self.config.dir_cache == DirCache::Off {
            return;
        }
        if let Some(notifier) = self.notifier.get() {
            // ENOENT: the kernel holds no inode for it, so no listing either.
            if let Err(e) = notifier.inval_inode(INodeNo(ino), 0, 0) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    warn!("cannot drop the kernel's listing of moved directory {ino}: {e}");
                }
            }
        }
    }

    /// An inode's attributes changed by a request whose reply carries none (an ioctl that
    /// set its flags, and with them its ctime): drop the kernel's copy, or stat would show
    /// the old ctime until the attribute timeout.
    fn attributes_changed(&self, ino: u64) {
        if let Some(notifier) = self.notifier.get() {
            // A negative offset drops the attributes alone, none of the cached data.
            if let Err(e) = notifier.inval_inode(INodeNo(ino), -1, 0) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    warn!("cannot drop the kernel's attributes of inode {ino}: {e}");
                }
            }
        }
    }

    fn entry(&self, reply: ReplyEntry, result: crate::Result<Attr>, op: &str, ino: u64) {
        match result {
            Ok(attr) => reply.entry(&self.config.ttl, &file_attr(&attr), generation(&attr)),
            Err(e) => reply.error(errno(op, ino, &e)),
        }
    }

    fn attr(&self, reply: ReplyAttr, result: crate::Result<Attr>, op: &str, ino: u64) {
        match result {
            Ok(attr) => reply.attr(&self.config.ttl, &file_attr(&attr)),
            Err(e) => reply.error(errno(op, ino, &e)),
        }
    }

    fn open_flags(&self, flags: i32) -> i32 {
        core_open_flags(flags, self.config.writeback_cache)
    }

    /// The open flags of a directory handle.
    fn dir_fopen_flags(&self) -> FopenFlags {
        match self.config.dir_cache {
            DirCache::Off => FopenFlags::empty(),
            DirCache::PerOpen => FopenFlags::FOPEN_CACHE_DIR,
            DirCache::Kept => FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
        }
    }

    /// Does opendir answer ENOSYS, so that the kernel opens directories by itself? Its
    /// handles then carry FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE, so only with kept listings.
    fn no_opendir(&self) -> bool {
        self.config.dir_cache == DirCache::Kept && self.config.no_opendir
    }

    /// Does open answer ENOSYS, so that the kernel opens regular files by itself? Not with
    /// direct I/O, which only an OPEN reply can ask for.
    fn no_open(&self) -> bool {
        self.config.no_open && !self.config.direct_io
    }

    fn fopen_flags(&self) -> FopenFlags {
        let mut f = FopenFlags::empty();
        if self.config.direct_io {
            f |= FopenFlags::FOPEN_DIRECT_IO;
        } else if self.config.keep_cache {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        // close(2) has nothing to do: the data reached DualFS (its cache or the device) when
        // write returned, and close promises no durability. Skipping FLUSH saves a round trip
        // per close (with a writeback cache the kernel needs it).
        if !self.config.writeback_cache {
            f |= FopenFlags::FOPEN_NOFLUSH;
        }
        f
    }
}

/// The flags the core sees for an open. With the writeback cache the kernel reads through
/// write-only handles (to fill partial pages); it applies O_APPEND itself, which the core
/// knows (`Fs::begin_kernel_session`) and only checks against append-only files.
fn core_open_flags(flags: i32, writeback_cache: bool) -> i32 {
    if !writeback_cache {
        return flags;
    }
    if flags & libc::O_ACCMODE == libc::O_WRONLY {
        (flags & !libc::O_ACCMODE) | libc::O_RDWR
    } else {
        flags
    }
}

fn empty(reply: ReplyEmpty, result: crate::Result<()>, op: &str, ino: u64) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(op, ino, &e)),
    }
}

/// The errno for a core error; failures of the storage or the on-disk data are logged, since
/// the caller only sees EIO.
fn errno(op: &str, ino: u64, err: &FsError) -> Errno {
    let code = err.errno();
    if code == libc::EIO || matches!(err, FsError::Corrupt { .. }) {
        warn!("{op} (inode {ino}): {err}");
    } else {
        debug!("{op} (inode {ino}): {err}");
    }
    Errno::from_i32(code)
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
        umask: 0,
    }
}

/// The caller of a request that makes a node, with the umask the kernel sent: with
/// FUSE_DONT_MASK the kernel leaves it to the file system, which applies it only where the
/// directory has no default ACL.
fn caller_with_umask(req: &Request, umask: u32) -> Caller {
    Caller {
        umask: umask & 0o777,
        ..caller(req)
    }
}

/// Answer a getxattr or listxattr of `value` for a buffer of `size` bytes: the length for
/// the size probe (0), ERANGE when it does not fit.
fn reply_xattr(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

fn generation(attr: &Attr) -> Generation {
    Generation(u64::from(attr.generation))
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
    }
}

/// `Timespec::to_system_time` overflows (panics) on a nanosecond field of a second or more
/// next to the largest seconds; a corrupt inode could hold one, so clamp it first.
fn system_time(t: Timespec) -> SystemTime {
    Timespec {
        nsec: t.nsec.min(999_999_999),
        ..t
    }
    .to_system_time()
}

/// The attributes of a negative lookup entry: only the inode number (0) matters.
fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: std::time::UNIX_EPOCH,
        mtime: std::time::UNIX_EPOCH,
        ctime: std::time::UNIX_EPOCH,
        crtime: std::time::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

fn file_attr(attr: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        blocks: attr.blocks,
        atime: system_time(attr.atime),
        mtime: system_time(attr.mtime),
        ctime: system_time(attr.ctime),
        crtime: system_time(attr.crtime),
        kind: file_type(attr.kind),
        perm: attr.perm,
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: attr.rdev,
        blksize: attr.blksize,
        flags: 0,
    }
}

fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(kernel_time(t)),
    }
}

/// renameat2 flags the core understands; anything else (RENAME_WHITEOUT, unknown bits, or
/// both NOREPLACE and EXCHANGE, which the kernel rejects too) is EINVAL.
fn rename_flags(flags: RenameFlags) -> Option<CoreRenameFlags> {
    let known = RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE;
    if !known.contains(flags) || flags == known {
        return None;
    }
    Some(CoreRenameFlags {
        noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
        exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
    })
}

fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl Filesystem for DualFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut wanted = vec![
            // The kernel enforces ACLs from system.posix_acl_*; DualFS keeps modes in step
            // with them, inherits default ACLs and so applies the umask itself.
            InitFlags::FUSE_POSIX_ACL,
            InitFlags::FUSE_DONT_MASK,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_EXPORT_SUPPORT,
            InitFlags::FUSE_MAX_PAGES,
            InitFlags::FUSE_ASYNC_READ,
            InitFlags::FUSE_BIG_WRITES,
            // DualFS takes set-ID bits away on write, truncate and chown (fs/privileges.rs);
            // in return the kernel stops asking for security.capability before each write.
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
        ];
        match self.config.readdirplus {
            Readdirplus::Never => {}
            Readdirplus::Auto => wanted.extend([
                InitFlags::FUSE_DO_READDIRPLUS,
                InitFlags::FUSE_READDIRPLUS_AUTO,
            ]),
            Readdirplus::Always => wanted.push(InitFlags::FUSE_DO_READDIRPLUS),
        }
        if self.config.cache_symlinks {
            wanted.push(InitFlags::FUSE_CACHE_SYMLINKS);
        }
        if self.no_opendir() {
            wanted.push(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        }
        if self.no_open() {
            wanted.push(InitFlags::FUSE_NO_OPEN_SUPPORT);
        } else {
            // The core's open honours O_TRUNC. Not without OPEN: the kernel would then
            // truncate only its page cache (fuse_do_setattr skips the SETATTR of an
            // O_TRUNC open when the OPEN was to do it), so it sends the SETATTR instead.
            wanted.push(InitFlags::FUSE_ATOMIC_O_TRUNC);
        }
        if self.config.writeback_cache {
            wanted.push(InitFlags::FUSE_WRITEBACK_CACHE);
        }
        if self.config.direct_io {
            wanted.push(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        }
        // One at a time: a refusal rejects the whole set passed in.
        for capability in wanted {
            if let Err(refused) = config.add_capabilities(capability) {
                if capability == InitFlags::FUSE_WRITEBACK_CACHE {
                    warn!("the kernel refused the writeback cache; writes go straight through");
                } else {
                    debug!("the kernel refused {refused:?}");
                }
            }
        }
        if let Err(nearest) = config.set_max_write(self.config.max_write) {
            debug!(
                "max_write {} refused, using {nearest}",
                self.config.max_write
            );
            let _ = config.set_max_write(nearest);
        }
        if let Err(nearest) = config.set_max_background(self.config.max_background) {
            let _ = config.set_max_background(nearest);
        }
        info!(
            "FUSE session ready (kernel ABI {:?}, ttl {:?}, writeback cache {})",
            config.kernel_abi(),
            self.config.ttl,
            self.config.writeback_cache
        );
        Ok(())
    }

    fn destroy(&mut self) {
        debug!("FUSE session ended");
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.fs.lookup(parent.0, name.as_bytes()) {
            // A negative entry (inode 0) lets the kernel remember that the name is absent:
            // compilers and shells probe many absent names. Creating the name goes through
            // the kernel, which drops the negative entry.
            Err(e) if e.errno() == libc::ENOENT && !self.config.ttl.is_zero() => {
                reply.entry(&self.config.ttl, &negative_attr(), Generation(0))
            }
            result => self.entry(reply, result, "lookup", parent.0),
        }
    }

    // batch_forget keeps fuser's default, which calls `forget` per inode: fuser 0.18 does not
    // export `ForgetOne`, so the method cannot be overridden.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.attr(reply, self.fs.getattr(ino.0), "getattr", ino.0);
    }

    fn setattr(
        &self,
        req: &Request,
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
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // crtime, chgtime, bkuptime and BSD flags only come from macOS.
        let set = SetAttr {
            // chmod changes permission bits only; the kernel sends the whole st_mode.
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            ctime: ctime.map(kernel_time),
        };
        let result = self.fs.setattr(&caller(req), ino.0, &set);
        // With a writeback cache the kernel keeps mtime/ctime itself and pushes them with a
        // SETATTR when it writes the inode back, which can come after the file's last name
        // and handle went and DualFS freed it. Nothing can see those times any more: answer
        // as a dead regular file (the only kind whose times the kernel caches) instead of
        // failing the caller's syncfs.
        let times_only = set.mode.is_none()
            && set.uid.is_none()
            && set.gid.is_none()
            && set.size.is_none()
            && set.mtime.is_some();
        if let Err(e) = &result {
            if self.config.writeback_cache && times_only && e.errno() == libc::ENOENT {
                let mut dead = negative_attr();
                dead.ino = ino;
                dead.mtime = mtime.map_or(dead.mtime, |t| match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                });
                dead.ctime = ctime.unwrap_or(dead.mtime);
                reply.attr(&Duration::ZERO, &dead);
                return;
            }
        }
        self.attr(reply, result, "setattr", ino.0);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno("readlink", ino.0, &e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let mode = (mode & libc::S_IFMT) | (mode & 0o7777);
        let result = self.fs.mknod(
            &caller_with_umask(req, umask),
            parent.0,
            name.as_bytes(),
            mode,
            rdev,
        );
        self.entry(reply, result, "mknod", parent.0);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mode = libc::S_IFDIR | (mode & 0o7777);
        let result = self.fs.mkdir(
            &caller_with_umask(req, umask),
            parent.0,
            name.as_bytes(),
            mode,
        );
        self.entry(reply, result, "mkdir", parent.0);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.fs.unlink(&caller(req), parent.0, name.as_bytes());
        empty(reply, result, "unlink", parent.0);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.fs.rmdir(&caller(req), parent.0, name.as_bytes());
        empty(reply, result, "rmdir", parent.0);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let result = self.fs.symlink(
            &caller(req),
            parent.0,
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
        );
        self.entry(reply, result, "symlink", parent.0);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let Some(flags) = rename_flags(flags) else {
            return reply.error(Errno::EINVAL);
        };
        // The kernel holds both parents locked: the names stay what they are until the reply.
        let moved = if parent != newparent {
            let exchanged = if flags.exchange {
                self.subdirectory(newparent.0, newname.as_bytes())
            } else {
                None
            };
            [self.subdirectory(parent.0, name.as_bytes()), exchanged]
        } else {
            [None, None]
        };
        let result = self.fs.rename(
            &caller(req),
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags,
        );
        if result.is_ok() {
            moved
                .into_iter()
                .flatten()
                .for_each(|ino| self.moved_directory(ino));
        }
        empty(reply, result, "rename", parent.0);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let result = self
            .fs
            .link(&caller(req), ino.0, newparent.0, newname.as_bytes());
        self.entry(reply, result, "link", ino.0);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        // From this answer on the kernel opens files itself: O_TRUNC comes as a SETATTR,
        // and each write carries the descriptor's flags.
        if self.no_open() {
            return reply.error(Errno::ENOSYS);
        }
        match self.fs.open(&caller(req), ino.0, self.open_flags(flags.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), self.fopen_flags()),
            Err(e) => reply.error(errno("open", ino.0, &e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mode = libc::S_IFREG | (mode & 0o7777);
        let flags = self.open_flags(flags);
        match self.fs.create(
            &caller_with_umask(req, umask),
            parent.0,
            name.as_bytes(),
            mode,
            flags,
        ) {
            Ok((attr, fh)) => {
                // Without OPEN the kernel sends no RELEASE for a created file either: the
                // handle goes at once and the kernel's reference keeps the file (it counts
                // the entry of this reply).
                let fh = if self.no_open() {
                    if let Err(e) = self.fs.release(attr.ino, fh) {
                        return reply.error(errno("create", parent.0, &e));
                    }
                    NO_HANDLE
                } else {
                    fh
                };
                reply.created(
                    &self.config.ttl,
                    &file_attr(&attr),
                    generation(&attr),
                    FileHandle(fh),
                    self.fopen_flags(),
                )
            }
            Err(e) => reply.error(errno("create", parent.0, &e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.fs.read(ino.0, fh.0, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno("read", ino.0, &e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The kernel says whether the writer lacks CAP_FSETID (buffered and direct writes).
        let writer = caller(req);
        let unprivileged = write_flags
            .contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            .then_some(&writer);
        let written = self
            .fs
            .write_as(ino.0, fh.0, flags.0, offset, data, unprivileged);
        match written {
            Ok(written) => reply.written(written),
            // With a writeback cache the kernel may write back pages of a file after its last
            // name and handle went (and DualFS freed it): those bytes belong to nobody.
            Err(e) if self.config.writeback_cache && e.errno() == libc::ENOENT => {
                reply.written(data.len() as u32)
            }
            Err(e) => reply.error(errno("write", ino.0, &e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Data has reached DualFS when a write returns, so a close has nothing to flush: ENOSYS
        // makes the kernel stop sending FLUSH (it is only sent at all with a writeback cache;
        // without one, files are opened with FOPEN_NOFLUSH). Errors still surface.
        match self.fs.flush(ino.0, fh.0) {
            Ok(()) => reply.error(Errno::ENOSYS),
            Err(e) => reply.error(errno("flush", ino.0, &e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // A file the kernel opened itself (the first one: the kernel learns of no-open
        // support from that OPEN's answer, and releases it; and files created before).
        if fh.0 == NO_HANDLE && self.no_open() {
            return reply.ok();
        }
        empty(reply, self.fs.release(ino.0, fh.0), "release", ino.0);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.fs.fsync(ino.0, datasync), "fsync", ino.0);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let result = self
            .fs
            .fallocate_as(&caller(req), ino.0, fh.0, offset, length, mode);
        empty(reply, result, "fallocate", ino.0);
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        // With a writeback cache the kernel asks without writing its dirty pages back first:
        // the block map would call them holes. ENOSYS makes it answer from the size alone
        // (all data) for the rest of the mount, which is never wrong.
        if self.config.writeback_cache {
            return reply.error(Errno::ENOSYS);
        }
        let whence = match whence {
            libc::SEEK_DATA => Whence::Data,
            libc::SEEK_HOLE => Whence::Hole,
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO); // as ext4 and XFS answer a negative offset
        };
        match self.fs.seek(ino.0, offset, whence) {
            Ok(at) => reply.offset(at as i64),
            Err(e) => reply.error(errno("lseek", ino.0, &e)),
        }
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let result = self.fs.copy_file_range_as(
            &caller(req),
            ino_in.0,
            fh_in.0,
            offset_in,
            ino_out.0,
            fh_out.0,
            offset_out,
            len,
            u32::try_from(flags.bits()).unwrap_or(u32::MAX),
        );
        match result {
            // The core copies at most COPY_MAX bytes, which fits.
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno("copy_file_range", ino_in.0, &e)),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // The kernel checked the permissions and that it is a directory; from this answer on
        // it opens directories itself (and sends no RELEASEDIR).
        if self.no_opendir() {
            return reply.error(Errno::ENOSYS);
        }
        match self.fs.opendir(&caller(req), ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), self.dir_fopen_flags()),
            Err(e) => reply.error(errno("opendir", ino.0, &e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut accepted = 0usize;
        let result = {
            let mut add = |entry: &DirEntry| {
                let name = OsStr::from_bytes(&entry.name);
                let kind = file_type(entry.kind);
                let full = reply.add(INodeNo(entry.ino), entry.cookie, kind, name);
                accepted += usize::from(!full);
                !full
            };
            self.fs.readdir(ino.0, offset, &mut add)
        };
        match result {
            Ok(()) => reply.ok(),
            // Hand out what was listed; the kernel asks again from the last cookie.
            Err(e) if accepted > 0 => {
                errno("readdir", ino.0, &e);
                reply.ok()
            }
            Err(e) => reply.error(errno("readdir", ino.0, &e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        // The kernel counts a lookup for every entry in the reply except "." and ".."
        // (even those that no longer fit the reader's buffer), and so does the core for every
        // entry `add` accepts. So every accepted entry must reach the kernel: on a later
        // error the entries gathered so far are still sent.
        let ttl = self.config.ttl;
        let mut counted = 0usize;
        let result = {
            let mut add = |entry: &DirEntry, attr: &Attr| {
                let name = OsStr::from_bytes(&entry.name);
                let full = reply.add(
                    INodeNo(entry.ino),
                    entry.cookie,
                    name,
                    &ttl,
                    &file_attr(attr),
                    generation(attr),
                );
                if !full && !is_dot_or_dotdot(&entry.name) {
                    counted += 1;
                }
                !full
            };
            self.fs.readdirplus(ino.0, offset, &mut add)
        };
        match result {
            Ok(()) => reply.ok(),
            Err(e) if counted > 0 => {
                errno("readdirplus", ino.0, &e);
                reply.ok()
            }
            Err(e) => reply.error(errno("readdirplus", ino.0, &e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.fs.releasedir(ino.0, fh.0), "releasedir", ino.0);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.fs.fsyncdir(ino.0, datasync), "fsyncdir", ino.0);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(errno("statfs", ino.0, &e)),
        }
    }

    /// Inode flags and FS_IOC_SHUTDOWN (`crate::ioctl`); fuser answers unrestricted ioctls
    /// (CUSE only) itself.
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        match crate::ioctl::ioctl(&self.fs, &caller(req), ino.0, cmd, in_data, out_size) {
            Ok(out) => {
                if crate::ioctl::changes_attributes(cmd) {
                    self.attributes_changed(ino.0);
                }
                reply.ioctl(0, &out)
            }
            Err(e) => reply.error(errno("ioctl", ino.0, &e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        // Positions are macOS's resource forks; unknown flags are the kernel's to refuse.
        if position != 0 || flags & !(libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
            return reply.error(Errno::EINVAL);
        }
        let flags = XattrFlags {
            create: flags & libc::XATTR_CREATE != 0,
            replace: flags & libc::XATTR_REPLACE != 0,
        };
        let result = self
            .fs
            .setxattr(&caller(req), ino.0, name.as_bytes(), value, flags);
        empty(reply, result, "setxattr", ino.0);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let who = caller(req);
        if size == 0 {
            // The size probe (the kernel's security.capability check before writes is one):
            // answered from the record, or from the inode's flags alone.
            return match self.fs.getxattr_len(&who, ino.0, name.as_bytes()) {
                Ok(len) => reply.size(len as u32),
                Err(e) => reply.error(errno("getxattr", ino.0, &e)),
            };
        }
        match self.fs.getxattr(&who, ino.0, name.as_bytes()) {
            Ok(value) => reply_xattr(reply, size, &value),
            Err(e) => reply.error(errno("getxattr", ino.0, &e)),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.fs.listxattr(&caller(req), ino.0) {
            Ok(names) => reply_xattr(reply, size, &names),
            Err(e) => reply.error(errno("listxattr", ino.0, &e)),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.fs.removexattr(&caller(req), ino.0, name.as_bytes());
        empty(reply, result, "removexattr", ino.0);
    }
}

/// A time the kernel sent. fuser 0.18 turns a negative (seconds, nanoseconds) pair into
/// `UNIX_EPOCH - (|seconds| + nanoseconds)` instead of `UNIX_EPOCH - |seconds| + nanoseconds`;
/// undo that so times before 1970 arrive exactly.
fn kernel_time(t: std::time::SystemTime) -> Timespec {
    match std::time::UNIX_EPOCH.duration_since(t) {
        Ok(before) if !before.is_zero() => Timespec {
            sec: -(before.as_secs() as i64),
            nsec: before.subsec_nanos(),
        },
        _ => Timespec::from_system_time(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: FileKind) -> Attr {
        Attr {
            ino: 42,
            generation: 7,
            kind,
            perm: 0o4755,
            nlink: 3,
            uid: 1000,
            gid: 100,
            rdev: 0x0801,
            size: 12345,
            blocks: 32,
            atime: Timespec { sec: 1, nsec: 2 },
            mtime: Timespec { sec: 3, nsec: 4 },
            ctime: Timespec { sec: -5, nsec: 6 },
            crtime: Timespec { sec: 7, nsec: 8 },
            blksize: 4096,
        }
    }

    #[test]
    fn attr_converts_field_by_field() {
        let a = file_attr(&attr(FileKind::Symlink));
        assert_eq!(a.ino, INodeNo(42));
        assert_eq!(a.kind, FileType::Symlink);
        assert_eq!((a.perm, a.nlink, a.uid, a.gid), (0o4755, 3, 1000, 100));
        assert_eq!(
            (a.rdev, a.size, a.blocks, a.blksize, a.flags),
            (0x0801, 12345, 32, 4096, 0)
        );
        assert_eq!(a.mtime, Timespec { sec: 3, nsec: 4 }.to_system_time());
        assert_eq!(a.ctime, Timespec { sec: -5, nsec: 6 }.to_system_time());
        assert_eq!(generation(&attr(FileKind::Regular)), Generation(7));
    }

    #[test]
    fn every_kind_has_a_file_type() {
        for code in 1..=7 {
            let kind = FileKind::from_code(code).unwrap();
            let expected = match kind {
                FileKind::Regular => FileType::RegularFile,
                FileKind::Directory => FileType::Directory,
                FileKind::Symlink => FileType::Symlink,
                FileKind::CharDevice => FileType::CharDevice,
                FileKind::BlockDevice => FileType::BlockDevice,
                FileKind::Fifo => FileType::NamedPipe,
                FileKind::Socket => FileType::Socket,
            };
            assert_eq!(file_type(kind), expected);
        }
    }

    #[test]
    fn hostile_times_do_not_panic() {
        for sec in [i64::MAX, i64::MIN, 0, -1] {
            system_time(Timespec {
                sec,
                nsec: u32::MAX,
            });
        }
    }

    #[test]
    fn rename_flags_map_or_are_invalid() {
        assert_eq!(
            rename_flags(RenameFlags::empty()),
            Some(CoreRenameFlags::default())
        );
        assert_eq!(
            rename_flags(RenameFlags::RENAME_NOREPLACE),
            Some(CoreRenameFlags {
                noreplace: true,
                exchange: false
            })
        );
        assert_eq!(
            rename_flags(RenameFlags::RENAME_EXCHANGE),
            Some(CoreRenameFlags {
                noreplace: false,
                exchange: true
            })
        );
        assert_eq!(rename_flags(RenameFlags::RENAME_WHITEOUT), None);
        assert_eq!(
            rename_flags(RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE),
            None
        );
        assert_eq!(rename_flags(RenameFlags::from_bits_retain(1 << 20)), None);
    }

    #[test]
    fn writeback_cache_widens_write_only_opens() {
        let wo_append = libc::O_WRONLY | libc::O_APPEND;
        assert_eq!(core_open_flags(wo_append, false), wo_append);
        assert_eq!(
            core_open_flags(wo_append, true),
            libc::O_RDWR | libc::O_APPEND
        );
        let ro_trunc = libc::O_RDONLY | libc::O_TRUNC;
        assert_eq!(core_open_flags(ro_trunc, true), ro_trunc);
    }
}
