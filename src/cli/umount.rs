//! `dualfs umount`: unmount, then wait until the daemon wrote its final checkpoint and
//! exited (a plain `umount` returns before that).

use super::error::{describe_errno, describe_io, print_error, CliError};
use super::pid_file::{is_live_daemon, pid_file_path, read_pid_file, wait_for_exit};
use dualfs::mountinfo;
use nix::mount::{umount2, MntFlags};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct UmountArgs {
    /// The directory a DualFS is mounted on
    pub mountpoint: PathBuf,
    /// How long to wait for the daemon to finish, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub timeout: u64,
}

pub fn run(args: UmountArgs) -> ExitCode {
    match umount(&args.mountpoint, Duration::from_secs(args.timeout)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(e.message());
            e.exit_code()
        }
    }
}

fn umount(path: &Path, timeout: Duration) -> Result<(), CliError> {
    let mountpoint = resolve_mountpoint(path)?;
    // Never unmount anything but a FUSE file system, whatever path is given.
    let table = mountinfo::read();
    match table
        .as_ref()
        .map(|t| mountinfo::topmost_at(t, &mountpoint))
    {
        Ok(Some(m)) if m.is_fuse() => {}
        Ok(Some(m)) => {
            return Err(CliError::failure(format!(
                "{} is not a DualFS mount (it is {})",
                path.display(),
                m.fs_type
            )))
        }
        Ok(None) => {
            return Err(CliError::failure(format!(
                "cannot unmount {}: not a mount point",
                path.display()
            )))
        }
        Err(e) => {
            return Err(CliError::failure(format!(
                "cannot read /proc/self/mountinfo: {}",
                describe_io(e)
            )))
        }
    }
    let pid_file = pid_file_path(&mountpoint);
    // Look before unmounting: a daemon that finishes quickly is gone with its pid file.
    let daemon = read_pid_file(&pid_file).map(|pid| (pid, is_live_daemon(pid)));

    umount2(&mountpoint, MntFlags::empty()).map_err(|e| {
        let why = match e {
            nix::errno::Errno::EBUSY => {
                "target is busy (files are open, or a process works in it)".to_string()
            }
            nix::errno::Errno::EINVAL => "not a mount point".to_string(),
            nix::errno::Errno::EPERM => "permission denied (unmounting needs root)".to_string(),
            other => describe_errno(other as i32),
        };
        CliError::failure(format!("cannot unmount {}: {why}", path.display()))
    })?;
    // What umount(8) would do too: the mount's line in libmount's table goes with it.
    let utab = super::utab::path();
    if let Err(e) = super::utab::forget_mount(&utab, &mountpoint) {
        print_error(&format!(
            "warning: {} is unmounted, but its line in {} stays: {}",
            path.display(),
            utab.display(),
            describe_io(&e)
        ));
    }

    let Some((pid, alive)) = daemon else {
        // Not mounted by a dualfs daemon that left a pid file: nothing to wait for.
        return Ok(());
    };
    if !alive {
        forget_pid_file(&pid_file, pid);
        return Err(CliError::failure(format!(
            "{} is unmounted, but its daemon (pid {pid}) had died without a final \
             checkpoint; the next mount recovers from the log",
            path.display()
        )));
    }
    if !wait_for_exit(pid, timeout) {
        return Err(CliError::failure(format!(
            "{} is unmounted, but its daemon (pid {pid}) is still writing after {} s",
            path.display(),
            timeout.as_secs()
        )));
    }
    // The daemon removes its pid file only after a successful final checkpoint.
    if read_pid_file(&pid_file) == Some(pid) {
        forget_pid_file(&pid_file, pid);
        return Err(CliError::failure(format!(
            "the daemon of {} (pid {pid}) exited without a clean final checkpoint; see its \
             log; the next mount recovers from the log",
            path.display()
        )));
    }
    Ok(())
}

/// Drop the pid file of a daemon that is gone, once its fate has been reported.
fn forget_pid_file(pid_file: &Path, pid: i32) {
    if read_pid_file(pid_file) == Some(pid) {
        let _ = std::fs::remove_file(pid_file);
    }
}

/// The canonical mount point, as the daemon named its pid file. A mount whose daemon died
/// cannot be examined (ENOTCONN), so then only its parent is resolved.
pub fn resolve_mountpoint(path: &Path) -> Result<PathBuf, CliError> {
    let failure =
        |e: &std::io::Error| CliError::failure(format!("{}: {}", path.display(), describe_io(e)));
    match std::fs::canonicalize(path) {
        Ok(absolute) => Ok(absolute),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                return Err(failure(&e));
            };
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            let parent = std::fs::canonicalize(parent).map_err(|e| failure(&e))?;
            Ok(parent.join(name))
        }
        Err(e) => Err(failure(&e)),
    }
}
