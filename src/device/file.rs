//! A device backed by an image file or a block device, read and written with pread/pwrite.
//!
//! Exclusive opens keep two programs (two mounts, or mkfs over a mounted file system) off the
//! same storage: block devices are opened with `O_EXCL`, which the kernel refuses while the
//! device is mounted or claimed by another exclusive opener; image files take a `flock`.

use super::{check_range, BlockDevice};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// How to open a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenMode {
    /// Open for reading only; writes fail.
    pub read_only: bool,
    /// Keep everyone else out while this device is open (see the module comment). A read-only
    /// exclusive open of an image file takes a shared lock, so several readers may coexist
    /// but no writer.
    pub exclusive: bool,
}

/// What kind of file is behind a `FileDevice`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A regular file used as a disk image.
    ImageFile,
    /// A block special file (a disk, a partition, a loop device).
    BlockDevice,
}

pub struct FileDevice {
    file: File,
    path: PathBuf,
    size: u64,
    kind: DeviceKind,
    read_only: bool,
}

// BLKGETSIZE64 is _IOR(0x12, 114, size_t): the size of a block device in bytes.
nix::ioctl_read!(block_device_size_ioctl, 0x12, 114, u64);

impl FileDevice {
    /// Open `path`, which must be a regular file or a block device.
    pub fn open(path: &Path, mode: OpenMode) -> io::Result<FileDevice> {
        let kind = kind_of(path)?;
        let mut options = OpenOptions::new();
        options.read(true).write(!mode.read_only);
        if kind == DeviceKind::BlockDevice && mode.exclusive {
            // Without O_CREAT, O_EXCL on a block device asks the kernel for an exclusive claim.
            options.custom_flags(libc::O_EXCL);
        }
        let file = options.open(path).map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                in_use_error(path)
            } else {
                with_path(path, "cannot open", e)
            }
        })?;

        // The path could have been replaced between the first look and the open.
        let opened_kind = kind_of_file(path, &file)?;
        if opened_kind != kind {
            return Err(io::Error::other(format!(
                "{}: changed while being opened",
                path.display()
            )));
        }

        if kind == DeviceKind::ImageFile && mode.exclusive {
            lock_image(path, &file, mode.read_only)?;
        }

        let size = match kind {
            DeviceKind::ImageFile => file
                .metadata()
                .map_err(|e| with_path(path, "cannot read the size of", e))?
                .len(),
            DeviceKind::BlockDevice => block_device_size(path, &file)?,
        };

        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            size,
            kind,
            read_only: mode.read_only,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
}

impl BlockDevice for FileDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.size, offset, buf.len())?;
        self.file.read_exact_at(buf, offset).map_err(|e| {
            let what = format!("read of {} bytes at offset {offset} failed on", buf.len());
            with_path(&self.path, &what, e)
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: opened read-only", self.path.display()),
            ));
        }
        check_range(self.size, offset, buf.len())?;
        self.file.write_all_at(buf, offset).map_err(|e| {
            let what = format!("write of {} bytes at offset {offset} failed on", buf.len());
            with_path(&self.path, &what, e)
        })
    }

    fn flush(&self) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        // fdatasync: on a block device this also sends a cache flush to the disk.
        self.file
            .sync_data()
            .map_err(|e| with_path(&self.path, "flush failed on", e))
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

/// Classify `path` (following symlinks) without opening it: opening some character devices
/// has side effects (a tape rewinds), so those are refused before `open`.
fn kind_of(path: &Path) -> io::Result<DeviceKind> {
    let meta = std::fs::metadata(path).map_err(|e| with_path(path, "cannot access", e))?;
    classify(path, meta.file_type())
}

fn kind_of_file(path: &Path, file: &File) -> io::Result<DeviceKind> {
    let meta = file
        .metadata()
        .map_err(|e| with_path(path, "cannot stat", e))?;
    classify(path, meta.file_type())
}

fn classify(path: &Path, file_type: std::fs::FileType) -> io::Result<DeviceKind> {
    if file_type.is_file() {
        Ok(DeviceKind::ImageFile)
    } else if file_type.is_block_device() {
        Ok(DeviceKind::BlockDevice)
    } else {
        let what = if file_type.is_dir() {
            "a directory"
        } else if file_type.is_char_device() {
            "a character device"
        } else {
            "neither a regular file nor a block device"
        };
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: is {what}; a DualFS device must be an image file or a block device",
                path.display()
            ),
        ))
    }
}

/// Take a non-blocking flock on an image file: exclusive for writers, shared for readers.
///
/// flock locks belong to the open file description, not to the process: a child made by
/// `fork()` (the daemon after a mount backgrounds itself) shares the description and so keeps
/// the lock after the parent exits (std opens files with O_CLOEXEC, so a program started with
/// `exec` does not inherit it; a forked child does). For the same reason the lock is never
/// released explicitly: `LOCK_UN` from the exiting parent would drop the child's lock too.
/// Closing the last descriptor releases it.
fn lock_image(path: &Path, file: &File, shared: bool) -> io::Result<()> {
    let operation = if shared { libc::LOCK_SH } else { libc::LOCK_EX } | libc::LOCK_NB;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), operation) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(in_use_error(path))
    } else {
        Err(with_path(path, "cannot lock", e))
    }
}

fn block_device_size(path: &Path, file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at `size`.
    unsafe { block_device_size_ioctl(file.as_raw_fd(), &mut size) }
        .map_err(|errno| with_path(path, "cannot get the size of", errno.into()))?;
    Ok(size)
}

fn in_use_error(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        format!(
            "{}: device is in use (already mounted, or opened by another program)",
            path.display()
        ),
    )
}

