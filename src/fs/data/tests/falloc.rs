//! Core tests of fallocate, SEEK_DATA/SEEK_HOLE and copy_file_range (no FUSE): sizes, block
//! counts, contents, holes, errors, persistence and power cuts, each ending in a clean check.

use crate::format::bmap::{max_blocks, DataPtr};
use crate::fs::inode::bmap;
use crate::fs::tests::{crash_copy, devices, mount_write_through as mount, ROOT, U};
use crate::fs::*;

const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
const BS: u64 = 4096;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((i * 31 + seed * 17) % 251) as u8 + 1)
        .collect()
}

/// A new file `name`, open read-write: (inode, handle).
fn new_file(fs: &Fs, name: &str) -> (u64, u64) {
    let (a, fh) = fs
        .create(&U, ROOT, name.as_bytes(), 0o644, libc::O_RDWR)
        .unwrap();
    (a.ino, fh)
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let fh = fs.open(&U, ino, libc::O_RDONLY).unwrap();
    let mut v = Vec::new();
    while (v.len() as u64) < size {
        let chunk = fs.read(ino, fh, v.len() as u64, 1 << 20).unwrap();
        assert!(!chunk.is_empty());
        v.extend_from_slice(&chunk);
    }
    fs.release(ino, fh).unwrap();
    v
}

/// Data blocks the file owns (st_blocks in blocks).
fn blocks(fs: &Fs, ino: u64) -> u64 {
    fs.getattr(ino).unwrap().blocks * 512 / BS
}

fn seek(fs: &Fs, ino: u64, off: u64, w: Whence) -> std::result::Result<u64, i32> {
    fs.seek(ino, off, w).map_err(|e| e.errno())
}

fn errno<T: std::fmt::Debug>(r: Result<T>) -> i32 {
    r.unwrap_err().errno()
}

/// The data pointers of file blocks [from, to), as cached.
fn pointers(fs: &Fs, ino: u64, from: u64, to: u64) -> Vec<DataPtr> {
    let e = fs.inode(ino).unwrap();
    (from..to)
        .map(|n| DataPtr::decode(fs.resolve(&e, n).unwrap()))
        .collect()
}

/// Unmount, then the checker must find both devices clean.
pub(in crate::fs) fn unmount_and_check(
    fs: Arc<Fs>,
    m: &Arc<dyn BlockDevice>,
    d: &Arc<dyn BlockDevice>,
) {
    fs.unmount().unwrap();
    drop(fs);
    let r = crate::check::check(&**m, &**d).unwrap();
    assert!(r.is_clean(), "{r}");
}

#[test]
fn preallocated_blocks_read_as_zeros_count_and_persist() {
    let (m, d) = devices(32, 64);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    fs.fallocate(f, fh, 0, 10 << 20, 0).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 10 << 20);
    assert_eq!(blocks(&fs, f), 2560);
    assert!(read_all(&fs, f).iter().all(|&b| b == 0));
    assert!(pointers(&fs, f, 0, 2560)
        .iter()
        .all(|p| matches!(p, DataPtr::Unwritten(_))));
    // Past the end, keeping the size.
    fs.fallocate(f, fh, 10 << 20, 4 << 20, KEEP).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 10 << 20);
    assert_eq!(blocks(&fs, f), 3584);
    // Allocating what is allocated changes nothing.
    fs.fallocate(f, fh, 1 << 20, 1 << 20, 0).unwrap();
    assert_eq!(blocks(&fs, f), 3584);
    // A partial write into an unwritten block: the rest of the block still reads as zeros.
    let p = pattern(100, 1);
    fs.write(f, fh, 5000, &p).unwrap();
    let all = read_all(&fs, f);
    assert_eq!(&all[5000..5100], &p[..]);
    assert!(all[..5000].iter().chain(&all[5100..]).all(|&b| b == 0));
    assert_eq!(
        blocks(&fs, f),
        3584,
        "a write into preallocated blocks allocates nothing"
    );
    assert!(matches!(pointers(&fs, f, 1, 2)[0], DataPtr::Written(_)));
    fs.release(f, fh).unwrap();
    fs.unmount().unwrap();
    drop(fs);

    let fs = mount(&m, &d);
    let all = read_all(&fs, f);
    assert_eq!(&all[5000..5100], &p[..]);
    assert!(all[..5000].iter().chain(&all[5100..]).all(|&b| b == 0));
    assert_eq!(blocks(&fs, f), 3584);
    // Growing over preallocated blocks past the end exposes zeros; shrinking frees them.
    let grow = SetAttr {
        size: Some(12 << 20),
        ..Default::default()
    };
    fs.setattr(&U, f, &grow).unwrap();
    assert!(read_all(&fs, f)[10 << 20..].iter().all(|&b| b == 0));
    assert_eq!(blocks(&fs, f), 3584);
    let shrink = SetAttr {
        size: Some(1 << 20),
        ..Default::default()
    };
    fs.setattr(&U, f, &shrink).unwrap();
    assert_eq!(blocks(&fs, f), 256);
    unmount_and_check(fs, &m, &d);
}

