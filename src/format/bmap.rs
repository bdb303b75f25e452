//! Geometry of the block map (ext2-style direct + single/double/triple indirect pointers):
//! which indirect blocks lead to file block `n`, and how each is named.

use super::inode::NDIRECT;

/// Bit 63 of a data pointer (`i_direct[k]` and the slots of a regular file's level-1
/// indirect blocks): the block is allocated (by fallocate) but holds nothing written since,
/// and reads as zeros. The address is in the other bits; data addresses are below 2^48.
pub const UNWRITTEN: u64 = 1 << 63;

/// A data pointer taken apart. `addr` is only checked against the device by the callers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPtr {
    Hole,
    Written(u64),
    Unwritten(u64),
}

impl DataPtr {
    pub fn decode(raw: u64) -> DataPtr {
        match raw {
            0 => DataPtr::Hole,
            r if r & UNWRITTEN != 0 => DataPtr::Unwritten(r & !UNWRITTEN),
            r => DataPtr::Written(r),
        }
    }

    /// The data block it names, if any.
    pub fn addr(self) -> Option<u64> {
        match self {
            DataPtr::Hole => None,
            DataPtr::Written(a) | DataPtr::Unwritten(a) => Some(a),
        }
    }

    /// Reads give what the device holds (not zeros).
    pub fn is_written(self) -> bool {
        matches!(self, DataPtr::Written(_))
    }
}

/// The pointer of an unwritten block at data address `addr`.
pub fn unwritten(addr: u64) -> u64 {
    debug_assert!(addr != 0 && addr & UNWRITTEN == 0);
    addr | UNWRITTEN
}

/// One step of a path: the indirect block (`level`, `index` = first file block it maps) and
/// the slot in it to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Step {
    pub level: u8,
    pub index: u64,
    pub slot: usize,
}

/// Where file block `n` is found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockPath {
    /// `i_direct[k]`.
    Direct(usize),
    /// Through `i_indirect[tree]` (0 single, 1 double, 2 triple); steps from the top block down
    /// to the level-1 block whose slot holds the data address.
    Indirect { tree: usize, steps: Vec<Step> },
}

/// Number of file blocks mapped by one block of `level` (1 = points at data).
pub fn span(level: u8, p: u64) -> u64 {
    p.pow(level as u32)
}

/// First file block mapped by each of the three trees, and one past the last.
pub fn tree_start(tree: usize, p: u64) -> u64 {
    let mut s = NDIRECT as u64;
    for t in 0..tree {
        s += span(t as u8 + 1, p);
    }
    s
}

/// Largest number of blocks a file can have.
pub fn max_blocks(p: u64) -> u64 {
    tree_start(3, p)
}

/// The path to file block `n`, or None past the largest file.
pub fn path(n: u64, p: u64) -> Option<BlockPath> {
    if n < NDIRECT as u64 {
        return Some(BlockPath::Direct(n as usize));
    }
    for tree in 0..3 {
        let start = tree_start(tree, p);
        let levels = tree as u8 + 1;
        if n < start + span(levels, p) {
            let mut steps = Vec::with_capacity(levels as usize);
            let mut base = start;
            for level in (1..=levels).rev() {
                let child_span = span(level - 1, p);
                let slot = ((n - base) / child_span) as usize;
                steps.push(Step {
                    level,
                    index: base,
                    slot,
                });
                base += slot as u64 * child_span;
            }
            return Some(BlockPath::Indirect { tree, steps });
        }
    }
    None
}

/// The first file block mapped by slot `slot` of indirect block (`level`, `index`).
pub fn child_index(level: u8, index: u64, slot: usize, p: u64) -> u64 {
    index + slot as u64 * span(level - 1, p)
}

/// The indirect blocks on the paths to file blocks `first..=last`: all a change of those
/// blocks' mapping can dirty (each at most once, however many of its slots change).
pub fn indirect_blocks_over(first: u64, last: u64, p: u64) -> u64 {
    let mut n = 0;
    for tree in 0..3 {
        let (start, end) = (tree_start(tree, p), tree_start(tree + 1, p));
        let (lo, hi) = (first.max(start), last.min(end - 1));
        if lo > hi {
            continue;
        }
        // At each level, the blocks whose spans the range meets.
        for level in 1..=tree as u8 + 1 {
            let s = span(level, p);
            n += (hi - start) / s - (lo - start) / s + 1;
        }
    }
    n
}

