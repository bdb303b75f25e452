//! Direct I/O (`O_DIRECT`) for [`FileDevice`](super::FileDevice): the kernel moves a device's
//! bytes between the storage and DualFS's buffers without its page cache. A file's data is
//! then cached once, in the page cache of the FUSE file, not a second time in that of the
//! data device, and the storage sees DualFS's own requests, in its order and sizes, instead
//! of the page cache's write-back and read-ahead.
//!
//! `O_DIRECT` wants the buffer's address, the offset and the length to be multiples of the
//! device's alignment (its logical block size; for an image file what the file system it is
//! on reports, see [`alignment`]). [`BlockDevice`](super::BlockDevice)'s callers do not keep
//! to it: offsets and lengths are bytes, the data path writes parts of blocks (a write's head
//! and tail, the zeroing of a file's tail) and reads any byte range, and no buffer is aligned
//! in memory. So:
//!
//! - a request whose buffer, offset and length are all aligned goes to the kernel as it is;
//! - any other goes through an aligned bounce buffer over the request's *span*, the request
//!   widened to whole alignment units. A read reads the span and copies the request's bytes
//!   out. A write reads the span's first and last unit where the request covers them only in
//!   part (read-modify-write), copies the request's bytes in, and writes the span: still one
//!   `pwrite` per request, up to [`PIECE_MAX`] bytes.
//!
//! **Why the read-modify-write needs no lock.** Between reading a partly covered unit and
//! writing it back, nobody else may write that unit, or the write-back would put its old
//! bytes over theirs. DualFS never does:
//!
//! - A unit lies inside one DualFS block: the alignment is at most 4096 bytes (the device is
//!   not opened for direct I/O otherwise, [`MAX_ALIGNMENT`]), and DualFS's blocks are at least
//!   4096 bytes (`format::MIN_BLOCK_SIZE`), powers of two, at multiples of their size.
//! - On the data device a block belongs to one file at a time: nothing shares blocks
//!   (copy_file_range copies the bytes, `fs/data/copy.rs`), and a file's blocks are freed (truncate,
//!   punch, the file's end) under its op lock. Every write into a file's blocks holds that op
//!   lock too: the write path with its zeroing of the old tail (`write_locked`, `write_blocks`,
//!   `write_padded` in `fs/data/file.rs`, also for copy_file_range's destination), the zeroing of a
//!   tail when a truncate extends (`truncate_locked`), fallocate's zeroing of partial blocks
//!   and tails (`fs/data/fallocate.rs`). So the writes into one block follow each other, each
//!   finished (`pwrite` returned) before the next starts. The data superblock is only written
//!   while unmounted (mkfs, tune, fsck), in whole blocks.
//! - On the metadata device every write is of whole blocks: log parts (summary and blocks,
//!   `log/writer.rs`), checkpoint regions (`log/checkpoint.rs`), superblocks and their copies.
//!   They never need a read-modify-write.
//!
//! Reads run beside writes (reads of a file take no op lock), but a read-modify-write puts the
//! bytes around the request back as it read them, so a reader sees each byte old or new, as
//! with a plain `pwrite`.
//!
//! An image file whose size is not a multiple of the alignment has a last, partial unit that
//! direct I/O can read (the read stops at the end of the file) but not write without growing
//! the file: a write there is refused. DualFS never writes there (its blocks are whole
//! multiples of the alignment).

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::ptr::NonNull;

/// The largest alignment DualFS opens a device with for direct I/O: its smallest block
/// (`format::MIN_BLOCK_SIZE`), so that every alignment unit lies in one DualFS block (see the
/// module comment). Also the alignment of the bounce buffers in memory.
pub const MAX_ALIGNMENT: u64 = crate::format::MIN_BLOCK_SIZE as u64;

/// The most bytes one bounced request moves at a time: 1 MiB (the largest FUSE write, a log
/// segment) and two alignment units around it, so that such a request at any offset is still
/// one `pwrite`. Larger requests are done in pieces of this size. Each thread that does direct
/// I/O keeps one bounce buffer of up to this size.
pub const PIECE_MAX: usize = (1 << 20) + 2 * MAX_ALIGNMENT as usize;
// A piece of a bounced request must stay whole units of any alignment up to the largest.
const _: () = assert!(PIECE_MAX % MAX_ALIGNMENT as usize == 0);

// BLKSSZGET is _IO(0x12, 104): the logical block size of a block device, an int.
nix::ioctl_read_bad!(logical_block_size_ioctl, libc::BLKSSZGET, libc::c_int);

