//! The lock discipline (docs/DESIGN.md, "Locks") on a live core: what reads and mutations
//! take, counted per thread by `crate::lockcheck` (the device layer also panics on I/O under a
//! no-I/O lock in every test here).

use super::{devices, ROOT, U};
use crate::fs::*;
use crate::lockcheck::gate_counts;

/// No background writes: the test decides when the log is written.
fn quiet() -> MountOptions {
    MountOptions {
        flush_interval: Duration::from_secs(3600),
        checkpoint_interval: Duration::from_secs(3600),
        background_cleaning: false,
        ..MountOptions::default()
    }
}

fn strict(meta: &Arc<dyn BlockDevice>, data: &Arc<dyn BlockDevice>) -> Arc<Fs> {
    let opts = MountOptions {
        strictatime: true,
        ..MountOptions::default()
    };
    Fs::mount(meta.clone(), data.clone(), opts).unwrap()
}

/// Lookups, getattr, reads and listings never take the gate, not even to update an access
/// time, so they never queue behind the log writer or the mutations holding it.
#[test]
fn reads_lookups_and_listings_never_take_the_gate() {
    let (meta, data) = devices(32, 32);
    let fs = strict(&meta, &data);
    let d = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap().ino;
    let (a, fh) = fs.create(&U, d, b"f", 0o644, libc::O_RDWR).unwrap();
    fs.write(a.ino, fh, 0, &[7u8; 10000]).unwrap();
    let written = fs.getattr(a.ino).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let before = gate_counts();
    assert_eq!(fs.lookup(d, b"f").unwrap().ino, a.ino);
    fs.getattr(a.ino).unwrap();
    assert_eq!(fs.read(a.ino, fh, 0, 4096).unwrap(), vec![7u8; 4096]);
    let mut n = 0;
    fs.readdir(d, 0, &mut |_| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 3);
    assert_eq!(
        gate_counts().0,
        before.0,
        "a read-side operation took the gate"
    );
    // The access times moved all the same, and reach the log.
    let read = fs.getattr(a.ino).unwrap();
    assert!(read.atime > written.atime, "{read:?}");
    let dir_read = fs.getattr(d).unwrap();
    fs.release(a.ino, fh).unwrap();
    fs.unmount().unwrap();
    let fs = strict(&meta, &data);
    assert_eq!(fs.getattr(a.ino).unwrap().atime, read.atime);
    assert_eq!(fs.getattr(d).unwrap().atime, dir_read.atime);
    fs.unmount().unwrap();
}

/// With everything they need cached, the common mutations take the gate but do no device
/// I/O while holding it: data goes to the device, and inodes and indirect blocks are loaded,
/// before it.
#[test]
fn cached_mutations_do_no_io_under_the_gate() {
    let (meta, data) = devices(32, 32);
    let fs = strict(&meta, &data);
    let d = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap().ino;
    let e = fs.mkdir(&U, ROOT, b"e", 0o755).unwrap().ino;
    let before = gate_counts();
    let (a, fh) = fs.create(&U, d, b"f", 0o644, libc::O_RDWR).unwrap();
    // Far enough to need indirect blocks.
    for i in 0..40u64 {
        fs.write(a.ino, fh, i * 4096, &[i as u8; 4096]).unwrap();
    }
    fs.setattr(
        &U,
        a.ino,
        &SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.link(&U, a.ino, e, b"g").unwrap();
    fs.rename(&U, d, b"f", d, b"f2", RenameFlags::default())
        .unwrap();
    fs.rename(&U, e, b"g", d, b"g", RenameFlags::default())
        .unwrap();
    fs.symlink(&U, e, b"s", b"f2").unwrap();
    fs.mkdir(&U, e, b"sub", 0o755).unwrap();
    fs.rmdir(&U, e, b"sub").unwrap();
    fs.unlink(&U, d, b"g").unwrap();
    fs.release(a.ino, fh).unwrap();
    fs.unlink(&U, d, b"f2").unwrap();
    let (taken, io) = gate_counts();
    assert!(taken > before.0 + 10, "the mutations took the gate");
    assert_eq!(io, before.1, "device I/O under the gate");
    fs.unmount().unwrap();
}

/// Access times updated without the gate while the log writer takes snapshots are neither
/// lost nor torn: after the race, what the cache shows is what the next mount reads.
#[test]
fn access_times_racing_the_log_writer_are_kept() {
    let (meta, data) = devices(64, 32);
    let fs = strict(&meta, &data);
    let files: Vec<(u64, u64)> = (0..64u32)
        .map(|i| {
            let (a, fh) = fs
                .create(&U, ROOT, format!("f{i}").as_bytes(), 0o644, libc::O_RDWR)
                .unwrap();
            fs.write(a.ino, fh, 0, b"x").unwrap();
            (a.ino, fh)
        })
        .collect();
    // A bounded number of log writes (each is a transaction of the inodes read since the
    // last: the log must not fill up, nothing cleans it here), reads all along.
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..300 {
                fs.commit().unwrap();
            }
            done.store(true, Ordering::Release);
        });
        let mut round = 0;
        while !done.load(Ordering::Acquire) {
            for &(ino, fh) in &files[round % 2..] {
                fs.read(ino, fh, 0, 1).unwrap();
            }
            round += 1;
        }
    });
    let seen: Vec<Timespec> = files
        .iter()
        .map(|&(ino, fh)| {
            fs.release(ino, fh).unwrap();
            fs.getattr(ino).unwrap().atime
        })
        .collect();
    fs.unmount().unwrap();
    let fs = strict(&meta, &data);
    for (&(ino, _), want) in files.iter().zip(seen) {
        assert_eq!(fs.getattr(ino).unwrap().atime, want, "inode {ino}");
    }
    fs.unmount().unwrap();
}

