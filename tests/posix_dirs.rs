//! Directories and names: mkdir/rmdir/unlink errors, link counts, symlinks, hard links,
//! readdir (types, inode numbers, stability under concurrent change, telldir/seekdir) and
//! name limits.

#[macro_use]
mod common;

use common::*;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;

#[test]
fn mkdir_rmdir_unlink_errors() {
    let fs = TestFs::new();
    let d = fs.join("d");
    sys::mkdir(&d, 0o755).unwrap();
    fs::write(d.join("f"), b"x").unwrap();
    fs::write(fs.join("file"), b"x").unwrap();

    assert_errno!(sys::mkdir(&d, 0o755), libc::EEXIST);
    assert_errno!(sys::mkdir(fs.join("file"), 0o755), libc::EEXIST);
    assert_errno!(sys::mkdir(fs.join("missing/sub"), 0o755), libc::ENOENT);
    assert_errno!(sys::mkdir(fs.join("file/sub"), 0o755), libc::ENOTDIR);

    assert_errno!(sys::rmdir(&d), libc::ENOTEMPTY);
    assert_errno!(sys::rmdir(fs.join("file")), libc::ENOTDIR);
    assert_errno!(sys::rmdir(d.join(".")), libc::EINVAL);
    assert_errno!(sys::rmdir(d.join("..")), libc::ENOTEMPTY);
    assert_errno!(sys::rmdir(fs.join("missing")), libc::ENOENT);

    assert_errno!(sys::unlink(&d), libc::EISDIR);
    assert_errno!(sys::unlink(fs.join("missing")), libc::ENOENT);
    assert_errno!(sys::unlink(fs.join("file/x")), libc::ENOTDIR);

    // After emptying, rmdir works and the name is gone everywhere.
    sys::unlink(d.join("f")).unwrap();
    sys::rmdir(&d).unwrap();
    assert_errno!(fs::symlink_metadata(&d), libc::ENOENT);
    assert!(!names(fs.path()).contains(&b"d".to_vec()));
    // The name can be reused for a file, then a directory again.
    fs::write(&d, b"now a file").unwrap();
    sys::unlink(&d).unwrap();
    sys::mkdir(&d, 0o700).unwrap();
    assert!(lstat(&d).is_dir());
    assert_eq!(names(&d), Vec::<Vec<u8>>::new());
}

#[test]
fn directory_link_counts() {
    let mut fs = TestFs::new();
    // The root: 2 + its subdirectories (lost+found included, where there is one).
    let subdirs = |p: &std::path::Path| {
        list_dir(p)
            .iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .filter(|e| lstat(p.join(OsStr::from_bytes(&e.name))).is_dir())
            .count() as u64
    };
    assert_eq!(
        lstat(fs.path()).nlink(),
        2 + subdirs(fs.path()),
        "root nlink"
    );

    let d = fs.join("d");
    sys::mkdir(&d, 0o755).unwrap();
    assert_eq!(lstat(&d).nlink(), 2);
    for s in ["a", "b", "c"] {
        sys::mkdir(d.join(s), 0o755).unwrap();
    }
    for f in ["x", "y"] {
        fs::write(d.join(f), b"").unwrap();
    }
    sys::symlink("a", d.join("l")).unwrap();
    assert_eq!(
        lstat(&d).nlink(),
        5,
        "2 + 3 subdirectories; files do not count"
    );
    sys::rmdir(d.join("c")).unwrap();
    assert_eq!(lstat(&d).nlink(), 4);
    sys::mkdir(fs.join("e"), 0o755).unwrap();
    rename(d.join("b"), fs.join("e/b")).unwrap();
    assert_eq!(lstat(&d).nlink(), 3);
    assert_eq!(lstat(fs.join("e")).nlink(), 3);
    assert_eq!(
        lstat(fs.path()).nlink(),
        2 + subdirs(fs.path()),
        "root nlink"
    );
    fs.remount();
    assert_eq!(lstat(&d).nlink(), 3);
    assert_eq!(lstat(fs.join("e")).nlink(), 3);
    assert_eq!(
        lstat(fs.path()).nlink(),
        2 + subdirs(fs.path()),
        "root nlink after remount"
    );
}

