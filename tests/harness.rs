//! Self-tests of the harness: the tree comparer must see differences, the copier must keep
//! everything, `as_user` must really switch credentials. No mount needed.

#[macro_use]
mod common;

use common::tree::{self, CompareOpts, TreeSpec};
use common::user::{as_user, ALICE};
use common::*;
use std::fs;
use std::os::unix::fs::MetadataExt;

fn tmp() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("dualfs-harness-")
        .tempdir()
        .unwrap();
    sys::chmod(d.path(), 0o755).unwrap();
    d
}

fn small_spec(seed: u64) -> TreeSpec {
    TreeSpec {
        seed,
        dirs: 20,
        files: 150,
        symlinks: 30,
        hardlinks: 15,
        fifos: 2,
        ..TreeSpec::default()
    }
}

#[test]
fn generator_is_deterministic_and_copier_keeps_everything() {
    let t = tmp();
    let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
    for d in [&a, &b, &c] {
        fs::create_dir(d).unwrap();
    }
    let sa = tree::generate(&a, &small_spec(7));
    let sb = tree::generate(&b, &small_spec(7));
    assert_eq!(sa.bytes, sb.bytes);
    assert!(sa.files == 150 && sa.symlinks == 30 && sa.hardlinks == 15);
    tree::compare_trees(&a, &b, CompareOpts::default());
    tree::copy_tree(&a, &c);
    let st = tree::compare_trees(&a, &c, CompareOpts::default());
    assert!(st.entries >= 200, "compared only {} entries", st.entries);
    assert_eq!(st.bytes, sa.bytes, "every byte of every file compared once");
}

#[test]
fn comparer_reports_each_kind_of_difference() {
    let t = tmp();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    let mk = |root: &std::path::Path| {
        fs::write(root.join("f"), b"hello").unwrap();
        fs::write(root.join("g"), b"x").unwrap();
        fs::write(root.join("h"), b"y").unwrap();
        sys::symlink("target", root.join("l")).unwrap();
        fs::create_dir(root.join("d")).unwrap();
        sys::utimens(
            root.join("g"),
            SetTs::At(1000, 5),
            SetTs::At(2000, 6),
            false,
        )
        .unwrap();
    };
    mk(&a);
    mk(&b);
    fs::hard_link(a.join("f"), a.join("f2")).unwrap();
    fs::hard_link(b.join("f"), b.join("f2")).unwrap();
    let opts = CompareOpts {
        mtime: false,
        ..CompareOpts::default()
    };
    assert!(tree::tree_diffs(&a, &b, opts).is_empty());

    // One change of each kind on the actual side.
    fs::write(b.join("f"), b"hellO").unwrap(); // content (and the hard link with it)
    sys::chmod(b.join("h"), 0o600).unwrap(); // mode
    fs::remove_file(b.join("l")).unwrap();
    sys::symlink("targex", b.join("l")).unwrap(); // symlink target
    fs::write(b.join("extra"), b"").unwrap(); // unexpected name
    fs::remove_dir(b.join("d")).unwrap(); // missing name
    sys::utimens(b.join("g"), SetTs::At(1000, 5), SetTs::At(2000, 7), false).unwrap(); // mtime
    sys::chown(b.join("g"), 1, 1).unwrap(); // owner
    let d = tree::tree_diffs(&a, &b, CompareOpts::default());
    let has = |needle: &str, name: &str| d.iter().any(|l| l.contains(needle) && l.contains(name));
    assert!(has("content differs at byte 4", "\"f\""), "{d:#?}");
    assert!(has("mode 0644 expected, got 0600", "\"h\""), "{d:#?}");
    assert!(has("symlink target differs", "\"l\""), "{d:#?}");
    assert!(has("unexpected in actual", "\"extra\""), "{d:#?}");
    assert!(has("missing in actual", "\"d\""), "{d:#?}");
    assert!(
        has("mtime (2000, 6) expected, got (2000, 7)", "\"g\""),
        "{d:#?}"
    );
    assert!(has("owner 0:0 expected, got 1:1", "\"g\""), "{d:#?}");

    // Hard-link structure: same content, but the second name is a separate inode.
    fs::write(b.join("f"), b"hello").unwrap();
    fs::remove_file(b.join("f2")).unwrap();
    fs::write(b.join("f2"), b"hello").unwrap();
    let d = tree::tree_diffs(&a, &b, CompareOpts::default());
    assert!(
        d.iter().any(|l| l.contains("nlink 2 expected, got 1")),
        "{d:#?}"
    );
    assert!(
        d.iter().any(|l| l.contains("hard link structure differs")),
        "{d:#?}"
    );
}

#[test]
fn comparer_samples_holes_of_huge_sparse_files() {
    let t = tmp();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    for root in [&a, &b] {
        let f = fs::File::create(root.join("s")).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"tail", 3 << 30).unwrap();
    }
    let opts = CompareOpts {
        mtime: false,
        ..CompareOpts::default()
    };
    let st = tree::compare_trees(&a, &b, opts);
    assert!(
        st.bytes < 16 << 20,
        "read {} bytes of a sparse 3 GiB file",
        st.bytes
    );
    // Data at either edge of the hole, or in its middle, on the actual side is found.
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new()
        .write(true)
        .open(b.join("s"))
        .unwrap();
    for at in [4096u64, (3 << 30) - 1, 4096 + ((3 << 30) - 4096) / 2] {
        f.write_all_at(b"!", at).unwrap();
        let d = tree::tree_diffs(&a, &b, opts);
        assert!(
            d.iter()
                .any(|l| l.contains(&format!("content differs at byte {at}"))),
            "byte at {at}: {d:#?}"
        );
        f.write_all_at(b"\0", at).unwrap();
    }
    assert!(tree::tree_diffs(&a, &b, opts).is_empty());
}

#[test]
fn as_user_switches_credentials_of_its_thread_only() {
    let t = tmp();
    let secret = t.path().join("secret");
    fs::write(&secret, b"s").unwrap();
    sys::chmod(&secret, 0o600).unwrap();
    let open = t.path().join("open");
    fs::create_dir(&open).unwrap();
    sys::chmod(&open, 0o777).unwrap();
    let (uid, gid) = ALICE;
    let (r, owner) = as_user(uid, gid, || {
        let r = fs::read(&secret).map_err(|e| e.raw_os_error());
        fs::write(open.join("mine"), b"m").unwrap();
        let m = fs::metadata(open.join("mine")).unwrap();
        (r, (m.uid(), m.gid()))
    });
    assert_eq!(
        r,
        Err(Some(libc::EACCES)),
        "a 0600 root file is readable by uid {uid}"
    );
    assert_eq!(owner, (uid, gid));
    // This thread is still root.
    assert_eq!(unsafe { libc::geteuid() }, 0);
    fs::read(&secret).unwrap();
    assert_errno!(
        as_user(uid, gid, || sys::chown(&secret, uid, gid)),
        libc::EPERM
    );
}

#[test]
fn mount_table_parsing() {
    // The root is always mounted; a fresh directory is not.
    assert!(is_mounted(std::path::Path::new("/")));
    let t = tmp();
    assert!(!is_mounted(t.path()));
}
