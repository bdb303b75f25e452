//! Extended attributes through a real mount: every call and error case as root and as other
//! users, the namespaces' rules, DualFS's limits, attributes (and ACLs) across remounts and
//! kill -9 after fsync, a freed inode's attributes never showing on its successor, orphans'
//! attributes freed at their last close and by the mount after a crash, and `rsync -aHAX` of
//! a tree with attributes, ACLs and hard links in and out again.

#[macro_use]
mod common;

use common::sys::{getxattr, getxattr_sized, listxattr, listxattr_sized, removexattr, setxattr};
use common::user::{as_user, ALICE, BOB};
use common::*;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

const CREATE: i32 = libc::XATTR_CREATE;
const REPLACE: i32 = libc::XATTR_REPLACE;

fn set(p: &Path, name: &str, value: &[u8]) {
    setxattr(p, name, value, 0, false).unwrap_or_else(|e| panic!("set {name}: {e}"));
}

/// `setfacl -m spec p`, which must succeed.
fn setfacl_m(spec: &str, p: &Path) {
    let ok = Command::new("setfacl")
        .args(["-m", spec])
        .arg(p)
        .status()
        .unwrap();
    assert!(ok.success(), "setfacl -m {spec} {}", p.display());
}

fn names(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

#[test]
fn get_set_list_remove_and_their_errors() {
    let fs = TestFs::new();
    let f = fs.join("f");
    fs::write(&f, b"data").unwrap();
    assert_errno!(getxattr(&f, "user.a"), libc::ENODATA);
    assert_eq!(listxattr(&f).unwrap(), Vec::<String>::new());

    set(&f, "user.a", b"hello");
    assert_eq!(getxattr(&f, "user.a").unwrap(), b"hello");
    // The size probe, a buffer too small, one just right.
    assert_eq!(getxattr_sized(&f, "user.a", 0, false).unwrap().0, 5);
    assert_errno!(getxattr_sized(&f, "user.a", 4, false), libc::ERANGE);
    assert_eq!(getxattr_sized(&f, "user.a", 5, false).unwrap().1, b"hello");
    assert_eq!(listxattr_sized(&f, 0, false).unwrap().0, "user.a\0".len());
    assert_errno!(listxattr_sized(&f, 3, false), libc::ERANGE);

    // XATTR_CREATE and XATTR_REPLACE.
    assert_errno!(setxattr(&f, "user.a", b"x", CREATE, false), libc::EEXIST);
    assert_errno!(setxattr(&f, "user.b", b"x", REPLACE, false), libc::ENODATA);
    setxattr(&f, "user.a", b"world", REPLACE, false).unwrap();
    setxattr(&f, "user.b", b"", CREATE, false).unwrap();
    assert_eq!(getxattr(&f, "user.a").unwrap(), b"world");
    assert_eq!(getxattr(&f, "user.b").unwrap(), b"");
    assert_eq!(listxattr(&f).unwrap(), names(&["user.a", "user.b"]));

    removexattr(&f, "user.a", false).unwrap();
    assert_errno!(removexattr(&f, "user.a", false), libc::ENODATA);
    assert_errno!(getxattr(&f, "user.a"), libc::ENODATA);
    assert_eq!(listxattr(&f).unwrap(), names(&["user.b"]));

    // Names of up to 255 bytes, values of up to 64 KiB.
    let long = format!("user.{}", "n".repeat(250));
    set(&f, &long, b"v");
    assert_eq!(getxattr(&f, &long).unwrap(), b"v");
    assert_errno!(
        setxattr(&f, &format!("{long}x"), b"v", 0, false),
        libc::ERANGE
    );
    assert_errno!(setxattr(&f, "", b"v", 0, false), libc::ERANGE);
    let big = value(65536, 3);
    set(&f, "user.big", &big);
    assert_eq!(getxattr(&f, "user.big").unwrap(), big);
    assert_errno!(
        setxattr(&f, "user.big", &value(65537, 1), 0, false),
        libc::E2BIG
    );
    assert_eq!(
        getxattr(&f, "user.big").unwrap(),
        big,
        "a refused set leaves it"
    );
    // Replacing a large value by a small one and back.
    set(&f, "user.big", b"small now");
    assert_eq!(getxattr(&f, "user.big").unwrap(), b"small now");
    set(&f, "user.big", &big);
    assert_eq!(getxattr(&f, "user.big").unwrap(), big);

    // Namespaces: trusted and security work for root, unknown ones are refused.
    set(&f, "trusted.gfid", &[1; 16]);
    set(&f, "security.test", b"label");
    assert_eq!(getxattr(&f, "trusted.gfid").unwrap(), [1; 16]);
    assert_errno!(setxattr(&f, "foo.bar", b"v", 0, false), libc::EOPNOTSUPP);
    assert_errno!(
        setxattr(&f, "system.nope", b"v", 0, false),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        listxattr(&f).unwrap(),
        names(&["security.test", "trusted.gfid", "user.b", "user.big", &long])
    );

    // The attribute change is a change of the inode: ctime moves.
    let before = sys::ctime(&sys::stat(&f));
    std::thread::sleep(std::time::Duration::from_millis(20));
    set(&f, "user.c", b"1");
    assert!(
        sys::ctime(&sys::stat(&f)) > before,
        "setxattr updates ctime"
    );

    // Directories take user attributes; symlinks and special files do not (Linux's rule),
    // but they take security ones.
    let d = fs.join("d");
    fs::create_dir(&d).unwrap();
    set(&d, "user.dir", b"1");
    assert_eq!(getxattr(&d, "user.dir").unwrap(), b"1");
    let l = fs.join("l");
    sys::symlink("f", &l).unwrap();
    assert_errno!(setxattr(&l, "user.x", b"1", 0, true), libc::EPERM);
    assert_errno!(getxattr_sized(&l, "user.x", 0, true), libc::ENODATA);
    setxattr(&l, "security.test", b"link", 0, true).unwrap();
    assert_eq!(
        getxattr_sized(&l, "security.test", 16, true).unwrap().1,
        b"link"
    );
    assert_eq!(
        getxattr(&l, "user.big").unwrap(),
        big,
        "through the link: the file's"
    );
    let p = fs.join("fifo");
    sys::mkfifo(&p, 0o644).unwrap();
    assert_errno!(setxattr(&p, "user.x", b"1", 0, false), libc::EPERM);
    setxattr(&p, "trusted.x", b"1", 0, false).unwrap();
}

#[test]
fn per_inode_limits_are_enospc() {
    dualfs_only!();
    let fs = TestFs::new();
    let f = fs.join("f");
    fs::write(&f, b"").unwrap();
    // Names and values together are at most 256 KiB: three largest values fit, a fourth not.
    for i in 0..3 {
        set(&f, &format!("user.v{i}"), &value(65536, i));
    }
    assert_errno!(
        setxattr(&f, "user.v3", &value(65536, 3), 0, false),
        libc::ENOSPC
    );
    // Replacing one counts its old size out.
    set(&f, "user.v2", &value(65000, 9));
    assert_eq!(getxattr(&f, "user.v2").unwrap(), value(65000, 9));
    // The names, each with its NUL, are at most 64 KiB: a listing always fits.
    let g = fs.join("g");
    fs::write(&g, b"").unwrap();
    let mut n = 0;
    let err = loop {
        let name = format!("user.{n:0>250}");
        match setxattr(&g, &name, b"", 0, false) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    assert_eq!(n, 65536 / 256);
    let (len, listed) = listxattr_sized(&g, 65536, false).unwrap();
    assert_eq!((len, listed.len()), (n * 256, n));
}

#[test]
fn other_users_trusted_and_security_namespaces() {
    let fs = TestFs::new();
    let (au, ag) = ALICE;
    let dir = fs.join("dir");
    fs::create_dir(&dir).unwrap();
    sys::chmod(&dir, 0o777).unwrap();
    let f = dir.join("alice");
    as_user(au, ag, || {
        fs::write(&f, b"x").unwrap();
        sys::chmod(&f, 0o644).unwrap();
        set(&f, "user.mine", b"1");
        assert_eq!(getxattr(&f, "user.mine").unwrap(), b"1");
        // trusted.* is for CAP_SYS_ADMIN; writing security.* too.
        assert_errno!(setxattr(&f, "trusted.t", b"1", 0, false), libc::EPERM);
        assert_errno!(setxattr(&f, "security.s", b"1", 0, false), libc::EPERM);
    });
    // Root labels the file; Alice reads security.* but never sees trusted.*.
    set(&f, "trusted.gfid", &[7; 16]);
    set(&f, "security.s", b"label");
    as_user(au, ag, || {
        assert_errno!(getxattr(&f, "trusted.gfid"), libc::ENODATA);
        assert_eq!(getxattr(&f, "security.s").unwrap(), b"label");
        assert_eq!(listxattr(&f).unwrap(), names(&["security.s", "user.mine"]));
        assert_errno!(removexattr(&f, "trusted.gfid", false), libc::EPERM);
    });
    assert_eq!(
        listxattr(&f).unwrap(),
        names(&["security.s", "trusted.gfid", "user.mine"]),
        "root lists everything"
    );
    // Bob may read Alice's user attributes (he may read the file), not change them.
    let (bu, bg) = BOB;
    as_user(bu, bg, || {
        assert_eq!(getxattr(&f, "user.mine").unwrap(), b"1");
        assert_errno!(setxattr(&f, "user.bob", b"1", 0, false), libc::EACCES);
        assert_errno!(removexattr(&f, "user.mine", false), libc::EACCES);
    });
    as_user(au, ag, || sys::chmod(&f, 0o600)).unwrap();
    as_user(bu, bg, || {
        assert_errno!(getxattr(&f, "user.mine"), libc::EACCES);
        // Listing names needs no permission on the file (as on Linux).
        assert_eq!(listxattr(&f).unwrap(), names(&["security.s", "user.mine"]));
    });
}

#[test]
fn attributes_survive_remounts_and_go_with_their_inode() {
    let mut fs = TestFs::new();
    let d = fs.join("d");
    fs::create_dir(&d).unwrap();
    let file = |i: usize| d.join(format!("f{i:03}"));
    for i in 0..300 {
        fs::write(file(i), b"x").unwrap();
        set(&file(i), "user.small", format!("{i}").as_bytes());
        set(&file(i), "trusted.gfid", &(i as u128).to_le_bytes());
        if i % 10 == 0 {
            set(&file(i), "user.large", &value(5000 + i, i as u8));
        }
    }
    set(&d, "user.dir", b"d");
    fs.remount();
    let check = |i: usize| {
        assert_eq!(
            getxattr(file(i), "user.small").unwrap(),
            format!("{i}").as_bytes()
        );
        assert_eq!(
            getxattr(file(i), "trusted.gfid").unwrap(),
            (i as u128).to_le_bytes()
        );
        if i % 10 == 0 {
            assert_eq!(
                getxattr(file(i), "user.large").unwrap(),
                value(5000 + i, i as u8)
            );
        }
    };
    (0..300).for_each(check);
    assert_eq!(getxattr(&d, "user.dir").unwrap(), b"d");
    // Freed inodes take their attributes along: numbers are reused, attributes are not.
    for i in 0..150 {
        fs::remove_file(file(i)).unwrap();
    }
    fs.remount();
    new_files_have_no_attributes(&d, "new", 150);
    (150..300).for_each(check);
    fs.remount();
    (150..300).for_each(check);
    // An open file keeps its attributes after its last name goes, until it is closed.
    let p = d.join("open");
    fs::write(&p, b"z").unwrap();
    set(&p, "user.large", &value(9000, 1));
    let held = fs::File::open(&p).unwrap();
    fs::remove_file(&p).unwrap();
    let fd_path = format!(
        "/proc/self/fd/{}",
        std::os::unix::io::AsRawFd::as_raw_fd(&held)
    );
    assert_eq!(getxattr(&fd_path, "user.large").unwrap(), value(9000, 1));
    drop(held);
}

#[test]
fn kill_9_after_fsync_keeps_the_attributes() {
    dualfs_only!();
    let mut fs = TestFs::new();
    let d = fs.join("d");
    fs::create_dir(&d).unwrap();
    let mut durable: Vec<(std::path::PathBuf, Vec<u8>, Vec<u8>)> = Vec::new();
    let mut acls: Vec<(std::path::PathBuf, Vec<u8>, u32)> = Vec::new();
    for round in 0..4 {
        for i in 0..40 {
            let p = d.join(format!("r{round}f{i}"));
            fs::write(&p, b"x").unwrap();
            let small = format!("{round}/{i}").into_bytes();
            let large = value(3000 + 700 * i, (round * 40 + i) as u8);
            set(&p, "user.small", &small);
            set(&p, "user.large", &large);
            if i % 8 == 0 {
                // An ACL is an attribute too (and it changed the mode in the same step).
                setfacl_m("u:1001:rw,g:1003:r", &p);
                let acl = getxattr(&p, "system.posix_acl_access").unwrap();
                acls.push((p.clone(), acl, fs::metadata(&p).unwrap().mode()));
            }
            fs::File::open(&p).unwrap().sync_all().unwrap();
            durable.push((p, small, large));
        }
        // Not fsync'd: may or may not survive, but never half.
        let late = d.join(format!("late{round}"));
        fs::write(&late, b"x").unwrap();
        set(&late, "user.late", &value(6000, 1));
        fs.kill_daemon_hard();
        fs.mount();
        fs::metadata(fs.path()).expect("the recovered file system answers");
        for (p, small, large) in &durable {
            assert_eq!(
                &getxattr(p, "user.small").unwrap(),
                small,
                "{}",
                p.display()
            );
            assert_eq!(
                &getxattr(p, "user.large").unwrap(),
                large,
                "{}",
                p.display()
            );
        }
        for (p, acl, mode) in &acls {
            assert_eq!(
                &getxattr(p, "system.posix_acl_access").unwrap(),
                acl,
                "{}",
                p.display()
            );
            assert_eq!(fs::metadata(p).unwrap().mode(), *mode, "{}", p.display());
        }
        if let Ok(v) = getxattr(&late, "user.late") {
            assert_eq!(v, value(6000, 1));
        }
    }
    fs.unmount();
}

/// Files in `d` named `{stem}{i}`, each with a small attribute and one in value blocks, held
/// open and unlinked: orphans whose attributes are still readable through the descriptor.
fn orphans_with_attributes(d: &Path, stem: &str, n: u8) -> Vec<fs::File> {
    (0..n)
        .map(|i| {
            let p = d.join(format!("{stem}{i}"));
            fs::write(&p, b"x").unwrap();
            set(&p, "user.small", &[i]);
            set(&p, "user.large", &value(20_000, i));
            let held = fs::File::open(&p).unwrap();
            fs::remove_file(&p).unwrap();
            let fd = format!(
                "/proc/self/fd/{}",
                std::os::unix::io::AsRawFd::as_raw_fd(&held)
            );
            assert_eq!(getxattr(&fd, "user.large").unwrap(), value(20_000, i));
            held
        })
        .collect()
}

#[test]
fn orphans_take_their_attributes_when_closed_and_at_mount_after_a_crash() {
    dualfs_only!();
    let mut fs = TestFs::new();
    let d = fs.join("d");
    fs::create_dir(&d).unwrap();
    let fresh_files_have_none = |stem: &str| new_files_have_no_attributes(&d, stem, 8);
    // The last close frees them; the checker at the remount finds no attribute of a free
    // inode and no value block that nothing reaches.
    drop(orphans_with_attributes(&d, "closed", 8));
    fs.remount();
    fresh_files_have_none("after-close");

    // Still open, made durable, then the daemon dies: the next mount frees them.
    let held = orphans_with_attributes(&d, "crashed", 8);
    held[0].sync_all().unwrap();
    fs.kill_daemon_hard();
    drop(held);
    fs.mount();
    let freed = fs.daemon_log().matches("freeing orphan inode").count();
    assert_eq!(freed, 8, "orphans freed at mount:\n{}", fs.daemon_log());
    fresh_files_have_none("after-crash");
    fs.unmount();
}

/// A dump of getfattr or getfacl in a canonical order: blocks ("# file: ..." and its lines)
/// sorted by file, lines sorted within each (listing orders differ between file systems).
fn canonical(dump: &str) -> Vec<Vec<String>> {
    let mut blocks: Vec<Vec<String>> = dump
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|b| {
            let mut lines: Vec<String> = b.lines().map(str::to_string).collect();
            lines[1..].sort();
            lines
        })
        .collect();
    blocks.sort();
    blocks
}

/// `getfattr -d -m - -R` and `getfacl -R -n` of `dir`, run in it (relative names), canonical.
/// Numeric ids: names would depend on the host's /etc/passwd (a user 1001 there is not "1001").
fn dumps(dir: &Path) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let run = |cmd: &mut Command| {
        let out = cmd.current_dir(dir).output().expect("run getfattr/getfacl");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        canonical(&String::from_utf8(out.stdout).unwrap())
    };
    let attrs =
        run(Command::new("getfattr").args(["-R", "-h", "-d", "-m", "-", "--absolute-names", "."]));
    let acls = run(Command::new("getfacl").args(["-R", "-p", "-n", "."]));
    (attrs, acls)
}

