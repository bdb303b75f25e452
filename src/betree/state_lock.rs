//! The tree's state lock, which also keeps the two counts the log's space accounting reads
//! on every admitted operation (dirty nodes, freed ids not yet reported) in atomics: every
//! write guard stores them when it is dropped, so reading them takes no lock.
//!
//! It is the only lock of the tree, and it is never held across I/O: it is a
//! `lockcheck::RwLock` of rank `Rank::TREE`, so the device fence refuses any access under it,
//! and `assert_not_held` — called where a node is loaded — says so where it matters most.

use super::state::TreeState;
use crate::lockcheck::{self, Guard, Rank};
use parking_lot::{RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) struct StateLock {
    lock: lockcheck::RwLock<TreeState>,
    dirty: AtomicUsize,
    freed: AtomicUsize,
}

/// Panics if the calling thread holds the tree's state lock (builds that check the lock
/// order): called right before a node is read from the device.
#[track_caller]
pub(crate) fn assert_not_held(what: &str) {
    let held = lockcheck::held_of_rank(Rank::TREE);
    assert!(
        held == 0,
        "{what} with the tree lock held ({held} guards on this thread)"
    );
}

pub(crate) struct StateReadGuard<'a> {
    guard: Guard<RwLockReadGuard<'a, TreeState>>,
}

pub(crate) struct StateWriteGuard<'a> {
    owner: &'a StateLock,
    guard: Guard<RwLockWriteGuard<'a, TreeState>>,
}

impl StateLock {
    pub fn new(state: TreeState) -> StateLock {
        let l = StateLock {
            dirty: AtomicUsize::new(state.cache.dirty_count()),
            freed: AtomicUsize::new(state.ids.unreported_count()),
            lock: lockcheck::RwLock::ranked("tree state", Rank::TREE, state),
        };
        l.store_counts(&l.lock.read());
        l
    }

    pub fn read(&self) -> StateReadGuard<'_> {
        StateReadGuard {
            guard: self.lock.read(),
        }
    }

    pub fn write(&self) -> StateWriteGuard<'_> {
        StateWriteGuard {
            owner: self,
            guard: self.lock.write(),
        }
    }

    /// Shared with readers, exclusive against other upgradable guards and writers: what a
    /// mutation computes under, so that mutations are serialized only while they compute.
    pub fn upgradable_read(&self) -> StateUpgradableGuard<'_> {
        StateUpgradableGuard {
            owner: self,
            guard: self.lock.upgradable_read(),
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
    guard: Guard<RwLockUpgradableReadGuard<'a, TreeState>>,
}

impl<'a> StateUpgradableGuard<'a> {
    pub fn upgrade(self) -> StateWriteGuard<'a> {
        StateWriteGuard {
            owner: self.owner,
            guard: self.guard.map_inner(RwLockUpgradableReadGuard::upgrade),
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
