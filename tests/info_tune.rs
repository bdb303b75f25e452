//! `dualfs info` and `dualfs tune` through the real program: info on a fresh and on a mounted
//! file system (text and JSON), on a crashed one and on a mount whose daemon was killed,
//! tune --label then info, tune --data onto a moved data image then a mount that finds it, and
//! tune refused while mounted or onto another file system's data image (leaving the images as
//! they were).

#[macro_use]
mod common;

use common::*;
use dualfs::mkfs::MkfsParams;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const META_BYTES: u64 = 16 << 20;
const DATA_BYTES: u64 = 64 << 20;

fn params(label: &str) -> MkfsParams {
    MkfsParams {
        segment_blocks: 64,
        label: label.into(),
        ..MkfsParams::default()
    }
}

/// A formatted pair in `dir`, its data path recorded as mkfs records it (absolute).
fn make_pair(dir: &Path, name: &str, label: &str) -> (PathBuf, PathBuf) {
    let meta = dir.join(format!("{name}-meta.img"));
    let data = dir.join(format!("{name}-data.img"));
    make_image(&meta, META_BYTES);
    make_image(&data, DATA_BYTES);
    let mut p = params(label);
    p.data_path = data.to_str().unwrap().to_string();
    mkfs_pair(&meta, &data, &p);
    (meta, data)
}

/// A fresh pair, mounted, with a synced file "f" of `blocks` blocks.
fn mounted_with_a_file(name: &str, label: &str, blocks: u64) -> (Dir, PathBuf, PathBuf, TestFs) {
    let dir = tempdir();
    let (meta, data) = make_pair(dir.path(), name, label);
    let fs = TestFs::builder().images(&meta, &data).mount();
    fs::write(fs.join("f"), vec![7u8; (blocks * 4096) as usize]).unwrap();
    sync_fs(fs.path());
    (dir, meta, data, fs)
}

fn dualfs(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(dualfs_bin()).args(args).output().unwrap()
}

fn info_json(meta: &Path) -> Value {
    let out = dualfs(&["info".as_ref(), "--json".as_ref(), meta.as_os_str()]);
    assert!(out.status.success(), "info --json: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("info --json is not JSON ({e}):\n{}", stdout(&out));
    })
}

fn info_text(meta: &Path) -> String {
    let out = dualfs(&["info".as_ref(), meta.as_os_str()]);
    assert!(out.status.success(), "info: {}", stderr(&out));
    stdout(&out)
}

