use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A loop block device over an image file: detached on drop (and the ext4 made on it
/// unmounted), so that a failing test leaves no device behind.
pub struct LoopDevice {
    path: PathBuf,
    image: Image,
    mount_point: Option<tempfile::TempDir>,
}

enum Image {
    /// A temporary image made for the device, removed after it is detached.
    Own(tempfile::NamedTempFile),
    /// The caller's file.
    Given(PathBuf),
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
                image: Image::Own(image),
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

    /// A loop device over the existing file `image`; panics when it cannot be made (for
    /// tests that must fail, not skip, without one).
    pub fn attach(image: &Path) -> LoopDevice {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(image)
            .output()
            .unwrap_or_else(|e| panic!("cannot run losetup: {e}"));
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && printed.starts_with("/dev/loop"),
            "losetup -f --show {} failed ({}): {printed}{}",
            image.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        LoopDevice {
            path: PathBuf::from(printed.trim()),
            image: Image::Given(image.to_path_buf()),
            mount_point: None,
        }
    }

    /// The device node, `/dev/loopN`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The image file behind the device.
    pub fn image_path(&self) -> &Path {
        match &self.image {
            Image::Own(file) => file.path(),
            Image::Given(path) => path,
        }
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
        // A device closed a moment ago (a daemon that just exited, an unmount) can still be
        // busy for a while: retry for up to 5 s.
        for _ in 0..50 {
            let detached = Command::new("losetup").arg("-d").arg(&self.path).status();
            if detached.is_ok_and(|s| s.success()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("LoopDevice: could not detach {}", self.path.display());
    }
}
