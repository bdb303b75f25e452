//! The mount outlives its daemon (docs/DESIGN.md, "Surviving the daemon"): a supervised mount
//! (`-o transport=dev`) whose worker is killed with SIGKILL in the middle of work goes on
//! serving through a successor. The programs using it see nothing: every call returns as if
//! nothing happened (no ENOTCONN, no EEXIST or ENOENT from a create or an unlink done twice),
//! and what they made is there, byte for byte. Then the checker finds the file system clean.
//! DualFS only.

#[macro_use]
mod common;

use common::tree::{compare_trees, copy_tree, generate, CompareOpts, TreeSpec};
use common::*;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SUPERVISED: &str = "allow_other,default_permissions,transport=dev";

fn supervised() -> TestFs {
    TestFs::builder()
        .sizes(256 << 20, 1 << 30)
        .mount_opts(SUPERVISED)
        .mount()
}

/// Kill the worker now; return its pid.
fn kill_worker(t: &TestFs) -> u32 {
    let pid = t.worker_pid();
    assert_ne!(pid, t.daemon_pid(), "the mount is not supervised");
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    pid
}

/// Wait until a worker other than `dead` serves (the successor's log line), at most 60 s;
/// returns how long the mount had no worker serving it.
fn wait_successor(t: &TestFs, serving_before: usize) -> Duration {
    let start = Instant::now();
    loop {
        if t.daemon_log_whole().matches("serving again").count() > serving_before {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no successor serves; the log:\n{}",
            t.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn successors(t: &TestFs) -> usize {
    t.daemon_log_whole().matches("serving again").count()
}

/// A source tree to unpack: /usr/include when the machine has it, else a generated one.
fn source_tree(t: &TestFs) -> PathBuf {
    let real = Path::new("/usr/include");
    if real.is_dir() {
        return real.to_path_buf();
    }
    let src = t.scratch().join("include");
    std::fs::create_dir_all(&src).unwrap();
    generate(
        &src,
        &TreeSpec {
            seed: 99,
            files: 3000,
            dirs: 200,
            ..TreeSpec::default()
        },
    );
    src
}

#[test]
fn kill_9_of_the_worker_during_an_untar_is_invisible_to_tar() {
    dualfs_only!();
    let t = &mut supervised();
    let src = source_tree(t);
    let (parent, name) = (src.parent().unwrap(), src.file_name().unwrap());
    // Twice: the second kill hits a successor.
    for round in 0..2 {
        let dest = t.join(format!("round-{round}"));
        std::fs::create_dir(&dest).unwrap();
        let mut pack = Command::new("tar")
            .args(["--format=posix", "-C"])
            .arg(parent)
            .arg("-cf")
            .arg("-")
            .arg(name)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut unpack = Command::new("tar")
            .arg("-C")
            .arg(&dest)
            .args(["-xpf", "-"])
            .stdin(pack.stdout.take().unwrap())
            .spawn()
            .unwrap();
        let before = successors(t);
        std::thread::sleep(Duration::from_millis(300));
        let untar_running = unpack.try_wait().unwrap().is_none();
        kill_worker(t);
        let gap = wait_successor(t, before);
        assert!(pack.wait().unwrap().success(), "tar -c failed");
        let st = unpack.wait().unwrap();
        assert!(
            st.success(),
            "tar -x into the mount failed ({st}) across the kill"
        );
        let stats = compare_trees(&src, &dest.join(name), CompareOpts::default());
        eprintln!(
            "round {round}: killed {} the untar ended; a successor served {} ms after the \
             kill; {stats:?}",
            if untar_running { "before" } else { "after" },
            gap.as_millis()
        );
    }
    let log = t.daemon_log_whole();
    assert!(log.contains("died of SIGKILL"), "{log}");
    assert!(log.contains("0 failed"), "a replay failed:\n{log}");
    // `dualfs info` and `dualfs-cleaner --status` name the worker serving now and the restarts.
    let worker = t.worker_pid();
    let info = run_ok(
        Command::new(dualfs_bin())
            .args(["info", "--json"])
            .arg(t.meta_path()),
    );
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["daemon_pid"], worker, "{info}");
    assert_eq!(info["restarts"], 2, "{info}");
    let status = run_ok(
        Command::new(dualfs_bin().with_file_name("dualfs-cleaner"))
            .arg("--status")
            .arg(t.path()),
    );
    assert!(
        status.contains(&format!("daemon: pid {worker}, 2 restarts")),
        "{status}"
    );
    t.unmount(); // the checker runs
}

/// A file's contents and attributes in the model, shared by its names.
#[derive(Clone, Debug, Default, PartialEq)]
struct Inode {
    data: Vec<u8>,
    xattrs: BTreeMap<String, Vec<u8>>,
}

/// One worker thread's directory and what it should hold: names → inode numbers of the
/// model, whose contents are in `inodes`.
struct Model {
    dir: PathBuf,
    names: BTreeMap<String, usize>,
    inodes: Vec<Inode>,
}

fn ok<T>(r: std::io::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e} (an operation failed across a worker's death)"))
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
}

impl Model {
    fn step(&mut self, rng: &mut ByteStream, i: u64) {
        let pick = |names: &BTreeMap<String, usize>, rng: &mut ByteStream| {
            let n = names.len();
            (n > 0).then(|| {
                names
                    .keys()
                    .nth((rng.next_u64() % n as u64) as usize)
                    .unwrap()
                    .clone()
            })
        };
        let op = rng.next_u64() % 9;
        let target = pick(&self.names, rng);
        let p = |name: &str| self.dir.join(name);
        match (op, target) {
            (0, _) | (_, None) => {
                // create (exclusively: a create done twice would say EEXIST)
                let name = format!("f{i}");
                let len = (rng.next_u64() % 20_000) as usize;
                let data = rng.bytes(len);
                let mut f = ok(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(p(&name)),
                    "create",
                );
                ok(std::io::Write::write_all(&mut f, &data), "write");
                self.inodes.push(Inode {
                    data,
                    ..Inode::default()
                });
                self.names.insert(name, self.inodes.len() - 1);
            }
            (1, Some(old)) => {
                let new = format!("r{i}");
                ok(std::fs::rename(p(&old), p(&new)), "rename");
                let ino = self.names.remove(&old).unwrap();
                self.names.insert(new, ino);
            }
            (2, Some(old)) => {
                let new = format!("l{i}");
                ok(std::fs::hard_link(p(&old), p(&new)), "link");
                let ino = self.names[&old];
                self.names.insert(new, ino);
            }
            (3, Some(old)) => {
                ok(std::fs::remove_file(p(&old)), "unlink");
                self.names.remove(&old);
            }
            (4, Some(name)) => {
                let key = format!("user.k{}", rng.next_u64() % 3);
                let value = format!("v{i}").into_bytes();
                let c = cpath(&p(&name));
                let k = CString::new(key.clone()).unwrap();
                let r = unsafe {
                    libc::setxattr(
                        c.as_ptr(),
                        k.as_ptr(),
                        value.as_ptr().cast(),
                        value.len(),
                        0,
                    )
                };
                ok(
                    if r == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    },
                    "setxattr",
                );
                self.inodes[self.names[&name]].xattrs.insert(key, value);
            }
            (5, Some(name)) => {
                let ino = self.names[&name];
                let len = self.inodes[ino].data.len() as u64;
                let new = rng.next_u64() % (2 * len + 100);
                let f = ok(
                    std::fs::OpenOptions::new().write(true).open(p(&name)),
                    "open",
                );
                ok(f.set_len(new), "truncate");
                self.inodes[ino].data.resize(new as usize, 0);
            }
            (6, Some(name)) => {
                let ino = self.names[&name];
                let off = rng.next_u64() % 30_000;
                let len = 1 + (rng.next_u64() % 9000) as usize;
                let data = rng.bytes(len);
                let f = ok(
                    std::fs::OpenOptions::new().write(true).open(p(&name)),
                    "open",
                );
                ok(
                    std::os::unix::fs::FileExt::write_all_at(&f, &data, off),
                    "write",
                );
                let d = &mut self.inodes[ino].data;
                let end = off as usize + data.len();
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[off as usize..end].copy_from_slice(&data);
            }
            (7, Some(name)) => {
                // punch a hole (the size stays)
                let ino = self.names[&name];
                let f = ok(
                    std::fs::OpenOptions::new().write(true).open(p(&name)),
                    "open",
                );
                let off = (rng.next_u64() % 4) * 4096;
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, 8192) };
                ok(
                    if r == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    },
                    "fallocate",
                );
                let d = &mut self.inodes[ino].data;
                let end = (off as usize + 8192).min(d.len());
                if (off as usize) < end {
                    d[off as usize..end].fill(0);
                }
            }
            (_, Some(name)) => {
                // mkdir and rmdir of a directory (made and removed twice would fail)
                let d = p(&format!("d{i}"));
                ok(std::fs::create_dir(&d), "mkdir");
                ok(std::fs::remove_dir(&d), "rmdir");
                let _ = name;
            }
        }
    }

    /// The directory holds exactly the model: names, bytes, attributes, hard links.
    fn verify(&self) {
        let mut found: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        found.sort();
        let want: Vec<String> = self.names.keys().cloned().collect();
        assert_eq!(found, want, "names in {}", self.dir.display());
        let mut ino_of: BTreeMap<usize, u64> = BTreeMap::new();
        for (name, &ino) in &self.names {
            let path = self.dir.join(name);
            let m = std::fs::metadata(&path).unwrap();
            let data = std::fs::read(&path).unwrap();
            assert!(
                data == self.inodes[ino].data,
                "{}: {} bytes, the model has {}",
                path.display(),
                data.len(),
                self.inodes[ino].data.len()
            );
            let links = self.names.values().filter(|&&i| i == ino).count() as u64;
            assert_eq!(m.nlink(), links, "{} link count", path.display());
            if let Some(&seen) = ino_of.get(&ino) {
                assert_eq!(
                    seen,
                    m.ino(),
                    "{}: a hard link to another file",
                    path.display()
                );
            }
            ino_of.insert(ino, m.ino());
            for (k, v) in &self.inodes[ino].xattrs {
                let c = cpath(&path);
                let key = CString::new(k.clone()).unwrap();
                let mut buf = vec![0u8; 256];
                let n = unsafe {
                    libc::getxattr(c.as_ptr(), key.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
                };
                assert!(n >= 0, "{} {k}", path.display());
                assert_eq!(&buf[..n as usize], &v[..], "{} {k}", path.display());
            }
        }
    }
}

