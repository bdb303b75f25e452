//! `dualfs tune META [--label L] [--data PATH]`: change a file system's label or the data
//! device path recorded in META (as `tune2fs -L` / `nilfs-tune -L`). Refused on a mounted
//! file system: both devices are opened exclusively, which a mount prevents. `--data` checks
//! that the device found at PATH is this file system's data device (its UUID and sizes)
//! before recording it.

use super::device::{is_in_use, open_device};
use super::error::{describe_fs_error, describe_io, print_error, CliError};
use super::mount::{device_path, same_file};
use dualfs::device::DeviceIo;
use dualfs::mountinfo::fuse_mounts_of;
use dualfs::superblock_change::{tune, Change};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true)))]
pub struct TuneArgs {
    /// The metadata device (image file or block device)
    #[arg(value_name = "META")]
    pub meta: PathBuf,
    /// Set the volume label (at most 32 bytes; "" clears it)
    #[arg(short = 'L', long, value_name = "LABEL", group = "change")]
    pub label: Option<String>,
    /// Record PATH as the data device (after checking that it is this file system's)
    #[arg(long, value_name = "PATH", group = "change")]
    pub data: Option<PathBuf>,
}

pub fn run(args: TuneArgs) -> ExitCode {
    match run_tune(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(e.message());
            e.exit_code()
        }
    }
}

fn run_tune(args: &TuneArgs) -> Result<(), CliError> {
    let meta_path = device_path(&args.meta)?;
    refuse_if_mounted(&args.meta, &meta_path)?;
    let data_path = match &args.data {
        Some(data) => device_path(data)?,
        None => {
            let recorded = super::data_path::recorded_data_path(&meta_path)
                .map_err(|e| CliError::failure(format!("{e:#}")))?;
            device_path(&recorded).map_err(|e| {
                CliError::failure(format!(
                    "{} (the data device recorded in {}; give --data PATH if it moved)",
                    e.message(),
                    args.meta.display()
                ))
            })?
        }
    };
    if same_file(&meta_path, &data_path) {
        return Err(CliError::failure(format!(
            "{} is given as both the metadata and the data device",
            meta_path.display()
        )));
    }
    let open = |path: &Path, shown: &Path| {
        open_device(path, false, DeviceIo::Buffered).map_err(|e| {
            if is_in_use(&e) {
                CliError::failure(format!(
                    "{} is in use (mounted, or held by another program); unmount it first",
                    shown.display()
                ))
            } else {
                CliError::failure(format!("{}: {}", shown.display(), describe_io(&e)))
            }
        })
    };
    let meta = open(&meta_path, &args.meta)?;
    let data = open(&data_path, args.data.as_deref().unwrap_or(&data_path))?;
    let change = Change {
        label: args.label.clone(),
        // Recorded absolute, as mkfs does: a mount may run from any directory.
        data_path: args
            .data
            .as_ref()
            .map(|_| data_path.as_os_str().as_bytes().to_vec()),
    };
    let sb = tune(&*meta, &*data, &change).map_err(|e| CliError::failure(describe_fs_error(&e)))?;
    if let Some(label) = &args.label {
        println!("label of {}: {label:?}", args.meta.display());
    }
    if args.data.is_some() {
        let recorded = PathBuf::from(OsStr::from_bytes(&sb.data_path));
        println!(
            "data device of {}: {}",
            args.meta.display(),
            recorded.display()
        );
    }
    Ok(())
}

/// A read-write mount holds the devices exclusively, but a read-only one only shares them:
/// look for either in the mount table, and name the mount point.
fn refuse_if_mounted(shown: &Path, meta: &Path) -> Result<(), CliError> {
    let mounts = fuse_mounts_of(meta)
        .map_err(|e| CliError::failure(format!("/proc/self/mountinfo: {}", describe_io(&e))))?;
    match mounts.last() {
        Some(mnt) => Err(CliError::failure(format!(
            "{} is mounted on {}; unmount it first",
            shown.display(),
            mnt.display()
        ))),
        None => Ok(()),
    }
}
