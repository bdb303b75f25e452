//! The consistency checker: reads an unmounted DualFS (both devices) and reports every
//! inconsistency it finds, without writing anything. Used by the integration tests after
//! unmount and by fsck.dualfs.
//!
//! It works in passes, as NetBSD's fsck_lfs does, each in its own file and each relying only on
//! what earlier passes established:
//!
//! | pass | file | checks |
//! |---|---|---|
//! | 0 | `pass0_superblocks` | both superblocks, their pairing, the copies in the log, device sizes |
//! | 1 | `pass1_checkpoints` | both checkpoint regions, the tables they name, roll-forward of the log after the newest |
//! | 2 | `pass2_inodes` | inode map against the `INODES` blocks, the on-disk free list, link/orphan flags |
//! | 3 | `pass3_block_maps` | every file's direct and indirect pointers, symlink blocks, block counts |
//! | 4 | `pass4_data_bitmaps` | data bitmaps and group descriptors against the blocks files use |
//! | 5 | `pass5_segment_usage` | live bytes and flags of every segment, recomputed from what is reachable |
//! | 6 | `pass6_tree` | the B-epsilon tree's own invariants, the node map |
//! | 7 | `pass7_namespace` | entries against inodes: types, sizes, link counts, '..', reachability |
//!
//! Anything wrong on the devices is a [`Problem`]; `Err` is returned only when a device cannot be
//! read. Damaged input never makes the checker panic: every address, count and index read from
//! disk is checked before it is used, and every loop is bounded by a count verified first.
//! When the superblock or every checkpoint is unusable the check stops there (all later passes
//! depend on them).

mod context;
mod pass0_superblocks;
mod pass1_checkpoints;
mod pass2_inodes;
mod pass3_block_maps;
mod pass4_data_bitmaps;
mod pass5_segment_usage;
mod pass6_tree;
mod pass7_namespace;
#[cfg(test)]
mod tests;

use crate::device::BlockDevice;
use crate::Result;
use context::{BoundedDevice, Claims, LogReader, Sink};
use std::collections::BTreeSet;
use std::fmt;

/// How to check.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// List every problem (otherwise each pass lists at most `context::PROBLEMS_PER_PASS`
    /// and summarizes the rest) and add informational notes to the report.
    pub verbose: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The file system is inconsistent: something is lost, leaked, or could be damaged by use.
    Error,
    /// Suspicious or unusual but harmless (for example: not cleanly unmounted, or a checkpoint
    /// region that cannot serve as a fallback).
    Warning,
}

/// One thing found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub severity: Severity,
    /// The pass that found it (one of the `NAME`s of the pass modules, e.g. "block maps").
    pub pass: &'static str,
    pub message: String,
}

/// What the checker saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Serial of the checkpoint the check started from, and whether it was written at unmount.
    pub checkpoint_serial: u64,
    pub checkpoint_clean: bool,
    /// What roll-forward applied after that checkpoint, and the incomplete tail it dropped.
    pub transactions_rolled_forward: u64,
    pub partial_segments_rolled_forward: u64,
    pub partial_segments_discarded: u64,
    /// Allocated inodes (including ones that could not be read), by type.
    pub inodes: u64,
    pub directories: u64,
    pub files: u64,
    pub symlinks: u64,
    pub special_files: u64,
    /// Allocated inodes with no links kept for an open file (freed by the next mount).
    pub orphans: u64,
    /// Data blocks referenced by files (block 0, the superblock, not counted).
    pub data_blocks_used: u64,
    /// Log blocks something reachable names (inode blocks, indirect, symlink, node and
    /// meta-file blocks).
    pub log_blocks_live: u64,
    /// Tree nodes reachable from the root.
    pub tree_nodes: u64,
    /// Directory entries.
    pub entries: u64,
}

/// Everything the check found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub problems: Vec<Problem>,
    pub stats: Stats,
    /// Informational lines, only with `Options::verbose`.
    pub notes: Vec<String>,
}

impl Report {
    /// No errors (warnings allowed).
    pub fn is_clean(&self) -> bool {
        self.errors().next().is_none()
    }

