//! Core tests of delayed allocation (data_cache.rs, no FUSE): data freed before its
//! write-back never reaches the data device; reads, truncates, seeks, fallocate and copies
//! see cached data; a crash never leaves a file longer than its data; a write that cannot
//! have its blocks gets ENOSPC at once; the budget bounds what is held.

use crate::device::{BlockDevice, MemDevice};
use crate::fs::data::seek::Whence;
use crate::fs::tests::{crash_copy, devices, Counting, ROOT, U};
use crate::fs::*;
use std::sync::atomic::Ordering;

/// A fresh file system whose 64 MiB data device counts what is written to it.
fn counting_devices() -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>, Arc<Counting>) {
    let (m, _) = devices(32, 64);
    let data = Counting::over(Arc::new(MemDevice::new(64 << 20)));
    let d: Arc<dyn BlockDevice> = data.clone();
    crate::mkfs::mkfs(m.clone(), d.clone(), &crate::mkfs::MkfsParams::default()).unwrap();
    (m, d, data)
}

/// No periodic log writes: the test decides when data is written back.
fn quiet(budget: u64) -> MountOptions {
    MountOptions {
        flush_interval: std::time::Duration::from_secs(3600),
        checkpoint_interval: std::time::Duration::from_secs(3600),
        data_cache_bytes: budget,
        ..MountOptions::default()
    }
}

