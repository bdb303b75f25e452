//! The kernel's references to inode numbers: FUSE lookup counts.
//!
//! Over FUSE an inode number is the kernel's node id. The kernel takes one reference to a
//! node id for every entry it is handed (the replies of lookup, create, mkdir, mknod, symlink
//! and link, and every readdirplus entry but "." and "..") and gives references back with
//! FORGET, at the latest when it evicts its inode. Until then the node id must keep naming the
//! same object: a freed number handed out again while the kernel still held it made the kernel
//! take the new object for the old one (same generation: an old dentry spliced in, a dead
//! directory in the new one's place, ESTALE from mkdir) or throw its old inode away (EIO for
//! whoever still used it).
//!
//! **Invariant**: an inode number with references is never handed out for a new inode. Each
//! reference is taken while the inode is seen alive under its state lock, and `destroy` (which
//! frees the number) takes that lock for writing, so a number is freed either before any
//! reference to it is taken (and then no entry names it any more) or with its references
//! already counted. The log writer hands freed numbers back to the allocator only through
//! `park_if_held`: a number the kernel holds is parked, and FORGET that brings its count to
//! zero returns it.
//!
//! Counting is on only while a kernel is the caller (`Fs::begin_kernel_session`): the core's
//! other callers (tests, fsck's repair sessions) take no references and forget nothing. A
//! mount starts with no references: the kernel of an earlier mount held none of this one's,
//! and FORGETs of the last session may never come. Memory is one small entry per number the
//! kernel holds, so it is bounded by the kernel's inode cache; a reference whose reply never
//! reached the kernel keeps its number out of reuse until unmount, nothing worse.

use crate::lockcheck::Mutex;
use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::{AtomicBool, Ordering};

const SHARDS: usize = 16;

/// What a FORGET did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Forgot {
    /// References are left (or none were counted).
    StillHeld,
    /// The last reference to a freed inode: its number is the caller's to return to the
    /// allocator.
    FreedNumber,
    /// The last reference to a live inode: if it was removed and kept for the kernel, it is
    /// the caller's to free.
    LastReference,
}

#[derive(Default)]
struct Held {
    count: u64,
    /// The inode was freed: the number goes back to the allocator at count zero.
    freed: bool,
    /// Inherited mode: the kernel's last FORGET came, so the kernel holds none (kept until
    /// the inode is freed and its number released, or found still linked).
    forgotten: bool,
}

pub(crate) struct KernelRefs {
    on: AtomicBool,
    /// A dead daemon's kernel connection was taken over: no count means "unknown".
    inherited: AtomicBool,
    /// References keep removed regular files alive (the kernel sends no OPEN).
    keep_files: AtomicBool,
    /// References keep removed directories alive (the kernel sends no OPENDIR).
    keep_dirs: AtomicBool,
    shards: [Mutex<HashMap<u64, Held>>; SHARDS],
}

impl Default for KernelRefs {
    fn default() -> Self {
        KernelRefs {
            on: AtomicBool::new(false),
            inherited: AtomicBool::new(false),
            keep_files: AtomicBool::new(false),
            keep_dirs: AtomicBool::new(false),
            shards: std::array::from_fn(|_| Mutex::new("kernel_refs", HashMap::new())),
        }
    }
}

impl KernelRefs {
    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, Held>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// From now on entries handed out are counted.
    pub fn enable(&self) {
        self.on.store(true, Ordering::Release);
    }

    /// This daemon took over a dead one's kernel connection: counting is on, and what the
    /// kernel held before is unknown (see the module's comment).
    pub fn inherit(&self) {
        self.inherited.store(true, Ordering::Release);
        self.enable();
    }

    pub fn is_inherited(&self) -> bool {
        self.inherited()
    }

    fn inherited(&self) -> bool {
        self.inherited.load(Ordering::Acquire)
    }

    /// From now on references keep removed regular files (`files`) and directories (`dirs`)
    /// alive: the kernel opens those without telling DualFS.
    pub fn keep_while_held(&self, files: bool, dirs: bool) {
        self.keep_files.store(files, Ordering::Release);
        self.keep_dirs.store(dirs, Ordering::Release);
    }

    /// Does the kernel open regular files without telling DualFS?
    pub fn files_opened_unseen(&self) -> bool {
        self.keep_files.load(Ordering::Acquire)
    }

    /// Does the kernel's hold on `ino`, an object of type `mode`, keep it alive once removed?
    /// The caller holds `ino`'s state lock, under which references are taken.
    pub fn keeps(&self, ino: u64, mode: u32) -> bool {
        let keep = match mode & libc::S_IFMT {
            libc::S_IFREG => &self.keep_files,
            libc::S_IFDIR => &self.keep_dirs,
            _ => return false,
        };
        if self.inherited() {
            return match self.shard(ino).lock().get(&ino) {
                Some(h) => h.count > 0 || !h.forgotten,
                None => true,
            };
        }
        keep.load(Ordering::Acquire)
            && self.on.load(Ordering::Acquire)
            && self
                .shard(ino)
                .lock()
                .get(&ino)
                .is_some_and(|h| h.count > 0)
    }

    /// One more reference to `ino`. The caller holds `ino`'s state lock and saw it alive.
    pub fn take(&self, ino: u64) {
        if !self.on.load(Ordering::Acquire) {
            return;
        }
        let mut s = self.shard(ino).lock();
        let held = s.entry(ino).or_default();
        assert!(!held.freed, "a kernel reference to freed inode {ino}");
        held.forgotten = false;
        held.count += 1;
    }

