//! Locks that must never be held across device I/O, and the check that they are not.
//!
//! Lookups, getattr, reads and readdir may wait only for locks that are held for memory work
//! (docs/DESIGN.md, "Locks"). Those locks are the `Mutex` and `RwLock` of this module: thin
//! wrappers over parking_lot's whose guards count, per thread, how many of them the thread
//! holds. The device fence (`device::fence`, which every read, write and flush of a mounted
//! file system passes) calls `assert_no_io_locks` first, so a thread doing I/O under such a
//! lock is caught where it happens, not when some reader stalls behind it.
//!
//! The count is always kept (a thread-local add and subtract per lock). What a violation does
//! depends on the build: in unit tests (`cfg(test)`) and with the `lockcheck` feature (which
//! the package's own dev-dependency on itself turns on for integration tests and the binaries
//! they run) it panics; otherwise, in a mount, it logs an error and goes on, because a slow
//! operation is no reason to kill a mount.

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A lock's place in the lock order: its row in docs/DESIGN.md's table ("Locks"). A thread
/// may take a lock only while every lock it holds has a lower rank; locks of one rank are
/// never nested, except inode `op` locks, taken in ascending inode order (`Rank::INODE_OP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rank(pub u8);

impl Rank {
    /// `cleaner.room`: one attempt at a time to make room.
    pub const ROOM: Rank = Rank(1);
    /// `cleaning`: one cleaning pass at a time.
    pub const CLEANING: Rank = Rank(2);
    /// `rename_lock`: renames between two directories.
    pub const RENAME: Rank = Rank(3);
    /// An inode's `op` lock; several only in ascending inode order.
    pub const INODE_OP: Rank = Rank(4);
    /// `flusher`: the log writer (an operation may write the log under its `op` locks).
    pub const FLUSHER: Rank = Rank(5);
    /// The gate, shared or exclusive.
    pub const GATE: Rank = Rank(6);
    /// The Bε-tree's state lock.
    pub const TREE: Rank = Rank(8);
    /// An inode's `state` lock (one at a time).
    pub const INODE_STATE: Rank = Rank(9);
    /// The IFile (inode map and segment usage), first of the three tables: applying a
    /// transaction or a checkpoint holds all three, taken in this order.
    pub const IFILE: Rank = Rank(10);
    /// The node map.
    pub const NODE_MAP: Rank = Rank(11);
    /// The data bitmaps, which the data allocator takes alone.
    pub const DATA_MAP: Rank = Rank(12);
    /// The leaves: maps, caches, counters; none is taken while another is held.
    pub const LEAF: Rank = Rank(13);
    /// A device fence's `cut`, held shared by each write and flush while it runs (across the
    /// I/O, by design): taken last, under whatever the writing thread holds, and nothing is
    /// taken under it.
    pub const FENCE: Rank = Rank(14);
}

/// Whether this build checks the lock order (debug builds, unit tests, the `lockcheck`
/// feature): it keeps, per thread, the locks held in the order taken.
const ORDER_CHECKED: bool = cfg!(any(debug_assertions, test, feature = "lockcheck"));

/// One lock a thread holds, for the order check: which lock (its address), its rank, its
/// key (the inode of a per-inode lock, else 0) and its name.
#[derive(Clone, Copy)]
struct Taken {
    lock: usize,
    rank: Rank,
    key: u64,
    name: &'static str,
}

