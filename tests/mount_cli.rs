//! The `dualfs` program's failure paths: every refusal is one clear line on stderr with exit
//! code 1 (or 2 for a bad command line, as for mkfs-dualfs and dualfs-cleaner), and the
//! images are left byte-for-byte as they were.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const IMAGE_BYTES: usize = 1 << 20;

/// A metadata image, a data image and a mount point in a fresh directory.
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
    meta: PathBuf,
    data: PathBuf,
    mnt: PathBuf,
}

impl Scratch {
    /// Two images of zeros (not a DualFS) and an empty mount point.
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let scratch = Scratch {
            meta: root.join("meta.img"),
            data: root.join("data.img"),
            mnt: root.join("mnt"),
            root,
            _dir: dir,
        };
        fs::write(&scratch.meta, vec![0u8; IMAGE_BYTES]).unwrap();
        fs::write(&scratch.data, vec![0u8; IMAGE_BYTES]).unwrap();
        fs::create_dir(&scratch.mnt).unwrap();
        scratch
    }

    /// Put a metadata superblock (only the fields the mount program reads) in META.
    /// A valid superblock (role 1 metadata, 2 data) at the start of META; nothing else.
    fn write_meta_superblock(&self, role: u32, data_path: &[u8]) {
        use dualfs::format::superblock::{Role, Superblock};
        let mut image = fs::read(&self.meta).unwrap();
        let sb = Superblock {
            uuid: [5; 16],
            role: if role == 1 { Role::Meta } else { Role::Data },
            block_size: 4096,
            meta_blocks: 16 * 256,
            data_blocks: 1000,
            segment_blocks: 256,
            blocks_per_group: 32512,
            segments: 16,
            groups: 1,
            hash_seed: 1,
            created: 0,
            label: String::new(),
            copy_segments: Superblock::copy_locations(16),
            data_path: data_path.to_vec(),
        };
        image[..4096].copy_from_slice(&sb.encode());
        fs::write(&self.meta, image).unwrap();
    }

    fn images(&self) -> (Vec<u8>, Vec<u8>) {
        (fs::read(&self.meta).unwrap(), fs::read(&self.data).unwrap())
    }

    /// Run `dualfs` with `args`; check the images did not change.
    fn dualfs(&self, args: &[&Path]) -> Output {
        let before = self.images();
        let output = Command::new(env!("CARGO_BIN_EXE_dualfs"))
            .args(args)
            .current_dir(&self.root)
            .output()
            .unwrap();
        assert!(self.images() == before, "an image changed: {args:?}");
        output
    }
}

fn p(s: &str) -> &Path {
    Path::new(s)
}

/// Exit code `code`, nothing on stdout, and one line on stderr that names the problem.
fn assert_one_line_failure(output: &Output, code: i32, expected: &str) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "stdout: {:?}", output.stdout);
    assert!(stderr.ends_with('\n'), "{stderr:?}");
    let line = stderr.trim_end_matches('\n');
    assert!(!line.contains('\n'), "more than one line: {stderr:?}");
    assert!(line.starts_with("dualfs: "), "{line}");
    assert!(
        line.contains(expected),
        "{line:?} should contain {expected:?}"
    );
    line.to_string()
}

/// Both ways of mounting: detached (errors relayed by the parent) and in the foreground.
const MODES: [&str; 2] = ["--foreground", "--threads=2"];

#[test]
fn nonexistent_meta() {
    let s = Scratch::new();
    for mode in MODES {
        let out = s.dualfs(&[p("mount"), p(mode), p("missing.img"), &s.data, &s.mnt]);
        assert_one_line_failure(&out, 1, "missing.img: No such file or directory");
    }
}

#[test]
fn meta_of_zeros_without_data_is_not_a_dualfs() {
    let s = Scratch::new();
    for mode in MODES {
        let out = s.dualfs(&[p("mount"), p(mode), &s.meta, &s.mnt]);
        assert_one_line_failure(&out, 1, "not a DualFS device");
    }
}

#[test]
fn meta_too_small_for_a_superblock() {
    let s = Scratch::new();
    fs::write(&s.meta, [0u8; 100]).unwrap();
    let out = s.dualfs(&[p("mount"), &s.meta, &s.mnt]);
    assert_one_line_failure(&out, 1, "too small");
}

#[test]

fn meta_of_zeros_with_data_is_refused_by_the_core() {
    let s = Scratch::new();
    for mode in MODES {
        let out = s.dualfs(&[p("mount"), p(mode), &s.meta, &s.data, &s.mnt]);
        assert_one_line_failure(&out, 1, "cannot mount");
    }
}

#[test]

fn a_meta_superblock_with_a_data_device_of_zeros_is_not_a_pair() {
    let s = Scratch::new();
    s.write_meta_superblock(1, b"data.img");
    let out = s.dualfs(&[p("mount"), p("--foreground"), &s.meta, &s.mnt]);
    assert_one_line_failure(&out, 1, "cannot mount");
}