/// Mode 0 extending a file whose last block holds bytes past the end (left by a truncate):
/// they read as zeros, as a truncate up makes them.
#[test]
fn allocating_past_the_end_zeroes_the_old_tail() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    fs.write(f, fh, 0, &pattern(3000, 2)).unwrap();
    let cut = SetAttr {
        size: Some(1000),
        ..Default::default()
    };
    fs.setattr(&U, f, &cut).unwrap();
    fs.fallocate(f, fh, 0, 3 * BS, 0).unwrap();
    let all = read_all(&fs, f);
    assert_eq!(all.len() as u64, 3 * BS);
    assert_eq!(&all[..1000], &pattern(3000, 2)[..1000]);
    assert!(all[1000..].iter().all(|&b| b == 0));
    assert_eq!(blocks(&fs, f), 3);
    fs.release(f, fh).unwrap();
    unmount_and_check(fs, &m, &d);
}

#[test]
fn punching_frees_whole_blocks_and_zeroes_partial_ones() {
    let (m, d) = devices(32, 64);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    let p = pattern(100_000, 3);
    fs.write(f, fh, 0, &p).unwrap();
    fs.release(f, fh).unwrap();
    fs.sync().unwrap();
    let free0 = fs.statfs().unwrap().bfree;
    let fh = fs.open(&U, f, libc::O_RDWR).unwrap();
    assert_eq!(blocks(&fs, f), 25);
    fs.fallocate(f, fh, 5000, 60_000, PUNCH).unwrap();
    // Blocks 2..=14 go; 1 and 15 are zeroed where the range covers them.
    assert_eq!(blocks(&fs, f), 12);
    assert_eq!(fs.getattr(f).unwrap().size, 100_000);
    let all = read_all(&fs, f);
    assert_eq!(&all[..5000], &p[..5000]);
    assert!(all[5000..65_000].iter().all(|&b| b == 0));
    assert_eq!(&all[65_000..], &p[65_000..]);
    assert_eq!(seek(&fs, f, 0, Whence::Hole), Ok(2 * BS));
    assert_eq!(seek(&fs, f, 2 * BS, Whence::Data), Ok(15 * BS));
    assert_eq!(fs.statfs().unwrap().bfree, free0 + 13);
    // Punching without KEEP_SIZE is refused, as Linux refuses it.
    assert_eq!(
        errno(fs.fallocate(f, fh, 0, BS, libc::FALLOC_FL_PUNCH_HOLE)),
        libc::EOPNOTSUPP
    );
    // Preallocated blocks past the end go too.
    fs.fallocate(f, fh, 200_000, 100_000, KEEP).unwrap();
    let with_prealloc = blocks(&fs, f);
    assert_eq!(with_prealloc, 12 + 26);
    fs.fallocate(f, fh, 196_608, 1 << 20, PUNCH).unwrap();
    assert_eq!(blocks(&fs, f), 12);
    // Everything, with the indirect blocks.
    fs.fallocate(f, fh, 0, 1 << 30, PUNCH).unwrap();
    assert_eq!(blocks(&fs, f), 0);
    assert_eq!(fs.inode(f).unwrap().state.read().d.meta_blocks, 0);
    assert!(read_all(&fs, f).iter().all(|&b| b == 0));
    assert_eq!(seek(&fs, f, 0, Whence::Data), Err(libc::ENXIO));
    fs.release(f, fh).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.statfs().unwrap().bfree, free0 + 25);
    unmount_and_check(fs, &m, &d);
}

