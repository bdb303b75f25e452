//! Attributes: getattr and setattr, inode flags, extended attributes and POSIX ACLs, and the
//! caller's privileges they are checked against.

pub mod acl;
pub(super) mod attr;
pub(super) mod flags;
#[cfg(test)]
mod flags_tests;
pub(super) mod privileges;
pub(super) mod xattr;
