//! The end-to-end test harness: a real DualFS (or, to validate the tests themselves, a kernel
//! file system) mounted in a private temporary directory.
//!
//! ```text
//! let mut fs = TestFs::new();             // mkfs + `dualfs mount --foreground`, wait until live
//! std::fs::write(fs.join("a"), b"x")?;     // real system calls on the mount
//! fs.remount();                            // unmount (+ checker) and mount again
//! fs.unmount();                            // umount, wait for the daemon (exit 0), checker clean
//! ```
//!
//! Backends (`DUALFS_TEST_BACKEND`): `dualfs` (default, what CI runs), `tmpfs` (a kernel tmpfs,
//! bind-mounted so that remount keeps the content) and `dir` (a plain directory of the host file
//! system, bind-mounted). The kernel backends exist to prove the tests right while the core is
//! being written; they have no images, so no mkfs and no checker.
//!
//! Whatever happens, `Drop` unmounts (lazily if it must), kills a daemon that does not exit,
//! detaches loop devices and removes the temporary files. A `TestFs` dropped while still mounted
//! outside a panic is unmounted *with* all checks, so no test can forget the checker.

#![allow(dead_code)]

pub mod sys;
pub mod tree;
pub mod user;

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use dualfs::device::{FileDevice, OpenMode};
use dualfs_testkit::LoopDevice;

#[allow(unused_imports)]
pub use sys::*;

/// What is mounted under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The real thing: mkfs (library), `dualfs mount --foreground`, checker.
    DualFs,
    /// A kernel tmpfs (bind-mounted from a private store so content survives remount).
    Tmpfs,
    /// A directory of the host file system, bind-mounted.
    Dir,
}

impl Backend {
    /// `DUALFS_TEST_BACKEND`: unset or `dualfs` (CI), `tmpfs`, `dir`. Anything else panics.
    pub fn from_env() -> Backend {
        match std::env::var("DUALFS_TEST_BACKEND").as_deref() {
            Err(_) | Ok("") | Ok("dualfs") => Backend::DualFs,
            Ok("tmpfs") => Backend::Tmpfs,
            Ok("dir") => Backend::Dir,
            Ok(other) => panic!("DUALFS_TEST_BACKEND={other:?}: expected dualfs, tmpfs or dir"),
        }
    }
    pub fn is_dualfs(self) -> bool {
        self == Backend::DualFs
    }
}

/// Path of the mount program: `DUALFS_BIN` if set (to run the suite against another build),
/// else the one Cargo built for integration tests, else `dualfs` beside the running executable
/// (`target/<profile>/`, for the bigdir example).
pub fn dualfs_bin() -> PathBuf {
    if let Ok(p) = std::env::var("DUALFS_BIN") {
        return PathBuf::from(p);
    }
    if let Some(p) = option_env!("CARGO_BIN_EXE_dualfs") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/examples/<name> -> target/<profile>/dualfs
    for dir in exe.ancestors().skip(1).take(3) {
        let cand = dir.join("dualfs");
        if cand.is_file() {
            return cand;
        }
    }
    panic!("cannot find the dualfs binary: set DUALFS_BIN");
}

pub fn env_secs(name: &str, default: u64) -> Duration {
    let s = std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(s)
}

/// Mount options every DualFS mount gets unless the builder says otherwise: `allow_other` so
/// tests can act as other users, `default_permissions` so the kernel checks permissions.
pub const DEFAULT_MOUNT_OPTS: &str = "allow_other,default_permissions";

/// Settings of a [`TestFs`].
#[derive(Clone, Debug)]
pub struct Builder {
    backend: Backend,
    meta_size: u64,
    data_size: u64,
    params: dualfs::mkfs::MkfsParams,
    mount_opts: String,
    pass_data: bool,
    loop_devices: bool,
    watchdog: Duration,
    images: Option<(PathBuf, PathBuf)>,
    daemon_args: Vec<String>,
    daemon_env: Vec<(String, String)>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            backend: Backend::from_env(),
            meta_size: 256 << 20,
            data_size: 2 << 30,
            params: dualfs::mkfs::MkfsParams::default(),
            mount_opts: DEFAULT_MOUNT_OPTS.to_string(),
            pass_data: true,
            loop_devices: false,
            watchdog: env_secs("DUALFS_TEST_WATCHDOG_SECS", 600),
            images: None,
            daemon_args: Vec::new(),
            daemon_env: Vec::new(),
        }
    }
}

