//! The directory index: one B-epsilon tree holding the entries of every directory.
//!
//! A key is `(dir, hash, name)` — directory inode, 62-bit SipHash of the name, name bytes —
//! so a directory's entries are contiguous and ordered by hash, which is what `readdir`
//! cookies need. A value is `(ino, type)`. Each node is one `NODE` log block
//! (docs/FORMAT.md), named by a node id that the node map translates to a log address, so
//! moving a node (writing it, cleaning its segment) never touches its parent. Id 1 is always
//! the root: a root split moves the old root's content to a fresh id, a root left with one
//! child pulls that child up.
//!
//! # Fanout and buffer policy
//!
//! An internal node spends its block on *structure* (8-byte child ids and pivots) and on a
//! *buffer* of messages (insert or delete, at most one per key, newer than everything below
//! the node). Updates enter the root's buffer. When a node no longer fits its block, all the
//! messages bound for the child with the most buffered bytes move down in one batch
//! (applied to the entries if the child is a leaf), recursively; nodes that still overflow
//! split by bytes. Every node fits its block again when a mutation returns.
//!
//! - **Fanout at most `F = sqrt(B/16)`**: 16 children for 4 KiB blocks, 32 for 16 KiB, 64 for
//!   64 KiB (TokuDB's 16 at the small end). The square root is the Bε-tree's ε = 1/2 point:
//!   the height `log_F N` stays within a factor 2 of a B-tree's, while each flush moves a
//!   batch of about `buffer/F` bytes — a sizeable share of a block — so updates are cheap.
//!   A larger `F` would make batches too small to pay for the child's rewrite; a smaller one
//!   would add levels to every lookup.
//! - **Short pivots**: a pivot is the shortest separator of its neighbours, `(dir, hash)` with
//!   an empty name unless the two share a hash, so it costs 17 bytes plus the child's 8. A full
//!   4 KiB node spends 383 bytes (9%) on structure and about 3.6 KiB on buffer: 90 or so
//!   messages of 40 bytes (a 12-byte name).
//! - **Structure at most `B/2`**: a node also splits when ids and pivots exceed half its block
//!   (only colliding hashes make long pivots), so the buffer always has half a block and
//!   flushing alone can always make a node fit.
//! - **Merging**: a leaf under a quarter full, or an internal node with fewer than `F/3`
//!   children, is merged with a neighbour after a flush reaches it (its content is shared
//!   evenly instead when the two do not fit one node); an internal node left with a single
//!   child always is; a root with one child is pulled up. Splits leave nodes half full, so
//!   these thresholds leave room before a merge and nodes do not oscillate. The `F/3` matters
//!   for mass deletion: every internal node can keep a block of deletes that never overflows,
//!   and the entries they cancel stay in leaves until it does, so the tree must also shed
//!   internal nodes. Removing all 1,000,000 entries of a directory leaves 4 nodes here when
//!   removed in hash order (readdir order, as `rm -rf` does) and 13 in random order.
//!
//! # Complexity
//!
//! With `N` entries of `e` bytes, leaves at least a quarter full hold `Θ(B/e)` entries and the
//! height is `h = 1 + ⌈log_F(N·e/B)⌉` node levels: a lookup visits `h` nodes with one binary
//! search each — `O(log_F N)` node visits. (Measured with 4 KiB nodes and 12-byte names:
//! 100,000 entries give 4 levels and 1,365 nodes, 1,000,000 give 5 levels and 13,692 nodes,
//! leaves 75% full.) A scan of `k` entries visits `O(h + k·e/B)` nodes, one root-to-leaf
//! descent per leaf. An update costs one root change plus its share of flushes: a message
//! moves down `h - 1` times, and each flush reads and rewrites one child (and its parent)
//! for a batch of at least `B/(2·F·m)` messages of `m` bytes — measured: 21 on average. So
//! an update costs amortized `O(h·F·m/B)` node reads and rewrites — measured: 0.18 flushes
//! per insert at a million entries (`h = 5`), against at least one leaf read and rewrite per
//! update for a B-tree — and the log writer coalesces repeated rewrites of a node between two
//! write-outs. In memory, every node cached, one core, release build: 500,000–800,000
//! inserts, about 500,000 lookups and 4 million scanned entries per second.
//!
//! # Concurrency, caching, writing out
//!
//! The tree has one lock, the state lock. Lookups and scans take it shared. A mutation
//! computes its result in a private overlay (`txn`) under the upgradable lock — so readers
//! keep going and mutations compute one at a time, for CPU work only — and commits it in one
//! step under the write lock. No lock is held across I/O: an operation that meets an
//! uncached node stops, drops the lock, loads the node, caches it (pinned for the rest of the
//! operation, unless an eviction or free meanwhile could have made the copy stale) and runs
//! again from the root, on the tree as it is then; mutations that need no load go on
//! meanwhile. Every load asserts (debug builds, unit tests) that its thread holds no guard. Cached nodes are evicted by clock when over budget,
//! except the root, dirty nodes and nodes handed to the log writer and not yet written.
//! `take_snapshots` takes the dirty set whole in the log writer's exclusive phase, visiting
//! no node; `capture` hands the nodes over after it by pointer (shared `Arc`s, copied on
//! write by later mutations), and a node the set holds is copied before anything changes or
//! frees it in between; the log writer encodes them after.
//! Because a mutation commits all or nothing, one that fails (a load error) leaves the tree
//! exactly as it was, and between mutations every node always fits its block.

mod attrs;
mod cache;
mod check;
mod flush;
mod ids;
mod node;
mod policy;
mod read;
mod state;
mod state_lock;
mod stop;
mod tree;
mod txn;

#[cfg(test)]
mod tests;

pub use crate::format::node::Message;
pub use crate::format::node::{AttrValue, DirValue, Key, Value};
pub use check::TreeStats;
pub use tree::{
    BeTree, DirtyNodes, DirtySnapshots, EntryVisitor, NodeLoader, Preloaded, ScanItem, TakenNodes,
};
