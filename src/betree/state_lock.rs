//! The tree's state lock, which also keeps the two counts the log's space accounting reads
//! on every admitted operation (dirty nodes, freed ids not yet reported) in atomics: every
//! write guard stores them when it is dropped, so reading them takes no lock.

use super::tree::TreeState;
use parking_lot::{RwLock, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) struct StateLock {
    lock: RwLock<TreeState>,
    dirty: AtomicUsize,
    freed: AtomicUsize,
}

pub(crate) struct StateWriteGuard<'a> {
    owner: &'a StateLock,
    guard: RwLockWriteGuard<'a, TreeState>,
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

    pub fn read(&self) -> RwLockReadGuard<'_, TreeState> {
        self.lock.read()
    }

    pub fn write(&self) -> StateWriteGuard<'_> {
        StateWriteGuard {
            owner: self,
            guard: self.lock.write(),
        }
    }

    pub fn upgradable_read(&self) -> StateUpgradableGuard<'_> {
        StateUpgradableGuard {
            owner: self,
            guard: self.lock.upgradable_read(),
        }
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
}

impl<'a> StateUpgradableGuard<'a> {
    pub fn upgrade(self) -> StateWriteGuard<'a> {
        StateWriteGuard {
            owner: self.owner,
            guard: RwLockUpgradableReadGuard::upgrade(self.guard),
        }
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
