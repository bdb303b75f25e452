//! The daemon's death loses nothing acknowledged (intent.rs, replay.rs; no FUSE): a file
//! system is used, then stopped dead — its devices keep what it wrote, as the kernel's page
//! cache keeps a killed process's writes, and its intent log stays in its directory — and
//! the next mount must show exactly what the dead one showed.

use crate::device::BlockDevice;
use crate::fs::tests::{devices, ROOT, U};
use crate::fs::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A directory for one test's intent logs, removed at the end.
struct IntentDir(PathBuf);

impl IntentDir {
    fn new(name: &str) -> IntentDir {
        let p =
            std::env::temp_dir().join(format!("dualfs-intent-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        IntentDir(p)
    }
}

impl Drop for IntentDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn opts(dir: &IntentDir, budget: u64) -> MountOptions {
    MountOptions {
        flush_interval: std::time::Duration::from_secs(3600),
        checkpoint_interval: std::time::Duration::from_secs(3600),
        data_cache_bytes: budget,
        intent_dir: Some(dir.0.clone()),
        ..MountOptions::default()
    }
}

/// What a reader sees of one name (access times aside: reads change them).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    ino: u64,
    kind: FileKind,
    perm: u16,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: Timespec,
    ctime: Timespec,
    /// Length and a hash of the bytes (a file's data, a symlink's target).
    content: (usize, u64),
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    flags: u32,
}

fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn seen_tree(fs: &Fs) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    walk(fs, ROOT, "", &mut out);
    out
}

fn walk(fs: &Fs, dir: u64, path: &str, out: &mut BTreeMap<String, Seen>) {
    let mut entries = Vec::new();
    fs.readdir(dir, 0, &mut |e| {
        if e.name != b"." && e.name != b".." {
            entries.push(e.clone());
        }
        true
    })
    .unwrap();
    for e in entries {
        let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
        let a = fs.getattr(e.ino).unwrap();
        let content = match a.kind {
            FileKind::Regular => fs.read(e.ino, 0, 0, a.size as u32 + 1).unwrap(),
            FileKind::Symlink => fs.readlink(e.ino).unwrap(),
            _ => Vec::new(),
        };
        let content = (content.len(), hash(&content));
        let mut xattrs = BTreeMap::new();
        let names = fs.listxattr(&Caller::ROOT, e.ino).unwrap();
        for n in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            xattrs.insert(n.to_vec(), fs.getxattr(&Caller::ROOT, e.ino, n).unwrap());
        }
        out.insert(
            p.clone(),
            Seen {
                ino: a.ino,
                kind: a.kind,
                perm: a.perm,
                nlink: a.nlink,
                uid: a.uid,
                gid: a.gid,
                size: a.size,
                mtime: a.mtime,
                ctime: a.ctime,
                content,
                xattrs,
                flags: fs.inode_flags(e.ino).unwrap(),
            },
        );
        if a.kind == FileKind::Directory {
            walk(fs, e.ino, &p, out);
        }
    }
}

/// Stop `fs` dead (nothing more reaches the devices; nothing is flushed or unmounted) and
/// mount the devices again with the same intent log.
fn die_and_remount(
    fs: Arc<Fs>,
    m: &Arc<dyn BlockDevice>,
    d: &Arc<dyn BlockDevice>,
    o: &MountOptions,
) -> Arc<Fs> {
    fs.shutdown();
    drop(fs);
    Fs::mount(m.clone(), d.clone(), o.clone()).unwrap()
}

/// Stop `fs` dead and start a successor on its devices and intent log, as the supervisor
/// does: it takes over the dead daemon's kernel connection (whose references it inherits).
fn die_and_take_over(
    fs: Arc<Fs>,
    m: &Arc<dyn BlockDevice>,
    d: &Arc<dyn BlockDevice>,
    o: &MountOptions,
) -> Arc<Fs> {
    let successor = MountOptions {
        successor_of_dead: Some(1),
        ..o.clone()
    };
    let fs = die_and_remount(fs, m, d, &successor);
    fs.begin_kernel_session(false);
    fs
}