#[test]
fn rsync_with_attributes_acls_and_hard_links_in_and_out() {
    let mut fs = TestFs::new();
    let src = TmpfsDir::new(256 << 20);
    let s = src.path().join("tree");
    fs::create_dir(&s).unwrap();
    // A generated tree (sizes, names, links, symlinks, modes), then attributes everywhere.
    // (Hard links come below, in one group whose first name rsync meets first: rsync makes
    // the other names late, and a directory whose time it set before that would differ.)
    tree::generate(
        &s,
        &tree::TreeSpec {
            files: 300,
            hardlinks: 0,
            ..Default::default()
        },
    );
    let mut k = 0u8;
    let mut walk = vec![s.clone()];
    while let Some(dir) = walk.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let meta = fs::symlink_metadata(&p).unwrap();
            k = k.wrapping_add(1);
            if meta.is_dir() {
                walk.push(p.clone());
                set(&p, "user.dir", &[k]);
                setfacl_m("u:1001:rwx,d:u:1002:r-x,d:g:1003:rwx", &p);
            } else if meta.is_file() {
                set(&p, "user.small", &[k; 3]);
                set(&p, "trusted.t", &[k; 20]);
                if k % 4 == 0 {
                    set(&p, "user.large", &value(2000 + k as usize * 20, k));
                }
                if k % 3 == 0 {
                    setfacl_m("u:1001:r,g:1003:rw", &p);
                }
            } else if meta.file_type().is_symlink() {
                setxattr(&p, "trusted.link", &[k], 0, true).unwrap();
            }
        }
    }
    // Hard links across directories.
    fs::create_dir(s.join("links")).unwrap();
    let first = s.join("0-linked");
    fs::write(&first, value(10_000, 5)).unwrap();
    set(&first, "user.linked", b"one inode");
    fs::hard_link(&first, s.join("links/one")).unwrap();
    fs::hard_link(&first, s.join("links/two")).unwrap();

    // rsync skips setting a directory's time that is in the same second as the copy's (seen
    // tmpfs to tmpfs as well): the directories go an hour back first.
    let back_then = sys::now().0 - 3600;
    let mut dirs = vec![s.clone()];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                dirs.push(p);
            }
        }
        sys::utimens(
            &dir,
            sys::SetTs::Omit,
            sys::SetTs::At(back_then, 123_456_789),
            true,
        )
        .unwrap();
    }
    let rsync = |from: &Path, to: &Path| {
        let out = Command::new("rsync")
            .args(["-aHAX", "--numeric-ids"])
            .arg(format!("{}/", from.display()))
            .arg(to)
            .output()
            .expect("run rsync");
        assert!(
            out.status.success(),
            "rsync {} -> {}: {}{}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let dst = fs.join("copy");
    rsync(&s, &dst);
    fs.remount();
    let back = src.path().join("back");
    rsync(&dst, &back);
    let want = dumps(&s);
    let has = |d: &[Vec<String>], needle: &str| d.iter().flatten().any(|l| l.contains(needle));
    assert!(
        has(&want.0, "user.large") && has(&want.0, "trusted.link") && has(&want.1, "user:1001:")
    );
    assert_eq!(dumps(&dst), want, "on DualFS after a remount");
    assert_eq!(dumps(&back), want, "copied back");
    tree::compare_trees(&s, &dst, tree::CompareOpts::default());
    tree::compare_trees(&s, &back, tree::CompareOpts::default());
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&dst.join("links/one")), ino(&dst.join("links/two")));
    fs.unmount();
}

/// Create `count` files `STEMi` in `dir`: none has an attribute (no freed inode's attributes
/// came back with its number).
fn new_files_have_no_attributes(dir: &Path, stem: &str, count: usize) {
    for i in 0..count {
        let p = dir.join(format!("{stem}{i:03}"));
        fs::write(&p, b"y").unwrap();
        assert_eq!(
            listxattr(&p).unwrap(),
            Vec::<String>::new(),
            "{}",
            p.display()
        );
    }
}