#[test]
fn zeroing_a_range_keeps_it_allocated() {
    let (m, d) = devices(32, 64);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    let p = pattern(40_000, 4);
    fs.write(f, fh, 0, &p).unwrap();
    fs.fallocate(f, fh, 5000, 15_000, ZERO | KEEP).unwrap();
    let all = read_all(&fs, f);
    assert_eq!(all.len(), 40_000);
    assert_eq!(&all[..5000], &p[..5000]);
    assert!(all[5000..20_000].iter().all(|&b| b == 0));
    assert_eq!(&all[20_000..], &p[20_000..]);
    assert_eq!(blocks(&fs, f), 10, "nothing is freed");
    // Blocks 2 and 3 lie wholly inside: unwritten now (holes to SEEK_HOLE); 1 and 4 were
    // zeroed in place.
    let ptrs = pointers(&fs, f, 0, 10);
    assert!(matches!(ptrs[1], DataPtr::Written(_)));
    assert!(matches!(ptrs[2], DataPtr::Unwritten(_)));
    assert!(matches!(ptrs[3], DataPtr::Unwritten(_)));
    assert!(matches!(ptrs[4], DataPtr::Written(_)));
    assert_eq!(seek(&fs, f, 0, Whence::Hole), Ok(2 * BS));
    assert_eq!(seek(&fs, f, 2 * BS, Whence::Data), Ok(4 * BS));
    // Past the end without KEEP_SIZE: the size grows, holes are allocated.
    fs.fallocate(f, fh, 30_000, 70_000, ZERO).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 100_000);
    assert_eq!(blocks(&fs, f), 25);
    let all = read_all(&fs, f);
    assert_eq!(&all[20_000..30_000], &p[20_000..30_000]);
    assert!(all[30_000..].iter().all(|&b| b == 0));
    // A write into a zeroed block writes it whole: the old bytes stay gone.
    fs.write(f, fh, 9000, b"xyz").unwrap();
    let all = read_all(&fs, f);
    assert_eq!(&all[9000..9003], b"xyz");
    assert!(all[5000..9000]
        .iter()
        .chain(&all[9003..20_000])
        .all(|&b| b == 0));
    fs.release(f, fh).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(&m, &d);
    let again = read_all(&fs, f);
    assert_eq!(again, all);
    unmount_and_check(fs, &m, &d);
}

#[test]
fn enospc_leaves_the_file_as_it_was() {
    let (m, d) = devices(16, 4);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    let p = pattern(1 << 20, 5);
    fs.write(f, fh, 0, &p).unwrap();
    fs.sync().unwrap();
    let free0 = fs.statfs().unwrap().bfree;
    let attr0 = fs.getattr(f).unwrap();
    for (off, len, mode) in [
        (0, 8 << 20, 0),
        (1 << 20, 8 << 20, KEEP),
        (512 << 10, 8 << 20, ZERO),
        (512 << 10, 8 << 20, ZERO | KEEP),
    ] {
        assert_eq!(
            errno(fs.fallocate(f, fh, off, len, mode)),
            libc::ENOSPC,
            "mode {mode:#x}"
        );
        let a = fs.getattr(f).unwrap();
        assert_eq!(
            (a.size, a.blocks, a.mtime),
            (attr0.size, attr0.blocks, attr0.mtime)
        );
        assert_eq!(read_all(&fs, f), p);
        assert_eq!(fs.statfs().unwrap().bfree, free0);
    }
    // What fits still does.
    fs.fallocate(f, fh, 1 << 20, 1 << 20, 0).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 2 << 20);
    fs.release(f, fh).unwrap();
    unmount_and_check(fs, &m, &d);
}

