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
//! read. Each problem also records a [`findings::Finding`] that the repairer ([`repair`], used by
//! fsck.dualfs -p/-y) acts on. [`Options::progress`] reports how far the check is; [`glance`]
//! tells a cleanly unmounted file system from the superblocks and checkpoint alone. Damaged input never makes the checker panic: every address, count and index read from
//! disk is checked before it is used, and every loop is bounded by a count verified first.
//! When the superblock or every checkpoint is unusable the check stops there (all later passes
//! depend on them).

mod context;
mod entry;
pub mod findings;
mod glance;
mod pass0_superblocks;
mod pass1_checkpoints;
mod pass2_inodes;
mod pass3_block_maps;
mod pass4_data_bitmaps;
mod pass5_segment_usage;
mod pass6_tree;
mod pass7_attributes;
mod pass7_namespace;
pub mod repair;
mod salvage;
#[cfg(test)]
mod tests;

use crate::device::BlockDevice;
use crate::format::superblock::Superblock;
use crate::Result;
use context::{BoundedDevice, Claims, LogReader, Sink};
use findings::Finding;
pub use glance::{glance, Glance};
use std::fmt;
use std::sync::Arc;

/// How to check. Build it with `Options::default()` and struct update syntax
/// (`Options { verbose: true, ..Options::default() }`): fields may be added.
#[derive(Clone, Default)]
pub struct Options {
    /// List every problem (otherwise each pass lists at most `context::PROBLEMS_PER_PASS`
    /// and summarizes the rest) and add informational notes to the report.
    pub verbose: bool,
    /// Called as the check advances (for a progress bar). Calls come from the checking
    /// thread, often (up to a few thousand per pass): keep it cheap.
    pub progress: Option<ProgressFn>,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("verbose", &self.verbose)
            .field("progress", &self.progress.as_ref().map(|_| "callback"))
            .finish()
    }
}

/// A progress callback.
pub type ProgressFn = std::sync::Arc<dyn Fn(&Progress) + Send + Sync>;

/// How far the check is: pass `pass` (0..=7, named `name`) has done `done` of `total` units
/// (inodes, blocks, entries: whatever the pass counts; `total` may grow while it runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub pass: u8,
    pub passes: u8,
    pub name: &'static str,
    pub done: u64,
    pub total: u64,
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
    /// Extended attributes, and the `VALUE` blocks holding their long values.
    pub attributes: u64,
    pub value_blocks: u64,
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
             {} tree nodes, {} entries, {} attributes: {} {}, {} {}",
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
            s.attributes,
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

/// A report plus what tests and the repairer need.
pub(crate) struct Outcome {
    pub report: Report,
    /// What a repair can act on.
    pub findings: Vec<Finding>,
    /// What the passes established (None when the check stopped at pass 0 or 1).
    pub state: Option<State>,
}

/// What the passes established: the state a mount would see, and what is reachable in it.
pub(crate) struct State {
    pub sb: Arc<Superblock>,
    pub loaded: pass1_checkpoints::Loaded,
    pub inodes: pass2_inodes::Inodes,
    pub data_use: pass3_block_maps::DataUse,
    /// None when the tree could not be listed.
    pub namespace: Option<pass6_tree::Namespace>,
    /// What a rebuild of a damaged tree would keep.
    pub salvaged: Option<salvage::Salvaged>,
    /// Every live log block and what it is.
    pub claims: Claims,
}

/// The whole check. `listed` replaces the directory entries the tree holds (tests use it with
/// the entries the live file system listed, while the tree stand-in cannot persist them).
pub(crate) fn run(
    meta: &dyn BlockDevice,
    data: &dyn BlockDevice,
    opts: &Options,
    listed: Option<Vec<entry::Entry>>,
) -> Result<Outcome> {
    let meta = BoundedDevice::new(meta);
    let mut sink = Sink::new(opts);
    let outcome = |sink: Sink, state| {
        let (report, findings) = sink.finish_with_findings();
        Outcome {
            report,
            findings,
            state,
        }
    };

    let started = std::time::Instant::now();
    let mut lap = started;
    let mut timed = |sink: &mut Sink, pass: &str| {
        let now = std::time::Instant::now();
        let took = now - lap;
        lap = now;
        sink.note(|| format!("pass {pass} took {:.1} ms", took.as_secs_f64() * 1e3));
    };
    sink.progress(0, pass0_superblocks::NAME, 0, 1);
    let Some(sb) = pass0_superblocks::run(&mut sink, &meta, data)? else {
        return Ok(outcome(sink, None));
    };
    let log = LogReader::new(&meta, sb.clone());
    timed(&mut sink, "0 (superblocks)");
    let Some(loaded) = pass1_checkpoints::run(&mut sink, &log)? else {
        return Ok(outcome(sink, None));
    };
    timed(&mut sink, "1 (checkpoints)");
    // Pass 6 needs only the tables: it runs beside passes 2 to 5 (on a second core).
    let mut claims = Claims::default();
    let (inodes, data_use, namespace, tree_sink) = std::thread::scope(|scope| {
        let mut tree_sink = sink.side();
        let (log6, loaded6) = (&log, &loaded);
        let tree = scope.spawn(move || {
            let t = std::time::Instant::now();
            let ns = pass6_tree::run(&mut tree_sink, log6, loaded6, listed);
            let took = t.elapsed();
            tree_sink.note(|| format!("pass 6 (tree) took {:.1} ms", took.as_secs_f64() * 1e3));
            (ns, tree_sink)
        });
        let mut rest = || -> Result<_> {
            let inodes = pass2_inodes::run(&mut sink, &log, &mut claims, &loaded)?;
            timed(&mut sink, "2 (inodes)");
            let data_use = pass3_block_maps::run(&mut sink, &log, &mut claims, &inodes)?;
            timed(&mut sink, "3 (block maps)");
            pass4_data_bitmaps::run(&mut sink, &loaded.tables, &inodes, &data_use);
            timed(&mut sink, "4 (data bitmaps)");
            pass5_segment_usage::run(&mut sink, &log, &mut claims, &loaded);
            timed(&mut sink, "5 (segment usage)");
            Ok((inodes, data_use))
        };
        let rest = rest();
        let (ns, tree_sink) = match tree.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        };
        rest.map(|(i, d)| (i, d, ns, tree_sink))
    })?;
    sink.absorb(tree_sink);
    let pass6_tree::TreeResult {
        namespace,
        salvaged,
    } = namespace?;
    timed(&mut sink, "6 (tree, waited for)");
    if let Some(ns) = &namespace {
        pass7_namespace::run(&mut sink, ns, &inodes);
        pass7_attributes::run(&mut sink, ns, &inodes);
    }
    timed(&mut sink, "7 (namespace)");
    sink.note(|| {
        format!(
            "the check took {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        )
    });
    let state = State {
        sb,
        loaded,
        inodes,
        data_use,
        namespace,
        salvaged,
        claims,
    };
    Ok(outcome(sink, Some(state)))
}