/// Several processes' worth of threads work (creates, renames, links, unlinks, xattrs,
/// hole punches, truncates, writes, mkdir/rmdir) while the worker is killed again and again,
/// each successor half a second after the last one began to serve. Every call succeeds, and
/// each directory ends as its model says.
#[test]
fn repeated_kills_under_a_stress_of_every_kind_lose_nothing_and_fail_nothing() {
    dualfs_only!();
    let t = &mut supervised();
    let threads = 4;
    let seconds = env_secs("DUALFS_TEST_KILL_SECS", 20);
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..threads {
        let dir = t.join(format!("w{w}"));
        std::fs::create_dir(&dir).unwrap();
        let stop = stop.clone();
        workers.push(std::thread::spawn(move || {
            let mut m = Model {
                dir,
                names: BTreeMap::new(),
                inodes: Vec::new(),
            };
            let mut rng = ByteStream::new(1000 + w);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                m.step(&mut rng, i);
                i += 1;
            }
            (m, i)
        }));
    }
    let start = Instant::now();
    let mut kills = 0;
    let mut gaps = Vec::new();
    while start.elapsed() < seconds {
        std::thread::sleep(Duration::from_millis(500));
        let before = successors(t);
        kill_worker(t);
        kills += 1;
        gaps.push(wait_successor(t, before).as_millis());
    }
    stop.store(true, Ordering::Relaxed);
    let mut ops = 0;
    for w in workers {
        let (m, n) = w.join().expect("a worker thread failed");
        ops += n;
        m.verify();
    }
    gaps.sort();
    let log = t.daemon_log_whole();
    eprintln!(
        "{kills} kills over {ops} operations (resent requests answered as done: {} from the \
         intent log, {} from their errno); time from a kill to a successor serving: median {} \
         ms, max {} ms",
        log.matches("answered from the intent log").count(),
        log.matches("answered as done").count(),
        gaps[gaps.len() / 2],
        gaps[gaps.len() - 1]
    );
    assert!(!log.contains("no more restarts"), "{log}");
    assert!(log.contains("0 failed"), "a replay failed");
    t.unmount(); // the checker runs
    t.mount();
    // Nothing acknowledged was lost across the unmount either.
}

