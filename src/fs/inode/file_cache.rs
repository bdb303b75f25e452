//! One file's data written and not yet on the data device: the inode's part of delayed
//! allocation (the mount's part, and the rules: data/data_cache.rs).

use std::collections::BTreeMap;
use std::sync::Arc;

/// One file's cached data.
#[derive(Default)]
pub struct FileCache {
    /// Dirty blocks by file block number, whole (bytes past the end of the file are zeros).
    pub(in crate::fs) blocks: BTreeMap<u64, CachedBlock>,
    /// How many of `blocks` have no data block yet (each holds a promised block, and counts
    /// in the inode's `blocks` as ext4 counts delayed blocks).
    pub(in crate::fs) promised: u64,
    /// The largest size the log may record for the file: its size before the first cached
    /// write, less any truncate since.
    pub(in crate::fs) logged_size: u64,
    /// Log blocks writing the cache back may dirty (indirect blocks), counted in the log's
    /// pending space from the write on.
    pub(in crate::fs) charge: u64,
    /// When the oldest of `blocks` was cached.
    pub(in crate::fs) since: Option<std::time::Instant>,
    /// The stamp of the first write cached (0: no intent log): the intent log keeps the
    /// records from there on until the cache is written back or dropped (`Pins`).
    pub(in crate::fs) intent_from: u64,
}

pub(in crate::fs) struct CachedBlock {
    pub(in crate::fs) data: Arc<Vec<u8>>,
    /// No data block yet: one is promised.
    pub(in crate::fs) promised: bool,
}

impl FileCache {
    /// The size and block count a snapshot records for an inode whose in-memory ones are
    /// `size` and `blocks`.
    pub fn logged(&self, size: u64, blocks: u64) -> (u64, u64) {
        (size.min(self.logged_size), blocks - self.promised)
    }
}
