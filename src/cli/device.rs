//! Opening the two devices, each locked against a second mount (see `dualfs::device::file`).

use dualfs::daemon::unmounted::{wait_until_released, StillHeld, PATIENCE};
use dualfs::device::{BlockDevice, DeviceIo, FileDevice, OpenMode};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Open a device (image file or block device) for the core, exclusively: a second mount of
/// the same device fails instead of corrupting it. A device held by the daemon of a file
/// system just unmounted (umount(2) returns before its final checkpoint) is waited for.
/// `devio`: through the page cache or past it (`-o devio=`); a device that cannot do the
/// direct I/O asked for is an error naming the option that does without.
pub fn open_device(
    path: &Path,
    read_only: bool,
    devio: DeviceIo,
) -> io::Result<Arc<dyn BlockDevice>> {
    let open = || {
        FileDevice::open(
            path,
            OpenMode {
                read_only,
                exclusive: true,
                io: devio,
            },
        )
        .map_err(|e| {
            if e.kind() == io::ErrorKind::Unsupported && devio == DeviceIo::Direct {
                io::Error::new(
                    e.kind(),
                    format!("{e}; -o devio=buffered reads and writes it through the page cache"),
                )
            } else {
                e
            }
        })
    };
    let dev = match open() {
        Err(e) if is_in_use(&e) => {
            wait_until_released(path, PATIENCE)
                .map_err(|held| io::Error::new(io::ErrorKind::ResourceBusy, held))?;
            open()?
        }
        other => other?,
    };
    if let Some(align) = dev.direct_alignment() {
        log::info!("{}: direct I/O ({align}-byte units)", path.display());
    }
    Ok(Arc::new(dev))
}

/// Is this error from `open_device` the sign of a device someone else holds?
pub fn is_in_use(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::ResourceBusy
        || matches!(
            err.raw_os_error(),
            Some(libc::EWOULDBLOCK) | Some(libc::EBUSY)
        )
}

/// The daemon of an unmounted file system that still held the device when the wait ended.
pub fn still_held(err: &io::Error) -> Option<&StillHeld> {
    err.get_ref()?.downcast_ref::<StillHeld>()
}
