//! DualFS through mount(8): `mount -t fuse.dualfs` (mount.fuse3 runs `dualfs META MNT -o
//! OPTS`), `mount -t dualfs` (the /sbin/mount.dualfs helper), and /etc/fstab lines of both
//! types mounted with `mount -T FSTAB MNT` and `mount -a -T FSTAB`, with the options fstab and
//! systemd put there. The kernel type is `fuse.dualfs` and the source is META; `umount`
//! (util-linux) ends the daemon cleanly, and returns only once the daemon wrote its final
//! checkpoint (through the helper /sbin/umount.fuse.dualfs), also for a mount made by
//! `dualfs mount`; `umount -l` stays lazy; the checker is clean afterwards. `mount -o
//! remount,ro` and `remount,rw` turn a mount read-only (everything durable) and back, and
//! refuse anything else.
//!
//! Needs util-linux's mount and Debian's fuse3 (mount.fuse3); `.ci/run` installs them.
//! mount(8) and umount(8) look for their helpers in /sbin and run them without PATH, so each
//! test links /sbin/mount.dualfs, /sbin/umount.fuse.dualfs and /usr/local/sbin/dualfs to this
//! build for its duration (and puts back whatever was there), as scripts/up.sh installs them
//! for good.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A formatted pair of images and an empty mount point, in a temporary directory. Dropping
/// it unmounts what is still mounted (lazily) and kills a daemon left behind.
struct Images {
    _dir: tempfile::TempDir,
    root: PathBuf,
    meta: PathBuf,
    data: PathBuf,
    mnt: PathBuf,
}

impl Images {
    fn new() -> Images {
        user::require_root();
        let dir = tempfile::Builder::new()
            .prefix("dualfs-fstab-")
            .tempdir()
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (meta, data, mnt) = (
            root.join("meta.img"),
            root.join("data.img"),
            root.join("mnt"),
        );
        make_formatted_pair(&meta, &data, 64 << 20, 256 << 20);
        fs::create_dir(&mnt).unwrap();
        Images {
            _dir: dir,
            root,
            meta,
            data,
            mnt,
        }
    }

    fn meta(&self) -> &str {
        self.meta.to_str().unwrap()
    }
    fn mnt(&self) -> &str {
        self.mnt.to_str().unwrap()
    }

    /// Write an fstab file of `lines` beside the images.
    fn fstab(&self, name: &str, lines: &[String]) -> PathBuf {
        let path = self.root.join(name);
        fs::write(&path, lines.join("\n") + "\n").unwrap();
        path
    }

    /// The mount is there, with the kernel type `fuse.dualfs` and META as the source; a file
    /// written on it reads back.
    fn assert_mounted(&self) {
        let table = fs::read_to_string("/proc/self/mounts").unwrap();
        let line = table
            .lines()
            .rfind(|l| l.split(' ').nth(1) == Some(self.mnt()))
            .unwrap_or_else(|| panic!("{} is not in /proc/self/mounts", self.mnt()));
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[2], "fuse.dualfs", "{line}");
        assert_eq!(fields[0], self.meta(), "{line}");
        fs::write(self.mnt.join("hello"), b"mounted by mount(8)").unwrap();
        assert_eq!(
            fs::read(self.mnt.join("hello")).unwrap(),
            b"mounted by mount(8)"
        );
    }

    /// `umount MNT`, wait for the daemon to exit after its final checkpoint (its pid file
    /// goes only then), run the checker.
    fn umount_and_check(&self) {
        self.unmount_and_check(Command::new("umount").arg(&self.mnt));
    }

    /// `umount_and_check` with another unmount command (`dualfs umount MNT`).
    fn unmount_and_check(&self, unmount: &mut Command) {
        let pid_file = dualfs::run_dir::run_file_path(&self.mnt, "pid");
        let pid: i32 = fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
            .trim()
            .parse()
            .unwrap();
        run_ok(unmount);
        let start = Instant::now();
        while process_running(pid) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "daemon {pid} still running a minute after umount"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !pid_file.exists(),
            "the daemon exited without a clean final checkpoint (its pid file is left)"
        );
        if let Err(report) = check_pair(&self.meta, &self.data) {
            panic!("{report}");
        }
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        if !is_mounted(&self.mnt) {
            return;
        }
        let pid_file = dualfs::run_dir::run_file_path(&self.mnt, "pid");
        let pid = fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok());
        // Without the helper (-i): the cleanup must not depend on the build under test.
        let _ = Command::new("umount")
            .args(["-i", "-l"])
            .arg(&self.mnt)
            .status();
        if let Some(pid) = pid {
            std::thread::sleep(Duration::from_secs(2));
            if process_running(pid) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// The supervisor of worker `pid`, when the mount is supervised: its parent, if that is a
/// `dualfs` process.
fn supervisor_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...: the fields after the last ')'.
    let ppid: i32 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let comm = fs::read_to_string(format!("/proc/{ppid}/comm")).ok()?;
    (comm.trim() == "dualfs").then_some(ppid)
}

