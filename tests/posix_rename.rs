//! rename(2) and renameat2(2): every replacement rule, link-count and ".." fix-ups, the
//! NOREPLACE and EXCHANGE flags, and a seeded shuffle checked against a model.

#[macro_use]
mod common;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn ino(p: impl AsRef<Path>) -> u64 {
    lstat(p).ino()
}

/// ".." of `dir` is `parent`: through lookup and through readdir.
fn assert_dotdot(dir: &Path, parent: &Path) {
    assert_eq!(
        ino(dir.join("..")),
        ino(parent),
        "stat({}/..)",
        dir.display()
    );
    let dd = list_dir(dir)
        .into_iter()
        .find(|e| e.name == b"..")
        .expect("no .. entry");
    assert_eq!(dd.ino, ino(parent), "readdir .. of {}", dir.display());
}

#[test]
fn rename_file_within_and_across_directories() {
    let mut fs = TestFs::new();
    fs::write(fs.join("a"), b"A").unwrap();
    let i = ino(fs.join("a"));
    rename(fs.join("a"), fs.join("b")).unwrap();
    assert_errno!(fs::symlink_metadata(fs.join("a")), libc::ENOENT);
    assert_eq!(
        (ino(fs.join("b")), fs::read(fs.join("b")).unwrap()),
        (i, b"A".to_vec())
    );
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    rename(fs.join("b"), fs.join("d/c")).unwrap();
    assert_eq!(ino(fs.join("d/c")), i);
    assert_eq!(names(fs.join("d")), vec![b"c".to_vec()]);
    assert!(!names(fs.path()).contains(&b"b".to_vec()));
    assert_eq!(lstat(fs.join("d/c")).nlink(), 1);
    assert_errno!(rename(fs.join("missing"), fs.join("x")), libc::ENOENT);
    assert_errno!(rename(fs.join("d/c"), fs.join("nodir/x")), libc::ENOENT);
    fs.remount();
    assert_eq!(fs::read(fs.join("d/c")).unwrap(), b"A");
    assert_eq!(ino(fs.join("d/c")), i);
}

#[test]
fn rename_over_existing_file_drops_the_replaced_inode() {
    let mut fs = TestFs::new();
    fs::write(fs.join("src"), b"new content").unwrap();
    fs::write(fs.join("dst"), b"old").unwrap();
    let src_ino = ino(fs.join("src"));
    // Keep the victim open to watch its link count go to zero.
    let victim = fs::File::open(fs.join("dst")).unwrap();
    rename(fs.join("src"), fs.join("dst")).unwrap();
    assert_eq!(ino(fs.join("dst")), src_ino);
    assert_eq!(fs::read(fs.join("dst")).unwrap(), b"new content");
    assert_errno!(fs::symlink_metadata(fs.join("src")), libc::ENOENT);
    assert_eq!(
        victim.metadata().unwrap().nlink(),
        0,
        "replaced inode must be unlinked"
    );
    drop(victim);

    // Over a name of a hard-linked file: the other name keeps it, with nlink 1.
    fs::write(fs.join("x"), b"x").unwrap();
    fs::write(fs.join("y"), b"y").unwrap();
    sys::link(fs.join("y"), fs.join("y2")).unwrap();
    rename(fs.join("x"), fs.join("y")).unwrap();
    assert_eq!(fs::read(fs.join("y")).unwrap(), b"x");
    assert_eq!(fs::read(fs.join("y2")).unwrap(), b"y");
    assert_eq!(lstat(fs.join("y2")).nlink(), 1);
    // A symlink over a file and a file over a symlink.
    sys::symlink("y2", fs.join("s")).unwrap();
    rename(fs.join("s"), fs.join("y")).unwrap();
    assert!(lstat(fs.join("y")).file_type().is_symlink());
    fs::write(fs.join("z"), b"z").unwrap();
    rename(fs.join("z"), fs.join("y")).unwrap();
    assert!(lstat(fs.join("y")).is_file());
    let mut n = names(fs.path());
    n.retain(|n| n != b"lost+found");
    assert_eq!(n, vec![b"dst".to_vec(), b"y".to_vec(), b"y2".to_vec()]);
    fs.remount();
    assert_eq!(fs::read(fs.join("y")).unwrap(), b"z");
    assert_eq!(fs::read(fs.join("dst")).unwrap(), b"new content");
}

