//! Finding and opening the two devices. For a repair both are opened exclusively (a mounted
//! file system holds them, so a repair of a mounted file system is refused); a check only
//! (-n) opens them read-only, and still reads a mounted file system (with a warning).

use dualfs::daemon::unmounted::{wait_until_released, PATIENCE};
use dualfs::device::{is_mounted, BlockDevice, FileDevice, OpenMode};
use dualfs::format::superblock::{Role, Superblock, SB_SIZE};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    ReadOnly,
    Repair,
}

pub struct Pair {
    pub meta: Arc<dyn BlockDevice>,
    pub data: Arc<dyn BlockDevice>,
    pub meta_path: PathBuf,
    pub data_path: PathBuf,
    /// Something to tell the user before the check (a mounted file system checked anyway).
    pub warning: Option<String>,
}

/// Open META and DATA (DATA from META's superblock when not given).
pub fn open_pair(meta: &Path, data: Option<&Path>, access: Access) -> Result<Pair, String> {
    let meta_path = existing(meta)?;
    let data_path = match data {
        Some(d) => existing(d)?,
        None => {
            let recorded = recorded_data_path(&meta_path)?;
            existing(&recorded).map_err(|e| {
                format!(
                    "{e} (the data device recorded in {}; give DATA to use another)",
                    meta.display()
                )
            })?
        }
    };
    if same_file(&meta_path, &data_path) {
        return Err(format!(
            "{} is given as both the metadata and the data device",
            meta.display()
        ));
    }
    // umount(2) returns before the daemon's final checkpoint: give it the moment it needs
    // (the devices are still opened exclusively, once it let go; see below). A check only
    // goes on without it, as for any device in use.
    for p in [&meta_path, &data_path] {
        match wait_until_released(p, PATIENCE) {
            Err(held) if access == Access::Repair => {
                return Err(format!("{} is in use: {held}", p.display()))
            }
            _ => {}
        }
    }
    let mut warning = None;
    let (meta_dev, data_dev) = match access {
        Access::Repair => {
            for p in [&meta_path, &data_path] {
                if let Some(how) = is_mounted(p) {
                    return Err(format!(
                        "{} is {how}: refusing to repair a file system in use (unmount it \
                         first, or check it with -n)",
                        p.display()
                    ));
                }
            }
            let mode = OpenMode {
                read_only: false,
                exclusive: true,
                ..OpenMode::default()
            };
            (open(&meta_path, mode, true)?, open(&data_path, mode, true)?)
        }
        Access::ReadOnly => {
            let exclusive = OpenMode {
                read_only: true,
                exclusive: true,
                ..OpenMode::default()
            };
            let shared = OpenMode {
                read_only: true,
                exclusive: false,
                ..OpenMode::default()
            };
            let mut pick = |p: &Path| -> Result<Arc<dyn BlockDevice>, String> {
                match FileDevice::open(p, exclusive) {
                    Ok(d) => Ok(Arc::new(d)),
                    Err(e) if is_busy(&e) => {
                        warning = Some(format!(
                            "{} is in use (mounted?): checking it anyway, read-only; what is \
                             still in memory is not seen, so errors may be reported that are not \
                             there",
                            p.display()
                        ));
                        open(p, shared, false)
                    }
                    Err(e) => Err(e.to_string()),
                }
            };
            let m = pick(&meta_path)?;
            let d = pick(&data_path)?;
            (m, d)
        }
    };
    Ok(Pair {
        meta: meta_dev,
        data: data_dev,
        meta_path,
        data_path,
        warning,
    })
}

fn open(path: &Path, mode: OpenMode, repair: bool) -> Result<Arc<dyn BlockDevice>, String> {
    match FileDevice::open(path, mode) {
        Ok(d) => Ok(Arc::new(d)),
        Err(e) if repair && is_busy(&e) => Err(format!(
            "{}: in use (mounted, or opened by another program): refusing to repair a file \
             system in use",
            path.display()
        )),
        Err(e) => Err(e.to_string()),
    }
}

fn is_busy(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::ResourceBusy
        || matches!(
            e.raw_os_error(),
            Some(libc::EWOULDBLOCK) | Some(libc::EBUSY)
        )
}

/// An existing path, made absolute.
fn existing(path: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// The data device path recorded in META's superblock. A damaged superblock cannot say: then
/// DATA must be given (a repair can restore the superblock from a copy once it has both).
fn recorded_data_path(meta: &Path) -> Result<PathBuf, String> {
    let dev = FileDevice::open(
        meta,
        OpenMode {
            read_only: true,
            exclusive: false,
            ..OpenMode::default()
        },
    )
    .map_err(|e| e.to_string())?;
    if dev.size() < SB_SIZE as u64 {
        return Err(format!("{}: too small to hold a DualFS", meta.display()));
    }
    let mut b = vec![0u8; SB_SIZE];
    dev.read_at(&mut b, 0).map_err(|e| e.to_string())?;
    let sb = Superblock::decode(&b).map_err(|e| {
        format!(
            "{}: {e}; give the data device as the second argument",
            meta.display()
        )
    })?;
    if sb.role != Role::Meta {
        return Err(format!(
            "{} is the data device of a DualFS; give the metadata device first",
            meta.display()
        ));
    }
    if sb.data_path.is_empty() {
        return Err(format!(
            "{}: no data device path is recorded; give DATA",
            meta.display()
        ));
    }
    let p = PathBuf::from(OsStr::from_bytes(&sb.data_path));
    // A relative path was relative to where mkfs ran; the metadata device's directory is the
    // best guess left.
    Ok(if p.is_relative() {
        meta.parent().map_or(p.clone(), |dir| dir.join(&p))
    } else {
        p
    })
}
