//! copy_file_range(2) inside the daemon: the data goes from the source's blocks to the
//! destination's without crossing FUSE, and the source's holes stay holes (its unwritten
//! blocks count as holes, as SEEK_HOLE reports them): the destination's range gets them
//! punched, so it reads as zeros there and holds no blocks.
//!
//! As Linux: flags must be 0 (EINVAL); a destination opened O_APPEND is EBADF; directories
//! are EISDIR and other non-regular files EINVAL; ranges that overlap in one file are EINVAL;
//! the copy stops at the source's end (0 at or past it) and at the largest file (EFBIG when
//! the destination offset is already there). A copy that fails part-way returns what it
//! copied. Files on other file systems never reach here: the kernel answers EXDEV, or copies
//! itself, before asking.

use super::file::regular_size;
use crate::format::bmap::{max_blocks, DataPtr};
use crate::fs::attrs::flags::Change;
use crate::fs::clean::Admit;
use crate::fs::inode::InodeEntry;
use crate::fs::types::Caller;
use crate::fs::Fs;
use crate::{FsError, Result};
use std::sync::Arc;

/// Most bytes one call copies: the FUSE reply counts them in 32 bits (block-aligned).
pub const COPY_MAX: u64 = u32::MAX as u64 & !0xffff;
/// Data is moved in pieces of this size (each a write of its own).
const PIECE: u64 = 1 << 20;

fn written(raw: u64) -> bool {
    DataPtr::decode(raw).is_written()
}

impl Fs {
    /// Copy up to `len` bytes from `off_in` of the file open as `fh_in` to `off_out` of the
    /// one open as `fh_out`; returns how many were copied.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_file_range(
        &self,
        ino_in: u64,
        fh_in: u64,
        off_in: u64,
        ino_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u32,
    ) -> Result<u64> {
        let root = Caller::ROOT;
        self.copy_file_range_as(
            &root, ino_in, fh_in, off_in, ino_out, fh_out, off_out, len, flags,
        )
    }

    /// copy_file_range by `caller`: without CAP_FSETID it takes set-ID bits away from the
    /// destination, before anything is copied (attrs/privileges.rs).
    #[allow(clippy::too_many_arguments)]
    pub fn copy_file_range_as(
        &self,
        caller: &Caller,
        ino_in: u64,
        fh_in: u64,
        off_in: u64,
        ino_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u32,
    ) -> Result<u64> {
        self.writable()?;
        if flags != 0 {
            return Err(FsError::Errno(libc::EINVAL));
        }
        // The kernel refuses a copy to an O_APPEND descriptor itself (EBADF), so a handle
        // it opened unseen, whose flags the request does not carry, is taken as not one.
        let (h_in, h_out) = (
            self.handle_of(ino_in, fh_in, 0)?,
            self.handle_of(ino_out, fh_out, 0)?,
        );
        if h_in.ino != ino_in || h_out.ino != ino_out || h_out.append {
            return Err(FsError::Errno(libc::EBADF));
        }
        let (src, dst) = (self.inode(ino_in)?, self.inode(ino_out)?);
        let size_in = regular_size(&src)?;
        regular_size(&dst)?;
        if off_in >= size_in || len == 0 {
            return Ok(0);
        }
        let bs = self.sb.block_size as u64;
        let largest = max_blocks(self.ppb) * bs;
        if off_out >= largest {
            return Err(FsError::Errno(libc::EFBIG));
        }
        let len = len
            .min(size_in - off_in)
            .min(largest - off_out)
            .min(COPY_MAX);
        if ino_in == ino_out && off_out < off_in + len && off_in < off_out + len {
            return Err(FsError::Errno(libc::EINVAL));
        }
        {
            let _admitted = self.admit(Admit::Change)?;
            let _op = dst.op.lock_arc();
            self.check_entry(&dst, Change::Modify)?;
            self.contents_changed_by(caller, &dst);
        }
        // The copy finds the source's data by its block map: its cached data goes there first.
        self.writeback_file(&src)?;
        let mut done = 0;
        let result = self.copy_pieces(&src, &dst, (off_in, off_out, len), &mut done);
        let extended = if done > 0 {
            self.extend_to(&dst, off_out + done)
        } else {
            Ok(())
        };
        if done > 0 {
            self.touch_atime(&src);
        }
        match (result.and(extended), done) {
            (Ok(()), _) => Ok(done),
            (Err(_), d) if d > 0 => Ok(d),
            (Err(e), _) => Err(e),
        }
    }

    /// Copy [off_in, off_in + len) to off_out piece by piece, counting in `done` what is
    /// copied: data extents as writes, holes as punched holes.
    fn copy_pieces(
        &self,
        src: &Arc<InodeEntry>,
        dst: &Arc<InodeEntry>,
        (off_in, off_out, len): (u64, u64, u64),
        done: &mut u64,
    ) -> Result<()> {
        let bs = self.sb.block_size as u64;
        let end = off_in + len;
        let end_block = end.div_ceil(bs);
        while *done < len {
            let pos = off_in + *done;
            let data_at = match self.find_block(src, pos / bs, end_block, &written)? {
                Some(n) => (n * bs).clamp(pos, end),
                None => end,
            };
            if data_at > pos {
                // What reads as zeros there must be sound (a pointer to no block is EIO).
                self.range_map(src, (pos / bs, data_at.div_ceil(bs)), (0, 0))?;
                self.punch_for_copy(dst, off_out + *done, data_at - pos)?;
                *done = data_at - off_in;
                continue;
            }
            // Only as far as this piece goes: a dense file is not walked to its end each time.
            let piece_end = (pos + PIECE).min(end);
            let hole_at =
                match self.find_block(src, pos / bs, piece_end.div_ceil(bs), &|r| !written(r))? {
                    Some(n) => (n * bs).clamp(pos, piece_end),
                    None => piece_end,
                };
            let n = hole_at - pos;
            let _admitted = self.admit(Admit::Write(n))?;
            // The source may have shrunk meanwhile: what is gone reads as nothing.
            let bytes = self.read_range(src, regular_size(src)?, pos, n)?;
            if bytes.is_empty() {
                return Ok(());
            }
            let _op = dst.op.lock_arc();
            self.check_entry(dst, Change::Modify)?;
            let size = regular_size(dst)?;
            self.write_locked(dst, size, off_out + *done, &bytes)?;
            *done += bytes.len() as u64;
        }
        Ok(())
    }

    /// The destination's part of a hole in the source: punched, so it reads as zeros and
    /// holds no blocks.
    fn punch_for_copy(&self, dst: &Arc<InodeEntry>, offset: u64, len: u64) -> Result<()> {
        let _admitted = self.admit(Admit::Delete)?;
        let bs = self.sb.block_size as u64;
        let _op = dst.op.lock_arc();
        self.check_entry(dst, Change::Modify)?;
        regular_size(dst)?;
        self.preload_range(dst, offset / bs, (offset + len).div_ceil(bs))?;
        self.punch_locked(dst, offset, offset + len)?;
        self.record_fallocate(
            dst,
            offset,
            len,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        );
        Ok(())
    }

    /// Make the destination at least `size` bytes long (a copy that ended in a hole).
    fn extend_to(&self, dst: &Arc<InodeEntry>, size: u64) -> Result<()> {
        let _admitted = self.admit(Admit::Change)?;
        let _op = dst.op.lock_arc();
        if regular_size(dst)? < size {
            self.truncate_locked(dst, size)?;
            self.record_truncate(dst, size);
        }
        Ok(())
    }
}
