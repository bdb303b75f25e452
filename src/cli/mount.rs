//! `dualfs mount`: check the command line, detach, mount the core, serve FUSE until
//! unmounted, then write the final checkpoint.
//!
//! A failure before the file system is ready leaves both devices untouched: everything that
//! can be checked without the core is checked before the core is asked to mount, and after
//! a failed FUSE mount the core is not unmounted (that would write a checkpoint).

use super::control_server::ControlServer;
use super::data_path::recorded_data_path;
use super::device::{is_in_use, open_device, still_held};
use super::error::{describe_fs_error, describe_io, print_error, CliError};
use super::kernel_mount::{KernelMount, MountRequest};
use super::logging::{self, LogTo};
use super::mount_args::MountArgs;
use super::options::{parse_option_lists_as, MountSettings};
use super::remount::{asks_remount, Remounter};
use super::shutdown::{block_shutdown_signals, spawn_signal_watcher, Unmounter};
use super::supervisor::{self, Inheritance, Reporter, Role};
use super::umount::resolve_mountpoint;
use dualfs::control_protocol::socket_path;
use dualfs::daemon::{
    detach, read_pid_file, remove_pid_file, write_pid_file, Daemon, Detached, Startup,
};
use dualfs::fs::Fs;
use dualfs::fuse::DualFuse;
use dualfs::mountinfo::{self, DUALFS_FS_TYPE};
use dualfs::session::{Acl, Handshake, Session, SessionConfig, Transport};
use log::{error, info, warn};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

/// What to mount where, every path checked and absolute (the daemon changes to "/").
struct MountPlan {
    meta: PathBuf,
    data: PathBuf,
    mountpoint: PathBuf,
    settings: MountSettings,
    threads: usize,
}

pub fn run(args: MountArgs) -> ExitCode {
    if asks_remount(&args.options) {
        return super::remount::run(&args);
    }
    let prepared = plan(&args).and_then(|plan| open_log(&args).map(|log| (plan, log)));
    let (plan, log_file) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            print_error(e.message());
            return e.exit_code();
        }
    };
    if args.fake {
        // mount(8)'s -f: everything is checked, nothing is mounted.
        return ExitCode::SUCCESS;
    }
    if args.foreground {
        logging::init(log_file.map_or(LogTo::Stderr, LogTo::File));
        return start(plan, Startup::foreground(Daemon::Mount));
    }
    logging::init(LogTo::DaemonStderr);
    match detach(Daemon::Mount, log_file) {
        Ok(Detached::Parent(code)) => code,
        Ok(Detached::Child(startup)) => start(plan, startup),
        Err(message) => {
            print_error(&message);
            ExitCode::from(1)
        }
    }
}

fn plan(args: &MountArgs) -> Result<MountPlan, CliError> {
    let settings = parse_option_lists_as(&args.options, args.strictness)?;
    let (data, mountpoint) = match &args.mountpoint {
        None => (None, &args.data_or_mountpoint),
        Some(mountpoint) => (Some(&args.data_or_mountpoint), mountpoint),
    };
    let meta = device_path(&args.meta)?;
    let data = match data {
        Some(data) => device_path(data)?,
        None => {
            let recorded =
                recorded_data_path(&meta).map_err(|e| CliError::failure(format!("{e:#}")))?;
            device_path(&recorded).map_err(|e| {
                CliError::failure(format!(
                    "{} (the data device recorded in {}; give DATA to use another path)",
                    e.message(),
                    meta.display()
                ))
            })?
        }
    };
    if same_file(&meta, &data) {
        return Err(CliError::failure(format!(
            "{} is given as both the metadata and the data device",
            meta.display()
        )));
    }
    if settings.supervise == Some(true) && settings.transport == Some(Transport::Uring) {
        return Err(CliError::failure(
            "supervise=on and transport=uring cannot go together: a successor cannot take              over the requests a dead daemon held in its io_uring entries (use transport=dev)"
                .to_string(),
        ));
    }
    let mountpoint = mountpoint_path(mountpoint)?;
    check_fuse_device()?;
    let threads = match args.threads {
        Some(n) => usize::from(n),
        None => std::thread::available_parallelism().map_or(2, |n| n.get().max(2)),
    };
    Ok(MountPlan {
        meta,
        data,
        mountpoint,
        settings,
        threads,
    })
}

