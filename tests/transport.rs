//! `-o transport=uring|dev`: DualFS served over each FUSE transport through a real mount,
//! the transport in use named in the daemon's log and by `dualfs info`, and a mount that asks
//! for io_uring where the kernel does not offer it served over /dev/fuse instead of hanging.
//!
//! The tests switch the kernel's `enable_uring` on or off and put back what it was; they run
//! one at a time (a lock), and are skipped, with a note, on a kernel without FUSE over
//! io_uring. Mounts of other test binaries never overlap them (cargo runs the binaries one
//! after the other).

mod common;

use common::*;
use serde_json::Value;
use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Tests that change `enable_uring` run one at a time.
static URING_PARAM: Mutex<()> = Mutex::new(());

/// Sets `enable_uring` and puts back what it was, even when the test fails.
struct UringParam {
    old: String,
}

impl UringParam {
    /// `None` (and a note) where the kernel has no FUSE over io_uring or it cannot be set.
    fn set(on: bool) -> Option<UringParam> {
        let Ok(old) = fs::read_to_string(ENABLE_URING) else {
            eprintln!("note: {ENABLE_URING} missing: no FUSE over io_uring here, test skipped");
            return None;
        };
        if let Err(e) = fs::write(ENABLE_URING, if on { "Y" } else { "N" }) {
            eprintln!("note: cannot write {ENABLE_URING} ({e}): test skipped");
            return None;
        }
        Some(UringParam {
            old: old.trim().to_string(),
        })
    }
}

impl Drop for UringParam {
    fn drop(&mut self) {
        let _ = fs::write(ENABLE_URING, &self.old);
    }
}

fn info_json(meta: &Path) -> Value {
    let out = Command::new(dualfs_bin())
        .args(["info".as_ref(), "--json".as_ref(), meta.as_os_str()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "info --json: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Files, directories, links, attributes and a rename through the mount, checked back.
fn exercise(fs: &TestFs) {
    let d = fs.join("d");
    fs::create_dir(&d).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    fs::File::create(d.join("f"))
        .unwrap()
        .write_all(&data)
        .unwrap();
    let mut back = Vec::new();
    fs::File::open(d.join("f"))
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert!(back == data, "file content read back");
    std::os::unix::fs::symlink("f", d.join("l")).unwrap();
    assert_eq!(fs::read_link(d.join("l")).unwrap(), Path::new("f"));
    fs::hard_link(d.join("f"), d.join("h")).unwrap();
    fs::rename(d.join("h"), fs.join("moved")).unwrap();
    assert_eq!(
        fs::metadata(fs.join("moved")).unwrap().len(),
        data.len() as u64
    );
    let mut names: Vec<String> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["f", "l"]);
    fs::remove_file(fs.join("moved")).unwrap();
    fs::remove_file(d.join("l")).unwrap();
    fs::remove_file(d.join("f")).unwrap();
    fs::remove_dir(&d).unwrap();
}

/// Mount with `transport=`, use the mount, and say which transport served it: from
/// `dualfs info` and from the daemon's log, which must agree.
fn served_over(asked: Option<&str>, enable_uring: bool) -> Option<String> {
    let _serial = URING_PARAM.lock().unwrap_or_else(|p| p.into_inner());
    let _param = UringParam::set(enable_uring)?;
    let opts = match asked {
        Some(t) => format!("{DEFAULT_MOUNT_OPTS},transport={t}"),
        None => DEFAULT_MOUNT_OPTS.to_string(),
    };
    let mut fs = TestFs::builder().mount_opts(&opts).mount();
    exercise(&fs);
    let info = info_json(fs.meta_path());
    let transport = info["transport"]
        .as_str()
        .unwrap_or_else(|| panic!("no transport in dualfs info of a mounted file system: {info}"))
        .to_string();
    let log = fs.daemon_log_whole();
    fs.unmount();
    assert!(
        log.contains(&format!("FUSE transport: {transport}")),
        "the log names the transport info gave ({transport}):\n{log}"
    );
    Some(transport)
}

#[test]
fn each_transport_serves_the_mount_it_was_asked_for() {
    dualfs_only!();
    if let Some(t) = served_over(Some("dev"), true) {
        assert_eq!(t, "dev", "transport=dev with io_uring offered");
    }
    if let Some(t) = served_over(Some("uring"), true) {
        assert_eq!(t, "uring", "transport=uring with io_uring offered");
    }
}

#[test]
fn io_uring_is_the_default_where_the_kernel_offers_it() {
    dualfs_only!();
    if let Some(t) = served_over(None, true) {
        assert_eq!(t, "uring", "enable_uring=Y, no transport= given");
    }
    if let Some(t) = served_over(None, false) {
        assert_eq!(t, "dev", "enable_uring=N, no transport= given");
    }
}

/// The kernel holds every request until each ring has an entry: a mount that asks for the
/// ring where the kernel does not offer it must still come up, over /dev/fuse.
#[test]
fn transport_uring_without_the_kernel_s_ring_serves_over_dev_fuse() {
    dualfs_only!();
    if let Some(t) = served_over(Some("uring"), false) {
        assert_eq!(t, "dev", "transport=uring with enable_uring=N");
    }
}

#[test]
fn a_bad_transport_is_refused() {
    dualfs_only!();
    let out = Command::new(dualfs_bin())
        .args([
            "mount",
            "-o",
            "transport=pipe",
            "/nonexistent-meta",
            "/nonexistent-mnt",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("transport"), "{err}");
}
