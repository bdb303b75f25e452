//! `BeTree`: the public operations, their locking, and loading nodes with no lock held.

use super::cache::NodeCache;
use super::ids::IdAllocator;
use super::node::Node;
use super::policy::Policy;
use super::read::{self, LeafRange};
use super::state::{LoadMark, TreeState};
use super::state_lock::{assert_not_held, StateLock};
use super::stop::Stop;
use super::txn::Txn;
use crate::error::err;
use crate::format::node::{self as fmt, DirValue, Key, Message, MessageOp, Value};
use crate::format::{NAME_MAX, ROOT_NODE_ID as ROOT};
use crate::{FsError, Result};
use std::ops::Deref;
use std::sync::Arc;

/// Reads the on-disk block of a node (the file system's log and node map).
pub trait NodeLoader: Send + Sync {
    /// Read the current on-disk block of node `id` (I/O; called with no tree lock held).
    /// The tree verifies it with `format::node::decode` (header kind NODE, owner == id).
    fn load_node(&self, id: u64) -> Result<Vec<u8>>;
}

/// One entry returned by `scan`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanItem {
    pub hash: u64,
    pub name: Vec<u8>,
    pub value: DirValue,
}

/// What `for_each` calls for every record: `(dir, hash, name, value)` — directory entries and
/// attributes alike.
pub type EntryVisitor<'a> = dyn FnMut(u64, u64, &[u8], &Value) + 'a;

/// What `take_dirty` hands to the log writer.
#[derive(Debug, Default)]
pub struct DirtyNodes {
    /// Every dirty node as an encoded block, by id.
    pub nodes: Vec<(u64, Vec<u8>)>,
    /// Ids freed since the last call (only ids that may have a block on disk).
    pub freed: Vec<u64>,
}

/// What `take_snapshots` takes in the log writer's exclusive phase: how many dirty nodes,
/// and the ids freed since the last take (only ids that may have a block on disk).
pub struct TakenNodes {
    count: usize,
    pub freed: Vec<u64>,
}

impl TakenNodes {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// What `capture` hands to the log writer: every dirty node as it was when taken (shared
/// `Arc`s: later mutations copy on write), not yet encoded.
pub struct DirtySnapshots {
    nodes: Vec<(u64, Arc<Node>)>,
    block_size: usize,
    /// Ids freed since the last call (only ids that may have a block on disk).
    pub freed: Vec<u64>,
}

impl DirtySnapshots {
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node ids, in the order `encode` yields their blocks.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.0).collect()
    }

    /// Encode every node (needs no lock: the snapshots are immutable).
    pub fn encode(self) -> DirtyNodes {
        let nodes = self
            .nodes
            .into_iter()
            .map(|(id, node)| (id, node.encode(id, self.block_size)))
            .collect();
        DirtyNodes {
            nodes,
            freed: self.freed,
        }
    }
}

/// The directory index (see the module documentation). `Send + Sync`: lookups and scans run
/// concurrently; mutations compute one at a time (under the upgradable state lock, no I/O),
/// and load what they miss concurrently with everything else, no lock held.
pub struct BeTree {
    pub(crate) policy: Policy,
    hash_seed: u64,
    pub(crate) cache_nodes: usize,
    pub(crate) state: StateLock,
}

/// Nodes an operation loaded and needs to stay cached until it finishes.
struct Pins<'a> {
    tree: &'a BeTree,
    ids: Vec<u64>,
    /// Loads that failed while the tree was changing underneath, retried so far.
    retried_failures: u32,
}

impl Drop for Pins<'_> {
    fn drop(&mut self) {
        if self.ids.is_empty() {
            return;
        }
        let over_budget = {
            let state = self.tree.state.read();
            for &id in &self.ids {
                state.cache.unpin(id);
            }
            state.cache.len() > self.tree.cache_nodes
        };
        if over_budget {
            let mut state = self.tree.state.write();
            state.cache.evict_to(self.tree.cache_nodes);
        }
    }
}

