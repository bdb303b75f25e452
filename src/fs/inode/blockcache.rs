//! A small LRU cache of inode blocks read from the log, so loading the fifteen inodes of one
//! block costs one read (a cold `ls -l`, a directory walk). A log address holds the same
//! block until its segment is cleaned; the checkpoint that cleans segments drops their blocks
//! from here before anything can be written there again.

use crate::lockcheck::Mutex;
use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::Arc;

pub struct BlockCache {
    blocks: Mutex<LruCache<u64, Arc<Vec<u8>>>>,
}

impl BlockCache {
    pub fn new(capacity: usize) -> BlockCache {
        BlockCache {
            blocks: Mutex::new(
                "inode block cache",
                LruCache::new(NonZeroUsize::new(capacity.max(1)).unwrap()),
            ),
        }
    }

    pub fn get(&self, addr: u64) -> Option<Arc<Vec<u8>>> {
        self.blocks.lock().get(&addr).cloned()
    }

    pub fn put(&self, addr: u64, block: Arc<Vec<u8>>) {
        self.blocks.lock().put(addr, block);
    }

    /// Forget every block whose address `gone` says is about to be reusable.
    pub fn forget(&self, gone: impl Fn(u64) -> bool) {
        let mut b = self.blocks.lock();
        let stale: Vec<u64> = b.iter().map(|(&a, _)| a).filter(|&a| gone(a)).collect();
        for a in stale {
            b.pop(&a);
        }
    }
}
