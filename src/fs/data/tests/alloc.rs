//! Core tests of data allocation (alloc.rs): reservation windows pin no space a writer
//! needs, statfs counts them as free, and sequential writers still come out contiguous.

use super::falloc::unmount_and_check;
use crate::format::bmap::DataPtr;
use crate::fs::tests::{devices, mount_write_through as mount, ROOT, U};
use crate::fs::*;

const BS: u64 = 4096;

fn new_file(fs: &Fs, name: &str) -> (u64, u64) {
    let (a, fh) = fs
        .create(&U, ROOT, name.as_bytes(), 0o644, libc::O_RDWR)
        .unwrap();
    (a.ino, fh)
}

/// The data block holding file block `n` of `ino`.
fn block_of(fs: &Fs, ino: u64, n: u64) -> u64 {
    let e = fs.inode(ino).unwrap();
    DataPtr::decode(fs.resolve(&e, n).unwrap()).addr().unwrap()
}

fn assert_one_extent(fs: &Fs, ino: u64, blocks: u64) {
    let addrs: Vec<u64> = (0..blocks).map(|n| block_of(fs, ino, n)).collect();
    assert!(
        addrs.windows(2).all(|w| w[1] == w[0] + 1),
        "inode {ino} is not one extent: {addrs:?}"
    );
}

/// What the windows of all cached inodes hold, counted from the inodes.
fn windowed(fs: &Fs) -> u64 {
    fs.ns
        .inodes
        .all()
        .iter()
        .filter_map(|e| e.state.read().window)
        .map(|(next, end)| end - next)
        .sum()
}

/// Many files kept open after one small write each hold most of a small data device in
/// their windows; statfs still shows all of it free but what the files hold, and a write of
/// exactly that much succeeds (the windows go back first), after which the device is full.
#[test]
fn windows_of_open_files_are_free_space_a_writer_gets() {
    let (m, d) = devices(16, 8);
    let fs = mount(&m, &d);
    let data_blocks = fs.sb.data_blocks;
    let mut open = Vec::new();
    for i in 0..200 {
        let (f, fh) = new_file(&fs, &format!("small{i}"));
        fs.write(f, fh, 0, &[7u8; BS as usize]).unwrap();
        open.push((f, fh));
    }
    assert!(
        fs.alloc.windowed_blocks() >= 200 * 7,
        "each file holds a window: {}",
        fs.alloc.windowed_blocks()
    );
    assert_eq!(fs.alloc.windowed_blocks(), windowed(&fs));
    let st = fs.statfs().unwrap();
    // Block 0 is the data superblock; each small file owns one block.
    assert_eq!(
        st.bfree,
        data_blocks - 1 - 200,
        "free space as du would count it"
    );
    assert_eq!(st.bavail, st.bfree);
    let (big, bh) = new_file(&fs, "big");
    let want = st.bavail * BS;
    let chunk = vec![9u8; 1 << 20];
    let mut at = 0;
    while at < want {
        let n = chunk.len().min((want - at) as usize);
        fs.write(big, bh, at, &chunk[..n])
            .unwrap_or_else(|e| panic!("writing at {at} of {want}, as statfs promised: {e}"));
        at += n as u64;
    }
    assert_eq!(fs.statfs().unwrap().bavail, 0);
    assert_eq!(fs.alloc.windowed_blocks(), windowed(&fs));
    // The device is full now: one more block anywhere is ENOSPC.
    let (f, fh) = open[0];
    let err = fs.write(f, fh, BS, b"one more block").unwrap_err();
    assert_eq!(err.errno(), libc::ENOSPC);
    for (f, fh) in open {
        fs.release(f, fh).unwrap();
    }
    fs.release(big, bh).unwrap();
    assert_eq!(fs.read(big, 0, want - 3, 3).unwrap(), vec![9u8; 3]);
    unmount_and_check(fs, &m, &d);
}

/// A window no write used for a whole sweep interval goes back, and the file's next write
/// still lands right after its last block: a writer that pauses (its window returned every
/// few writes) still comes out as one extent.
#[test]
fn idle_windows_go_back_and_a_pausing_writer_stays_contiguous() {
    let (m, d) = devices(16, 64);
    let fs = mount(&m, &d);
    let (c, ch) = new_file(&fs, "idle");
    fs.write(c, ch, 0, &[1u8; BS as usize]).unwrap();
    let held = fs.inode(c).unwrap().state.read().window;
    assert!(held.is_some_and(|(a, b)| b > a), "the write left a window");
    let free_before = fs.statfs().unwrap().bfree;
    // First sweep: marked unused; second: returned.
    fs.alloc.return_idle_windows();
    assert_eq!(fs.inode(c).unwrap().state.read().window, held);
    fs.alloc.return_idle_windows();
    assert_eq!(fs.inode(c).unwrap().state.read().window, None);
    assert_eq!(fs.alloc.windowed_blocks(), 0);
    assert_eq!(
        fs.statfs().unwrap().bfree,
        free_before,
        "windowed blocks count as free"
    );
    fs.write(c, ch, BS, &[2u8; BS as usize]).unwrap();
    assert_eq!(block_of(&fs, c, 1), block_of(&fs, c, 0) + 1);

    let (s, sh) = new_file(&fs, "pausing");
    let chunk = vec![3u8; 64 << 10];
    for k in 0..64u64 {
        fs.write(s, sh, k * chunk.len() as u64, &chunk).unwrap();
        if k % 8 == 7 {
            // A pause of two flush intervals: the window goes back.
            fs.alloc.return_idle_windows();
            fs.alloc.return_idle_windows();
            assert_eq!(fs.inode(s).unwrap().state.read().window, None);
        }
    }
    assert_one_extent(&fs, s, 64 * chunk.len() as u64 / BS);
    for (f, fh) in [(s, sh), (c, ch)] {
        fs.release(f, fh).unwrap();
    }
    assert_eq!(
        fs.alloc.windowed_blocks(),
        0,
        "the last close returns every window"
    );
    unmount_and_check(fs, &m, &d);
}

