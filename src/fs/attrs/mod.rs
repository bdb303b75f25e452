//! Attributes: getattr and setattr, inode flags, extended attributes and POSIX ACLs, and the
//! caller's privileges they are checked against.

pub mod acl;
pub(super) mod attr;
pub(super) mod flags;
pub(super) mod privileges;
#[cfg(test)]
mod tests;
pub(super) mod xattr;
