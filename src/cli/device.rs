//! Opening the two devices, each locked against a second mount.
//!
//! STAND-IN until `dualfs::device::FileDevice` lands (src/device/file.rs, being written):
//! then `open_device` becomes
//! `FileDevice::open(path, OpenMode { read_only, exclusive: true }).map(|d| Arc::new(d) as _)`
//! and `LockedFile` goes away.

use dualfs::device::{check_range, BlockDevice};
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// Open a device (image file or block device) for the core. The exclusive lock makes a
/// second mount of the same device fail with EWOULDBLOCK instead of corrupting it.
pub fn open_device(path: &Path, read_only: bool) -> io::Result<Arc<dyn BlockDevice>> {
    let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
    let file = Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| io::Error::from_raw_os_error(errno as i32))?;
    let size = (&*file).seek(SeekFrom::End(0))?;
    Ok(Arc::new(LockedFile {
        file,
        size,
        read_only,
        description: path.display().to_string(),
    }))
}

/// Is this error from `open_device` the sign of a device someone else holds?
pub fn is_in_use(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EWOULDBLOCK) | Some(libc::EBUSY)
    )
}

struct LockedFile {
    file: Flock<File>,
    size: u64,
    read_only: bool,
    description: String,
}

impl BlockDevice for LockedFile {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.size, offset, buf.len())?;
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        check_range(self.size, offset, buf.len())?;
        self.file.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.file.sync_data()
    }
    fn describe(&self) -> String {
        self.description.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_open_of_a_device_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.img");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let first = open_device(&path, false).unwrap();
        assert_eq!(first.size(), 8192);
        let Err(second) = open_device(&path, true) else {
            panic!("second open succeeded")
        };
        assert!(is_in_use(&second), "{second}");
        drop(first);
        let again = open_device(&path, true).unwrap();
        let mut buf = [0u8; 4];
        again.read_at(&mut buf, 8188).unwrap();
        assert_eq!(buf, [7; 4]);
        assert!(again.read_at(&mut buf, 8190).is_err());
        assert!(again.write_at(&buf, 0).is_err());
    }
}
