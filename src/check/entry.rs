//! The directory entry as the checker lists it. Its own room because both the tree pass
//! (`pass6_tree`) and the salvage of a damaged tree (`salvage`, which the tree pass calls)
//! make entries.

/// A directory entry: key (`dir`, `hash`, `name`), value (`ino`, `kind`: type code).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    pub dir: u64,
    pub hash: u64,
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: u8,
}
