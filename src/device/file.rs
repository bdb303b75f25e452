//! A device backed by an image file or a block device, read and written with pread/pwrite,
//! through the kernel's page cache or, with direct I/O, past it (`DeviceIo`, `super::direct`).
//!
//! Exclusive opens keep two programs (two mounts, or mkfs over a mounted file system) off the
//! same storage: block devices are opened with `O_EXCL`, which the kernel refuses while the
//! device is mounted or claimed by another exclusive opener; image files take a `flock`.

use super::{check_range, direct, BlockDevice};
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
    /// Through the page cache or past it.
    pub io: DeviceIo,
}

/// How a device's bytes travel between DualFS and the storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceIo {
    /// Through the kernel's page cache: pread and pwrite on a plain descriptor.
    #[default]
    Buffered,
    /// Direct I/O (`O_DIRECT`), past the page cache (`super::direct`). A device that cannot
    /// do it is an error (kind `Unsupported`) that names it.
    Direct,
}

impl DeviceIo {
    /// The spelling of the mount option's value (`devio=`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceIo::Buffered => "buffered",
            DeviceIo::Direct => "direct",
        }
    }
}

/// What kind of file is behind a `FileDevice`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A regular file used as a disk image.
    ImageFile,
    /// A block special file (a disk, a partition, a loop device).
    BlockDevice,
}

impl DeviceKind {
    /// What a file of `file_type` is as a DualFS device, or, when it cannot be one, what it
    /// is instead ("a directory"), for the message that refuses it. The one test for both
    /// opening a device and mkfs's look before it formats.
    pub fn of(file_type: std::fs::FileType) -> Result<DeviceKind, &'static str> {
        if file_type.is_file() {
            Ok(DeviceKind::ImageFile)
        } else if file_type.is_block_device() {
            Ok(DeviceKind::BlockDevice)
        } else if file_type.is_dir() {
            Err("a directory")
        } else if file_type.is_char_device() {
            Err("a character device")
        } else {
            Err("neither a regular file nor a block device")
        }
    }
}

pub struct FileDevice {
    file: File,
    path: PathBuf,
    size: u64,
    kind: DeviceKind,
    read_only: bool,
    /// With direct I/O: the alignment it needs (`direct::alignment`).
    direct: Option<u64>,
}

// BLKGETSIZE64 is _IOR(0x12, 114, size_t): the size of a block device in bytes.
nix::ioctl_read!(block_device_size_ioctl, 0x12, 114, u64);

impl FileDevice {
    /// Open `path`, which must be a regular file or a block device.
    pub fn open(path: &Path, mode: OpenMode) -> io::Result<FileDevice> {
        let kind = kind_of(path)?;
        let want_direct = mode.io == DeviceIo::Direct;
        let file = open_file(path, mode, kind, want_direct).map_err(|e| {
            // A file system that cannot do direct I/O refuses O_DIRECT at open (EINVAL).
            if want_direct && e.raw_os_error() == Some(libc::EINVAL) {
                direct::unsupported(path, "the file system it is on refuses it")
            } else {
                e
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

        let direct = if want_direct {
            Some(direct::alignment(
                path,
                &file,
                kind == DeviceKind::BlockDevice,
            )?)
        } else {
            None
        };

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
            direct,
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

    /// With direct I/O, the alignment its requests are widened to (bytes); None: buffered.
    pub fn direct_alignment(&self) -> Option<u64> {
        self.direct
    }
}

/// Open `path` for `mode`, with `O_DIRECT` when `direct`.
fn open_file(path: &Path, mode: OpenMode, kind: DeviceKind, direct: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(!mode.read_only);
    let mut flags = 0;
    if kind == DeviceKind::BlockDevice && mode.exclusive {
        // Without O_CREAT, O_EXCL on a block device asks the kernel for an exclusive claim.
        flags |= libc::O_EXCL;
    }
    if direct {
        flags |= libc::O_DIRECT;
    }
    options.custom_flags(flags);
    options.open(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::EBUSY) {
            in_use_error(path)
        } else if direct && e.raw_os_error() == Some(libc::EINVAL) {
            e // the caller names it
        } else {
            with_path(path, "cannot open", e)
        }
    })
}

impl BlockDevice for FileDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.size, offset, buf.len())?;
        match self.direct {
            Some(align) => direct::read_at(&self.file, align, buf, offset),
            None => self.file.read_exact_at(buf, offset),
        }
        .map_err(|e| {
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
        match self.direct {
            Some(align) => direct::write_at(&self.file, align, self.size, buf, offset),
            None => self.file.write_all_at(buf, offset),
        }
        .map_err(|e| {
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
    DeviceKind::of(file_type).map_err(|what| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: is {what}; a DualFS device must be an image file or a block device",
                path.display()
            ),
        )
    })
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
    use crate::device::direct::PIECE_MAX;
    use dualfs_testkit::{LoopDevice, Ramfs};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

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
        io: DeviceIo::Buffered,
    };
    const RO_EXCLUSIVE: OpenMode = OpenMode {
        read_only: true,
        exclusive: true,
        io: DeviceIo::Buffered,
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

    const RW_DIRECT: OpenMode = OpenMode {
        read_only: false,
        exclusive: true,
        io: DeviceIo::Direct,
    };

    /// A folder whose file system takes O_DIRECT: the temporary folder, /var/tmp, or else an
    /// ext4 on a loop device. The folder goes before the loop device (field order).
    struct DirectDir {
        dir: tempfile::TempDir,
        _ext4: Option<LoopDevice>,
    }

    fn takes_o_direct(dir: &Path) -> bool {
        let probe = dir.join("probe");
        let ok = std::fs::write(&probe, [0u8; 4096]).is_ok()
            && OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(&probe)
                .is_ok();
        let _ = std::fs::remove_file(&probe);
        ok
    }

    fn direct_dir() -> Option<DirectDir> {
        for base in [std::env::temp_dir(), PathBuf::from("/var/tmp")] {
            if let Ok(dir) = tempfile::tempdir_in(&base) {
                if takes_o_direct(dir.path()) {
                    return Some(DirectDir { dir, _ext4: None });
                }
            }
        }
        let mut lo = LoopDevice::new(64 << 20)?;
        let mnt = lo.mount_ext4()?;
        let dir = tempfile::tempdir_in(mnt).ok()?;
        Some(DirectDir {
            dir,
            _ext4: Some(lo),
        })
    }

    /// An image of `len` bytes of random content in `dir`.
    fn random_image(dir: &Path, name: &str, len: usize, rng: &mut StdRng) -> PathBuf {
        let path = dir.join(name);
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes[..]);
        std::fs::write(&path, &bytes).unwrap();
        path
    }

