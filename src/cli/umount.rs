//! `dualfs umount`: unmount, then wait until the daemon wrote its final checkpoint and
//! exited (umount(2) returns before that). umount(8) runs the same through its helper
//! /sbin/umount.fuse.dualfs (`umount_helper`).

use super::error::{describe_errno, describe_io, print_error, CliError};
use dualfs::control_protocol::{socket_path, Client};
use dualfs::daemon::{read_pid_file, Daemon};
use dualfs::mountinfo;
use nix::mount::{umount2, MntFlags};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct UmountArgs {
    /// The directory a DualFS is mounted on (or its metadata device)
    pub mountpoint: PathBuf,
    /// How long to wait for the daemon to finish, in seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub timeout: u64,
    /// Lazy: detach the mount now; the file system stays up for the programs still using it
    /// and ends when the last one leaves. Returns without waiting for the daemon
    #[arg(short = 'l', long)]
    pub lazy: bool,
    /// Force: abort the FUSE connection first (requests in flight fail with ENOTCONN); the
    /// daemon still writes its final checkpoint
    #[arg(short = 'f', long)]
    pub force: bool,
}

/// How to unmount.
#[derive(Clone, Copy, Debug)]
pub struct Unmount {
    pub lazy: bool,
    pub force: bool,
    /// When the mount is busy, remount it read-only instead (umount(8)'s `-r`).
    pub read_only_if_busy: bool,
    /// How long to wait for the daemon.
    pub timeout: Duration,
}

pub fn run(args: UmountArgs) -> ExitCode {
    let how = Unmount {
        lazy: args.lazy,
        force: args.force,
        read_only_if_busy: false,
        timeout: Duration::from_secs(args.timeout),
    };
    match umount(&args.mountpoint, how) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(e.message());
            e.exit_code()
        }
    }
}

pub fn umount(path: &Path, how: Unmount) -> Result<(), CliError> {
    let mountpoint = mountpoint_of(path)?;
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
    let pid_file = Daemon::Mount.pid_file(&mountpoint);
    // Look before unmounting: a daemon that finishes quickly is gone with its pid file.
    let daemon = read_pid_file(&pid_file).map(|pid| (pid, Daemon::Mount.is_live(pid)));

    let mut flags = MntFlags::empty();
    if how.lazy {
        flags |= MntFlags::MNT_DETACH;
    }
    if how.force {
        flags |= MntFlags::MNT_FORCE;
    }
    match umount2(&mountpoint, flags) {
        Ok(()) => {}
        // A mount an ordinary user made through fusermount is theirs to unmount through it.
        Err(nix::errno::Errno::EPERM) if !nix::unistd::geteuid().is_root() => {
            fusermount_unmount(&mountpoint, how.lazy).map_err(|why| {
                CliError::failure(format!("cannot unmount {}: {why}", path.display()))
            })?
        }
        Err(nix::errno::Errno::EBUSY) if how.read_only_if_busy => {
            remount_read_only(&mountpoint).map_err(|e| {
                CliError::failure(format!(
                    "{} is busy, and cannot be remounted read-only: {}",
                    path.display(),
                    describe_io(&e)
                ))
            })?;
            print_error(&format!("{} is busy: remounted read-only", path.display()));
            return Ok(());
        }
        Err(e) => {
            let why = match e {
                nix::errno::Errno::EBUSY => {
                    "target is busy (files are open, or a process works in it)".to_string()
                }
                nix::errno::Errno::EINVAL => "not a mount point".to_string(),
                nix::errno::Errno::EPERM => "permission denied (unmounting needs root)".to_string(),
                other => describe_errno(other as i32),
            };
            return Err(CliError::failure(format!(
                "cannot unmount {}: {why}",
                path.display()
            )));
        }
    }
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
    if how.lazy && alive {
        // The mount is gone from the tree; the daemon ends when the last user leaves.
        return Ok(());
    }
    if !alive {
        forget_pid_file(&pid_file, pid);
        forget_daemon_line(&mountpoint, pid);
        return Err(CliError::failure(format!(
            "{} is unmounted, but its daemon (pid {pid}) had died without a final \
             checkpoint; the next mount recovers from the log",
            path.display()
        )));
    }
    if !Daemon::Mount.wait_for_exit(pid, how.timeout) {
        return Err(CliError::failure(format!(
            "{} is unmounted, but its daemon (pid {pid}) is still writing after {} s",
            path.display(),
            how.timeout.as_secs()
        )));
    }
    // The daemon removes its pid file only after a successful final checkpoint.
    if read_pid_file(&pid_file) == Some(pid) {
        forget_pid_file(&pid_file, pid);
        forget_daemon_line(&mountpoint, pid);
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

/// Drop the line in libmount's table a daemon that died could not drop itself.
fn forget_daemon_line(mountpoint: &Path, pid: i32) {
    if let Ok(pid) = u32::try_from(pid) {
        let _ = super::utab::forget_daemon_line(&super::utab::path(), mountpoint, pid);
    }
}

/// umount(8)'s `-r`: a busy mount is remounted read-only instead (cli/remount.rs).
fn remount_read_only(mountpoint: &Path) -> std::io::Result<()> {
    let mut daemon = Client::connect_socket(&socket_path(mountpoint))?;
    daemon.remount(vec!["ro".into()]).map(|_| ())
}

/// `fusermount3 -u` (or fusermount's, on systems without fuse3).
pub(super) fn fusermount_unmount(mountpoint: &Path, lazy: bool) -> Result<(), String> {
    let mut tried = Vec::new();
    for program in ["fusermount3", "fusermount"] {
        let mut command = std::process::Command::new(program);
        command.arg("-u");
        if lazy {
            command.arg("-z");
        }
        match command.arg(mountpoint).output() {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => {
                let said = String::from_utf8_lossy(&out.stderr);
                return Err(format!("{program}: {}", said.trim()));
            }
            Err(e) => tried.push(format!("{program}: {}", describe_io(&e))),
        }
    }
    Err(format!(
        "permission denied, and no fusermount to ask ({})",
        tried.join("; ")
    ))
}

/// The mount point `path` names: a directory, or the source of a DualFS mount (its META).
fn mountpoint_of(path: &Path) -> Result<PathBuf, CliError> {
    let is_device = std::fs::metadata(path).is_ok_and(|m| !m.is_dir());
    if !is_device {
        return resolve_mountpoint(path);
    }
    let source = std::fs::canonicalize(path)
        .map_err(|e| CliError::failure(format!("{}: {}", path.display(), describe_io(&e))))?;
    match mountinfo::fuse_mounts_of(&source).map(|mut m| m.pop()) {
        Ok(Some(mountpoint)) => Ok(mountpoint),
        Ok(None) => Err(CliError::failure(format!(
            "cannot unmount {}: not mounted",
            path.display()
        ))),
        Err(e) => Err(CliError::failure(format!(
            "cannot read /proc/self/mountinfo: {}",
            describe_io(&e)
        ))),
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