#[test]
fn symlinks_of_every_length() {
    let mut fs = TestFs::new();
    fs::write(fs.join("target"), b"t").unwrap();
    // 120/121: inline vs block in DualFS; 4064/4065: one vs two symlink blocks.
    let lens = [
        1usize, 2, 60, 119, 120, 121, 122, 255, 1000, 4063, 4064, 4065, 4095,
    ];
    let target_of = |len: usize| -> Vec<u8> {
        let c = content(len as u64, len);
        c.iter()
            .map(|b| if *b % 7 == 0 { b'/' } else { b'a' + b % 26 })
            .collect()
    };
    for &len in &lens {
        sys::symlink(
            OsStr::from_bytes(&target_of(len)),
            fs.join(format!("l{len}")),
        )
        .unwrap();
    }
    sys::symlink("target", fs.join("good")).unwrap();
    let check = |fs: &TestFs| {
        for &len in &lens {
            let p = fs.join(format!("l{len}"));
            let m = lstat(&p);
            assert!(m.file_type().is_symlink());
            assert_eq!(m.len(), len as u64, "lstat size of a {len}-byte symlink");
            assert_eq!(perm(&m), 0o777);
            let t = fs::read_link(&p).unwrap();
            assert!(
                t.as_os_str().as_bytes() == target_of(len),
                "target of the {len}-byte symlink"
            );
        }
        assert_eq!(
            fs::read(fs.join("good")).unwrap(),
            b"t",
            "following a symlink"
        );
    };
    check(&fs);
    fs.remount();
    check(&fs);

    // Too long, dangling, loops, readlink of a non-link.
    assert_errno!(
        sys::symlink(OsStr::from_bytes(&vec![b'a'; 4096]), fs.join("toolong")),
        libc::ENAMETOOLONG
    );
    assert_errno!(sys::symlink("x", fs.join("good")), libc::EEXIST);
    sys::symlink("nowhere", fs.join("dangling")).unwrap();
    assert!(lstat(fs.join("dangling")).file_type().is_symlink());
    assert_errno!(fs::metadata(fs.join("dangling")), libc::ENOENT);
    sys::symlink("loop2", fs.join("loop1")).unwrap();
    sys::symlink("loop1", fs.join("loop2")).unwrap();
    assert_errno!(fs::read(fs.join("loop1")), libc::ELOOP);
    assert_errno!(fs::read_link(fs.join("target")), libc::EINVAL);
    // Removing a link leaves its target.
    sys::unlink(fs.join("good")).unwrap();
    assert_eq!(fs::read(fs.join("target")).unwrap(), b"t");
}

#[test]
fn hard_links() {
    let mut fs = TestFs::new();
    let a = fs.join("a");
    fs::write(&a, b"shared").unwrap();
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    let b = fs.join("d/b");
    sys::link(&a, &b).unwrap();
    let (ma, mb) = (lstat(&a), lstat(&b));
    assert_eq!(ma.ino(), mb.ino());
    assert_eq!((ma.nlink(), mb.nlink()), (2, 2));
    // A write through one name is seen through the other.
    fs::write(&b, b"changed").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"changed");
    // Many names.
    for i in 0..50 {
        sys::link(&a, fs.join(format!("d/n{i}"))).unwrap();
    }
    assert_eq!(lstat(&a).nlink(), 52);
    for i in 0..50 {
        sys::unlink(fs.join(format!("d/n{i}"))).unwrap();
    }
    assert_eq!(lstat(&b).nlink(), 2);
    // Errors: existing name, directory source, missing source.
    assert_errno!(sys::link(&a, &b), libc::EEXIST);
    assert_errno!(sys::link(fs.join("d"), fs.join("dlink")), libc::EPERM);
    assert_errno!(sys::link(fs.join("missing"), fs.join("x")), libc::ENOENT);
    fs.remount();
    assert_eq!((lstat(&a).nlink(), lstat(&b).nlink()), (2, 2));
    assert_eq!(lstat(&a).ino(), lstat(&b).ino());
    // Unlinking one name leaves the other with nlink 1 and the data intact.
    sys::unlink(&a).unwrap();
    assert_eq!(lstat(&b).nlink(), 1);
    assert_eq!(fs::read(&b).unwrap(), b"changed");
    fs.remount();
    assert_eq!(lstat(&b).nlink(), 1);
    assert_eq!(fs::read(&b).unwrap(), b"changed");
    // Hard links to symlinks link the symlink itself.
    sys::symlink("d/b", fs.join("sl")).unwrap();
    sys::link(fs.join("sl"), fs.join("sl2")).unwrap();
    assert!(lstat(fs.join("sl2")).file_type().is_symlink());
    assert_eq!(lstat(fs.join("sl")).nlink(), 2);
}

