//! The life of a daemon, for both programs that run as one: the mount (`dualfs mount`) and the
//! cleaner (`dualfs-cleaner`). Each detaches only once it is ready (`detach`), records itself
//! in a pid file named after its mount point (`pid_file`), and is told from a stale record by
//! the same liveness test. A mount or check that finds a device still held by a mount daemon
//! whose file system is gone waits for it (`unmounted`).

mod detach;
pub mod pid_file;
pub mod unmounted;

pub use detach::{detach, Detached, Startup};
pub use pid_file::{read_pid_file, remove_pid_file, write_pid_file, Daemon};
