//! What `dualfs mount` says about a mount point that is taken: a dead mount (its daemon was
//! killed: ENOTCONN, and the way out), and a DualFS mounted there already (refused rather
//! than stacked, whichever DualFS it is). One line on stderr, exit 1, nothing mounted.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

/// Run `dualfs ARGS`.
fn dualfs(args: &[&Path]) -> Output {
    Command::new(dualfs_bin()).args(args).output().unwrap()
}

#[track_caller]
fn one_line_failure(out: &Output, expected: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let line = stderr.trim_end();
    assert!(
        !line.contains('\n') && line.starts_with("dualfs: "),
        "{stderr:?}"
    );
    for e in expected {
        assert!(line.contains(e), "{line:?} should contain {e:?}");
    }
    line.to_string()
}

/// How many mounts sit exactly on `path`.
fn mounts_on(path: &Path) -> usize {
    let table = dualfs::mountinfo::read().unwrap();
    table.iter().filter(|m| m.mount_point == path).count()
}

#[test]
fn a_mount_point_whose_daemon_died_says_enotconn_and_how_to_clear_it() {
    dualfs_only!();
    let mut fs = TestFs::new();
    {
        use std::io::Write;
        let mut f = std::fs::File::create(fs.join("f")).unwrap();
        f.write_all(b"x").unwrap();
        f.sync_all().unwrap();
    }
    // The pid `dualfs umount` names: the process serving the mount (a supervisor's worker,
    // which dies with its supervisor).
    let pid = fs.worker_pid();
    unsafe { libc::kill(fs.daemon_pid() as i32, libc::SIGKILL) };
    // The mount stays, dead, until someone unmounts it. (statfs: a stat may be answered from
    // the kernel's cache of the root's attributes, which a supervised mount's worker, dying
    // a moment after its supervisor, may have refreshed.)
    let dead = loop {
        match nix::sys::statvfs::statvfs(fs.path()) {
            Err(e) if e == nix::errno::Errno::ENOTCONN => break std::io::Error::from(e),
            _ => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    };
    let out = dualfs(&[
        Path::new("mount"),
        fs.meta_path(),
        fs.data_path(),
        fs.path(),
    ]);
    let line = one_line_failure(
        &out,
        &[
            dead.to_string().split(" (os error").next().unwrap(),
            "dualfs umount",
        ],
    );
    assert!(line.contains("a DualFS whose daemon died"), "{line}");
    assert_eq!(
        mounts_on(fs.path()),
        1,
        "nothing may be mounted over the dead mount"
    );
    let out = dualfs(&[Path::new("sync"), fs.path()]);
    one_line_failure(&out, &["cannot sync", "its daemon died", "dualfs umount"]);
    // The way out it names works: the dead mount goes (reported as such), a mount works.
    let out = dualfs(&[Path::new("umount"), fs.path()]);
    let line = one_line_failure(&out, &["had died without a final checkpoint"]);
    assert!(line.contains(&format!("pid {pid}")), "{line}");
    assert_eq!(mounts_on(fs.path()), 0);
    fs.kill_daemon_hard();
    fs.mount();
    assert_eq!(std::fs::read(fs.join("f")).unwrap(), b"x");
    fs.unmount();
}

#[test]
fn mounting_over_a_mounted_dualfs_is_refused() {
    dualfs_only!();
    let fs = TestFs::new();
    // Another DualFS...
    let (meta, data) = (
        fs.scratch().join("other-meta.img"),
        fs.scratch().join("other-data.img"),
    );
    make_formatted_pair(&meta, &data, 64 << 20, 256 << 20);
    let out = dualfs(&[Path::new("mount"), &meta, fs.path()]);
    let source = fs.meta_path().display().to_string();
    one_line_failure(
        &out,
        &["is already mounted there", &source, "dualfs umount"],
    );
    // ... or this one again.
    let out = dualfs(&[Path::new("mount"), fs.meta_path(), fs.path()]);
    one_line_failure(&out, &["is already mounted there"]);
    assert_eq!(mounts_on(fs.path()), 1);
    std::fs::write(fs.join("still-served"), b"yes").unwrap();
    // Elsewhere the other DualFS mounts.
    let mut other = TestFs::builder().images(&meta, &data).mount();
    other.unmount();
}
