//! Tests of the checker: clean images stay clean, every kind of damage is found by the pass
//! meant to find it, and no damage at all makes the checker panic or hang.

#[macro_use]
mod image;
mod attributes;
mod clean;
mod corruption;
mod crashes;
mod damage;
mod hostile;
mod repair;
mod robustness;

use super::{Outcome, Report, Severity};
use std::collections::BTreeSet;

pub const SUPERBLOCKS: &str = super::pass0_superblocks::NAME;
pub const CHECKPOINTS: &str = super::pass1_checkpoints::NAME;
pub const INODES: &str = super::pass2_inodes::NAME;
pub const BLOCK_MAPS: &str = super::pass3_block_maps::NAME;
pub const DATA_BITMAPS: &str = super::pass4_data_bitmaps::NAME;
pub const SEGMENT_USAGE: &str = super::pass5_segment_usage::NAME;
pub const TREE: &str = super::pass6_tree::NAME;
pub const NAMESPACE: &str = super::pass7_namespace::NAME;

impl Outcome {
    /// Log blocks something reachable names, plus the superblock and its copies (none when
    /// the check stopped before pass 2). Only tests need the whole set, so it is built here
    /// from the claims rather than by every check.
    pub fn live_log_blocks(&self) -> BTreeSet<u64> {
        let Some(state) = &self.state else {
            return BTreeSet::new();
        };
        let sb = &state.sb;
        let copies = sb.copy_segments.iter();
        std::iter::once(0)
            .chain(copies.map(|&s| s.saturating_mul(sb.segment_blocks as u64)))
            .chain(state.claims.iter().map(|(addr, _)| addr))
            .collect()
    }
}

/// `pass` reported an error containing `needle`.
#[track_caller]
pub fn assert_error(r: &Report, pass: &str, needle: &str) {
    assert!(
        r.errors()
            .any(|p| p.pass == pass && p.message.contains(needle)),
        "expected an error in pass '{pass}' containing {needle:?}; the report:\n{r}"
    );
}

/// `pass` reported a warning containing `needle`.
#[track_caller]
pub fn assert_warning(r: &Report, pass: &str, needle: &str) {
    assert!(
        r.problems.iter().any(|p| p.severity == Severity::Warning
            && p.pass == pass
            && p.message.contains(needle)),
        "expected a warning in pass '{pass}' containing {needle:?}; the report:\n{r}"
    );
}

/// Every error comes from one of `passes`.
#[track_caller]
pub fn assert_errors_only_in(r: &Report, passes: &[&str]) {
    for p in r.errors() {
        assert!(
            passes.contains(&p.pass),
            "unexpected error in pass '{}': {}; the report:\n{r}",
            p.pass,
            p.message
        );
    }
}
