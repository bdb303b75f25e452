//! What makes writes durable on DualFS: `dualfs sync MOUNTPOINT` (sync(2) does not reach a
//! FUSE file system), fsync or fsyncdir of any file or directory (a commit of everything the
//! daemon holds), and the `dirsync` mount option (a directory change is durable when it
//! returns). Each is shown by a kill -9 of the daemon right after it and a remount; the
//! flush interval is an hour, so nothing else commits in between. That a write without
//! them may be lost within the flush interval is allowed, and not asserted.

mod common;

use common::*;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

/// No background commit during the test.
const NO_FLUSH: &str = "flush_interval=3600,checkpoint_interval=3600";

fn mount(extra: &str) -> TestFs {
    let opts = [DEFAULT_MOUNT_OPTS, NO_FLUSH, extra]
        .iter()
        .filter(|o| !o.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(",");
    TestFs::builder().mount_opts(&opts).mount()
}

fn dualfs(args: &[&Path]) -> Output {
    Command::new(dualfs_bin()).args(args).output().unwrap()
}

/// A small tree: files with contents, a renamed file, a removed one, a subdirectory.
fn write_tree(fs: &TestFs) {
    fs::create_dir(fs.join("d")).unwrap();
    for i in 0..30 {
        let mut f = File::create(fs.join(format!("d/f{i}"))).unwrap();
        f.write_all(&content(i, 5000 + 37 * i as usize)).unwrap();
    }
    fs::rename(fs.join("d/f0"), fs.join("renamed")).unwrap();
    fs::remove_file(fs.join("d/f1")).unwrap();
}

fn tree_is_there(fs: &TestFs, with_contents: bool) {
    assert!(!fs.join("d/f0").exists() && !fs.join("d/f1").exists());
    let renamed = fs::read(fs.join("renamed")).unwrap();
    if with_contents {
        assert!(renamed == content(0, 5000), "renamed differs");
    }
    for i in 2..30 {
        let got = fs::read(fs.join(format!("d/f{i}"))).unwrap();
        if with_contents {
            assert!(got == content(i, 5000 + 37 * i as usize), "d/f{i} differs");
        }
    }
}

fn sync_then_kill(extra: &str) {
    let mut fs = mount(extra);
    write_tree(&fs);
    let out = dualfs(&[Path::new("sync"), fs.path()]);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "dualfs sync: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    fs.kill_daemon_hard();
    fs.mount();
    tree_is_there(&fs, true);
    fs.unmount();
}

#[test]
fn dualfs_sync_makes_what_was_written_durable() {
    dualfs_only!();
    sync_then_kill("");
}

/// With the writeback cache the kernel still holds dirty pages when the writes return:
/// `dualfs sync` has it write them back first.
#[test]
fn dualfs_sync_makes_what_the_kernel_caches_durable_too() {
    dualfs_only!();
    sync_then_kill("writeback_cache");
}

/// fsync of one file commits everything the daemon holds, other files and names included;
/// so does fsync of a directory.
#[test]
fn fsync_of_any_file_or_directory_is_a_full_commit() {
    dualfs_only!();
    for use_directory in [false, true] {
        let mut fs = mount("");
        write_tree(&fs);
        if use_directory {
            File::open(fs.path()).unwrap().sync_all().unwrap();
        } else {
            let mut other = File::create(fs.join("other")).unwrap();
            other.write_all(b"unrelated").unwrap();
            other.sync_all().unwrap();
        }
        fs.kill_daemon_hard();
        fs.mount();
        // Under the writeback cache (DUALFS_TEST_EXTRA_OPTS) other files' data may still
        // have been in the kernel's cache: their names are durable, their bytes need sync.
        tree_is_there(&fs, !fs.writeback_cache());
        fs.unmount();
    }
}

#[test]
fn dirsync_makes_directory_changes_durable_when_they_return() {
    dualfs_only!();
    let mut fs = mount("dirsync");
    File::create(fs.join("created")).unwrap();
    fs::create_dir(fs.join("dir")).unwrap();
    fs::write(fs.join("dir/moved"), b"").unwrap();
    fs::rename(fs.join("dir/moved"), fs.join("here")).unwrap();
    std::os::unix::fs::symlink("target", fs.join("link")).unwrap();
    fs::hard_link(fs.join("created"), fs.join("second name")).unwrap();
    fs::create_dir(fs.join("gone")).unwrap();
    fs::remove_dir(fs.join("gone")).unwrap();
    fs.kill_daemon_hard();
    fs.mount();
    assert!(fs.join("created").is_file() && fs.join("here").is_file());
    assert!(fs.join("dir").is_dir() && !fs.join("dir/moved").exists());
    assert_eq!(fs::read_link(fs.join("link")).unwrap(), Path::new("target"));
    assert_eq!(fs::metadata(fs.join("second name")).unwrap().len(), 0);
    assert!(!fs.join("gone").exists());
    fs.unmount();
}

#[test]
fn dualfs_sync_refuses_what_it_cannot_sync() {
    dualfs_only!();
    let fs = TestFs::new();
    let plain = fs.scratch().join("plain");
    fs::create_dir(&plain).unwrap();
    let out = dualfs(&[Path::new("sync"), &plain]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot sync") && stderr.contains("not a mount point"),
        "{stderr}"
    );
    let out = dualfs(&[Path::new("sync"), Path::new("/proc")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a DualFS mount (it is proc)"));
    let out = dualfs(&[Path::new("sync")]);
    assert_eq!(out.status.code(), Some(2));
    // A read-only mount has nothing to make durable.
    drop(fs);
    let ro = TestFs::builder()
        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},ro"))
        .mount();
    let out = dualfs(&[Path::new("sync"), ro.path()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The harness's mount is ready when it is served, not when it is in the mount table: a
/// read-only mount that a test ended at once (as `dualfs_sync_refuses_what_it_cannot_sync`
/// does) was unmounted before its daemon read the kernel's INIT, and the daemon exited 1
/// ("FUSE device disconnected during handshake"; CI failed once so). Six threads mounting
/// and dropping 60 each reproduced it twice on the old harness.
#[test]
fn mounts_ended_as_soon_as_they_are_ready_end_cleanly() {
    dualfs_only!();
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                for _ in 0..60 {
                    let ro = TestFs::builder()
                        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},ro"))
                        .mount();
                    drop(ro);
                }
            });
        }
    });
}
