//! The log writer's snapshot against operations that run while it is written: whatever they
//! change after the gate is released, the transaction holds the state the snapshot took, and
//! their changes go to the next one (docs/DESIGN.md, "Transactions").

use crate::fs::tests::{crash_copy, devices, ROOT, U};
use crate::fs::*;

const BS: usize = 4096;

fn quiet(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) -> Arc<Fs> {
    // No background log writes: the test decides which write takes which snapshot.
    let opts = MountOptions {
        flush_interval: Duration::from_secs(3600),
        checkpoint_interval: Duration::from_secs(3600),
        background_cleaning: false,
        ..MountOptions::default()
    };
    Fs::mount(meta.clone(), data.clone(), opts).unwrap()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i / 7) as u8 ^ seed.wrapping_mul(31))
        .collect()
}

fn read_at(fs: &Fs, ino: u64, block: u64, len: usize) -> Vec<u8> {
    let h = fs.open(&U, ino, libc::O_RDONLY).unwrap();
    let got = fs.read(ino, h, block * BS as u64, len as u32).unwrap();
    fs.release(ino, h).unwrap();
    got
}

fn contents(fs: &Fs, ino: u64) -> Vec<u8> {
    let h = fs.open(&U, ino, libc::O_RDONLY).unwrap();
    let size = fs.getattr(ino).unwrap().size as usize;
    let got = fs.read(ino, h, 0, size as u32 + 1).unwrap();
    fs.release(ino, h).unwrap();
    got
}

/// `got` is `want` (said by length and first differing byte: the files are megabytes).
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    let differ = got.iter().zip(want).position(|(x, y)| x != y);
    assert_eq!((got.len(), differ), (want.len(), None), "{what}");
}

fn chmod(fs: &Fs, ino: u64, mode: u32) {
    let set = SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    };
    fs.setattr(&U, ino, &set).unwrap();
}