fn create(fs: &Fs, name: &str) -> (u64, u64) {
    let (a, fh) = fs
        .create(&U, ROOT, name.as_bytes(), 0o644, libc::O_RDWR)
        .unwrap();
    (a.ino, fh)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn check(m: &Arc<dyn BlockDevice>, d: &Arc<dyn BlockDevice>, when: &str) {
    let r = crate::check::check(&**m, &**d).unwrap();
    assert!(r.is_clean(), "{when}: checker found problems:\n{r}");
}

/// A file written in many small writes holds log room for the indirect blocks its write-back
/// may dirty once, not once per write: a copy of a large file written 4 KiB at a time must not
/// make writers wait for room (and write back what would have died in the cache). Sparse
/// writes far apart keep their own, smaller, sum. The write-backs then fit what was held.
#[test]
fn many_writes_into_one_range_hold_log_room_once() {
    let (m, d) = devices(32, 64);
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let (ino, fh) = create(&fs, "big");
    let bytes = pattern(4096, 3);
    for n in 0..512u64 {
        fs.write(ino, fh, n * 4096, &bytes).unwrap();
    }
    let bound = fs.block_range_charge(0, 511);
    assert!(bound > 0);
    assert_eq!(fs.cache.log_charge(), bound, "512 writes of one range");
    let (sparse, sfh) = create(&fs, "sparse");
    let far = 1u64 << 30; // block 262,144: another part of the double-indirect tree
    fs.write(sparse, sfh, 20 * 4096, &bytes).unwrap();
    fs.write(sparse, sfh, far, &bytes).unwrap();
    let two = fs.block_range_charge(20, 20) + fs.block_range_charge(far / 4096, far / 4096);
    assert_eq!(fs.cache.log_charge(), bound + two, "two writes far apart");
    fs.release(ino, fh).unwrap();
    fs.release(sparse, sfh).unwrap();
    fs.commit().unwrap();
    assert_eq!(fs.cache.log_charge(), 0);
    let fh = fs.open(&U, ino, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(ino, fh, 511 * 4096, 4096).unwrap(), bytes);
    fs.release(ino, fh).unwrap();
    fs.unmount().unwrap();
    check(&m, &d, "after the write-backs");
}

/// Files written and removed between two write-backs cost the data device nothing; those
/// that stay reach it at the next sync, whole, and read back the same after a remount.
#[test]
fn data_that_dies_before_its_write_back_never_reaches_the_device() {
    let (m, d, data) = counting_devices();
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let before = data.written.load(Ordering::Acquire);
    // 200 files of 10 KiB written, read back, removed: PostMark's short-lived files.
    for i in 0..200 {
        let name = format!("t{i}");
        let (ino, fh) = create(&fs, &name);
        let bytes = pattern(10_000, i as u8);
        fs.write(ino, fh, 0, &bytes).unwrap();
        assert_eq!(fs.read(ino, fh, 0, 20_000).unwrap(), bytes, "{name}");
        fs.release(ino, fh).unwrap();
        fs.unlink(&U, ROOT, name.as_bytes()).unwrap();
    }
    // One that stays.
    let kept = pattern(50_000, 7);
    let (ino, fh) = create(&fs, "kept");
    fs.write(ino, fh, 0, &kept).unwrap();
    fs.release(ino, fh).unwrap();
    assert_eq!(
        data.written.load(Ordering::Acquire),
        before,
        "nothing reaches the data device before a write-back"
    );
    assert_eq!(
        fs.getattr(ino).unwrap().blocks,
        13 * 8,
        "cached blocks count"
    );
    fs.sync().unwrap();
    let after = data.written.load(Ordering::Acquire) - before;
    assert!(
        (13 * 4096..=14 * 4096).contains(&after),
        "the sync wrote {after} bytes of data for one 50,000-byte file"
    );
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let a = fs.lookup(ROOT, b"kept").unwrap();
    assert_eq!(a.size, 50_000);
    let fh = fs.open(&U, a.ino, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(a.ino, fh, 0, 60_000).unwrap(), kept);
    fs.release(a.ino, fh).unwrap();
    fs.unmount().unwrap();
}

/// Reads, partial overwrites of blocks on the device, appends, truncates and seeks all see
/// the cached bytes; a file written back in pieces reads the same before and after.
#[test]
fn cached_data_reads_truncates_and_seeks_like_written_data() {
    let (m, d) = devices(32, 64);
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let (ino, fh) = create(&fs, "f");
    let mut want = pattern(30_000, 1);
    fs.write(ino, fh, 0, &want).unwrap();
    fs.sync().unwrap(); // on the device now
                        // Overwrite inside blocks on the device (their other bytes come from the device), and
                        // append past the end after a gap (a hole, then cached data).
    fs.write(ino, fh, 5_000, &[9u8; 100]).unwrap();
    want[5_000..5_100].fill(9);
    let tail = pattern(5_000, 2);
    fs.write(ino, fh, 100_000, &tail).unwrap();
    want.resize(100_000, 0);
    want.extend_from_slice(&tail);
    assert_eq!(fs.read(ino, fh, 0, 200_000).unwrap(), want);
    // The hole between is a hole; the cached tail is data.
    let bs = 4096;
    assert_eq!(
        fs.seek(ino, 40_000, Whence::Data).unwrap(),
        100_000 / bs * bs
    );
    assert_eq!(
        fs.seek(ino, 0, Whence::Hole).unwrap(),
        30_000_u64.div_ceil(bs) * bs
    );
    // Truncate into the cached tail: the bytes past the new end read as zeros when it grows.
    let attr = |size| SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(&U, ino, &attr(101_000)).unwrap();
    fs.setattr(&U, ino, &attr(103_000)).unwrap();
    want.truncate(101_000);
    want.resize(103_000, 0);
    assert_eq!(fs.read(ino, fh, 0, 200_000).unwrap(), want);
    // fallocate and copy_file_range work from the block map: the cache goes there first.
    fs.fallocate(ino, fh, 200_000, 10_000, libc::FALLOC_FL_KEEP_SIZE)
        .unwrap();
    let (dst, dfh) = create(&fs, "copy");
    let n = fs
        .copy_file_range(ino, fh, 0, dst, dfh, 0, 103_000, 0)
        .unwrap();
    assert_eq!(n, 103_000);
    assert_eq!(fs.read(dst, dfh, 0, 200_000).unwrap(), want);
    fs.release(dst, dfh).unwrap();
    fs.release(ino, fh).unwrap();
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    for name in [&b"f"[..], b"copy"] {
        let a = fs.lookup(ROOT, name).unwrap();
        let fh = fs.open(&U, a.ino, libc::O_RDONLY).unwrap();
        assert_eq!(fs.read(a.ino, fh, 0, 200_000).unwrap(), want);
        fs.release(a.ino, fh).unwrap();
    }
    fs.unmount().unwrap();
}

/// Many small files written back together lie packed one after another and reach the
/// device in a few long requests (one per run of consecutive blocks, at most 1 MiB), not a
/// request per file: on a disk, one sweep instead of a seek and a rotation per file.
#[test]
fn small_files_are_written_back_packed_in_few_requests() {
    let (m, d, data) = counting_devices();
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let files = 300;
    for i in 0..files {
        let (ino, fh) = create(&fs, &format!("s{i}"));
        fs.write(ino, fh, 0, &pattern(5_000, i as u8)).unwrap();
        fs.release(ino, fh).unwrap();
    }
    let before = data.requests.load(Ordering::Acquire);
    fs.sync().unwrap();
    let requests = data.requests.load(Ordering::Acquire) - before;
    // 600 blocks, 2.4 MiB: three requests of at most 1 MiB, and one more wherever a run
    // meets a block that is not free (a block group's edge).
    assert!(
        requests <= 8,
        "{files} files of 2 blocks written back in {requests} requests"
    );
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    for i in 0..files {
        let a = fs.lookup(ROOT, format!("s{i}").as_bytes()).unwrap();
        let fh = fs.open(&U, a.ino, libc::O_RDONLY).unwrap();
        assert_eq!(
            fs.read(a.ino, fh, 0, 10_000).unwrap(),
            pattern(5_000, i as u8)
        );
        fs.release(a.ino, fh).unwrap();
    }
    fs.unmount().unwrap();
}

/// After deletes have left holes between small files, a write-back of appends to the
/// survivors and of new files still goes out in a few long requests: the small files of a
/// batch get their blocks from one run, the blocks they had written in place moving there
/// too (PostMark: one request per file before, each a rotation on a disk). The blocks they
/// leave are freed (the checker finds no leak), and every file reads as written, before and
/// after a remount.
#[test]
fn appends_and_new_files_among_holes_go_out_in_one_run() {
    let (m, d, data) = counting_devices();
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let mut want = std::collections::BTreeMap::new();
    for i in 0..300 {
        let (ino, fh) = create(&fs, &format!("s{i}"));
        let bytes = pattern(5_000, i as u8);
        fs.write(ino, fh, 0, &bytes).unwrap();
        fs.release(ino, fh).unwrap();
        want.insert(format!("s{i}"), bytes);
    }
    fs.sync().unwrap();
    for i in (0..300).step_by(2) {
        fs.unlink(&U, ROOT, format!("s{i}").as_bytes()).unwrap();
        want.remove(&format!("s{i}"));
    }
    fs.sync().unwrap();
    let free_before = fs.statfs().unwrap().bfree;
    for (name, bytes) in want.iter_mut() {
        let a = fs.lookup(ROOT, name.as_bytes()).unwrap();
        let fh = fs.open(&U, a.ino, libc::O_RDWR).unwrap();
        let more = pattern(3_000, bytes[0] ^ 0x55);
        fs.write(a.ino, fh, bytes.len() as u64, &more).unwrap();
        bytes.extend_from_slice(&more);
        fs.release(a.ino, fh).unwrap();
    }
    for i in 0..150 {
        let (ino, fh) = create(&fs, &format!("n{i}"));
        let bytes = pattern(5_000, 200 ^ i as u8);
        fs.write(ino, fh, 0, &bytes).unwrap();
        fs.release(ino, fh).unwrap();
        want.insert(format!("n{i}"), bytes);
    }
    let before = data.requests.load(Ordering::Acquire);
    fs.sync().unwrap();
    let requests = data.requests.load(Ordering::Acquire) - before;
    // 150 appended files of 2 blocks (their last written in place before) and 150 new of 2:
    // 600 blocks, 2.4 MiB, three requests of at most 1 MiB and a few where a run meets a
    // block that is not free. One request per appended file or per hole otherwise.
    assert!(
        requests <= 8,
        "300 small files among holes written back in {requests} requests"
    );
    // Each appended file gave back its 2 old blocks and took 2 new ones; each new file took
    // 2 (statfs counts blocks of 4 KiB here).
    let free_after = fs.statfs().unwrap().bfree;
    assert_eq!(
        free_before - free_after,
        150 * 2,
        "blocks taken by the write-back"
    );
    let read_all = |fs: &Fs, when: &str| {
        for (name, bytes) in &want {
            let a = fs.lookup(ROOT, name.as_bytes()).unwrap();
            let fh = fs.open(&U, a.ino, libc::O_RDONLY).unwrap();
            let got = fs.read(a.ino, fh, 0, 20_000).unwrap();
            assert!(&got == bytes, "{name} {when}: not what was written");
            fs.release(a.ino, fh).unwrap();
        }
    };
    read_all(&fs, "after the write-back");
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    read_all(&fs, "after a remount");
    fs.unmount().unwrap();
}

/// A small file's block moved by a write-back leaves the block it had untouched until the
/// log has the move: a crash before that finds the file whole with its old bytes (where a
/// write in place could show the new bytes in the old file), one after finds the new.
#[test]
fn a_crash_before_the_log_has_a_move_finds_the_old_block_whole() {
    let (m, d) = devices(32, 64);
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let (ino, fh) = create(&fs, "f");
    let old = pattern(6_000, 1);
    fs.write(ino, fh, 0, &old).unwrap();
    fs.sync().unwrap();
    let new = pattern(6_000, 2);
    fs.write(ino, fh, 0, &new).unwrap();
    fs.writeback_all().unwrap();
    let (cm, cd) = crash_copy(&m, &d);
    check(&cm, &cd, "crash after the write-back, before the log write");
    let crashed = Fs::mount(cm, cd, quiet(64 << 20)).unwrap();
    let a = crashed.lookup(ROOT, b"f").unwrap();
    let h = crashed.open(&U, a.ino, libc::O_RDONLY).unwrap();
    let got = crashed.read(a.ino, h, 0, 10_000).unwrap();
    assert!(
        got == old,
        "after a crash before the log write: not the old bytes"
    );
    drop(crashed);
    fs.sync().unwrap();
    let (cm, cd) = crash_copy(&m, &d);
    check(&cm, &cd, "crash after the log write");
    let crashed = Fs::mount(cm, cd, quiet(64 << 20)).unwrap();
    let h = crashed.open(&U, a.ino, libc::O_RDONLY).unwrap();
    let got = crashed.read(a.ino, h, 0, 10_000).unwrap();
    assert!(
        got == new,
        "after a crash after the log write: not the new bytes"
    );
    drop(crashed);
    fs.release(ino, fh).unwrap();
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
}

/// An append to a file whose partial last block was written back takes that block's bytes
/// from the tail kept in memory, not from the device (PostMark's appends: on a disk, a seek
/// and a rotation each), and so does a read of that block; with no room in the budget they
/// read the device, and get the same bytes.
#[test]
fn appends_and_reads_of_a_written_back_tail_read_nothing_from_the_device() {
    for budget in [64 << 20, 16 << 10] {
        let (m, d, data) = counting_devices();
        let fs = Fs::mount(m.clone(), d.clone(), quiet(budget)).unwrap();
        let files = 100;
        let mut want = Vec::new();
        for i in 0..files {
            let (ino, fh) = create(&fs, &format!("a{i}"));
            let first = pattern(6_000 + i * 10, i as u8);
            fs.write(ino, fh, 0, &first).unwrap();
            fs.release(ino, fh).unwrap();
            want.push((ino, first));
        }
        fs.sync().unwrap();
        let before = data.reads.load(Ordering::Acquire);
        // A read of the end of the file (the page the kernel asks for again) is served
        // from the tail too.
        for (ino, w) in &want {
            let fh = fs.open(&U, *ino, libc::O_RDONLY).unwrap();
            let at = w.len() as u64 - 100;
            assert_eq!(fs.read(*ino, fh, at, 4096).unwrap(), w[at as usize..]);
            fs.release(*ino, fh).unwrap();
        }
        for (i, (ino, w)) in want.iter_mut().enumerate() {
            let fh = fs.open(&U, *ino, libc::O_RDWR).unwrap();
            let more = pattern(700, 100 + i as u8);
            fs.write(*ino, fh, w.len() as u64, &more).unwrap();
            w.extend_from_slice(&more);
            fs.release(*ino, fh).unwrap();
        }
        let reads = data.reads.load(Ordering::Acquire) - before;
        if budget == 64 << 20 {
            assert_eq!(reads, 0, "appends to {files} written-back files");
        } else {
            // 16 KiB: room for the tails of a few files only.
            assert!(reads > 0, "appends with no room for tails read nothing");
        }
        fs.sync().unwrap();
        for (ino, w) in &want {
            let fh = fs.open(&U, *ino, libc::O_RDONLY).unwrap();
            assert_eq!(&fs.read(*ino, fh, 0, 20_000).unwrap(), w, "budget {budget}");
            fs.release(*ino, fh).unwrap();
        }
        fs.unmount().unwrap();
        check(&m, &d, "after unmount");
    }
}

/// A kept tail stands for the device's bytes only while nothing else changes them: a
/// truncate (down, then up: zeros), a punched hole or zeroed range, a copied hole, a freed and reused
/// inode number; appends after each read what the file holds, before and after a remount.
#[test]
fn a_kept_tail_never_outlives_the_bytes_it_copies() {
    let (m, d) = devices(32, 64);
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let attr = |size| SetAttr {
        size: Some(size),
        ..Default::default()
    };
    let mut files = Vec::new();
    for (k, name) in ["trunc", "punch", "zero", "copy", "reuse"]
        .iter()
        .enumerate()
    {
        let (ino, fh) = create(&fs, name);
        let w = pattern(10_000, k as u8);
        fs.write(ino, fh, 0, &w).unwrap();
        files.push((ino, fh, w));
    }
    fs.sync().unwrap(); // every tail (bytes 8192..10000) kept
                        // Truncate down and back up: the bytes between read as zeros.
    let ino = files[0].0;
    fs.setattr(&U, ino, &attr(9_000)).unwrap();
    fs.setattr(&U, ino, &attr(10_000)).unwrap();
    files[0].2[9_000..].fill(0);
    // A hole over the tail's first bytes; zeros written over its last.
    let (ino, fh, _) = files[1];
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    fs.fallocate(ino, fh, 8_192, 1_000, punch).unwrap();
    files[1].2[8_192..9_192].fill(0);
    let (ino, fh, _) = files[2];
    fs.fallocate(ino, fh, 9_000, 1_000, libc::FALLOC_FL_ZERO_RANGE)
        .unwrap();
    files[2].2[9_000..].fill(0);
    // A copy of a hole over the tail punches it.
    let (src, sfh) = create(&fs, "holey");
    fs.write(src, sfh, 13_000, b"x").unwrap();
    fs.sync().unwrap();
    let (ino, fh, _) = files[3];
    let n = fs
        .copy_file_range(src, sfh, 8_192, ino, fh, 8_192, 808, 0)
        .unwrap();
    assert_eq!(n, 808);
    files[3].2[8_192..9_000].fill(0);
    fs.release(src, sfh).unwrap();
    for (ino, fh, w) in files.iter_mut().take(4) {
        assert_eq!(&fs.read(*ino, *fh, 0, 20_000).unwrap(), w);
        let more = pattern(500, 77);
        fs.write(*ino, *fh, w.len() as u64, &more).unwrap();
        w.extend_from_slice(&more);
        assert_eq!(&fs.read(*ino, *fh, 0, 20_000).unwrap(), w);
    }
    // The fourth is removed; a new file may get its inode number, written the same way.
    let (ino, fh, _) = files.pop().unwrap();
    fs.release(ino, fh).unwrap();
    fs.unlink(&U, ROOT, b"reuse").unwrap();
    let (ino, fh) = create(&fs, "reused");
    let w = pattern(10_000, 200);
    fs.write(ino, fh, 0, &w[..9_000]).unwrap();
    fs.sync().unwrap();
    fs.write(ino, fh, 9_000, &w[9_000..]).unwrap();
    assert_eq!(fs.read(ino, fh, 0, 20_000).unwrap(), w);
    files.push((ino, fh, w));
    fs.sync().unwrap();
    for (ino, fh, _) in &files {
        fs.release(*ino, *fh).unwrap();
    }
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    for (ino, _, w) in &files {
        let fh = fs.open(&U, *ino, libc::O_RDONLY).unwrap();
        assert_eq!(&fs.read(*ino, fh, 0, 20_000).unwrap(), w);
        fs.release(*ino, fh).unwrap();
    }
    fs.unmount().unwrap();
}

/// A log write while data is cached records each file as it was before its cached writes:
/// a crash then (the data never written back) leaves the old size and contents, never a
/// longer file with zeros in it; after a write-back and a log write, all of it.
#[test]
fn a_crash_before_write_back_leaves_files_as_they_were_not_longer() {
    let (m, d) = devices(32, 64);
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let (ino, fh) = create(&fs, "f");
    let first = pattern(10_000, 3);
    fs.write(ino, fh, 0, &first).unwrap();
    fs.sync().unwrap();
    fs.write(ino, fh, 10_000, &pattern(50_000, 4)).unwrap();
    let (new, nfh) = create(&fs, "new");
    fs.write(new, nfh, 0, &pattern(8_000, 5)).unwrap();
    // A log write of metadata only (a mkdir's), the data still cached.
    fs.mkdir(&U, ROOT, b"d", 0o755).unwrap();
    fs.sync_log().unwrap();
    let (cm, cd) = crash_copy(&m, &d);
    check(&cm, &cd, "crash with data cached");
    let crashed = Fs::mount(cm, cd, quiet(64 << 20)).unwrap();
    let a = crashed.lookup(ROOT, b"f").unwrap();
    assert_eq!((a.size, a.blocks), (10_000, 3 * 8), "f after the crash");
    let h = crashed.open(&U, a.ino, libc::O_RDONLY).unwrap();
    assert_eq!(crashed.read(a.ino, h, 0, 100_000).unwrap(), first);
    let n = crashed.lookup(ROOT, b"new").unwrap();
    assert_eq!((n.size, n.blocks), (0, 0), "new after the crash");
    crashed.lookup(ROOT, b"d").unwrap();
    drop(crashed);
    // fsync of one file is a full commit: every file's cached data is written back, and
    // the log write carries it.
    fs.fsync(ino, false).unwrap();
    let (cm, cd) = crash_copy(&m, &d);
    check(&cm, &cd, "crash after fsync");
    let crashed = Fs::mount(cm, cd, quiet(64 << 20)).unwrap();
    assert_eq!(crashed.lookup(ROOT, b"f").unwrap().size, 60_000);
    let n = crashed.lookup(ROOT, b"new").unwrap();
    assert_eq!(n.size, 8_000);
    let h = crashed.open(&U, n.ino, libc::O_RDONLY).unwrap();
    assert_eq!(
        crashed.read(n.ino, h, 0, 100_000).unwrap(),
        pattern(8_000, 5)
    );
    drop(crashed);
    fs.release(ino, fh).unwrap();
    fs.release(new, nfh).unwrap();
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
}

/// A file renamed over another is written back before the rename (the replace-by-rename
/// idiom without fsync): a crash after the rename is logged finds the new data under the
/// name, never an empty or short file in place of the old one. A rename to a free name
/// leaves the data cached.
#[test]
fn a_rename_over_a_file_writes_the_new_copy_back_first() {
    let (m, d) = devices(32, 64);
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let (old, ofh) = create(&fs, "config");
    fs.write(old, ofh, 0, &pattern(9_000, 1)).unwrap();
    fs.release(old, ofh).unwrap();
    fs.sync().unwrap();
    let (new, nfh) = create(&fs, "config.tmp");
    fs.write(new, nfh, 0, &pattern(12_000, 2)).unwrap();
    fs.release(new, nfh).unwrap();
    let (other, xfh) = create(&fs, "log.tmp");
    fs.write(other, xfh, 0, &pattern(5_000, 3)).unwrap();
    fs.release(other, xfh).unwrap();
    let flags = RenameFlags::default();
    fs.rename(&U, ROOT, b"config.tmp", ROOT, b"config", flags)
        .unwrap();
    fs.rename(&U, ROOT, b"log.tmp", ROOT, b"log", flags)
        .unwrap();
    assert!(fs.inode(new).unwrap().state.read().cache.is_none());
    assert!(fs.inode(other).unwrap().state.read().cache.is_some());
    // A log write of the renames, without a write-back of the rest.
    fs.sync_log().unwrap();
    let (cm, cd) = crash_copy(&m, &d);
    check(&cm, &cd, "crash after the renames");
    let crashed = Fs::mount(cm, cd, quiet(64 << 20)).unwrap();
    let a = crashed.lookup(ROOT, b"config").unwrap();
    let h = crashed.open(&U, a.ino, libc::O_RDONLY).unwrap();
    assert_eq!(
        crashed.read(a.ino, h, 0, 100_000).unwrap(),
        pattern(12_000, 2)
    );
    assert_eq!(crashed.lookup(ROOT, b"log").unwrap().size, 0);
    drop(crashed);
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
}

/// Cached data holds its blocks' promise: once the data device's free blocks are all
/// promised, the next write gets ENOSPC at once (not its write-back later), and removing a
/// cached file gives its blocks back at once.
#[test]
fn cached_writes_get_enospc_at_once_and_deletes_give_room_back() {
    let (m, d) = devices(32, 2);
    let fs = Fs::mount(m.clone(), d.clone(), quiet(64 << 20)).unwrap();
    let chunk = vec![7u8; 64 << 10];
    let mut files = Vec::new();
    let err = 'fill: loop {
        let (ino, fh) = create(&fs, &format!("f{}", files.len()));
        files.push((ino, fh));
        for k in 0..4 {
            if let Err(e) = fs.write(ino, fh, k * chunk.len() as u64, &chunk) {
                break 'fill e;
            }
        }
        assert!(files.len() < 100, "never full");
    };
    assert!(matches!(err, FsError::Errno(libc::ENOSPC)), "{err}");
    let st = fs.statfs().unwrap();
    assert!(st.bfree < 16, "{st:?} with the device promised");
    // Everything acknowledged is written back without ENOSPC.
    fs.sync().unwrap();
    let (ino, fh) = files[0];
    fs.release(ino, fh).unwrap();
    fs.unlink(&U, ROOT, b"f0").unwrap();
    let (last, lfh) = *files.last().unwrap();
    fs.write(last, lfh, 4 * chunk.len() as u64, &chunk).unwrap();
    for &(ino, fh) in &files[1..] {
        fs.release(ino, fh).unwrap();
    }
    fs.unmount().unwrap();
    check(&m, &d, "after a full device");
}

