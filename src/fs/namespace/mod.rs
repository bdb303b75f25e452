//! The namespace, a component of `Fs` (docs/DESIGN.md, "The components of Fs"):
//! the directory tree, the cached inodes and inode blocks, inode numbers, the kernel's
//! references, open handles and the lock that serializes renames between directories.
//!
//! The tree, the inode cache, the inode block cache and the kernel's references lock
//! themselves (their own methods are their interface, so the component hands them out); the
//! rest is behind the methods here. Where an inode is in the log and where a tree node is
//! (the inode map, the node map) is the log's to say: `Fs::inode` and `Fs::nodes` join the
//! two.

pub(super) mod dir;
pub(super) mod kernel_refs;
pub(super) mod rename;
#[cfg(test)]
mod tests;

use crate::betree::BeTree;
use crate::fs::inode::blockcache::BlockCache;
use crate::fs::inode::{InoAllocator, InodeCache};
use crate::fs::Handle;
use crate::lockcheck::{Mutex as NoIoMutex, Rank};
use foldhash::HashMap;
use kernel_refs::KernelRefs;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Handle number bits: writes go to the end of the file; it was opened with O_APPEND.
const HANDLE_APPEND: u64 = 1;
const HANDLE_OPENED_APPEND: u64 = 2;
/// A handle's sequence number (its number without the two bits above) holds the daemon's
/// incarnation from this bit on, the handle number from this plus two.
const HANDLE_SEQ_INCARNATION_SHIFT: u32 = 40;
const HANDLE_INCARNATION_SHIFT: u32 = HANDLE_SEQ_INCARNATION_SHIFT + 2;

pub(crate) struct Namespace {
    /// The directory tree (one Bε-tree for all directories; its state lock is `Rank::TREE`).
    pub(super) tree: BeTree,
    pub(super) inodes: InodeCache,
    /// Inode blocks recently read.
    pub(super) inode_blocks: BlockCache,
    /// The kernel's lookup counts: numbers it holds are not reused (kernel_refs.rs).
    pub(super) kernel_refs: KernelRefs,
    ino_alloc: NoIoMutex<InoAllocator>,
    /// Writes come from the kernel's write-back cache (`begin_kernel_session`): it positions
    /// O_APPEND writes and keeps mtime and ctime of regular files itself.
    writeback_cache: AtomicBool,
    handles: NoIoMutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    /// Renames between two directories, one at a time (`Rank::RENAME`).
    rename_lock: crate::lockcheck::Mutex<()>,
}

impl Namespace {
    /// `free` and `next_new`: the inode numbers the inode map leaves free.
    pub(crate) fn new(
        tree: BeTree,
        inode_block_cache: usize,
        free: Vec<u64>,
        next_new: u64,
    ) -> Namespace {
        Namespace {
            tree,
            inodes: InodeCache::default(),
            inode_blocks: BlockCache::new(inode_block_cache),
            kernel_refs: Default::default(),
            ino_alloc: NoIoMutex::new("ino_alloc", InoAllocator::new(free, next_new)),
            writeback_cache: AtomicBool::new(false),
            handles: NoIoMutex::new("handles", HashMap::default()),
            next_fh: AtomicU64::new(1),
            rename_lock: crate::lockcheck::Mutex::across_io("rename_lock", Rank::RENAME, 0, ()),
        }
    }

    // ---- Inode numbers (`InoAllocator`).

    /// The lowest free inode number, taken.
    pub(crate) fn alloc_ino(&self) -> Option<u64> {
        self.ino_alloc.lock().alloc()
    }

    /// Take `ino` if it is free (a replayed create).
    pub(crate) fn claim_exact_ino(&self, ino: u64) -> bool {
        self.ino_alloc.lock().claim_exact(ino)
    }

    /// Hand out none of the numbers free now (a successor's mount: `InoAllocator::set_aside_free`).
    pub(crate) fn set_aside_free_inos(&self) {
        self.ino_alloc.lock().set_aside_free();
    }

    /// `ino` is in use (mkfs, repair).
    pub(crate) fn claim_ino(&self, ino: u64) {
        self.ino_alloc.lock().claim(ino);
    }