fn assert_same(before: &BTreeMap<String, Seen>, after: &BTreeMap<String, Seen>, when: &str) {
    for (p, s) in before {
        match after.get(p) {
            None => panic!("{when}: {p} is gone"),
            Some(a) => assert_eq!(a, s, "{when}: {p} differs"),
        }
    }
    for p in after.keys() {
        assert!(before.contains_key(p), "{when}: {p} appeared");
    }
}

fn unmount_and_check(fs: Arc<Fs>, m: &Arc<dyn BlockDevice>, d: &Arc<dyn BlockDevice>, when: &str) {
    fs.unmount().unwrap();
    let r = crate::check::check(&**m, &**d).unwrap();
    assert!(r.is_clean(), "{when}: checker found problems:\n{r}");
}

#[test]
fn everything_acknowledged_before_the_daemon_dies_is_there_after_the_next_mount() {
    for budget in [0, 256 << 10] {
        let dir = IntentDir::new(&format!("all-{budget}"));
        let (m, d) = devices(32, 64);
        let o = opts(&dir, budget);
        let fs = Fs::mount(m.clone(), d.clone(), o.clone()).unwrap();
        // Some of it reaches the log before the death, the rest only the intent log.
        let sub = fs.mkdir(&U, ROOT, b"sub", 0o755).unwrap().ino;
        let (a, fh) = fs.create(&U, sub, b"a", 0o4755, libc::O_RDWR).unwrap();
        fs.write(a.ino, fh, 0, &vec![7u8; 20_000]).unwrap();
        fs.setxattr(&U, a.ino, b"user.k", b"v1", XattrFlags::default())
            .unwrap();
        fs.commit().unwrap();
        fs.write(a.ino, fh, 5_000, b"after the commit").unwrap();
        fs.write_unprivileged(&U, a.ino, fh, 40_000, b"tail")
            .unwrap();
        fs.setxattr(&U, a.ino, b"user.k", b"v2", XattrFlags::default())
            .unwrap();
        fs.setxattr(&U, a.ino, b"user.gone", b"x", XattrFlags::default())
            .unwrap();
        fs.removexattr(&U, a.ino, b"user.gone").unwrap();
        fs.link(&U, a.ino, ROOT, b"a-link").unwrap();
        fs.symlink(&U, sub, b"s", b"../a-link").unwrap();
        fs.symlink(&U, sub, b"long", &vec![b'x'; 3000]).unwrap();
        fs.mknod(&U, sub, b"fifo", libc::S_IFIFO | 0o600, 0)
            .unwrap();
        let (b, fhb) = fs.create(&U, ROOT, b"b", 0o600, libc::O_RDWR).unwrap();
        fs.write(b.ino, fhb, 0, &vec![1u8; 9000]).unwrap();
        fs.fallocate(b.ino, fhb, 20_000, 8192, 0).unwrap();
        fs.fallocate(
            b.ino,
            fhb,
            4096,
            4096,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        )
        .unwrap();
        fs.setattr(
            &U,
            b.ino,
            &SetAttr {
                mode: Some(0o640),
                size: Some(15_000),
                ..SetAttr::default()
            },
        )
        .unwrap();
        fs.rename(&U, ROOT, b"b", sub, b"b2", RenameFlags::default())
            .unwrap();
        let gone = fs.mkdir(&U, sub, b"gone", 0o700).unwrap().ino;
        fs.create(&U, gone, b"x", 0o600, libc::O_RDWR).unwrap();
        fs.unlink(&U, gone, b"x").unwrap();
        fs.rmdir(&U, sub, b"gone").unwrap();
        let (c, fhc) = fs.create(&U, ROOT, b"c", 0o644, libc::O_RDWR).unwrap();
        fs.write(c.ino, fhc, 0, b"temporary").unwrap();
        fs.release(c.ino, fhc).unwrap();
        let fh = fs.open(&U, c.ino, libc::O_RDWR | libc::O_TRUNC).unwrap();
        fs.write(c.ino, fh, 3, b"kept").unwrap();
        fs.set_inode_flags(&Caller::ROOT, c.ino, crate::format::inode::FLAG_NODUMP)
            .unwrap();
        let before = seen_tree(&fs);
        let fs = die_and_remount(fs, &m, &d, &o);
        let r = fs.intent_replay();
        assert_eq!(r.failed, 0, "{r:?}");
        assert!(r.operations > 10, "{r:?}");
        assert_same(&before, &seen_tree(&fs), &format!("budget {budget}"));
        unmount_and_check(fs, &m, &d, "after the replay");
        // A clean unmount leaves no intent log behind.
        let left = std::fs::read_dir(&dir.0).map_or(0, |r| r.count());
        assert_eq!(left, 0, "intent files left after a clean unmount");
    }
}

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One random operation on a handful of names in two directories; errors (a name that
/// is not there) are part of the game.
fn random_op(fs: &Fs, rng: &mut Rng, dirs: &[u64]) {
    let dir = dirs[rng.below(dirs.len() as u64) as usize];
    let name = format!("f{}", rng.below(6));
    let n = name.as_bytes();
    let lookup = |dir: u64, n: &[u8]| fs.lookup(dir, n).ok();
    match rng.below(15) {
        0..=2 => {
            let ino = match lookup(dir, n) {
                Some(a) if a.kind == FileKind::Regular => a.ino,
                Some(_) => return,
                None => match fs.create(&U, dir, n, 0o644, libc::O_RDWR) {
                    Ok((a, fh)) => {
                        let _ = fs.release(a.ino, fh);
                        a.ino
                    }
                    Err(_) => return,
                },
            };
            let fh = fs.open(&U, ino, libc::O_RDWR).unwrap();
            let off = rng.below(40_000);
            let len = 1 + rng.below(12_000) as usize;
            let byte = rng.next() as u8;
            fs.write(ino, fh, off, &vec![byte; len]).unwrap();
            fs.release(ino, fh).unwrap();
        }
        3 => {
            let _ = fs.unlink(&U, dir, n);
        }
        4 => {
            let to = dirs[rng.below(dirs.len() as u64) as usize];
            let new = format!("f{}", rng.below(6));
            let _ = fs.rename(&U, dir, n, to, new.as_bytes(), RenameFlags::default());
        }
        5 => {
            if let Some(a) = lookup(dir, n) {
                let new = format!("f{}", rng.below(6));
                let _ = fs.link(&U, a.ino, dir, new.as_bytes());
            }
        }
        6 => {
            if let Some(a) = lookup(dir, n) {
                let set = SetAttr {
                    size: (a.kind == FileKind::Regular).then(|| rng.below(30_000)),
                    mode: Some(0o600 + rng.below(0o100) as u32),
                    ..SetAttr::default()
                };
                let _ = fs.setattr(&U, a.ino, &set);
            }
        }
        7 => {
            if let Some(a) = lookup(dir, n) {
                let v = format!("v{}", rng.next() % 100);
                let _ = fs.setxattr(&U, a.ino, b"user.t", v.as_bytes(), XattrFlags::default());
            }
        }
        8 => {
            if let Some(a) = lookup(dir, n) {
                let _ = fs.removexattr(&U, a.ino, b"user.t");
            }
        }
        9 => {
            if let Some(a) = lookup(dir, n).filter(|a| a.kind == FileKind::Regular) {
                let fh = fs.open(&U, a.ino, libc::O_RDWR).unwrap();
                let mode = [0, libc::FALLOC_FL_KEEP_SIZE, 3][rng.below(3) as usize];
                let _ = fs.fallocate(a.ino, fh, rng.below(30_000), 1 + rng.below(10_000), mode);
                fs.release(a.ino, fh).unwrap();
            }
        }
        10 => {
            let _ = fs.symlink(&U, dir, n, b"target");
        }
        11 => {
            if let Some(a) = lookup(dir, n).filter(|a| a.kind == FileKind::Regular) {
                let fh = fs.open(&U, a.ino, libc::O_RDWR | libc::O_TRUNC).unwrap();
                fs.release(a.ino, fh).unwrap();
            }
        }
        13 => {
            // O_TMPFILE: written, then named before its close (if the name is free).
            if let Ok((t, fh)) = fs.tmpfile(&U, dir, 0o640, libc::O_RDWR) {
                let len = 1 + rng.below(9_000) as usize;
                fs.write(t.ino, fh, 0, &vec![rng.next() as u8; len])
                    .unwrap();
                let _ = fs.link(&U, t.ino, dir, n);
                fs.release(t.ino, fh).unwrap();
            }
        }
        12 => match rng.below(3) {
            0 => fs.commit().unwrap(),
            1 => fs.writeback_all().unwrap(),
            _ => fs.sync_log().unwrap(),
        },
        _ => {
            let _ = fs.mkdir(&U, dir, n, 0o755);
        }
    }
}

#[test]
fn random_work_survives_the_daemon_dying_at_any_point() {
    for seed in 1..=24u64 {
        let budget = if seed % 3 == 0 { 0 } else { 64 << 10 };
        let dir = IntentDir::new(&format!("random-{seed}"));
        let (m, d) = devices(32, 64);
        let o = opts(&dir, budget);
        let mut fs = Fs::mount(m.clone(), d.clone(), o.clone()).unwrap();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let dirs = [ROOT, fs.mkdir(&U, ROOT, b"d", 0o755).unwrap().ino];
        // Two deaths in a row: the second one comes after a replay.
        for round in 0..2 {
            let ops = 20 + rng.below(120);
            for _ in 0..ops {
                random_op(&fs, &mut rng, &dirs);
            }
            let before = seen_tree(&fs);
            fs = die_and_remount(fs, &m, &d, &o);
            let r = fs.intent_replay();
            assert_eq!(r.failed, 0, "seed {seed} round {round}: {r:?}");
            assert_same(
                &before,
                &seen_tree(&fs),
                &format!("seed {seed} round {round}"),
            );
        }
        unmount_and_check(fs, &m, &d, &format!("seed {seed}"));
    }
}

/// Cached writes come back on top of a log that holds what other files were given after
/// them: a file written big and truncated while it was cached, then another file given
/// most of the device. Put back one by one, the first write needs blocks the log gave the
/// second file; once all are back they fit, as they did in the dead daemon. The same when
/// the next mount has no data cache (the replay caches what it restores all the same).
#[test]
fn cached_writes_come_back_over_later_allocations_of_a_full_device() {
    for next_budget in [64 << 20, 0] {
        let dir = IntentDir::new(&format!("full-{next_budget}"));
        let (m, d) = devices(32, 8);
        let o = opts(&dir, 64 << 20);
        let fs = Fs::mount(m.clone(), d.clone(), o.clone()).unwrap();
        let (b, fhb) = fs.create(&U, ROOT, b"b", 0o644, libc::O_RDWR).unwrap();
        let (a, fha) = fs.create(&U, ROOT, b"a", 0o644, libc::O_RDWR).unwrap();
        // Cached from before a's writes, it keeps their records in the intent log.
        let (c, fhc) = fs.create(&U, ROOT, b"c", 0o644, libc::O_RDWR).unwrap();
        fs.write(c.ino, fhc, 0, b"cached throughout").unwrap();
        let big = 6 << 20;
        fs.write(a.ino, fha, 0, &vec![1u8; big]).unwrap();
        fs.setattr(&U, a.ino, &size(0)).unwrap();
        fs.write(b.ino, fhb, 0, &vec![2u8; big]).unwrap();
        // A change of b's block map writes its cache back: b's blocks are in the log, a's
        // writes only in the cache.
        fs.fallocate(b.ino, fhb, big as u64, 4096, libc::FALLOC_FL_KEEP_SIZE)
            .unwrap();
        fs.write(a.ino, fha, 0, b"what is left of a").unwrap();
        fs.sync_log().unwrap();
        let before = seen_tree(&fs);
        fs.shutdown();
        drop(fs);
        let fs = Fs::mount(m.clone(), d.clone(), opts(&dir, next_budget)).unwrap();
        let r = fs.intent_replay();
        let when = format!("next mount's cache {next_budget}");
        assert_eq!(r.failed, 0, "{when}: {r:?}");
        assert!(r.cached_writes >= 4, "{when}: {r:?}");
        assert_same(&before, &seen_tree(&fs), &when);
        unmount_and_check(fs, &m, &d, &when);
    }
}

/// A mount without the data cache writes through: what the log holds of its writes, its
/// truncates and fallocates is not done again on the next mount (here a cached one, on a
/// nearly full device, where doing a write and a truncate again would need blocks the log
/// gave another file since).
#[test]
fn writes_through_the_log_holds_are_not_replayed() {
    let dir = IntentDir::new("through");
    let (m, d) = devices(32, 8);
    let fs = Fs::mount(m.clone(), d.clone(), opts(&dir, 0)).unwrap();
    let (a, fha) = fs.create(&U, ROOT, b"a", 0o644, libc::O_RDWR).unwrap();
    let (b, fhb) = fs.create(&U, ROOT, b"b", 0o644, libc::O_RDWR).unwrap();
    let big = 6 << 20;
    fs.write(a.ino, fha, 0, &vec![1u8; big]).unwrap();
    fs.setattr(&U, a.ino, &size(big as u64 + 8192)).unwrap();
    fs.setattr(&U, a.ino, &size(0)).unwrap();
    fs.sync_log().unwrap();
    fs.write(b.ino, fhb, 0, &vec![2u8; big]).unwrap();
    fs.sync_log().unwrap();
    fs.write(a.ino, fha, 0, b"after the log write").unwrap();
    let before = seen_tree(&fs);
    fs.shutdown();
    drop(fs);
    let fs = Fs::mount(m.clone(), d.clone(), opts(&dir, 64 << 20)).unwrap();
    let r = fs.intent_replay();
    assert_eq!(r.failed, 0, "{r:?}");
    assert_eq!((r.cached_writes, r.operations), (0, 1), "{r:?}");
    assert_same(&before, &seen_tree(&fs), "after the replay");
    unmount_and_check(fs, &m, &d, "after the replay");
}

fn size(bytes: u64) -> SetAttr {
    SetAttr {
        size: Some(bytes),
        ..SetAttr::default()
    }
}

/// A successor of a dead daemon (`successor_of_dead`) serves what the kernel holds of the
/// dead one's: its open handles, its removed-but-open files, its numbers; and knows which
/// requests the dead one carried out (`answered_before`).
#[test]
fn a_successor_serves_what_the_kernel_holds_of_its_predecessor() {
    let dir = IntentDir::new("successor");
    let (m, d) = devices(32, 64);
    let o = opts(&dir, 256 << 10);
    let fs = Fs::mount(m.clone(), d.clone(), o.clone()).unwrap();
    fs.begin_kernel_session(false);
    // Made by requests 10 and 12: their records carry the ids.
    crate::intent::set_request(10);
    let (open, fh) = fs.create(&U, ROOT, b"open", 0o644, libc::O_RDWR).unwrap();
    crate::intent::set_request(12);
    fs.write(open.ino, fh, 0, b"still open").unwrap();
    crate::intent::set_request(0);
    let (_, afh) = fs
        .create(
            &U,
            ROOT,
            b"appended",
            0o644,
            libc::O_WRONLY | libc::O_APPEND,
        )
        .unwrap();
    let appended = fs.lookup(ROOT, b"appended").unwrap().ino;
    fs.write(appended, afh, 0, b"one").unwrap();
    // Removed while open: the kernel still holds it.
    fs.lookup(ROOT, b"open").unwrap();
    fs.unlink(&U, ROOT, b"open").unwrap();
    let gone = fs.create(&U, ROOT, b"gone", 0o644, libc::O_RDWR).unwrap();
    fs.release(gone.0.ino, gone.1).unwrap();
    fs.unlink(&U, ROOT, b"gone").unwrap();
    fs.commit().unwrap();
    let freed = gone.0.ino;

    let fs = die_and_take_over(fs, &m, &d, &o);
    assert!(fs.answered_before(10) && fs.answered_before(12));
    assert!(!fs.answered_before(10), "asked once");
    assert!(!fs.answered_before(11), "no record of request 11");
    assert_eq!(fs.restarts(), 1);
    // The dead daemon's handles work here: reads and writes of the removed file, an
    // O_APPEND handle that still appends.
    assert_eq!(fs.read(open.ino, fh, 0, 100).unwrap(), b"still open");
    fs.write(open.ino, fh, 10, b"!").unwrap();
    fs.write(appended, afh, 0, b"two").unwrap();
    let mine = fs.open(&U, appended, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(appended, mine, 0, 100).unwrap(), b"onetwo");
    assert!(
        mine >> 42 == 1,
        "a successor's handles carry its incarnation"
    );
    fs.release(appended, mine).unwrap();
    assert!(
        fs.release(open.ino, fh).is_ok(),
        "a dead daemon's handle closes"
    );
    // Nothing free before the takeover is handed out again (the kernel may hold it).
    let (made, mfh) = fs.create(&U, ROOT, b"new", 0o644, libc::O_RDWR).unwrap();
    fs.release(made.ino, mfh).unwrap();
    assert_ne!(made.ino, freed, "a number free at the takeover was reused");
    // The removed file stays until the kernel's last FORGET of it, which frees it.
    assert_eq!(fs.getattr(open.ino).unwrap().nlink, 0);
    fs.forget(open.ino, 3);
    assert!(fs.getattr(open.ino).is_err(), "freed at its FORGET");
    fs.commit().unwrap();
    unmount_and_check(fs, &m, &d, "after the successor");
}

#[test]
fn an_unnamed_file_outlives_its_daemon_and_the_successor_can_name_it() {
    let dir = IntentDir::new("unnamed");
    let (m, d) = devices(32, 64);
    let o = opts(&dir, 256 << 10);
    let fs = Fs::mount(m.clone(), d.clone(), o.clone()).unwrap();
    fs.begin_kernel_session(false);
    let (kept, kfh) = fs.tmpfile(&U, ROOT, 0o640, libc::O_RDWR).unwrap();
    fs.write(kept.ino, kfh, 0, b"named later").unwrap();
    let (dropped, dfh) = fs.tmpfile(&U, ROOT, 0o600, libc::O_RDWR).unwrap();
    fs.write(dropped.ino, dfh, 0, &[3u8; 20_000]).unwrap();
    let fs = die_and_take_over(fs, &m, &d, &o);
    // The kernel's descriptors still work, and one of them gets its name now.
    assert_eq!(fs.read(kept.ino, kfh, 0, 100).unwrap(), b"named later");
    assert_eq!(fs.getattr(kept.ino).unwrap().nlink, 0);
    let named = fs.link(&U, kept.ino, ROOT, b"late").unwrap();
    assert_eq!(named.nlink, 1);
    fs.release(kept.ino, kfh).unwrap();
    fs.forget(kept.ino, 2);
    // The other goes at its close and the kernel's FORGET.
    assert_eq!(fs.read(dropped.ino, dfh, 0, 3).unwrap(), [3u8; 3]);
    fs.release(dropped.ino, dfh).unwrap();
    fs.forget(dropped.ino, 1);
    assert!(fs.getattr(dropped.ino).is_err(), "freed at its FORGET");
    let late = fs.lookup(ROOT, b"late").unwrap();
    assert_eq!(
        fs.read(late.ino, NO_HANDLE, 0, 100).unwrap(),
        b"named later"
    );
    fs.commit().unwrap();
    unmount_and_check(fs, &m, &d, "after the successor");
}

/// The log may hold an unnamed file before its name comes (here a flush between the two): the
/// next mount then replays only the LINK, of an inode it reads with no link, and a successor
/// gets the kernel's LINK of one. Both must name it.
#[test]
fn an_unnamed_file_the_log_holds_can_still_be_named_after_a_death() {
    for successor in [false, true] {
        let dir = IntentDir::new(&format!("unnamed-logged-{successor}"));
        let (m, d) = devices(32, 64);
        let o = opts(&dir, 0);
        let fs = Fs::mount(m.clone(), d.clone(), o.clone()).unwrap();
        fs.begin_kernel_session(false);
        let (t, fh) = fs.tmpfile(&U, ROOT, 0o640, libc::O_RDWR).unwrap();
        fs.write(t.ino, fh, 0, b"logged unnamed").unwrap();
        fs.sync_log().unwrap();
        let fs = if successor {
            let fs = die_and_take_over(fs, &m, &d, &o);
            fs.link(&U, t.ino, ROOT, b"named").unwrap();
            fs.release(t.ino, fh).unwrap();
            fs.forget(t.ino, 2);
            fs
        } else {
            fs.link(&U, t.ino, ROOT, b"named").unwrap();
            fs.release(t.ino, fh).unwrap();
            let fs = die_and_remount(fs, &m, &d, &o);
            let replay = fs.intent_replay();
            assert_eq!((replay.operations, replay.failed), (1, 0), "{replay:?}");
            fs
        };
        let named = fs.lookup(ROOT, b"named").unwrap();
        assert_eq!(named.nlink, 1);
        assert_eq!(
            fs.read(named.ino, NO_HANDLE, 0, 100).unwrap(),
            b"logged unnamed"
        );
        fs.commit().unwrap();
        unmount_and_check(fs, &m, &d, &format!("successor {successor}"));
    }
}

/// The mount lists the orphans the log holds before it replays, and the replay may name or
/// free them: an unnamed file the log took, then named, written and removed before a death.
#[test]
fn an_orphan_the_replay_frees_is_not_freed_twice() {
    let dir = IntentDir::new("unnamed-freed");
    let (m, d) = devices(32, 64);
    let o = opts(&dir, 0);
    let fs = Fs::mount(m.clone(), d.clone(), o.clone()).unwrap();
    let (t, fh) = fs.tmpfile(&U, ROOT, 0o640, libc::O_RDWR).unwrap();
    fs.write(t.ino, fh, 0, &[1u8; 5000]).unwrap();
    fs.sync_log().unwrap();
    fs.link(&U, t.ino, ROOT, b"named").unwrap();
    fs.write(t.ino, fh, 5000, &[2u8; 9000]).unwrap();
    fs.release(t.ino, fh).unwrap();
    fs.unlink(&U, ROOT, b"named").unwrap();
    let fs = die_and_remount(fs, &m, &d, &o);
    let replay = fs.intent_replay();
    assert_eq!(replay.failed, 0, "{replay:?}");
    assert!(fs.getattr(t.ino).is_err(), "freed by the replayed unlink");
    assert!(fs.lookup(ROOT, b"named").is_err());
    unmount_and_check(fs, &m, &d, "after the replay");
}
