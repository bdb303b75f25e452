//! A file's block map in memory: finding, adding and freeing data-block pointers through the
//! cached indirect blocks of an inode (the geometry is `format::bmap`).
//!
//! Functions here work on an `InodeState` under its lock and never do I/O: when a needed
//! indirect block is not cached they answer `Need` with what to read, and the caller reads it
//! without locks (`Fs::load_ptr`) and tries again.

use crate::format::bmap::{self, BlockPath, DataPtr, Parent, Step};
use crate::fs::inode::{InodeState, PtrMap};
use std::sync::Arc;

/// Mark the cached indirect block (`level`, `index`) dirty, and every block above it: a
/// rewritten block moves, so each block on its way up must be rewritten to point at it. Done
/// here, where blocks change, so that every dirty block's parent is dirty and the log writer
/// does not walk up under the gate (docs/DESIGN.md, "Transactions"; it asserts the rule).
pub fn mark_block_dirty(ptrs: &mut PtrMap, mut level: u8, mut index: u64, p: u64) {
    loop {
        ptrs.mark_dirty((level, index));
        match bmap::parent(level, index, p) {
            Parent::Block {
                level: pl,
                index: pi,
                ..
            } => (level, index) = (pl, pi),
            Parent::Inode { .. } => return,
        }
    }
}

/// An indirect block that must be read first: its key and log address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub level: u8,
    pub index: u64,
    pub addr: u64,
}

/// Data address of file block `n` (0 = hole), or the indirect block to load first.
pub fn lookup(st: &InodeState, n: u64, p: u64) -> Result<u64, Need> {
    match bmap::path(n, p) {
        None => Ok(0),
        Some(BlockPath::Direct(k)) => Ok(st.d.direct[k]),
        Some(BlockPath::Indirect { tree, steps }) => {
            let mut addr = st.d.indirect[tree];
            for s in steps {
                match st.ptrs.get(&(s.level, s.index)) {
                    Some(b) => addr = b.ptrs[s.slot],
                    None if addr == 0 => return Ok(0),
                    None => {
                        return Err(Need {
                            level: s.level,
                            index: s.index,
                            addr,
                        })
                    }
                }
            }
            Ok(addr)
        }
    }
}

/// Set the data address of file block `n` (0 clears it); creates missing indirect blocks.
/// Returns the previous address. Fails with `Need` when an existing indirect block on the path
/// is not cached (nothing is changed then).
pub fn set(st: &mut InodeState, n: u64, data_addr: u64, p: u64) -> Result<u64, Need> {
    match bmap::path(n, p) {
        None => panic!("block {n} beyond the largest file; callers check the size limit"),
        Some(BlockPath::Direct(k)) => Ok(std::mem::replace(&mut st.d.direct[k], data_addr)),
        Some(BlockPath::Indirect { tree, steps }) => {
            // First make sure every existing block on the path is cached.
            let mut addr = st.d.indirect[tree];
            for s in &steps {
                match st.ptrs.get(&(s.level, s.index)) {
                    Some(b) => addr = b.ptrs[s.slot],
                    None if addr == 0 => break,
                    None => {
                        return Err(Need {
                            level: s.level,
                            index: s.index,
                            addr,
                        })
                    }
                }
            }
            for s in &steps {
                if !st.ptrs.contains_key(&(s.level, s.index)) {
                    if data_addr == 0 {
                        return Ok(0); // clearing a hole: nothing to do
                    }
                    // Dirty with the whole path, below.
                    st.ptrs.insert_new((s.level, s.index), p);
                    st.d.meta_blocks += 1;
                }
            }
            let last: Step = *steps.last().unwrap();
            mark_block_dirty(&mut st.ptrs, last.level, last.index, p);
            let b = st.ptrs.get_mut(&(last.level, last.index)).unwrap();
            Ok(std::mem::replace(
                &mut Arc::make_mut(&mut b.ptrs)[last.slot],
                data_addr,
            ))
        }
    }
}

