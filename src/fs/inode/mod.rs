//! Inodes in memory: the cache, their per-inode locks, inode-number allocation, and what each
//! inode holds for the log writer (its indirect blocks, its part of a snapshot) and for delayed
//! allocation (its cached data).
//!
//! Each cached inode has two locks. `op` serializes whole mutations of the inode (directory
//! entries, file contents) and may be held across device I/O; `state` guards the fields and
//! is only held for memory work, so getattr, lookups and reads never wait for I/O.

pub(super) mod blockcache;
pub(super) mod bmap;
mod cache;
mod entry;
pub(super) mod file_cache;
mod ino_alloc;
mod placing;
mod ptr_map;
mod time;

pub use cache::InodeCache;
pub use entry::{InodeEntry, InodeState, StateLock};
pub use file_cache::FileCache;
pub use ino_alloc::InoAllocator;
pub use placing::{Placing, SnapshotPart, SnapshotPlan, TakenBlock};
pub use ptr_map::{PtrBlock, PtrMap};
pub use time::{from_disk_time, to_disk_time};