/// Writers that keep writing keep their windows through the sweeps: files written in turns
/// are laid out exactly as without sweeps (in runs of their windows' sizes).
#[test]
fn sweeps_leave_busy_writers_layout_alone() {
    let layout = |sweep: bool| {
        let (m, d) = devices(16, 64);
        let fs = mount(&m, &d);
        let files: Vec<(u64, u64)> = (0..3).map(|i| new_file(&fs, &format!("w{i}"))).collect();
        let chunk = vec![5u8; 48 << 10];
        for k in 0..80u64 {
            for &(f, fh) in &files {
                fs.write(f, fh, k * chunk.len() as u64, &chunk).unwrap();
            }
            if sweep {
                fs.alloc.return_idle_windows();
            }
        }
        assert_eq!(fs.alloc.windowed_blocks(), windowed(&fs));
        let blocks = 80 * chunk.len() as u64 / BS;
        let maps: Vec<Vec<u64>> = files
            .iter()
            .map(|&(f, _)| (0..blocks).map(|n| block_of(&fs, f, n)).collect())
            .collect();
        for (f, fh) in files {
            fs.release(f, fh).unwrap();
        }
        unmount_and_check(fs, &m, &d);
        maps
    };
    let swept = layout(true);
    assert_eq!(swept, layout(false));
    // Runs as long as the windows: a few dozen extents for 960 blocks, not hundreds.
    let extents = swept[0].windows(2).filter(|w| w[1] != w[0] + 1).count() + 1;
    assert!(extents <= 40, "{extents} extents");
}

/// The write path against a model: random writes (aligned runs written straight from the
/// request, unaligned ones, ones into preallocated blocks and past the end), preallocations
/// and truncates, on a data device whose free blocks hold garbage, so that a fresh block
/// written in part without its zeros would show it. Read back at every step, after a
/// remount, and checked.
#[test]
fn random_writes_read_back_with_zeros_around_them() {
    use rand::{Rng, SeedableRng};
    let (m, d) = devices(16, 32);
    let garbage = vec![0xEEu8; 1 << 20];
    for at in (BS..d.size()).step_by(garbage.len()) {
        let n = garbage.len().min((d.size() - at) as usize);
        d.write_at(&garbage[..n], at).unwrap();
    }
    let fs = mount(&m, &d);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xDA7A);
    let (f, fh) = new_file(&fs, "model");
    let mut model: Vec<u8> = Vec::new();
    let read_all = |fs: &Fs| fs.read(f, 0, 0, 1 << 30).unwrap();
    for step in 0..600u64 {
        match rng.gen_range(0..10) {
            0..=6 => {
                let aligned = rng.gen_bool(0.3);
                let (off, len) = if aligned {
                    (rng.gen_range(0..160) * BS, rng.gen_range(1..40) * BS)
                } else {
                    (rng.gen_range(0..700_000), rng.gen_range(1..70_000))
                };
                let bytes: Vec<u8> = (0..len).map(|i| ((i + step * 7) % 251 + 1) as u8).collect();
                fs.write(f, fh, off, &bytes).unwrap();
                let (off, len) = (off as usize, len as usize);
                if model.len() < off + len {
                    model.resize(off + len, 0);
                }
                model[off..off + len].copy_from_slice(&bytes);
            }
            7 => {
                let off = rng.gen_range(0..600_000);
                let len = rng.gen_range(1..200_000);
                fs.fallocate(f, fh, off, len, libc::FALLOC_FL_KEEP_SIZE)
                    .unwrap();
            }
            _ => {
                let size = rng.gen_range(0..700_000);
                let set = SetAttr {
                    size: Some(size),
                    ..Default::default()
                };
                fs.setattr(&U, f, &set).unwrap();
                model.resize(size as usize, 0);
            }
        }
        assert!(
            read_all(&fs) == model,
            "step {step}: the file differs from the model"
        );
    }
    fs.release(f, fh).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount(&m, &d);
    assert!(read_all(&fs) == model, "after a remount");
    unmount_and_check(fs, &m, &d);
}