    /// A number taken and not used after all: free again at once.
    pub(crate) fn give_back_ino(&self, ino: u64) {
        self.ino_alloc.lock().give_back(ino);
    }

    /// `ino` was freed: reusable once the transaction that frees it is snapshotted.
    pub(crate) fn hold_ino(&self, ino: u64) {
        self.ino_alloc.lock().hold(ino);
    }

    /// The numbers held back until now (the log writer's snapshot takes them).
    pub(crate) fn take_held_inos(&self) -> Vec<u64> {
        self.ino_alloc.lock().take_held()
    }

    /// The log writer's transaction that freed `inos` is durable: those the kernel does not
    /// hold are free to reuse now, the others once it forgets them (`unpark_ino`).
    pub(crate) fn release_inos(&self, inos: Vec<u64>) {
        self.ino_alloc.lock().transaction_durable(inos.len() as u64);
        let reusable: Vec<u64> = inos
            .into_iter()
            .filter(|&ino| !self.kernel_refs.park_if_held(ino))
            .collect();
        self.ino_alloc.lock().unpark(reusable);
    }

    /// The kernel forgot parked number `ino`: free to reuse now.
    pub(crate) fn unpark_ino(&self, ino: u64) {
        self.ino_alloc.lock().unpark([ino]);
    }

    /// Inode numbers in use now.
    pub(crate) fn inos_in_use(&self) -> u64 {
        self.ino_alloc.lock().in_use()
    }

    // ---- Open handles.

    // A handle's number says what it needs (`HANDLE_APPEND`, `HANDLE_OPENED_APPEND`) and which
    // daemon made it (the bits from `HANDLE_INCARNATION_SHIFT` on), so that the successor of a
    // dead daemon serves the handles the kernel got from it (`inherited_handle`).

    pub(crate) fn handle(&self, fh: u64) -> Option<Handle> {
        self.handles.lock().get(&fh).copied()
    }

    /// This daemon is the `incarnation`th to serve the kernel connection (0: the first):
    /// its handles never collide with its predecessors'.
    pub(crate) fn set_incarnation(&self, incarnation: u32) {
        self.next_fh.store(
            (u64::from(incarnation) << HANDLE_SEQ_INCARNATION_SHIFT) + 1,
            Ordering::Release,
        );
    }

    /// A handle a dead predecessor gave the kernel for `ino`, rebuilt from its number.
    pub(crate) fn inherited_handle(&self, fh: u64, ino: u64) -> Option<Handle> {
        let mine = self.next_fh.load(Ordering::Acquire) >> HANDLE_SEQ_INCARNATION_SHIFT;
        let made_by = fh >> HANDLE_INCARNATION_SHIFT;
        (self.kernel_refs.is_inherited() && fh != 0 && made_by < mine).then_some(Handle {
            ino,
            append: fh & HANDLE_APPEND != 0,
            opened_append: fh & HANDLE_OPENED_APPEND != 0,
        })
    }

    pub(crate) fn new_handle(&self, ino: u64, flags: i32) -> u64 {
        let seq = self.next_fh.fetch_add(1, Ordering::AcqRel);
        let opened_append = flags & libc::O_APPEND != 0;
        let handle = Handle {
            ino,
            append: opened_append && !self.writeback_cache.load(Ordering::Acquire),
            opened_append,
        };
        let fh = seq << 2
            | if handle.append { HANDLE_APPEND } else { 0 }
            | if opened_append {
                HANDLE_OPENED_APPEND
            } else {
                0
            };
        self.handles.lock().insert(fh, handle);
        fh
    }

    /// Close handle `fh`; None if there was none.
    pub(crate) fn remove_handle(&self, fh: u64) -> Option<Handle> {
        self.handles.lock().remove(&fh)
    }

    pub(crate) fn writeback_cache(&self) -> bool {
        self.writeback_cache.load(Ordering::Acquire)
    }

    pub(crate) fn set_writeback_cache(&self, on: bool) {
        self.writeback_cache.store(on, Ordering::Release);
    }

    /// Held by a rename between two directories: no other such rename changes the ancestry
    /// it checks meanwhile.
    pub(crate) fn lock_renames(&self) -> crate::lockcheck::Guard<parking_lot::MutexGuard<'_, ()>> {
        self.rename_lock.lock()
    }
}
