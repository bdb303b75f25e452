//! diskmodel's parts: the time model of a disk (`model`, plain Rust, no FUSE and no real
//! time), the model run against the real clock so that requests wait for their simulated
//! completion (`live`), and the FUSE pass-through that sends every read and write of the
//! backing files through it (`serve`).

pub mod live;
pub mod model;
pub mod serve;