/// Nodes a coming mutation will need, loaded and pinned by `BeTree::preload`: they stay
/// cached while this lives, so the mutation, run meanwhile on an unchanged tree, does no I/O.
pub struct Preloaded<'a> {
    _pins: Pins<'a>,
}

impl Preloaded<'_> {
    /// How many nodes it keeps cached (tests).
    pub fn pinned(&self) -> usize {
        self._pins.ids.len()
    }
}

/// Nodes the cache must still have room for when `preload` skips its dry run on a tree that
/// is wholly cached (`BeTree::resident_with_headroom`).
const RESIDENT_HEADROOM: usize = 64;

/// How often a load that failed while the tree kept changing is retried before giving up.
const MAX_RETRIED_FAILURES: u32 = 16;

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return err!(EINVAL);
    }
    if name.len() > NAME_MAX {
        return err!(ENAMETOOLONG);
    }
    Ok(())
}

impl BeTree {
    fn with_state(block_size: u32, hash_seed: u64, cache_bytes: u64, state: TreeState) -> BeTree {
        let policy = Policy::new(block_size);
        BeTree {
            cache_nodes: (cache_bytes / block_size as u64).min(usize::MAX as u64) as usize,
            policy,
            hash_seed,
            state: StateLock::new(state),
        }
    }

    /// A brand-new empty tree: the root (id 1) is an empty leaf, dirty; next node id 2.
    pub fn new_empty(block_size: u32, hash_seed: u64, cache_bytes: u64) -> BeTree {
        let mut cache = NodeCache::default();
        cache.store_dirty(ROOT, Node::empty_leaf());
        let state = TreeState {
            cache,
            ids: IdAllocator::new(ROOT + 1, []),
            commits: 0,
            epoch: 0,
        };
        BeTree::with_state(block_size, hash_seed, cache_bytes, state)
    }

    /// Replace the whole tree with an empty one (fsck rebuilding a damaged tree on a live
    /// session): the root becomes an empty dirty leaf, every other id is free to be used
    /// again, and nothing of the old tree stays cached. The caller sees to the node map.
    pub fn reset_empty(&self) {
        let mut cache = NodeCache::default();
        cache.store_dirty(ROOT, Node::empty_leaf());
        let mut state = self.state.write();
        *state = TreeState {
            cache,
            ids: IdAllocator::new(ROOT + 1, []),
            commits: state.commits + 1,
            epoch: state.epoch + 1,
        };
    }

    /// An existing tree, nothing loaded yet. Ids at or above `next_node_id` were never used;
    /// `free_ids` are the ids below it that are free (node map entries of 0).
    pub fn open(
        block_size: u32,
        hash_seed: u64,
        cache_bytes: u64,
        next_node_id: u64,
        free_ids: impl IntoIterator<Item = u64>,
    ) -> BeTree {
        let state = TreeState {
            cache: NodeCache::default(),
            ids: IdAllocator::new(next_node_id, free_ids),
            commits: 0,
            epoch: 0,
        };
        BeTree::with_state(block_size, hash_seed, cache_bytes, state)
    }

    pub fn block_size(&self) -> u32 {
        self.policy.block_size as u32
    }

    pub fn hash(&self, name: &[u8]) -> u64 {
        fmt::name_hash(self.hash_seed, name)
    }

    fn key(&self, dir: u64, name: &[u8]) -> Result<Key> {
        check_name(name)?;
        Ok(Key::new(dir, self.hash(name), name))
    }

    pub fn lookup(&self, ld: &dyn NodeLoader, dir: u64, name: &[u8]) -> Result<Option<DirValue>> {
        let key = self.key(dir, name)?;
        self.lookup_key(ld, &key)
    }

    /// What the tree holds under `key`, whatever kind of record it is.
    pub(crate) fn lookup_value(&self, ld: &dyn NodeLoader, key: &Key) -> Result<Option<Value>> {
        self.read_op(ld, |state| read::lookup(state, key))
    }

