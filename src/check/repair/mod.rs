//! Repairing what the checker finds (fsck.dualfs -p / -y).
//!
//! A repair runs in rounds. Each round checks the file system, turns the findings into a plan
//! (`plan`), keeps what the policy allows, and carries it out:
//!
//! - superblock repairs are written straight to the devices, and the round ends there (the
//!   rest of the check depends on them);
//! - everything else goes through the core: the tables are prepared in memory (inode map
//!   entries, node map, bitmaps rebuilt from the blocks files use, segment usage recomputed
//!   from what is reachable, a fresh log head if needed), the file system is opened on them,
//!   a checkpoint starts a new log epoch, inode and namespace repairs run as ordinary
//!   operations, and the unmount writes a clean checkpoint (`session`).
//!
//! The next round checks again; a repair ends when the check is clean, when nothing more may
//! be done, or when a round changed nothing the check reports. Nothing is ever done that the
//! policy does not allow, and a repair that cannot be done safely is left for a person (the
//! uncorrectable list).

mod fixes;
mod namespace;
mod plan;
mod session;
mod superblock;

pub use fixes::{FixClass, Policy};

use super::{run, Options, ProgressFn, Report};
use crate::device::BlockDevice;
use crate::Result;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most rounds one repair runs.
const MAX_ROUNDS: u32 = 6;

/// How to repair.
#[derive(Clone, Default)]
pub struct RepairOptions {
    /// What may be done without asking.
    pub policy: Policy,
    /// Ask about the classes the policy does not allow (else they are declined).
    pub interactive: bool,
    /// Check verbosely (every problem listed).
    pub verbose: bool,
    pub progress: Option<ProgressFn>,
}

/// A question for the person at the terminal: may `class` be done, for these reasons?
pub struct Question<'a> {
    pub class: FixClass,
    pub fixes: &'a [String],
}

/// What a repair did.
#[derive(Clone, Debug, Default)]
pub struct RepairOutcome {
    /// The check before anything was done.
    pub first: Report,
    /// The check after the last round (the same as `first` when nothing was done).
    pub last: Report,
    /// Repairs made, in order.
    pub done: Vec<String>,
    /// Repairs planned but not carried out (an operation failed).
    pub failed: Vec<String>,
    /// Repairs found but not allowed, with their class.
    pub declined: Vec<(FixClass, String)>,
    /// What no repair can fix.
    pub uncorrectable: Vec<String>,
    /// Anything was written.
    pub modified: bool,
    pub rounds: u32,
}

/// Check the file system on `meta` and `data` and repair what `opts` allows; `ask` answers the
/// questions of an interactive repair (once per class).
pub fn repair(
    meta: &Arc<dyn BlockDevice>,
    data: &Arc<dyn BlockDevice>,
    opts: &RepairOptions,
    ask: &mut dyn FnMut(&Question) -> bool,
) -> Result<RepairOutcome> {
    let check_opts = Options {
        verbose: opts.verbose,
        progress: opts.progress.clone(),
    };
    let mut outcome = run(&**meta, &**data, &check_opts, None)?;
    let mut result = RepairOutcome {
        first: outcome.report.clone(),
        last: outcome.report.clone(),
        ..RepairOutcome::default()
    };
    let mut answers: BTreeMap<FixClass, bool> = BTreeMap::new();
    let mut previous_problems: Option<Vec<String>> = None;
    while result.rounds < MAX_ROUNDS && !outcome.report.is_clean() {
        // Warnings count too: a superblock repair may mend only what the check warned about,
        // and the errors it leaves are for the next round.
        let problems: Vec<String> = outcome
            .report
            .errors()
            .chain(outcome.report.warnings())
            .map(|p| format!("{}: {}", p.pass, p.message))
            .collect();
        if previous_problems.as_ref() == Some(&problems) {
            break; // the last round changed nothing the check sees
        }
        previous_problems = Some(problems);

        // Which classes may run: the policy, else the answers.
        let probe = plan::plan(&outcome.findings, outcome.state.as_ref(), &Policy::all());
        let mut policy = opts.policy.clone();
        for (class, fixes) in probe.by_class() {
            if policy.allows(class) {
                continue;
            }
            let yes = if opts.interactive {
                *answers.entry(class).or_insert_with(|| {
                    ask(&Question {
                        class,
                        fixes: &fixes,
                    })
                })
            } else {
                false
            };
            policy.set(class, yes);
        }
        let plan = plan::plan(&outcome.findings, outcome.state.as_ref(), &policy);
        result.declined = plan.declined.clone();
        result.uncorrectable = plan.uncorrectable.clone();
        if plan.is_empty() {
            break;
        }
        result.rounds += 1;
        result.modified = true;
        if !plan.raw.is_empty() {
            for p in &plan.raw {
                match superblock::apply(&**meta, &**data, &p.fix) {
                    Ok(()) => result.done.push(p.message.clone()),
                    Err(e) => result.failed.push(format!("{}: not done: {e}", p.message)),
                }
            }
        } else if let Some(state) = outcome.state.take() {
            let done = session::run(meta, data, state, &plan)?;
            result.done.extend(done.done);
            result.failed.extend(done.failed);
        }
        outcome = run(&**meta, &**data, &check_opts, None)?;
        result.last = outcome.report.clone();
    }
    if outcome.report.is_clean() {
        result.declined.clear();
        result.uncorrectable.clear();
    } else if result.uncorrectable.is_empty() && result.declined.is_empty() {
        // Nothing planned for what is left: say so rather than nothing.
        let plan = plan::plan(&outcome.findings, outcome.state.as_ref(), &Policy::all());
        result.uncorrectable = plan.uncorrectable;
        if result.uncorrectable.is_empty() {
            result
                .uncorrectable
                .push("problems remain that this repair does not know how to fix".into());
        }
    }
    Ok(result)
}