    pub fn errors(&self) -> impl Iterator<Item = &Problem> {
        self.problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Problem> {
        self.problems
            .iter()
            .filter(|p| p.severity == Severity::Warning)
    }

    /// Problems found by the pass named `pass`.
    pub fn problems_in<'a>(&'a self, pass: &'a str) -> impl Iterator<Item = &'a Problem> + 'a {
        self.problems.iter().filter(move |p| p.pass == pass)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        for p in &self.problems {
            let sev = match p.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            writeln!(f, "{sev} [{}] {}", p.pass, p.message)?;
        }
        let s = &self.stats;
        let errors = self.errors().count();
        let warnings = self.warnings().count();
        write!(
            f,
            "checkpoint {}{}, {} transactions rolled forward; {} inodes ({} directories, {} files, \
             {} symlinks, {} special, {} orphans), {} data blocks in use, {} live log blocks, \
             {} tree nodes, {} entries: {} {}, {} {}",
            s.checkpoint_serial,
            if s.checkpoint_clean { " (clean)" } else { "" },
            s.transactions_rolled_forward,
            s.inodes,
            s.directories,
            s.files,
            s.symlinks,
            s.special_files,
            s.orphans,
            s.data_blocks_used,
            s.log_blocks_live,
            s.tree_nodes,
            s.entries,
            errors,
            if errors == 1 { "error" } else { "errors" },
            warnings,
            if warnings == 1 { "warning" } else { "warnings" },
        )
    }
}

/// Check the file system on `meta` (metadata device) and `data` (data device) with default
/// options. Nothing is written.
pub fn check(meta: &dyn BlockDevice, data: &dyn BlockDevice) -> Result<Report> {
    check_with(meta, data, &Options::default())
}

pub fn check_with(
    meta: &dyn BlockDevice,
    data: &dyn BlockDevice,
    opts: &Options,
) -> Result<Report> {
    Ok(run(meta, data, opts, None)?.report)
}

/// A report plus what tests need to judge it.
pub(crate) struct Outcome {
    pub report: Report,
    /// Log blocks something reachable names, plus the superblock and its copies.
    #[cfg_attr(not(test), allow(dead_code))]
    pub live_log_blocks: BTreeSet<u64>,
}

/// The whole check. `listed` replaces the directory entries the tree holds (tests use it with
/// the entries the live file system listed, while the tree stand-in cannot persist them).
pub(crate) fn run(
    meta: &dyn BlockDevice,
    data: &dyn BlockDevice,
    opts: &Options,
    listed: Option<Vec<pass6_tree::Entry>>,
) -> Result<Outcome> {
    let meta = BoundedDevice::new(meta);
    let mut sink = Sink::new(opts);
    let mut live_log_blocks = BTreeSet::new();
    let outcome = |sink: Sink, live| Outcome {
        report: sink.finish(),
        live_log_blocks: live,
    };

    let Some(sb) = pass0_superblocks::run(&mut sink, &meta, data)? else {
        return Ok(outcome(sink, live_log_blocks));
    };
    live_log_blocks.insert(0);
    live_log_blocks.extend(
        sb.copy_segments
            .iter()
            .map(|&s| s.saturating_mul(sb.segment_blocks as u64)),
    );
    let log = LogReader::new(&meta, sb.clone());
    let Some(state) = pass1_checkpoints::run(&mut sink, &log)? else {
        return Ok(outcome(sink, live_log_blocks));
    };
    let mut claims = Claims::default();
    let inodes = pass2_inodes::run(&mut sink, &log, &mut claims, &state)?;
    let data_use = pass3_block_maps::run(&mut sink, &log, &mut claims, &inodes)?;
    pass4_data_bitmaps::run(&mut sink, &state.tables, &inodes, &data_use);
    pass5_segment_usage::run(&mut sink, &log, &mut claims, &state);
    live_log_blocks.extend(claims.addresses());
    if let Some(tree) = pass6_tree::run(&mut sink, &log, &state, listed)? {
        pass7_namespace::run(&mut sink, &tree, &inodes);
    }
    Ok(outcome(sink, live_log_blocks))
}