    /// The kernel gave `n` references to `ino` back.
    pub fn forget(&self, ino: u64, n: u64) -> Forgot {
        let inherited = self.inherited();
        let mut s = self.shard(ino).lock();
        let Some(held) = s.get_mut(&ino) else {
            if inherited {
                // Held since before the takeover: a FORGET is the kernel's last.
                s.insert(
                    ino,
                    Held {
                        forgotten: true,
                        ..Held::default()
                    },
                );
                return Forgot::LastReference;
            }
            return Forgot::StillHeld;
        };
        held.count = held.count.saturating_sub(n);
        if held.count > 0 {
            return Forgot::StillHeld;
        }
        if inherited && !held.freed {
            held.forgotten = true;
            return Forgot::LastReference;
        }
        match s.remove(&ino) {
            Some(h) if h.freed => Forgot::FreedNumber,
            _ => Forgot::LastReference,
        }
    }

    /// Inherited mode: `ino` outlived its last FORGET (it still has a name), so nothing about
    /// it needs remembering.
    pub fn settle(&self, ino: u64) {
        let mut s = self.shard(ino).lock();
        if s.get(&ino).is_some_and(|h| h.forgotten) {
            s.remove(&ino);
        }
    }

    /// `ino` was freed: true if the kernel still holds it, in which case the number stays out
    /// of reuse until `forget` returns it.
    pub fn park_if_held(&self, ino: u64) -> bool {
        let inherited = self.inherited();
        let mut s = self.shard(ino).lock();
        match s.get_mut(&ino) {
            Some(held) if held.forgotten => {
                s.remove(&ino);
                false
            }
            Some(held) => {
                held.freed = true;
                true
            }
            None if inherited => {
                // Unknown: the kernel may hold it since before the takeover.
                s.insert(
                    ino,
                    Held {
                        freed: true,
                        ..Held::default()
                    },
                );
                true
            }
            None => false,
        }
    }

    /// (numbers the kernel holds, of which freed ones waiting for its FORGET)
    pub fn counts(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(n, f), s| {
            let s = s.lock();
            (n + s.len(), f + s.values().filter(|h| h.freed).count())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_counted_until_enabled() {
        let r = KernelRefs::default();
        r.take(5);
        assert!(!r.park_if_held(5));
        assert_eq!(r.counts(), (0, 0));
    }

    #[test]
    fn a_freed_number_waits_for_the_last_forget() {
        let r = KernelRefs::default();
        r.enable();
        r.take(7);
        r.take(7);
        assert_eq!(
            r.forget(7, 1),
            Forgot::StillHeld,
            "one reference is left, nothing was freed"
        );
        assert!(r.park_if_held(7));
        assert_eq!(r.counts(), (1, 1));
        assert_eq!(
            r.forget(7, 1),
            Forgot::FreedNumber,
            "the last reference returns the freed number"
        );
        assert_eq!(r.counts(), (0, 0));
        assert_eq!(
            r.forget(7, 1),
            Forgot::StillHeld,
            "forgetting a number not held does nothing"
        );
    }

    #[test]
    fn a_number_no_longer_held_is_reusable_at_once() {
        let r = KernelRefs::default();
        r.enable();
        r.take(9);
        assert_eq!(
            r.forget(9, 5),
            Forgot::LastReference,
            "more forgotten than taken still ends at zero"
        );
        assert!(!r.park_if_held(9));
    }

    #[test]
    fn a_successor_takes_what_it_has_no_count_of_as_held() {
        let r = KernelRefs::default();
        r.inherit();
        // Held since before the takeover, as far as anyone knows: kept, and parked if freed.
        assert!(r.keeps(5, libc::S_IFREG | 0o644));
        assert!(r.keeps(6, libc::S_IFDIR | 0o755));
        assert!(
            r.park_if_held(7),
            "a freed number with no count waits for a FORGET"
        );
        assert_eq!(r.forget(7, 1), Forgot::FreedNumber);
        // The kernel's FORGET of a number with no count is its last.
        assert_eq!(r.forget(5, 2), Forgot::LastReference);
        assert!(!r.keeps(5, libc::S_IFREG), "forgotten: no longer held");
        assert!(!r.park_if_held(5), "forgotten and freed: reusable at once");
        assert_eq!(r.counts(), (0, 0));
        // Counted references work as ever; forgotten but still linked: nothing remembered.
        r.take(8);
        assert_eq!(r.forget(8, 1), Forgot::LastReference);
        r.settle(8);
        assert_eq!(r.counts(), (0, 0));
    }

    #[test]
    fn references_keep_only_the_kinds_the_kernel_opens_unseen() {
        let r = KernelRefs::default();
        r.enable();
        r.take(3);
        r.take(4);
        assert!(!r.keeps(3, libc::S_IFREG), "off until asked");
        r.keep_while_held(true, false);
        assert!(r.keeps(3, libc::S_IFREG | 0o644));
        assert!(
            !r.keeps(4, libc::S_IFDIR | 0o755),
            "directories are opened with OPENDIR"
        );
        assert!(!r.keeps(4, libc::S_IFLNK), "nothing opens a symlink");
        r.keep_while_held(false, true);
        assert!(r.keeps(4, libc::S_IFDIR));
        assert!(
            !r.keeps(5, libc::S_IFDIR),
            "a number not held keeps nothing"
        );
        assert_eq!(r.forget(4, 1), Forgot::LastReference);
        assert!(!r.keeps(4, libc::S_IFDIR));
    }
}