/// The log writer's exclusive hold of the gate encodes no inode: it copies what each dirty
/// inode contributes, and the 256-byte inodes are encoded after the gate is released (counted
/// per thread by `lockcheck::inode_encode_counts`; the commit writes on this thread).
#[test]
fn the_exclusive_gate_encodes_no_inode() {
    let (meta, data) = devices(32, 32);
    let fs = Fs::mount(meta.clone(), data.clone(), quiet()).unwrap();
    for i in 0..40u32 {
        let (a, fh) = fs
            .create(&U, ROOT, format!("f{i}").as_bytes(), 0o644, libc::O_RDWR)
            .unwrap();
        fs.write(a.ino, fh, 0, &[i as u8; 3000]).unwrap();
        fs.release(a.ino, fh).unwrap();
    }
    let (encoded, under_gate) = crate::lockcheck::inode_encode_counts();
    fs.commit().unwrap();
    let (encoded_now, under_gate_now) = crate::lockcheck::inode_encode_counts();
    // The 40 files and the root at least, encoded by this thread's log write...
    assert!(
        encoded_now - encoded >= 41,
        "{} inodes",
        encoded_now - encoded
    );
    // ... none of them under the gate.
    assert_eq!(
        under_gate_now, under_gate,
        "inodes encoded under the exclusive gate"
    );
    fs.unmount().unwrap();
}

