//! The daemon dies; nothing it acknowledged is lost (docs/DESIGN.md, "Surviving the daemon").
//! Work is done through a real mount with no fsync and no sync, the daemon is killed with
//! SIGKILL the moment the work returns, and the next mount (roll-forward, then the intent
//! log's replay) must show exactly the tree the dead daemon showed: names, types, modes,
//! owners, sizes, mtimes, bytes, holes, hard links, extended attributes. Then the checker
//! finds the file system clean. DualFS only.

#[macro_use]
mod common;

use common::tree::{compare_trees, copy_tree, generate, CompareOpts, TreeSpec};
use common::*;
use std::path::Path;
use std::process::Command;

/// Every user.* attribute of every regular file under `root`, by relative path.
fn xattrs(root: &Path) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file() {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                for name in xattr_names(&p) {
                    let v = xattr_get(&p, &name);
                    out.push((rel.clone(), name, v));
                }
            }
        }
    }
    out.sort();
    out
}

fn xattr_names(p: &Path) -> Vec<String> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr {}", p.display());
    buf[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .filter(|s| s.starts_with("user."))
        .collect()
}

fn xattr_get(p: &Path, name: &str) -> Vec<u8> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 65536];
    let r = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "getxattr {} {name}", p.display());
    buf.truncate(r as usize);
    buf
}

fn xattr_set(p: &Path, name: &str, v: &[u8]) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let r = unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    assert_eq!(r, 0, "setxattr {} {name}", p.display());
}

/// Kill the daemon, mount again, and hold the mount to `expected` (a copy taken before the
/// kill) and `attrs` (its user attributes).
fn kill_and_compare(
    t: &mut TestFs,
    rel: &str,
    expected: &Path,
    attrs: &[(String, String, Vec<u8>)],
) {
    t.kill_daemon_hard();
    t.mount();
    let log = t.daemon_log();
    assert!(
        log.contains("intent log:") && log.contains("0 failed"),
        "the mount did not replay the intent log cleanly; its log:\n{log}"
    );
    let stats = compare_trees(expected, &t.join(rel), CompareOpts::default());
    assert!(stats.entries > 0, "nothing compared");
    assert_eq!(
        xattrs(&t.join(rel)),
        attrs,
        "extended attributes after the replay"
    );
    t.unmount(); // runs the checker
    t.mount();
}

