//! Tests of data allocation, the data cache and fallocate through `Fs` (no FUSE).

mod alloc;
mod data_cache;
mod falloc;