#[test]
fn the_largest_file_bounds_fallocate() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    let largest = max_blocks(fs.ppb) * BS;
    assert_eq!(
        errno(fs.fallocate(f, fh, largest - BS, 2 * BS, 0)),
        libc::EFBIG
    );
    assert_eq!(errno(fs.fallocate(f, fh, largest, 1, KEEP)), libc::EFBIG);
    assert_eq!(
        errno(fs.fallocate(f, fh, u64::MAX - 10, 100, ZERO)),
        libc::EFBIG
    );
    assert_eq!(errno(fs.fallocate(f, fh, 0, 0, 0)), libc::EINVAL);
    fs.fallocate(f, fh, largest - BS, BS, 0).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, largest);
    assert_eq!(blocks(&fs, f), 1);
    // A punch past the largest file has nothing to do there.
    fs.fallocate(f, fh, largest - BS, 1 << 40, PUNCH).unwrap();
    fs.fallocate(f, fh, largest + BS, 1 << 40, PUNCH).unwrap();
    assert_eq!(blocks(&fs, f), 0);
    fs.release(f, fh).unwrap();
    unmount_and_check(fs, &m, &d);
}

#[test]
fn only_regular_files_take_fallocate_and_other_modes_are_unsupported() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    for mode in [
        libc::FALLOC_FL_COLLAPSE_RANGE,
        libc::FALLOC_FL_INSERT_RANGE,
        libc::FALLOC_FL_UNSHARE_RANGE,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE | KEEP,
    ] {
        assert_eq!(
            errno(fs.fallocate(f, fh, 0, BS, mode)),
            libc::EOPNOTSUPP,
            "{mode:#x}"
        );
    }
    let dh = fs.opendir(&U, ROOT).unwrap();
    assert_eq!(errno(fs.fallocate(ROOT, dh, 0, BS, 0)), libc::EISDIR);
    assert_eq!(errno(fs.fallocate(f, dh, 0, BS, 0)), libc::EBADF);
    fs.releasedir(ROOT, dh).unwrap();
    fs.release(f, fh).unwrap();
    unmount_and_check(fs, &m, &d);
}

#[test]
fn seek_data_and_hole_follow_the_block_map() {
    let (m, d) = devices(32, 64);
    let fs = mount(&m, &d);
    // Empty: nothing to find.
    let (empty, eh) = new_file(&fs, "empty");
    assert_eq!(seek(&fs, empty, 0, Whence::Data), Err(libc::ENXIO));
    assert_eq!(seek(&fs, empty, 0, Whence::Hole), Err(libc::ENXIO));
    fs.release(empty, eh).unwrap();
    // Dense: data up to the end, where the only hole is.
    let (dense, dh) = new_file(&fs, "dense");
    fs.write(dense, dh, 0, &pattern(50_000, 6)).unwrap();
    assert_eq!(seek(&fs, dense, 0, Whence::Data), Ok(0));
    assert_eq!(seek(&fs, dense, 777, Whence::Data), Ok(777));
    assert_eq!(seek(&fs, dense, 0, Whence::Hole), Ok(50_000));
    assert_eq!(seek(&fs, dense, 49_999, Whence::Hole), Ok(50_000));
    assert_eq!(seek(&fs, dense, 50_000, Whence::Data), Err(libc::ENXIO));
    assert_eq!(seek(&fs, dense, 50_000, Whence::Hole), Err(libc::ENXIO));
    fs.release(dense, dh).unwrap();
    // Sparse: a hole, data in the double-indirect range, a hole to the end.
    let (sparse, sh) = new_file(&fs, "sparse");
    fs.write(sparse, sh, 3 << 20, &pattern(10_000, 7)).unwrap();
    let grow = SetAttr {
        size: Some(5 << 20),
        ..Default::default()
    };
    fs.setattr(&U, sparse, &grow).unwrap();
    assert_eq!(seek(&fs, sparse, 0, Whence::Data), Ok(3 << 20));
    assert_eq!(seek(&fs, sparse, 0, Whence::Hole), Ok(0));
    assert_eq!(
        seek(&fs, sparse, 3 << 20, Whence::Hole),
        Ok((3 << 20) + 3 * BS)
    );
    assert_eq!(
        seek(&fs, sparse, (3 << 20) + 3 * BS, Whence::Data),
        Err(libc::ENXIO)
    );
    fs.release(sparse, sh).unwrap();
    // Preallocated: unwritten blocks are holes, as ext4 and XFS report them.
    let (pre, ph) = new_file(&fs, "pre");
    fs.fallocate(pre, ph, 0, 1 << 20, 0).unwrap();
    assert_eq!(seek(&fs, pre, 0, Whence::Data), Err(libc::ENXIO));
    assert_eq!(seek(&fs, pre, 0, Whence::Hole), Ok(0));
    fs.write(pre, ph, 300_000, b"x").unwrap();
    assert_eq!(seek(&fs, pre, 0, Whence::Data), Ok(73 * BS));
    assert_eq!(seek(&fs, pre, 73 * BS, Whence::Hole), Ok(74 * BS));
    fs.release(pre, ph).unwrap();
    assert_eq!(errno(fs.seek(ROOT, 0, Whence::Data)), libc::EISDIR);
    fs.unmount().unwrap();
    drop(fs);
    // The same after a remount (indirect blocks read back from the log).
    let fs = mount(&m, &d);
    assert_eq!(seek(&fs, sparse, 0, Whence::Data), Ok(3 << 20));
    assert_eq!(seek(&fs, pre, 0, Whence::Data), Ok(73 * BS));
    unmount_and_check(fs, &m, &d);
}

