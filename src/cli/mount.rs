//! `dualfs mount`: check the command line, detach, mount the core, serve FUSE until
//! unmounted, then write the final checkpoint.
//!
//! A failure before the file system is ready leaves both devices untouched: everything that
//! can be checked without the core is checked before the core is asked to mount, and after
//! a failed FUSE mount the core is not unmounted (that would write a checkpoint).

use super::data_path::recorded_data_path;
use super::device::{is_in_use, open_device};
use super::error::{describe_fs_error, describe_io, print_error, CliError};
use super::logging::{self, LogTo};
use super::options::{parse_option_lists, MountSettings};
use super::pid_file::{pid_file_path, remove_pid_file, write_pid_file};
use super::ready_pipe::{detach, Detached, Startup};
use super::shutdown::{block_shutdown_signals, spawn_signal_watcher};
use dualfs::clean::control::socket_path;
use dualfs::clean::server::ControlServer;
use dualfs::fs::Fs;
use dualfs::fuse::DualFuse;
use fuser::Session;
use log::{error, info, warn};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
#[command(
    override_usage = "dualfs mount [OPTIONS] <META> [DATA] <MOUNTPOINT>",
    after_help = super::options::OPTIONS_HELP
)]
pub struct MountArgs {
    /// META [DATA] MOUNTPOINT: the metadata device, the data device (default: the path
    /// recorded in META by mkfs) and the directory to mount on
    #[arg(value_name = "PATH", num_args = 2..=3, required = true)]
    pub paths: Vec<PathBuf>,
    /// Mount options, comma separated (see below)
    #[arg(short = 'o', value_name = "OPT[,OPT...]")]
    pub options: Vec<String>,
    /// Stay in the foreground and log to stderr
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Threads serving FUSE requests [default: number of CPUs, at least 2]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Append the daemon's log to FILE (otherwise it is discarded; with --foreground it
    /// goes to stderr)
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
}

/// What to mount where, every path checked and absolute (the daemon changes to "/").
struct MountPlan {
    meta: PathBuf,
    data: PathBuf,
    mountpoint: PathBuf,
    settings: MountSettings,
    threads: usize,
}

pub fn run(args: MountArgs) -> ExitCode {
    let prepared = plan(&args).and_then(|plan| open_log(&args).map(|log| (plan, log)));
    let (plan, log_file) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            print_error(e.message());
            return e.exit_code();
        }
    };
    if args.foreground {
        logging::init(log_file.map_or(LogTo::Stderr, LogTo::File));
        return serve(plan, Startup::Foreground);
    }
    logging::init(LogTo::DaemonStderr);
    match detach(log_file) {
        Ok(Detached::Parent(code)) => code,
        Ok(Detached::Child(startup)) => serve(plan, startup),
        Err(message) => {
            print_error(&message);
            ExitCode::from(1)
        }
    }
}

fn plan(args: &MountArgs) -> Result<MountPlan, CliError> {
    let settings = parse_option_lists(&args.options)?;
    let (meta, data, mountpoint) = match args.paths.as_slice() {
        [meta, mountpoint] => (meta, None, mountpoint),
        [meta, data, mountpoint] => (meta, Some(data), mountpoint),
        _ => return Err(CliError::usage("expected META [DATA] MOUNTPOINT")),
    };
    let meta = device_path(meta)?;
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
        CliError::failure(format!(
            "mount point {}: {}",
            path.display(),
            describe_io(&e)
        ))
    })?;
    if !absolute.is_dir() {
        return Err(CliError::failure(format!(
            "mount point {} is not a directory",
            path.display()
        )));
    }
    Ok(absolute)
}

fn check_fuse_device() -> Result<(), CliError> {
    match OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(_) => Ok(()),
        Err(e) => Err(CliError::failure(format!(
            "cannot open /dev/fuse: {} (is the fuse module loaded?)",
            describe_io(&e)
        ))),
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
    session: Session<DualFuse>,
    pid_file: Option<PathBuf>,
    /// The control socket `dualfs-cleaner` talks to (none on a read-only mount).
    control: Option<ControlServer>,
}