    /// `len` bytes of `source` starting at `shift`: a buffer at any alignment in memory.
    fn slice_at(source: &[u8], shift: usize, len: usize) -> &[u8] {
        &source[shift..shift + len]
    }

    /// Do the same reads and writes on `direct` and `buffered` (same size, same content):
    /// first the edge cases, then random ones at odd offsets and lengths, with buffers at odd
    /// places in memory; every read must give the same bytes, and so must the whole devices.
    fn same_as_buffered(direct: &FileDevice, buffered: &FileDevice, seed: u64) {
        let align = direct.direct_alignment().expect("opened for direct I/O") as usize;
        let size = direct.size() as usize;
        assert_eq!(size, buffered.size() as usize);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut source = vec![0u8; 3 * PIECE_MAX];
        rng.fill(&mut source[..]);
        // An aligned buffer inside `source`, for requests that go straight through.
        let aligned_shift = source.as_ptr().align_offset(4096);
        let mut cases: Vec<(usize, usize, usize)> = vec![
            (0, 1, 1),
            (align - 1, 2, 3),
            (4095, 2, 0),
            (4096, 4096, aligned_shift),
            (align, align, aligned_shift),
            (3 * align + 5, align, 7),
            (size - 5, 5, 1),
            (size - align, align, aligned_shift),
            (1, PIECE_MAX + 3 * align, 11),
            (align * 7 + 1, 2 * PIECE_MAX + 100, 13),
            (0, size.min(2 * PIECE_MAX), aligned_shift),
        ];
        for _ in 0..300 {
            let len = match rng.gen_range(0..10) {
                0 => rng.gen_range(PIECE_MAX - 2 * align..PIECE_MAX + 4 * align),
                1 => rng.gen_range(1..=3 * align),
                2 => align * rng.gen_range(1..=8),
                _ => rng.gen_range(1..20_000),
            };
            let offset = match rng.gen_range(0..4) {
                0 => align * rng.gen_range(0..(size - len) / align),
                _ => rng.gen_range(0..=size - len),
            };
            let shift = if rng.gen_bool(0.2) {
                aligned_shift
            } else {
                rng.gen_range(0..64)
            };
            cases.push((offset, len, shift));
        }
        for (i, &(offset, len, shift)) in cases.iter().enumerate() {
            let what = format!("case {i}: {len} bytes at {offset} (buffer at +{shift})");
            if i % 2 == 0 {
                let data = slice_at(&source, shift, len);
                direct.write_at(data, offset as u64).expect(&what);
                buffered.write_at(data, offset as u64).expect(&what);
            }
            let mut a = vec![0u8; len + shift];
            let mut b = vec![0u8; len];
            direct.read_at(&mut a[shift..], offset as u64).expect(&what);
            buffered.read_at(&mut b, offset as u64).expect(&what);
            assert!(a[shift..] == b[..], "{what}: different bytes");
        }
        direct.flush().unwrap();
        buffered.flush().unwrap();
        let mut a = vec![0u8; size];
        let mut b = vec![0u8; size];
        direct.read_at(&mut a, 0).unwrap();
        buffered.read_at(&mut b, 0).unwrap();
        assert!(a == b, "the devices differ");
    }