/// 8 MiB of data at the end of a 4.6 GiB file: SEEK_DATA skips the hole by its empty
/// subtrees, a few hundred pointers, not a million blocks.
#[test]
fn seeking_through_a_huge_hole_skips_it_whole() {
    let (m, d) = devices(32, 64);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    let at = 4_600 << 20;
    fs.write(f, fh, at, &pattern(8 << 20, 8)).unwrap();
    fs.release(f, fh).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(&m, &d);
    assert_eq!(seek(&fs, f, 0, Whence::Data), Ok(at));
    assert_eq!(seek(&fs, f, 0, Whence::Hole), Ok(0));
    assert_eq!(seek(&fs, f, at, Whence::Hole), Ok(at + (8 << 20)));
    let e = fs.inode(f).unwrap();
    let mut visits = 0u64;
    let mut found = None;
    bmap::walk(&e.state.read(), 0, at / BS + 1, fs.ppb, &mut |n, _, raw| {
        visits += 1;
        if raw != 0 {
            found = Some(n);
        }
        found.is_none()
    })
    .expect("seek loaded the indirect blocks on the way");
    assert_eq!(found, Some(at / BS));
    assert!(
        visits < 1_000,
        "{visits} pointers visited for a hole of {at} bytes"
    );
    unmount_and_check(fs, &m, &d);
}

