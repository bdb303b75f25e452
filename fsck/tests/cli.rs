//! The fsck-dualfs program: options, exit codes, what it writes and what it never writes, and
//! that a repair leaves a file system that checks clean and mounts.

mod support;

use dualfs::device::{FileDevice, OpenMode};
use support::*;

const CLEAN: i32 = 0;
const CORRECTED: i32 = 1;
const UNCORRECTED: i32 = 4;
const OPERATIONAL: i32 = 8;
const USAGE: i32 = 16;

#[track_caller]
fn expect(code: i32, (got, out): (i32, String)) -> String {
    assert_eq!(
        got, code,
        "exit code {got}, expected {code}; output:\n{out}"
    );
    out
}

#[test]
fn usage_errors_and_help() {
    expect(USAGE, fsck(&[]));
    expect(USAGE, fsck(&[&"--bogus", &"/nonexistent"]));
    expect(USAGE, fsck(&[&"-n", &"-y", &"/m"]));
    expect(USAGE, fsck(&[&"-n", &"-p", &"/m"]));
    expect(USAGE, fsck(&[&"-p", &"-y", &"/m"]));
    expect(USAGE, fsck(&[&"a", &"b", &"c"]));
    let help = expect(CLEAN, fsck(&[&"--help"]));
    for needle in ["-n", "-p", "-y", "-f", "-v", "Exit status", "META", "DATA"] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
    let version = expect(CLEAN, fsck(&[&"--version"]));
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
}

#[test]
fn operational_errors() {
    let out = expect(OPERATIONAL, fsck(&[&"-n", &"/nonexistent/meta.img"]));
    assert!(out.contains("/nonexistent/meta.img"), "{out}");
    // Not a DualFS, and no DATA to fall back on.
    let dir = tempfile::tempdir().unwrap();
    let zeros = dir.path().join("zeros.img");
    std::fs::File::create(&zeros)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let out = expect(OPERATIONAL, fsck(&[&"-n", &zeros]));
    assert!(out.contains("give the data device"), "{out}");
}

#[test]
fn clean_file_system() {
    let img = Images::new(small_tree);
    let before = img.digest();
    // Without -f: the glance says clean.
    let out = expect(CLEAN, fsck(&[&img.meta]));
    assert!(out.contains("clean"), "{out}");
    for mode in ["-n", "-p", "-a", "-y"] {
        expect(CLEAN, fsck(&[&mode, &img.meta]));
        let out = expect(CLEAN, fsck(&[&"-f", &mode, &img.meta]));
        assert!(!out.contains("error ["), "{mode}: {out}");
        let out = expect(CLEAN, fsck(&[&"-f", &"-v", &mode, &img.meta, &img.data]));
        // The log after the clean checkpoint simply ends: nothing there is damage. (Preening
        // prints one line, notes or not.)
        if !["-p", "-a"].contains(&mode) {
            assert!(
                out.contains("roll-forward: end of the log"),
                "{mode}: {out}"
            );
        }
        assert!(!out.contains("corrupt"), "{mode}: {out}");
    }
    assert!(before == img.digest(), "a clean file system was written to");
}

#[test]
fn check_only_never_writes() {
    let img = Images::new(small_tree);
    let ino = img.ino("a/b/big");
    img.rewrite_inode(ino, |d| d.nlink = 7);
    let before = img.digest();
    let out = expect(UNCORRECTED, fsck(&[&"-f", &"-n", &img.meta]));
    assert!(
        out.contains(&format!("inode {ino} has 7 links but 2 entries name it")),
        "{out}"
    );
    // Without -f too: a consistent lie leaves the checkpoint clean, the glance sees nothing.
    expect(CLEAN, fsck(&[&"-n", &img.meta]));
    // Without a terminal, no option means: check, and refuse to repair.
    let out = expect(OPERATIONAL, fsck(&[&"-f", &img.meta]));
    assert!(out.contains("need a terminal"), "{out}");
    assert!(before == img.digest(), "-n wrote to the devices");
}

#[test]
fn preen_repairs_what_is_safe_and_a_second_run_is_clean() {
    let img = Images::new(small_tree);
    let ino = img.ino("a/b/big");
    img.rewrite_inode(ino, |d| d.nlink = 7);
    let out = expect(CORRECTED, fsck(&[&"-f", &"-p", &img.meta]));
    assert!(
        out.contains(&format!("inode {ino}: link count 7 -> 2")),
        "{out}"
    );
    expect(CLEAN, fsck(&[&"-f", &"-n", &img.meta]));
    assert_eq!(img.inode(ino).nlink, 2);
    // It mounts, and the file reads back whole.
    let fs = img.mount();
    let data = fs.read(ino, 0, 0, 40 * 4096).unwrap();
    assert_eq!(data.len(), 40 * 4096);
    fs.unmount().unwrap();
    expect(CLEAN, fsck(&[&"-f", &"-n", &img.meta]));
}

