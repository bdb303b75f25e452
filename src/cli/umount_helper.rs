//! The umount(8) helper, `/sbin/umount.fuse.dualfs` (a link to this program; the name it is
//! run by says which form). For a mount of type `fuse.dualfs` umount(8) runs
//! `umount.fuse.dualfs {directory|device} [-flnrv] [-N namespace] [-t type.subtype]` instead
//! of calling umount(2) itself, and exits with its status. The helper is `dualfs umount`: it
//! unmounts, then waits until the daemon wrote its final checkpoint and let go of the
//! devices, so that `umount MNT && fsck ...` works as with a kernel file system.
//!
//! umount(8) finds the type of a mount point from statfs(2) (plain `fuse`, no helper) unless
//! the mount point has a line in libmount's table; every daemon that made its own mount
//! records one (cli/utab.rs). `umount -i` runs no helper, and so does not wait.

use super::error::print_error;
use super::umount::{umount, Unmount};
use clap::Parser;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The name umount(8) looks for: `umount.<type>` in /sbin, the type being `fuse.dualfs`.
const HELPER_NAME: &str = "umount.fuse.dualfs";

/// How long to wait for the daemon: `dualfs umount`'s default.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Was this program run as the umount(8) helper?
pub fn invoked_as_umount_helper(args: &[OsString]) -> bool {
    args.first()
        .and_then(|arg0| Path::new(arg0).file_name())
        .is_some_and(|name| name == OsStr::new(HELPER_NAME))
}

/// The helper's command line, for its manual page.
pub fn command() -> clap::Command {
    <HelperArgs as clap::CommandFactory>::command()
}

/// `umount.fuse.dualfs`: the helper's command line, as util-linux's umount(8) passes it.
#[derive(Parser, Debug)]
#[command(
    name = "umount.fuse.dualfs",
    version,
    about = "umount(8) helper for DualFS: `umount MOUNTPOINT` unmounts, then waits until the \
             daemon wrote its final checkpoint and let go of the devices"
)]
struct HelperArgs {
    /// The mount point (or the metadata device a DualFS is mounted from)
    #[arg(value_name = "DIRECTORY|DEVICE")]
    target: PathBuf,
    /// Force: abort the FUSE connection first (requests in flight fail)
    #[arg(short = 'f')]
    force: bool,
    /// Lazy: detach now, end when the last user leaves; does not wait for the daemon
    #[arg(short = 'l')]
    lazy: bool,
    /// No mtab (accepted; there is none)
    #[arg(short = 'n')]
    no_mtab: bool,
    /// Remount read-only instead when the mount is busy
    #[arg(short = 'r')]
    read_only_if_busy: bool,
    /// Verbose (accepted)
    #[arg(short = 'v')]
    verbose: bool,
    /// Unmount in another mount namespace (not supported)
    #[arg(short = 'N', value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The type of the mount: fuse.dualfs
    #[arg(short = 't', value_name = "TYPE")]
    fs_type: Option<String>,
}

/// Run as the umount(8) helper.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let args = HelperArgs::parse_from(args);
    if args.namespace.is_some() {
        print_error("-N (another mount namespace) is not supported");
        return ExitCode::from(2);
    }
    if let Some(fs_type) = args.fs_type.as_deref() {
        if fs_type != dualfs::mountinfo::DUALFS_FS_TYPE {
            print_error(&format!(
                "-t {fs_type}: this helper unmounts DualFS (type fuse.dualfs)"
            ));
            return ExitCode::from(2);
        }
    }
    let how = Unmount {
        lazy: args.lazy,
        force: args.force,
        read_only_if_busy: args.read_only_if_busy,
        timeout: TIMEOUT,
    };
    match umount(&args.target, how) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(e.message());
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn helper_name() {
        assert!(invoked_as_umount_helper(&os(&[
            "/sbin/umount.fuse.dualfs",
            "/mnt"
        ])));
        assert!(!invoked_as_umount_helper(&os(&[
            "/sbin/mount.dualfs",
            "/mnt"
        ])));
        assert!(!invoked_as_umount_helper(&os(&[
            "dualfs", "umount", "/mnt"
        ])));
        assert!(!invoked_as_umount_helper(&[]));
    }

    #[test]
    fn flags_parse_as_umount_passes_them() {
        let a = HelperArgs::parse_from(os(&[
            "umount.fuse.dualfs",
            "/mnt",
            "-n",
            "-l",
            "-f",
            "-v",
            "-t",
            "fuse.dualfs",
        ]));
        assert!(a.no_mtab && a.lazy && a.force && a.verbose && !a.read_only_if_busy);
        assert_eq!(a.target, PathBuf::from("/mnt"));
        assert_eq!(a.fs_type.as_deref(), Some("fuse.dualfs"));
        let a = HelperArgs::parse_from(os(&["umount.fuse.dualfs", "/m.img", "-flnrv"]));
        assert!(a.force && a.lazy && a.read_only_if_busy);
        assert_eq!(a.target, PathBuf::from("/m.img"));
    }
}
