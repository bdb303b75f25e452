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

use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    /// No-I/O locks this thread holds, and the name of the first one it took.
    static HELD: Cell<(u32, &'static str)> = const { Cell::new((0, "")) };
    /// Shared holds of the gate by this thread; how often it took the gate, and how many
    /// device accesses it made while holding it shared (for tests: `gate_counts`).
    static GATE: Cell<(u32, u64, u64)> = const { Cell::new((0, 0, 0)) };
    /// Exclusive holds of the gate by this thread; how many inodes it encoded, and how many
    /// of those under an exclusive hold (for tests: `inode_encode_counts`).
    static EXCLUSIVE: Cell<(u32, u64, u64)> = const { Cell::new((0, 0, 0)) };
}

/// Counts one lock held by this thread for as long as it lives (dropped after the lock's
/// own guard: it is the last field of `Guard`).
struct Held;

impl Held {
    fn new(name: &'static str) -> Held {
        HELD.with(|h| {
            let (n, first) = h.get();
            h.set((n + 1, if n == 0 { name } else { first }));
        });
        Held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|h| {
            let (n, first) = h.get();
            debug_assert!(n > 0, "lockcheck count underflow");
            h.set((n.saturating_sub(1), if n <= 1 { "" } else { first }));
        });
    }
}

/// How many no-I/O locks the calling thread holds, and the name of the first it took.
pub fn held() -> (u32, &'static str) {
    HELD.with(|h| h.get())
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

/// A lock guard that counts as one no-I/O lock held.
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

fn guard<G>(name: &'static str, inner: G) -> Guard<G> {
    // Counted only once taken: a thread waiting for the lock holds nothing new.
    Guard {
        inner,
        _held: Held::new(name),
    }
}

/// A mutex never held across device I/O.
pub struct Mutex<T> {
    name: &'static str,
    inner: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    pub const fn new(name: &'static str, value: T) -> Mutex<T> {
        Mutex {
            name,
            inner: parking_lot::Mutex::new(value),
        }
    }

    pub fn lock(&self) -> Guard<parking_lot::MutexGuard<'_, T>> {
        guard(self.name, self.inner.lock())
    }

    pub fn try_lock(&self) -> Option<Guard<parking_lot::MutexGuard<'_, T>>> {
        self.inner.try_lock().map(|g| guard(self.name, g))
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    pub fn into_inner(self) -> T {
        self.inner.into_inner()
    }
}

/// A reader-writer lock never held across device I/O.
pub struct RwLock<T> {
    name: &'static str,
    inner: parking_lot::RwLock<T>,
}

impl<T> RwLock<T> {
    pub const fn new(name: &'static str, value: T) -> RwLock<T> {
        RwLock {
            name,
            inner: parking_lot::RwLock::new(value),
        }
    }

    pub fn read(&self) -> Guard<parking_lot::RwLockReadGuard<'_, T>> {
        guard(self.name, self.inner.read())
    }

    pub fn write(&self) -> Guard<parking_lot::RwLockWriteGuard<'_, T>> {
        guard(self.name, self.inner.write())
    }

    pub fn try_read(&self) -> Option<Guard<parking_lot::RwLockReadGuard<'_, T>>> {
        self.inner.try_read().map(|g| guard(self.name, g))
    }

    pub fn try_write(&self) -> Option<Guard<parking_lot::RwLockWriteGuard<'_, T>>> {
        self.inner.try_write().map(|g| guard(self.name, g))
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }
}

/// The gate (docs/DESIGN.md, "Transactions"). Held shared by a mutation while it changes
/// memory: that hold may still span device I/O (a tree node loaded deep in a cascade), so it
/// is not a no-I/O lock, but the calling thread counts its holds and the accesses it makes
/// under them (`gate_counts`), so tests can show which operations take the gate and which do
/// I/O under it. Held exclusively only by the log writer's snapshot and by tree repair,
/// which are memory work: that hold is a no-I/O lock.
pub struct Gate {
    inner: parking_lot::RwLock<()>,
}

/// A shared hold of the gate.
pub struct SharedGate<'a> {
    _inner: parking_lot::RwLockReadGuard<'a, ()>,
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

    pub fn read(&self) -> SharedGate<'_> {
        let g = self.inner.read();
        GATE.with(|c| {
            let (held, taken, io) = c.get();
            c.set((held + 1, taken + 1, io));
        });
        SharedGate { _inner: g }
    }

    pub fn write(&self) -> ExclusiveGate<'_> {
        let g = guard("gate (exclusive)", self.inner.write());
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
        let m = Mutex::new("m", 1u32);
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
}