fn assert_clean(m: &Arc<dyn BlockDevice>, d: &Arc<dyn BlockDevice>) {
    let r = crate::check::check(&**m, &**d).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// The writer is held between its snapshot and its write, before it has placed any block
/// (each inode's blocks get their addresses at the first hold of its state lock after the
/// gate), while other threads truncate away indirect blocks the snapshot holds (a file that
/// reaches into the double-indirect tree) and extend it into new ones at the same places,
/// extend and re-dirty a file in it, delete a file and a long symlink in it, change an inode
/// in it again, and read a file whose dirty indirect blocks it holds; a last file with dirty
/// indirect blocks is left to the writer to place. A power cut right after that write shows exactly the snapshot's state
/// (and a clean image); the changes made meanwhile are dirty still and reach the log next,
/// with the blocks the truncate dropped dead and none leaked (the checker's usage counts).
#[test]
fn a_snapshot_is_written_as_taken_while_operations_change_the_live_state() {
    let (m, d) = devices(64, 64);
    let fs = quiet(&m, &d);
    let file = |name: &[u8], data: &[u8]| {
        let (a, fh) = fs.create(&U, ROOT, name, 0o644, libc::O_RDWR).unwrap();
        fs.write(a.ino, fh, 0, data).unwrap();
        (a.ino, fh)
    };
    // Past the 12 direct blocks and the single-indirect tree's 512: double-indirect blocks.
    let a_old = pattern(1, 600 * BS);
    let (a, afh) = file(b"a", &a_old);
    let (b, bfh) = file(b"b", &pattern(2, 4 * BS));
    let (c, cfh) = file(b"c", &pattern(3, 100 * BS));
    let (dd, dfh) = file(b"d", b"d");
    let target: Vec<u8> = (0..900).map(|i| b'a' + (i % 26) as u8).collect();
    let s = fs.symlink(&U, ROOT, b"s", &target).unwrap().ino;
    // Sparse files in the double-indirect tree: one block under one level-1 block now.
    let (e, efh) = fs.create(&U, ROOT, b"e", 0o644, libc::O_RDWR).unwrap();
    let (f, ffh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    for (ino, fh) in [(e.ino, efh), (f.ino, ffh)] {
        fs.write(ino, fh, 600 * BS as u64, &pattern(7, BS)).unwrap();
    }
    let (e, f) = (e.ino, f.ino);
    fs.commit().unwrap();

    // What the next snapshot takes: every one of these inodes dirty, `a` with new indirect
    // blocks under its double-indirect block.
    let a_more = pattern(4, 100 * BS);
    fs.write(a, afh, 600 * BS as u64, &a_more).unwrap();
    let a_snap = [a_old, a_more].concat();
    let b_snap = pattern(5, 4 * BS);
    fs.write(b, bfh, 0, &b_snap).unwrap();
    let c_snap = pattern(3, 100 * BS);
    chmod(&fs, c, 0o600);
    chmod(&fs, dd, 0o640);
    let b_more = pattern(6, 8 * BS);
    // New level-1 blocks under the (so dirty) double-indirect blocks of `e` and `f`.
    fs.write(e, efh, 1200 * BS as u64, &pattern(8, BS)).unwrap();
    fs.write(f, ffh, 1300 * BS as u64, &pattern(9, BS)).unwrap();
    // What `a` gets after its truncate: double-indirect blocks again, at the places the
    // snapshot's (truncated away) ones were.
    let a_late = pattern(10, 3 * BS);
    let a_late_in_hook = a_late.clone();

    let ran = Arc::new(AtomicBool::new(false));
    let ran_in_hook = ran.clone();
    let b_more_in_hook = b_more.clone();
    *fs.log.after_snapshot.lock() = Some(Box::new(move |fs: &Fs| {
        std::thread::scope(|t| {
            t.spawn(|| {
                let set = SetAttr {
                    size: Some(5000),
                    ..SetAttr::default()
                };
                fs.setattr(&U, a, &set).unwrap();
                fs.write(a, afh, 700 * BS as u64, &a_late_in_hook).unwrap();
            });
            t.spawn(|| {
                // New blocks past the end (an overwrite in place would change the blocks
                // the snapshot's `b` names: data goes to the device directly).
                fs.write(b, bfh, 4 * BS as u64, &b_more_in_hook).unwrap();
                chmod(fs, b, 0o604);
            });
            t.spawn(|| {
                fs.release(c, cfh).unwrap();
                fs.unlink(&U, ROOT, b"c").unwrap();
                fs.unlink(&U, ROOT, b"s").unwrap();
            });
            t.spawn(|| chmod(fs, dd, 0o600));
            // A read places `f`'s part of the snapshot, and sees the file as it is.
            t.spawn(|| {
                assert_eq!(read_at(fs, f, 600, BS), pattern(7, BS));
                assert_eq!(read_at(fs, f, 1300, BS), pattern(9, BS));
            });
        });
        ran_in_hook.store(true, Ordering::Release);
    }));
    fs.commit().unwrap();
    assert!(
        ran.load(Ordering::Acquire),
        "the log write did not run the hook"
    );

    // A power cut right after that transaction: the snapshot, whole.
    let (m2, d2) = crash_copy(&m, &d);
    let fs2 = quiet(&m2, &d2);
    // The write past `a`'s new end zeroed the rest of its last block in place, in the old
    // file too (docs/DESIGN.md, "Ordered data": the window ext4's `data=ordered` has).
    let mut a_crash = a_snap.clone();
    a_crash[5000..2 * BS].fill(0);
    assert_same(&contents(&fs2, a), &a_crash, "a in the snapshot");
    assert_same(&contents(&fs2, b), &b_snap, "b in the snapshot");
    assert_eq!(fs2.lookup(ROOT, b"c").unwrap().ino, c);
    assert_same(&contents(&fs2, c), &c_snap, "c in the snapshot");
    assert_eq!(fs2.getattr(c).unwrap().perm, 0o600);
    assert_eq!(fs2.getattr(dd).unwrap().perm, 0o640);
    assert_eq!(fs2.lookup(ROOT, b"s").unwrap().ino, s);
    assert_eq!(fs2.readlink(s).unwrap(), target);
    for (ino, block, seed) in [(e, 600, 7), (e, 1200, 8), (f, 600, 7), (f, 1300, 9)] {
        assert_eq!(
            read_at(&fs2, ino, block, BS),
            pattern(seed, BS),
            "{ino}/{block}"
        );
    }
    fs2.unmount().unwrap();
    assert_clean(&m2, &d2);

    // The changes made during the write were kept dirty and reach the log after it.
    for (ino, fh) in [(a, afh), (b, bfh), (dd, dfh), (e, efh), (f, ffh)] {
        fs.release(ino, fh).unwrap();
    }
    fs.unmount().unwrap();
    assert_clean(&m, &d);
    let fs = quiet(&m, &d);
    let mut a_now = a_snap[..5000].to_vec();
    a_now.resize(700 * BS, 0);
    a_now.extend_from_slice(&a_late);
    assert_same(
        &contents(&fs, a),
        &a_now,
        "a after its truncate and extension",
    );
    for (ino, block, seed) in [(e, 600, 7), (e, 1200, 8), (f, 600, 7), (f, 1300, 9)] {
        assert_eq!(
            read_at(&fs, ino, block, BS),
            pattern(seed, BS),
            "{ino}/{block}"
        );
    }
    assert_same(&contents(&fs, b), &[b_snap, b_more].concat(), "b after");
    assert_eq!(fs.getattr(b).unwrap().perm, 0o604);
    assert_eq!(fs.getattr(dd).unwrap().perm, 0o600);
    assert!(fs.lookup(ROOT, b"c").is_err());
    assert!(fs.lookup(ROOT, b"s").is_err());
    fs.unmount().unwrap();
    assert_clean(&m, &d);
}

/// The tree's part of the same promise: the exclusive phase takes the dirty nodes' set
/// whole and captures their content only after the gate, so nodes that threads change,
/// split or free between the two (creates filling leaves, deletes, a removed directory) are
/// copied first. A power cut right after the write shows exactly the names of the snapshot,
/// with a clean image; the later changes reach the log next.
#[test]
fn tree_changes_between_the_gate_and_the_capture_go_to_the_next_snapshot() {
    let (m, d) = devices(64, 64);
    let fs = quiet(&m, &d);
    let names = |prefix: &str, n: u32| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{prefix}-{i:05}").into_bytes())
            .collect()
    };
    let touch = |fs: &Fs, dir: u64, name: &[u8]| {
        let (a, fh) = fs.create(&U, dir, name, 0o644, libc::O_RDWR).unwrap();
        fs.release(a.ino, fh).unwrap();
    };
    let dirs: Vec<u64> = (0..4)
        .map(|i| {
            fs.mkdir(&U, ROOT, format!("d{i}").as_bytes(), 0o755)
                .unwrap()
                .ino
        })
        .collect();
    for &dir in &dirs {
        for name in names("old", 300) {
            touch(&fs, dir, &name);
        }
    }
    fs.mkdir(&U, ROOT, b"empty", 0o755).unwrap();
    fs.commit().unwrap();
    // What the snapshot takes: more names in every directory, so many nodes are dirty.
    for &dir in &dirs {
        for name in names("snap", 200) {
            touch(&fs, dir, &name);
        }
    }
    let dirty = fs.ns.tree.dirty_count();
    assert!(dirty >= 10, "only {dirty} dirty nodes");

    let ran = Arc::new(AtomicBool::new(false));
    let ran_in_hook = ran.clone();
    let hook_dirs = dirs.clone();
    *fs.log.after_snapshot.lock() = Some(Box::new(move |fs: &Fs| {
        std::thread::scope(|t| {
            for &dir in &hook_dirs {
                t.spawn(move || {
                    for name in names("late", 300) {
                        touch(fs, dir, &name);
                    }
                    for name in names("old", 300).iter().step_by(2) {
                        fs.unlink(&U, dir, name).unwrap();
                    }
                });
            }
            t.spawn(|| fs.rmdir(&U, ROOT, b"empty").unwrap());
        });
        ran_in_hook.store(true, Ordering::Release);
    }));
    fs.commit().unwrap();
    assert!(
        ran.load(Ordering::Acquire),
        "the log write did not run the hook"
    );

    let listing = |fs: &Fs, dir: u64| -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        fs.readdir(dir, 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                got.push(e.name.clone());
            }
            true
        })
        .unwrap();
        got.sort();
        got
    };
    // A power cut right after that transaction: the snapshot's names, whole.
    let (m2, d2) = crash_copy(&m, &d);
    let fs2 = quiet(&m2, &d2);
    let mut want = [names("old", 300), names("snap", 200)].concat();
    want.sort();
    for &dir in &dirs {
        assert_eq!(listing(&fs2, dir), want, "directory {dir} in the snapshot");
    }
    assert!(fs2.lookup(ROOT, b"empty").is_ok());
    fs2.unmount().unwrap();
    assert_clean(&m2, &d2);

    // The changes made during the write reach the log after it.
    fs.unmount().unwrap();
    assert_clean(&m, &d);
    let fs = quiet(&m, &d);
    let mut want = [names("snap", 200), names("late", 300)].concat();
    want.extend(names("old", 300).into_iter().skip(1).step_by(2));
    want.sort();
    for &dir in &dirs {
        assert_eq!(listing(&fs, dir), want, "directory {dir} after");
    }
    assert!(fs.lookup(ROOT, b"empty").is_err());
    fs.unmount().unwrap();
    assert_clean(&m, &d);
}