/// Is `pid` alive? The daemon is not our child (mount(8) started it), so once dead it may stay
/// a zombie. A zombie is over only when it is its last thread: the leader of a threaded
/// process shows as a zombie as soon as it exits itself, while its other threads, which
/// share its descriptors (and the images' flock), may still be exiting.
fn process_running(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            let threads = fs::read_dir(format!("/proc/{pid}/task"))
                .map(|d| d.count())
                .unwrap_or(0);
            !zombie || threads > 1
        }
        Err(_) => false,
    }
}

/// mount(8). It runs helpers without PATH: mount.fuse3's `/bin/sh -c dualfs ...` finds
/// `dualfs` on the shell's default path (/usr/local/sbin first), where `SystemLinks` puts it.
fn mount8(args: &[&str]) -> Output {
    Command::new("mount").args(args).output().unwrap()
}

#[track_caller]
fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where mount(8) and umount(8) find this build while the guard lives (one test at a time):
/// the helpers /sbin/mount.dualfs (type dualfs) and /sbin/umount.fuse.dualfs, and
/// /usr/local/sbin/dualfs, first on the default path of mount.fuse3's shell (type
/// fuse.dualfs). Whatever was there is put back.
struct SystemLinks {
    links: Vec<(PathBuf, Option<PathBuf>)>,
    _one_at_a_time: MutexGuard<'static, ()>,
}

const LINKS: [&str; 3] = [
    "/sbin/mount.dualfs",
    "/sbin/umount.fuse.dualfs",
    "/usr/local/sbin/dualfs",
];

impl SystemLinks {
    fn install() -> SystemLinks {
        static LOCK: Mutex<()> = Mutex::new(());
        let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut links = Vec::new();
        for link in LINKS {
            let link = PathBuf::from(link);
            fs::create_dir_all(link.parent().unwrap()).unwrap();
            let backup = link.symlink_metadata().is_ok().then(|| {
                let name = link.file_name().unwrap().to_string_lossy();
                let backup = link.with_file_name(format!(".{name}.test-{}", std::process::id()));
                fs::rename(&link, &backup).unwrap();
                backup
            });
            symlink(dualfs_bin(), &link).unwrap();
            links.push((link, backup));
        }
        SystemLinks {
            links,
            _one_at_a_time: guard,
        }
    }
}

impl Drop for SystemLinks {
    fn drop(&mut self) {
        for (link, backup) in &self.links {
            let _ = fs::remove_file(link);
            if let Some(backup) = backup {
                let _ = fs::rename(backup, link);
            }
        }
    }
}

/// What fstab lines usually carry: mount(8) keeps some for itself, passes others on.
const FSTAB_OPTIONS: &str = "defaults,nofail,_netdev,x-systemd.automount,comment=dualfs-test";

/// An fstab of one line `META MNT TYPE OPTIONS 0 0`, mounted with `mount -T FSTAB MNT`.
fn mount_from_fstab(img: &Images, fs_type: &str, options: &str) {
    let line = format!("{} {} {fs_type} {options} 0 0", img.meta(), img.mnt());
    let fstab = img.fstab("fstab", &[line]);
    let out = mount8(&["-T", fstab.to_str().unwrap(), img.mnt()]);
    assert_success(&out, &format!("mount -T FSTAB MNT ({fs_type})"));
    img.assert_mounted();
}

#[test]
fn fstab_line_of_type_fuse_dualfs_mounts_with_mount_mountpoint() {
    let _links = SystemLinks::install();
    let img = Images::new();
    mount_from_fstab(&img, "fuse.dualfs", FSTAB_OPTIONS);
    img.umount_and_check();
}

/// The lines mount(8) wrote in libmount's userspace table (/run/mount/utab) for mount point
/// `mnt` (not the daemon's own line, which makes umount(8) run the helper).
fn utab_lines(mnt: &str) -> Vec<String> {
    let target = format!("TARGET={mnt}");
    fs::read_to_string("/run/mount/utab")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').any(|f| f == target) && !l.contains("OPTS=x-dualfs.daemon="))
        .map(str::to_string)
        .collect()
}