thread_local! {
    /// No-I/O locks this thread holds, and the name of the first one it took.
    static HELD: Cell<(u32, &'static str)> = const { Cell::new((0, "")) };
    /// Shared holds of the gate by this thread; how often it took the gate, and how many
    /// device accesses it made while holding it shared (for tests: `gate_counts`).
    static GATE: Cell<(u32, u64, u64)> = const { Cell::new((0, 0, 0)) };
    /// Exclusive holds of the gate by this thread; how many inodes it encoded, and how many
    /// of those under an exclusive hold (for tests: `inode_encode_counts`).
    static EXCLUSIVE: Cell<(u32, u64, u64)> = const { Cell::new((0, 0, 0)) };
    /// Log addresses this thread gave dirty blocks, and how many of those under an exclusive
    /// hold of the gate (for tests: `placement_counts`).
    static PLACED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// Dirty tree nodes this thread handed to the log writer (`NodeCache::capture`), and how
    /// many of those under an exclusive hold of the gate (for tests: `node_capture_counts`).
    static CAPTURED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// Inode state locks this thread took, and how many of those under an exclusive hold of
    /// the gate (for tests: `inode_state_counts`).
    static STATES: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// Every ranked lock this thread holds, in the order taken (only if `ORDER_CHECKED`).
    static ORDER: RefCell<Vec<Taken>> = const { RefCell::new(Vec::new()) };
}

/// Which lock is being taken, for the order check and the no-I/O count.
#[derive(Clone, Copy)]
struct Site {
    lock: usize,
    rank: Rank,
    key: u64,
    name: &'static str,
    /// Never held across I/O: counted, and the device fence refuses I/O under it.
    no_io: bool,
}

impl Site {
    /// Panics if taking this lock now could deadlock against the order: some lock the thread
    /// holds ranks at or after it (and is not a lower-numbered inode `op` lock). A `try_`
    /// acquisition is not checked: it cannot wait, so it cannot close a cycle.
    #[track_caller]
    fn check_order(&self) {
        if !ORDER_CHECKED {
            return;
        }
        let bad = ORDER.with(|o| o.borrow().iter().find(|t| !may_follow(t, self)).copied());
        if let Some(t) = bad {
            panic!(
                "lock order: taking {} (rank {}, key {}) while holding {} (rank {}, key {})",
                self.name, self.rank.0, self.key, t.name, t.rank.0, t.key
            );
        }
    }
}

/// May a thread holding `held` take `next`?
fn may_follow(held: &Taken, next: &Site) -> bool {
    held.rank < next.rank
        || (held.rank == next.rank
            && next.rank == Rank::INODE_OP
            && held.key < next.key
            && held.lock != next.lock)
}

/// One lock held by this thread for as long as it lives (dropped after the lock's own
/// guard: it is the last field of `Guard`).
struct Held {
    lock: usize,
    no_io: bool,
}

impl Held {
    fn new(site: Site) -> Held {
        if site.rank == Rank::INODE_STATE {
            count_event(&STATES);
        }
        if site.no_io {
            HELD.with(|h| {
                let (n, first) = h.get();
                h.set((n + 1, if n == 0 { site.name } else { first }));
            });
        }
        if ORDER_CHECKED {
            ORDER.with(|o| {
                o.borrow_mut().push(Taken {
                    lock: site.lock,
                    rank: site.rank,
                    key: site.key,
                    name: site.name,
                })
            });
        }
        Held {
            lock: site.lock,
            no_io: site.no_io,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.no_io {
            HELD.with(|h| {
                let (n, first) = h.get();
                debug_assert!(n > 0, "lockcheck count underflow");
                h.set((n.saturating_sub(1), if n <= 1 { "" } else { first }));
            });
        }
        if ORDER_CHECKED {
            // `try_with`: a guard may be dropped while the thread's locals are torn down.
            let _ = ORDER.try_with(|o| {
                let mut o = o.borrow_mut();
                // Released in any order; the same lock is held at most once (shared holds
                // of one lock by one thread are an order violation).
                if let Some(i) = o.iter().rposition(|t| t.lock == self.lock) {
                    o.remove(i);
                }
            });
        }
    }
}

/// How many no-I/O locks the calling thread holds, and the name of the first it took.
pub fn held() -> (u32, &'static str) {
    HELD.with(|h| h.get())
}

/// The ranked locks the calling thread holds, by name, in the order taken (empty in a
/// build that does not check the order).
pub fn held_in_order() -> Vec<&'static str> {
    ORDER.with(|o| o.borrow().iter().map(|t| t.name).collect())
}

/// How many locks of `rank` the calling thread holds (0 in a build that does not check the
/// order).
pub fn held_of_rank(rank: Rank) -> usize {
    if !ORDER_CHECKED {
        return 0;
    }
    ORDER.with(|o| o.borrow().iter().filter(|t| t.rank == rank).count())
}

/// Violations seen by a build that does not panic (logged, the first few in full).
static VIOLATIONS: AtomicU64 = AtomicU64::new(0);

/// Violations seen so far by a build that logs them instead of panicking.
pub fn violations() -> u64 {
    VIOLATIONS.load(Ordering::Relaxed)
}

/// The calling thread is about to do device I/O (`what`): it must hold no no-I/O lock.
#[track_caller]
pub fn assert_no_io_locks(what: &str) {
    GATE.with(|g| {
        let (held, taken, io) = g.get();
        if held > 0 {
            g.set((held, taken, io + 1));
        }
    });
    let (n, first) = held();
    if n == 0 {
        return;
    }
    if cfg!(any(test, feature = "lockcheck")) {
        panic!("{what} while holding {n} lock(s) never held across I/O (first taken: {first})");
    }
    if VIOLATIONS.fetch_add(1, Ordering::Relaxed) < 16 {
        log::error!(
            "{what} while holding {n} lock(s) never held across I/O (first taken: {first}): \
             readers may stall behind it\n{}",
            std::backtrace::Backtrace::force_capture()
        );
    }
}

/// A lock guard that keeps its lock's place in the thread's held locks (and counts as one
/// no-I/O lock held, if it is one).
pub struct Guard<G> {
    inner: G,
    _held: Held,
}

impl<G: Deref> Deref for Guard<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.inner
    }
}

