//! Storage behind a trait, so tests can record writes, cut power and inject errors.
//!
//! Devices are byte-addressed: the metadata side reads and writes whole blocks, the data side
//! may write part of a block. Durability is only promised for writes followed by `flush`.

use std::io;

pub mod direct;
pub mod fence;
pub mod file;
pub mod memory;
pub mod probe;
pub mod readahead;
pub mod recording;

pub use file::{DeviceIo, DeviceKind, FileDevice, OpenMode};
pub use memory::MemDevice;
pub use probe::{is_mounted, probe_existing};
pub use recording::{RecordedWrite, RecordingDevice, SeqClock, WriteSubset};

pub trait BlockDevice: Send + Sync {
    /// Size of the device in bytes.
    fn size(&self) -> u64;
    /// Fill `buf` from `offset`. Reading past the end is an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Write all of `buf` at `offset`. Writing past the end is an error.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Make every completed write durable (fdatasync / a cache flush).
    fn flush(&self) -> io::Result<()>;
    /// A short human description (path) for messages.
    fn describe(&self) -> String {
        String::from("device")
    }
}

/// Reject accesses outside `[0, size)`.
pub fn check_range(size: u64, offset: u64, len: usize) -> io::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("access {offset}+{len} past device end {size}"),
        )),
    }
}
