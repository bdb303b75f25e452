//! The two ways mount(8) runs DualFS, so that `mount -t dualfs`, `mount -t fuse.dualfs` and
//! /etc/fstab lines of either type work:
//!
//! - type `dualfs`: mount(8) runs the helper `/sbin/mount.dualfs META MOUNTPOINT [-sfnv]
//!   [-N NS] [-o OPTIONS]` (a link to this program; the name it is run by says which form);
//! - type `fuse.dualfs`: mount(8) runs `/sbin/mount.fuse` (mount.fuse3), which runs
//!   `dualfs META MOUNTPOINT -o OPTIONS`, without the `mount` word.

use super::mount_args::MountArgs;
use super::options::Strictness;
use clap::Parser;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The names the mount(8) helper is installed as.
const HELPER_NAMES: [&str; 2] = ["mount.dualfs", "mount.fuse.dualfs"];

/// Was this program run as the mount(8) helper?
pub fn invoked_as_helper(args: &[OsString]) -> bool {
    args.first()
        .and_then(|arg0| Path::new(arg0).file_name())
        .is_some_and(|name| HELPER_NAMES.iter().any(|h| OsStr::new(h) == name))
}

/// mount.fuse3's form, `dualfs META MOUNTPOINT -o OPTIONS`, is `dualfs mount META
/// MOUNTPOINT -o OPTIONS`: two paths first and no subcommand. Anything else (a mistyped
/// subcommand, `--help`) is left for clap to answer. `subcommands`: the program's, as clap
/// has them (`help` is always one).
pub fn with_mount_word(mut args: Vec<OsString>, subcommands: &[&str]) -> Vec<OsString> {
    let is_path = |arg: Option<&OsString>| {
        arg.is_some_and(|a| {
            let text = a.to_string_lossy();
            !text.starts_with('-') && text != "help" && !subcommands.contains(&text.as_ref())
        })
    };
    if is_path(args.get(1)) && is_path(args.get(2)) {
        args.insert(1, OsString::from("mount"));
    }
    args
}

/// `mount.dualfs`: the helper's command line, as util-linux's mount(8) passes it.
#[derive(Parser, Debug)]
#[command(
    name = "mount.dualfs",
    version,
    about = "mount(8) helper for DualFS: `mount -t dualfs META MOUNTPOINT`, or an /etc/fstab \
             line `META MOUNTPOINT dualfs OPTIONS 0 0`",
    after_help = super::options::options_help()
)]
struct HelperArgs {
    /// The metadata device (the data device is the one recorded in it by mkfs)
    #[arg(value_name = "META")]
    meta: PathBuf,
    /// The directory to mount on
    #[arg(value_name = "MOUNTPOINT")]
    mountpoint: PathBuf,
    /// Mount options, comma separated (those of `dualfs mount`)
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Sloppy: ignore unknown options (with a warning) instead of refusing them
    #[arg(short = 's')]
    sloppy: bool,
    /// Fake: check everything, mount nothing
    #[arg(short = 'f')]
    fake: bool,
    /// No mtab (accepted; there is none)
    #[arg(short = 'n')]
    no_mtab: bool,
    /// Verbose (accepted)
    #[arg(short = 'v')]
    verbose: bool,
    /// Mount in another mount namespace (not supported)
    #[arg(short = 'N', value_name = "NS")]
    namespace: Option<String>,
    /// The type mount(8) was given: dualfs or fuse.dualfs
    #[arg(short = 't', value_name = "TYPE")]
    fs_type: Option<String>,
}

/// The helper's command line as clap has it, for its manual page (mount.dualfs(8)).
pub fn command() -> clap::Command {
    <HelperArgs as clap::CommandFactory>::command()
}

/// Run as the mount(8) helper: mount (detached, returning once the file system is ready).
pub fn run(args: Vec<OsString>) -> ExitCode {
    let args = HelperArgs::parse_from(args);
    if args.namespace.is_some() {
        super::error::print_error("-N (another mount namespace) is not supported");
        return ExitCode::from(2);
    }
    if let Some(fs_type) = args.fs_type.as_deref() {
        if fs_type != "dualfs" && fs_type != dualfs::mountinfo::DUALFS_FS_TYPE {
            super::error::print_error(&format!(
                "-t {fs_type}: this helper mounts DualFS (type dualfs or fuse.dualfs)"
            ));
            return ExitCode::from(2);
        }
    }
    super::mount::run(MountArgs {
        meta: args.meta,
        data_or_mountpoint: args.mountpoint,
        mountpoint: None,
        options: args.options,
        foreground: false,
        threads: None,
        log_file: None,
        strictness: if args.sloppy {
            Strictness::Sloppy
        } else {
            Strictness::Strict
        },
        fake: args.fake,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBCOMMANDS: &[&str] = &["mount", "umount", "sync", "info", "tune"];

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn mount_fuse3_form_gets_the_mount_word() {
        assert_eq!(
            with_mount_word(
                os(&["dualfs", "/m.img", "/mnt", "-o", "rw,dev"]),
                SUBCOMMANDS
            ),
            os(&["dualfs", "mount", "/m.img", "/mnt", "-o", "rw,dev"])
        );
        for unchanged in [
            &["dualfs", "mount", "/m.img", "/mnt"][..],
            &["dualfs", "umount", "/mnt"],
            &["dualfs", "sync", "/mnt"],
            &["dualfs", "info", "/m.img"],
            &["dualfs", "tune", "/m.img", "--label", "x"],
            &["dualfs", "help", "mount"],
            &["dualfs", "mout"],
            &["dualfs", "--help"],
            &["dualfs", "-V", "x"],
            &["dualfs"],
        ] {
            assert_eq!(with_mount_word(os(unchanged), SUBCOMMANDS), os(unchanged));
        }
    }

    #[test]
    fn helper_names() {
        assert!(invoked_as_helper(&os(&["/sbin/mount.dualfs", "a", "b"])));
        assert!(invoked_as_helper(&os(&["mount.fuse.dualfs"])));
        assert!(!invoked_as_helper(&os(&[
            "/usr/local/bin/dualfs",
            "a",
            "b"
        ])));
        assert!(!invoked_as_helper(&[]));
    }

    #[test]
    fn helper_flags_parse_as_mount_passes_them() {
        let a = HelperArgs::parse_from(os(&[
            "mount.dualfs",
            "/m.img",
            "/mnt",
            "-sfnv",
            "-o",
            "rw,nofail",
            "-t",
            "dualfs",
        ]));
        assert!(a.sloppy && a.fake && a.no_mtab && a.verbose);
        assert_eq!(a.options, vec!["rw,nofail".to_string()]);
        assert_eq!(a.fs_type.as_deref(), Some("dualfs"));
    }
}
