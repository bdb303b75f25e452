//! Log commit: the commit path that turns everything dirty into one transaction of the log
//! (docs/DESIGN.md, "Transactions"), the checkpoints and the flusher thread.
//!
//! `log_commit.rs` owns the state (`LogCommit`: the metadata device, the log writer and the
//! gate, the IFile and node map, the failure state); `dirty.rs` and `records.rs` collect what
//! the next transaction holds; `transaction.rs` writes it; `checkpoint.rs` writes
//! checkpoints; `background.rs` runs both on a thread.

pub(super) mod background;
pub(super) mod checkpoint;
pub(super) mod dirty;
pub(super) mod log_commit;
pub(super) mod records;
#[cfg(test)]
mod tests;
pub(super) mod transaction;