/// An existing image file or block device, as an absolute path.
pub fn device_path(path: &Path) -> Result<PathBuf, CliError> {
    let absolute = std::fs::canonicalize(path)
        .map_err(|e| CliError::failure(format!("{}: {}", path.display(), describe_io(&e))))?;
    let metadata = std::fs::metadata(&absolute)
        .map_err(|e| CliError::failure(format!("{}: {}", path.display(), describe_io(&e))))?;
    if !metadata.is_file() && !metadata.file_type().is_block_device() {
        return Err(CliError::failure(format!(
            "{} is not an image file or a block device",
            path.display()
        )));
    }
    Ok(absolute)
}

pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

fn mountpoint_path(path: &Path) -> Result<PathBuf, CliError> {
    let absolute = std::fs::canonicalize(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            return dead_mount_error(path, &e);
        }
        CliError::failure(format!(
            "mount point {}: {}",
            path.display(),
            describe_io(&e)
        ))
    })?;
    match std::fs::metadata(&absolute) {
        Ok(m) if m.is_dir() => {}
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(dead_mount_error(path, &e))
        }
        _ => {
            return Err(CliError::failure(format!(
                "mount point {} is not a directory",
                path.display()
            )))
        }
    }
    // A stat may be answered from the kernel's cache after the daemon died; statfs always
    // asks the daemon.
    if let Err(nix::errno::Errno::ENOTCONN) = nix::sys::statvfs::statvfs(&absolute) {
        let e = std::io::Error::from_raw_os_error(libc::ENOTCONN);
        return Err(dead_mount_error(path, &e));
    }
    refuse_stacking(path, &absolute)?;
    Ok(absolute)
}

/// A FUSE file system whose daemon died is still mounted on `path` (ENOTCONN).
pub(super) fn dead_mount_error(path: &Path, err: &std::io::Error) -> CliError {
    let what = resolve_mountpoint(path)
        .ok()
        .and_then(|mountpoint| {
            let table = mountinfo::read().ok()?;
            mountinfo::topmost_at(&table, &mountpoint).map(|m| m.fs_type.clone())
        })
        .map_or("a FUSE file system".to_string(), |fs_type| {
            if fs_type == DUALFS_FS_TYPE {
                "a DualFS".to_string()
            } else {
                format!("a file system of type {fs_type}")
            }
        });
    CliError::failure(format!(
        "mount point {}: {} ({what} whose daemon died is still mounted there; `dualfs umount \
         {}` takes it away)",
        path.display(),
        describe_io(err),
        path.display()
    ))
}

/// Mounting over a DualFS would hide it, and one `dualfs umount` would then take both away:
/// refuse, whichever file system that DualFS is. A DualFS is a mount of our kernel type, or
/// any FUSE mount whose daemon is a live DualFS process (older versions mounted as `fuse`).
fn refuse_stacking(path: &Path, mountpoint: &Path) -> Result<(), CliError> {
    let Ok(table) = mountinfo::read() else {
        return Ok(());
    };
    let Some(top) = mountinfo::topmost_at(&table, mountpoint) else {
        return Ok(());
    };
    let daemon = read_pid_file(&Daemon::Mount.pid_file(mountpoint))
        .filter(|&pid| Daemon::Mount.is_live(pid));
    if top.fs_type == DUALFS_FS_TYPE || (top.is_fuse() && daemon.is_some()) {
        return Err(CliError::failure(format!(
            "mount point {}: a DualFS ({}) is already mounted there; unmount it first \
             (`dualfs umount {}`)",
            path.display(),
            top.source,
            path.display()
        )));
    }
    Ok(())
}

