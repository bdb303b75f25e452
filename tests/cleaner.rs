//! The segment cleaner through a real mount: sustained churn at 80% live utilization of a
//! small metadata device, both devices filled to ENOSPC and recovering after deletes, and
//! the `dualfs-cleaner` daemon (status, one pass, attached daemon, detached daemon, who may
//! use the control socket). The checker runs at every unmount, as everywhere.

#[macro_use]
mod common;

use common::user::{as_user, ALICE};
use common::*;
use dualfs::control_protocol::{socket_path, Client, Status};
use dualfs::mkfs::MkfsParams;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BS: u64 = 4096;

fn small_segments() -> MkfsParams {
    MkfsParams {
        segment_blocks: 64,
        ..MkfsParams::default()
    }
}

/// `dualfs-cleaner`: `DUALFS_CLEANER_BIN`, else beside the `dualfs` binary under test.
fn cleaner_bin() -> PathBuf {
    if let Ok(p) = std::env::var("DUALFS_CLEANER_BIN") {
        return PathBuf::from(p);
    }
    let p = dualfs_bin().with_file_name("dualfs-cleaner");
    assert!(
        p.is_file(),
        "{} is missing: build it (cargo build -p dualfs-cleaner, or cargo test --workspace) \
         or set DUALFS_CLEANER_BIN",
        p.display()
    );
    p
}

/// A connection to the mount's control socket. The harness sees the mount as soon as the
/// kernel lists it; the daemon makes its socket a moment later.
fn client(fs: &TestFs) -> Client {
    let start = Instant::now();
    loop {
        match Client::connect(fs.path()) {
            Ok(c) => return c,
            Err(e) if start.elapsed() < Duration::from_secs(10) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("cannot connect to the control socket: {e}"),
        }
    }
}

fn status(fs: &TestFs) -> Status {
    client(fs).status().unwrap()
}

/// File blocks with a level-1 indirect block each, under one double-indirect block.
fn sparse_block(j: u64) -> u64 {
    12 + 508 + j * 508
}

/// A file of `n` sparse blocks (n + 1 indirect blocks in the log), each starting with `tag`.
fn write_sparse(path: &Path, n: u64, tag: u8) -> std::io::Result<()> {
    let f = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)?;
    for j in 0..n {
        f.write_all_at(&[tag; 16], sparse_block(j) * BS)?;
    }
    Ok(())
}