/// What direct I/O on `file` must be aligned to, in bytes: a block device's logical block
/// size; for an image file the larger of the file system's offset and memory alignments for
/// direct I/O (`statx`'s `STATX_DIOALIGN`), or 4096 where the file system does not say.
/// Errors of kind `Unsupported` when the file does not support direct I/O, or needs an
/// alignment over [`MAX_ALIGNMENT`].
pub fn alignment(path: &Path, file: &File, block_device: bool) -> io::Result<u64> {
    let align = if block_device {
        let mut size: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one int through the pointer, which points at `size`.
        unsafe { logical_block_size_ioctl(file.as_raw_fd(), &mut size) }.map_err(|errno| {
            let e = io::Error::from(errno);
            io::Error::new(
                e.kind(),
                format!(
                    "cannot get the logical block size of {}: {e}",
                    path.display()
                ),
            )
        })?;
        size as u64
    } else {
        match dio_alignment(file) {
            Some(0) => {
                return Err(unsupported(
                    path,
                    "the file system it is on does not support direct I/O for it",
                ))
            }
            Some(align) => align,
            None => MAX_ALIGNMENT,
        }
    };
    if !align.is_power_of_two() || align > MAX_ALIGNMENT {
        return Err(unsupported(
            path,
            &format!(
                "it needs {align}-byte alignment, more than DualFS's smallest block \
                 ({MAX_ALIGNMENT} bytes)"
            ),
        ));
    }
    Ok(align)
}

/// `statx`'s direct I/O alignment of an open file: Some(0) when the file system says the
/// file cannot do direct I/O, None when it does not say (an older kernel or file system).
fn dio_alignment(file: &File) -> Option<u64> {
    // SAFETY: statx fills the struct it is given; a zeroed statx is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty path with AT_EMPTY_PATH names the descriptor itself; `stx` is ours.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    if stx.stx_dio_offset_align == 0 {
        return Some(0);
    }
    Some(u64::from(
        stx.stx_dio_offset_align.max(stx.stx_dio_mem_align),
    ))
}

/// The error of a file that cannot be opened for direct I/O (kind `Unsupported`, which the
/// mount turns into a hint at `devio=buffered`).
pub fn unsupported(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{}: no direct I/O (O_DIRECT): {why}", path.display()),
    )
}

fn is_aligned(ptr: *const u8, offset: u64, len: usize, align: u64) -> bool {
    (ptr as usize as u64 | offset | len as u64) % align == 0
}

/// Fill `buf` from `offset` of `file`, opened with `O_DIRECT` and needing `align`. The caller
/// has checked that the range is inside the device.
pub fn read_at(file: &File, align: u64, buf: &mut [u8], offset: u64) -> io::Result<()> {
    assert!(valid_alignment(align), "direct I/O alignment {align}");
    if is_aligned(buf.as_ptr(), offset, buf.len(), align) {
        return file.read_exact_at(buf, offset);
    }
    let end = offset + buf.len() as u64;
    let (lo, hi) = span(offset, end, align);
    with_bounce((hi - lo).min(PIECE_MAX as u64) as usize, |bounce| {
        let mut at = lo;
        while at < hi {
            let n = (hi - at).min(PIECE_MAX as u64);
            let piece = &mut bounce[..n as usize];
            let (first, last) = (at.max(offset), (at + n).min(end));
            assert!(
                whole_units(at, n, align),
                "a bounced read of part of a unit"
            );
            // At the end of an image whose size is not aligned the read comes back short.
            if read_upto(file, align, piece, at)? < (last - at) as usize {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "failed to fill whole buffer",
                ));
            }
            buf[(first - offset) as usize..(last - offset) as usize]
                .copy_from_slice(&piece[(first - at) as usize..(last - at) as usize]);
            at += n;
        }
        Ok(())
    })
}

/// Write all of `buf` at `offset` of `file` (of `size` bytes), opened with `O_DIRECT` and
/// needing `align`: the partly covered units at either end are read, modified and written
/// back (safe without a lock, see the module comment). The caller has checked the range.
pub fn write_at(file: &File, align: u64, size: u64, buf: &[u8], offset: u64) -> io::Result<()> {
    assert!(valid_alignment(align), "direct I/O alignment {align}");
    assert!(
        offset
            .checked_add(buf.len() as u64)
            .is_some_and(|e| e <= size),
        "the caller checks that a write lies on the device"
    );
    if is_aligned(buf.as_ptr(), offset, buf.len(), align) {
        return file.write_all_at(buf, offset);
    }
    let end = offset + buf.len() as u64;
    let (lo, hi) = span(offset, end, align);
    if hi > size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the last {} bytes of the image are not a whole {align}-byte unit: direct I/O \
                 cannot write them",
                size % align
            ),
        ));
    }
    with_bounce((hi - lo).min(PIECE_MAX as u64) as usize, |bounce| {
        let mut at = lo;
        while at < hi {
            let n = (hi - at).min(PIECE_MAX as u64);
            let piece = &mut bounce[..n as usize];
            let (first, last) = (at.max(offset), (at + n).min(end));
            // O_DIRECT refuses anything else, and the read-modify-write below relies on it.
            assert!(
                whole_units(at, n, align),
                "a bounced write of part of a unit"
            );
            let head_read = first > at;
            if head_read {
                file.read_exact_at(&mut piece[..align as usize], at)?;
            }
            // The last unit, unless it is the first one and was just read.
            if last < at + n && !(head_read && n == align) {
                let tail = (n - align) as usize;
                file.read_exact_at(&mut piece[tail..], at + n - align)?;
            }
            piece[(first - at) as usize..(last - at) as usize]
                .copy_from_slice(&buf[(first - offset) as usize..(last - offset) as usize]);
            file.write_all_at(piece, at)?;
            at += n;
        }
        Ok(())
    })
}

