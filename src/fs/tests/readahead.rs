//! Read-ahead (device/readahead.rs) under a file system: a cold walk reads the log in
//! clusters, cold reads of small files written together read the data device in clusters,
//! and no block read ahead outlives a rewrite of its address on either device.

use super::{devices, Counting, ROOT, U};
use crate::device::BlockDevice;
use crate::fs::clean::policy::Policy;
use crate::fs::*;
use std::sync::atomic::Ordering;

fn quiet(log_readahead: u64, cache_bytes: u64) -> MountOptions {
    MountOptions {
        data_readahead: 0,
        flush_interval: std::time::Duration::from_secs(3600),
        checkpoint_interval: std::time::Duration::from_secs(3600),
        background_cleaning: false,
        data_cache_bytes: 0,
        log_readahead,
        cache_bytes,
        ..MountOptions::default()
    }
}

/// Every file's mode, looked up cold by name: the device reads that took.
fn walk(
    meta: &Arc<dyn BlockDevice>,
    data: &Arc<dyn BlockDevice>,
    log_readahead: u64,
    names: &[(usize, Vec<u8>)],
) -> (Vec<u32>, u64, Stats) {
    let counted = Counting::over(meta.clone());
    let fs = Fs::mount(
        counted.clone(),
        data.clone(),
        quiet(log_readahead, 256 << 20),
    )
    .unwrap();
    let before = counted.reads.load(Ordering::Acquire);
    let dirs: Vec<u64> = (0..4)
        .map(|d| fs.lookup(ROOT, format!("d{d}").as_bytes()).unwrap().ino)
        .collect();
    let modes = names
        .iter()
        .map(|(d, name)| fs.lookup(dirs[*d], name).unwrap().perm as u32)
        .collect();
    let reads = counted.reads.load(Ordering::Acquire) - before;
    let stats = fs.stats();
    fs.unmount().unwrap();
    (modes, reads, stats)
}

#[test]
fn a_cold_walk_reads_the_log_in_clusters() {
    let (meta, data) = devices(32, 16);
    let fs = Fs::mount(meta.clone(), data.clone(), quiet(0, 256 << 20)).unwrap();
    let mut names = Vec::new();
    for d in 0..4usize {
        let dir = fs
            .mkdir(&U, ROOT, format!("d{d}").as_bytes(), 0o755)
            .unwrap();
        for i in 0..300u32 {
            let name = format!("file-{i:04}").into_bytes();
            let mode = 0o600 | (i % 64);
            let (a, fh) = fs.create(&U, dir.ino, &name, mode, libc::O_RDWR).unwrap();
            fs.release(a.ino, fh).unwrap();
            names.push((d, name));
        }
        fs.commit().unwrap();
    }
    fs.unmount().unwrap();

    let (alone, reads_alone, stats_alone) = walk(&meta, &data, 0, &names);
    let (clustered, reads_clustered, stats) = walk(&meta, &data, 64 << 10, &names);
    assert_eq!(alone, clustered);
    assert_eq!(stats_alone.log_clusters_read, 0);
    assert!(stats.log_blocks_read_ahead_used > 0);
    assert!(
        reads_clustered * 3 <= reads_alone,
        "{reads_clustered} device reads with read-ahead, {reads_alone} without"
    );
}

/// Segments cleaned and written again while blocks of them wait, read ahead: what a lookup
/// finds is always what was written last. The inodes and their blocks leave the caches after
/// every round, so that they are read from the log again and again; the read-ahead budget
/// (8 MiB) holds the whole log, so blocks wait there while their segments are
/// cleaned and written again.
#[test]
fn a_block_read_ahead_never_outlives_a_rewrite_of_its_address() {
    let (meta, data) = devices(8, 16);
    let fs = Fs::mount(meta.clone(), data.clone(), quiet(64 << 10, 256 << 20)).unwrap();
    let dirs: Vec<u64> = (0..4)
        .map(|d| {
            fs.mkdir(&U, ROOT, format!("d{d}").as_bytes(), 0o755)
                .unwrap()
                .ino
        })
        .collect();
    let mut files = Vec::new();
    for i in 0..1200u32 {
        let d = dirs[i as usize % dirs.len()];
        let (a, fh) = fs
            .create(&U, d, format!("f{i}").as_bytes(), 0o600, libc::O_RDWR)
            .unwrap();
        fs.release(a.ino, fh).unwrap();
        files.push((d, format!("f{i}").into_bytes(), 0o600u32));
    }
    fs.commit().unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..40u32 {
        for f in files.iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if seed % 4 == 0 {
                let ino = fs.lookup(f.0, &f.1).unwrap().ino;
                f.2 = 0o400 | ((seed >> 8) as u32 % 0o400);
                let set = SetAttr {
                    mode: Some(f.2),
                    ..SetAttr::default()
                };
                fs.setattr(&U, ino, &set).unwrap();
            }
        }
        fs.commit().unwrap();
        fs.clean_pass(Policy::Greedy, 8).unwrap();
        fs.ns.inodes.evict(0, fs.block_size());
        fs.ns.inode_blocks.forget(|_| true);
        for f in &files {
            assert_eq!(
                fs.lookup(f.0, &f.1).unwrap().perm as u32,
                f.2,
                "round {round}: {}",
                String::from_utf8_lossy(&f.1)
            );
        }
    }
    let stats = fs.stats();
    assert!(stats.log_blocks_read_ahead_used > 0, "{stats:?}");
    assert!(fs.cleaner_counters().segments_cleaned > 0);
    fs.unmount().unwrap();
    let r = crate::check::check(&*meta, &*data).unwrap();
    assert!(r.is_clean(), "{r}");
}