fn read_tag(path: &Path, j: u64) -> u8 {
    let f = fs::File::open(path).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, sparse_block(j) * BS).unwrap();
    b[0]
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn sustained_churn_at_80_percent_of_the_metadata_device() {
    dualfs_only!();
    const META: u64 = 32 << 20;
    let mut fs = TestFs::builder()
        .sizes(META, 512 << 20)
        .mkfs_params(small_segments())
        .mount();
    let dir = fs.join("churn");
    fs::create_dir(&dir).unwrap();
    let per_file = 16u64;
    let target = META * 80 / 100;
    let mut files: Vec<u8> = Vec::new(); // tag per file, 0 = deleted
    let name = |i: usize| dir.join(format!("f{i:05}"));
    // Fill to 80% of the device with files of 17 indirect blocks each.
    while status(&fs).live_bytes < target {
        let i = files.len();
        let tag = (i % 250) as u8 + 1;
        write_sparse(&name(i), per_file, tag).unwrap();
        files.push(tag);
        // The status counts what the log holds: cached files reach it at a sync (without,
        // the loop would write on up to the live limit before the figure moved).
        if files.len() % 8 == 0 {
            sync_fs(fs.path());
        }
    }
    fs::File::open(&dir).unwrap().sync_all().unwrap();
    let s0 = status(&fs);
    eprintln!(
        "filled: {} files, utilization {:.1}% of the log, {:.1}% of the device; clean {} of {}",
        files.len(),
        s0.utilization * 100.0,
        s0.live_bytes as f64 * 100.0 / META as f64,
        s0.clean,
        s0.log_segments
    );
    assert!(s0.live_bytes >= target);

    // Churn: delete and recreate, truncate and rewrite, overwrite in place, until the log
    // has been written over five times (or a time limit).
    let mut rng = Rng(0xc1ea);
    let written0 = s0.log_blocks_written;
    let log_blocks = s0.log_segments * s0.segment_bytes / BS;
    let start = Instant::now();
    let mut ops = 0u64;
    let mut lowest_util = 1.0f64;
    while status(&fs).log_blocks_written - written0 < 5 * log_blocks
        && start.elapsed() < Duration::from_secs(120)
    {
        for _ in 0..25 {
            let i = rng.below(files.len() as u64) as usize;
            let tag = (rng.below(250) + 1) as u8;
            match rng.below(3) {
                0 => {
                    fs::remove_file(name(i)).unwrap();
                    write_sparse(&name(i), per_file, tag).unwrap();
                }
                1 => {
                    let f = fs::OpenOptions::new().write(true).open(name(i)).unwrap();
                    f.set_len(0).unwrap();
                    for j in 0..per_file {
                        f.write_all_at(&[tag; 16], sparse_block(j) * BS).unwrap();
                    }
                }
                _ => {
                    let f = fs::OpenOptions::new().write(true).open(name(i)).unwrap();
                    for j in 0..per_file {
                        f.write_all_at(&[tag; 16], sparse_block(j) * BS).unwrap();
                    }
                }
            }
            files[i] = tag;
            ops += 1;
        }
        // The live bytes of what the log holds: between syncs a rewritten file's new blocks
        // are still cached while its old ones are already freed.
        sync_fs(fs.path());
        let s = status(&fs);
        lowest_util = lowest_util.min(s.live_bytes as f64 / META as f64);
    }
    let s = status(&fs);
    eprintln!(
        "churn: {ops} files rewritten in {:.1} s; {} log blocks written ({:.1}x the log); \
         utilization {:.1}% of the device (lowest {:.1}%); clean {}; {} segments cleaned in {} \
         passes ({} in the write path); write cost {:.2}; ENOSPC {}",
        start.elapsed().as_secs_f64(),
        s.log_blocks_written - written0,
        (s.log_blocks_written - written0) as f64 / log_blocks as f64,
        s.live_bytes as f64 * 100.0 / META as f64,
        lowest_util * 100.0,
        s.clean,
        s.counters.segments_cleaned,
        s.counters.passes,
        s.counters.write_path_passes,
        s.write_cost,
        s.counters.enospc
    );
    assert!(
        s.log_blocks_written - written0 >= 2 * log_blocks,
        "the churn did not write the log over twice"
    );
    assert!(lowest_util >= 0.79, "utilization fell to {lowest_util}");
    assert_eq!(s.counters.enospc, 0);
    assert!(s.counters.segments_cleaned > 0);
    for (i, &tag) in files.iter().enumerate().step_by(7) {
        assert_eq!(read_tag(&name(i), per_file - 1), tag, "file {i}");
    }
    fs.remount();
    for (i, &tag) in files.iter().enumerate().step_by(5) {
        assert_eq!(read_tag(&name(i), 0), tag, "file {i} after remount");
    }
    fs.unmount();
}

/// The attributes file `i` holds at `tag`: two small ones (as GlusterFS puts on every file)
/// and, on every third file, one in value blocks.
fn attrs_of(i: usize, tag: u8) -> Vec<(&'static str, Vec<u8>)> {
    let mut v = vec![
        ("trusted.gfid", vec![tag; 16]),
        ("user.tag", format!("{i}:{tag}").into_bytes()),
    ];
    if i % 3 == 0 {
        v.push(("user.large", vec![tag; 6000 + i % 2000]));
    }
    v
}

fn set_attrs(path: &Path, i: usize, tag: u8) {
    for (name, value) in attrs_of(i, tag) {
        sys::setxattr(path, name, &value, 0, false)
            .unwrap_or_else(|e| panic!("{} {name}: {e}", path.display()));
    }
}

fn check_attrs(path: &Path, i: usize, tag: u8) {
    for (name, value) in attrs_of(i, tag) {
        assert_eq!(
            sys::getxattr(path, name).unwrap(),
            value,
            "{} {name}",
            path.display()
        );
    }
}

