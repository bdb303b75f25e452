//! What DualFS's tests need from the machine, kept in one place and undone on drop, also when
//! a test panics: loop devices over image files (`LoopDevice`), and a ramfs (`Ramfs`) for
//! tests that need a file system refusing direct I/O.
//!
//! A crate of its own, a dev-dependency of the packages whose tests use it, so that the
//! library carries no test code and every test binary shares one implementation.

mod loop_device;
mod ramfs;

pub use loop_device::LoopDevice;
pub use ramfs::Ramfs;