    /// Insert or replace.
    pub fn insert(&self, ld: &dyn NodeLoader, dir: u64, name: &[u8], v: DirValue) -> Result<()> {
        let key = self.key(dir, name)?;
        self.insert_key(ld, key, v)
    }

    /// Delete; no error if absent (callers check existence themselves).
    pub fn remove(&self, ld: &dyn NodeLoader, dir: u64, name: &[u8]) -> Result<()> {
        let key = self.key(dir, name)?;
        self.remove_key(ld, key)
    }

    pub(crate) fn lookup_key(&self, ld: &dyn NodeLoader, key: &Key) -> Result<Option<DirValue>> {
        match self.lookup_value(ld, key)? {
            None => Ok(None),
            Some(Value::Entry(v)) => Ok(Some(v)),
            // Validation keeps attributes out of the entries' key space.
            Some(Value::Attr(_)) => Err(FsError::corrupt(
                "directory tree",
                format!("an attribute under directory entry key {key:?}"),
            )),
        }
    }

    /// `insert` with the key's hash given (tests force hash collisions with it).
    pub(crate) fn insert_key(&self, ld: &dyn NodeLoader, key: Key, v: DirValue) -> Result<()> {
        if !(fmt::KIND_MIN..=fmt::KIND_MAX).contains(&v.kind) {
            return err!(EINVAL);
        }
        self.apply_message(
            ld,
            Message {
                key,
                op: MessageOp::Insert(Value::Entry(v)),
            },
        )
    }

    pub(crate) fn remove_key(&self, ld: &dyn NodeLoader, key: Key) -> Result<()> {
        self.apply_message(
            ld,
            Message {
                key,
                op: MessageOp::Delete,
            },
        )
    }

    /// The message `insert` applies (for `preload`).
    pub fn insert_message(&self, dir: u64, name: &[u8], v: DirValue) -> Result<Message> {
        Ok(Message {
            key: self.key(dir, name)?,
            op: MessageOp::Insert(Value::Entry(v)),
        })
    }

    /// The message `remove` applies (for `preload`).
    pub fn remove_message(&self, dir: u64, name: &[u8]) -> Result<Message> {
        Ok(Message {
            key: self.key(dir, name)?,
            op: MessageOp::Delete,
        })
    }