#[test]
fn copy_file_range_copies_data_and_keeps_holes() {
    let (m, d) = devices(32, 64);
    let fs = mount(&m, &d);
    // Source: 1 MiB of data, a 10 MiB hole with 1 MiB preallocated inside, 12345 bytes.
    let (src, sh) = new_file(&fs, "src");
    let head = pattern(1 << 20, 9);
    let tail = pattern(12_345, 10);
    fs.write(src, sh, 0, &head).unwrap();
    fs.fallocate(src, sh, 3 << 20, 1 << 20, 0).unwrap();
    fs.write(src, sh, 11 << 20, &tail).unwrap();
    let size = (11 << 20) + 12_345;
    let want = read_all(&fs, src);
    // Into a new file: the same bytes, and only the source's data blocks.
    let (dst, dh) = new_file(&fs, "dst");
    let past = SetAttr {
        mtime: Some(SetTime::At(Timespec { sec: 1000, nsec: 0 })),
        ..Default::default()
    };
    fs.setattr(&U, dst, &past).unwrap();
    let n = fs
        .copy_file_range(src, sh, 0, dst, dh, 0, 1 << 30, 0)
        .unwrap();
    assert_eq!(n, size);
    assert_eq!(read_all(&fs, dst), want);
    assert_eq!(blocks(&fs, dst), 256 + 4);
    assert!(fs.getattr(dst).unwrap().mtime.sec > 1000);
    assert_eq!(seek(&fs, dst, 0, Whence::Hole), Ok(1 << 20));
    assert_eq!(seek(&fs, dst, 1 << 20, Whence::Data), Ok(11 << 20));
    // Over a file full of data: where the source has holes, the copy has holes too.
    let (full, fuh) = new_file(&fs, "full");
    fs.write(full, fuh, 0, &pattern(12 << 20, 11)).unwrap();
    let n = fs
        .copy_file_range(src, sh, 0, full, fuh, 0, size, 0)
        .unwrap();
    assert_eq!(n, size);
    let got = read_all(&fs, full);
    assert_eq!(&got[..size as usize], &want[..]);
    assert_eq!(
        &got[size as usize..],
        &pattern(12 << 20, 11)[size as usize..]
    );
    assert_eq!(seek(&fs, full, 0, Whence::Hole), Ok(1 << 20));
    assert_eq!(blocks(&fs, full), 256 + 256, "the 10 MiB hole was punched");
    // A copy that ends in a hole still gives the destination its length.
    let (short, shh) = new_file(&fs, "short");
    let n = fs
        .copy_file_range(src, sh, 0, short, shh, 0, 5 << 20, 0)
        .unwrap();
    assert_eq!(n, 5 << 20);
    assert_eq!(fs.getattr(short).unwrap().size, 5 << 20);
    assert_eq!(blocks(&fs, short), 256);
    // At or past the source's end: nothing.
    assert_eq!(
        fs.copy_file_range(src, sh, size, dst, dh, 0, 10, 0)
            .unwrap(),
        0
    );
    for h in [(src, sh), (dst, dh), (full, fuh), (short, shh)] {
        fs.release(h.0, h.1).unwrap();
    }
    unmount_and_check(fs, &m, &d);
}

#[test]
fn copy_file_range_within_a_file_and_its_errors() {
    let (m, d) = devices(16, 16);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    let p = pattern(3 * BS as usize, 12);
    fs.write(f, fh, 0, &p).unwrap();
    // Within one file, ranges that share a block but no byte.
    assert_eq!(
        fs.copy_file_range(f, fh, 0, f, fh, 100, 100, 0).unwrap(),
        100
    );
    let mut want = p.clone();
    want.copy_within(0..100, 100);
    assert_eq!(read_all(&fs, f), want);
    // To its end: the file grows.
    assert_eq!(
        fs.copy_file_range(f, fh, 0, f, fh, 3 * BS, 3 * BS, 0)
            .unwrap(),
        3 * BS
    );
    let mut grown = want.clone();
    grown.extend_from_slice(&want);
    assert_eq!(read_all(&fs, f), grown);
    // Overlapping ranges of one file are EINVAL, as Linux refuses them.
    assert_eq!(
        errno(fs.copy_file_range(f, fh, 0, f, fh, 50, 100, 0)),
        libc::EINVAL
    );
    assert_eq!(
        errno(fs.copy_file_range(f, fh, 100, f, fh, 0, 200, 0)),
        libc::EINVAL
    );
    assert_eq!(
        errno(fs.copy_file_range(f, fh, 0, f, fh, 6 * BS, 10, 1)),
        libc::EINVAL
    );
    let (g, gh) = new_file(&fs, "g");
    let ga = fs.open(&U, g, libc::O_WRONLY | libc::O_APPEND).unwrap();
    assert_eq!(
        errno(fs.copy_file_range(f, fh, 0, g, ga, 0, 10, 0)),
        libc::EBADF
    );
    let dh = fs.opendir(&U, ROOT).unwrap();
    assert_eq!(
        errno(fs.copy_file_range(ROOT, dh, 0, g, gh, 0, 10, 0)),
        libc::EISDIR
    );
    assert_eq!(
        errno(fs.copy_file_range(f, fh, 0, ROOT, dh, 0, 10, 0)),
        libc::EISDIR
    );
    let largest = max_blocks(fs.ppb) * BS;
    assert_eq!(
        errno(fs.copy_file_range(f, fh, 0, g, gh, largest, 10, 0)),
        libc::EFBIG
    );
    // Up to the largest file: what fits.
    assert_eq!(
        fs.copy_file_range(f, fh, 0, g, gh, largest - 10, 100, 0)
            .unwrap(),
        10
    );
    fs.releasedir(ROOT, dh).unwrap();
    for h in [(f, fh), (g, gh), (g, ga)] {
        fs.release(h.0, h.1).unwrap();
    }
    unmount_and_check(fs, &m, &d);
}