/// A snapshot whose plan fails (ENOSPC: no clean segment for it) changes nothing: the dirty
/// set it took and the block counts go back, so the inodes it held (files with dirty
/// indirect blocks, a long symlink, a freed file, a chmod) are written by the next log write
/// together with what changed after the failure, including more blocks of a file it held.
#[test]
fn a_snapshot_that_cannot_be_planned_gives_everything_back() {
    let (meta, data) = devices(32, 32);
    let fs = quiet(&meta, &data);
    let file = |name: &[u8], block: u64, seed: u8| {
        let (a, fh) = fs.create(&U, ROOT, name, 0o644, libc::O_RDWR).unwrap();
        fs.write(a.ino, fh, block * BS as u64, &pattern(seed, 3 * BS))
            .unwrap();
        fs.release(a.ino, fh).unwrap();
        a.ino
    };
    let a = file(b"a", 40, 1); // single-indirect blocks
    let b = file(b"b", 12 + 512 + 3, 2); // double-indirect blocks
    let gone = file(b"gone", 50, 3);
    let target = vec![b'q'; 3000];
    fs.symlink(&U, ROOT, b"long", &target).unwrap();
    chmod(&fs, a, 0o600);
    fs.unlink(&U, ROOT, b"gone").unwrap();
    fs.log.fail_next_plan.store(true, Ordering::Release);
    assert!(matches!(fs.commit(), Err(FsError::Errno(libc::ENOSPC))));
    // After the failure: more blocks of a file the failed snapshot held, and a new file.
    let h = fs.open(&U, b, libc::O_RDWR).unwrap();
    fs.write(b, h, 2000 * BS as u64, &pattern(4, BS)).unwrap();
    fs.release(b, h).unwrap();
    let c = file(b"c", 70, 5);
    fs.commit().unwrap();
    fs.unmount().unwrap();
    assert_clean(&meta, &data);

    let fs = quiet(&meta, &data);
    assert_same(&read_at(&fs, a, 40, 3 * BS), &pattern(1, 3 * BS), "a");
    assert_eq!(fs.getattr(a).unwrap().perm, 0o600);
    assert_same(
        &read_at(&fs, b, 12 + 512 + 3, 3 * BS),
        &pattern(2, 3 * BS),
        "b",
    );
    assert_same(
        &read_at(&fs, b, 2000, BS),
        &pattern(4, BS),
        "b's later block",
    );
    assert_same(&read_at(&fs, c, 70, 3 * BS), &pattern(5, 3 * BS), "c");
    let l = fs.lookup(ROOT, b"long").unwrap().ino;
    assert_eq!(fs.readlink(l).unwrap(), target);
    assert!(matches!(
        fs.getattr(gone),
        Err(FsError::Errno(libc::ENOENT))
    ));
    assert!(matches!(
        fs.lookup(ROOT, b"gone"),
        Err(FsError::Errno(libc::ENOENT))
    ));
    fs.unmount().unwrap();
    assert_clean(&meta, &data);
}
