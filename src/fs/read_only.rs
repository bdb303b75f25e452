//! Turning a mounted file system read-only and back, as a remount does for a kernel file
//! system: everything is written first, with a clean checkpoint, so that the devices then hold
//! a complete, consistent file system that nothing changes (an image copied now mounts without
//! recovery).
//!
//! While read-only, every change fails with EROFS (`writable`), no access time is updated,
//! the log writer and checkpoints write nothing, the cleaner thread is stopped, and a removed
//! file closed for the last time stays an orphan, freed when the file system is read-write
//! again (at its next mount, if it is unmounted before that).

use super::Fs;
use crate::{FsError, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Fs {
    /// Is nothing written now: mounted read-only, or turned so by `set_read_only`?
    pub fn is_read_only(&self) -> bool {
        self.opts.read_only || self.remounted_read_only.load(Ordering::Acquire)
    }

    /// Turn a read-write mount read-only (everything written, a clean checkpoint, both devices
    /// flushed, then nothing more), or back to read-write. A file system mounted read-only has
    /// its devices open read-only: it cannot turn read-write (EROFS). The caller must not
    /// make two calls at once. The caller also keeps changes from arriving meanwhile (a
    /// remount: the kernel refuses one while files are open for writing).
    pub fn set_read_only(self: &Arc<Fs>, read_only: bool) -> Result<()> {
        if self.opts.read_only {
            return if read_only {
                Ok(())
            } else {
                Err(FsError::Errno(libc::EROFS))
            };
        }
        self.alive()?;
        if !read_only {
            if self.remounted_read_only.swap(false, Ordering::AcqRel) {
                self.restart_cleaner()?;
            }
            return Ok(());
        }
        if self.is_read_only() {
            return Ok(());
        }
        // A pass in progress ends first: the checkpoint comes after it.
        self.stop_cleaner();
        let written = (|| {
            // Cached data reaches the device first, as at unmount.
            self.writeback_all()?;
            // Reserved but unused data blocks go back, as at unmount (memory only).
            for e in self.ns.inodes.all() {
                self.alloc.return_window(&e, &mut e.state.write());
            }
            {
                let mut fl = self.log.flusher();
                self.checkpoint_locked(&mut fl, true)?;
                // Before the flush lock goes: no log write may come after the checkpoint.
                self.remounted_read_only.store(true, Ordering::Release);
            }
            self.log.dev().flush()?;
            self.alloc.dev().flush()?;
            Ok(())
        })();
        if let Err(e) = written {
            // As it was: read-write (a failed write has made every later one fail anyway).
            self.remounted_read_only.store(false, Ordering::Release);
            self.restart_cleaner()?;
            return Err(e);
        }
        log::info!("turned read-only: clean checkpoint written, nothing more is written");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{devices, mount, ROOT, U};
    use super::*;
    use crate::device::{BlockDevice, MemDevice};

    fn bytes(dev: &Arc<dyn BlockDevice>) -> Vec<u8> {
        let mut all = vec![0u8; dev.size() as usize];
        dev.read_at(&mut all, 0).unwrap();
        all
    }

    #[test]
    fn read_only_writes_nothing_until_read_write_again() {
        let (m, d) = devices(32, 64);
        let fs = mount(&m, &d);
        let (f, fh) = fs
            .create(&U, ROOT, b"before", 0o644, libc::O_WRONLY)
            .unwrap();
        fs.write(f.ino, fh, 0, b"written before").unwrap();
        fs.release(f.ino, fh).unwrap();
        fs.set_read_only(true).unwrap();
        assert!(fs.is_read_only());
        let (meta, data) = (bytes(&m), bytes(&d));
        // Everything is on the devices already: a copy mounts as cleanly unmounted.
        let copy: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(meta.clone()));
        let copied = Fs::mount(copy, Arc::new(MemDevice::from_bytes(data.clone())), {
            crate::fs::MountOptions {
                read_only: true,
                ..Default::default()
            }
        })
        .unwrap();
        let recovery = copied.recovery();
        assert!(recovery.checkpoint_clean && recovery.report.transactions == 0);
        assert!(copied.lookup(ROOT, b"before").is_ok());

        let erofs = |r: Result<()>| assert!(matches!(r, Err(FsError::Errno(libc::EROFS))), "{r:?}");
        erofs(fs.mkdir(&U, ROOT, b"dir", 0o755).map(|_| ()));
        erofs(fs.unlink(&U, ROOT, b"before"));
        erofs(fs.sync());
        let fh = fs.open(&U, f.ino, libc::O_RDONLY).unwrap();
        assert_eq!(fs.read(f.ino, fh, 0, 100).unwrap(), b"written before");
        fs.release(f.ino, fh).unwrap();
        fs.fsync(f.ino, false).unwrap();
        fs.set_read_only(true).unwrap();
        assert!(
            bytes(&m) == meta && bytes(&d) == data,
            "a read-only file system wrote"
        );

        fs.set_read_only(false).unwrap();
        assert!(!fs.is_read_only());
        fs.mkdir(&U, ROOT, b"after", 0o755).unwrap();
        fs.unmount().unwrap();
        let fs = mount(&m, &d);
        assert!(fs.lookup(ROOT, b"before").is_ok() && fs.lookup(ROOT, b"after").is_ok());
        fs.unmount().unwrap();
    }

    #[test]
    fn unmounted_while_read_only_it_is_clean_and_unchanged() {
        let (m, d) = devices(16, 16);
        let fs = mount(&m, &d);
        fs.mkdir(&U, ROOT, b"dir", 0o755).unwrap();
        fs.set_read_only(true).unwrap();
        let meta = bytes(&m);
        fs.unmount().unwrap();
        assert!(
            bytes(&m) == meta,
            "unmount wrote to a read-only file system"
        );
        let fs = mount(&m, &d);
        assert!(fs.recovery().checkpoint_clean);
        assert!(fs.lookup(ROOT, b"dir").is_ok());
        fs.unmount().unwrap();
    }

    #[test]
    fn mounted_read_only_it_stays_so() {
        let (m, d) = devices(16, 16);
        let opts = crate::fs::MountOptions {
            read_only: true,
            ..Default::default()
        };
        let fs = Fs::mount(m.clone(), d.clone(), opts).unwrap();
        fs.set_read_only(true).unwrap();
        assert!(matches!(
            fs.set_read_only(false),
            Err(FsError::Errno(libc::EROFS))
        ));
        fs.unmount().unwrap();
    }
}
