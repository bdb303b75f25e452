//! `mount -o remount,ro MOUNTPOINT` (and `remount,rw`): mount(8) runs the mount program with
//! `remount` among the options (through mount.fuse3, or /sbin/mount.dualfs), which asks the
//! daemon through its control socket; the daemon does the rest, since only it knows the
//! options it was mounted with and owns the kernel's mount.
//!
//! A remount changes what a kernel file system's remount changes for FUSE: read-write or
//! read-only. Turning read-only, the daemon has the kernel turn the mount read-only first (the
//! kernel writes back what it caches and refuses while files are open for writing), then
//! writes everything with a clean checkpoint and from then on writes nothing
//! (`Fs::set_read_only`). Turning read-write, the other way round. Every other option must be
//! what the mount has (mount(8) repeats the mount's options in a remount's list): the others
//! are DualFS's to apply, and it applies them once, when it mounts.
//!
//! A file system mounted read-only stays so: its devices are open read-only and the kernel
//! opens its files without telling DualFS (`noopen`), and its daemon has no control socket.

use super::error::{describe_fs_error, describe_io, print_error, CliError};
use super::kernel_mount::KernelMount;
use super::mount_args::MountArgs;
use super::options::{apply_option, MountSettings};
use dualfs::control_protocol::{socket_path, Client};
use dualfs::daemon::{read_pid_file, Daemon};
use dualfs::fs::Fs;
use dualfs::mountinfo::{self, DUALFS_FS_TYPE};
use log::info;
use nix::mount::MsFlags;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Why a remount was refused: an errno and a line for the person who asked (the control
/// socket's answer).
#[derive(Debug)]
pub struct RemountRefused {
    pub errno: i32,
    pub message: String,
}

/// Options the kernel shows in the mount table for every FUSE mount (mount(8) repeats them in
/// a remount's list): nothing to change.
const SHOWN_BY_THE_KERNEL: [&str; 8] = [
    "remount",
    "user_id",
    "group_id",
    "rootmode",
    "max_read",
    "blksize",
    "default_permissions",
    // Shown for allow_root too (the session enforces that itself), and for root's mounts
    // without either option.
    "allow_other",
];

/// Does this command line ask for a remount rather than a mount?
pub fn asks_remount<S: AsRef<str>>(lists: &[S]) -> bool {
    options(lists).any(|o| o == "remount")
}

/// `dualfs mount -o remount,...`: ask the daemon of the mount at the command line's mount
/// point.
pub fn run(args: &MountArgs) -> ExitCode {
    match remount(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(e.message());
            e.exit_code()
        }
    }
}

fn remount(args: &MountArgs) -> Result<(), CliError> {
    // `mount -o remount MOUNTPOINT` passes both the source and the mount point.
    let path = args
        .mountpoint
        .as_deref()
        .unwrap_or(&args.data_or_mountpoint);
    let failure =
        |why: String| CliError::failure(format!("cannot remount {}: {why}", path.display()));
    let mountpoint = std::fs::canonicalize(path).map_err(|e| failure(describe_io(&e)))?;
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
    if args.fake {
        return Ok(());
    }
    let socket = socket_path(&mountpoint);
    match Client::connect_socket(&socket) {
        Ok(mut client) => client
            .remount(args.options.clone())
            .map(|_| ())
            .map_err(|e| failure(describe_io(&e))),
        Err(_) if mount.is_read_only() => {
            let mut asked = MountSettings {
                read_only: true,
                ..MountSettings::default()
            };
            for option in options(&args.options).filter(|o| *o == "rw" || *o == "ro") {
                apply_option(&mut asked, option)?;
            }
            if asked.read_only {
                // Read-only it is, and nothing else of it can change.
                Ok(())
            } else {
                Err(failure(
                    "it was mounted read-only (its devices are open read-only, and the kernel \
                     opens its files without telling DualFS); unmount it and mount it \
                     read-write"
                        .into(),
                ))
            }
        }
        Err(e) => Err(failure(format!(
            "its daemon has no control socket ({}: {})",
            socket.display(),
            describe_io(&e)
        ))),
    }
}

/// Every option of the `-o` lists, in order.
fn options<S: AsRef<str>>(lists: &[S]) -> impl Iterator<Item = &str> {
    lists
        .iter()
        .flat_map(|l| l.as_ref().split(','))
        .filter(|o| !o.is_empty())
}

/// The daemon's side: its own mount, its file system and the settings it was mounted with.
pub struct Remounter {
    fs: Arc<Fs>,
    kernel: Arc<KernelMount>,
    settings: MountSettings,
    mountpoint: PathBuf,
    /// One remount at a time.
    busy: Mutex<()>,
}

impl Remounter {
    pub fn new(
        fs: Arc<Fs>,
        kernel: Arc<KernelMount>,
        settings: MountSettings,
        mountpoint: &Path,
    ) -> Remounter {
        Remounter {
            fs,
            kernel,
            settings,
            mountpoint: mountpoint.to_path_buf(),
            busy: Mutex::new(()),
        }
    }

