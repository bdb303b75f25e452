//! The mkfs-dualfs command as a user runs it: refusals leave the devices untouched.
//!
//! Tests that need loop devices skip themselves (with a note) where they cannot be made.
//! Tests marked "needs core mkfs" run once the core's formatting exists.

use dualfs_testkit::LoopDevice;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

const MKFS: &str = env!("CARGO_BIN_EXE_mkfs-dualfs");
/// Image sizes comfortably above any minimum the core may set.
const META_SIZE: &str = "128M";
const DATA_SIZE: &str = "128M";

fn mkfs(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(MKFS)
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("run mkfs-dualfs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Exit status 1 (a refusal) with `needle` in the message.
#[track_caller]
fn assert_refused(out: &Output, needle: &str) {
    assert_exit(out, 1, needle);
}

/// Exit status 2 (a bad command line) with `needle` in the message.
#[track_caller]
fn assert_usage_error(out: &Output, needle: &str) {
    assert_exit(out, 2, needle);
}

#[track_caller]
fn assert_exit(out: &Output, code: i32, needle: &str) {
    assert_eq!(out.status.code(), Some(code), "stderr: {}", stderr(out));
    assert!(
        stderr(out).contains(needle),
        "expected '{needle}' in: {}",
        stderr(out)
    );
}

#[track_caller]
fn assert_succeeded(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
}

/// An image file of `len` bytes with a recognisable pattern at its start.
fn patterned_image(path: &Path, len: u64) -> Vec<u8> {
    let head: Vec<u8> = (0..8192u32).map(|i| (i * 31 % 251) as u8).collect();
    fs::write(path, &head).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
    fs::read(path).unwrap()
}

/// An ext4 image made by mkfs.ext4, or (where it is missing) a synthetic ext4 superblock.
fn ext4_image(path: &Path) {
    fs::File::create(path).unwrap().set_len(128 << 20).unwrap();
    let made = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(path)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        let mut bytes = fs::read(path).unwrap();
        bytes[1080..1082].copy_from_slice(&0xEF53u16.to_le_bytes());
        bytes[1024 + 0x60..1024 + 0x64].copy_from_slice(&0x2C2u32.to_le_bytes());
        fs::write(path, bytes).unwrap();
    }
}

#[test]
fn help_and_version() {
    let out = mkfs(&[&"--help"]);
    assert_succeeded(&out);
    assert!(stdout(&out).contains("--size-meta"));
    let out = mkfs(&[&"--version"]);
    assert_succeeded(&out);
    assert!(stdout(&out).contains("mkfs-dualfs"));
}

#[test]
fn usage_errors_exit_with_status_2() {
    assert_usage_error(&mkfs(&[]), "required");
    assert_usage_error(
        &mkfs(&[&"a", &"b", &"--no-such-option"]),
        "--no-such-option",
    );
}

#[test]
fn bad_sizes_are_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    for (bad, why) in [
        ("12Q", "unknown unit"),
        ("1.5G", "unknown unit"),
        ("0", "greater than zero"),
        ("lots", "not a size"),
        ("99999E", "too large"),
    ] {
        let out = mkfs(&[
            &"--size-meta",
            &bad,
            &"--size-data",
            &DATA_SIZE,
            &meta,
            &data,
        ]);
        assert_usage_error(&out, why);
    }
    let out = mkfs(&[
        &"--size-meta",
        &META_SIZE,
        &"--size-data",
        &"-5",
        &meta,
        &data,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bad_options_are_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    let cases: &[(&[&str], &str)] = &[
        (&["-b", "2048"], "power of two"),
        (&["-b", "12288"], "power of two"),
        (&["-b", "128K"], "power of two"),
        (&["--segment-size", "60K"], "at least 16 blocks"),
        (
            &["--segment-size", "1000000"],
            "not a multiple of the block size",
        ),
        (&["-g", "0"], "out of range"),
        (&["-g", "32513"], "out of range"),
        (&["-b", "8K", "-g", "65281"], "out of range"),
        (
            &["-L", "a label that is longer than 32 bytes"],
            "at most 32 bytes",
        ),
    ];
    for (options, why) in cases {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = options
            .iter()
            .map(|o| o as &dyn AsRef<std::ffi::OsStr>)
            .collect();
        args.extend([
            &"--size-meta" as &dyn AsRef<std::ffi::OsStr>,
            &META_SIZE,
            &"--size-data",
            &DATA_SIZE,
            &meta,
            &data,
        ]);
        assert_usage_error(&mkfs(&args), why);
    }
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_missing_image_needs_a_size() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    let out = mkfs(&[&"--size-meta", &META_SIZE, &meta, &data]);
    assert_refused(&out, "--size-data");
    assert_refused(&out, "does not exist");
    let out = mkfs(&[
        &"--size-meta",
        &META_SIZE,
        &"--size-data",
        &DATA_SIZE,
        &meta,
        &dir.path().join("no/such/dir/d.img"),
    ]);
    assert_refused(&out, "cannot create");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn directories_and_character_devices_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.img");
    let out = mkfs(&[&"--size-data", &DATA_SIZE, &dir.path(), &data]);
    assert_refused(&out, "is a directory");
    let out = mkfs(&[&"--size-data", &DATA_SIZE, &"/dev/null", &data]);
    assert_refused(&out, "is a character device");
    assert!(!data.exists());
}

#[test]
fn tiny_devices_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    let out = mkfs(&[
        &"--size-meta",
        &"4K",
        &"--size-data",
        &DATA_SIZE,
        &meta,
        &data,
    ]);
    assert_refused(&out, "too small");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn the_same_file_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("one.img");
    // Not yet existing, named two ways.
    let dotted = dir.path().join(".").join("one.img");
    let out = mkfs(&[
        &"--size-meta",
        &META_SIZE,
        &"--size-data",
        &DATA_SIZE,
        &image,
        &dotted,
    ]);
    assert_refused(&out, "the same path");
    assert!(!image.exists());

    // Existing, through the same name, a symlink and a hard link.
    let before = patterned_image(&image, 128 << 20);
    let symlink = dir.path().join("link.img");
    std::os::unix::fs::symlink(&image, &symlink).unwrap();
    let hard_link = dir.path().join("hard.img");
    fs::hard_link(&image, &hard_link).unwrap();
    for other in [&image, &symlink, &hard_link] {
        let out = mkfs(&[&"--force", &image, other]);
        assert_refused(&out, "the same file");
    }
    assert_eq!(fs::read(&image).unwrap(), before);
}

#[test]
fn an_existing_ext4_is_refused_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    ext4_image(&data);
    let before = fs::read(&data).unwrap();

    let out = mkfs(&[&"--size-meta", &META_SIZE, &meta, &data]);
    assert_refused(&out, "already holds an ext4 file system");
    assert_refused(&out, "--force");
    assert!(!meta.exists(), "the metadata image was created");
    assert_eq!(fs::read(&data).unwrap(), before);

    // --force gets past the check (a dry run, so that no core is needed).
    let out = mkfs(&[&"--force", &"-n", &"--size-meta", &META_SIZE, &meta, &data]);
    assert_succeeded(&out);
    assert!(stderr(&out).contains("overwriting"), "{}", stderr(&out));
    assert!(!meta.exists());
    assert_eq!(fs::read(&data).unwrap(), before);
}