/// Put the path (and what was being done) in front of an I/O error, keeping its kind.
fn with_path(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::loop_for_tests::LoopDevice;

    fn image(len: u64) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(len).unwrap();
        f
    }

    /// Whether `ready` becomes true within a second. A descriptor released by one test can
    /// live on for a moment in a child that another test is spawning (fork copies every
    /// descriptor until exec closes it), so "free again" is checked with some patience.
    fn eventually(ready: impl Fn() -> bool) -> bool {
        (0..100).any(|_| {
            ready() || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                false
            }
        })
    }

    const RW_EXCLUSIVE: OpenMode = OpenMode {
        read_only: false,
        exclusive: true,
    };
    const RO_EXCLUSIVE: OpenMode = OpenMode {
        read_only: true,
        exclusive: true,
    };

    #[test]
    fn reads_back_what_was_written() {
        let img = image(1 << 20);
        let dev = FileDevice::open(img.path(), RW_EXCLUSIVE).unwrap();
        assert_eq!(dev.size(), 1 << 20);
        assert_eq!(dev.kind(), DeviceKind::ImageFile);
        dev.write_at(b"hello", 4090).unwrap();
        dev.flush().unwrap();
        let mut buf = [0u8; 7];
        dev.read_at(&mut buf, 4089).unwrap();
        assert_eq!(&buf, b"\0hello\0");
        drop(dev);
        let on_disk = std::fs::read(img.path()).unwrap();
        assert_eq!(&on_disk[4090..4095], b"hello");
    }

    #[test]
    fn refuses_access_past_the_end() {
        let img = image(8192);
        let dev = FileDevice::open(img.path(), RW_EXCLUSIVE).unwrap();
        let mut buf = [0u8; 2];
        assert!(dev.read_at(&mut buf, 8191).is_err());
        assert!(dev.write_at(&buf, 8191).is_err());
        assert!(dev.write_at(&buf, u64::MAX).is_err());
        dev.read_at(&mut buf, 8190).unwrap();
    }

    #[test]
    fn read_only_refuses_writes() {
        let img = image(4096);
        let dev = FileDevice::open(img.path(), RO_EXCLUSIVE).unwrap();
        assert!(dev.is_read_only());
        let err = dev.write_at(b"x", 0).unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
        dev.flush().unwrap();
    }

    #[test]
    fn exclusive_opens_exclude_each_other() {
        let img = image(4096);
        let first = FileDevice::open(img.path(), RW_EXCLUSIVE).unwrap();
        let err = FileDevice::open(img.path(), RW_EXCLUSIVE).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::ResourceBusy);
        assert!(err.to_string().contains("in use"), "{err}");
        assert!(err.to_string().contains(&*img.path().to_string_lossy()));
        assert!(FileDevice::open(img.path(), RO_EXCLUSIVE).is_err());
        // A non-exclusive open is not stopped by the lock.
        FileDevice::open(img.path(), OpenMode::default()).unwrap();
        drop(first);
        assert!(eventually(
            || FileDevice::open(img.path(), RW_EXCLUSIVE).is_ok()
        ));
    }

    #[test]
    fn readers_share_but_exclude_a_writer() {
        let img = image(4096);
        let reader1 = FileDevice::open(img.path(), RO_EXCLUSIVE).unwrap();
        let _reader2 = FileDevice::open(img.path(), RO_EXCLUSIVE).unwrap();
        assert!(FileDevice::open(img.path(), RW_EXCLUSIVE).is_err());
        drop(reader1);
        assert!(FileDevice::open(img.path(), RW_EXCLUSIVE).is_err());
    }

    /// A forked child shares the open file description exactly as a `dup` does; forking
    /// inside the multithreaded test runner would also copy other tests' descriptors, so the
    /// test uses `dup`: dropping the device must not unlock what another descriptor shares.
    #[test]
    fn the_lock_stays_with_a_shared_descriptor() {
        let img = image(4096);
        let dev = FileDevice::open(img.path(), RW_EXCLUSIVE).unwrap();
        let shared_like_a_forked_child = dev.file.try_clone().unwrap();
        drop(dev);
        assert!(FileDevice::open(img.path(), RW_EXCLUSIVE).is_err());
        drop(shared_like_a_forked_child);
        assert!(eventually(
            || FileDevice::open(img.path(), RW_EXCLUSIVE).is_ok()
        ));
    }

    #[test]
    fn refuses_directories_character_devices_and_missing_paths() {
        let dir = tempfile::tempdir().unwrap();
        let err = FileDevice::open(dir.path(), OpenMode::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("a directory"), "{err}");
        let err = FileDevice::open(Path::new("/dev/null"), OpenMode::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("character device"), "{err}");
        let missing = dir.path().join("missing.img");
        let err = FileDevice::open(&missing, OpenMode::default())
            .err()
            .unwrap();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("missing.img"), "{err}");
    }

    #[test]
    fn block_device_size_and_exclusivity() {
        let Some(lo) = LoopDevice::new(3 << 20) else {
            return;
        };
        let dev = FileDevice::open(lo.path(), RW_EXCLUSIVE).unwrap();
        assert_eq!(dev.kind(), DeviceKind::BlockDevice);
        assert_eq!(dev.size(), 3 << 20);
        dev.write_at(&[7u8; 4096], 4096).unwrap();
        dev.flush().unwrap();
        let mut buf = [0u8; 4096];
        dev.read_at(&mut buf, 4096).unwrap();
        assert_eq!(buf, [7u8; 4096]);

        let err = FileDevice::open(lo.path(), RW_EXCLUSIVE).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::ResourceBusy);
        assert!(err.to_string().contains("in use"), "{err}");
        FileDevice::open(lo.path(), OpenMode::default()).unwrap();
        drop(dev);
        assert!(eventually(
            || FileDevice::open(lo.path(), RW_EXCLUSIVE).is_ok()
        ));
    }
}