/// mount(8) records the options the kernel does not keep (`_netdev`, `nofail`, `x-*`) in
/// /run/mount/utab; umount(8) drops the line, and so must `dualfs umount`, which unmounts
/// with umount2(2) itself (it left the line behind before).
#[test]
fn dualfs_umount_drops_the_mounts_line_from_libmounts_table() {
    /// Leaves no line of its mount point behind, also when the test fails.
    struct UtabCleanup(String);
    impl Drop for UtabCleanup {
        fn drop(&mut self) {
            let target = format!("TARGET={}", self.0);
            if let Ok(text) = fs::read_to_string("/run/mount/utab") {
                let kept: String = text
                    .lines()
                    .filter(|l| !l.split(' ').any(|f| f == target))
                    .map(|l| format!("{l}\n"))
                    .collect();
                if kept.len() != text.len() {
                    let _ = fs::write("/run/mount/utab", kept);
                }
            }
        }
    }
    let _links = SystemLinks::install();
    for fs_type in ["fuse.dualfs", "dualfs"] {
        let img = Images::new();
        let _cleanup = UtabCleanup(img.mnt().to_string());
        mount_from_fstab(&img, fs_type, FSTAB_OPTIONS);
        let lines = utab_lines(img.mnt());
        assert_eq!(
            lines.len(),
            1,
            "{fs_type}: mount(8) wrote no utab line: {lines:?}"
        );
        assert!(lines[0].contains("_netdev"), "{fs_type}: {}", lines[0]);
        img.unmount_and_check(Command::new(dualfs_bin()).args(["umount", img.mnt()]));
        assert_eq!(
            utab_lines(img.mnt()),
            Vec::<String>::new(),
            "{fs_type}: dualfs umount left the mount's line in /run/mount/utab"
        );
    }
}

#[test]
fn fstab_line_of_type_dualfs_mounts_with_mount_mountpoint() {
    let _links = SystemLinks::install();
    let img = Images::new();
    mount_from_fstab(&img, "dualfs", &format!("{FSTAB_OPTIONS},user,noexec"));
    // `user` implies noexec, nosuid, nodev in mount(8); they reach the kernel.
    let options = fs::read_to_string("/proc/self/mounts").unwrap();
    let line = options.lines().rfind(|l| l.contains(img.mnt())).unwrap();
    for flag in ["noexec", "nosuid", "nodev"] {
        assert!(line.contains(flag), "{flag} missing: {line}");
    }
    img.umount_and_check();
}

#[test]
fn mount_all_mounts_both_types_and_skips_noauto() {
    let _links = SystemLinks::install();
    let (a, b, c) = (Images::new(), Images::new(), Images::new());
    let fstab = a.fstab(
        "fstab",
        &[
            "# DualFS, both spellings of the type".to_string(),
            format!("{} {} fuse.dualfs {FSTAB_OPTIONS} 0 0", a.meta(), a.mnt()),
            format!("{} {} dualfs defaults 0 0", b.meta(), b.mnt()),
            format!("{} {} dualfs noauto 0 0", c.meta(), c.mnt()),
        ],
    );
    let out = mount8(&["-a", "-T", fstab.to_str().unwrap()]);
    assert_success(&out, "mount -a -T FSTAB");
    a.assert_mounted();
    b.assert_mounted();
    assert!(!is_mounted(&c.mnt), "a noauto line was mounted by mount -a");
    a.umount_and_check();
    b.umount_and_check();
}