/// What `alignment` hands out: a power of two no larger than [`MAX_ALIGNMENT`].
fn valid_alignment(align: u64) -> bool {
    align.is_power_of_two() && align <= MAX_ALIGNMENT
}

/// `n` bytes at `at` are whole units of `align`.
fn whole_units(at: u64, n: u64, align: u64) -> bool {
    n > 0 && at % align == 0 && n % align == 0
}

/// [lo, hi): [offset, end) widened to whole units of `align`.
fn span(offset: u64, end: u64, align: u64) -> (u64, u64) {
    (offset - offset % align, end.div_ceil(align) * align)
}

/// Read into `buf` (aligned) from `at` until it is full or the file ends; the bytes read.
fn read_upto(file: &File, align: u64, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                if n as u64 % align != 0 {
                    break; // the end of the file: an unaligned offset cannot go on anyway
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Run `f` with this thread's bounce buffer, at least `len` bytes long (at most
/// [`PIECE_MAX`]), aligned to [`MAX_ALIGNMENT`] in memory. The buffer is kept for the
/// thread's next request, so a FUSE thread allocates it once.
fn with_bounce<R>(len: usize, f: impl FnOnce(&mut [u8]) -> io::Result<R>) -> io::Result<R> {
    thread_local! {
        static BOUNCE: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
    }
    debug_assert!(len <= PIECE_MAX);
    BOUNCE.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.as_ref().is_none_or(|b| b.len < len) {
            // Grow by powers of two, so that a thread's buffer settles at once.
            let size = len
                .next_power_of_two()
                .clamp(MAX_ALIGNMENT as usize, PIECE_MAX);
            *slot = None;
            *slot = Some(AlignedBuf::zeroed(size));
        }
        let buf = slot.as_mut().expect("just made");
        f(&mut buf.as_mut_slice()[..len])
    })
}

/// Zeroed memory aligned to [`MAX_ALIGNMENT`], for `O_DIRECT`'s buffers.
struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

impl AlignedBuf {
    fn zeroed(len: usize) -> AlignedBuf {
        let layout = Self::layout(len);
        // SAFETY: the layout's size is not zero (`layout` asserts it).
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        assert!(len > 0, "an empty bounce buffer");
        Layout::from_size_align(len, MAX_ALIGNMENT as usize).expect("a bounce buffer's layout")
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points at `len` initialized (zeroed, then only written) bytes that
        // this value owns; the borrow of `self` keeps them from being freed or aliased.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this very layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_and_alignment() {
        assert_eq!(span(0, 1, 512), (0, 512));
        assert_eq!(span(511, 513, 512), (0, 1024));
        assert_eq!(span(4096, 8192, 4096), (4096, 8192));
        assert!(is_aligned(4096 as *const u8, 512, 1024, 512));
        assert!(!is_aligned(4100 as *const u8, 512, 1024, 512));
        assert!(!is_aligned(4096 as *const u8, 511, 1024, 512));
        assert!(!is_aligned(4096 as *const u8, 512, 1000, 512));
    }

    #[test]
    fn bounce_buffers_are_aligned_and_kept() {
        let first = with_bounce(100, |b| {
            assert_eq!(b.len(), 100);
            assert_eq!(b.as_ptr() as usize % MAX_ALIGNMENT as usize, 0);
            b[0] = 7;
            Ok(b.as_ptr() as usize)
        })
        .unwrap();
        let again = with_bounce(4096, |b| Ok((b.as_ptr() as usize, b[0]))).unwrap();
        assert_eq!(again, (first, 7), "the thread's buffer is kept");
        let grown = with_bounce(PIECE_MAX, |b| {
            assert_eq!(b.len(), PIECE_MAX);
            assert_eq!(b.as_ptr() as usize % MAX_ALIGNMENT as usize, 0);
            Ok(())
        });
        grown.unwrap();
    }
}
