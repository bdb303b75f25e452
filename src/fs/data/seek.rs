//! lseek(SEEK_DATA / SEEK_HOLE) from the block map and the cached data.
//!
//! Data is what a written pointer maps; holes are everything else: blocks never allocated,
//! and blocks allocated by fallocate but never written (they read as zeros), as ext4 and XFS
//! report unwritten extents that have no pages in the page cache. The walk skips hole
//! subtrees whole (`bmap::walk`), so a hole of gigabytes costs a few pointer reads, not one
//! per block. Past the end of the file is ENXIO; the end of the file is a hole.

use super::file::regular_size;
use crate::format::bmap::DataPtr;
use crate::fs::inode::bmap;
use crate::fs::inode::InodeEntry;
use crate::fs::Fs;
use crate::{FsError, Result};

/// What `seek` looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whence {
    /// The first byte at or after the offset that is data.
    Data,
    /// The first byte at or after the offset that is in a hole (the end of the file at most).
    Hole,
}

fn written(raw: u64) -> bool {
    DataPtr::decode(raw).is_written()
}

impl Fs {
    /// lseek(SEEK_DATA / SEEK_HOLE) on a regular file: the offset found, or ENXIO when
    /// `offset` is at or past the end (or, for data, no data follows it).
    pub fn seek(&self, ino: u64, offset: u64, whence: Whence) -> Result<u64> {
        self.alive()?;
        let e = self.inode(ino)?;
        let size = regular_size(&e)?;
        if offset >= size {
            return Err(FsError::Errno(libc::ENXIO));
        }
        let bs = self.sb.block_size as u64;
        let (from, end) = (offset / bs, size.div_ceil(bs));
        // Cached blocks are data, whatever the block map says (data_cache.rs).
        let found = match whence {
            Whence::Data => {
                let mapped = self.find_block(&e, from, end, &written)?;
                let cached = Fs::first_cached(&e.state.read(), from, end);
                mapped.into_iter().chain(cached).min()
            }
            Whence::Hole => {
                let mut from = from;
                loop {
                    let Some(h) = self.find_block(&e, from, end, &|raw| !written(raw))? else {
                        break None;
                    };
                    if !Fs::is_cached(&e.state.read(), h) {
                        break Some(h);
                    }
                    from = h + 1;
                }
            }
        };
        match (whence, found) {
            (_, Some(n)) => Ok((n * bs).max(offset).min(size)),
            (Whence::Data, None) => Err(FsError::Errno(libc::ENXIO)),
            (Whence::Hole, None) => Ok(size),
        }
    }

    /// `bmap::walk` over file blocks [from, end) of `e`, loading indirect blocks as needed.
    pub(crate) fn walk_blocks(
        &self,
        e: &InodeEntry,
        from: u64,
        end: u64,
        f: &mut dyn FnMut(u64, u64, u64) -> bool,
    ) -> Result<()> {
        let mut from = from;
        loop {
            let r = bmap::walk(&e.state.read(), from, end, self.ppb, f);
            match r {
                Ok(_) => return Ok(()),
                Err(need) => {
                    self.load_ptr(e, need)?;
                    from = from.max(need.index);
                }
            }
        }
    }

    /// The first file block in [from, end) whose pointer `want`s.
    pub(crate) fn find_block(
        &self,
        e: &InodeEntry,
        from: u64,
        end: u64,
        want: &dyn Fn(u64) -> bool,
    ) -> Result<Option<u64>> {
        let mut found = None;
        self.walk_blocks(e, from, end, &mut |n, _, raw| {
            if want(raw) {
                found = Some(n);
            }
            found.is_none()
        })?;
        Ok(found)
    }
}
