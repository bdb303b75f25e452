//! The command line of `dualfs mount` (also what `mount -o remount` and the mount helper
//! hand on): read by the mount itself (cli/mount.rs) and by a remount (cli/remount.rs).

use super::options::Strictness;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(
    override_usage = "dualfs mount [OPTIONS] <META> [DATA] <MOUNTPOINT>",
    after_help = super::options::options_help()
)]
pub struct MountArgs {
    /// The metadata device (image file or block device)
    #[arg(value_name = "META")]
    pub meta: PathBuf,
    /// The directory to mount on. Given three paths, META DATA MOUNTPOINT: DATA is the data
    /// device (default: the path recorded in META by mkfs)
    #[arg(value_name = "MOUNTPOINT")]
    pub data_or_mountpoint: PathBuf,
    /// The directory to mount on, when DATA is given before it
    #[arg(value_name = "MOUNTPOINT", hide = true)]
    pub mountpoint: Option<PathBuf>,
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
    /// Unknown `-o` options: refused, or ignored (mount(8)'s `-s`).
    #[arg(skip)]
    pub strictness: Strictness,
    /// Check everything, mount nothing (mount(8)'s `-f`).
    #[arg(skip)]
    pub fake: bool,
}