fn check_fuse_device() -> Result<(), CliError> {
    match OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(_) => Ok(()),
        Err(e) => {
            let hint = match e.kind() {
                std::io::ErrorKind::PermissionDenied => "only root may use FUSE here",
                _ => "is the fuse module loaded?",
            };
            Err(CliError::failure(format!(
                "cannot open /dev/fuse: {} ({hint})",
                describe_io(&e)
            )))
        }
    }
}

fn open_log(args: &MountArgs) -> Result<Option<File>, CliError> {
    let Some(path) = &args.log_file else {
        return Ok(None);
    };
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(Some)
        .map_err(|e| CliError::failure(format!("log file {}: {}", path.display(), describe_io(&e))))
}

/// The mounted file system, from the core's side and the kernel's.
struct Mounted {
    fs: Arc<Fs>,
    /// INIT is answered; requests wait until `serve` starts the session.
    handshake: Handshake<DualFuse>,
    /// The transport the session serves over, for the control socket's `hello`.
    transport: Arc<OnceLock<Transport>>,
    kernel: KernelSide,
    pid_file: Option<PathBuf>,
    /// The mount point of this daemon's own line in libmount's table, when it wrote one.
    utab_line: Option<PathBuf>,
    /// The control socket `dualfs-cleaner` and `dualfs sync` talk to (none on a read-only
    /// mount).
    control: Option<ControlServer>,
}

/// Who made the kernel's mount, and so who unmounts it and what is known when it ends.
enum KernelSide {
    /// Our own mount(2) (root): we unmount, and can look at the mount when the session ends.
    Own(Arc<KernelMount>),
    /// fusermount3 (not root), which passed the descriptor back: whether the mount is still
    /// there when the session ends cannot be told for sure (fusermount3 leaves no mount id).
    Fusermount,
}

/// How the session ended, decided from facts (docs/DESIGN.md, "The mount and how a session ends").
#[derive(Debug)]
enum Ending {
    /// The file system was unmounted: the kernel ended the connection because the mount is
    /// gone. A clean end.
    Unmounted,
    /// The kernel aborted the connection under a mount that is still there
    /// (/sys/fs/fuse/connections/N/abort, `umount -f` of a busy mount).
    Aborted,
    /// The session loop failed by itself.
    Failed(std::io::Error),
}

/// The decision, from the two facts: how the session loop returned, and whether our mount
/// is still in the table (always "no" when fusermount mounted it: then it cannot be seen).
fn decide(result: std::io::Result<()>, still_mounted: bool) -> Ending {
    match result {
        Err(e) if !is_end_errno(&e) => Ending::Failed(e),
        _ if still_mounted => Ending::Aborted,
        _ => Ending::Unmounted,
    }
}

/// How the kernel ends a connection for a reader: ENODEV for a reader that was waiting;
/// ECONNABORTED for one caught between taking a request and queueing it for its reply
/// (fs/fuse/dev.c, `fuse_dev_do_read`), and for every reader after an abort when
/// FUSE_ABORT_ERROR was negotiated. Either can come with an unmount or with an abort.
fn is_end_errno(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ECONNABORTED))
}

fn ending(kernel: &KernelSide, result: std::io::Result<()>) -> Ending {
    let still_mounted = match kernel {
        KernelSide::Own(mount) => mount.still_mounted(),
        KernelSide::Fusermount => false,
    };
    let end_errno = result
        .as_ref()
        .err()
        .filter(|e| is_end_errno(e))
        .map(describe_io);
    let ending = decide(result, still_mounted);
    match (&ending, kernel, end_errno) {
        (Ending::Failed(_), KernelSide::Own(mount), _) if still_mounted => {
            // Stop what is left of the session: the mount must not stay served by a
            // half-dead daemon while the final checkpoint is written.
            if let Err(e) = mount.abort_connection() {
                warn!("cannot abort the FUSE connection: {}", describe_io(&e));
            }
        }
        // A reader had taken a request (an asynchronous RELEASE of a file closed just
        // before the unmount, say) when the kernel ended the connection.
        (Ending::Unmounted, KernelSide::Own(_), Some(errno)) => info!(
            "the FUSE session ended with \"{errno}\" and the mount is gone: an unmount (a \
             request was being taken when the kernel ended the connection)"
        ),
        (Ending::Unmounted, KernelSide::Fusermount, Some(errno)) => warn!(
            "the FUSE session ended with \"{errno}\"; mounted through fusermount, the daemon \
             cannot tell an unmount from an abort, and takes it for an unmount"
        ),
        _ => {}
    }
    ending
}

