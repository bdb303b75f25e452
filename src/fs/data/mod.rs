//! File data: data allocation (`DataAlloc`: the data device, its bitmaps, the reservation
//! windows), delayed allocation (`DataCache`) and the operations on file contents: read,
//! write, truncate, fallocate, seek, copy_file_range.

pub(super) mod alloc;
pub(super) mod copy;
pub(super) mod data_cache;
pub(super) mod fallocate;
pub(super) mod file;
pub(super) mod seek;

#[cfg(test)]
mod tests;