#[test]
fn churn_with_attributes_on_most_files_is_cleaned() {
    dualfs_only!();
    const META: u64 = 24 << 20;
    let mut fs = TestFs::builder()
        .sizes(META, 256 << 20)
        .mkfs_params(small_segments())
        .mount();
    let dir = fs.join("attrs");
    fs::create_dir(&dir).unwrap();
    let name = |i: usize| dir.join(format!("f{i:05}"));
    let mut files: Vec<u8> = Vec::new();
    // Fill to 70% of the device: tiny files, their metadata mostly attributes.
    let target = META * 70 / 100;
    while status(&fs).live_bytes < target {
        let i = files.len();
        let tag = (i % 250) as u8 + 1;
        fs::write(name(i), [tag; 100]).unwrap();
        set_attrs(&name(i), i, tag);
        files.push(tag);
        // The live bytes count what is logged: log often, not to overshoot.
        if i % 50 == 49 {
            fs::File::open(&dir).unwrap().sync_all().unwrap();
        }
    }
    let s0 = status(&fs);
    let log_blocks = s0.log_segments * s0.segment_bytes / BS;
    // Churn: new values for some files' attributes, others deleted and made again, until the
    // log was written over three times.
    let mut rng = Rng(0xa77e);
    let start = Instant::now();
    while status(&fs).log_blocks_written - s0.log_blocks_written < 3 * log_blocks
        && start.elapsed() < Duration::from_secs(120)
    {
        for _ in 0..25 {
            let i = rng.below(files.len() as u64) as usize;
            let tag = (rng.below(250) + 1) as u8;
            if rng.below(2) == 0 {
                fs::remove_file(name(i)).unwrap();
                fs::write(name(i), [tag; 100]).unwrap();
            }
            set_attrs(&name(i), i, tag);
            files[i] = tag;
        }
    }
    let s = status(&fs);
    eprintln!(
        "{} files with attributes; {:.1}x the log written; {} segments cleaned; ENOSPC {}",
        files.len(),
        (s.log_blocks_written - s0.log_blocks_written) as f64 / log_blocks as f64,
        s.counters.segments_cleaned,
        s.counters.enospc
    );
    assert!(s.log_blocks_written - s0.log_blocks_written >= 2 * log_blocks);
    assert!(s.counters.segments_cleaned > 0, "nothing was cleaned");
    assert_eq!(s.counters.enospc, 0);
    for (i, &tag) in files.iter().enumerate().step_by(3) {
        check_attrs(&name(i), i, tag);
    }
    fs.remount();
    for (i, &tag) in files.iter().enumerate() {
        check_attrs(&name(i), i, tag);
    }
    fs.unmount();
}