/// A worker killed while it recovers (before it serves) is replaced too, and a kill of the
/// supervisor ends the mount like any daemon's death: after a mount, nothing acknowledged
/// is missing.
#[test]
fn a_kill_during_recovery_and_a_kill_of_the_supervisor_lose_nothing() {
    dualfs_only!();
    let t = &mut supervised();
    let src = t.scratch().join("src");
    std::fs::create_dir_all(&src).unwrap();
    generate(
        &src,
        &TreeSpec {
            seed: 4242,
            files: 1500,
            dirs: 80,
            hardlinks: 20,
            symlinks: 20,
            ..TreeSpec::default()
        },
    );
    std::fs::create_dir(t.join("a")).unwrap();
    copy_tree(&src, &t.join("a"));
    // A large intent log makes a long recovery; kill its worker in the middle.
    let before = successors(t);
    let first = kill_worker(t);
    let start = Instant::now();
    let recovering = loop {
        let pid = t.worker_pid();
        if pid != first {
            break pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no successor started"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    unsafe { libc::kill(recovering as i32, libc::SIGKILL) };
    wait_successor(t, before);
    let landed = format!("worker {recovering} died of SIGKILL before it served");
    assert!(
        t.daemon_log_whole().contains(&landed),
        "the kill did not land during the recovery; the log:\n{}",
        t.daemon_log()
    );
    compare_trees(&src, &t.join("a"), CompareOpts::default());
    std::fs::create_dir(t.join("b")).unwrap();
    copy_tree(&src, &t.join("b"));
    // The supervisor now: the worker goes with it, and the mount with both.
    t.kill_daemon_hard();
    t.mount();
    compare_trees(&src, &t.join("a"), CompareOpts::default());
    compare_trees(&src, &t.join("b"), CompareOpts::default());
    t.unmount();
}

/// A worker that cannot serve (here: each successor panics as it starts) is not restarted
/// forever: after five such deaths the mount fails every request with EIO, an unmount
/// works, and the next mount has everything acknowledged before the first death.
#[test]
fn a_worker_that_keeps_dying_ends_in_eio_not_in_a_loop() {
    dualfs_only!();
    let t = &mut TestFs::builder()
        .sizes(128 << 20, 512 << 20)
        .mount_opts(SUPERVISED)
        .daemon_env("DUALFS_TEST_SUCCESSOR_PANICS", "1")
        .mount();
    std::fs::write(t.join("kept"), b"acknowledged before the deaths").unwrap();
    kill_worker(t);
    let start = Instant::now();
    let e = loop {
        match std::fs::metadata(t.join("kept")) {
            Err(e) => break e,
            Ok(_) => {
                // Served from the kernel's cache: ask for something it cannot have.
                if let Err(e) = std::fs::read_dir(t.path()).and_then(|mut d| d.next().transpose()) {
                    break e;
                }
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the mount still serves; the log:\n{}",
            t.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // While the supervisor restarts, requests wait; once it gave up they fail with EIO.
    let e = if e.raw_os_error() == Some(libc::EIO) {
        e
    } else {
        std::fs::File::create(t.join("new")).unwrap_err()
    };
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let log = t.daemon_log_whole();
    assert!(log.contains("no more restarts"), "{log}");
    assert_eq!(log.matches("takes over").count(), 5, "{log}");
    // Unmounting works; the supervisor then exits (status 1: the mount failed).
    assert!(umount_retry(t.path(), Duration::from_secs(5)).is_ok());
    let (status, _) = t.wait_daemon_exit();
    assert!(!status.success());
    let mut again = TestFs::builder()
        .images(t.meta_path(), t.data_path())
        .mount_opts(SUPERVISED)
        .mount();
    assert_eq!(
        std::fs::read(again.join("kept")).unwrap(),
        b"acknowledged before the deaths"
    );
    again.unmount();
}

/// The worst moment: the worker dies after making a change and before its reply. The kernel
/// resends the request to the successor, which finds it in the intent log and answers it
/// as done; done twice, each would fail (EEXIST, ENOENT) or undo itself.
#[test]
fn a_change_whose_reply_died_with_the_worker_is_answered_not_done_twice() {
    dualfs_only!();
    let t = &mut TestFs::builder()
        .sizes(128 << 20, 512 << 20)
        .mount_opts(SUPERVISED)
        .daemon_env("DUALFS_TEST_DIE_AFTER", "victim")
        .mount();
    let victim = t.join("victim");
    let other = t.join("other");
    ok(std::fs::create_dir(&victim), "mkdir");
    ok(std::fs::rename(&victim, &other), "rename");
    assert!(other.is_dir() && !victim.exists());
    std::fs::remove_dir(&other).unwrap();
    ok(
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&victim)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"made once")),
        "create",
    );
    ok(std::fs::remove_file(&victim), "unlink");
    assert!(!victim.exists());
    std::fs::write(&other, b"linked").unwrap();
    ok(std::fs::hard_link(&other, &victim), "link");
    assert_eq!(std::fs::metadata(&other).unwrap().nlink(), 2);
    assert_eq!(std::fs::read(&victim).unwrap(), b"linked");
    let log = t.daemon_log_whole();
    assert_eq!(log.matches("died of SIGKILL").count(), 5, "{log}");
    assert_eq!(
        log.matches("answered from the intent log").count(),
        5,
        "every resent change was answered from the intent log:\n{log}"
    );
    t.unmount();
}

/// PostMark (small files created, read, appended and deleted at random) with its daemon's
/// worker killed three times on the way: it completes and reports no error.
#[test]
fn postmark_completes_across_kills_of_the_worker() {
    dualfs_only!();
    if Command::new("postmark").arg("-h").output().is_err() {
        panic!("postmark is missing (Debian's postmark package; .ci/run installs it)");
    }
    let t = &mut supervised();
    let dir = t.join("pm");
    std::fs::create_dir(&dir).unwrap();
    let script = format!(
        "set location {}\nset number 5000\nset transactions 30000\nset subdirectories 20\n\
         set size 500 10000\nrun\nquit\n",
        dir.display()
    );
    let mut pm = Command::new("postmark")
        .current_dir(t.scratch())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut pm.stdin.take().unwrap(), script.as_bytes()).unwrap();
    let mut kills = 0;
    while kills < 3 {
        std::thread::sleep(Duration::from_millis(700));
        if pm.try_wait().unwrap().is_some() {
            break;
        }
        let before = successors(t);
        kill_worker(t);
        wait_successor(t, before);
        kills += 1;
    }
    let out = pm.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "postmark failed: {text}");
    assert!(
        !text.to_lowercase().contains("error") && text.contains("Time:"),
        "postmark reported a problem after {kills} kills:\n{text}"
    );
    assert!(kills >= 1, "postmark ended before any kill:\n{text}");
    eprintln!("postmark completed across {kills} kills of the worker");
    t.unmount();
}