#[test]
fn shrinking_an_image_needs_force() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    fs::File::create(&meta).unwrap().set_len(256 << 20).unwrap();
    let out = mkfs(&[
        &"--size-meta",
        &META_SIZE,
        &"--size-data",
        &DATA_SIZE,
        &meta,
        &data,
    ]);
    assert_refused(&out, "would shrink");
    assert_eq!(fs::metadata(&meta).unwrap().len(), 256 << 20);
    let out = mkfs(&[
        &"-f",
        &"-n",
        &"--size-meta",
        &META_SIZE,
        &"--size-data",
        &DATA_SIZE,
        &meta,
        &data,
    ]);
    assert_succeeded(&out);
    assert!(
        stdout(&out).contains("shrink image file"),
        "{}",
        stdout(&out)
    );
    assert_eq!(fs::metadata(&meta).unwrap().len(), 256 << 20);
}

#[test]
fn a_dry_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    let meta_before = patterned_image(&meta, 64 << 20);
    let out = mkfs(&[
        &"-n",
        &"--size-meta",
        &META_SIZE,
        &"--size-data",
        &DATA_SIZE,
        &meta,
        &data,
    ]);
    assert_succeeded(&out);
    let plan = stdout(&out);
    assert!(plan.contains("nothing is written"), "{plan}");
    assert!(plan.contains("extend image file"), "{plan}");
    assert!(plan.contains("create image file"), "{plan}");
    let absolute_data = fs::canonicalize(dir.path()).unwrap().join("d.img");
    assert!(plan.contains(&*absolute_data.to_string_lossy()), "{plan}");
    assert_eq!(fs::read(&meta).unwrap(), meta_before);
    assert!(!data.exists());
}

