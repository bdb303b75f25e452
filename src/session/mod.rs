//! DualFS's own FUSE session layer: the kernel ABI (`abi`), request decoding (`request`),
//! reply encoding (`reply`), INIT negotiation (`init`) and two transports that carry
//! requests between the kernel and one [`Dispatch`]: /dev/fuse (`dev`: worker threads, each
//! with its own cloned descriptor) and FUSE over io_uring (`uring`: one ring per possible
//! CPU). docs/DESIGN.md ("The session layer") says why it exists.
//!
//! Whichever transport carried a request, the file system sees it once, through
//! [`Dispatch::dispatch`].

pub mod abi;
mod dev;
pub mod init;
pub mod reply;
pub mod request;
mod uring;

pub use init::{InitConfig, Negotiated};
pub use reply::{Answer, DirBuf, Reply};
pub use request::{Operation, Request};

use log::{debug, info, warn};
use nix::mount::MsFlags;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use zerocopy::IntoBytes;

/// A file system served by a session: called once per request, from any transport thread.
pub trait Dispatch: Send + Sync + 'static {
    /// Answer `req` through `reply` (FORGET and BATCH_FORGET: the reply is not sent).
    /// INIT, DESTROY and INTERRUPT never reach it. A request left unanswered gets EIO.
    fn dispatch(&self, req: &Request<'_>, reply: &mut Reply<'_>);

    /// INIT is done: what the kernel granted, and the channel for notifications to the
    /// kernel. Called before any other request is served.
    fn init(&self, _negotiated: &Negotiated, _notifier: Notifier) {}

    /// The kernel ended the session with DESTROY (only sent for `fuseblk` mounts).
    fn destroy(&self) {}
}

/// Which transport carries requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// read() and write() on /dev/fuse.
    Dev,
    /// FUSE over io_uring (INIT, FORGET and INTERRUPT still come over /dev/fuse).
    Uring,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Dev => "dev",
            Transport::Uring => "uring",
        })
    }
}

/// Whose requests the session serves: the kernel knows only `allow_other` (every user, or
/// the mount's owner alone), so `allow_root` is enforced here, as libfuse and fuser do it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Acl {
    /// Every user (`allow_other`).
    #[default]
    All,
    /// Root and the session's owner (`allow_root`).
    RootAndOwner,
    /// The session's owner alone (neither option).
    Owner,
}

/// A failure to inject into the ring's setup, to test that a mount falls back to /dev/fuse
/// instead of hanging.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UringFault {
    /// Setting up the rings fails before INIT (io_uring disabled, no memory).
    Setup,
    /// Queue `qid` sends only REGISTERs the kernel refuses.
    RefuseRegister { qid: usize },
    /// Queue `qid` fails after INIT, before it registers anything.
    QueueFails { qid: usize },
}

/// How to run a session.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    pub init: InitConfig,
    /// The transport wanted; io_uring falls back to /dev/fuse when the kernel does not
    /// offer it or a ring cannot be set up.
    pub transport: Transport,
    /// /dev/fuse worker threads.
    pub threads: usize,
    /// Ring entries per io_uring queue (requests in flight per CPU).
    pub queue_depth: usize,
    /// Whose requests are served; the owner is this process's effective user.
    pub acl: Acl,
    /// Give each /dev/fuse thread a descriptor of its own (FUSE_DEV_IOC_CLONE). Off when a
    /// supervisor keeps the connection for a successor: requests read on a clone are
    /// aborted when the clone closes with its dead daemon, while the session's descriptor
    /// lives on in the supervisor.
    pub clone_devices: bool,
    #[doc(hidden)]
    pub fault: Option<UringFault>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            init: InitConfig::default(),
            transport: Transport::Uring,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            queue_depth: 8,
            acl: Acl::All,
            clone_devices: true,
            fault: None,
        }
    }
}

/// Requests served, per transport.
#[derive(Debug, Default)]
pub struct Stats {
    pub dev_requests: AtomicU64,
    pub uring_requests: AtomicU64,
    /// Of the ring's requests, those the data threads served (large READs).
    pub data_thread_requests: AtomicU64,
}

impl Stats {
    pub fn dev(&self) -> u64 {
        self.dev_requests.load(Ordering::Relaxed)
    }

    pub fn uring(&self) -> u64 {
        self.uring_requests.load(Ordering::Relaxed)
    }

    pub fn data_threads(&self) -> u64 {
        self.data_thread_requests.load(Ordering::Relaxed)
    }
}

