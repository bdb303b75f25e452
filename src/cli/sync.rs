//! `dualfs sync MOUNTPOINT`: make everything written to a mounted DualFS durable.
//!
//! Linux does not pass sync(2) or syncfs(2) on to a FUSE file system served over /dev/fuse
//! (only virtiofs gets FUSE_SYNCFS), so `sync` alone makes nothing durable on DualFS. This
//! command does both halves: syncfs(2) on the mount, which makes the kernel hand the daemon
//! what it still caches (dirty pages and times under `-o writeback_cache`), then the `sync`
//! request on the mount's control socket, answered once one log commit of everything dirty
//! is on the devices (data device flushed first).

use super::error::{describe_io, print_error, CliError};
use dualfs::control_protocol::Client;
use dualfs::daemon::{read_pid_file, Daemon};
use dualfs::mountinfo::{self, DUALFS_FS_TYPE};
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct SyncArgs {
    /// Directories DualFS file systems are mounted on
    #[arg(value_name = "MOUNTPOINT", required = true)]
    pub mountpoints: Vec<PathBuf>,
}

pub fn run(args: SyncArgs) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    for mountpoint in &args.mountpoints {
        if let Err(e) = sync(mountpoint) {
            print_error(e.message());
            code = e.exit_code();
        }
    }
    code
}

fn sync(path: &Path) -> Result<(), CliError> {
    let failure =
        |what: String| CliError::failure(format!("cannot sync {}: {what}", path.display()));
    let io_failure = |e: std::io::Error| {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            failure(format!(
                "{} (its daemon died; what it had not written is lost; `dualfs umount {}` \
                 takes the dead mount away)",
                describe_io(&e),
                path.display()
            ))
        } else {
            failure(describe_io(&e))
        }
    };
    let mountpoint = std::fs::canonicalize(path).map_err(io_failure)?;
    let table = mountinfo::read().map_err(|e| failure(format!("/proc/self/mountinfo: {e}")))?;
    let Some(mount) = mountinfo::topmost_at(&table, &mountpoint) else {
        return Err(failure("not a mount point".into()));
    };
    let daemon = read_pid_file(&Daemon::Mount.pid_file(&mountpoint))
        .filter(|&pid| Daemon::Mount.is_live(pid));
    if mount.fs_type != DUALFS_FS_TYPE && !(mount.is_fuse() && daemon.is_some()) {
        return Err(failure(format!(
            "not a DualFS mount (it is {})",
            mount.fs_type
        )));
    }
    if mount.is_read_only() {
        // Nothing is ever written to a read-only mount.
        return Ok(());
    }
    // The kernel's own cache first: under writeback_cache, dirty pages and times reach the
    // daemon only when written back.
    let root = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(&mountpoint)
        .map_err(io_failure)?;
    // SAFETY: syncfs on a descriptor we own.
    if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
        return Err(io_failure(std::io::Error::last_os_error()));
    }
    drop(root);
    let mut client = Client::connect(&mountpoint).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ECONNREFUSED) => failure(format!(
            "its daemon has no control socket ({}: {})",
            dualfs::control_protocol::socket_path(&mountpoint).display(),
            describe_io(&e)
        )),
        _ => failure(describe_io(&e)),
    })?;
    client.sync().map_err(|e| failure(describe_io(&e)))
}