#[test]
fn full_data_device_gives_enospc_then_deletes_give_room_back() {
    let mut fs = TestFs::builder().sizes(64 << 20, 48 << 20).mount();
    let chunk = content(9, 1 << 20);
    let mut written = Vec::new();
    let err = loop {
        let p = fs.join(format!("d{:03}", written.len()));
        match fs::write(&p, &chunk) {
            Ok(()) => written.push(p),
            Err(e) => break e,
        }
        assert!(written.len() < 1000, "the data device never filled");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    let st = statvfs(fs.path());
    assert!(
        st.f_bavail * st.f_frsize < 1 << 20,
        "statfs says {} bytes free after ENOSPC",
        st.f_bavail * st.f_frsize
    );
    // Nothing already written is damaged.
    for p in &written {
        assert_eq!(fs::read(p).unwrap(), chunk, "{}", p.display());
    }
    // Deletes give the space back at once: statfs shows it, writes succeed.
    for p in written.iter().step_by(2) {
        fs::remove_file(p).unwrap();
    }
    let st = statvfs(fs.path());
    let freed = written.len().div_ceil(2) as u64;
    assert!(
        st.f_bavail * st.f_frsize >= freed << 20,
        "after deleting {freed} MiB statfs shows {} bytes free",
        st.f_bavail * st.f_frsize
    );
    for k in 0..freed / 2 {
        fs::write(fs.join(format!("again{k}")), &chunk).unwrap();
    }
    fs.remount();
    for p in written.iter().skip(1).step_by(2) {
        assert_eq!(fs::read(p).unwrap(), chunk, "{}", p.display());
    }
    fs.unmount();
}

/// Files kept open after a small write each hold reservation windows (most of a small data
/// device here); df counts those blocks as free, and one file of exactly what df shows
/// can be written: the windows go back before a writer is answered ENOSPC.
#[test]
fn files_kept_open_hold_no_space_df_shows_free() {
    dualfs_only!();
    let mut fs = TestFs::builder().sizes(64 << 20, 16 << 20).mount();
    let open: Vec<fs::File> = (0..400)
        .map(|i| {
            let mut f = fs::File::create(fs.join(format!("open{i:03}"))).unwrap();
            f.write_all(&content(i, BS as usize)).unwrap();
            f
        })
        .collect();
    let st = statvfs(fs.path());
    // Block 0 is the data superblock; each open file owns one block.
    assert_eq!(
        st.f_bfree,
        st.f_blocks - 1 - 400,
        "df counts what the files hold, no more"
    );
    let want = st.f_bavail * st.f_frsize;
    let chunk = content(1000, 1 << 20);
    let mut big = fs::File::create(fs.join("big")).unwrap();
    let mut at = 0;
    while at < want {
        let n = chunk.len().min((want - at) as usize);
        big.write_all(&chunk[..n])
            .unwrap_or_else(|e| panic!("writing at {at} of the {want} bytes df showed: {e}"));
        at += n as u64;
    }
    big.sync_all().unwrap();
    assert_eq!(statvfs(fs.path()).f_bavail, 0);
    drop(big);
    drop(open);
    fs.remount();
    assert_eq!(fs::metadata(fs.join("big")).unwrap().len(), want);
    assert_eq!(
        fs::read(fs.join("open399")).unwrap(),
        content(399, BS as usize)
    );
    fs.unmount();
}

#[test]
fn full_metadata_device_gives_enospc_then_deletes_give_room_back() {
    dualfs_only!();
    let mut fs = TestFs::builder()
        .sizes(6 << 20, 64 << 20)
        .mkfs_params(small_segments())
        .mount();
    let d = fs.join("many");
    fs::create_dir(&d).unwrap();
    let before = statvfs(fs.path()).f_ffree;
    let mut n = 0u64;
    let err = loop {
        match fs::File::create(d.join(format!("e{n:06}"))) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 200_000, "the metadata device never filled");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    // Other kinds of growth are refused too; nothing is damaged.
    assert_eq!(
        errno_of(fs::create_dir(fs.join("newdir"))),
        libc::ENOSPC,
        "mkdir at ENOSPC"
    );
    let st = statvfs(fs.path());
    eprintln!(
        "{n} empty files; statfs promised {before} at the start, {} now",
        st.f_ffree
    );
    assert!(
        st.f_ffree < n / 10,
        "statfs still promises {} inodes",
        st.f_ffree
    );
    assert!(
        before >= n * 8 / 10 && before <= n * 2,
        "statfs promised {before}, {n} fit"
    );
    assert_eq!(names(&d).len() as u64, n);
    sync_fs(fs.path());
    // Deletes work at ENOSPC and bring the room back.
    for k in 0..n {
        fs::remove_file(d.join(format!("e{k:06}"))).unwrap();
    }
    fs::remove_dir(&d).unwrap();
    let st = statvfs(fs.path());
    assert!(
        st.f_ffree > n / 2,
        "statfs shows {} inodes after deleting {n}",
        st.f_ffree
    );
    fs::create_dir(&d).unwrap();
    for k in 0..n / 2 {
        fs::File::create(d.join(format!("again{k:06}"))).unwrap();
    }
    fs.remount();
    assert_eq!(names(&d).len() as u64, n / 2);
    fs.unmount();
}

/// Inodes in use by df -i.
fn inodes_used(st: &libc::statvfs) -> u64 {
    st.f_files - st.f_ffree
}

/// Issue 10's case, through the mount: a 16 MiB metadata device (1 MiB segments) filled with
/// files, directories and symlinks to ENOSPC while the data device is nearly empty, then half
/// deleted and created again at once. df and df -i tell the truth at every step: the inodes
/// in use exactly, the free ones what creates then find, and no data blocks available while
/// the log is full; and no create fails right after the deletes (a writer that finds no room
/// cleans in its own write path rather than wait for the background cleaner; which of the two
/// cleans first is a race, so the test asks only that cleaning made the room —
/// `fs::clean::tests` shows the write path's passes deterministically).
#[test]
fn df_tells_the_truth_on_a_full_metadata_device_and_creates_work_right_after_deletes() {
    dualfs_only!();
    let mut fs = TestFs::builder().sizes(16 << 20, 1 << 30).mount();
    let st0 = statvfs(fs.path());
    assert_eq!(
        inodes_used(&st0),
        2,
        "a fresh file system: root and lost+found"
    );
    assert!(st0.f_bavail >= st0.f_blocks * 99 / 100, "{st0:?}");
    let dirs: Vec<PathBuf> = (0..10).map(|d| fs.join(format!("d{d}"))).collect();
    for d in &dirs {
        fs::create_dir(d).unwrap();
    }
    let path = |i: u64| dirs[(i % 10) as usize].join(format!("file-{i:06}"));
    let mut made = 0u64;
    let err = loop {
        let r = if made % 10 == 9 {
            std::os::unix::fs::symlink("some/target", path(made))
        } else {
            fs::File::create(path(made)).map(drop)
        };
        match r {
            Ok(()) => made += 1,
            Err(e) => break e,
        }
        if made % 2500 == 0 {
            let st = statvfs(fs.path());
            assert_eq!(inodes_used(&st), 12 + made, "df -i after {made} creates");
        }
        assert!(made < 200_000, "the metadata device never filled");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert_eq!(errno_of(fs::create_dir(fs.join("newdir"))), libc::ENOSPC);
    let full = statvfs(fs.path());
    eprintln!(
        "{made} made; df -i promised {} at the start; at ENOSPC: {} free inodes, {} of {} blocks \
         available ({} free)",
        st0.f_ffree, full.f_ffree, full.f_bavail, full.f_blocks, full.f_bfree
    );
    assert_eq!(inodes_used(&full), 12 + made, "df -i at ENOSPC");
    assert!(
        full.f_ffree <= made / 50,
        "df -i still promises {} inodes",
        full.f_ffree
    );
    assert!(
        full.f_bavail <= full.f_bfree / 50,
        "the log is full and df shows {} of {} free data blocks available",
        full.f_bavail,
        full.f_bfree
    );
    assert!(
        st0.f_ffree >= made * 8 / 10 && st0.f_ffree <= made * 12 / 10,
        "df -i promised {} inodes at the start, {made} fit",
        st0.f_ffree
    );
    // Which cleaning makes the room is a race: the mount's background thread may clean
    // between the deletes and the creates, or a create in its write path (CI saw both).
    let passes0 = status(&fs).counters.passes;
    // Delete every other one, and look at once (nothing flushed yet).
    let mut gone = 0u64;
    for i in (0..made).step_by(2) {
        fs::remove_file(path(i)).unwrap();
        gone += 1;
    }
    let after = statvfs(fs.path());
    assert_eq!(
        inodes_used(&after),
        12 + made - gone,
        "df -i right after the deletes"
    );
    assert!(
        after.f_ffree >= gone / 2,
        "{gone} deleted, df -i shows {} free",
        after.f_ffree
    );
    // Create again at once: no ENOSPC while the room the deletes made lasts.
    let want = after.f_ffree * 3 / 4;
    for k in 0..want {
        fs::File::create(dirs[(k % 10) as usize].join(format!("again-{k:06}")))
            .unwrap_or_else(|e| panic!("create {k} of {want} right after the deletes: {e}"));
    }
    let st = statvfs(fs.path());
    assert_eq!(
        inodes_used(&st),
        12 + made - gone + want,
        "df -i after creating again"
    );
    let s = status(&fs);
    assert!(
        s.counters.passes > passes0,
        "the creates found room without cleaning? {s:?}"
    );
    fs.remount();
    let st = statvfs(fs.path());
    assert_eq!(
        inodes_used(&st),
        12 + made - gone + want,
        "df -i after a remount"
    );
    fs.unmount();
}

/// Make dead space: many small files, three quarters deleted.
fn make_garbage(fs: &TestFs, n: u64) {
    let d = fs.join("g");
    fs::create_dir_all(&d).unwrap();
    for i in 0..n {
        write_sparse(&d.join(format!("{i}")), 1 + i % 3, 1).unwrap();
    }
    // In the log first: files deleted while their data is cached never reach it.
    sync_fs(fs.path());
    for i in 0..n {
        if i % 4 != 0 {
            fs::remove_file(d.join(format!("{i}"))).unwrap();
        }
    }
    sync_fs(fs.path());
}

fn run_cleaner(args: &[&str], mnt: &Path) -> (bool, String, String) {
    let out = Command::new(cleaner_bin())
        .args(args)
        .arg(mnt)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `dualfs-cleaner --status MNT | head -1` where head has gone before the status is written:
/// the write fails with EPIPE (the read end is closed before the program starts, so always),
/// which is the reader's choice, not an error and never a panic.
fn status_into_a_closed_pipe_is_quiet(mnt: &Path) {
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    for json in [false, true] {
        let mut cmd = Command::new(cleaner_bin());
        cmd.arg("--status");
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .arg(mnt)
            .stdout(Stdio::from(write_end.try_clone().unwrap()))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.is_empty(),
            "--status (json {json}) into a closed pipe: {:?}, stderr {err}",
            out.status
        );
    }
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn cleaner_daemon_status_once_and_takeover() {
    dualfs_only!();
    let mut fs = TestFs::builder()
        .sizes(16 << 20, 256 << 20)
        .mkfs_params(small_segments())
        .mount();
    make_garbage(&fs, 400);
    let mnt = fs.path().to_path_buf();
    drop(client(&fs));

    // --status, as text and as JSON.
    let (ok, out, err) = run_cleaner(&["--status"], &mnt);
    assert!(ok, "--status failed: {err}");
    for want in [
        "clean segments:",
        "dirty segments:",
        "utilization:",
        "write cost:",
        "passes beside operations (the mount's cleaner thread)",
        "passes in an operation's write path",
    ] {
        assert!(out.contains(want), "--status lacks {want:?}:\n{out}");
    }
    let (ok, out, err) = run_cleaner(&["--status", "--json"], &mnt);
    assert!(ok, "{err}");
    let s: Status = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(s.segments, 64);
    assert_eq!(s.daemons, 0);
    let cleaned0 = s.counters.segments_cleaned;
    status_into_a_closed_pipe_is_quiet(&mnt);

    // --once: one pass whatever the thresholds.
    let (ok, out, err) = run_cleaner(&["--once", "--policy", "greedy"], &mnt);
    assert!(ok, "--once failed: {err}");
    assert!(
        out.contains("cleaned ") && out.contains(" segment"),
        "--once printed: {out}{err}"
    );
    let s = status(&fs);
    assert!(s.counters.segments_cleaned > cleaned0, "{s:?}");
    assert!(s.write_cost > 0.0);

    // An attached daemon takes threshold cleaning over and cleans to its thresholds.
    make_garbage(&fs, 400);
    let clean0 = status(&fs).clean;
    let log = fs.scratch().join("cleaner.log");
    let mut daemon = Command::new(cleaner_bin())
        .arg(&mnt)
        .args([
            "--foreground",
            "--interval",
            "0.2",
            "--policy",
            "cost-benefit",
        ])
        .args(["--min-free", "60", "--max-free", "62"])
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until("the daemon to attach", Duration::from_secs(10), || {
        status(&fs).daemons == 1
    });
    wait_until("the daemon to clean", Duration::from_secs(30), || {
        status(&fs).clean > clean0
    });
    let t = client(&fs).thresholds().unwrap();
    assert_eq!((t.min_free, t.max_free), (60, 62));
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let st = wait_timeout(&mut daemon, Duration::from_secs(10)).expect("daemon exit");
    let text = fs::read_to_string(&log).unwrap();
    assert!(st.success(), "daemon exited {st}:\n{text}");
    assert!(text.contains("clean segments"), "daemon log:\n{text}");
    wait_until("the daemon to detach", Duration::from_secs(5), || {
        status(&fs).daemons == 0
    });

    // Without --foreground it detaches and keeps a pid file.
    let (ok, _, err) = run_cleaner(&["--interval", "0.2"], &mnt);
    assert!(ok, "{err}");
    let pid_file = dualfs::run_dir::run_file_path(&mnt, "cleaner.pid");
    wait_until("the detached daemon", Duration::from_secs(10), || {
        status(&fs).daemons == 1 && pid_file.exists()
    });
    let pid: i32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // A second one refuses.
    let (ok, _, err) = run_cleaner(&["--foreground"], &mnt);
    assert!(!ok && err.contains("already"), "second daemon: {err}");
    // Unmounting ends it: the socket closes under it.
    fs.unmount();
    wait_until(
        "the detached daemon to exit",
        Duration::from_secs(10),
        || unsafe { libc::kill(pid, 0) != 0 },
    );
    assert!(!pid_file.exists(), "pid file left behind");
    assert!(!socket_path(&mnt).exists(), "control socket left behind");
}

#[test]
fn control_socket_serves_only_root_and_the_mount_owner() {
    dualfs_only!();
    let fs = TestFs::builder().sizes(16 << 20, 64 << 20).mount();
    drop(client(&fs));
    let sock = socket_path(fs.path());
    let m = fs::metadata(&sock).unwrap();
    assert_eq!(m.mode() & 0o777, 0o600, "socket mode");
    assert_eq!(m.uid(), 0, "owned by the mount owner (root)");
    // Another user cannot even connect.
    let e = as_user(ALICE.0, ALICE.1, || Client::connect(fs.path()).err());
    assert_eq!(
        e.expect("connected as another user").raw_os_error(),
        Some(libc::EACCES)
    );
    // Even with the socket opened up, the peer's credentials are checked.
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o666)).unwrap();
    let r = as_user(ALICE.0, ALICE.1, || {
        let mut c = Client::connect(fs.path()).expect("connect through a 0666 socket");
        c.status().err()
    });
    let e = r.expect("another user got a status");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("owner"), "{e}");
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o600)).unwrap();
    // Root is served; bad requests get an error, not a hang-up.
    let mut c = client(&fs);
    assert!(c.status().is_ok());
    let mut raw = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    raw.write_all(b"{\"op\":\"nonsense\"}\n").unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(&raw), &mut line).unwrap();
    assert!(line.contains("\"error\""), "{line}");
    drop(fs);
}