/// The mount(2) of a FUSE connection.
#[derive(Clone, Debug)]
pub struct MountSpec<'a> {
    pub mountpoint: &'a Path,
    /// `fuse.<subtype>`.
    pub fs_type: &'a str,
    /// What /proc/mounts shows as the source.
    pub source: &'a str,
    pub flags: MsFlags,
    pub allow_other: bool,
}

/// Open /dev/fuse and mount it (root only), with the options `cli/kernel_mount.rs` passes:
/// `default_permissions` always, `allow_other` when asked.
pub fn mount(spec: &MountSpec<'_>) -> io::Result<OwnedFd> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let device = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")?;
    let root_mode = std::fs::metadata(spec.mountpoint)?.mode() & libc::S_IFMT;
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={root_mode:o},user_id={uid},group_id={gid},default_permissions",
        device.as_raw_fd()
    );
    if spec.allow_other {
        data.push_str(",allow_other");
    }
    nix::mount::mount(
        Some(spec.source),
        spec.mountpoint,
        Some(spec.fs_type),
        spec.flags,
        Some(data.as_str()),
    )
    .map_err(io::Error::from)?;
    Ok(OwnedFd::from(device))
}

/// How a session's threads ended: the first failure that was not the kernel ending the
/// connection (ENODEV), kept for [`Session::join`].
#[derive(Default)]
pub(crate) struct End {
    error: Mutex<Option<io::Error>>,
}

impl End {
    pub(crate) fn failed(&self, e: io::Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
    }

    fn take(&self) -> Option<io::Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// A running session: its threads serve requests until the file system is unmounted.
pub struct Session {
    device: Arc<OwnedFd>,
    negotiated: Negotiated,
    transport: Transport,
    stats: Arc<Stats>,
    end: Arc<End>,
    threads: Vec<JoinHandle<()>>,
    mountpoint: Option<PathBuf>,
}

impl Session {
    /// Mount and start serving (the INIT handshake is done when this returns).
    pub fn mount<D: Dispatch>(
        fs: Arc<D>,
        spec: &MountSpec<'_>,
        config: &SessionConfig,
    ) -> io::Result<Session> {
        let fd = mount(spec)?;
        match Session::start(fs, fd, config) {
            Ok(mut session) => {
                session.mountpoint = Some(spec.mountpoint.to_path_buf());
                Ok(session)
            }
            Err(e) => {
                // The descriptor is closed: the connection is gone, the mount is dead.
                let _ = nix::mount::umount2(spec.mountpoint, nix::mount::MntFlags::MNT_DETACH);
                Err(e)
            }
        }
    }

    /// Serve a connection already mounted on `device`: answer INIT, then start the
    /// transports. When it fails, dropping `device` ends the connection.
    pub fn start<D: Dispatch>(
        fs: Arc<D>,
        device: OwnedFd,
        config: &SessionConfig,
    ) -> io::Result<Session> {
        Session::handshake(fs, device, config)?.serve()
    }

    /// Answer INIT on `device` and stop there: the kernel holds every other request until
    /// [`Handshake::serve`] starts the transports, so that what has to be in place before
    /// the first request (the mount's read-ahead window, which INIT can only lower; the
    /// daemon's pid file and control socket) is done by then. When it fails, or the
    /// handshake is dropped, `device` is closed and the connection ends.
    pub fn handshake<D: Dispatch>(
        fs: Arc<D>,
        device: OwnedFd,
        config: &SessionConfig,
    ) -> io::Result<Handshake<D>> {
        let fs = Arc::new(Gate {
            inner: fs,
            acl: config.acl,
            // SAFETY: geteuid cannot fail.
            owner: unsafe { libc::geteuid() },
        });
        let device = Arc::new(device);
        let (unique, kernel_init) = dev::read_init(&device, config.init.max_write)?;
        let want_uring = config.transport == Transport::Uring;
        let mut negotiated = match init::negotiate(&kernel_init, &config.init, want_uring) {
            Ok(n) => n,
            Err(e) => {
                let _ = dev::send_error(&device, unique, libc::EPROTO);
                return Err(io::Error::new(io::ErrorKind::Unsupported, e.to_string()));
            }
        };
        // The rings exist before the kernel is promised them: once FUSE_OVER_IO_URING is
        // granted, the kernel holds every request until each queue has an entry.
        let rings = if negotiated.has(abi::init_flags::OVER_IO_URING) {
            match uring::Rings::prepare(&negotiated, config) {
                Ok(rings) => Some(rings),
                Err(e) => {
                    warn!("FUSE over io_uring unavailable ({e}): serving over /dev/fuse");
                    negotiated.set_uring(false);
                    None
                }
            }
        } else {
            if want_uring {
                info!("the kernel does not offer FUSE over io_uring: serving over /dev/fuse");
            }
            None
        };
        fs.init(
            &negotiated,
            Notifier {
                device: device.clone(),
            },
        );
        let reply = negotiated.reply(&config.init);
        dev::send(&device, unique, 0, reply.as_bytes())?;
        debug!(
            "INIT: kernel 7.{}, flags {:#x}, max_write {}, max_pages {}",
            negotiated.minor, negotiated.flags, negotiated.max_write, negotiated.max_pages
        );
        Ok(Handshake {
            fs,
            device,
            negotiated,
            rings,
            threads: config.threads.max(1),
            fault: config.fault,
            clone: config.clone_devices,
        })
    }