/// Passes with the core still `todo!()` (the daemon dies, the parent says so) and with the
/// core implemented (it refuses the pair): either way one line, exit 1, images untouched.
#[test]
fn a_detached_mount_that_dies_is_reported_by_the_parent() {
    let s = Scratch::new();
    s.write_meta_superblock(1, b"data.img");
    let out = s.dualfs(&[p("mount"), &s.meta, &s.mnt]);
    assert_one_line_failure(&out, 1, "");
}

#[test]
fn meta_that_is_a_data_device() {
    let s = Scratch::new();
    s.write_meta_superblock(2, b"");
    let out = s.dualfs(&[p("mount"), &s.meta, &s.mnt]);
    assert_one_line_failure(&out, 1, "is the data device of a DualFS");
}

#[test]
fn damaged_superblock() {
    let s = Scratch::new();
    s.write_meta_superblock(1, b"data.img");
    let mut image = fs::read(&s.meta).unwrap();
    image[1000] ^= 0xff;
    fs::write(&s.meta, image).unwrap();
    let out = s.dualfs(&[p("mount"), &s.meta, &s.mnt]);
    assert_one_line_failure(&out, 1, "checksum");
}

#[test]
fn recorded_data_device_missing() {
    let s = Scratch::new();
    s.write_meta_superblock(1, b"/nonexistent/dualfs-data.img");
    let out = s.dualfs(&[p("mount"), &s.meta, &s.mnt]);
    let line = assert_one_line_failure(&out, 1, "/nonexistent/dualfs-data.img");
    assert!(line.contains("give DATA"), "{line}");
}

#[test]
fn recorded_data_path_empty() {
    let s = Scratch::new();
    s.write_meta_superblock(1, b"");
    let out = s.dualfs(&[p("mount"), &s.meta, &s.mnt]);
    assert_one_line_failure(&out, 1, "give DATA");
}

#[test]
fn missing_mountpoint() {
    let s = Scratch::new();
    for mode in MODES {
        let out = s.dualfs(&[p("mount"), p(mode), &s.meta, &s.data, p("no-such-dir")]);
        assert_one_line_failure(
            &out,
            1,
            "mount point no-such-dir: No such file or directory",
        );
    }
}

#[test]
fn mountpoint_that_is_a_file() {
    let s = Scratch::new();
    let out = s.dualfs(&[p("mount"), &s.meta, &s.data, &s.data]);
    assert_one_line_failure(&out, 1, "is not a directory");
}

#[test]
fn meta_that_is_a_directory() {
    let s = Scratch::new();
    let out = s.dualfs(&[p("mount"), &s.mnt, &s.data, &s.mnt]);
    assert_one_line_failure(&out, 1, "is not an image file or a block device");
}

#[test]
fn same_image_for_meta_and_data() {
    let s = Scratch::new();
    let out = s.dualfs(&[p("mount"), &s.meta, p("./meta.img"), &s.mnt]);
    assert_one_line_failure(&out, 1, "both the metadata and the data device");
}

#[test]
fn device_in_use() {
    let s = Scratch::new();
    // Hold the lock a mounted DualFS would hold.
    let holder = File::open(&s.meta).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    let locked = unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0);
    for mode in MODES {
        let out = s.dualfs(&[p("mount"), p(mode), &s.meta, &s.data, &s.mnt]);
        assert_one_line_failure(&out, 1, "meta.img is in use");
    }
    drop(holder);
}

#[test]
fn unwritable_log_file() {
    let s = Scratch::new();
    let out = s.dualfs(&[
        p("mount"),
        p("--log-file"),
        p("no-such-dir/dualfs.log"),
        &s.meta,
        &s.data,
        &s.mnt,
    ]);
    assert_one_line_failure(&out, 1, "log file");
}

#[test]
fn unknown_option_is_a_usage_error() {
    let s = Scratch::new();
    let out = s.dualfs(&[
        p("mount"),
        p("-o"),
        p("ro,frobnicate"),
        &s.meta,
        &s.data,
        &s.mnt,
    ]);
    assert_one_line_failure(&out, 2, "unknown mount option 'frobnicate'");
}

#[test]
fn malformed_option_values_are_usage_errors() {
    let s = Scratch::new();
    for bad in ["cache_size=lots", "ttl", "flush_interval=0", "ro=yes"] {
        let out = s.dualfs(&[p("mount"), p("-o"), p(bad), &s.meta, &s.data, &s.mnt]);
        assert_one_line_failure(&out, 2, "");
    }
}

#[test]
fn wrong_number_of_paths_is_a_usage_error_that_names_what_is_missing() {
    let s = Scratch::new();
    let usage = "Usage: dualfs mount [OPTIONS] <META> [DATA] <MOUNTPOINT>";
    let cases: [(Vec<&Path>, &[&str]); 3] = [
        (
            vec![&s.meta],
            &["required arguments were not provided", "<MOUNTPOINT>"],
        ),
        (
            vec![],
            &[
                "required arguments were not provided",
                "<META>",
                "<MOUNTPOINT>",
            ],
        ),
        (
            vec![&s.meta, &s.data, &s.mnt, &s.mnt],
            &["unexpected argument"],
        ),
    ];
    for (paths, expected) in cases {
        let mut args = vec![p("mount")];
        args.extend(paths.iter().copied());
        let out = s.dualfs(&args);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("error: "), "{stderr}");
        for e in expected.iter().chain([&usage]) {
            assert!(stderr.contains(e), "{args:?}: {stderr:?} lacks {e:?}");
        }
    }
}

