use std::path::Path;

/// A ramfs mounted on a temporary directory (it refuses O_DIRECT), unmounted on drop.
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
