//! The FUSE adapter: translates the session layer's requests (`crate::session`, either
//! transport) into calls on the core (`fs::Fs`) and the core's answers into replies. No file
//! system logic lives here.
//!
//! Permission checks are the kernel's job: the mount program always mounts with
//! `default_permissions`, so the core never sees a request the caller may not make.

use crate::fs::{
    Attr, Caller, DirEntry, FileKind, Fs, RenameFlags as CoreRenameFlags, SetAttr, SetTime,
    Timespec, Whence, XattrFlags, NO_HANDLE,
};
use crate::session::abi::{self, fattr, fopen, init_flags, AttrOut, EntryOut, OpenOut};
use crate::session::{
    Answer, Dispatch, InitConfig, Negotiated, Notifier, Operation, Reply, Request,
};
use crate::FsError;
use log::{debug, info, warn};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

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
    /// Largest write request, bytes; also the largest read request (INIT derives the
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
    /// removed directory while the kernel holds it (fs/namespace/kernel_refs.rs), so an open directory
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

impl FuseConfig {
    /// What to ask of the kernel at INIT.
    pub fn init_config(&self) -> InitConfig {
        let mut flags = [
            // The kernel enforces ACLs from system.posix_acl_*; DualFS keeps modes in step
            // with them, inherits default ACLs and so applies the umask itself.
            init_flags::POSIX_ACL,
            init_flags::DONT_MASK,
            init_flags::PARALLEL_DIROPS,
            init_flags::EXPORT_SUPPORT,
            init_flags::MAX_PAGES,
            init_flags::ASYNC_READ,
            init_flags::BIG_WRITES,
            // DualFS takes set-ID bits away on write, truncate and chown (fs/attrs/privileges.rs);
            // in return the kernel stops asking for security.capability before each write.
            init_flags::HANDLE_KILLPRIV_V2,
        ]
        .into_iter()
        .fold(0, |all, f| all | f);
        flags |= match self.readdirplus {
            Readdirplus::Never => 0,
            Readdirplus::Auto => init_flags::DO_READDIRPLUS | init_flags::READDIRPLUS_AUTO,
            Readdirplus::Always => init_flags::DO_READDIRPLUS,
        };
        if self.cache_symlinks {
            flags |= init_flags::CACHE_SYMLINKS;
        }
        if self.no_opendir_served() {
            flags |= init_flags::NO_OPENDIR_SUPPORT;
        }
        if self.no_open_served() {
            flags |= init_flags::NO_OPEN_SUPPORT;
        } else {
            // The core's open honours O_TRUNC. Not without OPEN: the kernel would then
            // truncate only its page cache (fuse_do_setattr skips the SETATTR of an
            // O_TRUNC open when the OPEN was to do it), so it sends the SETATTR instead.
            flags |= init_flags::ATOMIC_O_TRUNC;
        }
        if self.writeback_cache {
            flags |= init_flags::WRITEBACK_CACHE;
        }
        if self.direct_io {
            flags |= init_flags::DIRECT_IO_ALLOW_MMAP;
        }
        InitConfig {
            flags,
            max_write: self.max_write,
            max_background: self.max_background.max(1),
        }
    }

    fn no_opendir_served(&self) -> bool {
        self.dir_cache == DirCache::Kept && self.no_opendir
    }

    fn no_open_served(&self) -> bool {
        self.no_open && !self.direct_io
    }
}