fn tune(meta: &Path, args: &[&str]) -> Output {
    let mut all: Vec<&std::ffi::OsStr> = vec!["tune".as_ref(), meta.as_os_str()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    dualfs(&all)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The one-line failure of a refused command: exit 1, the expected words, nothing on stdout.
fn assert_refused(o: &Output, expected: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains(expected), "expected {expected:?} in: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// The line "Name: value" of info's text output.
fn field<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {name:?} line in:\n{text}"))
        .trim()
}

/// A scratch directory by its canonical path, as the programs name what they find.
struct Dir {
    _dir: tempfile::TempDir,
    path: PathBuf,
}
impl Dir {
    fn path(&self) -> &Path {
        &self.path
    }
}
fn tempdir() -> Dir {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().canonicalize().unwrap();
    Dir { _dir: d, path }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn info_of_a_fresh_file_system() {
    dualfs_only!();
    let dir = tempdir();
    let (meta, data) = make_pair(dir.path(), "a", "fresh one");
    let sb = dualfs::fs::read_superblock(&open_device(&meta, true)).unwrap();
    let before = (digest_file(&meta), digest_file(&data));

    let j = info_json(&meta);
    assert_eq!(j["label"], "fresh one");
    let uuid = uuid::Uuid::from_bytes(sb.uuid).hyphenated().to_string();
    assert_eq!(j["uuid"], uuid.as_str());
    assert_eq!(
        u(&j["format_version"]),
        dualfs::format::FORMAT_VERSION as u64
    );
    assert_eq!((u(&j["block_size"]), u(&j["segment_blocks"])), (4096, 64));
    assert_eq!(
        (j["state"].as_str(), j["mounted"].as_bool()),
        (Some("clean"), Some(false))
    );
    assert!(j["mountpoint"].is_null());
    assert_eq!(j["checkpoint"]["clean"], true);
    assert!(u(&j["checkpoint"]["time"]) >= sb.created);
    let m = &j["meta"];
    assert_eq!(m["path"], meta.to_str().unwrap());
    assert_eq!(
        (u(&m["bytes"]), u(&m["segments"])),
        (META_BYTES, sb.segments)
    );
    // Segment 0 holds the superblock; the others are clean, dirty, or the log's head.
    let (clean, dirty) = (u(&m["clean_segments"]), u(&m["dirty_segments"]));
    assert!(
        clean > sb.segments / 2 && clean + dirty < sb.segments,
        "{m}"
    );
    assert!(
        u(&m["used_bytes"]) > 0 && u(&m["free_bytes"]) == clean * 64 * 4096,
        "{m}"
    );
    let d = &j["data"];
    assert_eq!(d["recorded_path"], data.to_str().unwrap());
    assert_eq!(
        (u(&d["bytes"]), u(&d["blocks"])),
        (DATA_BYTES, DATA_BYTES / 4096)
    );
    assert_eq!(
        u(&d["used_blocks"]) + u(&d["free_blocks"]),
        DATA_BYTES / 4096
    );
    assert!(d["problem"].is_null());

    let text = info_text(&meta);
    assert_eq!(field(&text, "Label"), "fresh one");
    assert_eq!(field(&text, "UUID"), uuid);
    assert_eq!(field(&text, "State"), "clean");
    assert_eq!(field(&text, "Mounted"), "no");
    assert_eq!(field(&text, "Clean segments"), clean.to_string());
    assert!(
        field(&text, "Last checkpoint").contains("clean unmount"),
        "{text}"
    );
    assert_eq!(
        (digest_file(&meta), digest_file(&data)),
        before,
        "info wrote to a device"
    );
}

#[test]
fn info_of_a_mounted_file_system_and_tune_refused_while_mounted() {
    dualfs_only!();
    let blocks = 300u64;
    let (_dir, meta, data, mut fs) = mounted_with_a_file("m", "mounted", blocks);

    let j = info_json(&meta);
    assert_eq!(
        (j["state"].as_str(), j["mounted"].as_bool()),
        (Some("mounted"), Some(true))
    );
    assert_eq!(j["mountpoint"], fs.path().to_str().unwrap());
    assert_eq!(j["label"], "mounted");
    // Asked of the mount itself: the file's blocks are in use already.
    assert!(u(&j["data"]["used_blocks"]) >= blocks, "{}", j["data"]);
    assert!(u(&j["meta"]["clean_segments"]) > 0, "{}", j["meta"]);
    let text = info_text(&meta);
    assert_eq!(
        field(&text, "Mounted"),
        format!("yes, on {}", fs.path().display())
    );

    for args in [
        &["--label", "other"][..],
        &["--data", data.to_str().unwrap()][..],
    ] {
        assert_refused(&tune(&meta, args), "is mounted on");
    }
    fs.unmount();
    assert_eq!(
        info_json(&meta)["label"],
        "mounted",
        "a refused tune changed the label"
    );
    assert_eq!(info_json(&meta)["state"], "clean");
}

#[test]
fn tune_label_then_info_shows_it_and_bad_labels_are_refused() {
    dualfs_only!();
    let dir = tempdir();
    let (meta, data) = make_pair(dir.path(), "l", "before");
    let out = tune(&meta, &["--label", "after"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(info_json(&meta)["label"], "after");
    assert_eq!(field(&info_text(&meta), "Label"), "after");
    // The data device's superblock holds the label too.
    let dsb = dualfs::fs::read_superblock(&open_device(&data, true)).unwrap();
    assert_eq!(dsb.label, "after");

    let before = (digest_file(&meta), digest_file(&data));
    assert_refused(
        &tune(&meta, &["--label", &"x".repeat(33)]),
        "at most 32 bytes",
    );
    let usage = tune(&meta, &[]);
    assert_eq!(usage.status.code(), Some(2), "{}", stderr(&usage));
    assert_eq!((digest_file(&meta), digest_file(&data)), before);
    check_pair(&meta, &data).unwrap();
}

#[test]
fn tune_data_onto_a_moved_image_then_mount_finds_it() {
    dualfs_only!();
    let dir = tempdir();
    let (meta, data) = make_pair(dir.path(), "d", "moving");
    {
        let mut fs = TestFs::builder().images(&meta, &data).mount();
        fs::write(fs.join("kept"), b"across the move").unwrap();
        fs.unmount();
    }
    let moved = dir.path().join("elsewhere").join("data.img");
    fs::create_dir(moved.parent().unwrap()).unwrap();
    fs::rename(&data, &moved).unwrap();

    // The recorded path is gone: info says so, and still shows the metadata device.
    let j = info_json(&meta);
    assert!(
        j["data"]["problem"]
            .as_str()
            .unwrap()
            .contains("No such file"),
        "{j}"
    );
    assert!(j["data"]["free_blocks"].is_null() && j["meta"]["clean_segments"].is_null());
    assert_eq!(j["label"], "moving");

    // An image of another file system is refused, and nothing is written.
    let (_, other_data) = make_pair(dir.path(), "other", "other");
    let before = (
        digest_file(&meta),
        digest_file(&moved),
        digest_file(&other_data),
    );
    assert_refused(
        &tune(&meta, &["--data", other_data.to_str().unwrap()]),
        "not a pair",
    );
    assert_refused(
        &tune(&meta, &["--data", meta.to_str().unwrap()]),
        "both the metadata and the data device",
    );
    assert_eq!(
        (
            digest_file(&meta),
            digest_file(&moved),
            digest_file(&other_data)
        ),
        before
    );

    // Relative to the current directory, recorded absolute.
    let out = Command::new(dualfs_bin())
        .args(["tune".as_ref(), meta.as_os_str(), "--data".as_ref()])
        .arg("elsewhere/data.img")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let j = info_json(&meta);
    assert_eq!(j["data"]["recorded_path"], moved.to_str().unwrap());
    assert!(j["data"]["problem"].is_null(), "{j}");

    // A mount with DATA left out finds the moved image.
    let mut fs = TestFs::builder()
        .images(&meta, &moved)
        .pass_data(false)
        .mount();
    assert_eq!(fs::read(fs.join("kept")).unwrap(), b"across the move");
    fs.unmount();
}

#[test]
fn info_after_a_crash_says_needs_recovery_and_writes_nothing() {
    dualfs_only!();
    let (_dir, meta, data, mut fs) = mounted_with_a_file("c", "crashed", 40);
    fs.kill_daemon_hard();

    let before = (digest_file(&meta), digest_file(&data));
    let j = info_json(&meta);
    assert_eq!(
        (j["state"].as_str(), j["mounted"].as_bool()),
        (Some("needs recovery"), Some(false))
    );
    assert_eq!(j["checkpoint"]["clean"], false);
    // The figures come from recovery in memory: the synced file's blocks are counted.
    assert!(u(&j["data"]["used_blocks"]) >= 40, "{}", j["data"]);
    assert_eq!(field(&info_text(&meta), "State"), "needs recovery");
    assert_eq!(
        (digest_file(&meta), digest_file(&data)),
        before,
        "info wrote to a device"
    );
    fs.mount();
    assert_eq!(fs::read(fs.join("f")).unwrap().len(), 40 * 4096);
    fs.unmount();
    assert_eq!(info_json(&meta)["state"], "clean");
}

#[test]
fn info_of_a_mount_whose_daemon_died_says_so_and_the_way_out() {
    dualfs_only!();
    let (_dir, meta, _data, mut fs) = mounted_with_a_file("k", "killed", 10);
    unsafe { libc::kill(fs.daemon_pid() as i32, libc::SIGKILL) };
    // The dead mount stays in the table (ENOTCONN) until unmounted; should an assertion
    // fail, TestFs's drop detaches it.
    let start = std::time::Instant::now();
    // (statfs: a stat may come from the kernel's cache of the root's attributes.)
    while nix::sys::statvfs::statvfs(fs.path()) != Err(nix::errno::Errno::ENOTCONN) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "no ENOTCONN"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mnt = fs.path().display().to_string();
    let way_out = [
        format!("mount point {mnt}: Transport endpoint is not connected"),
        "a DualFS whose daemon died is still mounted there".to_string(),
        format!("`dualfs umount {mnt}` takes it away"),
        "then the next mount recovers it".to_string(),
    ];
    let j = info_json(&meta);
    assert_eq!(
        (j["state"].as_str(), j["mounted"].as_bool()),
        (Some("daemon died"), Some(true)),
        "{j}"
    );
    assert_eq!(j["mountpoint"], mnt.as_str());
    let dead = j["dead_mount"].as_str().unwrap_or_default();
    let text = info_text(&meta);
    let state = field(&text, "State");
    assert!(state.starts_with("daemon died: "), "{text}");
    for words in &way_out {
        assert!(dead.contains(words.as_str()), "{words:?} in {dead:?}");
        assert!(state.contains(words.as_str()), "{words:?} in {state:?}");
    }
    // Gone from the table, it needs recovery; the next mount gives the file back.
    fs.kill_daemon_hard();
    assert_eq!(info_json(&meta)["state"], "needs recovery");
    assert!(info_json(&meta)["dead_mount"].is_null());
    fs.mount();
    assert_eq!(fs::read(fs.join("f")).unwrap().len(), 10 * 4096);
    fs.unmount();
}