#[test]
fn an_image_locked_by_a_running_dualfs_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    fs::File::create(&meta).unwrap().set_len(128 << 20).unwrap();
    let mode = dualfs::device::OpenMode {
        read_only: false,
        exclusive: true,
        ..dualfs::device::OpenMode::default()
    };
    let _held = dualfs::device::FileDevice::open(&meta, mode).unwrap();
    let out = mkfs(&[&"-f", &"--size-data", &DATA_SIZE, &meta, &data]);
    assert_refused(&out, "locked by another process");
    assert!(!data.exists());
}

#[test]
fn works_when_called_as_mkfs_dot_dualfs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(MKFS, bin.join("mkfs.dualfs")).unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    let args = ["-n", "--size-meta", META_SIZE, "--size-data", DATA_SIZE];

    let out = Command::new(bin.join("mkfs.dualfs"))
        .args(args)
        .args([&meta, &data])
        .output()
        .unwrap();
    assert_succeeded(&out);
    let out = Command::new(bin.join("mkfs.dualfs"))
        .arg("--help")
        .output()
        .unwrap();
    assert_succeeded(&out);
    assert!(
        stdout(&out).contains("Usage: mkfs.dualfs"),
        "{}",
        stdout(&out)
    );

    // And through mkfs(8), where util-linux is installed.
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let via_mkfs = Command::new("mkfs")
        .args(["-t", "dualfs"])
        .args(args)
        .args([&meta, &data])
        .env("PATH", path)
        .output();
    match via_mkfs {
        Ok(out) => assert_succeeded(&out),
        Err(e) => eprintln!("skipping mkfs -t dualfs: {e}"),
    }
    assert!(!meta.exists() && !data.exists());
}

#[test]
fn a_block_device_takes_no_size() {
    let Some(lo) = LoopDevice::new(128 << 20) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.img");
    let out = mkfs(&[
        &"--size-meta",
        &"64M",
        &"--size-data",
        &DATA_SIZE,
        &lo.path(),
        &data,
    ]);
    assert_refused(&out, "is a block device");
    assert_refused(&out, "--size-meta");
    assert!(!data.exists());

    // Without the size, the device's own size is used.
    let out = mkfs(&[&"-n", &"--size-data", &DATA_SIZE, &lo.path(), &data]);
    assert_succeeded(&out);
    assert!(stdout(&out).contains("128 MiB"), "{}", stdout(&out));
    assert!(!data.exists());
}

#[test]
fn the_same_block_device_twice_is_refused() {
    let Some(lo) = LoopDevice::new(128 << 20) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("dev-link");
    std::os::unix::fs::symlink(lo.path(), &link).unwrap();
    let out = mkfs(&[&lo.path(), &link]);
    assert_refused(&out, "the same device");
}

#[test]
fn a_mounted_block_device_is_refused_even_forced() {
    let Some(mut lo) = LoopDevice::new(128 << 20) else {
        return;
    };
    let Some(mount_point) = lo.mount_ext4() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.img");
    let out = mkfs(&[&"-f", &"--size-data", &DATA_SIZE, &lo.path(), &data]);
    assert_refused(&out, &format!("mounted on {}", mount_point.display()));
    assert!(!data.exists());
}