    /// Serve a connection a dead daemon served, from the outcome of its INIT: no handshake
    /// (the kernel sends INIT once per connection), /dev/fuse only (a dead daemon's io_uring
    /// entries keep the requests they held: docs/DESIGN.md, "Surviving the daemon"). The
    /// caller asks the kernel to resend what the dead daemon had read
    /// ([`Notifier::resend`]) once this serves.
    pub fn resume<D: Dispatch>(
        fs: Arc<D>,
        device: OwnedFd,
        negotiated: Negotiated,
        config: &SessionConfig,
    ) -> Handshake<D> {
        let fs = Arc::new(Gate {
            inner: fs,
            acl: config.acl,
            // SAFETY: geteuid cannot fail.
            owner: unsafe { libc::geteuid() },
        });
        let device = Arc::new(device);
        fs.init(
            &negotiated,
            Notifier {
                device: device.clone(),
            },
        );
        Handshake {
            fs,
            device,
            negotiated,
            rings: None,
            threads: config.threads.max(1),
            fault: None,
            clone: config.clone_devices,
        }
    }

    /// The transport carrying requests.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    pub fn mountpoint(&self) -> Option<&Path> {
        self.mountpoint.as_deref()
    }

    /// Notifications to the kernel (always over /dev/fuse).
    pub fn notifier(&self) -> Notifier {
        Notifier {
            device: self.device.clone(),
        }
    }