#[test]
fn a_tree_copied_in_without_sync_survives_kill_9_of_the_daemon() {
    dualfs_only!();
    let mut t = TestFs::builder().sizes(256 << 20, 1 << 30).mount();
    // A real tree when the machine has one, as a user would copy it; a generated one too.
    let real = Path::new("/usr/include");
    if real.is_dir() {
        let mut out = Command::new("tar")
            .args(["--format=posix", "-C", "/usr", "-cf", "-", "include"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let st = Command::new("tar")
            .arg("-C")
            .arg(t.path())
            .args(["-xpf", "-"])
            .stdin(out.stdout.take().unwrap())
            .status()
            .unwrap();
        assert!(out.wait().unwrap().success(), "tar of /usr/include failed");
        assert!(st.success(), "untar into the mount failed");
        t.kill_daemon_hard();
        t.mount();
        let stats = compare_trees(real, &t.join("include"), CompareOpts::default());
        eprintln!("/usr/include after kill -9 and replay: {stats:?}");
        t.unmount();
        t.mount();
    }
    let src = t.scratch().join("src");
    std::fs::create_dir_all(&src).unwrap();
    generate(
        &src,
        &TreeSpec {
            seed: 27,
            files: 800,
            dirs: 60,
            hardlinks: 20,
            symlinks: 30,
            vary_attrs: true,
            ..TreeSpec::default()
        },
    );
    std::fs::create_dir(t.join("gen")).unwrap();
    copy_tree(&src, &t.join("gen"));
    for (i, e) in std::fs::read_dir(t.join("gen")).unwrap().enumerate() {
        let p = e.unwrap().path();
        if p.is_file() && !p.is_symlink() {
            xattr_set(&p, "user.dualfs.test", format!("value {i}").as_bytes());
        }
    }
    let attrs = xattrs(&t.join("gen"));
    kill_and_compare(&mut t, "gen", &src, &attrs);
    t.unmount();
}

/// Work of every kind on a copied tree (renames across directories, unlinks, hard links,
/// truncates up and down, appends, overwrites, holes punched and allocated, modes, owners,
/// attributes), killed the moment it returns, three rounds in the same file system.
#[test]
fn every_kind_of_change_survives_kill_9_of_the_daemon() {
    dualfs_only!();
    let mut t = TestFs::builder().sizes(256 << 20, 1 << 30).mount();
    let src = t.scratch().join("src");
    std::fs::create_dir_all(&src).unwrap();
    generate(
        &src,
        &TreeSpec {
            seed: 2727,
            files: 300,
            dirs: 20,
            ..TreeSpec::default()
        },
    );
    std::fs::create_dir(t.join("w")).unwrap();
    copy_tree(&src, &t.join("w"));
    for round in 0..3u64 {
        let root = t.join("w");
        let mut files: Vec<std::path::PathBuf> = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let m = std::fs::symlink_metadata(&p).unwrap();
                if m.is_dir() {
                    stack.push(p);
                } else if m.is_file() {
                    files.push(p);
                }
            }
        }
        files.sort();
        let mut rng = ByteStream::new(round + 1);
        let moved = root.join(format!("moved-{round}"));
        std::fs::create_dir(&moved).unwrap();
        for (i, f) in files.iter().enumerate() {
            use std::io::{Seek, SeekFrom, Write};
            use std::os::unix::fs::PermissionsExt;
            match rng.next_u64() % 10 {
                0 => std::fs::remove_file(f).unwrap(),
                1 => std::fs::rename(f, moved.join(format!("r{i}"))).unwrap(),
                2 => std::fs::hard_link(f, moved.join(format!("l{i}"))).unwrap(),
                3 => {
                    let len = std::fs::metadata(f).unwrap().len();
                    let new = rng.next_u64() % (2 * len + 4096);
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(f)
                        .unwrap()
                        .set_len(new)
                        .unwrap();
                }
                4 => {
                    let mut h = std::fs::OpenOptions::new().append(true).open(f).unwrap();
                    h.write_all(&vec![round as u8 + 1; 1 + (rng.next_u64() % 9000) as usize])
                        .unwrap();
                }
                5 => {
                    let mut h = std::fs::OpenOptions::new().write(true).open(f).unwrap();
                    h.seek(SeekFrom::Start(rng.next_u64() % 20_000)).unwrap();
                    h.write_all(b"overwritten in place").unwrap();
                }
                6 => {
                    let h = std::fs::OpenOptions::new().write(true).open(f).unwrap();
                    use std::os::fd::AsRawFd;
                    let mode = if rng.next_u64() % 2 == 0 {
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                    } else {
                        0
                    };
                    let off = (rng.next_u64() % 8) as i64 * 4096;
                    let r = unsafe { libc::fallocate(h.as_raw_fd(), mode, off, 8192) };
                    assert_eq!(r, 0, "fallocate {}", f.display());
                }
                7 => std::fs::set_permissions(
                    f,
                    std::fs::Permissions::from_mode(0o600 + (i as u32 % 0o100)),
                )
                .unwrap(),
                8 => {
                    let c = std::ffi::CString::new(f.as_os_str().as_encoded_bytes()).unwrap();
                    assert_eq!(
                        unsafe { libc::lchown(c.as_ptr(), 1000 + i as u32 % 7, 100) },
                        0
                    );
                }
                _ => xattr_set(f, "user.round", format!("{round}/{i}").as_bytes()),
            }
        }
        std::fs::create_dir(root.join(format!("new-{round}"))).unwrap();
        std::os::unix::fs::symlink("../moved", root.join(format!("new-{round}/link"))).unwrap();
        let expected = t.scratch().join(format!("expected-{round}"));
        std::fs::create_dir_all(&expected).unwrap();
        copy_tree(&root, &expected);
        let attrs = xattrs(&root);
        kill_and_compare(&mut t, "w", &expected, &attrs);
    }
    t.unmount();
}