#[test]
fn mount_t_both_types_with_options() {
    let _links = SystemLinks::install();
    let img = Images::new();
    let out = mount8(&[
        "-t",
        "fuse.dualfs",
        img.meta(),
        img.mnt(),
        "-o",
        "noatime,nodev",
    ]);
    assert_success(&out, "mount -t fuse.dualfs");
    img.assert_mounted();
    img.umount_and_check();

    let out = mount8(&["-t", "dualfs", img.meta(), img.mnt(), "-o", "ro"]);
    assert_success(&out, "mount -t dualfs -o ro");
    let e = fs::write(img.mnt.join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert_eq!(
        fs::read(img.mnt.join("hello")).unwrap(),
        b"mounted by mount(8)"
    );
    img.umount_and_check();
}

#[test]
fn mount_refuses_unknown_options_unless_sloppy() {
    let _links = SystemLinks::install();
    let img = Images::new();
    let out = mount8(&["-t", "dualfs", img.meta(), img.mnt(), "-o", "frobnicate"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown mount option 'frobnicate'"),
        "{stderr}"
    );
    assert!(!is_mounted(&img.mnt));
    let out = mount8(&[
        "-s",
        "-t",
        "dualfs",
        img.meta(),
        img.mnt(),
        "-o",
        "frobnicate",
    ]);
    assert_success(&out, "mount -s -t dualfs -o frobnicate");
    img.assert_mounted();
    img.umount_and_check();
}

/// The pid file of the daemon serving `img`'s mount point, and the pid in it.
fn daemon_of(img: &Images) -> (PathBuf, i32) {
    let pid_file = dualfs::run_dir::run_file_path(&img.mnt, "pid");
    let pid = fs::read_to_string(&pid_file)
        .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
        .trim()
        .parse()
        .unwrap();
    (pid_file, pid)
}

/// Files written through the mount (no fsync): the final checkpoint has them to write.
fn write_files(img: &Images, round: usize, n: usize) {
    let dir = img.mnt.join(format!("round{round}"));
    fs::create_dir(&dir).unwrap();
    for i in 0..n {
        fs::write(dir.join(format!("f{i}")), content(i as u64, 4096 + i)).unwrap();
    }
}

fn fsck_bin() -> PathBuf {
    let fsck = dualfs_bin().with_file_name("fsck-dualfs");
    assert!(
        fsck.is_file(),
        "{} missing: build the workspace first (cargo build --workspace --release --bins)",
        fsck.display()
    );
    fsck
}

/// A plain `umount MNT` returns only once the daemon wrote its final checkpoint and let go of
/// the images, as for a kernel file system (xfstests' generic/524 mounts again at once), also
/// for a mount made by `dualfs mount` rather than mount(8). Before the helper, umount returned
/// first and the next mount failed with "in use".
#[test]
fn umount_returns_after_the_final_checkpoint_so_the_images_mount_again_at_once() {
    let _links = SystemLinks::install();
    let img = Images::new();
    for round in 0..10 {
        let out = Command::new(dualfs_bin())
            .args(["mount", img.meta(), img.mnt()])
            .output()
            .unwrap();
        assert_success(
            &out,
            &format!("round {round}: dualfs mount right after umount"),
        );
        write_files(&img, round, 200);
        let (pid_file, pid) = daemon_of(&img);
        assert_success(
            &Command::new("umount").arg(&img.mnt).output().unwrap(),
            &format!("round {round}: umount"),
        );
        assert!(
            !process_running(pid),
            "round {round}: umount returned while the daemon (pid {pid}) was still running"
        );
        assert!(
            !pid_file.exists(),
            "round {round}: the daemon exited without a clean final checkpoint"
        );
    }
    if let Err(report) = check_pair(&img.meta, &img.data) {
        panic!("{report}");
    }
}

/// `umount MNT && fsck.dualfs -n META`: the check finds the images free and clean, not "in
/// use" by a daemon still writing its final checkpoint.
#[test]
fn fsck_right_after_umount_finds_the_file_system_clean() {
    let _links = SystemLinks::install();
    let img = Images::new();
    assert_success(
        &mount8(&["-t", "dualfs", img.meta(), img.mnt()]),
        "mount -t dualfs",
    );
    write_files(&img, 0, 500);
    assert_success(
        &Command::new("umount").arg(&img.mnt).output().unwrap(),
        "umount",
    );
    let out = Command::new(fsck_bin())
        .args(["-n", img.meta()])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.contains("clean") && !said.contains("in use"),
        "fsck-dualfs -n right after umount: {}\n{said}",
        out.status
    );
}

/// `umount -l` goes through the helper too and keeps its meaning: the mount leaves the tree
/// at once, the daemon serves the file still open and ends (final checkpoint) at its close.
#[test]
fn umount_lazy_detaches_at_once_and_the_daemon_ends_with_its_last_user() {
    let _links = SystemLinks::install();
    let img = Images::new();
    let out = Command::new(dualfs_bin())
        .args(["mount", img.meta(), img.mnt()])
        .output()
        .unwrap();
    assert_success(&out, "dualfs mount");
    fs::write(img.mnt.join("held"), b"still readable").unwrap();
    let mut held = fs::File::open(img.mnt.join("held")).unwrap();
    let (pid_file, pid) = daemon_of(&img);
    assert_success(
        &Command::new("umount")
            .args(["-l", img.mnt()])
            .output()
            .unwrap(),
        "umount -l of a busy mount",
    );
    assert!(
        !is_mounted(&img.mnt),
        "umount -l left the mount in the tree"
    );
    assert!(
        process_running(pid),
        "the daemon ended while a file on the mount was still open"
    );
    let mut text = String::new();
    std::io::Read::read_to_string(&mut held, &mut text).unwrap();
    assert_eq!(text, "still readable");
    drop(held);
    let start = Instant::now();
    while process_running(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the daemon (pid {pid}) still runs a minute after its last user left"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !pid_file.exists(),
        "no clean final checkpoint after umount -l"
    );
    if let Err(report) = check_pair(&img.meta, &img.data) {
        panic!("{report}");
    }
}

/// Is the mount on `img` read-only, as /proc/self/mountinfo shows it?
fn mounted_read_only(img: &Images) -> bool {
    let table = dualfs::mountinfo::read().unwrap();
    dualfs::mountinfo::topmost_at(&table, &img.mnt)
        .expect("mounted")
        .is_read_only()
}

/// `mount -o remount,ro` turns a mount read-only with everything on the devices (as `dualfs
/// sync` would have it, and a clean checkpoint: a daemon killed then loses nothing);
/// `remount,rw` turns it back.
#[test]
fn remount_ro_makes_everything_durable_and_remount_rw_undoes_it() {
    let _links = SystemLinks::install();
    let img = Images::new();
    assert_success(
        &mount8(&["-t", "fuse.dualfs", img.meta(), img.mnt()]),
        "mount -t fuse.dualfs",
    );
    fs::write(img.mnt.join("before"), b"written before remount,ro").unwrap();
    assert_success(
        &mount8(&["-o", "remount,ro", img.mnt()]),
        "mount -o remount,ro",
    );
    assert!(mounted_read_only(&img));
    for write in [img.mnt.join("new"), img.mnt.join("before")] {
        let e = fs::write(&write, b"x").unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EROFS),
            "{}: {e}",
            write.display()
        );
    }
    assert_success(
        &mount8(&["-o", "remount,rw", img.mnt()]),
        "mount -o remount,rw",
    );
    assert!(!mounted_read_only(&img));
    fs::write(img.mnt.join("after"), b"written after remount,rw").unwrap();
    assert_success(
        &mount8(&["-o", "remount,ro", img.mnt()]),
        "mount -o remount,ro (again)",
    );

    // Nothing is left to write: the daemon's death loses nothing, and needs no recovery.
    // (The whole daemon: a supervisor would replace a worker killed alone.)
    let (_, pid) = daemon_of(&img);
    unsafe { libc::kill(supervisor_of(pid).unwrap_or(pid), libc::SIGKILL) };
    while process_running(pid) {
        std::thread::sleep(Duration::from_millis(10));
    }
    sys::umount2(&img.mnt, libc::MNT_DETACH).unwrap();
    if let Err(report) = check_pair(&img.meta, &img.data) {
        panic!("after remount,ro and kill -9: {report}");
    }
    let info = run_ok(Command::new(dualfs_bin()).args(["info", img.meta()]));
    assert!(
        info.lines()
            .any(|l| l.starts_with("State") && l.ends_with("clean")),
        "{info}"
    );
    assert_success(
        &mount8(&["-t", "fuse.dualfs", img.meta(), img.mnt()]),
        "mount again",
    );
    assert_eq!(
        fs::read(img.mnt.join("before")).unwrap(),
        b"written before remount,ro"
    );
    assert_eq!(
        fs::read(img.mnt.join("after")).unwrap(),
        b"written after remount,rw"
    );
    img.umount_and_check();
}

