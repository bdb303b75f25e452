//! The cleaner as the programs see it: the policies and thresholds (which live in the core,
//! `fs::clean::policy`, re-exported here) and the control protocol the `dualfs-cleaner`
//! daemon and `dualfs` speak with a mount (`control`; the mount's server is in the `dualfs`
//! program, cli/control_server.rs).

pub mod control;

pub use crate::fs::clean::policy::*;