impl Builder {
    /// Sizes of the two (sparse) image files.
    pub fn sizes(mut self, meta: u64, data: u64) -> Self {
        self.meta_size = meta;
        self.data_size = data;
        self
    }
    /// mkfs parameters (`data_path` is filled in by the harness).
    pub fn mkfs_params(mut self, p: dualfs::mkfs::MkfsParams) -> Self {
        self.params = p;
        self
    }
    /// The `-o` string (empty: no `-o`).
    pub fn mount_opts(mut self, opts: &str) -> Self {
        self.mount_opts = opts.to_string();
        self
    }
    /// false: mount with META only (DATA comes from META's superblock).
    pub fn pass_data(mut self, yes: bool) -> Self {
        self.pass_data = yes;
        self
    }
    /// Put the images behind two loop block devices. On a kernel backend the data loop device
    /// carries an ext4 that is mounted instead.
    pub fn loop_devices(mut self, yes: bool) -> Self {
        self.loop_devices = yes;
        self
    }
    /// Kill the daemon (so blocked system calls fail instead of hanging) after this long.
    pub fn watchdog(mut self, d: Duration) -> Self {
        self.watchdog = d;
        self
    }
    /// Mount an existing, already formatted pair (DualFS only): no image files are made and
    /// the given ones are left in place afterwards.
    pub fn images(mut self, meta: &Path, data: &Path) -> Self {
        self.images = Some((meta.to_path_buf(), data.to_path_buf()));
        self.backend = Backend::DualFs;
        self
    }
    /// More arguments for `dualfs mount` (e.g. `--threads 8`).
    pub fn daemon_args(mut self, args: &[&str]) -> Self {
        self.daemon_args = args.iter().map(|a| a.to_string()).collect();
        self
    }
    /// An environment variable for `dualfs mount` (e.g. `RUST_LOG`).
    pub fn daemon_env(mut self, key: &str, value: &str) -> Self {
        self.daemon_env.push((key.to_string(), value.to_string()));
        self
    }
    pub fn backend(mut self, b: Backend) -> Self {
        self.backend = b;
        self
    }
    /// Make the file system and mount it.
    pub fn mount(self) -> TestFs {
        TestFs::create(self)
    }
}

/// A running `dualfs mount --foreground`.
struct Daemon {
    child: Child,
    log: PathBuf,
    watchdog: Arc<Watchdog>,
}

/// Kills a daemon whose test runs too long, so that blocked system calls fail (ECONNABORTED)
/// instead of hanging the suite.
#[derive(Default)]
struct Watchdog {
    /// (disarmed, fired)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl Daemon {
    fn disarm(&self) {
        self.watchdog.state.lock().unwrap().0 = true;
        self.watchdog.cv.notify_all();
    }
    fn watchdog_fired(&self) -> bool {
        self.watchdog.state.lock().unwrap().1
    }
}

/// How `try_stop` ends a mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Umount,
    Signal(i32),
    AlreadyUnmounted,
}

/// A mounted file system under test, with everything it needs in one temporary directory.
pub struct TestFs {
    b: Builder,
    mnt: PathBuf,
    meta: PathBuf,
    data: PathBuf,
    store: PathBuf,
    daemon: Option<Daemon>,
    mounted: bool,
    mounts: u32,
    loops: Vec<LoopDevice>,
    // Last: removed after everything above is unmounted and detached.
    dir: tempfile::TempDir,
}

impl TestFs {
    /// Default sizes and options, mounted.
    pub fn new() -> TestFs {
        Builder::default().mount()
    }
    pub fn builder() -> Builder {
        Builder::default()
    }

