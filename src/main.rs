//! `dualfs`: mount a DualFS through FUSE, unmount it, show and change what it is.

mod cli;

use clap::{CommandFactory, Parser, Subcommand};
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::fd::IntoRawFd;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "dualfs",
    version,
    about = "DualFS: metadata in a log on one device, file data in block groups on another",
    long_about = "DualFS keeps metadata in a log-structured device (META) and file data in \
                  ext2-like block groups on another (DATA), mounted through FUSE.\n\n\
                  Permission checks are done by the kernel: every mount uses \
                  default_permissions, and DualFS itself trusts the kernel's decision.\n\n\
                  mount(8) runs it as `dualfs META MOUNTPOINT -o OPTIONS` (through \
                  mount.fuse3, type fuse.dualfs), which is `dualfs mount`, and as \
                  /sbin/mount.dualfs (type dualfs).\n\n\
                  Exit status of every subcommand: 0 done, 1 failed, 2 bad command line."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Mount a DualFS; returns once it is ready (or failed), leaving a daemon serving it
    ///
    /// Permissions are checked by the kernel (default_permissions is always on): DualFS
    /// relies on that and does not check access rights itself. The daemon stops on
    /// SIGTERM, SIGINT, SIGHUP or an unmount, and writes its final checkpoint before it
    /// exits; use `dualfs umount` to wait for that. Exit status: 0 mounted, 1 the mount
    /// failed (nothing was written to the devices), 2 bad command line.
    Mount(cli::mount_args::MountArgs),
    /// Unmount, and wait until the daemon wrote its final checkpoint and exited
    ///
    /// Exit status: 0 cleanly unmounted, 1 failed (busy, not a mount point, or the daemon
    /// did not finish cleanly), 2 bad command line.
    Umount(cli::umount::UmountArgs),
    /// Make everything written to a mounted DualFS durable, then return
    ///
    /// sync(1) and syncfs(2) do not reach a FUSE file system: on DualFS they make nothing
    /// durable. This does: it has the kernel write back what it caches for the mount, then
    /// asks the daemon (through its control socket) for one log commit of everything dirty,
    /// with the data device flushed first, and returns once that is on the devices. Root and
    /// the mount owner only. Exit status: 0 durable, 1 failed, 2 bad command line.
    Sync(cli::sync::SyncArgs),
    /// Show what a file system is and how full it is (mounted or not); reads only
    ///
    /// Label, UUID, format, block and segment sizes, both devices and their use, the last
    /// checkpoint, whether it is clean, needs recovery or is mounted. Exit status: 0 shown,
    /// 1 failed, 2 bad command line.
    Info(cli::info::InfoArgs),
    /// Change the label or the recorded data device path of an unmounted file system
    ///
    /// Exit status: 0 changed, 1 refused or failed (nothing changed), 2 bad command line.
    Tune(cli::tune::TuneArgs),
}

fn main() -> ExitCode {
    ensure_standard_streams_open();
    if let Some(code) = dualfs::man_pages::generate_if_asked(man_pages) {
        return code;
    }
    let args: Vec<OsString> = std::env::args_os().collect();
    if cli::helper::invoked_as_helper(&args) {
        return cli::helper::run(args);
    }
    if cli::umount_helper::invoked_as_umount_helper(&args) {
        return cli::umount_helper::run(args);
    }
    // The subcommands as clap knows them, so a new one is never taken for a META path.
    let command = Cli::command();
    let subcommands: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
    let cli = Cli::parse_from(cli::helper::with_mount_word(args, &subcommands));
    match cli.command {
        Command::Mount(args) => cli::mount::run(args),
        Command::Umount(args) => cli::umount::run(args),
        Command::Sync(args) => cli::sync::run(args),
        Command::Info(args) => cli::info::run(args),
        Command::Tune(args) => cli::tune::run(args),
    }
}

/// The manual pages of `dualfs`, its subcommands and the mount(8) helper.
fn man_pages() -> Vec<dualfs::man_pages::Page> {
    dualfs::man_pages::dualfs(
        Cli::command(),
        cli::helper::command(),
        cli::umount_helper::command(),
        cli::options::MOUNT_OPTIONS,
    )
}

/// Started with stdin, stdout or stderr closed, the program would open a device or
/// /dev/fuse as descriptor 0, 1 or 2 (which a stray print could write into). Fill any such
/// gap with /dev/null.
fn ensure_standard_streams_open() {
    for fd in 0..=2 {
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            // open(2) returns the lowest free descriptor, which is this one; keep it open.
            let null = OpenOptions::new().read(true).write(true).open("/dev/null");
            let _ = null.map(IntoRawFd::into_raw_fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option and subcommand clap accepts has its entry in a page that man formats.
    #[test]
    fn the_manual_pages_document_every_option() {
        dualfs::man_pages::verify(&man_pages()).unwrap_or_else(|problems| panic!("{problems}"));
    }

    /// No subcommand, present or future, is taken for the META of mount(8)'s form.
    #[test]
    fn every_subcommand_is_kept_as_it_is() {
        let command = Cli::command();
        let names: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
        assert!(names.contains(&"info") && names.contains(&"mount"));
        for name in &names {
            let args: Vec<OsString> = ["dualfs", name, "/a", "/b"]
                .iter()
                .map(OsString::from)
                .collect();
            assert_eq!(cli::helper::with_mount_word(args.clone(), &names), args);
        }
    }
}