#[test]
fn readdir_names_types_and_inodes() {
    let fs = TestFs::new();
    let d = fs.join("d");
    sys::mkdir(&d, 0o755).unwrap();
    fs::write(d.join("reg"), b"x").unwrap();
    sys::mkdir(d.join("dir"), 0o755).unwrap();
    sys::symlink("reg", d.join("lnk")).unwrap();
    mkfifo(d.join("fifo"), 0o644).unwrap();
    sys::link(d.join("reg"), d.join("reg2")).unwrap();
    let odd = OsStr::from_bytes(b"sp ace\n\xff\x01tab\t");
    fs::write(d.join(odd), b"").unwrap();

    let entries = list_dir(&d);
    let mut seen: HashMap<Vec<u8>, &Dirent> = HashMap::new();
    for e in &entries {
        assert!(
            seen.insert(e.name.clone(), e).is_none(),
            "{:?} listed twice",
            OsStr::from_bytes(&e.name)
        );
    }
    let want: HashSet<&[u8]> = [
        &b"."[..],
        b"..",
        b"reg",
        b"dir",
        b"lnk",
        b"fifo",
        b"reg2",
        odd.as_bytes(),
    ]
    .into_iter()
    .collect();
    let got: HashSet<&[u8]> = seen.keys().map(|k| k.as_slice()).collect();
    assert_eq!(got, want);
    let dt = |n: &[u8]| seen[n].dtype;
    assert_eq!(dt(b"reg"), libc::DT_REG);
    assert_eq!(dt(b"reg2"), libc::DT_REG);
    assert_eq!(dt(b"dir"), libc::DT_DIR);
    assert_eq!(dt(b"lnk"), libc::DT_LNK);
    assert_eq!(dt(b"fifo"), libc::DT_FIFO);
    assert_eq!(dt(b"."), libc::DT_DIR);
    assert_eq!(dt(b".."), libc::DT_DIR);
    // Inode numbers agree with stat, "." is the directory, ".." its parent.
    for n in ["reg", "dir", "lnk", "fifo", "reg2"] {
        assert_eq!(
            seen[n.as_bytes()].ino,
            lstat(d.join(n)).ino(),
            "d_ino of {n}"
        );
    }
    assert_eq!(seen[&b"reg"[..]].ino, seen[&b"reg2"[..]].ino);
    assert_eq!(seen[&b"."[..]].ino, lstat(&d).ino());
    assert_eq!(seen[&b".."[..]].ino, lstat(fs.path()).ino());
    // An empty directory has just "." and "..".
    let e: Vec<_> = list_dir(d.join("dir"))
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(e.len(), 2);
    // Reading on after the end keeps returning nothing.
    let h = open(&d, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    while !getdents(&h, 4096).unwrap().is_empty() {}
    assert!(getdents(&h, 4096).unwrap().is_empty());
}

#[test]
fn readdir_of_10000_entries_under_concurrent_change() {
    let fs = TestFs::new();
    let d = fs.join("big");
    sys::mkdir(&d, 0o755).unwrap();
    const N: usize = 10_000;
    let name = |i: usize| format!("entry-{i:05}-{}", "x".repeat(i % 37));
    for i in 0..N {
        fs::write(d.join(name(i)), b"").unwrap();
    }
    // Plain listing first: all, once.
    let all = names(&d);
    assert_eq!(all.len(), N);
    assert!(all.windows(2).all(|w| w[0] != w[1]));

    // Now list in small chunks while creating new names and deleting old ones between chunks.
    // POSIX: entries neither added nor removed while listing are returned exactly once.
    let h = open(&d, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let mut count: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut removed: HashSet<Vec<u8>> = HashSet::new();
    let mut added = 0usize;
    let mut chunk = 0usize;
    loop {
        let v = getdents(&h, 2048).unwrap();
        if v.is_empty() {
            break;
        }
        for e in v {
            *count.entry(e.name).or_default() += 1;
        }
        chunk += 1;
        // new names sorting before and after the others, and two removals: one already
        // listed, one (probably) not yet
        fs::write(d.join(format!("a-new-{chunk}")), b"").unwrap();
        fs::write(d.join(format!("z-new-{chunk}")), b"").unwrap();
        added += 2;
        for i in [(chunk * 7919) % N, (chunk * 104_729 + 5000) % N] {
            let n = name(i);
            if removed.insert(n.clone().into_bytes()) {
                sys::unlink(d.join(&n)).unwrap();
            }
        }
    }
    assert!(chunk > 20, "the listing took only {chunk} getdents calls");
    let dups: Vec<_> = count
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(n, _)| OsStr::from_bytes(n))
        .collect();
    assert!(
        dups.is_empty(),
        "listed more than once: {:?}",
        &dups[..dups.len().min(10)]
    );
    let missing: Vec<_> = (0..N)
        .map(name)
        .filter(|n| !removed.contains(n.as_bytes()) && !count.contains_key(n.as_bytes()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} unchanged entries never listed, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    // Afterwards the directory holds exactly the survivors.
    assert_eq!(names(&d).len(), N - removed.len() + added);
}

#[test]
fn readdir_resumes_with_telldir_seekdir() {
    let fs = TestFs::new();
    let d = fs.join("d");
    sys::mkdir(&d, 0o755).unwrap();
    for i in 0..500 {
        fs::write(d.join(format!("f{i}")), b"").unwrap();
    }
    let mut s = DirStream::open(&d).unwrap();
    let mut order = Vec::new();
    let mut marks = Vec::new(); // (position, index in order of the next name)
    loop {
        if order.len() % 37 == 0 {
            marks.push((s.tell(), order.len()));
        }
        match s.next_name() {
            Some(n) => order.push(n),
            None => break,
        }
    }
    assert_eq!(order.len(), 502);
    assert_eq!(
        order.iter().collect::<HashSet<_>>().len(),
        502,
        "duplicates in one listing"
    );
    // Seeking back to any remembered position resumes with the same names, in any order.
    for &(pos, idx) in marks.iter().rev().chain(marks.iter()) {
        s.seek(pos);
        for k in 0..5 {
            assert_eq!(
                s.next_name().as_ref(),
                order.get(idx + k),
                "after seekdir to the mark at #{idx}, name #{}",
                idx + k
            );
        }
    }
    // rewinddir starts over.
    s.rewind();
    let again: Vec<_> = std::iter::from_fn(|| s.next_name()).collect();
    assert_eq!(again, order);
}

#[test]
fn name_length_limits() {
    let mut fs = TestFs::new();
    let n255 = "n".repeat(255);
    let n256 = "n".repeat(256);
    let utf8_255 = "é".repeat(127) + "x"; // 254 + 1 bytes
    assert_eq!(utf8_255.len(), 255);
    fs::write(fs.join(&n255), b"max").unwrap();
    sys::mkdir(fs.join(format!("d{}", &n255[1..])), 0o755).unwrap();
    fs::write(fs.join(&utf8_255), b"utf8").unwrap();
    let listed = names(fs.path());
    assert!(listed.contains(&n255.clone().into_bytes()));
    assert!(listed.contains(&utf8_255.clone().into_bytes()));
    assert_eq!(fs::read(fs.join(&n255)).unwrap(), b"max");

    assert_errno!(
        open(fs.join(&n256), libc::O_CREAT | libc::O_WRONLY, 0o644),
        libc::ENAMETOOLONG
    );
    assert_errno!(sys::mkdir(fs.join(&n256), 0o755), libc::ENAMETOOLONG);
    assert_errno!(fs::symlink_metadata(fs.join(&n256)), libc::ENAMETOOLONG);
    assert_errno!(sys::symlink("t", fs.join(&n256)), libc::ENAMETOOLONG);
    assert_errno!(
        sys::link(fs.join(&n255), fs.join(&n256)),
        libc::ENAMETOOLONG
    );
    assert_errno!(rename(fs.join(&n255), fs.join(&n256)), libc::ENAMETOOLONG);
    assert_errno!(mkfifo(fs.join(&n256), 0o644), libc::ENAMETOOLONG);
    assert_eq!(
        fs::read(fs.join(&n255)).unwrap(),
        b"max",
        "failed rename left the source"
    );

    fs.remount();
    assert_eq!(fs::read(fs.join(&n255)).unwrap(), b"max");
    assert_eq!(fs::read(fs.join(&utf8_255)).unwrap(), b"utf8");
    sys::unlink(fs.join(&n255)).unwrap();
    assert_errno!(fs::symlink_metadata(fs.join(&n255)), libc::ENOENT);
}

#[test]
fn many_names_in_many_directories_survive_remount() {
    // A directory tree big enough to split B-epsilon tree nodes many times, with names that
    // share long prefixes, then partial deletion.
    let mut fs = TestFs::new();
    let mut expect: Vec<String> = Vec::new();
    for d in 0..20 {
        sys::mkdir(fs.join(format!("dir{d}")), 0o755).unwrap();
        for i in 0..300 {
            let n = format!("dir{d}/{}{i}", "common-prefix-".repeat(1 + i % 5));
            fs::write(fs.join(&n), n.as_bytes()).unwrap();
            expect.push(n);
        }
    }
    // Remove every third.
    let mut kept = Vec::new();
    for (k, n) in expect.into_iter().enumerate() {
        if k % 3 == 0 {
            sys::unlink(fs.join(&n)).unwrap();
        } else {
            kept.push(n);
        }
    }
    let check = |fs: &TestFs| {
        let mut total = 0;
        for d in 0..20 {
            total += names(fs.join(format!("dir{d}"))).len();
        }
        assert_eq!(total, kept.len());
        for n in &kept {
            assert_eq!(fs::read(fs.join(n)).unwrap(), n.as_bytes(), "{n}");
        }
    };
    check(&fs);
    fs.remount();
    check(&fs);
}

/// GlusterFS's DHT keeps its subvolume's index in the low bits of a large directory offset:
/// it hands out `d_off` with those bits replaced and seeks its brick to `d_off` with them
/// cleared. A listing resumed that way must neither repeat the entry before the offset (it
/// did, for ever, when an entry's cookie was its own hash: the brick's self-heal and readdir
/// stalled) nor skip one. Modelled on DHT over 128 subvolumes; ext4 and tmpfs pass too.
#[test]
fn readdir_resumes_from_an_offset_with_its_low_bits_cleared() {
    let fs = TestFs::new();
    let d = fs.join("d");
    sys::mkdir(&d, 0o755).unwrap();
    const N: usize = 300;
    for i in 0..N {
        fs::write(d.join(format!("f{i}")), b"").unwrap();
    }
    let want: HashSet<Vec<u8>> = sys::list_dir(&d).into_iter().map(|e| e.name).collect();
    assert_eq!(want.len(), N + 2);
    let dir = sys::open(&d, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let mut seen = Vec::new();
    let mut pos: i64 = 0;
    // Small buffers: a resume after every few entries, as the brick's readdirp does.
    for _ in 0..2 * N {
        let at = unsafe { libc::lseek(dir.as_raw_fd(), pos, libc::SEEK_SET) };
        assert_eq!(at, pos, "lseek to {pos}");
        let batch = sys::getdents(&dir, 128).unwrap();
        let Some(last) = batch.last() else { break };
        // DHT's "huge" offsets (any of bits 55..62 set) lose their low 8 bits.
        pos = if last.off >= 1 << 55 {
            last.off & !0xff
        } else {
            last.off
        };
        seen.extend(batch.into_iter().map(|e| e.name));
    }
    let unique: HashSet<Vec<u8>> = seen.iter().cloned().collect();
    assert_eq!(
        seen.len(),
        unique.len(),
        "names listed twice (of {} listed)",
        seen.len()
    );
    assert_eq!(unique, want, "the resumed listing is not the directory");
}

/// Entries of an open directory from its start: rewinds `dir` (the kernel checks its cached
/// listing there) and reads to the end; sorted names with their inode numbers, without "."
/// and "..".
fn relist(dir: &fs::File) -> Vec<(Vec<u8>, u64)> {
    assert_eq!(
        unsafe { libc::lseek(dir.as_raw_fd(), 0, libc::SEEK_SET) },
        0
    );
    let mut all = Vec::new();
    loop {
        let v = sys::getdents(dir, 4096).unwrap();
        if v.is_empty() {
            break;
        }
        all.extend(
            v.into_iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .map(|e| (e.name, e.ino)),
        );
    }
    all.sort();
    all
}

fn listed(dir: &fs::File) -> Vec<String> {
    relist(dir)
        .into_iter()
        .map(|(n, _)| String::from_utf8(n).unwrap())
        .collect()
}

/// The kernel keeps a directory's listing across opens (FOPEN_CACHE_DIR with KEEP_CACHE, and
/// no OPENDIR): every change made through the mount must show in the next listing, both
/// through a descriptor opened before the change and rewound, and through a new open. Each
/// step lists first, so that the listing it changes is cached.
#[test]
fn listings_kept_by_the_kernel_show_every_change() {
    let fs = TestFs::new();
    let (d, e) = (fs.join("d"), fs.join("e"));
    sys::mkdir(&d, 0o755).unwrap();
    sys::mkdir(&e, 0o755).unwrap();
    fs::write(d.join("a"), b"").unwrap();
    fs::write(d.join("b"), b"").unwrap();
    let held = sys::open(&d, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let held_e = sys::open(&e, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let mut expect: Vec<&'static str> = vec!["a", "b"];
    let mut step = |what: &str, change: &dyn Fn(), now: &[&'static str], now_e: Option<&[&str]>| {
        assert_eq!(listed(&held), expect, "before {what}");
        assert_eq!(names(&d).len(), expect.len(), "before {what} (new open)");
        if now_e.is_some() {
            relist(&held_e);
        }
        change();
        expect = now.to_vec();
        assert_eq!(listed(&held), expect, "after {what}, the open descriptor");
        let fresh: Vec<String> = names(&d)
            .into_iter()
            .map(|n| String::from_utf8(n).unwrap())
            .collect();
        assert_eq!(fresh, expect, "after {what}, a new open");
        if let Some(now_e) = now_e {
            assert_eq!(listed(&held_e), now_e, "after {what}, the other directory");
        }
    };
    step(
        "create",
        &|| fs::write(d.join("c"), b"").unwrap(),
        &["a", "b", "c"],
        None,
    );
    step(
        "unlink",
        &|| sys::unlink(d.join("a")).unwrap(),
        &["b", "c"],
        None,
    );
    step(
        "mkdir",
        &|| sys::mkdir(d.join("s"), 0o755).unwrap(),
        &["b", "c", "s"],
        None,
    );
    step(
        "rmdir",
        &|| sys::rmdir(d.join("s")).unwrap(),
        &["b", "c"],
        None,
    );
    step(
        "symlink",
        &|| sys::symlink("b", d.join("l")).unwrap(),
        &["b", "c", "l"],
        None,
    );
    step(
        "mknod",
        &|| sys::mkfifo(d.join("p"), 0o644).unwrap(),
        &["b", "c", "l", "p"],
        None,
    );
    step(
        "link",
        &|| sys::link(d.join("b"), d.join("h")).unwrap(),
        &["b", "c", "h", "l", "p"],
        None,
    );
    step(
        "rename within the directory",
        &|| sys::rename(d.join("c"), d.join("c2")).unwrap(),
        &["b", "c2", "h", "l", "p"],
        None,
    );
    step(
        "rename to another directory",
        &|| sys::rename(d.join("c2"), e.join("c2")).unwrap(),
        &["b", "h", "l", "p"],
        Some(&["c2"]),
    );
    step(
        "rename from another directory",
        &|| sys::rename(e.join("c2"), d.join("c3")).unwrap(),
        &["b", "c3", "h", "l", "p"],
        Some(&[]),
    );
    step(
        "exchange",
        &|| {
            fs::write(e.join("x"), b"").unwrap();
            sys::rename2(e.join("x"), d.join("p"), libc::RENAME_EXCHANGE).unwrap()
        },
        &["b", "c3", "h", "l", "p"],
        Some(&["x"]),
    );
    // A rename over an entry keeps the names and changes an inode number.
    let before = relist(&held);
    sys::rename(d.join("c3"), d.join("b")).unwrap();
    let after = relist(&held);
    let ino_of = |v: &[(Vec<u8>, u64)], n: &[u8]| v.iter().find(|(m, _)| m == n).map(|x| x.1);
    assert_eq!(
        ino_of(&after, b"b"),
        ino_of(&before, b"c3"),
        "rename over: inode of b"
    );
    assert_eq!(ino_of(&after, b"c3"), None);
    assert_eq!(ino_of(&after, b"b"), Some(lstat(d.join("b")).ino()));
    // A directory moved to another parent: its own listing's ".." changes, though its mtime
    // does not (the adapter tells the kernel to drop that listing).
    sys::mkdir(d.join("sub"), 0o755).unwrap();
    let sub = sys::open(d.join("sub"), libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    let dotdot = |f: &fs::File| {
        assert_eq!(unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_SET) }, 0);
        let v = sys::getdents(f, 4096).unwrap();
        v.into_iter().find(|x| x.name == b"..").expect("no ..").ino
    };
    assert_eq!(dotdot(&sub), lstat(&d).ino());
    assert_eq!(sys::list_dir(d.join("sub")).len(), 2);
    sys::rename(d.join("sub"), e.join("sub")).unwrap();
    assert_eq!(dotdot(&sub), lstat(&e).ino(), "the open descriptor's ..");
    let fresh = sys::list_dir(e.join("sub"));
    let fresh_dotdot = fresh.iter().find(|x| x.name == b"..").unwrap().ino;
    assert_eq!(fresh_dotdot, lstat(&e).ino(), "a new open's ..");
    // And exchanged with a directory of another parent: both move.
    sys::mkdir(d.join("other"), 0o755).unwrap();
    let other = sys::open(d.join("other"), libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    assert_eq!(dotdot(&other), lstat(&d).ino());
    sys::rename2(e.join("sub"), d.join("other"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(
        dotdot(&sub),
        lstat(&d).ino(),
        "exchanged: the first one's .."
    );
    assert_eq!(
        dotdot(&other),
        lstat(&e).ino(),
        "exchanged: the second one's .."
    );
}

/// The kernel keeps symlink targets (FUSE_CACHE_SYMLINKS): a new link renamed over an old one
/// is a new inode, and a name unlinked and made again too; readlink shows the new target.
#[test]
fn cached_symlink_targets_follow_rename_over_and_recreate() {
    let fs = TestFs::new();
    let l = fs.join("l");
    sys::symlink("first/target", &l).unwrap();
    for _ in 0..2 {
        assert_eq!(
            fs::read_link(&l).unwrap(),
            std::path::Path::new("first/target")
        );
    }
    sys::symlink("second/target/longer", fs.join("l.new")).unwrap();
    assert_eq!(
        fs::read_link(fs.join("l.new")).unwrap(),
        std::path::Path::new("second/target/longer")
    );
    sys::rename(fs.join("l.new"), &l).unwrap();
    assert_eq!(
        fs::read_link(&l).unwrap(),
        std::path::Path::new("second/target/longer")
    );
    sys::unlink(&l).unwrap();
    sys::symlink("3", &l).unwrap();
    assert_eq!(fs::read_link(&l).unwrap(), std::path::Path::new("3"));
    // A symlink to a directory, followed: the path resolves through the new target.
    sys::mkdir(fs.join("d1"), 0o755).unwrap();
    sys::mkdir(fs.join("d2"), 0o755).unwrap();
    fs::write(fs.join("d2/only-in-d2"), b"").unwrap();
    sys::symlink("d1", fs.join("to")).unwrap();
    assert!(!fs.join("to/only-in-d2").exists());
    sys::symlink("d2", fs.join("to.new")).unwrap();
    sys::rename(fs.join("to.new"), fs.join("to")).unwrap();
    assert!(
        fs.join("to/only-in-d2").exists(),
        "the old target was followed"
    );
}

/// A directory removed while a descriptor holds it open (the kernel opens directories itself
/// when listings are kept): fstat and openat(".") still work on the descriptor, the listing
/// and new entries fail as on every Linux file system (the VFS refuses a dead directory), and
/// its inode is freed once the last descriptor closes (the checker at unmount sees it).
#[test]
fn an_open_unlinked_directory_stays_open() {
    an_open_unlinked_directory_stays_open_on(TestFs::new());
}

/// The same with `-o noopendir`: the kernel opens the directory without telling DualFS, so
/// its reference to the inode keeps the removed directory until its FORGET.
#[test]
fn an_open_unlinked_directory_stays_open_without_opendir() {
    an_open_unlinked_directory_stays_open_on(TestFs::builder().mount_opts("noopendir").mount());
}

fn an_open_unlinked_directory_stays_open_on(fs: TestFs) {
    let d = fs.join("d");
    sys::mkdir(&d, 0o755).unwrap();
    fs::write(d.join("f"), b"").unwrap();
    let held = sys::open(&d, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    assert_eq!(listed(&held), ["f"]);
    sys::unlink(d.join("f")).unwrap();
    sys::rmdir(&d).unwrap();
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let r = libc::fstat(held.as_raw_fd(), &mut st);
        assert_eq!(r, 0, "fstat: {}", std::io::Error::last_os_error());
        st
    };
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFDIR);
    assert_eq!(st.st_nlink, 0, "nlink of a removed directory");
    let dot = unsafe {
        libc::openat(
            held.as_raw_fd(),
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY,
        )
    };
    assert!(
        dot >= 0,
        "openat(.) of a removed directory: {}",
        std::io::Error::last_os_error()
    );
    unsafe { libc::close(dot) };
    assert_eq!(
        unsafe { libc::lseek(held.as_raw_fd(), 0, libc::SEEK_SET) },
        0
    );
    assert_eq!(sys::errno_of(sys::getdents(&held, 4096)), libc::ENOENT);
    let made = unsafe {
        libc::openat(
            held.as_raw_fd(),
            c"new".as_ptr(),
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
        )
    };
    assert_eq!(made, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOENT)
    );
    drop(held);
    assert!(!d.exists());
}