    /// Make resident, with no lock held, every node that applying `messages` (in order, as
    /// one mutation) to the tree as it is now would read — the nodes of the whole flush
    /// cascade, not only the root — and keep them cached while the result lives. A mutation
    /// of the file system calls it before it takes the gate, so that its tree changes, made
    /// under the gate, find everything cached and do no device I/O there (docs/DESIGN.md,
    /// "What still holds the gate shared across I/O"). It is a dry run: computed like the
    /// mutation under the shared lock (loading what it misses as a mutation does), never
    /// committed. Only a concurrent mutation that reshapes the path between this call and
    /// the mutation can make the mutation need a node this did not load.
    pub fn preload(&self, ld: &dyn NodeLoader, messages: &[Message]) -> Result<Preloaded<'_>> {
        let mut pins = self.pins();
        if messages.is_empty() {
            return Ok(Preloaded { _pins: pins });
        }
        let read = || self.state.read();
        let (state, visited) = self.retry_on_miss(ld, &mut pins, read, |state| {
            // The common case: the root (never evicted) takes the message as it is.
            if let [message] = messages {
                if self.fits_root(state, message) {
                    return Ok(Vec::new());
                }
            }
            // The usual case on a tree that fits its cache: the dry run would find every node
            // cached and could only pin them against an eviction that cannot come.
            if self.resident_with_headroom(state) {
                return Ok(Vec::new());
            }
            let mut txn = Txn::new(state, &self.policy);
            messages
                .iter()
                .try_for_each(|m| txn.apply_at_root(m.clone()))?;
            Ok(txn.visited())
        })?;
        for id in visited {
            state.cache.pin(id);
            pins.ids.push(id);
        }
        drop(state);
        Ok(Preloaded { _pins: pins })
    }

    /// `preload` of one node by id (the cleaner's `mark_dirty` of a node it moves): loaded if
    /// it is a node of the tree and not cached, and pinned.
    pub fn preload_node(&self, ld: &dyn NodeLoader, id: u64) -> Result<Preloaded<'_>> {
        let mut pins = self.pins();
        let read = || self.state.read();
        let (state, cached) = self.retry_on_miss(ld, &mut pins, read, |state| {
            if !state.ids.in_use(id) {
                return Ok(false);
            }
            if state.cache.contains(id) {
                return Ok(true);
            }
            Err(Stop::Miss(id))
        })?;
        if cached {
            state.cache.pin(id);
            pins.ids.push(id);
        }
        drop(state);
        Ok(Preloaded { _pins: pins })
    }

    /// Entries of `dir` with hash >= `start_hash`, in key order, at most `max` — except that
    /// a group of entries sharing one hash is never cut (it is returned whole even if that
    /// exceeds `max`). `max == 0` returns nothing. Only directory entries: the listing stops
    /// where `dir`'s attributes begin.
    pub fn scan(
        &self,
        ld: &dyn NodeLoader,
        dir: u64,
        start_hash: u64,
        max: usize,
    ) -> Result<Vec<ScanItem>> {
        let mut items: Vec<ScanItem> = Vec::new();
        if max == 0 {
            return Ok(items);
        }
        let mut start = Key::lowest(dir, start_hash);
        loop {
            let range = self.read_op(ld, |state| read::read_leaf_range(state, &start))?;
            for entry in range.entries {
                let key = entry.key;
                let full = items.len() >= max;
                if key.dir != dir
                    || key.is_attr()
                    || (full && items.last().is_some_and(|l| l.hash != key.hash))
                {
                    return Ok(items);
                }
                let Value::Entry(value) = entry.value else {
                    return Err(FsError::corrupt(
                        "directory tree",
                        format!("an attribute under directory entry key {key:?}"),
                    ));
                };
                items.push(ScanItem {
                    hash: key.hash,
                    name: key.name.to_vec(),
                    value,
                });
            }
            match range.next {
                Some(next) if next.dir == dir && !next.is_attr() => {
                    // Past the last group already returned? Then it cannot continue there.
                    let full = items.len() >= max;
                    if full && items.last().is_some_and(|l| next.hash > l.hash) {
                        return Ok(items);
                    }
                    start = next;
                }
                _ => return Ok(items),
            }
        }
    }

    /// Every entry of the whole tree in key order: `f(dir, hash, name, value)`. Runs leaf by
    /// leaf, calling `f` with no lock held.
    pub fn for_each(&self, ld: &dyn NodeLoader, f: &mut EntryVisitor<'_>) -> Result<()> {
        let mut start = Key::lowest(0, 0);
        loop {
            let LeafRange { entries, next } =
                self.read_op(ld, |state| read::read_leaf_range(state, &start))?;
            for entry in entries {
                f(entry.key.dir, entry.key.hash, &entry.key.name, &entry.value);
            }
            match next {
                Some(next) => start = next,
                None => return Ok(()),
            }
        }
    }

    // --- log writer interface ---

    /// Every dirty node, encoded, plus the ids freed since the last call. Call while no
    /// mutation runs. Dirty flags are cleared; the nodes stay cached ("in flight") until
    /// `written` names them. Reported freed ids become reusable now.
    pub fn take_dirty(&self) -> DirtyNodes {
        self.capture(self.take_snapshots()).encode()
    }

    /// The log writer's exclusive phase: the dirty set and the freed ids are taken whole,
    /// no node visited. Until `capture` hands them over, a node of the set is copied (an
    /// `Arc`) before anything changes or frees it, so what `capture` returns is the tree as
    /// it was at the take.
    pub fn take_snapshots(&self) -> TakenNodes {
        let mut state = self.state.write();
        TakenNodes {
            count: state.cache.take_dirty_ids(),
            freed: state.ids.report_freed(),
        }
    }

    /// After the exclusive phase: the nodes `take_snapshots` took, as they were then, by
    /// pointer (`O(taken nodes)` under the state lock), not yet encoded.
    pub fn capture(&self, taken: TakenNodes) -> DirtySnapshots {
        let nodes = self.state.write().cache.capture_taken();
        assert_eq!(
            nodes.len(),
            taken.count,
            "taken nodes lost before the capture"
        );
        DirtySnapshots {
            nodes,
            block_size: self.policy.block_size,
            freed: taken.freed,
        }
    }

    /// Those nodes are on disk where the node map says: they may be evicted.
    pub fn written(&self, ids: &[u64]) {
        let mut state = self.state.write();
        state.cache.written(ids);
        state.cache.evict_to(self.cache_nodes);
    }

    /// Make node `id` dirty so the next `take_dirty` rewrites it (how the cleaner moves
    /// nodes); loads it if needed. ENOENT if `id` is not a node of the tree.
    pub fn mark_dirty(&self, ld: &dyn NodeLoader, id: u64) -> Result<()> {
        let mut pins = self.pins();
        let write = || self.state.write();
        let (state, in_use) = self.retry_on_miss(ld, &mut pins, write, |state| {
            if !state.ids.in_use(id) {
                return Ok(false);
            }
            if state.cache.mark_dirty(id) {
                return Ok(true);
            }
            Err(Stop::Miss(id))
        })?;
        drop(state);
        if !in_use {
            return err!(ENOENT);
        }
        Ok(())
    }

    pub fn next_node_id(&self) -> u64 {
        self.state.read().ids.next()
    }

    /// Without a lock: the count as of the last change.
    pub fn dirty_count(&self) -> usize {
        self.state.dirty_count()
    }

    /// Freed ids the next `take_dirty` will report (the log writer sizes its records by it).
    pub fn freed_count(&self) -> usize {
        self.state.freed_count()
    }

    pub fn cached_bytes(&self) -> u64 {
        self.state.read().cache.len() as u64 * self.policy.block_size as u64
    }

    // --- machinery ---

    fn pins(&self) -> Pins<'_> {
        Pins {
            tree: self,
            ids: Vec::new(),
            retried_failures: 0,
        }
    }

    /// Run a query under the shared lock, loading missing nodes with no lock held.
    pub(crate) fn read_op<T>(
        &self,
        ld: &dyn NodeLoader,
        query: impl Fn(&TreeState) -> std::result::Result<T, Stop>,
    ) -> Result<T> {
        let mut pins = self.pins();
        let read = || self.state.read();
        let (state, found) = self.retry_on_miss(ld, &mut pins, read, |state| query(state))?;
        // Unpinning takes the lock again.
        drop(state);
        Ok(found)
    }

    pub(crate) fn apply_message(&self, ld: &dyn NodeLoader, message: Message) -> Result<()> {
        if self.apply_in_place(&message) {
            return Ok(());
        }
        self.mutate(ld, |txn| txn.apply_at_root(message.clone()))
    }

    /// Run `change` in a transaction of its own and commit it. The transaction computes under
    /// the upgradable lock (readers go on; other mutations wait, for CPU work only) from the
    /// cached nodes; at the first missing node it is dropped, the lock released, the node
    /// loaded and pinned, and `change` runs again from the start on the tree as it is then
    /// (other mutations may have committed meanwhile: the rerun sees them, so a mutation never
    /// commits a result computed from a stale view).
    pub(crate) fn mutate(
        &self,
        ld: &dyn NodeLoader,
        change: impl Fn(&mut Txn) -> std::result::Result<(), Stop>,
    ) -> Result<()> {
        let mut pins = self.pins();
        let upgradable = || self.state.upgradable_read();
        let (state, changes) = self.retry_on_miss(ld, &mut pins, upgradable, |state| {
            let mut txn = Txn::new(state, &self.policy);
            change(&mut txn)?;
            Ok(txn.finish())
        })?;
        let mut state = state.upgrade();
        state.commit(changes);
        state.cache.evict_to(self.cache_nodes);
        Ok(())
    }

    /// The loop of every operation over cached nodes: take a guard with `lock` and run
    /// `attempt` under it; when it stops at a missing node, drop the guard, load the node with
    /// no lock held (pinned in `pins`) and run `attempt` again from the start, on the tree as it
    /// is then. Returns the guard, still held, with what `attempt` returned.
    fn retry_on_miss<G, T>(
        &self,
        ld: &dyn NodeLoader,
        pins: &mut Pins,
        lock: impl Fn() -> G,
        mut attempt: impl FnMut(&mut G) -> std::result::Result<T, Stop>,
    ) -> Result<(G, T)>
    where
        G: Deref<Target = TreeState>,
    {
        loop {
            let mut guard = lock();
            match attempt(&mut guard) {
                Ok(done) => return Ok((guard, done)),
                Err(Stop::Fail(e)) => return Err(e),
                Err(Stop::Miss(id)) => {
                    let mark = guard.mark();
                    drop(guard);
                    self.load(ld, id, mark, pins)?;
                }
            }
        }
    }

    /// Is every node of the tree cached, with room for the nodes mutations can add before
    /// anything is evicted? Then a mutation finds all it reads cached without a `preload` dry
    /// run: nodes are only evicted past `cache_nodes`, and with nothing missing nothing is
    /// loaded. The headroom covers the splits of the mutations running meanwhile (each adds
    /// at most a node per level); should they exceed it, the mutation still finds a missing
    /// node and loads it (`mutate`), only not before the gate.
    fn resident_with_headroom(&self, state: &TreeState) -> bool {
        let cached = state.cache.len();
        cached == state.ids.in_use_count() && cached + RESIDENT_HEADROOM <= self.cache_nodes
    }

    /// Does the root take `message` in place (cached, and not overflowing with it)?
    fn fits_root(&self, state: &TreeState, message: &Message) -> bool {
        match state.cache.node(ROOT) {
            Some(root) => {
                root.size_with(message) <= self.policy.block_size
                    && !root.structure_overfull(&self.policy)
            }
            None => false,
        }
    }

    /// The common case: the root is cached and takes the message without overflowing.
    pub(crate) fn apply_in_place(&self, message: &Message) -> bool {
        let mut state = self.state.write();
        let fits = self.fits_root(&state, message);
        if fits {
            state
                .cache
                .modify(ROOT, |root| root.apply(vec![message.clone()]));
            state.commits += 1;
        }
        fits
    }

    /// Read node `id` with no lock held and cache it, pinned for the rest of the operation —
    /// unless the tree changed in a way that could make the copy read stale; the caller
    /// retries from the root either way.
    fn load(&self, ld: &dyn NodeLoader, id: u64, mark: LoadMark, pins: &mut Pins) -> Result<()> {
        assert_not_held("loading a tree node");
        let loaded = ld.load_node(id).and_then(|block| {
            if block.len() != self.policy.block_size {
                return Err(FsError::corrupt(
                    "tree node",
                    format!("node {id}: block of {} bytes", block.len()),
                ));
            }
            Ok(Node::from_image(fmt::decode(&block, id)?))
        });
        let mut state = self.state.write();
        match loaded {
            Ok(node) => {
                if !state.cache.contains(id) {
                    if state.went_stale(mark, id) {
                        return Ok(());
                    }
                    state.cache.insert_loaded(id, node);
                }
                state.cache.pin(id);
                pins.ids.push(id);
                state.cache.evict_to(self.cache_nodes);
                Ok(())
            }
            Err(_) if state.cache.contains(id) => Ok(()),
            // The node may have been freed or moved meanwhile: look again from the root.
            Err(_)
                if state.committed_since(mark) && pins.retried_failures < MAX_RETRIED_FAILURES =>
            {
                pins.retried_failures += 1;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