    fn create(b: Builder) -> TestFs {
        user::require_root();
        if b.backend.is_dualfs() {
            assert!(
                Path::new("/dev/fuse").exists(),
                "/dev/fuse is missing: the DualFS tests need FUSE (modprobe fuse)"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("dualfs-test-")
            .tempdir()
            .expect("temp dir");
        // Other users must be able to reach the mount point.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mnt = root.join("mnt");
        fs::create_dir(&mnt).unwrap();
        let mut t = TestFs {
            meta: root.join("meta.img"),
            data: root.join("data.img"),
            store: root.join("store"),
            b,
            mnt,
            daemon: None,
            mounted: false,
            mounts: 0,
            loops: Vec::new(),
            dir,
        };
        match t.b.images.clone() {
            Some((m, d)) => (t.meta, t.data) = (m, d),
            None => t.format(),
        }
        t.mount();
        t
    }

    fn format(&mut self) {
        make_image(&self.meta, self.b.meta_size);
        make_image(&self.data, self.b.data_size);
        if self.b.loop_devices {
            let m = LoopDevice::attach(&self.meta);
            let d = LoopDevice::attach(&self.data);
            self.meta = m.path().to_path_buf();
            self.data = d.path().to_path_buf();
            self.loops = vec![m, d];
        }
        match self.b.backend {
            Backend::DualFs => {
                let mut p = self.b.params.clone();
                p.data_path = self.data.to_str().unwrap().to_string();
                mkfs_pair(&self.meta, &self.data, &p);
            }
            Backend::Tmpfs if !self.b.loop_devices => {
                fs::create_dir(&self.store).unwrap();
                let opts = format!("size={},mode=0755", self.b.data_size);
                sys::mount(Some("tmpfs"), &self.store, Some("tmpfs"), 0, Some(&opts))
                    .unwrap_or_else(|e| panic!("mount tmpfs on {}: {e}", self.store.display()));
            }
            Backend::Dir if !self.b.loop_devices => {
                fs::create_dir(&self.store).unwrap();
            }
            _ => {
                // Kernel backend over loop devices: an ext4 on the data loop device.
                run_ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&self.data));
            }
        }
    }

    /// Mount (again). Panics if already mounted.
    pub fn mount(&mut self) {
        assert!(!self.mounted, "mount: already mounted");
        self.mounts += 1;
        match self.b.backend {
            Backend::DualFs => self.spawn_daemon(),
            _ if self.b.loop_devices => {
                sys::mount(
                    Some(self.data.to_str().unwrap()),
                    &self.mnt,
                    Some("ext4"),
                    0,
                    None,
                )
                .unwrap_or_else(|e| panic!("mount ext4 {}: {e}", self.data.display()));
            }
            _ => {
                sys::mount(
                    Some(self.store.to_str().unwrap()),
                    &self.mnt,
                    None,
                    libc::MS_BIND,
                    None,
                )
                .unwrap_or_else(|e| panic!("bind mount {}: {e}", self.store.display()));
            }
        }
        self.mounted = true;
    }

