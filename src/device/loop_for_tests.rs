//! Loop devices over temporary images, for tests that need a real block device, and a
//! ramfs, for tests that need a file system that refuses direct I/O. They are detached (and
//! unmounted) on drop, also when a test panics.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct LoopDevice {
    path: PathBuf,
    image: tempfile::NamedTempFile,
    mount_point: Option<tempfile::TempDir>,
}

impl LoopDevice {
    /// A loop device over a fresh sparse image of `len` bytes, or None (with a note) when
    /// loop devices cannot be made here: not root, or no losetup.
    pub fn new(len: u64) -> Option<LoopDevice> {
        Self::with_sector_size(len, 512)
    }

    /// The same with a logical block (sector) size of `sector` bytes.
    pub fn with_sector_size(len: u64, sector: u32) -> Option<LoopDevice> {
        let image = tempfile::NamedTempFile::new().ok()?;
        image.as_file().set_len(len).ok()?;
        let out = Command::new("losetup")
            .args(["-f", "--show", "--sector-size", &sector.to_string()])
            .arg(image.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Some(LoopDevice {
                path: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
                image,
                mount_point: None,
            }),
            Ok(out) => {
                let why = String::from_utf8_lossy(&out.stderr);
                eprintln!("skipping: losetup failed: {why}");
                None
            }
            Err(e) => {
                eprintln!("skipping: cannot run losetup: {e}");
                None
            }
        }
    }

    /// The device node, `/dev/loopN`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The image file behind the device.
    pub fn image_path(&self) -> &Path {
        self.image.path()
    }

    /// Make an ext4 file system on the device and mount it on a temporary directory; None
    /// (with a note) when mkfs.ext4 or mount are not available.
    pub fn mount_ext4(&mut self) -> Option<PathBuf> {
        let made = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&self.path)
            .status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipping: mkfs.ext4 failed or is missing");
            return None;
        }
        let dir = tempfile::tempdir().ok()?;
        let mounted = Command::new("mount")
            .arg(&self.path)
            .arg(dir.path())
            .status();
        if !mounted.is_ok_and(|s| s.success()) {
            eprintln!("skipping: mount failed");
            return None;
        }
        let path = dir.path().to_path_buf();
        self.mount_point = Some(dir);
        Some(path)
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if let Some(dir) = &self.mount_point {
            let _ = Command::new("umount").arg(dir.path()).status();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}

/// A ramfs mounted on a temporary folder (it refuses O_DIRECT), unmounted on drop.
pub struct Ramfs {
    dir: tempfile::TempDir,
}

impl Ramfs {
    /// None (with a note) when it cannot be mounted here (not root).
    pub fn new() -> Option<Ramfs> {
        let dir = tempfile::tempdir().ok()?;
        let mounted = nix::mount::mount(
            Some("ramfs"),
            dir.path(),
            Some("ramfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        );
        match mounted {
            Ok(()) => Some(Ramfs { dir }),
            Err(e) => {
                eprintln!("skipping: cannot mount a ramfs: {e}");
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}