/// What points at indirect block (`level`, `index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parent {
    /// `i_indirect[tree]` of the inode.
    Inode { tree: usize },
    /// Slot `slot` of indirect block (`level`, `index`).
    Block { level: u8, index: u64, slot: usize },
}

/// The parent of indirect block (`level`, `index`).
pub fn parent(level: u8, index: u64, p: u64) -> Parent {
    let tree = (0..3)
        .find(|&t| index < tree_start(t + 1, p))
        .expect("indirect block beyond the largest file");
    if level as usize == tree + 1 {
        return Parent::Inode { tree };
    }
    let base = tree_start(tree, p);
    let pspan = span(level + 1, p);
    let pindex = base + (index - base) / pspan * pspan;
    Parent::Block {
        level: level + 1,
        index: pindex,
        slot: ((index - pindex) / span(level, p)) as usize,
    }
}

/// Where a block pointer of a regular file (or symlink) sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PtrAt {
    /// `i_direct[k]`.
    Direct(usize),
    /// `i_indirect[tree]` (0 single, 1 double, 2 triple).
    Top(usize),
    /// Slot `slot` of the indirect block (`level`, `index`) of the file.
    Slot { level: u8, index: u64, slot: usize },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The indirect blocks on the paths of `first..=last`, one block at a time.
    fn walked(first: u64, last: u64, p: u64) -> u64 {
        let mut seen = std::collections::BTreeSet::new();
        for n in first..=last {
            if let Some(BlockPath::Indirect { steps, .. }) = path(n, p) {
                seen.extend(steps.iter().map(|s| (s.level, s.index)));
            }
        }
        seen.len() as u64
    }

    #[test]
    fn the_indirect_blocks_over_a_range_are_those_on_its_paths() {
        let p = 8;
        let end = max_blocks(p);
        for first in 0..end {
            for last in (first..end).step_by(3).chain([end - 1]) {
                assert_eq!(
                    indirect_blocks_over(first, last, p),
                    walked(first, last, p),
                    "{first}..={last}"
                );
            }
        }
        // 4 KiB blocks: a file of up to 2 MiB has one, its first byte beyond that three.
        let p = 512;
        assert_eq!(indirect_blocks_over(0, 11, p), 0);
        assert_eq!(indirect_blocks_over(12, 63, p), 1);
        assert_eq!(indirect_blocks_over(0, 12 + 512, p), 3);
        assert_eq!(indirect_blocks_over(600, 600, p), 2);
    }

    #[test]
    fn paths() {
        let p = 508;
        assert_eq!(path(11, p), Some(BlockPath::Direct(11)));
        assert_eq!(
            path(12, p),
            Some(BlockPath::Indirect {
                tree: 0,
                steps: vec![Step {
                    level: 1,
                    index: 12,
                    slot: 0
                }]
            })
        );
        assert_eq!(
            path(12 + 508 + 509, p),
            Some(BlockPath::Indirect {
                tree: 1,
                steps: vec![
                    Step {
                        level: 2,
                        index: 520,
                        slot: 1
                    },
                    Step {
                        level: 1,
                        index: 520 + 508,
                        slot: 1
                    }
                ]
            })
        );
        let last = max_blocks(p) - 1;
        match path(last, p).unwrap() {
            BlockPath::Indirect { tree: 2, steps } => {
                assert_eq!(steps.len(), 3);
                assert!(steps.iter().all(|s| s.slot == 507));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(path(last + 1, p), None);
        assert_eq!(max_blocks(508), 131_355_096);
    }

    #[test]
    fn steps_are_consistent() {
        let p = 8;
        for n in 0..max_blocks(p) {
            if let Some(BlockPath::Indirect { steps, .. }) = path(n, p) {
                for w in steps.windows(2) {
                    assert_eq!(
                        child_index(w[0].level, w[0].index, w[0].slot, p),
                        w[1].index
                    );
                }
                for (i, s) in steps.iter().enumerate() {
                    let want = if i == 0 {
                        Parent::Inode {
                            tree: steps.len() - 1,
                        }
                    } else {
                        Parent::Block {
                            level: steps[i - 1].level,
                            index: steps[i - 1].index,
                            slot: steps[i - 1].slot,
                        }
                    };
                    assert_eq!(parent(s.level, s.index, p), want);
                }
                let l = steps.last().unwrap();
                assert_eq!(l.level, 1);
                assert_eq!(l.index + l.slot as u64, n);
            }
        }
    }
}