/// Serve the mount: under a supervisor that restarts a dead worker (cli/supervisor.rs), or
/// in this process alone where a successor could not take over (see `supervised`).
fn start(plan: MountPlan, startup: Startup) -> ExitCode {
    if let Err(why) = supervision(&plan) {
        return serve(&plan, Some(startup), Err(why));
    }
    let mountpoint = plan.mountpoint.clone();
    supervisor::supervise(startup, &mountpoint, |role, startup| {
        serve(&plan, startup, Ok(role))
    })
}

/// Can a successor take over this mount's connection when its daemon dies (Err: why not,
/// for the log once the mount is up)? Only over
/// /dev/fuse: requests a dead daemon held in its io_uring entries stay there, and the kernel
/// can neither resend them nor move the connection back to /dev/fuse (docs/DESIGN.md,
/// "Surviving the daemon"). So a mount that will serve over io_uring (`transport=uring`, or
/// no `transport=` where the kernel offers it) runs unsupervised, as does one through
/// fusermount3 (not root), whose descriptor only the daemon holds.
fn supervision(plan: &MountPlan) -> Result<(), &'static str> {
    if plan.settings.supervise == Some(false) {
        return Err("supervise=off: the daemon's death ends the mount");
    }
    if !nix::unistd::geteuid().is_root() {
        return Err("not root: the mount is not supervised (its daemon's death ends it)");
    }
    let uring = match plan.settings.transport {
        Some(Transport::Dev) => false,
        Some(Transport::Uring) => true,
        None => {
            // Asked for, the supervisor wins: the mount serves over /dev/fuse.
            plan.settings.supervise != Some(true) && dualfs::session::uring_enabled()
        }
    };
    if uring {
        return Err(
            "serving over io_uring: the mount is not supervised (a dead daemon's io_uring \
             requests cannot be taken over; -o transport=dev mounts one that survives it)",
        );
    }
    Ok(())
}

