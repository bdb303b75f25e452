//! What the core reports about the log and cleaning: the answers of `Fs::cleaner_status`,
//! `usage_table` and the cleaning passes, which the control protocol (`crate::control_protocol`)
//! carries as they are.

use super::policy::{CleanerCounters, Thresholds};
use serde::{Deserialize, Serialize};

/// The state of the log and of cleaning.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub segments: u64,
    pub segment_bytes: u64,
    pub block_size: u32,
    /// Segments the log can use (all but segment 0).
    pub log_segments: u64,
    pub clean: u64,
    pub dirty: u64,
    /// Clean segments writers leave alone (they get ENOSPC before touching them).
    pub reserve: u64,
    /// Of the reserve, what only the cleaner may use (the bound of one cleaning pass).
    pub cleaner_reserve: u64,
    pub live_bytes: u64,
    /// Live bytes over the bytes of all log segments.
    pub utilization: f64,
    /// Live bytes writers may reach (beyond it they get ENOSPC: cleaning would not pay).
    pub live_limit_bytes: u64,
    /// Seconds since the last write operation.
    pub idle_secs: u64,
    /// Cleaner daemons connected with `takeover`.
    pub daemons: u64,
    pub thresholds: Thresholds,
    pub counters: CleanerCounters,
    /// bytes_written / bytes_freed of all passes so far.
    pub write_cost: f64,
    pub log_blocks_written: u64,
    pub checkpoints: u64,
}

/// One row of the segment usage table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    pub live_bytes: u32,
    pub flags: u32,
    pub last_mod: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTable {
    pub segment_bytes: u64,
    /// Seconds since the epoch, as `last_mod`.
    pub now: u64,
    /// Indexed by segment number.
    pub segments: Vec<SegmentInfo>,
}

impl UsageTable {
    /// The rows as the policy code takes them.
    pub fn seg_usage(&self) -> Vec<crate::format::meta::SegUsage> {
        self.segments
            .iter()
            .map(|s| crate::format::meta::SegUsage {
                live_bytes: s.live_bytes,
                flags: s.flags,
                last_mod: s.last_mod,
            })
            .collect()
    }
}

/// What one cleaning pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassReport {
    /// Segments that are clean now thanks to this pass.
    pub cleaned: Vec<u64>,
    /// Segments asked for that were not cleaned, with the reason.
    pub refused: Vec<(u64, String)>,
    pub partial_segments: u64,
    pub blocks_examined: u64,
    /// Live blocks moved (inodes count one each).
    pub live_moved: u64,
    /// Upper bound on the log blocks the pass could need, computed before it started.
    pub bound_blocks: u64,
    /// Log bytes the pass wrote: the live bytes it moved, the indirect blocks, inodes and
    /// symlink blocks that moved with them, its checkpoints (writers going on meanwhile are
    /// not counted).
    pub bytes_written: u64,
    /// Dead bytes reclaimed.
    pub bytes_freed: u64,
    pub clean_before: u64,
    pub clean_after: u64,
}