/// Blocks of `ino` the cache holds.
fn cached_blocks(fs: &Fs, ino: u64) -> usize {
    let e = fs.inode(ino).unwrap();
    let st = e.state.read();
    st.cache.as_ref().map_or(0, |c| c.blocks.len())
}

/// Past its budget the cache writes back the files it has held longest, whatever their
/// numbers: files written after a delete take the numbers it freed, lower than those of the
/// files kept from before, and must not go out first (a copy of a tree and the removal of
/// most of it, round after round: the copy's files would reach the disk only to die there).
#[test]
fn past_the_budget_the_files_cached_longest_go_out_first() {
    let (m, d, data) = counting_devices();
    let budget: u64 = 1 << 20;
    let fs = Fs::mount(m.clone(), d.clone(), quiet(budget)).unwrap();
    // Numbers to free later, holding no data.
    let freed: Vec<u64> = (0..8)
        .map(|i| {
            let (ino, fh) = create(&fs, &format!("gone{i}"));
            fs.release(ino, fh).unwrap();
            ino
        })
        .collect();
    // The survivors of an earlier round: 8 files of 32 KiB, cached.
    let old: Vec<u64> = (0..8)
        .map(|i| {
            let (ino, fh) = create(&fs, &format!("old{i}"));
            fs.write(ino, fh, 0, &pattern(32 << 10, i as u8)).unwrap();
            fs.release(ino, fh).unwrap();
            ino
        })
        .collect();
    for i in 0..8 {
        fs.unlink(&U, ROOT, format!("gone{i}").as_bytes()).unwrap();
    }
    // Their numbers free once the log has the unlinks (no data written back by that).
    fs.sync_log().unwrap();
    let before = data.written.load(Ordering::Acquire);
    // A new round of 64 KiB files, until the cache went past its budget once.
    let mut young = Vec::new();
    while data.written.load(Ordering::Acquire) == before {
        let (ino, fh) = create(&fs, &format!("young{}", young.len()));
        fs.write(ino, fh, 0, &pattern(64 << 10, young.len() as u8))
            .unwrap();
        fs.release(ino, fh).unwrap();
        young.push(ino);
        assert!(young.len() < 64, "the cache never went past its budget");
    }
    assert!(
        young[..8].iter().all(|y| freed.contains(y)) && young[0] < old[0],
        "the new files took the freed numbers, below the old ones: {young:?}, {old:?}"
    );
    for ino in &old {
        assert_eq!(cached_blocks(&fs, *ino), 0, "old file {ino} written back");
    }
    let kept = young.iter().filter(|&&y| cached_blocks(&fs, y) > 0).count();
    assert!(
        young[young.len() - kept..]
            .iter()
            .all(|&y| cached_blocks(&fs, y) == 16),
        "the youngest files stay cached: {kept} of {}",
        young.len()
    );
    assert!(
        kept as u64 * (64 << 10) >= budget / 2 - (64 << 10),
        "only {kept} files stayed cached"
    );
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
}