impl<G: DerefMut> DerefMut for Guard<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.inner
    }
}

impl<G> Guard<G> {
    /// The same hold with another guard of the lock (an upgraded read guard).
    pub fn map_inner<H>(self, f: impl FnOnce(G) -> H) -> Guard<H> {
        Guard {
            inner: f(self.inner),
            _held: self._held,
        }
    }
}

/// Take a lock: check the order, wait for it (`take`), count it once taken (a thread
/// waiting for the lock holds nothing new).
#[track_caller]
fn take<G>(site: Site, take: impl FnOnce() -> G) -> Guard<G> {
    site.check_order();
    let inner = take();
    Guard {
        inner,
        _held: Held::new(site),
    }
}

/// A `try_` acquisition: no order check (it does not wait), counted if it succeeded.
fn try_take<G>(site: Site, inner: Option<G>) -> Option<Guard<G>> {
    inner.map(|inner| Guard {
        inner,
        _held: Held::new(site),
    })
}

/// A mutex never held across device I/O (by default a leaf of the order, `Rank::LEAF`).
pub struct Mutex<T> {
    name: &'static str,
    rank: Rank,
    key: u64,
    /// May be held across I/O (the rows of the table that say so): ranked, not counted.
    io: bool,
    inner: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    pub const fn new(name: &'static str, value: T) -> Mutex<T> {
        Mutex::ranked(name, Rank::LEAF, value)
    }

    pub const fn ranked(name: &'static str, rank: Rank, value: T) -> Mutex<T> {
        Mutex {
            name,
            rank,
            key: 0,
            io: false,
            inner: parking_lot::Mutex::new(value),
        }
    }

    /// A lock that may be held across device I/O: only its place in the order is checked.
    /// `key` orders locks of one rank (the inode of an `op` lock).
    pub const fn across_io(name: &'static str, rank: Rank, key: u64, value: T) -> Mutex<T> {
        Mutex {
            name,
            rank,
            key,
            io: true,
            inner: parking_lot::Mutex::new(value),
        }
    }

    fn site(&self) -> Site {
        Site {
            lock: self as *const Self as usize,
            rank: self.rank,
            key: self.key,
            name: self.name,
            no_io: !self.io,
        }
    }

    #[track_caller]
    pub fn lock(&self) -> Guard<parking_lot::MutexGuard<'_, T>> {
        take(self.site(), || self.inner.lock())
    }

    pub fn try_lock(&self) -> Option<Guard<parking_lot::MutexGuard<'_, T>>> {
        try_take(self.site(), self.inner.try_lock())
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    pub fn into_inner(self) -> T {
        self.inner.into_inner()
    }
}

/// A mutex whose guards own a reference to it (parking_lot's `ArcMutexGuard`): an inode's
/// `op` lock, held across I/O, ranked and keyed by its inode.
pub struct ArcMutex<T> {
    name: &'static str,
    rank: Rank,
    key: u64,
    inner: Arc<parking_lot::Mutex<T>>,
}

