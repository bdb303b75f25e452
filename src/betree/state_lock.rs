//! The tree's state lock, which also keeps the two counts the log's space accounting reads
//! on every admitted operation (dirty nodes, freed ids not yet reported) in atomics: every
//! write guard stores them when it is dropped, so reading them takes no lock.
//!
//! It is the only lock of the tree, and it is never held across I/O. In debug builds (and
//! unit tests) every guard counts itself in a thread-local, and `assert_not_held` — called
//! where a node is loaded — fails if the calling thread holds one.

use super::tree::TreeState;
use parking_lot::{RwLock, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) struct StateLock {
    lock: RwLock<TreeState>,
    dirty: AtomicUsize,
    freed: AtomicUsize,
}

/// Counts the state guards the current thread holds (debug builds and unit tests only).
#[cfg(any(debug_assertions, test))]
mod held {
    use std::cell::Cell;

    thread_local! {
        static HELD: Cell<u32> = const { Cell::new(0) };
    }

    pub fn count() -> u32 {
        HELD.with(Cell::get)
    }

    /// One guard's share of the count, from its creation to its drop.
    pub struct Held(());

    impl Held {
        pub fn new() -> Held {
            HELD.with(|h| h.set(h.get() + 1));
            Held(())
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            HELD.with(|h| h.set(h.get() - 1));
        }
    }
}

#[cfg(not(any(debug_assertions, test)))]
mod held {
    pub fn count() -> u32 {
        0
    }
    pub struct Held(());
    impl Held {
        #[inline(always)]
        pub fn new() -> Held {
            Held(())
        }
    }
}

/// Panics if the calling thread holds the tree's state lock (debug builds and unit tests):
/// called right before a node is read from the device.
pub(crate) fn assert_not_held(what: &str) {
    let held = held::count();
    assert!(
        held == 0,
        "{what} with the tree lock held ({held} guards on this thread)"
    );
}

pub(crate) struct StateReadGuard<'a> {
    guard: RwLockReadGuard<'a, TreeState>,
    _held: held::Held,
}

pub(crate) struct StateWriteGuard<'a> {
    owner: &'a StateLock,
    guard: RwLockWriteGuard<'a, TreeState>,
    _held: held::Held,
}

impl StateLock {
    pub fn new(state: TreeState) -> StateLock {
        let l = StateLock {
            dirty: AtomicUsize::new(state.cache.dirty_count()),
            freed: AtomicUsize::new(state.ids.unreported_count()),
            lock: RwLock::new(state),
        };
        l.store_counts(&l.lock.read());
        l
    }

    pub fn read(&self) -> StateReadGuard<'_> {
        StateReadGuard {
            guard: self.lock.read(),
            _held: held::Held::new(),
        }
    }

    pub fn write(&self) -> StateWriteGuard<'_> {
        StateWriteGuard {
            owner: self,
            guard: self.lock.write(),
            _held: held::Held::new(),
        }
    }

    /// Shared with readers, exclusive against other upgradable guards and writers: what a
    /// mutation computes under, so that mutations are serialized only while they compute.
    pub fn upgradable_read(&self) -> StateUpgradableGuard<'_> {
        StateUpgradableGuard {
            owner: self,
            guard: self.lock.upgradable_read(),
            _held: held::Held::new(),
        }
    }

    /// Whether any thread holds the lock (tests).
    #[cfg(test)]
    pub fn is_locked(&self) -> bool {
        self.lock.is_locked()
    }

    /// Dirty nodes, as of the last write guard dropped.
    pub fn dirty_count(&self) -> usize {
        self.dirty.load(Ordering::Acquire)
    }

    /// Freed ids the next snapshot reports, as of the last write guard dropped.
    pub fn freed_count(&self) -> usize {
        self.freed.load(Ordering::Acquire)
    }

    fn store_counts(&self, s: &TreeState) {
        self.dirty.store(s.cache.dirty_count(), Ordering::Release);
        self.freed
            .store(s.ids.unreported_count(), Ordering::Release);
    }
}

pub(crate) struct StateUpgradableGuard<'a> {
    owner: &'a StateLock,
    guard: RwLockUpgradableReadGuard<'a, TreeState>,
    _held: held::Held,
}

impl<'a> StateUpgradableGuard<'a> {
    pub fn upgrade(self) -> StateWriteGuard<'a> {
        StateWriteGuard {
            owner: self.owner,
            guard: RwLockUpgradableReadGuard::upgrade(self.guard),
            _held: self._held,
        }
    }
}

impl Deref for StateReadGuard<'_> {
    type Target = TreeState;
    fn deref(&self) -> &TreeState {
        &self.guard
    }
}

impl Deref for StateUpgradableGuard<'_> {
    type Target = TreeState;
    fn deref(&self) -> &TreeState {
        &self.guard
    }
}

impl Deref for StateWriteGuard<'_> {
    type Target = TreeState;
    fn deref(&self) -> &TreeState {
        &self.guard
    }
}

impl DerefMut for StateWriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut TreeState {
        &mut self.guard
    }
}

impl Drop for StateWriteGuard<'_> {
    fn drop(&mut self) {
        // Still under the lock: no other writer can store older counts after these.
        self.owner.store_counts(&self.guard);
    }
}
