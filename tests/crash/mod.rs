//! The crash-state harness (issue 3): workloads run on two recording devices that share one
//! clock; crash states are built from the record and each is mounted (recovery), unmounted,
//! checked, mounted again and compared with a model of the tree. See `tests/crash_states.rs`.

#![allow(dead_code)]

pub mod model;
pub mod ops;
pub mod run;
pub mod workloads;
