//! The checkpoint (docs/DESIGN.md, "What a checkpoint writes, and in which order"): a
//! transaction of everything dirty, then the dirty meta-file blocks and a checkpoint region.

use super::log_commit::FlushState;
use crate::fs::Fs;
use crate::log::checkpoint::{finish_checkpoint, prepare_checkpoint, CheckpointInfo};
use crate::{FsError, Result};
use std::time::Instant;

impl Fs {
    /// Write everything and a checkpoint.
    pub(crate) fn checkpoint(&self, clean: bool) -> Result<()> {
        let mut fl = self.log.flusher();
        self.checkpoint_locked(&mut fl, clean)
    }

    pub(crate) fn checkpoint_locked(&self, fl: &mut FlushState, clean: bool) -> Result<()> {
        self.checkpoint_written(fl, clean).map(|_| ())
    }

    /// `checkpoint_locked`, saying which meta blocks the checkpoint wrote.
    pub(crate) fn checkpoint_written(
        &self,
        fl: &mut FlushState,
        clean: bool,
    ) -> Result<Vec<crate::log::checkpoint::Item>> {
        if self.is_read_only() {
            return Ok(Vec::new());
        }
        self.flush_locked(fl)?;
        let result = (|| {
            let prepared = {
                let next_node_id = self.ns.tree.next_node_id(); // the tree lock ranks before the tables
                let mut locked = self.lock_tables();
                let mut t = locked.tables();
                let info = CheckpointInfo {
                    serial: fl.ckpt_serial + 1,
                    next_node_id,
                    clean,
                };
                let prepared = prepare_checkpoint(&self.sb, &mut fl.writer, &mut t, info);
                self.tables_changed(&t);
                prepared?
            };
            // Nothing may be written into a segment this checkpoint frees before the flush
            // lock is released, so its blocks can leave the cache now.
            let freed: std::collections::HashSet<u64> = prepared.cleaned.iter().copied().collect();
            if !freed.is_empty() {
                self.ns
                    .inode_blocks
                    .forget(|a| freed.contains(&self.sb.segment_of(a)));
            }
            let blocks = prepared.log_blocks();
            let items = prepared.items.clone();
            finish_checkpoint(&self.sb, self.log.dev(), &mut fl.writer, prepared)
                .map(|cp| (cp, blocks, items))
        })();
        match result {
            Ok((cp, blocks, items)) => {
                fl.ckpt_serial = cp.serial;
                fl.segments_since_ckpt = 0;
                fl.last_ckpt = Instant::now();
                self.log.count_checkpoint(blocks);
                Ok(items)
            }
            Err(e) => {
                if !matches!(e, FsError::Errno(libc::ENOSPC)) {
                    log::error!("checkpoint failed, no further writes: {e}");
                    self.log.set_failed(e.to_string());
                }
                Err(e)
            }
        }
    }
}
