//! DualFS: a file system whose metadata lives in a log on one device (BSD-LFS style, with an
//! IFile, checkpoints and roll-forward) and whose file data lives in ext2-like block groups on
//! another. Directories are indexed by one B-epsilon tree whose nodes live in the log.
//!
//! The core is a plain, thread-safe Rust API (`fs::Fs`); the FUSE adapter (`fuse`) and the
//! command-line tools are thin shells over it.

pub mod betree;
pub mod check;
pub mod control_protocol;
pub mod daemon;
pub mod device;
pub mod error;
pub mod format;
pub mod fs;
pub mod fuse;
pub mod intent;
pub mod ioctl;
pub mod lockcheck;
pub mod log;
pub mod man_pages;
pub mod meta;
pub mod mkfs;
pub mod mountinfo;
pub mod output;
pub mod run_dir;
pub mod session;
pub mod superblock_change;

pub use error::{FsError, Result};