/// Blocks a deleted file's data lived in, preallocated to another file, read as zeros after
/// a power cut — the old bytes never show through; written and zeroed ranges survive too.
#[test]
fn preallocated_blocks_read_as_zeros_after_a_power_cut() {
    let (m, d) = devices(16, 4);
    let fs = mount(&m, &d);
    // Fill the data device with a pattern, then free it.
    let (a, ah) = new_file(&fs, "a");
    let free = fs.statfs().unwrap().bfree;
    let secret = pattern(((free - 16) * BS) as usize, 13);
    fs.write(a, ah, 0, &secret).unwrap();
    fs.release(a, ah).unwrap();
    fs.sync().unwrap();
    fs.unlink(&U, ROOT, b"a").unwrap();
    fs.sync().unwrap();
    // Preallocate most of it to another file; write a little and zero a little.
    let (b, bh) = new_file(&fs, "b");
    let len = (free - 32) * BS;
    fs.fallocate(b, bh, 0, len, 0).unwrap();
    fs.write(b, bh, 10_000, b"written").unwrap();
    fs.fsync(b, false).unwrap();
    let (c, ch) = new_file(&fs, "c");
    fs.write(c, ch, 0, &pattern(64 << 10, 14)).unwrap();
    fs.fallocate(c, ch, BS, 8 * BS, ZERO | KEEP).unwrap();
    fs.fsync(c, false).unwrap();
    let (m2, d2) = crash_copy(&m, &d);
    let fs2 = mount(&m2, &d2);
    let bino = fs2.lookup(ROOT, b"b").unwrap().ino;
    assert_eq!(bino, b);
    let got = read_all(&fs2, b);
    assert_eq!(got.len() as u64, len);
    assert_eq!(&got[10_000..10_007], b"written");
    let leaked = got
        .iter()
        .enumerate()
        .filter(|&(i, &x)| !(10_000..10_007).contains(&i) && x != 0)
        .count();
    assert_eq!(leaked, 0, "bytes of the deleted file show through");
    assert_eq!(blocks(&fs2, b), len / BS);
    let gotc = read_all(&fs2, c);
    let mut wantc = pattern(64 << 10, 14);
    wantc[BS as usize..9 * BS as usize].fill(0);
    assert_eq!(gotc, wantc);
    unmount_and_check(fs2, &m2, &d2);
    fs.release(b, bh).unwrap();
    fs.release(c, ch).unwrap();
    fs.unmount().unwrap();
}