/// Point the holes at file blocks `first..first + ptrs.len()` at `ptrs` (nonzero), creating
/// missing indirect blocks: `set` for the first block under each level-1 block, then its
/// slots in place (a preallocation of gigabytes sets millions of them). Fails with `Need` as
/// `set` does (the blocks set before stay set).
pub fn set_run(st: &mut InodeState, first: u64, ptrs: &[u64], p: u64) -> Result<(), Need> {
    let mut i = 0;
    while i < ptrs.len() {
        let n = first + i as u64;
        let old = set(st, n, ptrs[i], p)?;
        debug_assert_eq!(old, 0, "file block {n} is no hole");
        i += 1;
        if let Some(BlockPath::Indirect { steps, .. }) = bmap::path(n, p) {
            let last = steps[steps.len() - 1];
            let b = st.ptrs.get_mut(&(1, last.index)).expect("set made it");
            let slots = Arc::make_mut(&mut b.ptrs);
            let end = (p as usize).min(last.slot + 1 + ptrs.len() - i);
            for (slot, ptr) in slots[..end].iter_mut().enumerate().skip(last.slot + 1) {
                debug_assert_eq!(
                    *ptr,
                    0,
                    "file block {} is no hole",
                    last.index + slot as u64
                );
                *ptr = ptrs[i];
                i += 1;
            }
        }
    }
    Ok(())
}

/// Every indirect block key reachable from the inode whose parent pointer is known but
/// which is not cached (to load before freeing the whole file or a range).
pub fn missing_blocks(st: &InodeState, from_block: u64, p: u64) -> Vec<Need> {
    let mut out = Vec::new();
    for tree in 0..3 {
        let level = tree as u8 + 1;
        let start = bmap::tree_start(tree, p);
        let end = start + bmap::span(level, p);
        if end <= from_block {
            continue;
        }
        walk_missing(
            st,
            level,
            start,
            st.d.indirect[tree],
            from_block,
            p,
            &mut out,
        );
    }
    out
}

fn walk_missing(
    st: &InodeState,
    level: u8,
    index: u64,
    addr: u64,
    from: u64,
    p: u64,
    out: &mut Vec<Need>,
) {
    match st.ptrs.get(&(level, index)) {
        None if addr != 0 => out.push(Need { level, index, addr }),
        None => {}
        Some(b) if level > 1 => {
            for (slot, &child) in b.ptrs.iter().enumerate() {
                let ci = bmap::child_index(level, index, slot, p);
                if ci + bmap::span(level - 1, p) > from {
                    walk_missing(st, level - 1, ci, child, from, p, out);
                }
            }
        }
        Some(_) => {}
    }
}