/// What a remount cannot change is refused in one line, the mount left as it was: another
/// option than ro/rw, and read-write for a mount made read-only (its devices are open
/// read-only, and the kernel opens its files without DualFS).
#[test]
fn remount_refuses_what_it_cannot_change_and_leaves_the_mount_as_it_was() {
    let _links = SystemLinks::install();
    let img = Images::new();
    let refused = |args: &[&str], expected: &str| {
        let out = mount8(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "mount {args:?} was not refused");
        assert!(
            stderr.contains(expected) && stderr.trim_end().lines().count() == 1,
            "mount {args:?}: {stderr}"
        );
    };
    assert_success(
        &mount8(&["-t", "fuse.dualfs", img.meta(), img.mnt()]),
        "mount -t fuse.dualfs",
    );
    refused(
        &["-o", "remount,ro,noatime", img.mnt()],
        "noatime would change",
    );
    assert!(!mounted_read_only(&img));
    fs::write(img.mnt.join("still-rw"), b"x").unwrap();
    img.umount_and_check();

    assert_success(
        &mount8(&["-t", "dualfs", img.meta(), img.mnt(), "-o", "ro"]),
        "mount -t dualfs -o ro",
    );
    refused(&["-o", "remount,rw", img.mnt()], "it was mounted read-only");
    assert!(mounted_read_only(&img));
    let e = fs::write(img.mnt.join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert_success(
        &mount8(&["-o", "remount,ro", img.mnt()]),
        "mount -o remount,ro of a read-only mount",
    );
    img.umount_and_check();
}
