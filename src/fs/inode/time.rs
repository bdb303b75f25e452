//! Inode times in memory and on disk.

use crate::format::inode::DiskTime;
use crate::fs::types::Timespec;

pub fn to_disk_time(t: Timespec) -> DiskTime {
    DiskTime {
        sec: t.sec,
        nsec: t.nsec,
    }
}

pub fn from_disk_time(t: DiskTime) -> Timespec {
    Timespec {
        sec: t.sec,
        nsec: t.nsec,
    }
}
