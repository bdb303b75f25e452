//! The background thread of the log: periodic write-back of old cached data, log writes and
//! checkpoints, cache trimming.

use crate::fs::Fs;

impl Fs {
    /// The background thread: periodic log flushes and checkpoints, cache trimming.
    pub(crate) fn background(fs: std::sync::Weak<Fs>) {
        loop {
            let Some(me) = fs.upgrade() else { return };
            if me.is_shut_down() {
                return;
            }
            if me.log.wait_for_stop(me.opts.flush_interval) {
                return;
            }
            // Cached data old enough goes to the data device before the log write maps it;
            // the rest is recorded without it (data/data_cache.rs).
            if let Err(e) = me.writeback_expired(me.opts.data_expire) {
                log::warn!("periodic write-back of cached data: {e}");
            }
            let mut fl = me.log.flusher();
            let due = fl.last_ckpt.elapsed() >= me.opts.checkpoint_interval
                || fl.segments_since_ckpt >= me.opts.checkpoint_segments;
            let r = if due {
                me.checkpoint_locked(&mut fl, false)
            } else {
                me.flush_locked(&mut fl)
            };
            drop(fl);
            if let Err(e) = r {
                log::warn!("periodic log write: {e}");
            }
            me.alloc.return_idle_windows();
            me.trim_caches();
        }
    }

    /// Keep cached metadata within budget: half for inodes and indirect blocks, half for tree
    /// nodes (the tree trims itself).
    pub(crate) fn trim_caches(&self) {
        let budget = self.opts.cache_bytes / 2;
        if self.ns.inodes.bytes(self.sb.block_size) > budget {
            self.ns.inodes.evict(budget * 3 / 4, self.sb.block_size);
        }
    }
}
