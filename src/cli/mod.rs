//! The pieces of the `dualfs` program (not part of the library).

pub mod control_server;
pub mod data_path;
pub mod device;
pub mod error;
pub mod fusermount;
pub mod helper;
pub mod info;
pub mod kernel_mount;
pub mod logging;
pub mod mount;
pub mod mount_args;
pub mod options;
pub mod remount;
pub mod shutdown;
pub mod supervisor;
pub mod sync;
pub mod tune;
pub mod umount;
pub mod umount_helper;
pub mod utab;