#[test]
fn preen_leaves_what_gives_something_up() {
    let img = Images::new(small_tree);
    let (big, two) = (img.ino("a/b/big"), img.ino("a/two"));
    let shared = img.inode(big).direct[0];
    img.rewrite_inode(two, |d| d.direct[0] = shared);
    let out = fsck(&[&"-f", &"-p", &img.meta]);
    assert_eq!(out.0 & UNCORRECTED, UNCORRECTED, "{}", out.1);
    assert!(out.1.contains("UNEXPECTED INCONSISTENCY"), "{}", out.1);
    assert!(out.1.contains("not repaired"), "{}", out.1);
    expect(UNCORRECTED, fsck(&[&"-f", &"-n", &img.meta]));
    // -y clears the second use of the block.
    let out = expect(CORRECTED, fsck(&[&"-f", &"-y", &img.meta]));
    assert!(out.contains("FILE SYSTEM WAS MODIFIED"), "{out}");
    expect(CLEAN, fsck(&[&"-f", &"-n", &img.meta]));
    assert_eq!(img.inode(big.min(two)).direct[0], shared);
    assert_eq!(img.inode(big.max(two)).direct[0], 0);
    img.mount().unmount().unwrap();
}

#[test]
fn yes_rebuilds_a_damaged_directory_tree() {
    let img = Images::new(|fs| {
        for d in 0..6 {
            let dir = fs
                .mkdir(&U, ROOT, format!("dir{d}").as_bytes(), 0o755)
                .unwrap()
                .ino;
            for f in 0..150 {
                let (attr, fh) = fs
                    .create(
                        &U,
                        dir,
                        format!("a-longer-file-name-{f:03}").as_bytes(),
                        0o644,
                        libc::O_WRONLY,
                    )
                    .unwrap();
                fs.write(attr.ino, fh, 0, b"x").unwrap();
                fs.release(attr.ino, fh).unwrap();
            }
        }
    });
    let held = zero_a_leaf_node(&img.meta);
    let out = expect(UNCORRECTED, fsck(&[&"-f", &"-n", &img.meta]));
    assert!(out.contains("the directory tree is damaged"), "{out}");
    // -p does not: the names in the lost node would be gone for good.
    let before = img.digest();
    expect(UNCORRECTED, fsck(&[&"-f", &"-p", &img.meta]));
    assert!(before == img.digest(), "-p wrote to the devices");
    let out = expect(CORRECTED, fsck(&[&"-f", &"-y", &img.meta]));
    assert!(
        out.contains("the directory tree is rebuilt from the"),
        "{out}"
    );
    assert!(out.contains("reconnected as /lost+found/#"), "{out}");
    expect(CLEAN, fsck(&[&"-f", &"-n", &img.meta]));
    // Every file has a name again: the ones the lost leaf named are under /lost+found.
    let fs = img.mount();
    let lf = fs.lookup(ROOT, b"lost+found").unwrap().ino;
    let mut reconnected = 0;
    fs.readdir(lf, 0, &mut |e| {
        reconnected += (e.name != b"." && e.name != b"..") as usize;
        true
    })
    .unwrap();
    assert!(
        reconnected > 0 && reconnected <= held,
        "{reconnected} of {held}"
    );
    fs.unmount().unwrap();
}

#[test]
fn yes_reconnects_an_unreachable_file_under_lost_found() {
    // A file unlinked while open stays as an orphan; give it a link count back and it is an
    // allocated file nothing names.
    let ino = std::cell::Cell::new(0);
    let img = Images::new(|fs| {
        small_tree(fs);
        let (attr, fh) = fs.create(&U, ROOT, b"open", 0o644, libc::O_RDWR).unwrap();
        fs.write(attr.ino, fh, 0, &[7u8; 5000]).unwrap();
        fs.unlink(&U, ROOT, b"open").unwrap();
        ino.set(attr.ino);
    });
    let ino = ino.get();
    img.rewrite_inode(ino, |d| d.nlink = 1);
    let out = expect(UNCORRECTED, fsck(&[&"-f", &"-n", &img.meta]));
    assert!(out.contains("is not reachable from the root"), "{out}");
    let out = expect(CORRECTED, fsck(&[&"-f", &"-y", &img.meta, &img.data]));
    assert!(
        out.contains(&format!("reconnected as /lost+found/#{ino}")),
        "{out}"
    );
    expect(CLEAN, fsck(&[&"-f", &"-n", &img.meta]));
    assert_eq!(img.ino(&format!("lost+found/#{ino}")), ino);
    let fs = img.mount();
    assert_eq!(fs.read(ino, 0, 0, 10000).unwrap(), vec![7u8; 5000]);
    fs.unmount().unwrap();
}

