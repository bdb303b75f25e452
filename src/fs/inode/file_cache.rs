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
    /// pending space from the write on: the smaller of two bounds, `charged_writes` and the
    /// bound over `charged_span` (`charge_write`).
    pub(in crate::fs) charge: u64,
    /// The sum of the writes' own bounds (sparse writes far apart), and the file blocks
    /// from the first to the last a write was charged for (many writes into one range).
    pub(in crate::fs) charged_writes: u64,
    pub(in crate::fs) charged_span: Option<(u64, u64)>,
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
    /// A write of file blocks `first..=last` that needs new data blocks, whose own bound is
    /// `write_bound`, with `span_bound` the bound over a span of blocks: the charge grows to
    /// the smaller bound; returns by how much (never less: both bounds only grow).
    pub(in crate::fs) fn charge_write(
        &mut self,
        first: u64,
        last: u64,
        write_bound: u64,
        span_bound: impl Fn(u64, u64) -> u64,
    ) -> u64 {
        self.charged_writes += write_bound;
        let (lo, hi) = self
            .charged_span
            .map_or((first, last), |(lo, hi)| (lo.min(first), hi.max(last)));
        self.charged_span = Some((lo, hi));
        let charge = self.charged_writes.min(span_bound(lo, hi));
        let more = charge.saturating_sub(self.charge);
        self.charge = self.charge.max(charge);
        more
    }

    /// The size and block count a snapshot records for an inode whose in-memory ones are
    /// `size` and `blocks`.
    pub fn logged(&self, size: u64, blocks: u64) -> (u64, u64) {
        (size.min(self.logged_size), blocks - self.promised)
    }
}