/// Mount, serve until unmounted, write the final checkpoint. Runs in the daemon (or the
/// foreground process); `startup` hears whether the mount came up.
fn serve(plan: MountPlan, startup: Startup) -> ExitCode {
    let mounted = match mount(&plan) {
        Ok(mounted) => mounted,
        Err(message) => {
            startup.fail(&message);
            return ExitCode::from(1);
        }
    };
    info!(
        "{} + {} mounted on {}",
        plan.meta.display(),
        plan.data.display(),
        plan.mountpoint.display()
    );
    startup.ready();

    let Mounted {
        fs,
        session,
        pid_file,
        mut control,
    } = mounted;
    // Returns on an external umount, on our own (signals), or if the session fails.
    let session_result = session.run();
    if let Err(e) = &session_result {
        error!("the FUSE session failed: {e}");
    }
    info!(
        "{} unmounted; writing the final checkpoint",
        plan.mountpoint.display()
    );
    // No cleaning request may run into the final checkpoint.
    if let Some(c) = control.as_mut() {
        c.stop();
    }
    match fs.unmount() {
        Ok(()) => {
            if let Some(pid_file) = &pid_file {
                if let Err(e) = remove_pid_file(pid_file) {
                    warn!("cannot remove {}: {}", pid_file.display(), describe_io(&e));
                }
            }
            info!("clean unmount of {}", plan.meta.display());
            if session_result.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
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

fn mount(plan: &MountPlan) -> Result<Mounted, String> {
    // Before the core starts its threads, so that they inherit the mask.
    block_shutdown_signals().map_err(|e| format!("cannot block signals: {}", e.desc()))?;

    let read_only = plan.settings.read_only;
    let meta = open_device(&plan.meta, read_only).map_err(|e| device_error(&plan.meta, &e))?;
    let data = open_device(&plan.data, read_only).map_err(|e| device_error(&plan.data, &e))?;
    let fs = Fs::mount(meta, data, plan.settings.core_options()).map_err(|e| {
        format!(
            "cannot mount {} + {}: {}",
            plan.meta.display(),
            plan.data.display(),
            describe_fs_error(&e)
        )
    })?;

    let adapter = DualFuse::new(fs.clone(), plan.settings.fuse_config());
    let mut config = fuser::Config::default();
    config.mount_options = plan.settings.fuse_mount_options(&plan.meta);
    config.acl = plan.settings.session_acl();
    config.n_threads = Some(plan.threads);
    config.clone_fd = true;
    // Returns once the kernel finished the INIT handshake: the mount is usable.
    let mut session = Session::new(adapter, &plan.mountpoint, &config).map_err(|e| {
        format!(
            "cannot mount on {}: {}",
            plan.mountpoint.display(),
            describe_io(&e)
        )
    })?;

    spawn_signal_watcher(session.unmount_callable(), plan.mountpoint.clone())
        .map_err(|e| format!("cannot start the signal thread: {}", describe_io(&e)))?;

    let pid_file = pid_file_path(&plan.mountpoint);
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
    let control = if read_only {
        None
    } else {
        let path = socket_path(&plan.mountpoint);
        // SAFETY: getuid cannot fail.
        let owner = unsafe { libc::getuid() };
        match ControlServer::start(fs.clone(), &path, owner, &plan.mountpoint) {
            Ok(c) => Some(c),
            Err(e) => {
                warn!(
                    "cannot create the control socket {} ({}): no cleaner daemon can attach; \
                     the mount cleans by itself",
                    path.display(),
                    describe_io(&e)
                );
                None
            }
        }
    };
    Ok(Mounted {
        fs,
        session,
        pid_file,
        control,
    })
}

fn device_error(path: &Path, err: &std::io::Error) -> String {
    if is_in_use(err) {
        format!(
            "{} is in use (mounted already, or held by another program)",
            path.display()
        )
    } else {
        format!("cannot open {}: {}", path.display(), describe_io(err))
    }
}