    /// Remount with the `-o` lists of a remount; whether the mount is read-only now.
    pub fn remount(&self, lists: &[String]) -> Result<bool, RemountRefused> {
        let _one = self.busy.lock();
        let was = self.fs.is_read_only();
        let read_only =
            read_only_asked(&self.settings, was, lists).map_err(|message| RemountRefused {
                errno: libc::EINVAL,
                message,
            })?;
        if read_only == was {
            return Ok(was);
        }
        let kernel_failed = |e: std::io::Error| RemountRefused {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            message: match e.raw_os_error() {
                Some(libc::EBUSY) => {
                    "files on it are open for writing, or removed files are still open".into()
                }
                _ => describe_io(&e),
            },
        };
        let core_failed = |e: dualfs::FsError| RemountRefused {
            errno: e.errno(),
            message: describe_fs_error(&e),
        };
        if read_only {
            self.kernel
                .remount(self.kernel_flags(true))
                .map_err(kernel_failed)?;
            if let Err(e) = self.fs.set_read_only(true) {
                // As it was.
                let _ = self.kernel.remount(self.kernel_flags(false));
                return Err(core_failed(e));
            }
        } else {
            self.fs.set_read_only(false).map_err(core_failed)?;
            if let Err(e) = self.kernel.remount(self.kernel_flags(false)) {
                let _ = self.fs.set_read_only(true);
                return Err(kernel_failed(e));
            }
        }
        info!(
            "{} remounted {}",
            self.mountpoint.display(),
            if read_only { "read-only" } else { "read-write" }
        );
        Ok(read_only)
    }

    /// The mount's own flags, read-only or not.
    fn kernel_flags(&self, read_only: bool) -> MsFlags {
        let mut flags = self.settings.kernel_flags();
        flags.set(MsFlags::MS_RDONLY, read_only);
        flags
    }
}

/// Whether a remount's `-o` lists ask for read-only (`was`: what the mount is now, if they
/// say neither). Any other option must leave the mount as `current` has it.
fn read_only_asked(current: &MountSettings, was: bool, lists: &[String]) -> Result<bool, String> {
    let mut asked = MountSettings {
        read_only: was,
        ..current.clone()
    };
    let mut changing = Vec::new();
    for option in options(lists) {
        let key = option.split_once('=').map_or(option, |(k, _)| k);
        if SHOWN_BY_THE_KERNEL.contains(&key) {
            continue;
        }
        apply_option(&mut asked, option).map_err(|e| e.message().to_string())?;
        let mut alone = current.clone();
        if apply_option(&mut alone, option).is_ok() && effect(&alone) != effect(current) {
            changing.push(option);
        }
    }
    if effect(&asked) != effect(current) {
        return Err(format!(
            "a remount changes only ro and rw on DualFS; {} would change what was set when \
             mounting (unmount and mount again to change it)",
            if changing.is_empty() {
                "the options given".to_string()
            } else {
                changing.join(",")
            }
        ));
    }
    Ok(asked.read_only)
}

/// What settings do, read-only or not aside: two that do the same compare equal.
fn effect(s: &MountSettings) -> impl PartialEq + std::fmt::Debug {
    let s = MountSettings {
        read_only: false,
        ..s.clone()
    };
    (
        s.kernel_flags(),
        s.core_options(),
        s.fuse_config(),
        s.session_acl(true),
        s.fsname.clone(),
        s.subtype.clone(),
        s.readahead_kb(),
        s.device_io(),
        s.transport(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::options::{parse_option_lists_as, Strictness};

    fn settings(list: &str) -> MountSettings {
        parse_option_lists_as(&[list], Strictness::Strict).unwrap()
    }

    fn asked(current: &str, was: bool, list: &str) -> Result<bool, String> {
        read_only_asked(&settings(current), was, &[list.to_string()])
    }

    #[test]
    fn what_mount8_passes_for_remount_ro_and_rw() {
        // util-linux 2.38 for `mount -o remount,ro MNT` of a default mount.
        let ro =
            "ro,nosuid,nodev,relatime,remount,user_id=0,group_id=0,default_permissions,allow_other";
        assert_eq!(asked("", false, ro), Ok(true));
        assert_eq!(asked("", true, &ro.replacen("ro", "rw", 1)), Ok(false));
        assert_eq!(asked("", true, "remount"), Ok(true), "neither: as it is");
        assert_eq!(asked("", false, "remount"), Ok(false));
        // fstab lines repeat DualFS's own options; what the mount has is no change.
        let fstab = "defaults,nofail,_netdev,noatime,cache_size=1G,writeback_cache,remount,ro";
        assert_eq!(
            asked("noatime,cache_size=1G,writeback_cache", false, fstab),
            Ok(true)
        );
        // An explicit default is no change either.
        assert_eq!(
            asked("", false, "remount,ro,exec,relatime,cache_size=256M"),
            Ok(true)
        );
        assert_eq!(
            asked("allow_root", false, "remount,ro,allow_root"),
            Ok(true)
        );
    }

    #[test]
    fn anything_but_ro_and_rw_is_refused_with_the_options_named() {
        for (current, list, named) in [
            ("", "remount,ro,noatime", "noatime"),
            ("", "remount,rw,noexec", "noexec"),
            (
                "noatime",
                "remount,ro,relatime,cache_size=1G",
                "relatime,cache_size=1G",
            ),
            ("", "remount,writeback_cache", "writeback_cache"),
            ("", "remount,allow_root", "allow_root"),
            ("", "remount,dirsync", "dirsync"),
        ] {
            let e = asked(current, false, list).unwrap_err();
            assert!(
                e.contains(&format!("; {named} would change")),
                "{list}: {e}"
            );
            assert!(!e.contains('\n'));
        }
        let e = asked("", false, "remount,ro,frobnicate").unwrap_err();
        assert!(e.contains("frobnicate"), "{e}");
    }

    #[test]
    fn remount_is_found_among_the_options() {
        assert!(asks_remount(&["ro,remount"]));
        assert!(asks_remount(&["rw", "remount"]));
        assert!(!asks_remount(&["ro,remounted"]));
        assert!(!asks_remount::<&str>(&[]));
    }
}