/// A mounted `Fs` behind the session layer: each request becomes one call on the core,
/// whichever transport carried it.
pub struct DualFuse {
    fs: Arc<Fs>,
    config: FuseConfig,
    /// The session's channel for notifications to the kernel, set at INIT.
    notifier: OnceLock<Notifier>,
    /// Did the kernel grant FUSE_HANDLE_KILLPRIV_V2 (so that its KILL_SUIDGID flags say
    /// whether a truncating caller holds CAP_FSETID)? Set at INIT.
    killpriv: OnceLock<bool>,
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
            notifier: OnceLock::new(),
            killpriv: OnceLock::new(),
        };
        adapter
            .fs
            .kernel_opens_unseen(adapter.no_open(), adapter.no_opendir());
        adapter
    }

    /// What to ask of the kernel at INIT.
    pub fn init_config(&self) -> InitConfig {
        self.config.init_config()
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
            if let Err(e) = notifier.inval_inode(ino, 0, 0) {
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
            if let Err(e) = notifier.inval_inode(ino, -1, 0) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    warn!("cannot drop the kernel's attributes of inode {ino}: {e}");
                }
            }
        }
    }

    fn entry_out(&self, attr: &Attr) -> EntryOut {
        entry_out(attr, self.config.ttl)
    }

    fn entry(&self, reply: &mut Reply<'_>, result: crate::Result<Attr>, op: &str, ino: u64) {
        match result {
            Ok(attr) => reply.entry(&self.entry_out(&attr)),
            Err(e) => reply.error(errno(op, ino, &e)),
        }
    }

    fn attr(&self, reply: &mut Reply<'_>, result: crate::Result<Attr>, op: &str, ino: u64) {
        match result {
            Ok(attr) => reply.attr(&attr_out(&fuse_attr(&attr), self.config.ttl)),
            Err(e) => reply.error(errno(op, ino, &e)),
        }
    }

    fn killpriv(&self) -> bool {
        self.killpriv.get().copied().unwrap_or(false)
    }

    fn open_flags(&self, flags: u32) -> i32 {
        core_open_flags(flags as i32, self.config.writeback_cache)
    }

    /// The open flags of a directory handle.
    fn dir_fopen_flags(&self) -> u32 {
        match self.config.dir_cache {
            DirCache::Off => 0,
            DirCache::PerOpen => fopen::CACHE_DIR,
            DirCache::Kept => fopen::CACHE_DIR | fopen::KEEP_CACHE,
        }
    }

    /// Does opendir answer ENOSYS, so that the kernel opens directories by itself? Its
    /// handles then carry FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE, so only with kept listings.
    fn no_opendir(&self) -> bool {
        self.config.no_opendir_served()
    }

    /// Does open answer ENOSYS, so that the kernel opens regular files by itself? Not with
    /// direct I/O, which only an OPEN reply can ask for.
    fn no_open(&self) -> bool {
        self.config.no_open_served()
    }

    fn fopen_flags(&self) -> u32 {
        let mut f = 0;
        if self.config.direct_io {
            f |= fopen::DIRECT_IO;
        } else if self.config.keep_cache {
            f |= fopen::KEEP_CACHE;
        }
        // close(2) has nothing to do: the data reached DualFS (its cache or the device) when
        // write returned, and close promises no durability. Skipping FLUSH saves a round trip
        // per close (with a writeback cache the kernel needs it).
        if !self.config.writeback_cache {
            f |= fopen::NOFLUSH;
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

fn empty(reply: &mut Reply<'_>, result: crate::Result<()>, op: &str, ino: u64) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(op, ino, &e)),
    }
}

/// The errno for a core error; failures of the storage or the on-disk data are logged, since
/// the caller only sees EIO.
fn errno(op: &str, ino: u64, err: &FsError) -> i32 {
    let code = err.errno();
    if code == libc::EIO || matches!(err, FsError::Corrupt { .. }) {
        warn!("{op} (inode {ino}): {err}");
    } else {
        debug!("{op} (inode {ino}): {err}");
    }
    if code > 0 {
        code
    } else {
        libc::EIO
    }
}

fn caller(req: &Request<'_>) -> Caller {
    Caller {
        uid: req.header.uid,
        gid: req.header.gid,
        pid: req.header.pid,
        umask: 0,
        holds_fsetid: None,
    }
}

/// `FUSE_OPEN_KILL_SUIDGID` (`fuse_open_in::open_flags`, `fuse_create_in::open_flags`).
const OPEN_KILL_SUIDGID: u32 = 1 << 0;

/// The caller of an OPEN or CREATE: with O_TRUNC (and FUSE_HANDLE_KILLPRIV_V2, `killpriv`)
/// the kernel says whether the caller holds CAP_FSETID, which decides what the truncate
/// takes away.
fn opener(req: &Request<'_>, killpriv: bool, flags: u32, open_flags: u32, umask: u32) -> Caller {
    let truncates = killpriv && flags as i32 & libc::O_TRUNC != 0;
    Caller {
        umask: umask & 0o777,
        holds_fsetid: truncates.then_some(open_flags & OPEN_KILL_SUIDGID == 0),
        ..caller(req)
    }
}

/// The caller of a request that makes a node, with the umask the kernel sent: with
/// FUSE_DONT_MASK the kernel leaves it to the file system, which applies it only where the
/// directory has no default ACL.
fn caller_with_umask(req: &Request<'_>, umask: u32) -> Caller {
    Caller {
        umask: umask & 0o777,
        ..caller(req)
    }
}

/// Answer a getxattr or listxattr of `value` for a buffer of `size` bytes: the length for
/// the size probe (0), ERANGE when it does not fit.
fn reply_xattr(reply: &mut Reply<'_>, size: u32, value: &[u8]) {
    if size == 0 {
        reply.xattr_size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(libc::ERANGE);
    } else {
        reply.bytes(value);
    }
}

/// The `S_IFMT` bits of a kind.
fn kind_mode(kind: FileKind) -> u32 {
    match kind {
        FileKind::Regular => libc::S_IFREG,
        FileKind::Directory => libc::S_IFDIR,
        FileKind::Symlink => libc::S_IFLNK,
        FileKind::CharDevice => libc::S_IFCHR,
        FileKind::BlockDevice => libc::S_IFBLK,
        FileKind::Fifo => libc::S_IFIFO,
        FileKind::Socket => libc::S_IFSOCK,
    }
}

/// A directory entry's type (`DT_*`: the kind's `S_IFMT` bits shifted down).
fn dirent_type(kind: FileKind) -> u32 {
    kind_mode(kind) >> 12
}

/// A time as the kernel takes it: seconds (signed, sent as u64) and nanoseconds, the
/// nanoseconds clamped below a second (a corrupt inode could hold more).
fn kernel_time(t: Timespec) -> (u64, u32) {
    (t.sec as u64, t.nsec.min(999_999_999))
}

/// A time the kernel sent.
fn core_time(sec: u64, nsec: u32) -> Timespec {
    Timespec {
        sec: sec as i64,
        nsec: nsec.min(999_999_999),
    }
}

fn fuse_attr(attr: &Attr) -> abi::Attr {
    let (atime, atimensec) = kernel_time(attr.atime);
    let (mtime, mtimensec) = kernel_time(attr.mtime);
    let (ctime, ctimensec) = kernel_time(attr.ctime);
    abi::Attr {
        ino: attr.ino,
        size: attr.size,
        blocks: attr.blocks,
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: kind_mode(attr.kind) | u32::from(attr.perm),
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: attr.rdev,
        blksize: attr.blksize,
        flags: 0,
    }
}

/// STATX's answer: what GETATTR says, and the birth time.
fn statx_out(attr: &Attr, ttl: Duration) -> abi::StatxOut {
    let time = |t: Timespec| {
        let (sec, nsec) = kernel_time(t);
        abi::SxTime {
            tv_sec: sec as i64,
            tv_nsec: nsec,
            reserved: 0,
        }
    };
    let mode = kind_mode(attr.kind) | u32::from(attr.perm);
    abi::StatxOut {
        attr_valid: ttl.as_secs(),
        attr_valid_nsec: ttl.subsec_nanos(),
        stat: abi::Statx {
            mask: abi::statx::BASIC_STATS | abi::statx::BTIME,
            blksize: attr.blksize,
            nlink: attr.nlink,
            uid: attr.uid,
            gid: attr.gid,
            mode: mode as u16,
            ino: attr.ino,
            size: attr.size,
            blocks: attr.blocks,
            atime: time(attr.atime),
            btime: time(attr.crtime),
            attributes: statx_attributes(attr.flags),
            attributes_mask: statx_attributes(u32::MAX),
            ctime: time(attr.ctime),
            mtime: time(attr.mtime),
            rdev_major: libc::major(attr.rdev as libc::dev_t),
            rdev_minor: libc::minor(attr.rdev as libc::dev_t),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The `STATX_ATTR_*` bits of inode flags `flags`: immutable, append-only and nodump keep
/// their `FS_*_FL` values there (noatime has no statx bit).
fn statx_attributes(flags: u32) -> u64 {
    use crate::format::inode::{FLAG_APPEND, FLAG_IMMUTABLE, FLAG_NODUMP};
    u64::from(flags & (FLAG_IMMUTABLE | FLAG_APPEND | FLAG_NODUMP))
}

fn attr_out(attr: &abi::Attr, ttl: Duration) -> AttrOut {
    AttrOut {
        attr_valid: ttl.as_secs(),
        attr_valid_nsec: ttl.subsec_nanos(),
        dummy: 0,
        attr: *attr,
    }
}

fn entry_out(attr: &Attr, ttl: Duration) -> EntryOut {
    EntryOut {
        nodeid: attr.ino,
        generation: u64::from(attr.generation),
        entry_valid: ttl.as_secs(),
        attr_valid: ttl.as_secs(),
        entry_valid_nsec: ttl.subsec_nanos(),
        attr_valid_nsec: ttl.subsec_nanos(),
        attr: fuse_attr(attr),
    }
}

/// A negative lookup entry: node 0 tells the kernel the name is absent, for `ttl`.
fn negative_entry(ttl: Duration) -> EntryOut {
    EntryOut {
        nodeid: 0,
        generation: 0,
        entry_valid: ttl.as_secs(),
        attr_valid: ttl.as_secs(),
        entry_valid_nsec: ttl.subsec_nanos(),
        attr_valid_nsec: ttl.subsec_nanos(),
        attr: abi::Attr {
            mode: libc::S_IFREG,
            ..abi::Attr::default()
        },
    }
}

/// A time of a SETATTR: `now` when the kernel says so, else the time it sent.
fn set_time(now: bool, sec: u64, nsec: u32) -> SetTime {
    if now {
        SetTime::Now
    } else {
        SetTime::At(core_time(sec, nsec))
    }
}

/// renameat2 flags the core understands; anything else (RENAME_WHITEOUT, unknown bits, or
/// both NOREPLACE and EXCHANGE, which the kernel rejects too) is EINVAL.
fn rename_flags(flags: u32) -> Option<CoreRenameFlags> {
    let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE;
    if flags & !known != 0 || flags == known {
        return None;
    }
    Some(CoreRenameFlags {
        noreplace: flags & libc::RENAME_NOREPLACE != 0,
        exchange: flags & libc::RENAME_EXCHANGE != 0,
    })
}

fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// `FUSE_IOCTL_UNRESTRICTED`: an ioctl of CUSE, never sent for a file system's files.
const IOCTL_UNRESTRICTED: u32 = 1 << 1;

impl Dispatch for DualFuse {
    fn init(&self, negotiated: &Negotiated, notifier: Notifier) {
        let _ = self.notifier.set(notifier);
        let _ = self
            .killpriv
            .set(negotiated.has(init_flags::HANDLE_KILLPRIV_V2));
        let asked = self.init_config().flags;
        let refused = asked & !negotiated.flags;
        if refused & init_flags::WRITEBACK_CACHE != 0 {
            warn!("the kernel refused the writeback cache; writes go straight through");
        }
        if refused != 0 {
            debug!("the kernel refused INIT flags {refused:#x}");
        }
        info!(
            "FUSE session ready (kernel ABI 7.{}, ttl {:?}, writeback cache {}, max_write {})",
            negotiated.minor,
            self.config.ttl,
            negotiated.has(init_flags::WRITEBACK_CACHE),
            negotiated.max_write
        );
    }

    fn destroy(&self) {
        debug!("FUSE session ended");
    }

    fn dispatch(&self, req: &Request<'_>, reply: &mut Reply<'_>) {
        // The request's records in the intent log carry its id, without the resend bit.
        let id = req.unique() & !abi::UNIQUE_RESEND;
        let _request = RequestScope::enter(id);
        if req.unique() & abi::UNIQUE_RESEND != 0 {
            return self.serve_resent(req, id, reply);
        }
        self.serve(req, reply);
        die_if_asked(req);
    }
}

/// Does `errno` from a change done again say that it was done already? The kernel holds
/// the directory (for a rename, both) or the inode locked for the whole request, across the
/// resend, so nothing else made the name, removed it or set the attribute meanwhile: a create
/// that finds the name, or a removal that does not, meets what the dead worker did.
fn done_already(op: &Operation<'_>, errno: i32) -> bool {
    match op {
        Operation::Mknod { .. }
        | Operation::Mkdir { .. }
        | Operation::Symlink { .. }
        | Operation::Create { .. }
        | Operation::Link { .. }
        | Operation::Setxattr { .. } => errno == libc::EEXIST,
        Operation::Unlink { .. } | Operation::Rmdir { .. } | Operation::Rename { .. } => {
            errno == libc::ENOENT
        }
        Operation::Removexattr { .. } => errno == libc::ENODATA,
        _ => false,
    }
}

/// The test of resent requests (tests/worker_death.rs): with `DUALFS_TEST_DIE_AFTER=NAME`,
/// the daemon kills itself after doing an operation on an entry named NAME and before its
/// reply, as a kill -9 at the worst moment would (NAME: an entry's, or an attribute's).
fn die_if_asked(req: &Request<'_>) {
    static NAME: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    let Some(wanted) = NAME
        .get_or_init(|| std::env::var_os("DUALFS_TEST_DIE_AFTER").map(|v| v.into_encoded_bytes()))
    else {
        return;
    };
    let name = match req.op {
        Operation::Mknod { name, .. }
        | Operation::Mkdir { name, .. }
        | Operation::Symlink { name, .. }
        | Operation::Create { name, .. }
        | Operation::Unlink { name }
        | Operation::Rmdir { name }
        | Operation::Rename { name, .. }
        | Operation::Setxattr { name, .. }
        | Operation::Removexattr { name } => name,
        Operation::Link { newname, .. } => newname,
        _ => return,
    };
    if name == &wanted[..] {
        warn!("DUALFS_TEST_DIE_AFTER: dying after an operation on {wanted:?}, before its reply");
        // SAFETY: kill of this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

/// The FUSE request a thread serves, for the records of its operations (reset on drop).
struct RequestScope;

impl RequestScope {
    fn enter(id: u64) -> RequestScope {
        crate::intent::set_request(id);
        RequestScope
    }
}

impl Drop for RequestScope {
    fn drop(&mut self) {
        crate::intent::set_request(0);
    }
}

impl DualFuse {
    /// A request the kernel resent after the daemon before this one died (it may have been
    /// carried out with its reply lost). If the intent log shows it done, it is answered from
    /// what it did instead of being done twice; else it is done, and if that fails as the
    /// change done already fails (`done_already`: its record did not reach the intent log
    /// before the death, while a transaction held the change), it is answered as done too.
    /// Operations whose repetition changes nothing (writes, setattr, opens, copies,
    /// fallocate's modes) are simply done again.
    fn serve_resent(&self, req: &Request<'_>, id: u64, reply: &mut Reply<'_>) {
        let what = req.op.summary();
        if self.fs.answered_before(id) && self.answer_done(req, reply) {
            return info!(
                "request {id} ({what}) resent: the dead worker did it, answered from the \
                 intent log"
            );
        }
        self.serve(req, reply);
        if let Answer::Error(errno) = reply.answer() {
            if done_already(&req.op, errno) && self.answer_done(req, reply) {
                info!(
                    "request {id} ({what}) resent: done again it fails with errno {errno}, \
                     so the dead worker did it; answered as done"
                );
            }
        }
    }

    /// Answer `req` as done: a made entry from a lookup of its name (a create also opens
    /// it), a removal or an attribute change with success. False for other requests.
    fn answer_done(&self, req: &Request<'_>, reply: &mut Reply<'_>) -> bool {
        let ino = req.nodeid();
        match req.op {
            Operation::Mknod { name, .. }
            | Operation::Mkdir { name, .. }
            | Operation::Symlink { name, .. } => {
                self.entry(reply, self.fs.lookup(ino, name), "resent make", ino)
            }
            Operation::Link { newname, .. } => {
                self.entry(reply, self.fs.lookup(ino, newname), "resent link", ino)
            }
            Operation::Create { arg, name } => {
                let attr = match self.fs.lookup(ino, name) {
                    Ok(attr) => attr,
                    Err(e) => {
                        reply.error(errno("resent create", ino, &e));
                        return true;
                    }
                };
                let fh = if self.no_open() {
                    NO_HANDLE
                } else {
                    let who = opener(req, self.killpriv(), arg.flags, arg.open_flags, arg.umask);
                    // Made and truncated already: open it as it is.
                    let flags = self.open_flags(arg.flags)
                        & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
                    match self.fs.open(&who, attr.ino, flags) {
                        Ok(fh) => fh,
                        Err(e) => {
                            reply.error(errno("resent create", ino, &e));
                            return true;
                        }
                    }
                };
                let open = OpenOut {
                    fh,
                    open_flags: self.fopen_flags(),
                    backing_id: 0,
                };
                reply.create(&self.entry_out(&attr), &open);
            }
            Operation::Unlink { .. }
            | Operation::Rmdir { .. }
            | Operation::Rename { .. }
            | Operation::Setxattr { .. }
            | Operation::Removexattr { .. } => reply.ok(),
            _ => return false,
        }
        true
    }

    fn serve(&self, req: &Request<'_>, reply: &mut Reply<'_>) {
        let ino = req.nodeid();
        match req.op {
            Operation::Lookup { name } => match self.fs.lookup(ino, name) {
                // A negative entry (inode 0) lets the kernel remember that the name is
                // absent: compilers and shells probe many absent names. Creating the name
                // goes through the kernel, which drops the negative entry.
                Err(e) if e.errno() == libc::ENOENT && !self.config.ttl.is_zero() => {
                    reply.entry(&negative_entry(self.config.ttl))
                }
                result => self.entry(reply, result, "lookup", ino),
            },
            Operation::Forget(arg) => self.fs.forget(ino, arg.nlookup),
            Operation::BatchForget(list) => {
                for one in list.iter() {
                    self.fs.forget(one.nodeid, one.nlookup);
                }
            }
            Operation::Getattr(_) => self.attr(reply, self.fs.getattr(ino), "getattr", ino),
            Operation::Statx(_) => match self.fs.getattr(ino) {
                Ok(attr) => reply.statx(&statx_out(&attr, self.config.ttl)),
                Err(e) => reply.error(errno("statx", ino, &e)),
            },
            Operation::Setattr(arg) => self.setattr(req, &arg, reply),
            Operation::Readlink => match self.fs.readlink(ino) {
                Ok(target) => reply.bytes(&target),
                Err(e) => reply.error(errno("readlink", ino, &e)),
            },
            Operation::Symlink { name, target } => {
                let result = self.fs.symlink(&caller(req), ino, name, target);
                self.entry(reply, result, "symlink", ino);
            }
            Operation::Mknod { arg, name } => {
                let mode = (arg.mode & libc::S_IFMT) | (arg.mode & 0o7777);
                let who = caller_with_umask(req, arg.umask);
                let result = self.fs.mknod(&who, ino, name, mode, arg.rdev);
                self.entry(reply, result, "mknod", ino);
            }
            Operation::Mkdir { arg, name } => {
                let mode = libc::S_IFDIR | (arg.mode & 0o7777);
                let who = caller_with_umask(req, arg.umask);
                let result = self.fs.mkdir(&who, ino, name, mode);
                self.entry(reply, result, "mkdir", ino);
            }
            Operation::Unlink { name } => {
                let result = self.fs.unlink(&caller(req), ino, name);
                empty(reply, result, "unlink", ino);
            }
            Operation::Rmdir { name } => {
                let result = self.fs.rmdir(&caller(req), ino, name);
                empty(reply, result, "rmdir", ino);
            }
            Operation::Rename {
                newdir,
                flags,
                name,
                newname,
            } => self.rename(req, (name, newdir, newname), flags, reply),
            Operation::Link { arg, newname } => {
                let result = self.fs.link(&caller(req), arg.oldnodeid, ino, newname);
                self.entry(reply, result, "link", arg.oldnodeid);
            }
            Operation::Open(arg) => {
                // From this answer on the kernel opens files itself: O_TRUNC comes as a
                // SETATTR, and each write carries the descriptor's flags.
                if self.no_open() {
                    return reply.error(libc::ENOSYS);
                }
                let who = opener(req, self.killpriv(), arg.flags, arg.open_flags, 0);
                match self.fs.open(&who, ino, self.open_flags(arg.flags)) {
                    Ok(fh) => reply.open(&OpenOut {
                        fh,
                        open_flags: self.fopen_flags(),
                        backing_id: 0,
                    }),
                    Err(e) => reply.error(errno("open", ino, &e)),
                }
            }
            Operation::Create { arg, name } => self.create(req, &arg, Some(name), reply),
            Operation::Tmpfile { arg, .. } => self.create(req, &arg, None, reply),
            Operation::Read(arg) => match self.fs.read(ino, arg.fh, arg.offset, arg.size) {
                Ok(data) => reply.bytes(&data),
                Err(e) => reply.error(errno("read", ino, &e)),
            },
            Operation::Write { arg, data } => {
                // The kernel says whether the writer lacks CAP_FSETID (buffered and direct
                // writes).
                let writer = caller(req);
                let unprivileged =
                    (arg.write_flags & abi::WRITE_KILL_SUIDGID != 0).then_some(&writer);
                let written = self.fs.write_as(
                    ino,
                    arg.fh,
                    arg.flags as i32,
                    arg.offset,
                    data,
                    unprivileged,
                );
                match written {
                    Ok(written) => reply.written(written),
                    // With a writeback cache the kernel may write back pages of a file after
                    // its last name and handle went (and DualFS freed it): those bytes belong
                    // to nobody.
                    Err(e) if self.config.writeback_cache && e.errno() == libc::ENOENT => {
                        reply.written(data.len() as u32)
                    }
                    Err(e) => reply.error(errno("write", ino, &e)),
                }
            }
            Operation::Statfs => match self.fs.statfs() {
                Ok(s) => reply.statfs(&abi::Kstatfs {
                    blocks: s.blocks,
                    bfree: s.bfree,
                    bavail: s.bavail,
                    files: s.files,
                    ffree: s.ffree,
                    bsize: s.bsize,
                    namelen: s.namelen,
                    frsize: s.frsize,
                    ..abi::Kstatfs::default()
                }),
                Err(e) => reply.error(errno("statfs", ino, &e)),
            },
            Operation::Release(arg) => {
                // A file the kernel opened itself (the first one: the kernel learns of no-open
                // support from that OPEN's answer, and releases it; and files created
                // before).
                if arg.fh == NO_HANDLE && self.no_open() {
                    return reply.ok();
                }
                empty(reply, self.fs.release(ino, arg.fh), "release", ino);
            }
            Operation::Fsync(arg) => {
                let datasync = arg.fsync_flags & 1 != 0;
                empty(reply, self.fs.fsync(ino, datasync), "fsync", ino);
            }
            Operation::Setxattr { arg, name, value } => {
                // Unknown flags are the kernel's to refuse.
                let flags = arg.flags as i32;
                if flags & !(libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
                    return reply.error(libc::EINVAL);
                }
                let flags = XattrFlags {
                    create: flags & libc::XATTR_CREATE != 0,
                    replace: flags & libc::XATTR_REPLACE != 0,
                };
                let result = self.fs.setxattr(&caller(req), ino, name, value, flags);
                empty(reply, result, "setxattr", ino);
            }
            Operation::Getxattr { arg, name } => {
                let who = caller(req);
                if arg.size == 0 {
                    // The size probe (the kernel's security.capability check before writes
                    // is one): answered from the record, or from the inode's flags alone.
                    return match self.fs.getxattr_len(&who, ino, name) {
                        Ok(len) => reply.xattr_size(len as u32),
                        Err(e) => reply.error(errno("getxattr", ino, &e)),
                    };
                }
                match self.fs.getxattr(&who, ino, name) {
                    Ok(value) => reply_xattr(reply, arg.size, &value),
                    Err(e) => reply.error(errno("getxattr", ino, &e)),
                }
            }
            Operation::Listxattr(arg) => match self.fs.listxattr(&caller(req), ino) {
                Ok(names) => reply_xattr(reply, arg.size, &names),
                Err(e) => reply.error(errno("listxattr", ino, &e)),
            },
            Operation::Removexattr { name } => {
                let result = self.fs.removexattr(&caller(req), ino, name);
                empty(reply, result, "removexattr", ino);
            }
            // Data has reached DualFS when a write returns, so a close has nothing to flush:
            // ENOSYS makes the kernel stop sending FLUSH (it is only sent at all with a
            // writeback cache; without one, files are opened with FOPEN_NOFLUSH). Errors
            // still surface.
            Operation::Flush(arg) => match self.fs.flush(ino, arg.fh) {
                Ok(()) => reply.error(libc::ENOSYS),
                Err(e) => reply.error(errno("flush", ino, &e)),
            },
            Operation::Opendir(_) => {
                // The kernel checked the permissions and that it is a directory; from this
                // answer on it opens directories itself (and sends no RELEASEDIR).
                if self.no_opendir() {
                    return reply.error(libc::ENOSYS);
                }
                match self.fs.opendir(&caller(req), ino) {
                    Ok(fh) => reply.open(&OpenOut {
                        fh,
                        open_flags: self.dir_fopen_flags(),
                        backing_id: 0,
                    }),
                    Err(e) => reply.error(errno("opendir", ino, &e)),
                }
            }
            Operation::Readdir(arg) => self.readdir(ino, &arg, reply),
            Operation::Readdirplus(arg) => self.readdirplus(ino, &arg, reply),
            Operation::Releasedir(arg) => {
                empty(reply, self.fs.releasedir(ino, arg.fh), "releasedir", ino)
            }
            Operation::Fsyncdir(arg) => {
                let datasync = arg.fsync_flags & 1 != 0;
                empty(reply, self.fs.fsyncdir(ino, datasync), "fsyncdir", ino);
            }
            // Inode flags and FS_IOC_SHUTDOWN (`crate::ioctl`).
            Operation::Ioctl { arg, data } => {
                if arg.flags & IOCTL_UNRESTRICTED != 0 {
                    return reply.error(libc::ENOSYS);
                }
                let result =
                    crate::ioctl::ioctl(&self.fs, &caller(req), ino, arg.cmd, data, arg.out_size);
                match result {
                    Ok(out) => {
                        if crate::ioctl::changes_attributes(arg.cmd) {
                            self.attributes_changed(ino);
                        }
                        reply.ioctl(0, &out)
                    }
                    Err(e) => reply.error(errno("ioctl", ino, &e)),
                }
            }
            Operation::Fallocate(arg) => {
                let result = self.fs.fallocate_as(
                    &caller(req),
                    ino,
                    arg.fh,
                    arg.offset,
                    arg.length,
                    arg.mode as i32,
                );
                empty(reply, result, "fallocate", ino);
            }
            Operation::Lseek(arg) => self.lseek(ino, &arg, reply),
            Operation::CopyFileRange(arg) => {
                let result = self.fs.copy_file_range_as(
                    &caller(req),
                    ino,
                    arg.fh_in,
                    arg.off_in,
                    arg.nodeid_out,
                    arg.fh_out,
                    arg.off_out,
                    arg.len,
                    u32::try_from(arg.flags).unwrap_or(u32::MAX),
                );
                match result {
                    // The core copies at most COPY_MAX bytes, which fits.
                    Ok(n) => reply.written(n as u32),
                    Err(e) => reply.error(errno("copy_file_range", ino, &e)),
                }
            }
            // With default_permissions the kernel checks access itself and sends no ACCESS;
            // SYNCFS only comes where the file system asked for it (virtiofs). ENOSYS stops
            // either for the rest of the mount.
            Operation::Access(_) | Operation::Syncfs => reply.error(libc::ENOSYS),
            // The session answers these itself.
            Operation::Init(_)
            | Operation::Destroy
            | Operation::Interrupt(_)
            | Operation::Unknown(_) => reply.error(libc::ENOSYS),
        }
    }
}

impl DualFuse {
    fn setattr(&self, req: &Request<'_>, arg: &abi::SetattrIn, reply: &mut Reply<'_>) {
        let ino = req.nodeid();
        let valid = arg.valid;
        let has = |bit: u32| valid & bit != 0;
        let set = SetAttr {
            // chmod changes permission bits only; the kernel sends the whole st_mode.
            mode: has(fattr::MODE).then_some(arg.mode & 0o7777),
            uid: has(fattr::UID).then_some(arg.uid),
            gid: has(fattr::GID).then_some(arg.gid),
            size: has(fattr::SIZE).then_some(arg.size),
            atime: has(fattr::ATIME)
                .then(|| set_time(has(fattr::ATIME_NOW), arg.atime, arg.atimensec)),
            mtime: has(fattr::MTIME)
                .then(|| set_time(has(fattr::MTIME_NOW), arg.mtime, arg.mtimensec)),
            ctime: has(fattr::CTIME).then(|| core_time(arg.ctime, arg.ctimensec)),
        };
        // A truncate: the kernel says whether the caller holds CAP_FSETID.
        let who = Caller {
            holds_fsetid: set
                .size
                .filter(|_| self.killpriv())
                .map(|_| !has(fattr::KILL_SUIDGID)),
            ..caller(req)
        };
        let result = self.fs.setattr(&who, ino, &set);
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
                let now = || kernel_time(Timespec::now());
                let (mtime, mtimensec) = match set.mtime {
                    Some(SetTime::At(t)) => kernel_time(t),
                    _ => now(),
                };
                let (ctime, ctimensec) = match set.ctime {
                    Some(t) => kernel_time(t),
                    None => (mtime, mtimensec),
                };
                let dead = abi::Attr {
                    ino,
                    mode: libc::S_IFREG,
                    mtime,
                    mtimensec,
                    ctime,
                    ctimensec,
                    ..abi::Attr::default()
                };
                return reply.attr(&attr_out(&dead, Duration::ZERO));
            }
        }
        self.attr(reply, result, "setattr", ino);
    }

    fn rename(
        &self,
        req: &Request<'_>,
        (name, newparent, newname): (&[u8], u64, &[u8]),
        flags: u32,
        reply: &mut Reply<'_>,
    ) {
        let parent = req.nodeid();
        let Some(flags) = rename_flags(flags) else {
            return reply.error(libc::EINVAL);
        };
        // The kernel holds both parents locked: the names stay what they are until the reply.
        let moved = if parent != newparent {
            let exchanged = if flags.exchange {
                self.subdirectory(newparent, newname)
            } else {
                None
            };
            [self.subdirectory(parent, name), exchanged]
        } else {
            [None, None]
        };
        let result = self
            .fs
            .rename(&caller(req), parent, name, newparent, newname, flags);
        if result.is_ok() {
            moved
                .into_iter()
                .flatten()
                .for_each(|ino| self.moved_directory(ino));
        }
        empty(reply, result, "rename", parent);
    }

    /// CREATE, or with no name TMPFILE (open(2) with O_TMPFILE).
    fn create(
        &self,
        req: &Request<'_>,
        arg: &abi::CreateIn,
        name: Option<&[u8]>,
        reply: &mut Reply<'_>,
    ) {
        let parent = req.nodeid();
        let mode = libc::S_IFREG | (arg.mode & 0o7777);
        let flags = self.open_flags(arg.flags);
        let who = opener(req, self.killpriv(), arg.flags, arg.open_flags, arg.umask);
        let made = match name {
            Some(name) => self.fs.create(&who, parent, name, mode, flags),
            None => self.fs.tmpfile(&who, parent, mode, flags),
        };
        match made {
            Ok((attr, fh)) => {
                // Without OPEN the kernel sends no RELEASE for a created file either: the
                // handle goes at once and the kernel's reference keeps the file (it counts
                // the entry of this reply).
                let fh = if self.no_open() {
                    if let Err(e) = self.fs.release(attr.ino, fh) {
                        return reply.error(errno("create", parent, &e));
                    }
                    NO_HANDLE
                } else {
                    fh
                };
                let open = OpenOut {
                    fh,
                    open_flags: self.fopen_flags(),
                    backing_id: 0,
                };
                let mut entry = self.entry_out(&attr);
                if name.is_none() {
                    // The kernel takes one link off what it is told (d_tmpfile): an inode
                    // made with none is said to have one.
                    debug_assert_eq!(entry.attr.nlink, 0, "a new unnamed file has no link");
                    entry.attr.nlink = 1;
                }
                reply.create(&entry, &open)
            }
            Err(e) => reply.error(errno("create", parent, &e)),
        }
    }

    fn readdir(&self, ino: u64, arg: &abi::ReadIn, reply: &mut Reply<'_>) {
        let mut dir = reply.dir(arg.size);
        let mut accepted = 0usize;
        let result = {
            let mut add = |entry: &DirEntry| {
                let fits = dir.add(
                    entry.ino,
                    entry.cookie,
                    dirent_type(entry.kind),
                    &entry.name,
                );
                accepted += usize::from(fits);
                fits
            };
            self.fs.readdir(ino, arg.offset, &mut add)
        };
        match result {
            Ok(()) => dir.finish(),
            // Hand out what was listed; the kernel asks again from the last cookie.
            Err(e) if accepted > 0 => {
                errno("readdir", ino, &e);
                dir.finish()
            }
            Err(e) => reply.error(errno("readdir", ino, &e)),
        }
    }

    fn readdirplus(&self, ino: u64, arg: &abi::ReadIn, reply: &mut Reply<'_>) {
        // The kernel counts a lookup for every entry in the reply except "." and ".."
        // (even those that no longer fit the reader's buffer), and so does the core for every
        // entry `add` accepts. So every accepted entry must reach the kernel: on a later
        // error the entries gathered so far are still sent.
        let ttl = self.config.ttl;
        let mut dir = reply.dir(arg.size);
        let mut counted = 0usize;
        let result = {
            let mut add = |entry: &DirEntry, attr: &Attr| {
                let out = entry_out(attr, ttl);
                let fits = dir.add_plus(&out, entry.cookie, dirent_type(entry.kind), &entry.name);
                if fits && !is_dot_or_dotdot(&entry.name) {
                    counted += 1;
                }
                fits
            };
            self.fs.readdirplus(ino, arg.offset, &mut add)
        };
        match result {
            Ok(()) => dir.finish(),
            Err(e) if counted > 0 => {
                errno("readdirplus", ino, &e);
                dir.finish()
            }
            Err(e) => reply.error(errno("readdirplus", ino, &e)),
        }
    }

    fn lseek(&self, ino: u64, arg: &abi::LseekIn, reply: &mut Reply<'_>) {
        // With a writeback cache the kernel asks without writing its dirty pages back first:
        // the block map would call them holes. ENOSYS makes it answer from the size alone
        // (all data) for the rest of the mount, which is never wrong.
        if self.config.writeback_cache {
            return reply.error(libc::ENOSYS);
        }
        let whence = match arg.whence as i32 {
            libc::SEEK_DATA => Whence::Data,
            libc::SEEK_HOLE => Whence::Hole,
            _ => return reply.error(libc::EINVAL),
        };
        // The kernel sends the offset as a u64 of a signed loff_t.
        let Ok(offset) = u64::try_from(arg.offset as i64) else {
            return reply.error(libc::ENXIO); // as ext4 and XFS answer a negative offset
        };
        match self.fs.seek(ino, offset, whence) {
            Ok(at) => reply.lseek(at),
            Err(e) => reply.error(errno("lseek", ino, &e)),
        }
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
            flags: crate::format::inode::FLAG_APPEND | crate::format::inode::FLAG_NOATIME,
        }
    }

    #[test]
    fn attr_converts_field_by_field() {
        let a = fuse_attr(&attr(FileKind::Symlink));
        assert_eq!(a.ino, 42);
        assert_eq!(a.mode, libc::S_IFLNK | 0o4755);
        assert_eq!((a.nlink, a.uid, a.gid), (3, 1000, 100));
        assert_eq!(
            (a.rdev, a.size, a.blocks, a.blksize, a.flags),
            (0x0801, 12345, 32, 4096, 0)
        );
        assert_eq!((a.atime, a.atimensec), (1, 2));
        assert_eq!((a.mtime, a.mtimensec), (3, 4));
        // Before 1970: the seconds are negative, the nanoseconds count forward from them.
        assert_eq!((a.ctime as i64, a.ctimensec), (-5, 6));
        let e = entry_out(&attr(FileKind::Regular), Duration::from_millis(1500));
        assert_eq!((e.nodeid, e.generation), (42, 7));
        assert_eq!((e.entry_valid, e.entry_valid_nsec), (1, 500_000_000));
        assert_eq!((e.attr_valid, e.attr_valid_nsec), (1, 500_000_000));
    }

    #[test]
    fn statx_converts_field_by_field_with_the_birth_time() {
        let x = statx_out(&attr(FileKind::CharDevice), Duration::from_millis(1500));
        assert_eq!((x.attr_valid, x.attr_valid_nsec), (1, 500_000_000));
        let s = x.stat;
        assert_eq!(s.mask, abi::statx::BASIC_STATS | abi::statx::BTIME);
        assert_eq!(u32::from(s.mode), libc::S_IFCHR | 0o4755);
        assert_eq!((s.ino, s.nlink, s.uid, s.gid), (42, 3, 1000, 100));
        assert_eq!((s.size, s.blocks, s.blksize), (12345, 32, 4096));
        assert_eq!((s.rdev_major, s.rdev_minor), (8, 1));
        assert_eq!((s.atime.tv_sec, s.atime.tv_nsec), (1, 2));
        assert_eq!((s.mtime.tv_sec, s.mtime.tv_nsec), (3, 4));
        assert_eq!((s.ctime.tv_sec, s.ctime.tv_nsec), (-5, 6));
        assert_eq!((s.btime.tv_sec, s.btime.tv_nsec), (7, 8));
        assert_eq!((s.attributes, s.attributes_mask), (0x20, 0x70));
    }

    #[test]
    fn every_kind_has_a_dirent_type() {
        for code in 1..=7 {
            let kind = FileKind::from_code(code).unwrap();
            let expected = match kind {
                FileKind::Regular => libc::DT_REG,
                FileKind::Directory => libc::DT_DIR,
                FileKind::Symlink => libc::DT_LNK,
                FileKind::CharDevice => libc::DT_CHR,
                FileKind::BlockDevice => libc::DT_BLK,
                FileKind::Fifo => libc::DT_FIFO,
                FileKind::Socket => libc::DT_SOCK,
            };
            assert_eq!(dirent_type(kind), u32::from(expected));
        }
    }

    #[test]
    fn hostile_times_are_clamped() {
        for sec in [i64::MAX, i64::MIN, 0, -1] {
            let (s, ns) = kernel_time(Timespec {
                sec,
                nsec: u32::MAX,
            });
            assert_eq!((s as i64, ns), (sec, 999_999_999));
        }
        assert_eq!(
            core_time(-3i64 as u64, 2_000_000_000),
            Timespec {
                sec: -3,
                nsec: 999_999_999
            }
        );
    }

    #[test]
    fn rename_flags_map_or_are_invalid() {
        assert_eq!(rename_flags(0), Some(CoreRenameFlags::default()));
        assert_eq!(
            rename_flags(libc::RENAME_NOREPLACE),
            Some(CoreRenameFlags {
                noreplace: true,
                exchange: false
            })
        );
        assert_eq!(
            rename_flags(libc::RENAME_EXCHANGE),
            Some(CoreRenameFlags {
                noreplace: false,
                exchange: true
            })
        );
        assert_eq!(rename_flags(libc::RENAME_WHITEOUT), None);
        assert_eq!(
            rename_flags(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE),
            None
        );
        assert_eq!(rename_flags(1 << 20), None);
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

    #[test]
    fn init_asks_for_what_the_options_say() {
        let flags = |config: FuseConfig| config.init_config().flags;
        let default = flags(FuseConfig::default());
        assert_eq!(default, InitConfig::DUALFS_DEFAULT_FLAGS);
        let wb = flags(FuseConfig {
            writeback_cache: true,
            ..FuseConfig::default()
        });
        assert_eq!(wb, default | init_flags::WRITEBACK_CACHE);
        let no_open = flags(FuseConfig {
            no_open: true,
            ..FuseConfig::default()
        });
        assert_eq!(
            no_open,
            (default & !init_flags::ATOMIC_O_TRUNC) | init_flags::NO_OPEN_SUPPORT
        );
        let dio = flags(FuseConfig {
            direct_io: true,
            no_open: true,
            dir_cache: DirCache::Off,
            readdirplus: Readdirplus::Never,
            ..FuseConfig::default()
        });
        assert_eq!(dio & init_flags::NO_OPEN_SUPPORT, 0);
        assert_eq!(dio & init_flags::NO_OPENDIR_SUPPORT, 0);
        assert_eq!(dio & init_flags::DO_READDIRPLUS, 0);
        assert_ne!(dio & init_flags::DIRECT_IO_ALLOW_MMAP, 0);
    }
}