    /// Start the daemon and wait until the mount appears. A mount refused because an image
    /// is "in use" is tried again for a while: this test process runs tests on several
    /// threads, and a child that another thread is starting inherits, until its exec, the
    /// descriptors this thread had open (mkfs's, which hold an exclusive flock on the
    /// images), so the lock can outlive their close by a moment. Any other failure panics at
    /// once.
    fn spawn_daemon(&mut self) {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.try_spawn_daemon() {
                Ok(()) => return,
                Err(log) if log.contains("is in use") && attempts < 40 => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(log) => panic!(
                    "`dualfs mount` exited before {} was mounted (attempt {attempts}); its \
                     output:\n{log}",
                    self.mnt.display()
                ),
            }
        }
    }

    /// One attempt of `spawn_daemon`: Err(the daemon's output) if it exited before mounting.
    fn try_spawn_daemon(&mut self) -> Result<(), String> {
        let log = self.dir.path().join(format!("daemon-{}.log", self.mounts));
        let out = fs::File::create(&log).unwrap();
        let mut cmd = Command::new(dualfs_bin());
        cmd.arg("mount").arg(&self.meta);
        if self.b.pass_data {
            cmd.arg(&self.data);
        }
        cmd.arg(&self.mnt);
        // DUALFS_TEST_EXTRA_OPTS adds options to every mount (e.g. writeback_cache), to run
        // the whole suite in another configuration.
        if let Ok(extra) = std::env::var("DUALFS_TEST_EXTRA_OPTS") {
            cmd.arg("-o").arg(extra);
        }
        if !self.b.mount_opts.is_empty() {
            cmd.arg("-o").arg(&self.b.mount_opts);
        }
        cmd.args(&self.b.daemon_args);
        cmd.envs(self.b.daemon_env.iter().map(|(k, v)| (k, v)));
        cmd.arg("--foreground")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", dualfs_bin().display()));
        let watchdog = Arc::new(Watchdog::default());
        start_watchdog(
            child.id() as i32,
            self.b.watchdog,
            watchdog.clone(),
            &self.mnt,
        );
        self.daemon = Some(Daemon {
            child,
            log,
            watchdog,
        });
        let timeout = env_secs("DUALFS_TEST_MOUNT_TIMEOUT_SECS", 30);
        let start = Instant::now();
        loop {
            if let Some(ty) = mount_type(&self.mnt) {
                assert!(
                    ty == "fuse" || ty.starts_with("fuse."),
                    "{} is mounted as {ty:?}, not as a FUSE file system",
                    self.mnt.display()
                );
                // In the table is not yet served: the daemon may not have read the kernel's
                // INIT, and a test that unmounted at once (a read-only mount, nothing to do)
                // made its handshake fail (ENODEV) and the daemon exit 1. A stat of the root
                // waits for the handshake (requests wait until the connection is initialized).
                if let Err(e) = fs::metadata(&self.mnt) {
                    let log = self.daemon_log();
                    self.kill_daemon();
                    return Err(format!("(stat of the mount: {e}) {log}"));
                }
                return Ok(());
            }
            let d = self.daemon.as_mut().unwrap();
            if let Some(st) = d.child.try_wait().unwrap() {
                d.disarm();
                let log = read_log(&d.log);
                self.daemon = None;
                return Err(format!("({st}) {log}"));
            }
            if start.elapsed() > timeout {
                let log = self.daemon_log();
                self.kill_daemon();
                panic!(
                    "{} not mounted after {timeout:?}; daemon output:\n{log}",
                    self.mnt.display()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The mount root.
    pub fn path(&self) -> &Path {
        &self.mnt
    }
    /// A path under the mount root.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.mnt.join(rel)
    }
    pub fn backend(&self) -> Backend {
        self.b.backend
    }
    pub fn is_dualfs(&self) -> bool {
        self.b.backend.is_dualfs()
    }
    /// Mounted with the kernel's writeback cache: writes land in the page cache and reach
    /// the daemon later, so errors such as EFBIG surface at fsync instead of write.
    pub fn writeback_cache(&self) -> bool {
        self.mount_option("writeback_cache")
    }
    /// Was `-o OPTION` (a flag) given to the mount, by the test or DUALFS_TEST_EXTRA_OPTS?
    pub fn mount_option(&self, option: &str) -> bool {
        let extra = std::env::var("DUALFS_TEST_EXTRA_OPTS").unwrap_or_default();
        [extra.as_str(), self.b.mount_opts.as_str()]
            .iter()
            .flat_map(|o| o.split(','))
            .any(|o| o == option)
    }
    pub fn is_mounted(&self) -> bool {
        self.mounted
    }
    /// The metadata device (image file or loop device).
    pub fn meta_path(&self) -> &Path {
        &self.meta
    }
    pub fn data_path(&self) -> &Path {
        &self.data
    }
    /// A scratch directory outside the mount, removed with the `TestFs`.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }
    /// The pid of the running daemon (DualFS only).
    pub fn daemon_pid(&self) -> u32 {
        self.daemon
            .as_ref()
            .expect("daemon_pid: no DualFS daemon")
            .child
            .id()
    }

    /// The pid of the process serving the mount: the supervisor's worker when the mount is
    /// supervised (waiting up to 10 s for one to exist), else the daemon itself.
    pub fn worker_pid(&self) -> u32 {
        let daemon = self.daemon_pid();
        let children = format!("/proc/{daemon}/task/{daemon}/children");
        let start = Instant::now();
        loop {
            let listed = fs::read_to_string(&children).unwrap_or_default();
            if let Some(pid) = listed.split_whitespace().next() {
                return pid.parse().unwrap();
            }
            if !self.daemon_log().contains("supervisor") {
                return daemon;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "supervisor {daemon} has no worker"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Everything the daemon printed so far (empty on kernel backends).
    pub fn daemon_log(&self) -> String {
        self.daemon
            .as_ref()
            .map(|d| read_log(&d.log))
            .unwrap_or_default()
    }
    /// The daemon's whole output (`daemon_log` keeps its last 16 KiB, for messages).
    pub fn daemon_log_whole(&self) -> String {
        self.daemon
            .as_ref()
            .map(|d| read_log_whole(&d.log))
            .unwrap_or_default()
    }

    /// Unmount, wait for the daemon to exit with status 0, run the checker and require a clean
    /// report. Panics (after cleaning up) on any failure.
    pub fn unmount(&mut self) {
        if let Err(msg) = self.try_unmount() {
            panic!("{msg}");
        }
    }

    /// Crash the mount process: SIGKILL the daemon (what it wrote to the images stays, what
    /// it held in memory is lost), reap it, and lazily unmount the dead mount. The file system
    /// is then not mounted; `mount()` runs recovery. Returns the daemon's pid. DualFS only.
    pub fn kill_daemon_hard(&mut self) -> u32 {
        assert!(self.mounted, "kill_daemon_hard: not mounted");
        let mut d = self.daemon.take().expect("kill_daemon_hard: DualFS daemon");
        d.disarm();
        let pid = d.child.id();
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let _ = d.child.wait();
        self.mounted = false;
        // A FUSE mount whose daemon died stays in the table until unmounted; programs still
        // inside it get ENOTCONN.
        let start = Instant::now();
        while is_mounted(&self.mnt) {
            let _ = sys::umount2(&self.mnt, libc::MNT_DETACH);
            if start.elapsed() > Duration::from_secs(10) {
                panic!(
                    "{} still mounted after the daemon was killed",
                    self.mnt.display()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        pid
    }

    /// The daemon is to end by itself (its session was ended from outside: an abort, a
    /// forced unmount): wait for it to exit and return its status and its log. The file
    /// system then counts as not mounted (a dead mount left in the table is detached when
    /// the `TestFs` goes). Panics if the daemon is still running after the exit timeout.
    pub fn wait_daemon_exit(&mut self) -> (ExitStatus, String) {
        assert!(self.mounted, "wait_daemon_exit: not mounted");
        let mut d = self.daemon.take().expect("wait_daemon_exit: DualFS daemon");
        let timeout = env_secs("DUALFS_TEST_EXIT_TIMEOUT_SECS", 120);
        let status = wait_timeout(&mut d.child, timeout);
        d.disarm();
        self.mounted = false;
        let log = read_log(&d.log);
        let Some(status) = status else {
            let _ = d.child.kill();
            let _ = d.child.wait();
            panic!("the daemon did not exit within {timeout:?}; its log:\n{log}");
        };
        (status, log)
    }

    /// Run the checker (DualFS, not mounted); panics with its report unless clean.
    pub fn check(&self) {
        assert!(!self.mounted, "check: still mounted");
        if let Err(report) = check_pair(&self.meta, &self.data) {
            panic!("{report}");
        }
    }

    /// Unmount and mount again (the checker runs in between).
    pub fn remount(&mut self) {
        self.unmount();
        self.mount();
    }

    fn try_unmount(&mut self) -> Result<(), String> {
        self.try_stop(Stop::Umount)
    }

    /// The test unmounted the file system itself (umount(2) in its own way): wait for the
    /// daemon to exit with status 0, then run the checker, as `unmount` does.
    pub fn unmounted_by_test(&mut self) {
        if let Err(msg) = self.try_stop(Stop::AlreadyUnmounted) {
            panic!("{msg}");
        }
    }

    /// Stop the daemon with a signal (SIGTERM, SIGINT, SIGHUP) instead of umount: it must
    /// unmount itself, write its final checkpoint and exit 0; then the checker runs.
    pub fn stop_with_signal(&mut self, sig: i32) {
        assert!(
            self.is_dualfs(),
            "stop_with_signal needs the DualFS backend"
        );
        if let Err(msg) = self.try_stop(Stop::Signal(sig)) {
            panic!("{msg}");
        }
    }

    fn try_stop(&mut self, how: Stop) -> Result<(), String> {
        if !self.mounted {
            return Err("unmount: not mounted".into());
        }
        self.mounted = false;
        let mut problems = Vec::new();
        let mut timeout = env_secs("DUALFS_TEST_EXIT_TIMEOUT_SECS", 120);
        match (how, &self.daemon) {
            (Stop::Signal(sig), Some(d)) => unsafe {
                libc::kill(d.child.id() as i32, sig);
            },
            (Stop::AlreadyUnmounted, _) => {}
            _ => {
                let busy_for = env_secs("DUALFS_TEST_UMOUNT_BUSY_SECS", 10);
                if let Err(e) = umount_retry(&self.mnt, busy_for) {
                    problems.push(format!(
                        "umount {}: {e} (some descriptor still open?)",
                        self.mnt.display()
                    ));
                    let _ = sys::umount2(&self.mnt, libc::MNT_DETACH);
                    // Detached but still in use: the daemon will not get its unmount soon.
                    timeout = timeout.min(Duration::from_secs(10));
                }
            }
        }
        if let Some(mut d) = self.daemon.take() {
            match wait_timeout(&mut d.child, timeout) {
                Some(st) if st.success() => {}
                Some(st) if d.watchdog_fired() => problems.push(format!(
                    "`dualfs mount` exited with {st}: the watchdog killed it after {:?} \
                     (DUALFS_TEST_WATCHDOG_SECS)",
                    self.b.watchdog
                )),
                Some(st) => problems.push(format!("`dualfs mount` exited with {st}")),
                None => {
                    problems.push(format!(
                        "`dualfs mount` did not exit within {timeout:?} after umount; killed"
                    ));
                    let _ = d.child.kill();
                    let _ = d.child.wait();
                }
            }
            d.disarm();
            if !problems.is_empty() {
                problems.push(format!("daemon output:\n{}", read_log(&d.log)));
            }
        }
        if is_mounted(&self.mnt) {
            problems.push(format!("{} still mounted after umount", self.mnt.display()));
        }
        if problems.is_empty() && self.is_dualfs() {
            if let Err(report) = check_pair(&self.meta, &self.data) {
                problems.push(report);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    fn kill_daemon(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            d.disarm();
            let _ = d.child.kill();
            let _ = d.child.wait();
        }
        // A FUSE mount whose daemon died stays in the table until unmounted.
        if is_mounted(&self.mnt) {
            let _ = sys::umount2(&self.mnt, libc::MNT_DETACH);
        }
    }

    /// Best-effort cleanup while panicking: lazy umount, give the daemon a moment, kill it.
    fn cleanup_after_panic(&mut self) {
        if self.mounted || is_mounted(&self.mnt) {
            let _ = sys::umount2(&self.mnt, libc::MNT_DETACH);
            self.mounted = false;
        }
        if let Some(d) = self.daemon.as_mut() {
            if wait_timeout(&mut d.child, Duration::from_secs(10)).is_none() {
                eprintln!("TestFs: daemon did not exit after lazy umount; killing it");
            }
        }
        self.kill_daemon();
    }
}

impl Drop for TestFs {
    fn drop(&mut self) {
        let mut failure = None;
        if std::thread::panicking() {
            // The daemon's own account of what went wrong is the best clue.
            let log = self.daemon_log();
            if !log.is_empty() {
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!("--- last lines of the dualfs daemon log ---");
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
            self.cleanup_after_panic();
        } else if self.mounted {
            if let Err(msg) = self.try_unmount() {
                failure = Some(msg);
            }
            self.cleanup_after_panic();
        } else {
            self.kill_daemon();
        }
        if self.b.backend == Backend::Tmpfs && !self.b.loop_devices {
            if let Err(e) = sys::umount2(&self.store, 0) {
                eprintln!("umount {}: {e}; detaching", self.store.display());
                let _ = sys::umount2(&self.store, libc::MNT_DETACH);
            }
        }
        self.loops.clear();
        if let Some(msg) = failure {
            panic!("{msg}");
        }
    }
}

fn start_watchdog(pid: i32, limit: Duration, w: Arc<Watchdog>, mnt: &Path) {
    let mnt = mnt.to_path_buf();
    std::thread::spawn(move || {
        let guard = w.state.lock().unwrap();
        let (mut guard, res) = w.cv.wait_timeout_while(guard, limit, |s| !s.0).unwrap();
        if res.timed_out() && !guard.0 {
            guard.1 = true;
            eprintln!(
                "WATCHDOG: test on {} still running after {limit:?}: killing dualfs pid {pid} \
                 so blocked system calls fail",
                mnt.display()
            );
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
}

/// A log file's whole text.
fn read_log_whole(p: &Path) -> String {
    String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned()
}

/// A log's last 16 KiB, for messages.
fn read_log(p: &Path) -> String {
    let s = read_log_whole(p);
    const MAX: usize = 16 << 10;
    if s.len() > MAX {
        let mut cut = s.len() - MAX;
        while !s.is_char_boundary(cut) {
            cut += 1;
        }
        format!("[... {cut} bytes cut ...]\n{}", &s[cut..])
    } else {
        s
    }
}

/// Wait for a child until `timeout`; None if it is still running.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return Some(st);
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// umount(2), retrying while EBUSY for up to `busy_for`.
pub fn umount_retry(mnt: &Path, busy_for: Duration) -> io::Result<()> {
    let start = Instant::now();
    loop {
        match sys::umount2(mnt, 0) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < busy_for => {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// Is `path` a mount point of a FUSE, tmpfs or any file system right now (per
/// /proc/self/mounts)? For FUSE the type must be `fuse` or `fuse.*`.
pub fn is_mounted(path: &Path) -> bool {
    mount_type(path).is_some()
}

/// The file system type of the mount at exactly `path`, if any (the last one listed wins).
pub fn mount_type(path: &Path) -> Option<String> {
    let table = fs::read_to_string("/proc/self/mounts").expect("read /proc/self/mounts");
    let want = path.to_str().unwrap();
    let mut found = None;
    for line in table.lines() {
        let mut f = line.split(' ');
        let (_, Some(mp), Some(ty)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if unescape_mount_field(mp) == want {
            found = Some(ty.to_string());
        }
    }
    found
}

/// /proc/mounts writes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_field(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A sparse image file of `size` bytes.
pub fn make_image(path: &Path, size: u64) {
    let f = fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.set_len(size).unwrap();
}

/// Open a device read-write and exclusively, as mkfs would.
pub fn open_device(path: &Path, read_only: bool) -> FileDevice {
    FileDevice::open(
        path,
        OpenMode {
            read_only,
            exclusive: !read_only,
            ..OpenMode::default()
        },
    )
    .unwrap_or_else(|e| panic!("FileDevice::open({}): {e}", path.display()))
}

/// mkfs (library) on a pair of devices; panics with the error.
pub fn mkfs_pair(meta: &Path, data: &Path, p: &dualfs::mkfs::MkfsParams) {
    let m: std::sync::Arc<dyn dualfs::device::BlockDevice> =
        std::sync::Arc::new(open_device(meta, false));
    let d: std::sync::Arc<dyn dualfs::device::BlockDevice> =
        std::sync::Arc::new(open_device(data, false));
    if let Err(e) = dualfs::mkfs::mkfs(m, d, p) {
        panic!("mkfs({}, {}): {e}", meta.display(), data.display());
    }
}

/// Two sparse image files of the given sizes, formatted as a DualFS (META records DATA).
pub fn make_formatted_pair(meta: &Path, data: &Path, meta_size: u64, data_size: u64) {
    make_image(meta, meta_size);
    make_image(data, data_size);
    let params = dualfs::mkfs::MkfsParams {
        data_path: data.to_str().unwrap().to_string(),
        ..Default::default()
    };
    mkfs_pair(meta, data, &params);
}

/// Run the checker on a pair of devices; Err with the report (or the error) unless clean.
pub fn check_pair(meta: &Path, data: &Path) -> Result<(), String> {
    let m = open_device(meta, true);
    let d = open_device(data, true);
    match dualfs::check::check(&m, &d) {
        Ok(r) if r.is_clean() => Ok(()),
        Ok(r) => Err(format!(
            "checker found problems on {} + {}:\n{r}",
            meta.display(),
            data.display()
        )),
        Err(e) => Err(format!(
            "checker failed on {} + {}: {e}",
            meta.display(),
            data.display()
        )),
    }
}

/// A 128-bit digest of a whole file or device (to prove it was not written).
pub fn digest_file(path: &Path) -> u128 {
    use std::hash::Hasher;
    let mut f = fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut h = siphasher::sip128::SipHasher::new_with_keys(1, 2);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.write(&buf[..n]);
    }
    use siphasher::sip128::Hasher128;
    h.finish128().as_u128()
}

/// Run a command, panic with its output unless it succeeds; returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Deterministic fast pseudo-random bytes (xorshift64*), for file contents.
pub struct ByteStream(u64);

impl ByteStream {
    pub fn new(seed: u64) -> Self {
        ByteStream(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let v = self.next_u64().to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&v[..n]);
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }
}

/// Content of file `id` of `len` bytes: seeded, so it can be regenerated to compare.
pub fn content(id: u64, len: usize) -> Vec<u8> {
    ByteStream::new(id ^ 0x005E_ED0F_C0DE).bytes(len)
}

/// Return early (loudly) from a test that only means something on DualFS when a kernel backend
/// is selected to validate the suite. CI runs the DualFS backend, where this does nothing.
#[macro_export]
macro_rules! dualfs_only {
    () => {
        if !$crate::common::Backend::from_env().is_dualfs() {
            eprintln!(
                "NOT APPLICABLE on DUALFS_TEST_BACKEND={:?}: this test exercises DualFS itself",
                $crate::common::Backend::from_env()
            );
            return;
        }
    };
}

/// How a mount attempt that should fail went.
#[derive(Debug)]
pub struct FailedMount {
    pub status: ExitStatus,
    pub stderr: String,
}

/// Run `dualfs mount ARGS.. MNT --foreground` expecting it to refuse: it must exit on its own
/// with a non-zero code (not a signal) within the timeout and never mount. If it does mount, it
/// is unmounted and the test fails.
pub fn mount_expecting_failure(args: &[&Path], scratch: &Path) -> FailedMount {
    let mnt = scratch.join(format!("mnt-fail-{}", next_id()));
    fs::create_dir(&mnt).unwrap();
    let mnt = mnt.canonicalize().unwrap();
    let log = mnt.with_extension("stderr");
    let err = fs::File::create(&log).unwrap();
    let mut child = Command::new(dualfs_bin())
        .arg("mount")
        .args(args)
        .arg(&mnt)
        .arg("--foreground")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if is_mounted(&mnt) {
            let _ = umount_retry(&mnt, Duration::from_secs(5));
            let _ = sys::umount2(&mnt, libc::MNT_DETACH);
            if wait_timeout(&mut child, Duration::from_secs(30)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            panic!(
                "`dualfs mount {args:?}` MOUNTED what it should have refused; output:\n{}",
                read_log(&log)
            );
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`dualfs mount {args:?}` neither mounted nor exited within 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(!is_mounted(&mnt));
    let stderr = read_log(&log);
    let _ = fs::remove_dir(&mnt);
    FailedMount { status, stderr }
}

fn next_id() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

impl FailedMount {
    /// Non-zero exit code, exactly one non-empty line on stderr, no panic.
    pub fn assert_clear_error(&self, what: &str) {
        assert!(
            self.status.code().is_some_and(|c| c != 0),
            "{what}: expected a non-zero exit code, got {}; stderr:\n{}",
            self.status,
            self.stderr
        );
        let lines: Vec<_> = self
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert!(
            lines.len() == 1 && !self.stderr.contains("panicked"),
            "{what}: expected a one-line message on stderr, got {} line(s):\n{}",
            lines.len(),
            self.stderr
        );
    }
}

/// A private kernel tmpfs on a temporary directory, unmounted and removed on drop: a fast place
/// for the expected side of comparisons (the host's /tmp can be much slower for many files).
pub struct TmpfsDir {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TmpfsDir {
    pub fn new(size: u64) -> TmpfsDir {
        user::require_root();
        let dir = tempfile::Builder::new()
            .prefix("dualfs-src-")
            .tempdir()
            .unwrap();
        let path = dir.path().canonicalize().unwrap();
        let opts = format!("size={size},mode=0755");
        sys::mount(Some("tmpfs"), &path, Some("tmpfs"), 0, Some(&opts))
            .unwrap_or_else(|e| panic!("mount tmpfs on {}: {e}", path.display()));
        TmpfsDir { path, _dir: dir }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TmpfsDir {
    fn drop(&mut self) {
        if sys::umount2(&self.path, 0).is_err() {
            let _ = sys::umount2(&self.path, libc::MNT_DETACH);
        }
    }
}