impl<T> ArcMutex<T> {
    /// A lock that may be held across device I/O: only its place in the order is checked.
    /// `key` orders locks of one rank (the inode of an `op` lock).
    pub fn across_io(name: &'static str, rank: Rank, key: u64, value: T) -> ArcMutex<T> {
        ArcMutex {
            name,
            rank,
            key,
            inner: Arc::new(parking_lot::Mutex::new(value)),
        }
    }

    fn site(&self) -> Site {
        Site {
            lock: Arc::as_ptr(&self.inner) as usize,
            rank: self.rank,
            key: self.key,
            name: self.name,
            no_io: false,
        }
    }

    #[track_caller]
    pub fn lock_arc(&self) -> Guard<parking_lot::ArcMutexGuard<parking_lot::RawMutex, T>> {
        take(self.site(), || self.inner.lock_arc())
    }

    pub fn try_lock_arc(
        &self,
    ) -> Option<Guard<parking_lot::ArcMutexGuard<parking_lot::RawMutex, T>>> {
        try_take(self.site(), self.inner.try_lock_arc())
    }
}

/// A condition variable for a `Mutex` of this module (parking_lot's). A thread waiting on it
/// keeps the mutex counted as held, as it holds it again when the wait returns: a wait is no
/// device I/O, and the waiting thread takes nothing meanwhile.
#[derive(Default)]
pub struct Condvar {
    inner: parking_lot::Condvar,
}

impl Condvar {
    pub const fn new() -> Condvar {
        Condvar {
            inner: parking_lot::Condvar::new(),
        }
    }

    /// Wait for a notification or `timeout`, releasing the mutex meanwhile.
    pub fn wait_for<T>(
        &self,
        guard: &mut Guard<parking_lot::MutexGuard<'_, T>>,
        timeout: std::time::Duration,
    ) -> parking_lot::WaitTimeoutResult {
        self.inner.wait_for(&mut guard.inner, timeout)
    }

    pub fn notify_all(&self) -> usize {
        self.inner.notify_all()
    }
}

/// A reader-writer lock never held across device I/O (by default a leaf, `Rank::LEAF`).
pub struct RwLock<T> {
    name: &'static str,
    rank: Rank,
    /// May be held across I/O (the rows of the table that say so): ranked, not counted.
    io: bool,
    inner: parking_lot::RwLock<T>,
}

impl<T> RwLock<T> {
    pub const fn new(name: &'static str, value: T) -> RwLock<T> {
        RwLock::ranked(name, Rank::LEAF, value)
    }

    pub const fn ranked(name: &'static str, rank: Rank, value: T) -> RwLock<T> {
        RwLock {
            name,
            rank,
            io: false,
            inner: parking_lot::RwLock::new(value),
        }
    }

    /// A lock that may be held across device I/O: only its place in the order is checked.
    pub const fn across_io(name: &'static str, rank: Rank, value: T) -> RwLock<T> {
        RwLock {
            name,
            rank,
            io: true,
            inner: parking_lot::RwLock::new(value),
        }
    }

    fn site(&self) -> Site {
        Site {
            lock: self as *const Self as usize,
            rank: self.rank,
            key: 0,
            name: self.name,
            no_io: !self.io,
        }
    }

    #[track_caller]
    pub fn read(&self) -> Guard<parking_lot::RwLockReadGuard<'_, T>> {
        take(self.site(), || self.inner.read())
    }

    #[track_caller]
    pub fn write(&self) -> Guard<parking_lot::RwLockWriteGuard<'_, T>> {
        take(self.site(), || self.inner.write())
    }

    /// Shared with readers, exclusive against other upgradable holds and writers.
    #[track_caller]
    pub fn upgradable_read(&self) -> Guard<parking_lot::RwLockUpgradableReadGuard<'_, T>> {
        take(self.site(), || self.inner.upgradable_read())
    }

    pub fn try_read(&self) -> Option<Guard<parking_lot::RwLockReadGuard<'_, T>>> {
        try_take(self.site(), self.inner.try_read())
    }

    pub fn try_write(&self) -> Option<Guard<parking_lot::RwLockWriteGuard<'_, T>>> {
        try_take(self.site(), self.inner.try_write())
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    /// Whether any thread holds the lock (tests).
    pub fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }
}