/// The log writer's exclusive hold of the gate places no block: it plans the transaction's
/// addresses from counts, and each dirty indirect block and symlink block gets its address
/// (with the patching of its parent and the inode) after the gate is released, at the first
/// hold of its inode's state lock (counted per thread by `lockcheck::placement_counts`; the
/// commit writes, and so places what no operation placed, on this thread).
#[test]
fn the_exclusive_gate_places_no_block() {
    let (meta, data) = devices(32, 32);
    let fs = Fs::mount(meta.clone(), data.clone(), quiet()).unwrap();
    let (a, fh) = fs.create(&U, ROOT, b"sparse", 0o644, libc::O_RDWR).unwrap();
    // One block under each of 100 level-1 blocks of the double-indirect tree (past the 12
    // direct blocks and the 512 of the single-indirect tree), and one in the single tree.
    let p = 4096 / 8;
    fs.write(a.ino, fh, 20 * 4096, b"single").unwrap();
    for k in 0..100u64 {
        let n = 12 + p + k * p;
        fs.write(a.ino, fh, n * 4096, &[k as u8; 100]).unwrap();
    }
    let target: Vec<u8> = (0..4095).map(|i| b'a' + (i % 26) as u8).collect();
    fs.symlink(&U, ROOT, b"long", &target).unwrap();
    let (placed, under_gate) = crate::lockcheck::placement_counts();
    fs.commit().unwrap();
    let (placed_now, under_gate_now) = crate::lockcheck::placement_counts();
    // 100 level-1 blocks, the double-indirect block, the single-indirect block and the
    // symlink's block(s), placed by this thread's log write...
    assert!(
        placed_now - placed >= 103,
        "{} blocks placed",
        placed_now - placed
    );
    // ... none of them under the gate.
    assert_eq!(
        under_gate_now, under_gate,
        "blocks placed under the exclusive gate"
    );
    fs.release(a.ino, fh).unwrap();
    fs.unmount().unwrap();
    // And they are where the inode says.
    let fs = Fs::mount(meta.clone(), data.clone(), MountOptions::default()).unwrap();
    let h = fs.open(&U, a.ino, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(a.ino, h, 20 * 4096, 6).unwrap(), b"single");
    for k in 0..100u64 {
        let n = 12 + p + k * p;
        assert_eq!(
            fs.read(a.ino, h, n * 4096, 100).unwrap(),
            vec![k as u8; 100]
        );
    }
    fs.release(a.ino, h).unwrap();
    let s = fs.lookup(ROOT, b"long").unwrap().ino;
    assert_eq!(fs.readlink(s).unwrap(), target);
    fs.unmount().unwrap();
    let r = crate::check::check(&*meta, &*data).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// Nor does it visit a tree node: it takes the dirty set whole, and the nodes are captured
/// (by pointer) after the gate (`NodeCache::capture`, counted per thread by
/// `lockcheck::node_capture_counts`; the commit runs on this thread). Taking each node's
/// pointer under the gate, as before, cost about 150 ns per dirty node there.
#[test]
fn the_exclusive_gate_takes_no_tree_node() {
    let (meta, data) = devices(32, 32);
    let fs = Fs::mount(meta.clone(), data.clone(), quiet()).unwrap();
    for d in 0..8u32 {
        let dir = fs
            .mkdir(&U, ROOT, format!("d{d}").as_bytes(), 0o755)
            .unwrap()
            .ino;
        for f in 0..300u32 {
            let (a, fh) = fs
                .create(
                    &U,
                    dir,
                    format!("file-{f:05}").as_bytes(),
                    0o644,
                    libc::O_RDWR,
                )
                .unwrap();
            fs.release(a.ino, fh).unwrap();
        }
    }
    let dirty = fs.ns.tree.dirty_count() as u64;
    assert!(dirty >= 20, "only {dirty} dirty tree nodes");
    let (captured, under_gate) = crate::lockcheck::node_capture_counts();
    fs.commit().unwrap();
    let (captured_now, under_gate_now) = crate::lockcheck::node_capture_counts();
    assert_eq!(
        captured_now - captured,
        dirty,
        "nodes handed to the log writer"
    );
    assert_eq!(
        under_gate_now, under_gate,
        "tree nodes taken one by one under the exclusive gate"
    );
    fs.unmount().unwrap();
    let r = crate::check::check(&*meta, &*data).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// The log writer's exclusive phase visits no inode, however many are dirty: it takes the
/// dirty set whole, plans from block counts kept where blocks change (`inode::Placing`) and
/// publishes the plan, which each inode carries out at the first hold of its state lock after
/// the gate (counted per thread by `lockcheck::inode_state_counts`; the commit runs on this
/// thread). Collecting counts and leaving each inode its plan under the gate, as before, took
/// two state locks per dirty inode there.
#[test]
fn the_exclusive_gate_visits_no_inode() {
    let (meta, data) = devices(32, 32);
    let fs = Fs::mount(meta.clone(), data.clone(), quiet()).unwrap();
    let d = fs.mkdir(&U, ROOT, b"d", 0o755).unwrap().ino;
    let mut files = Vec::new();
    for i in 0..300 {
        let (a, fh) = fs
            .create(&U, d, format!("f{i}").as_bytes(), 0o644, libc::O_RDWR)
            .unwrap();
        // Some with indirect blocks, some long symlinks: every kind of placed block.
        if i % 10 == 0 {
            fs.write(a.ino, fh, 40 * 4096, b"x").unwrap();
        }
        fs.release(a.ino, fh).unwrap();
        files.push(a.ino);
    }
    for i in 0..5 {
        fs.symlink(&U, d, format!("l{i}").as_bytes(), &[b'a' + i as u8; 3000])
            .unwrap();
    }
    let (states, under) = crate::lockcheck::inode_state_counts();
    fs.commit().unwrap();
    let (states_now, under_now) = crate::lockcheck::inode_state_counts();
    // Every dirty inode's lock taken once by the writer after the gate...
    assert!(
        states_now - states >= 300,
        "{} state locks",
        states_now - states
    );
    // ... none under it.
    assert_eq!(
        under_now, under,
        "inode state locks taken under the exclusive gate"
    );
    fs.unmount().unwrap();
    let fs = Fs::mount(meta.clone(), data.clone(), quiet()).unwrap();
    for (i, &ino) in files.iter().enumerate() {
        let size = fs.getattr(ino).unwrap().size;
        assert_eq!(size, if i % 10 == 0 { 40 * 4096 + 1 } else { 0 });
    }
    let l = fs.lookup(d, b"l3").unwrap().ino;
    assert_eq!(fs.readlink(l).unwrap(), vec![b'd'; 3000]);
    fs.unmount().unwrap();
    let r = crate::check::check(&*meta, &*data).unwrap();
    assert!(r.is_clean(), "{r}");
}

/// Tree mutations load what their flush cascades need before the gate (`BeTree::preload`):
/// on a tree many times larger than its node cache (8 nodes here; the log writer runs every
/// few operations, so clean nodes are evicted all along), creates, attribute changes and
/// unlinks spread over many directories do no device I/O under the gate. The control at the
/// end shows the workload does need loads there: the same tree changes made under the gate
/// without the preload read the device.
#[test]
fn tree_mutations_on_an_evicting_tree_do_no_io_under_the_gate() {
    let (meta, data) = devices(64, 32);
    let opts = MountOptions {
        cache_bytes: 64 << 10, // 32 KiB of tree nodes: 8 of 4 KiB
        ..quiet()
    };
    let fs = Fs::mount(meta.clone(), data.clone(), opts).unwrap();
    let dirs: Vec<u64> = (0..24u32)
        .map(|i| {
            fs.mkdir(&U, ROOT, format!("dir{i}").as_bytes(), 0o755)
                .unwrap()
                .ino
        })
        .collect();
    let name = |i: u32| format!("file-with-a-longish-name-{i:06}").into_bytes();
    let before = gate_counts();
    let mut files = Vec::new();
    for i in 0..3000u32 {
        let d = dirs[(i as usize * 7) % dirs.len()];
        let (a, fh) = fs.create(&U, d, &name(i), 0o644, libc::O_RDWR).unwrap();
        if i % 5 == 0 {
            fs.setxattr(
                &U,
                a.ino,
                b"user.tag",
                &[i as u8; 24],
                XattrFlags::default(),
            )
            .unwrap();
        }
        if i % 15 == 0 {
            fs.removexattr(&U, a.ino, b"user.tag").unwrap();
        }
        fs.release(a.ino, fh).unwrap();
        files.push((d, i));
        if i % 64 == 63 {
            fs.commit().unwrap();
        }
    }
    for (k, &(d, i)) in files.iter().enumerate() {
        if k % 2 == 0 {
            fs.unlink(&U, d, &name(i)).unwrap();
        }
        if k % 64 == 63 {
            fs.commit().unwrap();
        }
    }
    let (taken, io) = gate_counts();
    assert!(
        taken >= before.0 + 3000 + 1500,
        "the mutations took the gate"
    );
    assert_eq!(io, before.1, "device I/O under the gate");
    let nodes = fs.ns.tree.check(&fs.nodes()).unwrap().node_count() as usize;
    assert!(
        nodes > 4 * fs.ns.tree.cache_nodes,
        "a tree of {nodes} nodes is not much larger than its cache"
    );

    // The control: the same kind of tree changes, under the gate with no preload, load nodes.
    fs.commit().unwrap();
    let (_, before_control) = gate_counts();
    for (k, &(d, i)) in files.iter().enumerate() {
        if k % 2 == 1 {
            let v = fs.lookup_entry(d, &name(i)).unwrap().unwrap();
            let _g = fs.log.gate.read();
            fs.ns.tree.remove(&fs.nodes(), d, &name(i)).unwrap();
            fs.ns.tree.insert(&fs.nodes(), d, &name(i), v).unwrap();
        }
    }
    assert!(
        gate_counts().1 > before_control,
        "the control made no I/O under the gate: the workload does not need loads there"
    );
    fs.unmount().unwrap();
}

/// A data allocation takes the data bitmaps' lock only: writes that reserve new blocks, and
/// the last close that gives the rest of the window back, finish while another thread holds
/// the IFile and the node map (as the log writer applying a transaction, a checkpoint and a
/// cleaning pass's bound do). With one lock for all the tables they waited for that thread.
#[test]
fn a_data_allocation_waits_for_no_log_table() {
    let (meta, data) = devices(32, 32);
    let fs = Fs::mount(meta, data, quiet()).unwrap();
    let (a, fh) = fs.create(&U, ROOT, b"f", 0o644, libc::O_RDWR).unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let log = &fs.log;
    let released_by_the_writer = std::thread::scope(|s| {
        let holder = s.spawn(move || {
            let _ifile = log.lock_ifile();
            let _nodes = log.lock_node_map();
            held_tx.send(()).unwrap();
            // Until the writes are done, or long enough to tell that they waited.
            done_rx.recv_timeout(Duration::from_secs(10)).is_ok()
        });
        held_rx.recv().unwrap();
        // Blocks far apart, past the window and into indirect blocks: each write reserves.
        for i in 0..8u64 {
            fs.write(a.ino, fh, i * 2048 * 4096, &[i as u8; 4096])
                .unwrap();
        }
        fs.release(a.ino, fh).unwrap();
        done_tx.send(()).unwrap();
        holder.join().unwrap()
    });
    assert!(
        released_by_the_writer,
        "a data allocation waited for the log's tables"
    );
    fs.unmount().unwrap();
}