#[test]
fn rename_directories_over_directories() {
    let mut fs = TestFs::new();
    let root_nlink = lstat(fs.path()).nlink();
    sys::mkdir(fs.join("full"), 0o755).unwrap();
    fs::write(fs.join("full/f"), b"f").unwrap();
    sys::mkdir(fs.join("full/sub"), 0o755).unwrap();
    sys::mkdir(fs.join("empty"), 0o755).unwrap();
    sys::mkdir(fs.join("other"), 0o755).unwrap();
    fs::write(fs.join("other/g"), b"g").unwrap();
    assert_eq!(lstat(fs.path()).nlink(), root_nlink + 3);

    // Over a non-empty directory: ENOTEMPTY, nothing changes.
    assert_errno!(rename(fs.join("full"), fs.join("other")), libc::ENOTEMPTY);
    assert_eq!(fs::read(fs.join("other/g")).unwrap(), b"g");
    assert_eq!(fs::read(fs.join("full/f")).unwrap(), b"f");
    // Over an empty directory: replaced; the parent loses one link.
    let i = ino(fs.join("full"));
    rename(fs.join("full"), fs.join("empty")).unwrap();
    assert_eq!(ino(fs.join("empty")), i);
    assert_eq!(fs::read(fs.join("empty/f")).unwrap(), b"f");
    assert_errno!(fs::symlink_metadata(fs.join("full")), libc::ENOENT);
    assert_eq!(lstat(fs.path()).nlink(), root_nlink + 2);
    assert_eq!(lstat(fs.join("empty")).nlink(), 3);
    // Type mismatches.
    fs::write(fs.join("file"), b"").unwrap();
    assert_errno!(rename(fs.join("file"), fs.join("empty")), libc::EISDIR);
    assert_errno!(rename(fs.join("empty"), fs.join("file")), libc::ENOTDIR);
    assert!(lstat(fs.join("file")).is_file() && lstat(fs.join("empty")).is_dir());
    fs.remount();
    assert_eq!(lstat(fs.path()).nlink(), root_nlink + 2);
    assert_eq!(fs::read(fs.join("empty/f")).unwrap(), b"f");
}

#[test]
fn rename_directory_across_parents_fixes_nlink_and_dotdot() {
    let mut fs = TestFs::new();
    let (p1, p2) = (fs.join("p1"), fs.join("p2"));
    sys::mkdir(&p1, 0o755).unwrap();
    sys::mkdir(&p2, 0o755).unwrap();
    sys::mkdir(p1.join("d"), 0o755).unwrap();
    sys::mkdir(p1.join("d/inner"), 0o755).unwrap();
    fs::write(p1.join("d/inner/f"), b"deep").unwrap();
    assert_eq!((lstat(&p1).nlink(), lstat(&p2).nlink()), (3, 2));
    assert_dotdot(&p1.join("d"), &p1);

    let before = lstat(p1.join("d"));
    rename(p1.join("d"), p2.join("moved")).unwrap();
    let d = p2.join("moved");
    assert_eq!((lstat(&p1).nlink(), lstat(&p2).nlink()), (2, 3));
    assert_eq!(lstat(&d).ino(), before.ino());
    assert_eq!(
        lstat(&d).nlink(),
        3,
        "the moved directory keeps its own count"
    );
    assert_dotdot(&d, &p2);
    assert_dotdot(&d.join("inner"), &d);
    assert_eq!(fs::read(d.join("inner/f")).unwrap(), b"deep");
    // Going up works through the new parent (a stale ".." would land in p1).
    fs::write(d.join("../marker"), b"m").unwrap();
    assert!(p2.join("marker").exists() && !p1.join("marker").exists());

    fs.remount();
    assert_eq!((lstat(&p1).nlink(), lstat(&p2).nlink()), (2, 3));
    assert_dotdot(&d, &p2);
    assert_eq!(fs::read(d.join("inner/f")).unwrap(), b"deep");
}