    #[test]
    fn direct_io_on_an_image_does_what_buffered_io_does() {
        let Some(dir) = direct_dir() else {
            eprintln!("skipping: no file system here takes O_DIRECT");
            return;
        };
        let mut rng = StdRng::seed_from_u64(1);
        let len = 6 << 20;
        let d = random_image(dir.dir.path(), "direct.img", len, &mut rng);
        let b = dir.dir.path().join("buffered.img");
        std::fs::copy(&d, &b).unwrap();
        let direct = FileDevice::open(&d, RW_DIRECT).unwrap();
        let align = direct.direct_alignment().unwrap();
        assert!(
            align.is_power_of_two() && (512..=4096).contains(&align),
            "{align}"
        );
        let buffered = FileDevice::open(&b, RW_EXCLUSIVE).unwrap();
        assert_eq!(buffered.direct_alignment(), None);
        same_as_buffered(&direct, &buffered, 2);
        drop((direct, buffered));
        // What direct I/O wrote is what a plain read of the image finds.
        assert!(std::fs::read(&d).unwrap() == std::fs::read(&b).unwrap());
    }

    #[test]
    fn direct_io_on_block_devices_does_what_buffered_io_does() {
        for sector in [512u32, 4096] {
            let Some(lo) = LoopDevice::with_sector_size(4 << 20, sector) else {
                return;
            };
            let Some(dir) = direct_dir() else {
                return;
            };
            let mut rng = StdRng::seed_from_u64(u64::from(sector));
            let img = random_image(dir.dir.path(), "buffered.img", 4 << 20, &mut rng);
            let bytes = std::fs::read(&img).unwrap();
            {
                let plain = FileDevice::open(lo.path(), OpenMode::default()).unwrap();
                plain.write_at(&bytes, 0).unwrap();
                plain.flush().unwrap();
            }
            let direct = FileDevice::open(lo.path(), RW_DIRECT).unwrap();
            assert_eq!(direct.direct_alignment(), Some(u64::from(sector)));
            let buffered = FileDevice::open(&img, RW_EXCLUSIVE).unwrap();
            same_as_buffered(&direct, &buffered, 3);
        }
    }

    #[test]
    fn direct_io_where_the_file_system_refuses_it_is_an_error_naming_the_image() {
        let Some(ramfs) = Ramfs::new() else {
            return;
        };
        let path = ramfs.path().join("meta.img");
        std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
        let err = FileDevice::open(&path, RW_DIRECT).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::Unsupported);
        let text = err.to_string();
        assert!(text.contains(&*path.to_string_lossy()), "{text}");
        assert!(text.contains("O_DIRECT"), "{text}");
        // Nothing stays locked by the failed open.
        FileDevice::open(&path, RW_EXCLUSIVE).unwrap();
    }

    #[test]
    fn the_unaligned_tail_of_an_image_reads_but_is_not_written_directly() {
        let Some(dir) = direct_dir() else {
            return;
        };
        let mut rng = StdRng::seed_from_u64(4);
        let path = random_image(dir.dir.path(), "odd.img", 10_000, &mut rng);
        let bytes = std::fs::read(&path).unwrap();
        let dev = FileDevice::open(&path, RW_DIRECT).unwrap();
        let align = dev.direct_alignment().unwrap() as usize;
        let last_unit = 10_000 / align * align;
        let mut tail = vec![0u8; 10_000 - last_unit + 3];
        dev.read_at(&mut tail, last_unit as u64 - 3).unwrap();
        assert!(tail[..] == bytes[last_unit - 3..]);
        let err = dev.write_at(b"x", 9_999).unwrap_err();
        assert!(err.to_string().contains("direct I/O"), "{err}");
        // Up to the last whole unit it writes, and the image keeps its size.
        dev.write_at(b"abc", last_unit as u64 - 3).unwrap();
        drop(dev);
        let now = std::fs::read(&path).unwrap();
        assert_eq!(now.len(), 10_000);
        assert_eq!(&now[last_unit - 3..last_unit], b"abc");
    }
}