#[test]
fn an_image_attached_to_a_loop_device_is_refused() {
    let Some(lo) = LoopDevice::new(128 << 20) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let meta = dir.path().join("m.img");
    let before = fs::read(lo.image_path()).unwrap();
    let out = mkfs(&[&"-f", &"--size-meta", &META_SIZE, &meta, &lo.image_path()]);
    assert_refused(&out, "attached to loop device");
    assert!(!meta.exists());
    assert_eq!(fs::read(lo.image_path()).unwrap(), before);
}

// ---- These need the core's formatting (src/mkfs.rs) and run once it lands. ----

#[test]

fn formats_two_new_images() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    let out = mkfs(&[
        &"-L",
        &"test",
        &"--size-meta",
        &META_SIZE,
        &"--size-data",
        &DATA_SIZE,
        &meta,
        &data,
    ]);
    assert_succeeded(&out);
    let summary = stdout(&out);
    assert!(summary.contains("UUID"), "{summary}");
    assert_eq!(fs::metadata(&meta).unwrap().len(), 128 << 20);
    assert_eq!(fs::metadata(&data).unwrap().len(), 128 << 20);

    let open = |path: &Path| {
        dualfs::device::FileDevice::open(path, dualfs::device::OpenMode::default()).unwrap()
    };
    let found_meta = dualfs::device::probe_existing(&open(&meta)).unwrap();
    assert!(
        found_meta.starts_with("a DualFS metadata device"),
        "{found_meta}"
    );
    assert!(found_meta.contains("label \"test\""), "{found_meta}");
    let found_data = dualfs::device::probe_existing(&open(&data)).unwrap();
    assert!(
        found_data.starts_with("a DualFS data device"),
        "{found_data}"
    );

    // The data device's absolute path is recorded in the metadata superblock (offset 210).
    let meta_bytes = fs::read(&meta).unwrap();
    let len = u16::from_le_bytes([meta_bytes[208], meta_bytes[209]]) as usize;
    let recorded = String::from_utf8_lossy(&meta_bytes[210..210 + len]).into_owned();
    assert_eq!(Path::new(&recorded), fs::canonicalize(&data).unwrap());

    // A second run finds the file system and needs --force.
    let out = mkfs(&[&meta, &data]);
    assert_refused(&out, "already holds a DualFS");
    let out = mkfs(&[&"-f", &"-q", &meta, &data]);
    assert_succeeded(&out);
    assert_eq!(stdout(&out), "");
}

#[test]

fn extends_an_existing_image_and_uses_options() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("m.img"), dir.path().join("d.img"));
    fs::File::create(&data).unwrap().set_len(1 << 20).unwrap();
    let out = mkfs(&[
        &"-b",
        &"8K",
        &"--segment-size",
        &"2M",
        &"-g",
        &"1000",
        &"--size-meta",
        &META_SIZE,
        &"--size-data",
        &DATA_SIZE,
        &meta,
        &data,
    ]);
    assert_succeeded(&out);
    assert_eq!(fs::metadata(&data).unwrap().len(), 128 << 20);
    let summary = stdout(&out);
    assert!(summary.contains("block size 8192"), "{summary}");
    assert!(summary.contains("1000 blocks per group"), "{summary}");
}

#[test]

fn formats_block_devices() {
    let (Some(meta), Some(data)) = (LoopDevice::new(128 << 20), LoopDevice::new(128 << 20)) else {
        return;
    };
    let out = mkfs(&[&meta.path(), &data.path()]);
    assert_succeeded(&out);
    let open = |path: &Path| {
        dualfs::device::FileDevice::open(path, dualfs::device::OpenMode::default()).unwrap()
    };
    assert!(dualfs::device::probe_existing(&open(meta.path()))
        .unwrap()
        .starts_with("a DualFS metadata device"));
}
