//! A device that can be cut off at once, as by a power failure: after `cut` returns, no write
//! or flush reaches the device below (they fail with EIO); writes already under way finish
//! first, so what is on the device is exactly what was written before the cut. Reads go on.
//! This is how FS_IOC_SHUTDOWN stops a mount (`Fs::shutdown`).
//!
//! Every device access of a mounted file system passes here, so this is also where the lock
//! discipline is checked: no access while the thread holds a lock that lookups, getattr and
//! reads need (`crate::lockcheck`).

use super::BlockDevice;
use crate::lockcheck::{Rank, RwLock};
use std::io;
use std::sync::Arc;

pub struct Fence {
    inner: Arc<dyn BlockDevice>,
    /// Set by `cut`; writes hold it shared while they run, so `cut` waits for them. Held
    /// across the I/O by design (ranked last, `Rank::FENCE`: nothing is taken under it).
    cut: RwLock<bool>,
}

impl Fence {
    pub fn new(inner: Arc<dyn BlockDevice>) -> Fence {
        Fence {
            inner,
            cut: RwLock::across_io("fence cut", Rank::FENCE, false),
        }
    }

    /// Let nothing more through; returns once the writes under way have finished.
    pub fn cut(&self) {
        *self.cut.write() = true;
    }

    pub fn is_cut(&self) -> bool {
        *self.cut.read()
    }

    fn pass<T>(&self, f: impl FnOnce(&dyn BlockDevice) -> io::Result<T>) -> io::Result<T> {
        let cut = self.cut.read();
        if *cut {
            return Err(io::Error::other("the file system was shut down"));
        }
        f(&*self.inner)
    }
}

impl BlockDevice for Fence {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        crate::lockcheck::assert_no_io_locks("device read");
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        crate::lockcheck::assert_no_io_locks("device write");
        self.pass(|d| d.write_at(buf, offset))
    }
    fn flush(&self) -> io::Result<()> {
        crate::lockcheck::assert_no_io_locks("device flush");
        self.pass(|d| d.flush())
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn nothing_passes_a_cut_fence() {
        let mem = Arc::new(MemDevice::new(8192));
        let f = Fence::new(mem.clone());
        f.write_at(b"before", 0).unwrap();
        f.cut();
        assert!(f.is_cut());
        assert!(f.write_at(b"after!", 0).is_err());
        assert!(f.flush().is_err());
        let mut buf = [0u8; 6];
        f.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"before");
        mem.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"before");
    }
}
