//! Hands out inode numbers.

use std::collections::BTreeSet;

/// Hands out inode numbers. Numbers freed by an operation are held back until the log
/// writer has taken the transaction that frees them (a number must not be freed and reused
/// inside one transaction), and numbers the kernel still holds until its FORGET
/// (namespace/kernel_refs.rs). Neither kind names a file any more: `in_use` counts them as free, as
/// df must (a deleted file is gone for its user whether or not the kernel has forgotten its
/// node id yet; only the log's room limits how many more can be made).
pub struct InoAllocator {
    free: BTreeSet<u64>,
    next_new: u64,
    /// Freed by operations since the log writer's last snapshot.
    held: Vec<u64>,
    /// Taken by the log writer, whose transaction is not yet durable.
    in_transaction: u64,
    /// Freed and durable, waiting for the kernel's FORGET.
    parked: u64,
    /// Free numbers a dead daemon's kernel may still hold (`set_aside_free`): never handed
    /// out by this one.
    set_aside: u64,
}

impl InoAllocator {
    pub fn new(free: impl IntoIterator<Item = u64>, next_new: u64) -> InoAllocator {
        InoAllocator {
            free: free.into_iter().collect(),
            next_new,
            held: Vec::new(),
            in_transaction: 0,
            parked: 0,
            set_aside: 0,
        }
    }

    pub fn alloc(&mut self) -> Option<u64> {
        if let Some(&i) = self.free.iter().next() {
            self.free.remove(&i);
            return Some(i);
        }
        if self.next_new >= u32::MAX as u64 {
            return None;
        }
        self.next_new += 1;
        Some(self.next_new - 1)
    }

    /// Take `ino` if it is free (a replayed create makes the number it made): false if it
    /// is in use or not yet reusable.
    pub fn claim_exact(&mut self, ino: u64) -> bool {
        if self.free.remove(&ino) {
            return true;
        }
        if ino >= self.next_new && ino < u32::MAX as u64 {
            self.free.extend(self.next_new..ino);
            self.next_new = ino + 1;
            return true;
        }
        false
    }

    /// A successor of a dead daemon takes over its kernel connection: which free numbers that
    /// kernel still holds (freed while it held them) is unknown, so none of them is handed
    /// out again by this daemon; new numbers come from above (the next mount frees them).
    pub fn set_aside_free(&mut self) {
        self.set_aside += self.free.len() as u64;
        self.free.clear();
    }

    /// Take a specific number (mkfs: the root).
    pub fn claim(&mut self, ino: u64) {
        self.free.remove(&ino);
    }

    /// A number freed by an operation (usable once the log writer `release`s it).
    pub fn hold(&mut self, ino: u64) {
        self.held.push(ino);
    }

    /// A number allocated but given back before anything used it.
    pub fn give_back(&mut self, ino: u64) {
        self.free.insert(ino);
    }

    /// The numbers held now (taken by the log writer's snapshot; they come back through
    /// `release`).
    pub fn take_held(&mut self) -> Vec<u64> {
        let taken = std::mem::take(&mut self.held);
        self.in_transaction += taken.len() as u64;
        taken
    }

    /// The log writer's transaction that freed `n` numbers is durable: they count as parked
    /// until the writer has asked the kernel's references about each (`unpark` returns the
    /// ones it does not hold, FORGET the others), so that a FORGET arriving meanwhile finds
    /// its number counted and every number is counted once all along.
    pub fn transaction_durable(&mut self, n: u64) {
        assert!(
            n <= self.in_transaction,
            "{n} numbers made durable, {} were taken",
            self.in_transaction
        );
        self.in_transaction -= n;
        self.parked += n;
    }

    /// Parked numbers `inos` may be handed out again.
    pub fn unpark(&mut self, inos: impl IntoIterator<Item = u64>) {
        for ino in inos {
            assert!(self.parked > 0, "inode {ino} unparked, none was parked");
            self.parked -= 1;
            self.free.insert(ino);
        }
    }

    /// Numbers that name a file now (below the first never-used one, and neither free nor on
    /// their way to being free; 0 is no number).
    pub fn in_use(&self) -> u64 {
        self.next_new.saturating_sub(1).saturating_sub(
            self.free.len() as u64
                + self.held.len() as u64
                + self.in_transaction
                + self.parked
                + self.set_aside,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_set_aside_are_never_handed_out_and_count_as_free() {
        let mut a = InoAllocator::new([3, 5], 10);
        assert_eq!(a.in_use(), 7);
        a.set_aside_free();
        assert_eq!(a.in_use(), 7, "set aside, they still count as free");
        assert_eq!(a.alloc(), Some(10), "new numbers come from above");
        a.hold(10);
        let taken = a.take_held();
        a.transaction_durable(taken.len() as u64);
        a.unpark(taken);
        assert_eq!(a.alloc(), Some(10), "numbers freed afterwards are reused");
    }
}
