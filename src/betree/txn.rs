//! A mutation's private overlay over the cached tree.
//!
//! A mutation reads the shared state and writes only into its overlay: nodes it changes are
//! copied in (cheap: names are shared `Arc`s), new nodes get ids planned here, freed ids are
//! listed. If a node it needs is not cached it stops with `Stop::Miss` and the overlay is
//! simply dropped — nothing to undo — so the mutation can load the node with no lock held and
//! run again. On success `finish` yields the changes, which the tree commits in one step under
//! its write lock: readers never see half a flush, and an I/O error leaves the tree unchanged.

use super::node::Node;
use super::policy::Policy;
use super::state::{Changes, TreeState};
use super::stop::{check_child_level, Stop};
use foldhash::{HashMap, HashMapExt};
use std::cell::RefCell;

enum Slot {
    Present(Node),
    /// Held by the code running now (a node on the current path).
    Taken,
    Freed,
}

pub(crate) struct Txn<'a> {
    state: &'a TreeState,
    pub policy: &'a Policy,
    slots: HashMap<u64, Slot>,
    /// Ids planned for new nodes, in order.
    allocated: Vec<u64>,
    /// Planning cursors: reusable ids above `free_cursor`, then never-used ids from `next_id`.
    free_cursor: u64,
    next_id: u64,
    freed: Vec<u64>,
    /// Ids read from the cache (taken or peeked), in order: what a dry run (`preload`) pins.
    visited: RefCell<Vec<u64>>,
}

impl<'a> Txn<'a> {
    pub fn new(state: &'a TreeState, policy: &'a Policy) -> Txn<'a> {
        Txn {
            state,
            policy,
            slots: HashMap::new(),
            allocated: Vec::new(),
            free_cursor: 0,
            next_id: state.ids.next(),
            freed: Vec::new(),
            visited: RefCell::new(Vec::new()),
        }
    }

    /// The ids this transaction read from the cache so far.
    pub fn visited(&self) -> Vec<u64> {
        self.visited.borrow().clone()
    }

    /// Take node `id` out to change it; `put` it back (or `free` it) before finishing.
    pub fn take(&mut self, id: u64) -> Result<Node, Stop> {
        match self.slots.insert(id, Slot::Taken) {
            Some(Slot::Present(node)) => Ok(node),
            Some(Slot::Taken) => panic!("node {id} taken twice"),
            Some(Slot::Freed) => panic!("node {id} used after it was freed"),
            None => match self.state.cache.node(id) {
                Some(node) => {
                    self.visited.borrow_mut().push(id);
                    Ok(Node::clone(node))
                }
                None => {
                    self.slots.remove(&id);
                    Err(Stop::Miss(id))
                }
            },
        }
    }

    /// `take` a child of a node at `parent_level`, insisting on the level below.
    pub fn take_child(&mut self, id: u64, parent_level: u8) -> Result<Node, Stop> {
        let node = self.take(id)?;
        check_child_level(id, &node, parent_level)?;
        Ok(node)
    }

    pub fn put(&mut self, id: u64, node: Node) {
        match self.slots.insert(id, Slot::Present(node)) {
            Some(Slot::Taken) => {}
            _ => panic!("node {id} put back without being taken"),
        }
    }

    /// Read node `id` without taking it.
    pub fn peek(&self, id: u64) -> Result<&Node, Stop> {
        match self.slots.get(&id) {
            Some(Slot::Present(node)) => Ok(node),
            Some(Slot::Taken) => panic!("node {id} is taken"),
            Some(Slot::Freed) => panic!("node {id} used after it was freed"),
            None => {
                let node = self.state.cache.node(id).ok_or(Stop::Miss(id))?;
                self.visited.borrow_mut().push(id);
                Ok(&**node)
            }
        }
    }

    /// Is node `id` at hand without I/O?
    pub fn is_available(&self, id: u64) -> bool {
        self.slots.contains_key(&id) || self.state.cache.contains(id)
    }

    /// Give `node` a new id.
    pub fn alloc(&mut self, node: Node) -> u64 {
        let id = match self.state.ids.free_after(self.free_cursor) {
            Some(id) => {
                self.free_cursor = id;
                id
            }
            None => {
                self.next_id += 1;
                self.next_id - 1
            }
        };
        let old = self.slots.insert(id, Slot::Present(node));
        assert!(old.is_none(), "allocated node id {id} is in use");
        self.allocated.push(id);
        id
    }

    /// Does `id` name a value block that may be freed? (It is allocated, not freed here
    /// already, and not a tree node as far as the cache shows.)
    pub fn is_allocated(&self, id: u64) -> bool {
        match self.slots.get(&id) {
            Some(Slot::Present(node)) => node.is_value(),
            Some(_) => false,
            None => {
                self.state.ids.in_use(id)
                    && id != crate::format::ROOT_NODE_ID
                    && self.state.cache.node(id).is_none_or(|n| n.is_value())
            }
        }
    }

    /// Value block `id` no longer exists; it need not be loaded (or taken).
    pub fn free_value(&mut self, id: u64) {
        match self.slots.insert(id, Slot::Freed) {
            None => self.freed.push(id),
            Some(Slot::Present(node)) if node.is_value() => self.freed.push(id),
            _ => panic!("value block {id} freed twice or while taken"),
        }
    }

    /// Node `id`, currently taken, no longer exists.
    pub fn free(&mut self, id: u64) {
        assert_ne!(id, crate::format::ROOT_NODE_ID, "freeing the root");
        match self.slots.insert(id, Slot::Freed) {
            Some(Slot::Taken) => self.freed.push(id),
            _ => panic!("node {id} freed without being taken"),
        }
    }

    pub fn finish(self) -> Changes {
        let mut stored = Vec::new();
        for (id, slot) in self.slots {
            match slot {
                Slot::Present(node) => {
                    debug_assert!(node.fits(self.policy), "node {id} left overfull");
                    stored.push((id, node));
                }
                Slot::Taken => panic!("node {id} taken and never put back"),
                Slot::Freed => {}
            }
        }
        Changes {
            stored,
            allocated: self.allocated,
            freed: self.freed,
        }
    }
}