    /// Wait until every thread ended (the file system was unmounted or the connection
    /// aborted). An error: the first failure of a thread other than the kernel ending the
    /// connection with ENODEV (ECONNABORTED among them: a reader caught between taking a
    /// request and queueing it when the kernel ended the connection, which the caller tells
    /// from a real failure).
    pub fn join(self) -> io::Result<()> {
        for t in self.threads {
            if t.join().is_err() {
                self.end
                    .failed(io::Error::other("a session thread panicked"));
            }
        }
        match self.end.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// A connection whose INIT is answered, not served yet (see [`Session::handshake`]).
pub struct Handshake<D: Dispatch> {
    fs: Arc<Gate<D>>,
    device: Arc<OwnedFd>,
    negotiated: Negotiated,
    rings: Option<uring::Rings>,
    threads: usize,
    fault: Option<UringFault>,
    clone: bool,
}

impl<D: Dispatch> Handshake<D> {
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// Start the transports: requests flow from now on.
    pub fn serve(self) -> io::Result<Session> {
        let Handshake {
            fs,
            device,
            negotiated,
            rings,
            threads,
            fault,
            clone,
        } = self;
        let stats = Arc::new(Stats::default());
        let end = Arc::new(End::default());
        let workers = dev::Workers {
            device: device.clone(),
            negotiated,
            clone,
            stats: stats.clone(),
            end: end.clone(),
            ring_serves: Arc::new(AtomicBool::new(false)),
        };
        // Over the ring, /dev/fuse carries only FORGET and INTERRUPT: one reader. It reads
        // while the queues register (requests sent before the ring is ready come this way);
        // if the ring does not start, the others join it.
        let first = if rings.is_some() { 1 } else { threads };
        let mut handles = workers.spawn(&fs, 0..first)?;
        let transport = match rings {
            Some(rings) => {
                let (started, ok) = rings.start(&fs, &device, &negotiated, fault, &stats, &end);
                handles.extend(started);
                if ok {
                    workers.ring_serves.store(true, Ordering::Release);
                    Transport::Uring
                } else {
                    handles.extend(workers.spawn(&fs, first..threads.max(first))?);
                    Transport::Dev
                }
            }
            None => Transport::Dev,
        };
        let threads = handles;
        info!("FUSE session ready over {transport}");
        Ok(Session {
            device,
            negotiated,
            transport,
            stats,
            end,
            threads,
            mountpoint: None,
        })
    }
}

/// Fail every request on `device` with EIO until the connection ends, after asking the
/// kernel to resend what was read and not answered (a supervisor that gave up on its
/// daemon: the mount fails cleanly instead of hanging).
pub fn fail_all(device: &OwnedFd, negotiated: &Negotiated) -> io::Result<()> {
    let _ = dev::send(device, 0, abi::notify::RESEND, &[]);
    dev::fail_all(device, negotiated)
}

/// Tells the kernel to drop what it caches.
#[derive(Clone)]
pub struct Notifier {
    device: Arc<OwnedFd>,
}

impl Notifier {
    /// Drop an inode's attributes and (for `off` ≥ 0) its cached data from `off` on, `len`
    /// bytes (0: to the end).
    pub fn inval_inode(&self, ino: u64, off: i64, len: i64) -> io::Result<()> {
        let out = abi::NotifyInvalInodeOut { ino, off, len };
        dev::send(&self.device, 0, abi::notify::INVAL_INODE, out.as_bytes())
    }

    /// Put every request read from the connection and not yet answered back in its queue
    /// (a successor's first act: what the dead daemon had read comes again, its unique id
    /// marked with `abi::UNIQUE_RESEND`). Kernel 6.9 and later.
    pub fn resend(&self) -> io::Result<()> {
        dev::send(&self.device, 0, abi::notify::RESEND, &[])
    }

    /// Drop the kernel's entry of `name` in `parent`.
    pub fn inval_entry(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        let out = abi::NotifyInvalEntryOut {
            parent,
            namelen: name.len() as u32,
            flags: 0,
        };
        let mut body = out.as_bytes().to_vec();
        body.extend_from_slice(name);
        body.push(0);
        dev::send(&self.device, 0, abi::notify::INVAL_ENTRY, &body)
    }
}

/// The file system behind the session's access rule (`Acl`).
struct Gate<D> {
    inner: Arc<D>,
    acl: Acl,
    owner: u32,
}

impl<D> Gate<D> {
    /// May the caller of `req` make it? Requests the kernel makes on its own account
    /// (reads and writes of its caches, releases, forgets, syncs) carry whatever uid started
    /// them and always pass, as in libfuse and fuser.
    fn allows(&self, req: &Request<'_>) -> bool {
        let uid = req.header.uid;
        let allowed = match self.acl {
            Acl::All => true,
            Acl::RootAndOwner => uid == self.owner || uid == 0,
            Acl::Owner => uid == self.owner,
        };
        allowed
            || matches!(
                req.op,
                Operation::Read(_)
                    | Operation::Readdir(_)
                    | Operation::Readdirplus(_)
                    | Operation::Forget(_)
                    | Operation::BatchForget(_)
                    | Operation::Write { .. }
                    | Operation::Fsync(_)
                    | Operation::Fsyncdir(_)
                    | Operation::Release(_)
                    | Operation::Releasedir(_)
            )
    }
}

impl<D: Dispatch> Dispatch for Gate<D> {
    fn dispatch(&self, req: &Request<'_>, reply: &mut Reply<'_>) {
        if self.allows(req) {
            self.inner.dispatch(req, reply);
        } else {
            reply.error(libc::EACCES);
        }
    }

    fn init(&self, negotiated: &Negotiated, notifier: Notifier) {
        self.inner.init(negotiated, notifier);
    }

    fn destroy(&self) {
        self.inner.destroy();
    }
}

/// Serve one decoded request: INIT, DESTROY and INTERRUPT here, the rest by `fs`. Shared by
/// both transports.
fn serve<D: Dispatch>(fs: &D, req: &Request<'_>, reply: &mut Reply<'_>) {
    if log::log_enabled!(target: "dualfs::session::request", log::Level::Debug) {
        log::debug!(
            target: "dualfs::session::request",
            "{} {} node {}",
            req.unique(),
            req.op.summary(),
            req.nodeid()
        );
    }
    match req.op {
        // A second INIT is a protocol error.
        Operation::Init(_) => reply.error(libc::EPROTO),
        Operation::Destroy => {
            fs.destroy();
            reply.ok();
        }
        // Requests are not interruptible here: each runs to its end, and the kernel drops
        // the answer of one it gave up on.
        Operation::Interrupt(_) => {}
        Operation::Unknown(op) => {
            debug!("opcode {op} not served");
            reply.error(libc::ENOSYS);
        }
        _ => {
            fs.dispatch(req, reply);
            if reply.answer() == Answer::None && req.op.wants_reply() {
                warn!("opcode {} left unanswered: EIO", req.header.opcode);
                reply.error(libc::EIO);
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// Has root switched on FUSE over io_uring (`/sys/module/fuse/parameters/enable_uring`)? The
/// kernel offers it at INIT only then.
pub fn uring_enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| v.trim() == "Y")
}