#[test]
fn rename_noreplace() {
    let fs = TestFs::new();
    fs::write(fs.join("a"), b"a").unwrap();
    fs::write(fs.join("b"), b"b").unwrap();
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    assert_errno!(
        rename2(fs.join("a"), fs.join("b"), RENAME_NOREPLACE),
        libc::EEXIST
    );
    assert_errno!(
        rename2(fs.join("a"), fs.join("d"), RENAME_NOREPLACE),
        libc::EEXIST
    );
    assert_eq!(fs::read(fs.join("a")).unwrap(), b"a");
    assert_eq!(fs::read(fs.join("b")).unwrap(), b"b");
    rename2(fs.join("a"), fs.join("c"), RENAME_NOREPLACE).unwrap();
    assert_eq!(fs::read(fs.join("c")).unwrap(), b"a");
    assert_errno!(fs::symlink_metadata(fs.join("a")), libc::ENOENT);
}

#[test]
fn rename_exchange_files() {
    let mut fs = TestFs::new();
    fs::write(fs.join("a"), b"AAA").unwrap();
    fs::write(fs.join("b"), b"B").unwrap();
    let (ia, ib) = (ino(fs.join("a")), ino(fs.join("b")));
    rename2(fs.join("a"), fs.join("b"), RENAME_EXCHANGE).unwrap();
    assert_eq!((ino(fs.join("a")), ino(fs.join("b"))), (ib, ia));
    assert_eq!(fs::read(fs.join("a")).unwrap(), b"B");
    assert_eq!(fs::read(fs.join("b")).unwrap(), b"AAA");
    assert_errno!(
        rename2(fs.join("a"), fs.join("missing"), RENAME_EXCHANGE),
        libc::ENOENT
    );
    assert_errno!(
        rename2(
            fs.join("a"),
            fs.join("b"),
            RENAME_EXCHANGE | RENAME_NOREPLACE
        ),
        libc::EINVAL
    );
    fs.remount();
    assert_eq!(fs::read(fs.join("a")).unwrap(), b"B");
    assert_eq!(fs::read(fs.join("b")).unwrap(), b"AAA");
}

#[test]
fn rename_exchange_file_and_directory_across_parents() {
    let mut fs = TestFs::new();
    let (a, b) = (fs.join("A"), fs.join("B"));
    sys::mkdir(&a, 0o755).unwrap();
    sys::mkdir(&b, 0o755).unwrap();
    fs::write(a.join("f"), b"file").unwrap();
    sys::mkdir(b.join("d"), 0o755).unwrap();
    fs::write(b.join("d/inside"), b"in").unwrap();
    let (fi, di) = (ino(a.join("f")), ino(b.join("d")));
    assert_eq!((lstat(&a).nlink(), lstat(&b).nlink()), (2, 3));

    rename2(a.join("f"), b.join("d"), RENAME_EXCHANGE).unwrap();
    let check = |_fs: &TestFs| {
        // A/f is now the directory, B/d the file.
        assert_eq!(ino(a.join("f")), di);
        assert!(lstat(a.join("f")).is_dir());
        assert_eq!(ino(b.join("d")), fi);
        assert_eq!(fs::read(b.join("d")).unwrap(), b"file");
        assert_eq!(fs::read(a.join("f/inside")).unwrap(), b"in");
        // Link counts moved with the directory, and its ".." follows it.
        assert_eq!((lstat(&a).nlink(), lstat(&b).nlink()), (3, 2));
        assert_dotdot(&a.join("f"), &a);
    };
    check(&fs);
    fs.remount();
    check(&fs);

    // Two directories across parents: both ".." swap.
    sys::mkdir(b.join("e"), 0o755).unwrap();
    rename2(a.join("f"), b.join("e"), RENAME_EXCHANGE).unwrap();
    assert_dotdot(&a.join("f"), &a);
    assert_dotdot(&b.join("e"), &b);
    assert_eq!(fs::read(b.join("e/inside")).unwrap(), b"in");
    assert_eq!((lstat(&a).nlink(), lstat(&b).nlink()), (3, 3));
}

#[test]
fn rename_into_own_subtree_is_einval() {
    let fs = TestFs::new();
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    sys::mkdir(fs.join("d/sub"), 0o755).unwrap();
    assert_errno!(rename(fs.join("d"), fs.join("d/x")), libc::EINVAL);
    assert_errno!(rename(fs.join("d"), fs.join("d/sub/x")), libc::EINVAL);
    assert_errno!(
        rename2(fs.join("d"), fs.join("d/sub"), RENAME_EXCHANGE),
        libc::EINVAL
    );
    assert!(lstat(fs.join("d/sub")).is_dir());
    // Renaming "." or ".." is refused too.
    assert_errno!(rename(fs.join("d/."), fs.join("x")), libc::EBUSY);
}

