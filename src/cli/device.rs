//! Opening the two devices, each locked against a second mount (see `dualfs::device::file`).

use dualfs::device::{BlockDevice, FileDevice, OpenMode};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Open a device (image file or block device) for the core, exclusively: a second mount of
/// the same device fails instead of corrupting it.
pub fn open_device(path: &Path, read_only: bool) -> io::Result<Arc<dyn BlockDevice>> {
    let dev = FileDevice::open(
        path,
        OpenMode {
            read_only,
            exclusive: true,
        },
    )?;
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