/// The gate (docs/DESIGN.md, "Transactions"). Held shared by a mutation while it changes
/// memory: that hold may still span device I/O (a tree node loaded deep in a cascade), so it
/// is not a no-I/O lock, but the calling thread counts its holds and the accesses it makes
/// under them (`gate_counts`), so tests can show which operations take the gate and which do
/// I/O under it. Held exclusively only by the log writer's snapshot and by tree repair,
/// which are memory work: that hold is a no-I/O lock. Both rank `Rank::GATE`.
pub struct Gate {
    inner: parking_lot::RwLock<()>,
}

/// A shared hold of the gate.
pub struct SharedGate<'a> {
    _inner: Guard<parking_lot::RwLockReadGuard<'a, ()>>,
}

impl Drop for SharedGate<'_> {
    fn drop(&mut self) {
        GATE.with(|g| {
            let (held, taken, io) = g.get();
            g.set((held.saturating_sub(1), taken, io));
        });
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Gate {
    pub const fn new() -> Gate {
        Gate {
            inner: parking_lot::RwLock::new(()),
        }
    }

    fn site(&self, name: &'static str, no_io: bool) -> Site {
        Site {
            lock: self as *const Self as usize,
            rank: Rank::GATE,
            key: 0,
            name,
            no_io,
        }
    }

    #[track_caller]
    pub fn read(&self) -> SharedGate<'_> {
        let g = take(self.site("gate (shared)", false), || self.inner.read());
        GATE.with(|c| {
            let (held, taken, io) = c.get();
            c.set((held + 1, taken + 1, io));
        });
        SharedGate { _inner: g }
    }

    #[track_caller]
    pub fn write(&self) -> ExclusiveGate<'_> {
        let g = take(self.site("gate (exclusive)", true), || self.inner.write());
        EXCLUSIVE.with(|c| {
            let (held, n, under) = c.get();
            c.set((held + 1, n, under));
        });
        ExclusiveGate { _inner: g }
    }
}

/// An exclusive hold of the gate (a no-I/O lock; the thread counts it for
/// `inode_encode_counts`).
pub struct ExclusiveGate<'a> {
    _inner: Guard<parking_lot::RwLockWriteGuard<'a, ()>>,
}

impl Drop for ExclusiveGate<'_> {
    fn drop(&mut self) {
        EXCLUSIVE.with(|c| {
            let (held, n, under) = c.get();
            c.set((held.saturating_sub(1), n, under));
        });
    }
}

/// One inode encoded by the calling thread (`DiskInode::encode_into`): counted, and counted
/// apart when the thread holds the gate exclusively, which the log writer's snapshot must
/// not spend on encoding (docs/DESIGN.md, "Transactions").
pub fn count_inode_encode() {
    EXCLUSIVE.with(|c| {
        let (held, n, under) = c.get();
        c.set((held, n + 1, under + u64::from(held > 0)));
    });
}

/// For tests: how many inodes the calling thread has encoded since it started, and how many
/// of them while it held the gate exclusively.
pub fn inode_encode_counts() -> (u64, u64) {
    EXCLUSIVE.with(|c| {
        let (_, n, under) = c.get();
        (n, under)
    })
}

/// Count one event of the calling thread in `counts` (all, and those while it holds the
/// gate exclusively).
fn count_event(counts: &'static std::thread::LocalKey<Cell<(u64, u64)>>) {
    let under = EXCLUSIVE.with(|c| c.get().0 > 0);
    counts.with(|c| {
        let (n, u) = c.get();
        c.set((n + 1, u + u64::from(under)));
    });
}

/// One indirect or symlink block given its log address by the calling thread
/// (`place_snapshot`, fs/inode/entry.rs): counted, and counted apart when the thread holds the
/// gate exclusively, which the log writer's snapshot must not spend on placing blocks
/// (docs/DESIGN.md, "Transactions").
pub fn count_placement() {
    count_event(&PLACED);
}

/// For tests: how many blocks the calling thread has placed since it started, and how many
/// of them while it held the gate exclusively.
pub fn placement_counts() -> (u64, u64) {
    PLACED.with(|c| c.get())
}