/// A cache over its budget is written back by its writers: what it holds stays near the
/// budget, and everything reads back after a remount.
#[test]
fn writers_past_the_budget_write_the_cache_back() {
    let (m, d) = devices(32, 64);
    let budget = 1 << 20;
    let fs = Fs::mount(m.clone(), d.clone(), quiet(budget)).unwrap();
    let mut peak = 0;
    for i in 0..16 {
        let (ino, fh) = create(&fs, &format!("f{i}"));
        fs.write(ino, fh, 0, &pattern(256 << 10, i as u8)).unwrap();
        fs.release(ino, fh).unwrap();
        peak = peak.max(fs.cache.bytes());
    }
    assert!(
        peak <= budget + (256 << 10),
        "{peak} bytes cached, budget {budget}"
    );
    fs.unmount().unwrap();
    check(&m, &d, "after unmount");
    let fs = Fs::mount(m.clone(), d.clone(), quiet(budget)).unwrap();
    for i in 0..16 {
        let a = fs.lookup(ROOT, format!("f{i}").as_bytes()).unwrap();
        let fh = fs.open(&U, a.ino, libc::O_RDONLY).unwrap();
        assert_eq!(
            fs.read(a.ino, fh, 0, 1 << 20).unwrap(),
            pattern(256 << 10, i as u8)
        );
        fs.release(a.ino, fh).unwrap();
    }
    fs.unmount().unwrap();
}