/// Mount, serve until unmounted, write the final checkpoint. Runs in the daemon (or the
/// foreground process: `role` is why it is not supervised), or in a supervisor's worker
/// (`role`); `startup` hears whether the mount came up (a successor has none: the mount is
/// up).
fn serve(plan: &MountPlan, startup: Option<Startup>, role: Result<Role, &str>) -> ExitCode {
    let unsupervised = role.as_ref().err().copied();
    let (mounted, report) = match mount(plan, role.ok()) {
        Ok(mounted) => mounted,
        Err(message) => {
            match startup {
                Some(startup) => startup.fail(&message),
                None => error!("{message}"),
            }
            return ExitCode::from(1);
        }
    };
    info!(
        "{} + {} mounted on {}",
        plan.meta.display(),
        plan.data.display(),
        plan.mountpoint.display()
    );
    if let Some(why) = unsupervised {
        info!("{why}");
    }
    if let Some(startup) = startup {
        startup.ready();
    }

    let Mounted {
        fs,
        handshake,
        transport,
        kernel,
        pid_file,
        utab_line,
        mut control,
    } = mounted;
    let identity = match &kernel {
        KernelSide::Own(mount) => mount.identity(),
        KernelSide::Fusermount => None,
    };
    // Returns when the kernel ends the connection: an unmount (external or ours), an abort.
    let result = handshake.serve().and_then(|session| {
        let serving = session.transport();
        info!("FUSE transport: {serving}");
        match report {
            Some(Report::First(report)) => report.serving_first(session.negotiated(), identity),
            Some(Report::Successor(report, since)) => {
                // What the dead worker had read and not answered comes again.
                if let Err(e) = session.notifier().resend() {
                    warn!(
                        "cannot ask the kernel to resend requests: {}",
                        describe_io(&e)
                    );
                }
                info!(
                    "serving again {} ms after this worker started",
                    since.elapsed().as_millis()
                );
                report.serving();
            }
            None => {}
        }
        if plan.settings.transport == Some(Transport::Uring) && serving != Transport::Uring {
            warn!(
                "-o transport=uring: the kernel's FUSE over io_uring could not be used (see \
                 above; /sys/module/fuse/parameters/enable_uring), serving over /dev/fuse"
            );
        }
        let _ = transport.set(serving);
        session.join()
    });
    let ending = ending(&kernel, result);
    let mountpoint = plan.mountpoint.display();
    match (&ending, &kernel) {
        (Ending::Unmounted, KernelSide::Own(mount)) if mount.own_unmount_started() => {
            info!("{mountpoint} unmounted on a signal; writing the final checkpoint")
        }
        (Ending::Unmounted, _) => info!("{mountpoint} unmounted; writing the final checkpoint"),
        (Ending::Aborted, _) => error!(
            "the kernel aborted the FUSE connection of {mountpoint} while it was still mounted \
             (a write to /sys/fs/fuse/connections/{}/abort, or `umount -f` of a busy mount): \
             requests in flight failed, and programs using the mount get ENOTCONN; writing \
             the final checkpoint, then detaching the dead mount",
            match &kernel {
                KernelSide::Own(mount) => mount.connection().map(|n| n.to_string()),
                KernelSide::Fusermount => None,
            }
            .unwrap_or_else(|| "N".to_string())
        ),
        (Ending::Failed(e), _) => error!(
            "the FUSE session of {mountpoint} failed: {}; writing the final checkpoint",
            describe_io(e)
        ),
    }
    // No cleaning or sync request may run into the final checkpoint.
    if let Some(c) = control.as_mut() {
        c.stop();
    }
    let s = fs.stats();
    info!(
        "read-ahead: log {} clusters read, {} blocks of them used, window {} KiB; data {} \
         clusters read, {} blocks used, window {} KiB",
        s.log_clusters_read,
        s.log_blocks_read_ahead_used,
        s.log_readahead_window >> 10,
        s.data_clusters_read,
        s.data_blocks_read_ahead_used,
        s.data_readahead_window >> 10
    );
    let unmounted = fs.unmount();
    let shut_down = fs.is_shut_down();
    // The devices' locks go with the last reference: free the images for the next mount or
    // mkfs before anything else.
    drop(fs);
    match (&ending, &kernel) {
        (Ending::Aborted | Ending::Failed(_), KernelSide::Own(mount)) => mount.detach_dead_mount(),
        (_, KernelSide::Fusermount) => detach_fusermount_mount(plan),
        _ => {}
    }
    if let Some(mountpoint) = &utab_line {
        let utab = super::utab::path();
        if let Err(e) = super::utab::forget_daemon_line(&utab, mountpoint, std::process::id()) {
            warn!(
                "cannot drop this daemon's line from {}: {}",
                utab.display(),
                describe_io(&e)
            );
        }
    }
    match unmounted {
        Ok(()) => {
            if let Some(pid_file) = &pid_file {
                if let Err(e) = remove_pid_file(pid_file) {
                    warn!("cannot remove {}: {}", pid_file.display(), describe_io(&e));
                }
            }
            let written = if shut_down {
                warn!(
                    "{} was shut down (FS_IOC_SHUTDOWN): nothing was written at unmount; the \
                     next mount recovers from the log",
                    plan.meta.display()
                );
                "the next mount recovers from the log"
            } else {
                "final checkpoint written"
            };
            match ending {
                Ending::Unmounted => {
                    if !shut_down {
                        info!("clean unmount of {}", plan.meta.display());
                    }
                    ExitCode::SUCCESS
                }
                Ending::Aborted | Ending::Failed(_) => {
                    error!(
                        "{} is consistent ({written}); exiting with status 1 because the \
                         session did not end by an unmount",
                        plan.meta.display()
                    );
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            print_error(&format!(
                "final checkpoint of {} failed: {}; the next mount recovers from the log",
                plan.meta.display(),
                describe_fs_error(&e)
            ));
            ExitCode::from(1)
        }
    }
}

/// What a supervised worker tells its supervisor once it serves.
enum Report {
    First(Reporter),
    /// A successor, and when it started (for the log: how long the mount had no daemon).
    Successor(Reporter, std::time::Instant),
}

/// How a worker comes to its connection.
enum Connection {
    /// Mount one: our own /dev/fuse (or fusermount3's), or the supervisor's.
    New(Option<std::os::fd::OwnedFd>),
    /// Take over a dead worker's.
    Inherited(Inheritance),
}

fn mount(plan: &MountPlan, role: Option<Role>) -> Result<(Mounted, Option<Report>), String> {
    let started = std::time::Instant::now();
    // Before the core starts its threads, so that they inherit the mask.
    block_shutdown_signals().map_err(|e| format!("cannot block signals: {}", e.desc()))?;
    let supervised = role.is_some();
    let (connection, report) = match role {
        None => (Connection::New(None), None),
        Some(Role::First { device, report }) => {
            (Connection::New(Some(device)), Some(Report::First(report)))
        }
        Some(Role::Successor {
            inheritance,
            report,
        }) => {
            info!(
                "taking over {} from a dead worker (restart {})",
                plan.mountpoint.display(),
                inheritance.incarnation
            );
            if plan.settings.core_options().intent_dir.is_none() && !plan.settings.read_only {
                warn!(
                    "intent=off: what the dead worker acknowledged since its last flush is \
                     lost, though the kernel may still show it"
                );
            }
            // The test of the restart limit: a successor that cannot serve.
            if std::env::var_os("DUALFS_TEST_SUCCESSOR_PANICS").is_some() {
                panic!("DUALFS_TEST_SUCCESSOR_PANICS is set: this successor dies");
            }
            (
                Connection::Inherited(inheritance),
                Some(Report::Successor(report, started)),
            )
        }
    };

    let read_only = plan.settings.read_only;
    let devio = plan.settings.device_io();
    let meta =
        open_device(&plan.meta, read_only, devio).map_err(|e| device_error(&plan.meta, &e))?;
    let data =
        open_device(&plan.data, read_only, devio).map_err(|e| device_error(&plan.data, &e))?;
    let mut core_options = plan.settings.core_options();
    if let Connection::Inherited(inheritance) = &connection {
        core_options.successor_of_dead = Some(inheritance.incarnation);
    }
    let fs = Fs::mount(meta, data, core_options).map_err(|e| {
        format!(
            "cannot mount {} + {}: {}",
            plan.meta.display(),
            plan.data.display(),
            describe_fs_error(&e)
        )
    })?;

    let adapter = Arc::new(DualFuse::new(fs.clone(), plan.settings.fuse_config()));
    let config = SessionConfig {
        init: adapter.init_config(),
        threads: plan.threads,
        // A successor takes over over /dev/fuse only (`supervised`).
        transport: if supervised {
            Transport::Dev
        } else {
            plan.settings.transport()
        },
        acl: plan.settings.session_acl(nix::unistd::geteuid().is_root()),
        // The supervisor holds the session's descriptor, never a thread's clone.
        clone_devices: !supervised,
        ..SessionConfig::default()
    };
    let (handshake, kernel) = match connection {
        Connection::New(device) => {
            let started = start_session(plan, adapter, &config, device)?;
            set_readahead(plan);
            started
        }
        Connection::Inherited(inheritance) => {
            let mount = KernelMount::adopt(&plan.mountpoint, inheritance.identity);
            let handshake =
                Session::resume(adapter, inheritance.device, inheritance.negotiated, &config);
            (handshake, KernelSide::Own(Arc::new(mount)))
        }
    };
    let transport = Arc::new(OnceLock::new());

    let unmounter = match &kernel {
        KernelSide::Own(mount) => Unmounter::Own(mount.clone()),
        KernelSide::Fusermount => Unmounter::Fusermount,
    };
    spawn_signal_watcher(unmounter, plan.mountpoint.clone())
        .map_err(|e| format!("cannot start the signal thread: {}", describe_io(&e)))?;

    let pid_file = Daemon::Mount.pid_file(&plan.mountpoint);
    let pid_file = match write_pid_file(&pid_file) {
        Ok(()) => Some(pid_file),
        Err(e) => {
            warn!(
                "cannot write {} ({}): `dualfs umount` will not wait for this daemon",
                pid_file.display(),
                describe_io(&e)
            );
            None
        }
    };
    let utab_line = match &kernel {
        KernelSide::Own(_) => record_utab_line(&plan.mountpoint),
        KernelSide::Fusermount => None,
    };
    let control = if read_only {
        None
    } else {
        let path = socket_path(&plan.mountpoint);
        // SAFETY: getuid cannot fail.
        let owner = unsafe { libc::getuid() };
        // Only our own mount can be remounted: the daemon changes it with mount(2).
        let remounter = match &kernel {
            KernelSide::Own(mount) => Some(Arc::new(Remounter::new(
                fs.clone(),
                mount.clone(),
                plan.settings.clone(),
                &plan.mountpoint,
            ))),
            KernelSide::Fusermount => None,
        };
        let served = transport.clone();
        match ControlServer::start(
            fs.clone(),
            &path,
            owner,
            &plan.mountpoint,
            remounter,
            served,
        ) {
            Ok(c) => Some(c),
            Err(e) => {
                warn!(
                    "cannot create the control socket {} ({}): no cleaner daemon can attach \
                     and `dualfs sync` cannot reach this mount; the mount cleans by itself",
                    path.display(),
                    describe_io(&e)
                );
                None
            }
        }
    };
    Ok((
        Mounted {
            fs,
            handshake,
            transport,
            kernel,
            pid_file,
            utab_line,
            control,
        },
        report,
    ))
}

/// A line of this daemon's own in libmount's table: umount(8) then runs the helper
/// /sbin/umount.fuse.dualfs, which waits for this daemon's final checkpoint (cli/utab.rs).
fn record_utab_line(mountpoint: &Path) -> Option<PathBuf> {
    let utab = super::utab::path();
    match super::utab::record_daemon_line(&utab, mountpoint, std::process::id()) {
        Ok(()) => Some(mountpoint.to_path_buf()),
        Err(e) => {
            warn!(
                "cannot add a line to {} ({}): a plain umount will not wait for this daemon",
                utab.display(),
                describe_io(&e)
            );
            None
        }
    }
}

/// Set the mount's read-ahead window (its bdi's `read_ahead_kb`): after INIT, which can only
/// lower it, and before the session serves, so that no reader sees the kernel's default.
/// The device numbers come from mountinfo: a stat of the mount point would wait for a
/// session that is not served yet. A failure only costs speed.
fn set_readahead(plan: &MountPlan) {
    let mountpoint = &plan.mountpoint;
    let kb = plan.settings.readahead_kb();
    let table = match mountinfo::read() {
        Ok(table) => table,
        Err(e) => return info!("read-ahead left as it is: cannot read mountinfo: {e}"),
    };
    let Some(entry) = mountinfo::topmost_at(&table, mountpoint) else {
        return info!(
            "read-ahead left as it is: {} not in mountinfo",
            mountpoint.display()
        );
    };
    let path = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        entry.major, entry.minor
    );
    match std::fs::write(&path, format!("{kb}\n")) {
        Ok(()) => info!("read-ahead {kb} KiB"),
        Err(e) => info!("read-ahead left as it is: {path}: {}", describe_io(&e)),
    }
}

/// Mount the FUSE connection and finish the INIT handshake: our own mount(2) when this
/// process may mount, fusermount3 when mount(2) says EPERM.
fn start_session(
    plan: &MountPlan,
    adapter: Arc<DualFuse>,
    config: &SessionConfig,
    device: Option<std::os::fd::OwnedFd>,
) -> Result<(Handshake<DualFuse>, KernelSide), String> {
    let mount_failed = |e: &std::io::Error| {
        format!(
            "cannot mount on {}: {}",
            plan.mountpoint.display(),
            describe_io(e)
        )
    };
    let fs_type = plan.settings.fs_type();
    let source = plan.settings.source(&plan.meta);
    let allow_other = config.acl != Acl::Owner;
    let request = MountRequest {
        mountpoint: &plan.mountpoint,
        fs_type: &fs_type,
        source: &source,
        flags: plan.settings.kernel_flags(),
        allow_other,
    };
    let mounted = match device {
        Some(device) => KernelMount::mount_on(device, &request),
        None => KernelMount::mount(&request),
    };
    match mounted {
        Ok((fd, mount)) => {
            // Returns once the kernel finished the INIT handshake: the mount is usable once
            // the session serves.
            match Session::handshake(adapter, fd, config) {
                Ok(session) => Ok((session, KernelSide::Own(Arc::new(mount)))),
                Err(e) => {
                    mount.detach_dead_mount();
                    Err(mount_failed(&e))
                }
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            info!("mount(2) is not allowed to this user: mounting through fusermount3");
            let options = plan.settings.fusermount_options(&plan.meta, allow_other);
            let fd = super::fusermount::mount(&plan.mountpoint, &options)
                .map_err(|e| mount_failed(&e))?;
            match Session::handshake(adapter, fd, config) {
                Ok(session) => Ok((session, KernelSide::Fusermount)),
                Err(e) => {
                    detach_fusermount_mount(plan);
                    Err(mount_failed(&e))
                }
            }
        }
        Err(e) => Err(mount_failed(&e)),
    }
}

/// After a session on a mount made through fusermount3 ended, or failed to start: detach the
/// mount if it is still there (the topmost mount at the mount point of our type and
/// source), as libfuse does, so that the mount point is usable again.
fn detach_fusermount_mount(plan: &MountPlan) {
    let Ok(table) = mountinfo::read() else {
        return;
    };
    let ours = mountinfo::topmost_at(&table, &plan.mountpoint).is_some_and(|top| {
        top.fs_type == plan.settings.fs_type() && top.source == plan.settings.source(&plan.meta)
    });
    if ours {
        if let Err(why) = super::fusermount::unmount(&plan.mountpoint, true) {
            warn!("cannot detach {}: {why}", plan.mountpoint.display());
        }
    }
}

fn device_error(path: &Path, err: &std::io::Error) -> String {
    if let Some(held) = still_held(err) {
        format!("{} is in use: {held}", path.display())
    } else if is_in_use(err) {
        format!(
            "{} is in use (mounted already, or held by another program)",
            path.display()
        )
    } else if err.kind() == std::io::ErrorKind::Unsupported {
        // No direct I/O there: the message names the device and the way out.
        err.to_string()
    } else {
        format!("cannot open {}: {}", path.display(), describe_io(err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Error;

    #[test]
    fn the_mount_decides_not_the_errno() {
        let aborted = || Err(Error::from_raw_os_error(libc::ECONNABORTED));
        let no_device = || Err(Error::from_raw_os_error(libc::ENODEV));
        assert!(matches!(decide(Ok(()), false), Ending::Unmounted));
        assert!(matches!(decide(aborted(), false), Ending::Unmounted));
        assert!(matches!(decide(no_device(), false), Ending::Unmounted));
        assert!(matches!(decide(Ok(()), true), Ending::Aborted));
        assert!(matches!(decide(aborted(), true), Ending::Aborted));
        assert!(matches!(decide(no_device(), true), Ending::Aborted));
        let invalid = || {
            Err(Error::new(
                std::io::ErrorKind::InvalidData,
                "Invalid request",
            ))
        };
        assert!(matches!(decide(invalid(), false), Ending::Failed(_)));
        assert!(matches!(decide(invalid(), true), Ending::Failed(_)));
    }
}