/// mount.fuse3 runs `dualfs META MOUNTPOINT -o OPTIONS`: that is `dualfs mount`.
#[test]
fn the_mount_fuse3_form_is_a_mount() {
    let s = Scratch::new();
    let out = s.dualfs(&[&s.meta, &s.mnt, p("-o"), p("rw,dev,suid")]);
    assert_one_line_failure(&out, 1, "not a DualFS device");
    let out = s.dualfs(&[&s.meta, &s.mnt, p("-o"), p("frobnicate")]);
    assert_one_line_failure(&out, 2, "unknown mount option 'frobnicate'");
    // A mistyped subcommand is still clap's business.
    let out = s.dualfs(&[p("mout")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand 'mout'"));
}

/// `/sbin/mount.dualfs META MOUNTPOINT [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]`, as mount(8)
/// runs it (the program named mount.dualfs).
#[test]
fn the_mount_helper_form() {
    let s = Scratch::new();
    let helper = s.root.join("mount.dualfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_dualfs"), &helper).unwrap();
    let run = |args: &[&Path]| {
        let before = s.images();
        let out = Command::new(&helper)
            .args(args)
            .current_dir(&s.root)
            .output()
            .unwrap();
        assert!(s.images() == before);
        out
    };
    assert_one_line_failure(
        &run(&[&s.meta, &s.mnt, p("-o"), p("rw")]),
        1,
        "not a DualFS device",
    );
    assert_one_line_failure(&run(&[&s.meta, &s.mnt, p("-N"), p("1")]), 2, "-N");
    assert_one_line_failure(&run(&[&s.meta, &s.mnt, p("-t"), p("ext4")]), 2, "-t ext4");
    // -f (fake) checks everything and mounts nothing.
    s.write_meta_superblock(1, b"data.img");
    let out = run(&[&s.meta, &s.mnt, p("-f"), p("-o"), p("defaults,nofail")]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(fs::read_dir(&s.mnt).unwrap().next().is_none());
    // Sloppy (-s) warns about unknown options instead of refusing them.
    let out = run(&[&s.meta, &s.mnt, p("-sf"), p("-o"), p("frobnicate")]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("frobnicate"));
    let out = run(&[&s.meta, &s.mnt, p("-f"), p("-o"), p("frobnicate")]);
    assert_one_line_failure(&out, 2, "unknown mount option 'frobnicate'");
    let out = run(&[&s.meta]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("<MOUNTPOINT>"));
}

#[test]
fn zero_threads_is_a_usage_error() {
    let s = Scratch::new();
    let out = s.dualfs(&[p("mount"), p("--threads=0"), &s.meta, &s.data, &s.mnt]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn umount_of_a_missing_path() {
    let s = Scratch::new();
    let out = s.dualfs(&[p("umount"), p("no-such-dir")]);
    assert_one_line_failure(&out, 1, "no-such-dir: No such file or directory");
}

#[test]
fn umount_of_a_directory_that_is_not_mounted() {
    let s = Scratch::new();
    let out = s.dualfs(&[p("umount"), &s.mnt]);
    assert_one_line_failure(&out, 1, "not a mount point");
}

#[test]
fn umount_refuses_what_is_not_fuse() {
    let s = Scratch::new();
    let out = s.dualfs(&[p("umount"), p("/")]);
    assert_one_line_failure(&out, 1, "is not a DualFS mount");
}

#[test]
fn closed_standard_streams_do_not_break_the_program() {
    use std::os::unix::process::CommandExt;
    let s = Scratch::new();
    // A failure inside the detached child, reported over the pipe, which must not land on a
    // descriptor that the child then points at /dev/null.
    let holder = File::open(&s.meta).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
    let before = s.images();
    let mut command = Command::new(env!("CARGO_BIN_EXE_dualfs"));
    command.args([Path::new("mount"), &s.meta, &s.data, &s.mnt]);
    // SAFETY: only close(2) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for fd in 0..=2 {
                libc::close(fd);
            }
            Ok(())
        });
    }
    let status = command.status().unwrap();
    assert_eq!(status.code(), Some(1));
    assert!(s.images() == before);
}

#[test]
fn help_explains_permissions_and_options() {
    let s = Scratch::new();
    let out = s.dualfs(&[p("mount"), p("--help")]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "default_permissions",
        "cache_size=SIZE",
        "checkpoint_interval",
        "writeback_cache",
        "--foreground",
        "<META> [DATA] <MOUNTPOINT>",
    ] {
        assert!(help.contains(expected), "--help lacks {expected}");
    }
}