/// `--once` says what it did in segments: how many it cleaned (and which), how many log
/// blocks its writes took, and how the clean segments changed; the requested-passes counter
/// counts it. `--stop` ends an attached daemon and waits until it is gone.
#[test]
fn cleaner_once_reports_segments_and_stop_ends_the_daemon() {
    dualfs_only!();
    let fs = TestFs::builder()
        .sizes(16 << 20, 256 << 20)
        .mkfs_params(small_segments())
        .mount();
    make_garbage(&fs, 400);
    let mnt = fs.path().to_path_buf();
    let s0 = status(&fs);
    let (ok, out, err) = run_cleaner(&["--once", "--policy", "greedy"], &mnt);
    assert!(ok, "--once failed: {err}");
    let line = out.trim();
    // "cleaned N segments (a, b, ...): moved M live blocks, wrote W log blocks (x.y
    // segments), freed F; clean segments A -> B (+d)"
    let n: usize = line
        .strip_prefix("cleaned ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("--once printed: {line}"));
    let list = &line[line.find('(').unwrap() + 1..line.find(')').unwrap()];
    assert_eq!(list.split(", ").count(), n, "{line}");
    assert!(n >= 1, "{line}");
    assert!(line.contains("log blocks ("), "{line}");
    let tail = &line[line.find("clean segments ").expect(line) + "clean segments ".len()..];
    let nums: Vec<i64> = tail
        .split(|c: char| !(c.is_ascii_digit() || c == '-' || c == '+'))
        .filter_map(|w| w.trim_start_matches('+').parse().ok())
        .collect();
    assert!(nums.len() >= 3, "{line}");
    assert_eq!(nums[1] - nums[0], nums[2], "{line}");
    let s1 = status(&fs);
    assert_eq!(
        s1.counters.requested_passes,
        s0.counters.requested_passes + 1,
        "{s1:?}"
    );
    assert!(s1.counters.segments_cleaned >= s0.counters.segments_cleaned + n as u64);

    // --stop: a daemon attached in the foreground is signalled and has exited when it returns.
    let log = fs.scratch().join("cleaner.log");
    let mut daemon = Command::new(cleaner_bin())
        .arg(&mnt)
        .args(["--foreground", "--interval", "0.2"])
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid_file = dualfs::run_dir::run_file_path(&mnt, "cleaner.pid");
    wait_until("the daemon to attach", Duration::from_secs(10), || {
        status(&fs).daemons == 1 && pid_file.exists()
    });
    let (ok, out, err) = run_cleaner(&["--stop"], &mnt);
    assert!(ok, "--stop failed: {err}");
    assert!(
        out.contains(&format!("pid {}", daemon.id())),
        "--stop printed: {out}"
    );
    let st = wait_timeout(&mut daemon, Duration::from_secs(10)).expect("daemon exit");
    assert!(
        st.success(),
        "daemon exited {st}: {}",
        fs::read_to_string(&log).unwrap()
    );
    assert!(!pid_file.exists(), "pid file left behind");
    wait_until("the daemon to detach", Duration::from_secs(5), || {
        status(&fs).daemons == 0
    });
    // Nothing left to stop.
    let (ok, _, err) = run_cleaner(&["--stop"], &mnt);
    assert!(
        !ok && err.contains("no cleaner daemon"),
        "second --stop: {err}"
    );
    drop(fs);
}
