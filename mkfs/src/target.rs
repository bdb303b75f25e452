//! What each device path on the command line is, and what has to happen to it before
//! formatting (create or resize an image). Looking writes nothing.

use crate::size::human_size;
use dualfs::device::{BlockDevice, DeviceKind, FileDevice, OpenMode};
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One of the two devices to format.
pub struct Target {
    /// "metadata" or "data", for messages.
    pub role: &'static str,
    /// The path as given.
    pub path: PathBuf,
    /// Absolute path with symlinks resolved (of the parent, for an image not yet created).
    pub absolute: PathBuf,
    pub preparation: Preparation,
    /// Size in bytes once prepared.
    pub size: u64,
    /// Identity of the storage, to tell whether both paths name the same thing.
    identity: Identity,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Preparation {
    /// An existing block device or image file used as it is.
    None,
    /// An image file to create (sparse) at `size`.
    Create,
    /// An existing image file to grow (or, forced, shrink) from this size to `size`.
    Resize { from: u64 },
}

#[derive(PartialEq, Eq)]
enum Identity {
    BlockDevice { rdev: u64 },
    File { dev: u64, ino: u64 },
    NotYetCreated,
}

impl Target {
    /// Look at `path`. `requested` is the size given on the command line (`option` names it
    /// in messages); shrinking an image needs `force`.
    pub fn inspect(
        role: &'static str,
        path: &Path,
        option: &str,
        requested: Option<u64>,
        force: bool,
    ) -> Result<Target, String> {
        let shown = path.display();
        let metadata = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Self::new_image(role, path, option, requested);
            }
            Err(e) => return Err(format!("cannot access {shown}: {e}")),
        };
        let kind = DeviceKind::of(metadata.file_type())
            .map_err(|what| format!("{shown} is {what}; give an image file or a block device"))?;
        let absolute = std::fs::canonicalize(path)
            .map_err(|e| format!("cannot resolve the path {shown}: {e}"))?;

        if kind == DeviceKind::BlockDevice {
            if requested.is_some() {
                return Err(format!(
                    "{shown} is a block device, whose size is fixed; drop {option}"
                ));
            }
            let device = FileDevice::open(path, OpenMode::default()).map_err(|e| e.to_string())?;
            return Ok(Target {
                role,
                path: path.to_path_buf(),
                absolute,
                preparation: Preparation::None,
                size: device.size(),
                identity: Identity::BlockDevice {
                    rdev: metadata.rdev(),
                },
            });
        }

        let current = metadata.len();
        let (preparation, size) = match requested {
            Some(size) if size < current && !force => {
                return Err(format!(
                    "{shown} is {} and {option} {} would shrink it, losing what lies past \
                     the new end; use --force to shrink it",
                    human_size(current),
                    human_size(size)
                ));
            }
            Some(size) if size != current => (Preparation::Resize { from: current }, size),
            _ => (Preparation::None, current),
        };
        Ok(Target {
            role,
            path: path.to_path_buf(),
            absolute,
            preparation,
            size,
            identity: Identity::File {
                dev: metadata.dev(),
                ino: metadata.ino(),
            },
        })
    }

    fn new_image(
        role: &'static str,
        path: &Path,
        option: &str,
        requested: Option<u64>,
    ) -> Result<Target, String> {
        let shown = path.display();
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(format!(
                "{shown} is a symbolic link to nothing; remove it or name its target"
            ));
        }
        let Some(size) = requested else {
            return Err(format!(
                "{shown} does not exist; give {option} SIZE to create an image file"
            ));
        };
        let name = path
            .file_name()
            .ok_or_else(|| format!("{shown} does not name a file"))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let parent = std::fs::canonicalize(parent)
            .map_err(|e| format!("cannot create {shown}: {}: {e}", parent.display()))?;
        Ok(Target {
            role,
            path: path.to_path_buf(),
            absolute: parent.join(name),
            preparation: Preparation::Create,
            size,
            identity: Identity::NotYetCreated,
        })
    }

    /// Do both targets name the same storage (the same file or device, through any path)?
    pub fn same_storage(&self, other: &Target) -> bool {
        match (&self.identity, &other.identity) {
            (Identity::NotYetCreated, Identity::NotYetCreated) => self.absolute == other.absolute,
            (a, b) => a == b,
        }
    }

    /// "device", "file" or "path": what the target is, for messages.
    pub fn noun(&self) -> &'static str {
        match self.identity {
            Identity::BlockDevice { .. } => "device",
            Identity::File { .. } => "file",
            Identity::NotYetCreated => "path",
        }
    }

    pub fn exists(&self) -> bool {
        self.preparation != Preparation::Create
    }

    /// Create or resize the image file as planned.
    pub fn prepare(&self) -> Result<(), String> {
        let shown = self.path.display();
        let file = match self.preparation {
            Preparation::None => return Ok(()),
            Preparation::Create => OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&self.path)
                .map_err(|e| format!("cannot create {shown}: {e}"))?,
            Preparation::Resize { .. } => OpenOptions::new()
                .write(true)
                .open(&self.path)
                .map_err(|e| format!("cannot open {shown}: {e}"))?,
        };
        // set_len makes a sparse file: nothing is written until mkfs writes.
        file.set_len(self.size)
            .map_err(|e| format!("cannot set the size of {shown}: {e}"))
    }

    /// Undo `prepare` after a failure, where that is safe: remove an image we created.
    pub fn undo_prepare(&self) {
        if self.preparation == Preparation::Create {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// What `prepare` would do, for a dry run.
    pub fn describe_preparation(&self) -> Option<String> {
        let shown = self.path.display();
        match self.preparation {
            Preparation::None => None,
            Preparation::Create => Some(format!(
                "create image file {shown} of {} (sparse)",
                human_size(self.size)
            )),
            Preparation::Resize { from } => Some(format!(
                "{} image file {shown} from {} to {}",
                if self.size > from { "extend" } else { "shrink" },
                human_size(from),
                human_size(self.size)
            )),
        }
    }
}