/// One dirty tree node handed to the log writer by the calling thread: counted, and counted
/// apart when the thread holds the gate exclusively, where the snapshot takes the dirty
/// set whole and visits no node (docs/DESIGN.md, "Transactions").
pub fn count_node_capture() {
    count_event(&CAPTURED);
}

/// For tests: how many tree nodes the calling thread has handed to the log writer since it
/// started, and how many of them while it held the gate exclusively.
pub fn node_capture_counts() -> (u64, u64) {
    CAPTURED.with(|c| c.get())
}

/// For tests: how many inode state locks the calling thread has taken since it started, and
/// how many of them while it held the gate exclusively (the log writer's snapshot takes the
/// dirty set whole and visits no inode: docs/DESIGN.md, "Transactions").
pub fn inode_state_counts() -> (u64, u64) {
    STATES.with(|c| c.get())
}

/// For tests: how often the calling thread has taken the gate shared, and how many device
/// accesses it made while holding it, since the thread started.
pub fn gate_counts() -> (u64, u64) {
    GATE.with(|g| {
        let (_, taken, io) = g.get();
        (taken, io)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::fence::Fence;
    use crate::device::{BlockDevice, MemDevice};
    use std::sync::Arc;

    #[test]
    fn guards_count_and_uncount() {
        let m = Mutex::ranked("m", Rank::INODE_STATE, 1u32);
        let r = RwLock::new("r", 2u32);
        assert_eq!(held().0, 0);
        {
            let a = m.lock();
            assert_eq!(held(), (1, "m"));
            let b = r.read();
            assert_eq!(held(), (2, "m"));
            assert_eq!(*a + *b, 3);
            drop(a);
            assert_eq!(held().0, 1);
        }
        assert_eq!(held(), (0, ""));
        assert!(r.try_write().is_some());
        assert_eq!(held().0, 0);
        // Another thread's locks are not this thread's.
        let g = m.lock();
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(held().0, 0));
        });
        drop(g);
    }

    #[test]
    fn the_gate_counts_its_shared_holds_and_the_io_under_them() {
        let dev = Fence::new(Arc::new(MemDevice::new(8192)));
        let gate = Gate::new();
        let (taken, io) = gate_counts();
        {
            let _g = gate.read();
            dev.write_at(b"x", 0).unwrap(); // allowed, counted
        }
        dev.flush().unwrap(); // not under the gate
        assert_eq!(gate_counts(), (taken + 1, io + 1));
        let (encoded, under) = inode_encode_counts();
        count_inode_encode();
        let w = gate.write();
        assert_eq!(held(), (1, "gate (exclusive)"));
        count_inode_encode();
        drop(w);
        count_inode_encode();
        assert_eq!(inode_encode_counts(), (encoded + 3, under + 1));
    }

    #[test]
    fn io_without_such_locks_passes() {
        let dev = Fence::new(Arc::new(MemDevice::new(8192)));
        let m = Mutex::new("tables", ());
        drop(m.lock());
        dev.write_at(b"x", 0).unwrap();
        let mut b = [0u8; 1];
        dev.read_at(&mut b, 0).unwrap();
        dev.flush().unwrap();
    }

    /// The check is no no-op: each kind of device access under a marked lock panics here.
    #[test]
    fn io_under_a_no_io_lock_panics() {
        let dev = Fence::new(Arc::new(MemDevice::new(8192)));
        let m = Mutex::new("tables", ());
        let r = RwLock::new("inode state", ());
        let accesses: [(&str, &dyn Fn()); 3] = [
            ("read", &|| {
                let mut b = [0u8; 1];
                let _g = r.read();
                let _ = dev.read_at(&mut b, 0);
            }),
            ("write", &|| {
                let _g = m.lock();
                let _ = dev.write_at(b"x", 0);
            }),
            ("flush", &|| {
                let _g = r.write();
                let _ = dev.flush();
            }),
        ];
        for (kind, access) in accesses {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(access));
            let msg = caught.expect_err(kind);
            let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(msg.contains("never held across I/O"), "{kind}: {msg}");
            // The guard unwound with the panic: nothing is counted any more.
            assert_eq!(held().0, 0, "{kind}");
        }
    }

    fn panic_message(f: impl FnOnce()) -> String {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let msg = caught.expect_err("no panic");
        msg.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    /// The order is checked, not only kept by construction: a lock taken while a lock of the
    /// same or a later row is held panics before it waits, whatever kinds the two are.
    #[test]
    fn locks_taken_out_of_order_are_caught() {
        let flusher = Mutex::across_io("flusher", Rank::FLUSHER, 0, ());
        let rename = Mutex::across_io("rename_lock", Rank::RENAME, 0, ());
        let cleaning = Mutex::across_io("cleaning", Rank::CLEANING, 0, ());
        let ifile = Mutex::ranked("ifile", Rank::IFILE, ());
        let data_map = Mutex::ranked("data map", Rank::DATA_MAP, ());
        let handles = Mutex::new("handles", ());
        let dirty = Mutex::new("dirty", ());
        let state = RwLock::ranked("inode state", Rank::INODE_STATE, ());
        let gate = Gate::new();
        // In order: fine, in any order of release.
        {
            let c = cleaning.lock();
            let r = rename.lock();
            let f = flusher.lock();
            let g = gate.read();
            let s = state.write();
            let i = ifile.lock();
            let d = data_map.lock();
            assert_eq!(
                held_in_order(),
                [
                    "cleaning",
                    "rename_lock",
                    "flusher",
                    "gate (shared)",
                    "inode state",
                    "ifile",
                    "data map"
                ]
            );
            drop(r);
            drop(i);
            drop(f);
            drop(s);
            drop(c);
            drop(d);
            drop(g);
        }
        assert!(held_in_order().is_empty());
        let msg = panic_message(|| {
            let _f = flusher.lock();
            let _c = cleaning.lock();
        });
        assert!(msg.contains("lock order: taking cleaning (rank 2"), "{msg}");
        assert!(msg.contains("while holding flusher (rank 5"), "{msg}");
        let msg = panic_message(|| {
            let _d = data_map.lock();
            let _s = state.read();
        });
        assert!(msg.contains("taking inode state"), "{msg}");
        // The tables nest only in their order.
        let msg = panic_message(|| {
            let _d = data_map.lock();
            let _i = ifile.lock();
        });
        assert!(msg.contains("taking ifile (rank 10"), "{msg}");
        // Two leaves are never nested.
        let msg = panic_message(|| {
            let _h = handles.lock();
            let _d = dirty.lock();
        });
        assert!(msg.contains("taking dirty (rank 13"), "{msg}");
        // Nor a no-I/O lock under itself: the gate taken shared under its own exclusive hold.
        let msg = panic_message(|| {
            let _w = gate.write();
            let _r = gate.read();
        });
        assert!(msg.contains("taking gate (shared)"), "{msg}");
        // A `try_` acquisition does not wait, so it is not checked; but it counts as held.
        {
            let _d = data_map.lock();
            let s = state.try_read().expect("free");
            assert_eq!(held_in_order(), ["data map", "inode state"]);
            drop(s);
        }
        // Each panic unwound its guards: nothing is held any more.
        assert!(held_in_order().is_empty());
        assert_eq!(held().0, 0);
    }

    /// Inode `op` locks nest only in ascending inode order.
    #[test]
    fn inode_op_locks_nest_in_ascending_inode_order_only() {
        let op = |ino| ArcMutex::across_io("inode op", Rank::INODE_OP, ino, ());
        let (a, b, c) = (op(3), op(7), op(12));
        {
            let _a = a.lock_arc();
            let _b = b.lock_arc();
            let _c = c.lock_arc();
        }
        let msg = panic_message(|| {
            let _b = b.lock_arc();
            let _a = a.lock_arc();
        });
        assert!(
            msg.contains("taking inode op (rank 4, key 3) while holding inode op (rank 4, key 7)"),
            "{msg}"
        );
        // Not twice the same one (it would wait for itself).
        let msg = panic_message(|| {
            let _a = a.lock_arc();
            let _a2 = a.lock_arc();
        });
        assert!(msg.contains("taking inode op"), "{msg}");
        assert!(held_in_order().is_empty());
    }
}
