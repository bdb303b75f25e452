//! A device in memory, for unit tests and the crash harness.

use super::{check_range, BlockDevice};
use parking_lot::RwLock;
use std::io;

pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
}

impl MemDevice {
    pub fn new(size: u64) -> Self {
        MemDevice {
            bytes: RwLock::new(vec![0; size as usize]),
        }
    }
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        MemDevice {
            bytes: RwLock::new(bytes),
        }
    }
    /// A copy of the whole device.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().clone()
    }
}

impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.bytes.read().len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let b = self.bytes.read();
        check_range(b.len() as u64, offset, buf.len())?;
        buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut b = self.bytes.write();
        check_range(b.len() as u64, offset, buf.len())?;
        b[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}
