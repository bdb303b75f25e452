//! DualFS as the local file system of GlusterFS bricks, end to end.
//!
//! Four DualFS mounts on this host carry the bricks of a 2×2 distributed-replicated volume
//! (replica pairs: bricks 0+1 and 2+3), served by a glusterd of this test's own (working and
//! run directories in a temporary directory) and mounted with Gluster's FUSE client. Bricks
//! are named by the host name (Gluster refuses `localhost` and 127.0.0.1 as brick hosts), so
//! all traffic stays on this machine; `force` is needed because both bricks of each pair are
//! on the same server.
//!
//! 1. The repository's `src/` and `docs/` (plus an empty directory and a symlink) are copied
//!    in through the client.
//! 2. A writer thread copies a generated tree (small files and a few of several MiB) in; a
//!    third of the way through, the worker of brick 1's DualFS (a supervised mount, over
//!    /dev/fuse) is killed with SIGKILL. Its supervisor starts a successor, which recovers and
//!    takes the FUSE connection over (docs/DESIGN.md, "The mount outlives its daemon"): the
//!    brick's glusterfsd keeps running on the same mount, never restarted, and the writes go
//!    on. Then the worker of brick 2 is killed the same way.
//! 3. Nothing is left to heal: without a heal being launched, the self-heal daemon counts 0
//!    entries on every brick (nothing the bricks acknowledged was lost, so Gluster's
//!    changelogs are right).
//! 4. The volume equals the source, byte for byte; the two bricks of each pair hold the same
//!    tree (names, types, bytes and extended attributes, outside `.glusterfs`), and the pairs
//!    together hold each source file exactly once.
//! 5. Everything is stopped (client, volume, glusterd and its brick and self-heal processes)
//!    and every DualFS is unmounted and checked clean. Drop guards do the same, without the
//!    checks, when the test fails half way.
//!
//! It needs `glusterd`, `gluster` and `glusterfs` (Debian's glusterfs-server and
//! glusterfs-client, which `.ci/run` installs) and fails, not skips, without them. Only one
//! glusterd can run on a host (TCP port 24007, /var/run/glusterd.socket): the test refuses to
//! start if one is already running.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BRICKS: usize = 4;
/// The bricks whose DualFS workers are killed, one after the other: one of each replica pair.
const VICTIMS: [usize; 2] = [1, 2];
/// Mount options of the bricks: supervised (over /dev/fuse), so that a worker's death is
/// taken over.
const BRICK_OPTS: &str = "allow_other,default_permissions,transport=dev";
/// How long Gluster gets for any one state change, and a successor to serve.
const WAIT: Duration = Duration::from_secs(90);
/// `gluster --mode=script ARGS`: Ok(stdout) or Err(everything it said).
fn gluster(args: &[&str]) -> Result<String, String> {
    let out = Command::new("gluster")
        .args(["--mode=script", "--timeout=120"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run gluster {args:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "gluster {args:?} failed ({}):\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn gluster_ok(args: &[&str]) -> String {
    gluster(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Panic with what to install unless `prog` can be run.
fn require_program(prog: &str, package: &str) {
    if let Err(e) = Command::new(prog)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        panic!(
            "`{prog}` cannot be run ({e}): the GlusterFS test needs Debian's {package} \
             (`apt-get install -y glusterfs-server glusterfs-client`; .ci/run installs it)"
        );
    }
}

/// This host's name, as bricks are named (Gluster refuses localhost and 127.0.0.1).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(r, 0, "gethostname: {}", std::io::Error::last_os_error());
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    assert!(
        !name.is_empty() && name != "localhost",
        "host name {name:?}: Gluster needs a real host name for its bricks"
    );
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = (name.as_str(), 0)
        .to_socket_addrs()
        .unwrap_or_else(|e| panic!("host name {name:?} does not resolve ({e}): Gluster needs it"))
        .collect();
    assert!(!addrs.is_empty(), "host name {name:?} resolves to nothing");
    name
}

/// Is process `pid` alive (not gone, not a zombie)?
fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(s) => s
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Make this process the reaper of the Gluster daemons it starts. glusterd's bricks and
/// self-heal daemon daemonize (their parent exits), so they would be reaped by PID 1; where
/// PID 1 does not reap (containers, sandboxes), a killed brick stays a zombie, glusterd's
/// "is it running" test (/proc/PID exists) says yes, and `volume start force` does not start
/// it again ("discovered already-running brick").
fn become_subreaper() {
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(
        r,
        0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
}

/// SIGKILL `pid` and wait until it is gone: reaped if it is ours (see `become_subreaper`),
/// else until its /proc entry disappears.
fn kill_and_wait(pid: i32) {
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let start = Instant::now();
    loop {
        let mut status = 0;
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid || (r < 0 && !Path::new(&format!("/proc/{pid}")).exists()) {
            return;
        }
        assert!(start.elapsed() < WAIT, "pid {pid} not gone after SIGKILL");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `n` lines of a log file, for failure messages.
fn log_tail(path: &Path, n: usize) -> String {
    let s = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The last `n` errors, warnings and brick events of a Gluster log (without the socket
/// chatter).
fn problems_in_log(path: &Path, n: usize) -> String {
    let s = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s
        .lines()
        .filter(|l| {
            (l.contains("] E [") || l.contains("] W [") || l.contains("brick"))
                && !l.contains("socket.c")
        })
        .collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// glusterd with its own working and run directories, in the foreground as our child. Drop
/// kills what it started (bricks, self-heal daemon: by the pid files in its run directory,
/// checked against their command lines) and then glusterd itself.
struct Glusterd {
    child: Child,
    run_dir: PathBuf,
    log: PathBuf,
}

impl Glusterd {
    fn start(root: &Path) -> Glusterd {
        require_program("glusterd", "glusterfs-server");
        require_program("gluster", "glusterfs-server");
        require_program("glusterfs", "glusterfs-client");
        if let Ok(out) = gluster(&["peer", "status"]) {
            panic!(
                "a glusterd is already running on this host (`gluster peer status`: {out}); \
                 the GlusterFS test needs its own (one per host: port 24007)"
            );
        }
        let work_dir = root.join("glusterd-work");
        let run_dir = root.join("glusterd-run");
        fs::create_dir(&work_dir).unwrap();
        fs::create_dir(&run_dir).unwrap();
        let vol = root.join("glusterd.vol");
        fs::write(
            &vol,
            format!(
                "volume management\n    type mgmt/glusterd\n    option working-directory {}\n    \
                 option run-directory {}\n    option transport-type socket\n    \
                 option transport.socket.listen-port 24007\n    option ping-timeout 0\n    \
                 option event-threads 1\nend-volume\n",
                work_dir.display(),
                run_dir.display()
            ),
        )
        .unwrap();
        let log = root.join("glusterd.log");
        let child = Command::new("glusterd")
            .arg("-N")
            .arg("-f")
            .arg(&vol)
            .arg("-p")
            .arg(root.join("glusterd.pid"))
            .arg("-l")
            .arg(&log)
            .args(["-L", "INFO"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn glusterd: {e}"));
        let mut g = Glusterd {
            child,
            run_dir,
            log,
        };
        let start = Instant::now();
        while gluster(&["peer", "status"]).is_err() {
            if let Some(st) = g.child.try_wait().unwrap() {
                panic!("glusterd exited ({st}):\n{}", log_tail(&g.log, 40));
            }
            assert!(
                start.elapsed() < WAIT,
                "glusterd not answering:\n{}",
                log_tail(&g.log, 40)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        g
    }

    /// Pids from the pid files under the run directory whose processes name that directory
    /// on their command line (so a reused pid is never killed).
    fn started_processes(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        let mut stack = vec![self.run_dir.clone()];
        let tag = self.run_dir.as_os_str().as_bytes();
        while let Some(dir) = stack.pop() {
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "pid") {
                    let Some(pid) = fs::read_to_string(&p)
                        .ok()
                        .and_then(|s| s.trim().parse::<i32>().ok())
                    else {
                        continue;
                    };
                    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    if alive(pid) && cmdline.windows(tag.len()).any(|w| w == tag) {
                        pids.push(pid);
                    }
                }
            }
        }
        pids
    }

    /// Stop glusterd and everything it started; Err if something had to be killed that
    /// should have stopped with its volume.
    fn stop(&mut self) -> Result<(), String> {
        let left = self.started_processes();
        for &pid in &left {
            kill_and_wait(pid);
        }
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        if wait_timeout(&mut self.child, Duration::from_secs(20)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "processes of glusterd still running after the volume was stopped: {left:?}"
            ))
        }
    }
}

impl Drop for Glusterd {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() || !self.started_processes().is_empty() {
            if std::thread::panicking() {
                eprintln!(
                    "--- glusterd's errors, warnings and brick events ---\n{}",
                    problems_in_log(&self.log, 60)
                );
            }
            let _ = self.stop();
        }
    }
}

/// A created (and maybe started) volume: Drop stops and deletes it.
struct Volume {
    name: String,
    bricks: Vec<String>,
    live: bool,
}

impl Volume {
    fn create(name: &str, bricks: Vec<String>) -> Volume {
        let mut args = vec!["volume", "create", name, "replica", "2"];
        args.extend(bricks.iter().map(String::as_str));
        // Both bricks of a pair are on this one server: Gluster wants `force` for that.
        args.push("force");
        gluster_ok(&args);
        let v = Volume {
            name: name.to_string(),
            bricks,
            live: true,
        };
        gluster_ok(&["volume", "start", name]);
        v
    }

    /// `online` per brick, from `gluster volume status VOL --xml`.
    fn bricks_online(&self) -> Vec<bool> {
        let xml = gluster_ok(&["volume", "status", &self.name, "--xml"]);
        self.bricks
            .iter()
            .map(|b| {
                let path = b.split_once(':').unwrap().1;
                xml.split("<node>")
                    .find(|n| n.contains(&format!("<path>{path}</path>")))
                    .is_some_and(|n| n.contains("<status>1</status>"))
            })
            .collect()
    }

    /// The pid of brick `i`'s glusterfsd.
    fn brick_pid(&self, i: usize) -> i32 {
        let xml = gluster_ok(&["volume", "status", &self.name, &self.bricks[i], "--xml"]);
        let pid = xml
            .split_once("<pid>")
            .and_then(|(_, r)| r.split_once("</pid>"))
            .and_then(|(p, _)| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid for brick {} in:\n{xml}", self.bricks[i]));
        assert!(pid > 0, "brick {} has pid {pid}", self.bricks[i]);
        pid
    }

    /// Without launching a heal: every brick's index soon counts 0 entries (entries of
    /// operations still in flight go at their end; one left means a brick lost something).
    fn nothing_to_heal(&self) {
        let start = Instant::now();
        loop {
            let info = gluster(&["volume", "heal", &self.name, "statistics", "heal-count"])
                .unwrap_or_default();
            let pending: Vec<&str> = info
                .lines()
                .filter(|l| l.starts_with("Number of entries:"))
                .collect();
            if pending.len() == self.bricks.len()
                && pending.iter().all(|l| l.trim() == "Number of entries: 0")
            {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "entries to heal after the workers' deaths:\n{info}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn stop_and_delete(&mut self) -> Result<(), String> {
        self.live = false;
        let stop = gluster(&["volume", "stop", &self.name, "force"]);
        let delete = gluster(&["volume", "delete", &self.name]);
        stop.and(delete).map(drop)
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        if self.live {
            if let Err(e) = self.stop_and_delete() {
                eprintln!("{e}");
            }
        }
        // Each brick process logs to /var/log/glusterfs/bricks/ under a name made of its
        // brick's path (a new temporary directory every run): keep them only to diagnose a
        // failure, or they pile up run after run.
        for brick in &self.bricks {
            let path = brick.split_once(':').map_or(brick.as_str(), |(_, p)| p);
            let log = Path::new("/var/log/glusterfs/bricks").join(format!(
                "{}.log",
                path.trim_start_matches('/').replace('/', "-")
            ));
            if std::thread::panicking() {
                eprintln!("brick log kept: {}", log.display());
            } else {
                let _ = fs::remove_file(&log);
            }
        }
    }
}

/// Gluster's FUSE client (`glusterfs -N`, our child). Drop unmounts (lazily if it must) and
/// ends it.
struct Client {
    child: Child,
    mnt: PathBuf,
    log: PathBuf,
    mounted: bool,
}

impl Client {
    fn mount(host: &str, volume: &str, mnt: &Path, log: &Path) -> Client {
        fs::create_dir(mnt).unwrap();
        let child = Command::new("glusterfs")
            .arg("-N")
            .arg(format!("--volfile-server={host}"))
            .arg(format!("--volfile-id={volume}"))
            .arg("-l")
            .arg(log)
            .arg(mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn glusterfs: {e}"));
        let mut c = Client {
            child,
            mnt: mnt.to_path_buf(),
            log: log.to_path_buf(),
            mounted: false,
        };
        let start = Instant::now();
        while mount_type(mnt).as_deref() != Some("fuse.glusterfs") {
            if let Some(st) = c.child.try_wait().unwrap() {
                panic!("glusterfs client exited ({st}):\n{}", log_tail(log, 40));
            }
            assert!(start.elapsed() < WAIT, "{} not mounted", mnt.display());
            std::thread::sleep(Duration::from_millis(100));
        }
        c.mounted = true;
        c
    }

    fn unmount(&mut self) -> Result<(), String> {
        self.mounted = false;
        let r = umount_retry(&self.mnt, Duration::from_secs(20))
            .map_err(|e| format!("umount {}: {e}", self.mnt.display()));
        if r.is_err() {
            let _ = sys::umount2(&self.mnt, libc::MNT_DETACH);
        }
        if wait_timeout(&mut self.child, Duration::from_secs(20)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        r
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.mounted {
            if std::thread::panicking() {
                eprintln!(
                    "--- last lines of the Gluster client's log ---\n{}",
                    log_tail(&self.log, 40)
                );
            }
            if let Err(e) = self.unmount() {
                eprintln!("{e}");
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a path holds, as compared between source, volume and bricks.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir,
    File(u128),
    Symlink(PathBuf),
}

/// Every entry under `root` (not following symlinks), except the top-level names in `skip`.
fn tree(root: &Path, skip: &[&str]) -> BTreeMap<PathBuf, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        for e in fs::read_dir(&dir).unwrap_or_else(|e| panic!("readdir {}: {e}", dir.display())) {
            let e = e.unwrap();
            if rel.as_os_str().is_empty() && skip.iter().any(|s| e.file_name() == **s) {
                continue;
            }
            let r = rel.join(e.file_name());
            let p = root.join(&r);
            let m = fs::symlink_metadata(&p).unwrap();
            let node = if m.is_dir() {
                stack.push(r.clone());
                Node::Dir
            } else if m.file_type().is_symlink() {
                Node::Symlink(fs::read_link(&p).unwrap())
            } else {
                assert!(m.is_file(), "{}: unexpected file type", p.display());
                Node::File(digest_file(&p))
            };
            out.insert(r, node);
        }
    }
    out
}

/// Kill the worker of `brick`'s supervised DualFS and wait until its successor serves.
fn kill_worker_and_wait_successor(brick: &TestFs) {
    let worker = brick.worker_pid();
    assert_ne!(
        worker,
        brick.daemon_pid(),
        "the brick's DualFS is not supervised"
    );
    let before = brick.daemon_log_whole().matches("serving again").count();
    unsafe { libc::kill(worker as i32, libc::SIGKILL) };
    let start = Instant::now();
    while brick.daemon_log_whole().matches("serving again").count() == before {
        assert!(
            start.elapsed() < WAIT,
            "no successor of worker {worker}:\n{}",
            brick.daemon_log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!(
        "worker {worker} killed; a successor served after {:?}",
        start.elapsed()
    );
}

/// Every extended attribute of a brick entry but AFR's changelog (`trusted.afr.*`: each
/// brick's record of what the other missed, all zeros once in step), by name.
fn xattrs(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let c = sys::cstr(path);
    let mut names = vec![0u8; 64 << 10];
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(n >= 0, "llistxattr({})", path.display());
    let mut out = BTreeMap::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
    {
        let name_str = String::from_utf8_lossy(name).into_owned();
        if name_str.starts_with("trusted.afr.") {
            continue;
        }
        let cname = std::ffi::CString::new(name).unwrap();
        let mut value = vec![0u8; 64 << 10];
        let len = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        assert!(len >= 0, "lgetxattr({}, {name_str})", path.display());
        value.truncate(len as usize);
        out.insert(name_str, value);
    }
    out
}

/// `trusted.gfid` of a brick entry (Gluster's file id, equal on both bricks of a pair).
fn gfid(path: &Path) -> Vec<u8> {
    let c = sys::cstr(path);
    let name = c"trusted.gfid";
    let mut buf = [0u8; 64];
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(
        n >= 0,
        "lgetxattr({}, trusted.gfid): {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    buf[..n as usize].to_vec()
}

fn digest_bytes(b: &[u8]) -> u128 {
    use siphasher::sip128::{Hasher128, SipHasher};
    use std::hash::Hasher;
    let mut h = SipHasher::new_with_keys(1, 2);
    h.write(b);
    h.finish128().as_u128()
}

/// The repository's src/ and docs/ as (relative path, bytes), plus directories.
fn repo_files() -> Vec<(PathBuf, Vec<u8>)> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for top in ["src", "docs"] {
        for (rel, node) in tree(&repo.join(top), &[]) {
            if let Node::File(_) = node {
                let rel = Path::new(top).join(rel);
                files.push((rel.clone(), fs::read(repo.join(&rel)).unwrap()));
            }
        }
    }
    assert!(
        files.len() > 50,
        "src/ and docs/ hold only {} files",
        files.len()
    );
    files
}

/// A generated tree: `n` files in 16 directories, most small, some of a few MiB.
fn generated_files(n: usize) -> Vec<(PathBuf, Vec<u8>)> {
    let mut rng = ByteStream::new(0x6c75_7374);
    (0..n)
        .map(|i| {
            let len = match rng.next_u64() % 100 {
                0..=4 => 0,
                5..=79 => (rng.next_u64() % (16 << 10)) as usize,
                80..=97 => (rng.next_u64() % (256 << 10)) as usize,
                _ => (1 << 20) + (rng.next_u64() % (3 << 20)) as usize,
            };
            let rel = PathBuf::from(format!("gen/d{:02}/f{i:05}", i % 16));
            (rel, content(i as u64, len))
        })
        .collect()
}

/// Write `files` under `root` (directories made as needed), in pieces; count each one done.
fn copy_in(root: &Path, files: &[(PathBuf, Vec<u8>)], done: &AtomicUsize) -> std::io::Result<()> {
    for (rel, bytes) in files {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap())?;
        let mut f = fs::File::create(&p)?;
        for piece in bytes.chunks(128 << 10) {
            f.write_all(piece)?;
        }
        f.sync_all()?;
        drop(f);
        done.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}

/// What the source tree is, as a `tree()` of the volume must show it.
fn expected_tree(
    files: &[(PathBuf, Vec<u8>)],
    extra: &[(PathBuf, Node)],
) -> BTreeMap<PathBuf, Node> {
    let mut t = BTreeMap::new();
    for (rel, bytes) in files {
        for a in rel.ancestors().skip(1) {
            if !a.as_os_str().is_empty() {
                t.insert(a.to_path_buf(), Node::Dir);
            }
        }
        t.insert(rel.clone(), Node::File(digest_bytes(bytes)));
    }
    t.extend(extra.iter().cloned());
    t
}

/// Differences between two trees, for a failure message (at most 20).
fn diff(a: &BTreeMap<PathBuf, Node>, b: &BTreeMap<PathBuf, Node>) -> String {
    let mut out = Vec::new();
    for (k, v) in a {
        match b.get(k) {
            None => out.push(format!("only in the first: {} ({v:?})", k.display())),
            Some(w) if w != v => out.push(format!("differs: {} ({v:?} vs {w:?})", k.display())),
            _ => {}
        }
    }
    for (k, v) in b {
        if !a.contains_key(k) {
            out.push(format!("only in the second: {} ({v:?})", k.display()));
        }
    }
    let n = out.len();
    out.truncate(20);
    format!("{n} differences:\n{}", out.join("\n"))
}

/// Gluster's own directories in a brick root, not part of the volume's content.
const BRICK_INTERNALS: &[&str] = &[".glusterfs", ".trashcan"];

#[test]
fn replicated_volume_on_dualfs_survives_a_killed_brick() {
    dualfs_only!();
    let started = Instant::now();
    let host = host_name();
    let scratch = tempfile::Builder::new()
        .prefix("dualfs-gluster-")
        .tempdir()
        .unwrap();
    fs::set_permissions(scratch.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let root = scratch.path().canonicalize().unwrap();

    // Declared in this order so that Drop runs client, volume, glusterd, then the bricks.
    let mut bricks: Vec<TestFs> = (0..BRICKS)
        .map(|_| {
            TestFs::builder()
                .sizes(256 << 20, 2 << 30)
                .mount_opts(BRICK_OPTS)
                .mount()
        })
        .collect();
    let brick_dirs: Vec<PathBuf> = bricks.iter().map(|b| b.join("brick")).collect();
    for d in &brick_dirs {
        fs::create_dir(d).unwrap();
    }
    become_subreaper();
    let mut glusterd = Glusterd::start(&root);
    let volume_name = format!("dualfs{}", std::process::id());
    let brick_names: Vec<String> = brick_dirs
        .iter()
        .map(|d| format!("{host}:{}", d.display()))
        .collect();
    let mut volume = Volume::create(&volume_name, brick_names);
    let mut client = Client::mount(
        &host,
        &volume_name,
        &root.join("client"),
        &root.join("client.log"),
    );
    let vol = client.mnt.clone();

    // 1. The repository's sources, an empty directory and a symlink.
    let mut source = repo_files();
    copy_in(&vol, &source, &AtomicUsize::new(0)).unwrap();
    fs::create_dir(vol.join("empty")).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", vol.join("link")).unwrap();
    let extra = [
        (PathBuf::from("empty"), Node::Dir),
        (
            PathBuf::from("link"),
            Node::Symlink(PathBuf::from("src/lib.rs")),
        ),
    ];

    // 2. A generated tree, written while the workers of the VICTIMS' DualFS are killed.
    let generated = Arc::new(generated_files(1500));
    let done = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(Mutex::new(None));
    let writer = {
        let (vol, generated, done, failed) =
            (vol.clone(), generated.clone(), done.clone(), failed.clone());
        std::thread::spawn(move || {
            if let Err(e) = copy_in(&vol, &generated, &done) {
                *failed.lock().unwrap() = Some(e.to_string());
            }
        })
    };
    let wait_done = |n: usize| {
        let start = Instant::now();
        while done.load(Ordering::SeqCst) < n && !writer.is_finished() {
            assert!(
                start.elapsed() < WAIT,
                "writer stuck at {}",
                done.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let brick_pids: Vec<i32> = (0..BRICKS).map(|i| volume.brick_pid(i)).collect();
    let mut killed_at = Vec::new();
    for (k, &victim) in VICTIMS.iter().enumerate() {
        wait_done(generated.len() * (k + 1) / (VICTIMS.len() + 1));
        killed_at.push(done.load(Ordering::SeqCst));
        kill_worker_and_wait_successor(&bricks[victim]);
    }
    writer.join().unwrap();
    if let Some(e) = failed.lock().unwrap().take() {
        panic!(
            "writing through the Gluster client failed after {} of {} files: {e}",
            done.load(Ordering::SeqCst),
            generated.len()
        );
    }
    eprintln!(
        "workers of bricks {VICTIMS:?} killed after {killed_at:?} of {} files",
        generated.len()
    );
    assert!(
        killed_at.iter().all(|&n| n < generated.len()),
        "the writer finished before a worker was killed"
    );
    for (i, &pid) in brick_pids.iter().enumerate() {
        assert_eq!(
            volume.brick_pid(i),
            pid,
            "brick {i}'s glusterfsd was restarted"
        );
        assert!(alive(pid), "brick {i}'s glusterfsd died");
    }
    assert!(
        volume.bricks_online().iter().all(|&o| o),
        "a brick went offline"
    );

    // 3. Nothing to heal.
    volume.nothing_to_heal();

    // 4. Compare: the volume with the source, the bricks of each pair with each other.
    source.extend(generated.iter().cloned());
    let want = expected_tree(&source, &extra);
    let seen = tree(&vol, BRICK_INTERNALS);
    assert!(
        seen == want,
        "the volume differs from the source: {}",
        diff(&want, &seen)
    );
    let mut files_on_pairs = BTreeMap::new();
    for pair in brick_dirs.chunks(2) {
        let a = tree(&pair[0], BRICK_INTERNALS);
        let b = tree(&pair[1], BRICK_INTERNALS);
        assert!(
            a == b,
            "bricks {} and {} differ: {}",
            pair[0].display(),
            pair[1].display(),
            diff(&a, &b)
        );
        for rel in a.keys() {
            assert_eq!(
                gfid(&pair[0].join(rel)),
                gfid(&pair[1].join(rel)),
                "trusted.gfid of {} differs between the bricks of a pair",
                rel.display()
            );
            assert_eq!(
                xattrs(&pair[0].join(rel)),
                xattrs(&pair[1].join(rel)),
                "extended attributes of {} differ between the bricks of a pair",
                rel.display()
            );
        }
        let files: Vec<_> = a.into_iter().filter(|(_, n)| *n != Node::Dir).collect();
        assert!(
            !files.is_empty(),
            "pair {} holds no file",
            pair[0].display()
        );
        for (rel, node) in files {
            assert!(
                files_on_pairs.insert(rel.clone(), node).is_none(),
                "{} is on both replica pairs",
                rel.display()
            );
        }
    }
    let want_files: BTreeMap<_, _> = want.into_iter().filter(|(_, n)| *n != Node::Dir).collect();
    assert!(
        files_on_pairs == want_files,
        "the pairs together do not hold the source: {}",
        diff(&want_files, &files_on_pairs)
    );

    // 5. Stop everything, then check every DualFS.
    client.unmount().unwrap();
    volume.stop_and_delete().unwrap();
    glusterd.stop().unwrap();
    for b in &mut bricks {
        b.unmount();
    }
    eprintln!("GlusterFS test took {:?}", started.elapsed());
}