/// Preallocation takes one extent where the device has one, even past free fragments
/// nearer the goal.
#[test]
fn preallocation_is_contiguous_where_the_device_allows() {
    let (m, d) = devices(16, 64);
    let fs = mount(&m, &d);
    // One-block files, every other one deleted: the start of the group is a sieve.
    for i in 0..200 {
        let (f, fh) = new_file(&fs, &format!("s{i}"));
        fs.write(f, fh, 0, b"x").unwrap();
        fs.release(f, fh).unwrap();
    }
    for i in (0..200).step_by(2) {
        fs.unlink(&U, ROOT, format!("s{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    let (f, fh) = new_file(&fs, "big");
    fs.fallocate(f, fh, 0, 4 << 20, 0).unwrap();
    assert_one_extent(&fs, f, 0, 1024);
    fs.release(f, fh).unwrap();
    unmount_and_check(fs, &m, &d);
}

/// Cleaning moves indirect blocks whole: their unwritten pointers arrive as they were, the
/// file reads the same, and the checker agrees.
#[test]
fn the_cleaner_moves_indirect_blocks_with_unwritten_pointers() {
    let (m, d) = devices(16, 64);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "pre");
    fs.fallocate(f, fh, 0, 600 * BS, 0).unwrap();
    fs.fallocate(f, fh, 600 * BS, 100 * BS, KEEP).unwrap();
    fs.write(f, fh, 100 * BS + 7, &pattern(20_000, 15)).unwrap();
    fs.fallocate(f, fh, 300 * BS, 50 * BS, PUNCH).unwrap();
    fs.release(f, fh).unwrap();
    fs.sync().unwrap();
    let want = read_all(&fs, f);
    let want_ptrs = pointers(&fs, f, 0, 700);
    let old: Vec<u64> = {
        let e = fs.inode(f).unwrap();
        let st = e.state.read();
        st.ptrs.values().map(|b| b.addr).collect()
    };
    assert_eq!(
        old.len(),
        3,
        "the single, the double and one level-1 block under it"
    );
    // Move the log head on, past the segments that hold them.
    for i in 0..300 {
        let (g, gh) = new_file(&fs, &format!("g{i}"));
        fs.write(g, gh, 0, b"x").unwrap();
        fs.release(g, gh).unwrap();
        if i % 50 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    let mut segs: Vec<u64> = old.iter().map(|&a| fs.sb.segment_of(a)).collect();
    segs.sort_unstable();
    segs.dedup();
    let r = fs.clean_segments(&segs).unwrap();
    assert_eq!(r.cleaned, segs, "refused: {:?}", r.refused);
    let new: Vec<u64> = {
        let e = fs.inode(f).unwrap();
        let st = e.state.read();
        st.ptrs.values().map(|b| b.addr).collect()
    };
    assert!(new.iter().all(|a| !old.contains(a)), "the blocks moved");
    assert_eq!(read_all(&fs, f), want);
    assert_eq!(pointers(&fs, f, 0, 700), want_ptrs);
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(&m, &d);
    assert_eq!(read_all(&fs, f), want);
    assert_eq!(pointers(&fs, f, 0, 700), want_ptrs);
    unmount_and_check(fs, &m, &d);
}

/// The rest of a file's reservation window (left by a write) is too short for a
/// preallocation: it is given back rather than used first, which would split the extent.
#[test]
fn a_short_window_does_not_split_a_preallocation() {
    let (m, d) = devices(16, 64);
    let fs = mount(&m, &d);
    let (f, fh) = new_file(&fs, "f");
    fs.write(f, fh, 0, b"first").unwrap();
    // Another file right behind the window.
    let (g, gh) = new_file(&fs, "g");
    fs.write(g, gh, 0, &pattern(64 << 10, 16)).unwrap();
    fs.release(g, gh).unwrap();
    let window = fs.inode(f).unwrap().state.read().window;
    assert!(
        window.is_some_and(|(a, b)| b > a),
        "the write left a window"
    );
    fs.fallocate(f, fh, BS, 4 << 20, 0).unwrap();
    assert_one_extent(&fs, f, 1, 1025);
    fs.release(f, fh).unwrap();
    unmount_and_check(fs, &m, &d);
}

/// File blocks [from, end) of `f` are mapped to consecutive data blocks.
fn assert_one_extent(fs: &Fs, f: u64, from: u64, end: u64) {
    let addrs: Vec<u64> = pointers(fs, f, from, end)
        .iter()
        .map(|p| p.addr().unwrap())
        .collect();
    assert!(
        addrs.windows(2).all(|w| w[1] == w[0] + 1),
        "not one extent: {:?}...",
        &addrs[..8.min(addrs.len())]
    );
}
