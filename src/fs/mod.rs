//! The file system core: POSIX operations over the log, the data device and the directory tree.

pub mod types;

pub use types::*;

use crate::device::BlockDevice;
use crate::Result;
use std::sync::Arc;
use std::time::Duration;

/// Mount-time settings.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Never write to either device; no recovery is written back (it happens in memory).
    pub read_only: bool,
    /// Budget for cached metadata (inodes, indirect blocks, tree nodes), bytes.
    pub cache_bytes: u64,
    /// How often dirty metadata is written to the log (bounds what a crash loses).
    pub flush_interval: Duration,
    /// How often a checkpoint is written (bounds recovery time).
    pub checkpoint_interval: Duration,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            cache_bytes: 256 << 20,
            flush_interval: Duration::from_secs(5),
            checkpoint_interval: Duration::from_secs(30),
        }
    }
}

/// A mounted DualFS. Every method takes `&self` and may be called from many threads.
pub struct Fs {
    _private: (),
}

#[allow(unused_variables)]
impl Fs {
    /// Open a formatted pair of devices: check superblocks and pairing, load the newest
    /// checkpoint, roll the log forward.
    pub fn mount(
        meta: Arc<dyn BlockDevice>,
        data: Arc<dyn BlockDevice>,
        opts: MountOptions,
    ) -> Result<Arc<Fs>> {
        todo!()
    }
    /// Write everything and a clean checkpoint. Later calls fail with EIO.
    pub fn unmount(&self) -> Result<()> {
        todo!()
    }
    /// Write everything and a checkpoint (sync(2)).
    pub fn sync(&self) -> Result<()> {
        todo!()
    }
    pub fn block_size(&self) -> u32 {
        todo!()
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        todo!()
    }
    /// The kernel dropped `n` references obtained by lookup/create/readdirplus.
    pub fn forget(&self, ino: u64, n: u64) {
        todo!()
    }
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        todo!()
    }
    pub fn setattr(&self, caller: &Caller, ino: u64, set: &SetAttr) -> Result<Attr> {
        todo!()
    }
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        todo!()
    }
    /// `mode` includes the file type bits; the caller already applied the umask.
    pub fn mknod(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
    ) -> Result<Attr> {
        todo!()
    }
    pub fn mkdir(&self, caller: &Caller, parent: u64, name: &[u8], mode: u32) -> Result<Attr> {
        todo!()
    }
    pub fn unlink(&self, caller: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        todo!()
    }
    pub fn rmdir(&self, caller: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        todo!()
    }
    pub fn symlink(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        target: &[u8],
    ) -> Result<Attr> {
        todo!()
    }
    pub fn rename(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        todo!()
    }
    pub fn link(
        &self,
        caller: &Caller,
        ino: u64,
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<Attr> {
        todo!()
    }
    /// Open an existing file; `flags` are the open(2) flags (O_TRUNC, O_APPEND honoured).
    /// Returns a handle for read/write/release.
    pub fn open(&self, caller: &Caller, ino: u64, flags: i32) -> Result<u64> {
        todo!()
    }
    /// Create and open a regular file (`mode` with the umask applied). With O_EXCL an existing
    /// name is EEXIST; without it an existing file is opened (and truncated with O_TRUNC).
    pub fn create(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> Result<(Attr, u64)> {
        todo!()
    }
    pub fn read(&self, ino: u64, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        todo!()
    }
    /// Returns the number of bytes written (all of `data` unless an error).
    pub fn write(&self, ino: u64, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        todo!()
    }
    /// close(2) of one descriptor: nothing to do for durability.
    pub fn flush(&self, ino: u64, fh: u64) -> Result<()> {
        todo!()
    }
    pub fn release(&self, ino: u64, fh: u64) -> Result<()> {
        todo!()
    }
    /// Make the file's data (and, unless `datasync`, its metadata) durable; its name too.
    pub fn fsync(&self, ino: u64, datasync: bool) -> Result<()> {
        todo!()
    }
    pub fn opendir(&self, caller: &Caller, ino: u64) -> Result<u64> {
        todo!()
    }
    pub fn releasedir(&self, ino: u64, fh: u64) -> Result<()> {
        todo!()
    }
    /// List entries after `offset` (0 = from the start; else a cookie returned earlier),
    /// "." and ".." included. `add` returns false when the caller's buffer is full; the entry
    /// it refused is returned again by the next call.
    pub fn readdir(
        &self,
        ino: u64,
        offset: u64,
        add: &mut dyn FnMut(&DirEntry) -> bool,
    ) -> Result<()> {
        todo!()
    }
    /// readdir that also returns each entry's attributes and counts a lookup for every entry
    /// accepted (except "." and "..").
    pub fn readdirplus(
        &self,
        ino: u64,
        offset: u64,
        add: &mut dyn FnMut(&DirEntry, &Attr) -> bool,
    ) -> Result<()> {
        todo!()
    }
    pub fn fsyncdir(&self, ino: u64, datasync: bool) -> Result<()> {
        todo!()
    }
    pub fn statfs(&self) -> Result<StatFs> {
        todo!()
    }
    /// access(2): `mask` is a combination of R_OK, W_OK, X_OK (or F_OK).
    pub fn access(&self, caller: &Caller, ino: u64, mask: i32) -> Result<()> {
        todo!()
    }
}