#[test]
fn repair_of_a_file_system_in_use_is_refused() {
    let img = Images::new(small_tree);
    img.rewrite_inode(img.ino("one"), |d| d.nlink = 4);
    // Hold the metadata image the way a mount does.
    let held = FileDevice::open(
        &img.meta,
        OpenMode {
            read_only: false,
            exclusive: true,
            ..OpenMode::default()
        },
    )
    .unwrap();
    let before = img.digest();
    for mode in ["-p", "-y"] {
        let out = expect(OPERATIONAL, fsck(&[&"-f", &mode, &img.meta]));
        assert!(out.contains("refusing to repair"), "{out}");
    }
    // A check reads it anyway, and says so.
    let out = expect(UNCORRECTED, fsck(&[&"-f", &"-n", &img.meta]));
    assert!(out.contains("in use"), "{out}");
    assert!(before == img.digest());
    drop(held);
    expect(CORRECTED, fsck(&[&"-f", &"-y", &img.meta]));
}

#[test]
fn devices_of_two_file_systems() {
    let a = Images::new(small_tree);
    let b = Images::new(|_| {});
    let before = (a.digest(), b.digest());
    let out = expect(UNCORRECTED, fsck(&[&"-f", &"-n", &a.meta, &b.data]));
    assert!(out.contains("not a pair"), "{out}");
    let out = expect(UNCORRECTED, fsck(&[&"-f", &"-y", &a.meta, &b.data]));
    assert!(out.contains("not the two halves"), "{out}");
    assert!(
        before == (a.digest(), b.digest()),
        "a mismatched pair was written to"
    );
    expect(OPERATIONAL, fsck(&[&"-n", &a.meta, &a.meta]));
}

#[test]
fn installed_as_fsck_dot_dualfs_and_run_by_fsck() {
    let img = Images::new(small_tree);
    let bin = img.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let link = bin.join("fsck.dualfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_fsck-dualfs"), &link).unwrap();
    let out = expect(CLEAN, run(&link, &[&"-f", &"-n", &img.meta]));
    assert!(out.contains("fsck.dualfs"), "named after argv[0]: {out}");
    // Through util-linux fsck(8), which finds fsck.<type> on the PATH.
    if std::path::Path::new("/sbin/fsck").exists()
        || std::path::Path::new("/usr/sbin/fsck").exists()
    {
        img.rewrite_inode(img.ino("one"), |d| d.nlink = 4);
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let fsck8 = |args: &[&str]| {
            let out = std::process::Command::new("fsck")
                .args(args)
                .arg(&img.meta)
                .env("PATH", &path)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr),
            )
        };
        expect(UNCORRECTED, fsck8(&["-t", "dualfs", "-f", "-n"]));
        expect(CORRECTED, fsck8(&["-t", "dualfs", "-f", "-a"]));
        expect(CLEAN, fsck8(&["-t", "dualfs", "-a"]));
    }
}

/// A daemon died with operations only its intent log holds: a check says so (the devices are
/// consistent without them), a repair refuses until a mount has replayed them.
#[test]
fn a_pending_intent_log_is_named_and_blocks_repairs() {
    use dualfs::fs::{Fs, MountOptions};
    let img = Images::new(small_tree);
    let intent = std::path::Path::new(dualfs::intent::DEFAULT_INTENT_DIR);
    let opts = MountOptions {
        intent_dir: Some(intent.to_path_buf()),
        ..MountOptions::default()
    };
    let open = |p: &std::path::Path| -> std::sync::Arc<dyn dualfs::device::BlockDevice> {
        std::sync::Arc::new(FileDevice::open(p, OpenMode::default()).unwrap())
    };
    let fs = Fs::mount(open(&img.meta), open(&img.data), opts.clone()).unwrap();
    let root = dualfs::format::ROOT_INO;
    fs.mkdir(
        &dualfs::fs::Caller::ROOT,
        root,
        b"only-in-the-intent-log",
        0o755,
    )
    .unwrap();
    fs.shutdown(); // the daemon dies: its intent log stays
    drop(fs);
    let out = expect(CLEAN, fsck(&[&"-n", &"-f", &img.meta]));
    assert!(out.contains("intent log") && out.contains("mount"), "{out}");
    let out = expect(OPERATIONAL, fsck(&[&"-p", &img.meta]));
    assert!(out.contains("nothing was repaired"), "{out}");
    // A mount replays it and removes it; then fsck has nothing to say about it.
    let fs = Fs::mount(open(&img.meta), open(&img.data), opts).unwrap();
    assert!(fs.lookup(root, b"only-in-the-intent-log").is_ok());
    fs.unmount().unwrap();
    let out = expect(CLEAN, fsck(&[&"-p", &img.meta]));
    assert!(!out.contains("intent log"), "{out}");
}