/// Visit the data pointers of file blocks [from, end) in order: `f(first, count, raw)` for
/// one pointer (`count` 1), or once for all the blocks in range under a 0 pointer above
/// level 1 (a hole subtree is never walked block by block). Stops early when `f` returns
/// false (then `Ok(false)`). `Err(need)`: that indirect block must be loaded first; every
/// block before its first was visited, so the walk resumes from there.
pub fn walk(
    st: &InodeState,
    from: u64,
    end: u64,
    p: u64,
    f: &mut dyn FnMut(u64, u64, u64) -> bool,
) -> Result<bool, Need> {
    let ndirect = crate::format::inode::NDIRECT as u64;
    for n in from..end.min(ndirect) {
        if !f(n, 1, st.d.direct[n as usize]) {
            return Ok(false);
        }
    }
    for tree in 0..3 {
        let level = tree as u8 + 1;
        let start = bmap::tree_start(tree, p);
        if start + bmap::span(level, p) <= from || start >= end {
            continue;
        }
        if !walk_in(st, level, start, st.d.indirect[tree], (from, end), p, f)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn walk_in(
    st: &InodeState,
    level: u8,
    index: u64,
    addr: u64,
    (from, end): (u64, u64),
    p: u64,
    f: &mut dyn FnMut(u64, u64, u64) -> bool,
) -> Result<bool, Need> {
    let Some(b) = st.ptrs.get(&(level, index)) else {
        if addr != 0 {
            return Err(Need { level, index, addr });
        }
        let lo = index.max(from);
        let hi = index.saturating_add(bmap::span(level, p)).min(end);
        return Ok(f(lo, hi - lo, 0));
    };
    let child_span = bmap::span(level - 1, p);
    let first = (from.saturating_sub(index) / child_span) as usize;
    for slot in first..p as usize {
        let ci = bmap::child_index(level, index, slot, p);
        if ci >= end {
            break;
        }
        let child = b.ptrs[slot];
        let go_on = if level == 1 {
            f(ci, 1, child)
        } else {
            walk_in(st, level - 1, ci, child, (from, end), p, f)?
        };
        if !go_on {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Indirect block (level, index) with pointers `ptrs` maps nothing once the slots `changed`
/// are cleared: every other slot is 0 and, above level 1, names no child that is cached but
/// not written yet (such a child has a 0 pointer until the log writer places it).
fn maps_nothing_else(
    st: &InodeState,
    level: u8,
    index: u64,
    ptrs: &[u64],
    changed: &[usize],
    p: u64,
) -> bool {
    let mut cleared = vec![false; ptrs.len()];
    for &slot in changed {
        cleared[slot] = true;
    }
    ptrs.iter().enumerate().all(|(slot, &c)| {
        cleared[slot]
            || (c == 0
                && (level == 1
                    || !st
                        .ptrs
                        .contains_key(&(level - 1, bmap::child_index(level, index, slot, p)))))
    })
}

/// What freeing a range of a file releases.
#[derive(Default, Debug)]
pub struct Freed {
    /// Data blocks, as runs (start, count).
    pub data: Vec<(u64, u64)>,
    /// Log addresses of indirect blocks that were on disk.
    pub log: Vec<u64>,
}

impl Freed {
    /// Add the block a data pointer names (unwritten or not).
    fn data_block(&mut self, raw: u64) {
        let Some(a) = DataPtr::decode(raw).addr() else {
            return;
        };
        if let Some(last) = self.data.last_mut() {
            if last.0 + last.1 == a {
                last.1 += 1;
                return;
            }
        }
        self.data.push((a, 1));
    }
}

/// Clear every pointer to file blocks `>= from` and drop indirect blocks left empty of the
/// range. All indirect blocks involved must be cached (see `missing_blocks`).
pub fn free_from(st: &mut InodeState, from: u64, p: u64) -> Freed {
    free_range(st, from, u64::MAX, p)
}

/// Clear every pointer to file blocks in [from, end) and drop the indirect blocks that map
/// nothing any more. All indirect blocks involved must be cached (see `missing_in`).
pub fn free_range(st: &mut InodeState, from: u64, end: u64, p: u64) -> Freed {
    let mut freed = Freed::default();
    let ndirect = crate::format::inode::NDIRECT as u64;
    for k in from.min(ndirect)..end.min(ndirect) {
        freed.data_block(std::mem::take(&mut st.d.direct[k as usize]));
    }
    for tree in 0..3 {
        let level = tree as u8 + 1;
        let start = bmap::tree_start(tree, p);
        if start + bmap::span(level, p) <= from || start >= end {
            continue;
        }
        if free_subtree(st, level, start, (from, end), p, &mut freed) {
            st.d.indirect[tree] = 0;
        }
    }
    let nfreed: u64 = freed.data.iter().map(|r| r.1).sum();
    st.d.blocks -= nfreed.min(st.d.blocks);
    freed
}

/// Free the part in [from, end) of indirect block (level, index). Returns true when the whole
/// block went away (its parent pointer must be cleared): it lay inside the range, or maps
/// nothing any more.
fn free_subtree(
    st: &mut InodeState,
    level: u8,
    index: u64,
    (from, end): (u64, u64),
    p: u64,
    freed: &mut Freed,
) -> bool {
    let Some(block) = st.ptrs.get(&(level, index)) else {
        return false; // a hole (callers loaded every existing block)
    };
    let ptrs = block.ptrs.clone();
    let child_span = bmap::span(level - 1, p);
    let mut changed = Vec::new();
    for (slot, &child) in ptrs.iter().enumerate() {
        let ci = bmap::child_index(level, index, slot, p);
        if ci + child_span <= from || ci >= end {
            continue;
        }
        if level == 1 {
            if child != 0 {
                freed.data_block(child);
                changed.push(slot);
            }
        } else if free_subtree(st, level - 1, ci, (from, end), p, freed) {
            changed.push(slot);
        }
    }
    let inside = index >= from && index.saturating_add(bmap::span(level, p)) <= end;
    if inside || (!changed.is_empty() && maps_nothing_else(st, level, index, &ptrs, &changed, p)) {
        let b = st.ptrs.remove(&(level, index)).unwrap();
        if b.addr != 0 {
            freed.log.push(b.addr);
        }
        st.d.meta_blocks -= 1;
        return true;
    }
    if !changed.is_empty() {
        let b = st.ptrs.get_mut(&(level, index)).unwrap();
        let v = Arc::make_mut(&mut b.ptrs);
        for slot in changed {
            v[slot] = 0;
        }
        mark_block_dirty(&mut st.ptrs, level, index, p);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::inode::DiskInode;
    use crate::fs::inode::InodeEntry;

    fn file() -> Arc<InodeEntry> {
        InodeEntry::detached(DiskInode {
            ino: 5,
            mode: libc::S_IFREG,
            ..Default::default()
        })
    }

    /// A run set at once maps what setting each block maps, across the direct pointers and
    /// level-1 blocks of the single, double and triple trees, and a walk sees the same.
    #[test]
    fn set_run_is_set_block_by_block() {
        let p = 8;
        // The largest file with p = 8 is 12 + 8 + 64 + 512 = 596 blocks.
        for (first, len) in [(0u64, 580u64), (5, 30), (19, 1), (20, 64), (83, 500)] {
            let (a, b) = (file(), file());
            // Two inodes' states at once (no operation does that): the second taken without
            // waiting, as the lock order allows.
            let (mut sa, mut sb) = (a.state.write(), b.state.try_write().unwrap());
            let ptrs: Vec<u64> = (0..len).map(|i| 1000 + i).collect();
            set_run(&mut sa, first, &ptrs, p).unwrap();
            for (i, &x) in ptrs.iter().enumerate() {
                set(&mut sb, first + i as u64, x, p).unwrap();
            }
            for n in 0..first + len + 10 {
                assert_eq!(
                    lookup(&sa, n, p),
                    lookup(&sb, n, p),
                    "run {first}+{len}, block {n}"
                );
            }
            assert_eq!(sa.d.meta_blocks, sb.d.meta_blocks);
            let mut seen = Vec::new();
            walk(&sa, 0, first + len + 10, p, &mut |n, count, raw| {
                if raw != 0 {
                    assert_eq!(count, 1);
                    seen.push(n);
                }
                true
            })
            .unwrap();
            assert_eq!(seen, (first..first + len).collect::<Vec<_>>());
        }
    }

    #[test]
    fn set_lookup_free() {
        let e = InodeEntry::detached(DiskInode {
            ino: 5,
            mode: libc::S_IFREG,
            ..Default::default()
        });
        let mut st = e.state.write();
        let p = 8;
        for n in [0u64, 11, 12, 19, 20, 12 + 8 + 64 + 3, 12 + 8 + 64 + 512 - 1] {
            assert_eq!(set(&mut st, n, 1000 + n, p), Ok(0));
            st.d.blocks += 1;
        }
        for n in [0u64, 11, 12, 19, 20, 12 + 8 + 64 + 3] {
            assert_eq!(lookup(&st, n, p), Ok(1000 + n));
        }
        assert_eq!(lookup(&st, 13, p), Ok(0));
        assert_eq!(st.d.meta_blocks, 1 + 2 + 3 + 2);
        let f = free_from(&mut st, 20, p);
        assert_eq!(f.data.iter().map(|r| r.1).sum::<u64>(), 3);
        assert_eq!(lookup(&st, 19, p), Ok(1019));
        assert_eq!(lookup(&st, 20, p), Ok(0));
        assert_eq!(st.d.indirect[1], 0);
        assert_eq!(st.d.meta_blocks, 1);
        assert!(missing_blocks(&st, 0, p).is_empty());
        let f = free_from(&mut st, 0, p);
        assert_eq!(f.data.iter().map(|r| r.1).sum::<u64>(), 4);
        assert!(st.ptrs.is_empty());
        assert_eq!(st.d.blocks, 0);
    }
}