#[test]
fn rename_to_itself_is_a_no_op() {
    let mut fs = TestFs::new();
    fs::write(fs.join("a"), b"a").unwrap();
    sys::link(fs.join("a"), fs.join("a2")).unwrap();
    sys::mkdir(fs.join("d"), 0o755).unwrap();
    let i = ino(fs.join("a"));
    rename(fs.join("a"), fs.join("a")).unwrap();
    rename(fs.join("d"), fs.join("d")).unwrap();
    // Two names of one inode: POSIX says do nothing, so both names stay.
    rename(fs.join("a"), fs.join("a2")).unwrap();
    assert_eq!((ino(fs.join("a")), ino(fs.join("a2"))), (i, i));
    assert_eq!(lstat(fs.join("a")).nlink(), 2);
    assert_eq!(fs::read(fs.join("a")).unwrap(), b"a");
    assert!(lstat(fs.join("d")).is_dir());
    fs.remount();
    assert_eq!(lstat(fs.join("a2")).nlink(), 2);
}

#[test]
fn rename_shuffle_matches_model() {
    // Seeded renames among files and directories (over existing files, across directories,
    // with NOREPLACE and EXCHANGE), checked against a model after each 100 steps and after a
    // remount.
    let mut fs = TestFs::new();
    let mut rng = StdRng::seed_from_u64(77);
    const DIRS: usize = 6;
    for d in 0..DIRS {
        sys::mkdir(fs.join(format!("d{d}")), 0o755).unwrap();
    }
    // model: path -> content
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    for k in 0..300 {
        let p = format!("d{}/f{k}", k % DIRS);
        fs::write(fs.join(&p), p.as_bytes()).unwrap();
        model.insert(p.clone(), p);
    }
    let mut fresh = 0;
    for step in 0..1500 {
        let keys: Vec<String> = model.keys().cloned().collect();
        let src = keys[rng.gen_range(0..keys.len())].clone();
        let dst = if rng.gen_bool(0.4) {
            keys[rng.gen_range(0..keys.len())].clone()
        } else {
            fresh += 1;
            format!("d{}/n{fresh}", rng.gen_range(0..DIRS))
        };
        let flags = match rng.gen_range(0..10) {
            0 => RENAME_NOREPLACE,
            1 => RENAME_EXCHANGE,
            _ => 0,
        };
        let r = rename2(fs.join(&src), fs.join(&dst), flags);
        let exists = model.contains_key(&dst);
        match flags {
            RENAME_NOREPLACE if exists => assert_errno!(r, libc::EEXIST),
            RENAME_EXCHANGE if !exists => assert_errno!(r, libc::ENOENT),
            RENAME_EXCHANGE => {
                r.unwrap();
                let (a, b) = (model[&src].clone(), model[&dst].clone());
                model.insert(src.clone(), b);
                model.insert(dst.clone(), a);
            }
            _ => {
                r.unwrap_or_else(|e| panic!("step {step}: rename {src} -> {dst}: {e}"));
                if src != dst {
                    let c = model.remove(&src).unwrap();
                    model.insert(dst.clone(), c);
                }
            }
        }
        if step % 100 == 99 {
            verify(&fs, &model, DIRS);
        }
    }
    fs.remount();
    verify(&fs, &model, DIRS);
}

fn verify(fs: &TestFs, model: &BTreeMap<String, String>, dirs: usize) {
    let mut listed = Vec::new();
    for d in 0..dirs {
        for n in names(fs.join(format!("d{d}"))) {
            listed.push(format!("d{d}/{}", String::from_utf8(n).unwrap()));
        }
    }
    listed.sort();
    let want: Vec<_> = model.keys().cloned().collect();
    assert_eq!(listed, want, "names after renames");
    for (p, c) in model {
        assert_eq!(
            fs::read_to_string(fs.join(p)).unwrap(),
            *c,
            "content of {p}"
        );
    }
}