fn pattern(file: u32, round: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31) ^ file.wrapping_mul(7) ^ round.wrapping_mul(101))
        .map(|x| x as u8)
        .collect()
}

/// Small files written one after another lie together on the data device; reading them
/// cold, each read that misses brings the next files' blocks. Every read goes to the device
/// (no data cache), so what a read returns after rewrites, deletes and new files on the same
/// blocks shows whether a block read ahead outlived a write of its address.
#[test]
fn small_files_come_in_clusters_and_never_from_before_a_write() {
    let (meta, data) = devices(16, 32);
    let counted = Counting::over(data.clone());
    let opts = MountOptions {
        data_readahead: 64 << 10,
        data_cache_bytes: 0,
        ..quiet(0, 256 << 20)
    };
    let fs = Fs::mount(meta.clone(), counted.clone(), opts).unwrap();
    let dir = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap().ino;
    let len = 5000;
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut files: Vec<(u64, Vec<u8>)> = (0..64u32)
        .map(|i| {
            let name = format!("f{i:02}").into_bytes();
            let (a, fh) = fs.create(&U, dir, &name, 0o644, libc::O_RDWR).unwrap();
            let bytes = pattern(i, 0, len);
            fs.write(a.ino, fh, 0, &bytes).unwrap();
            fs.release(a.ino, fh).unwrap();
            names.push(name);
            (a.ino, bytes)
        })
        .collect();
    fs.commit().unwrap();
    let read_all = |files: &[(u64, Vec<u8>)]| {
        let before = counted.reads.load(Ordering::Acquire);
        for (ino, bytes) in files {
            let fh = fs.open(&U, *ino, libc::O_RDONLY).unwrap();
            assert_eq!(
                &fs.read(*ino, fh, 0, 1 << 20).unwrap(),
                bytes,
                "inode {ino}"
            );
            fs.release(*ino, fh).unwrap();
        }
        counted.reads.load(Ordering::Acquire) - before
    };
    let reads = read_all(&files);
    assert!(
        reads * 4 <= files.len() as u64,
        "{reads} device reads for {} files",
        files.len()
    );
    for round in 1..=6u32 {
        // Read half the files (their neighbours wait, read ahead), then change every third
        // file in place, free every fifth and make new files on what they freed.
        for (ino, bytes) in files.iter().step_by(2) {
            let fh = fs.open(&U, *ino, libc::O_RDONLY).unwrap();
            assert_eq!(&fs.read(*ino, fh, 0, 1 << 20).unwrap(), bytes);
            fs.release(*ino, fh).unwrap();
        }
        for (i, (ino, bytes)) in files.iter_mut().enumerate() {
            if i % 3 == round as usize % 3 {
                *bytes = pattern(i as u32, round, len);
                let fh = fs.open(&U, *ino, libc::O_RDWR).unwrap();
                fs.write(*ino, fh, 0, bytes).unwrap();
                fs.release(*ino, fh).unwrap();
            }
        }
        for i in (round as usize % 5..files.len()).step_by(5) {
            let name = format!("r{round}-{i}").into_bytes();
            fs.unlink(&U, dir, &names[i]).unwrap();
            fs.commit().unwrap();
            let (a, fh) = fs.create(&U, dir, &name, 0o644, libc::O_RDWR).unwrap();
            names[i] = name;
            let bytes = pattern(1000 + i as u32, round, len);
            fs.write(a.ino, fh, 0, &bytes).unwrap();
            fs.release(a.ino, fh).unwrap();
            files[i] = (a.ino, bytes);
        }
        fs.commit().unwrap();
        read_all(&files);
    }
    assert!(fs.stats().data_blocks_read_ahead_used > 0);
    fs.unmount().unwrap();
    let r = crate::check::check(&*meta, &*data).unwrap();
    assert!(r.is_clean(), "{r}");
}
