//! The data device's block groups: committed bitmaps and group descriptors (the bitmap file,
//! docs/FORMAT.md "Bitmap file") plus the allocator's in-memory reservations.
//!
//! A block is free for allocation when neither its committed bit (durable state as of the
//! last applied transaction) nor its reserved bit (handed out, not yet committed) is set.
//! Freed blocks stay committed until the transaction that frees them is durable, so a block
//! is never given to another file while a crash could still make the old owner reappear.

use super::metafile::MetaFile;
use crate::format::meta::{entries32_per_block, GroupDesc};
use crate::format::{BITMAP_ID, HEADER_SIZE};
use crate::{FsError, Result};
use bitvec::prelude::*;

pub struct DataMap {
    pub file: MetaFile,
    block_size: u32,
    pub blocks_per_group: u64,
    pub data_blocks: u64,
    desc_blocks: u64,
    per_desc_block: u64,
    pub groups: Vec<GroupDesc>,
    committed: Vec<BitVec<u8, Lsb0>>,
    reserved: Vec<BitVec<u8, Lsb0>>,
    reserved_count: u64,
    /// Per group, a bit below which nothing is free (all committed or reserved): the search
    /// for a free block starts there instead of walking a filled group's bitmap each time.
    /// Lowered whenever a block becomes free; raised only by `reserve`, past what it scanned.
    free_hint: Vec<usize>,
}

impl DataMap {
    pub fn new(block_size: u32, data_blocks: u64, blocks_per_group: u64) -> DataMap {
        let ngroups = data_blocks.div_ceil(blocks_per_group);
        let per_desc_block = entries32_per_block(block_size) as u64;
        let desc_blocks = ngroups.div_ceil(per_desc_block);
        let mut m = DataMap {
            file: MetaFile::new(BITMAP_ID, block_size, desc_blocks + ngroups),
            block_size,
            blocks_per_group,
            data_blocks,
            desc_blocks,
            per_desc_block,
            groups: Vec::new(),
            committed: Vec::new(),
            reserved: Vec::new(),
            reserved_count: 0,
            free_hint: vec![0; ngroups as usize],
        };
        for g in 0..ngroups {
            let mut bits = bitvec![u8, Lsb0; 0; blocks_per_group as usize];
            let real = m.group_len(g);
            bits[real as usize..].fill(true);
            m.committed.push(bits);
            m.reserved
                .push(bitvec![u8, Lsb0; 0; blocks_per_group as usize]);
            m.groups.push(GroupDesc {
                free_blocks: real as u32,
                dirs: 0,
                flags: 0,
            });
        }
        // Block 0 is the data superblock.
        m.committed[0].set(0, true);
        m.groups[0].free_blocks -= 1;
        m
    }

    /// Blocks that really exist in group `g` (the last group may be short).
    pub fn group_len(&self, g: u64) -> u64 {
        (self.data_blocks - g * self.blocks_per_group).min(self.blocks_per_group)
    }

    pub fn ngroups(&self) -> u64 {
        self.groups.len() as u64
    }

    pub fn group_of(&self, block: u64) -> u64 {
        block / self.blocks_per_group
    }

    fn check_run(&self, start: u64, count: u64) -> Result<()> {
        if start == 0
            || count == 0
            || start
                .checked_add(count)
                .is_none_or(|e| e > self.data_blocks)
        {
            return Err(FsError::corrupt(
                "data extent",
                format!("{start}+{count} outside the data device"),
            ));
        }
        Ok(())
    }

    /// Split a run into per-group pieces (group, first bit, count).
    fn pieces(&self, start: u64, count: u64) -> Vec<(usize, usize, usize)> {
        let mut v = Vec::new();
        let (mut s, end) = (start, start + count);
        while s < end {
            let g = s / self.blocks_per_group;
            let ge = ((g + 1) * self.blocks_per_group).min(end);
            v.push((
                g as usize,
                (s - g * self.blocks_per_group) as usize,
                (ge - s) as usize,
            ));
            s = ge;
        }
        v
    }

    fn mark_group_dirty(&mut self, g: usize) {
        let d = g as u64 / self.per_desc_block;
        self.file.mark_dirty(d);
        self.file.mark_dirty(self.desc_blocks + g as u64);
    }

    /// Apply a committed allocation (DALLOC). Blocks must have been free in the committed map.
    pub fn commit_alloc(&mut self, start: u64, count: u64) -> Result<()> {
        self.check_run(start, count)?;
        for (g, b, n) in self.pieces(start, count) {
            let bits = &mut self.committed[g][b..b + n];
            if bits.any() {
                return Err(FsError::corrupt(
                    "data bitmap",
                    format!("allocating allocated blocks in {start}+{count}"),
                ));
            }
            bits.fill(true);
            let r = &mut self.reserved[g][b..b + n];
            let was = r.count_ones() as u64;
            r.fill(false);
            self.reserved_count -= was;
            self.groups[g].free_blocks -= n as u32;
            self.mark_group_dirty(g);
        }
        Ok(())
    }

    /// Apply a committed free (DFREE).
    pub fn commit_free(&mut self, start: u64, count: u64) -> Result<()> {
        self.check_run(start, count)?;
        for (g, b, n) in self.pieces(start, count) {
            let bits = &mut self.committed[g][b..b + n];
            if bits.not_all() {
                return Err(FsError::corrupt(
                    "data bitmap",
                    format!("freeing free blocks in {start}+{count}"),
                ));
            }
            bits.fill(false);
            self.free_hint[g] = self.free_hint[g].min(b);
            self.groups[g].free_blocks += n as u32;
            self.mark_group_dirty(g);
        }
        Ok(())
    }

    pub fn add_dirs(&mut self, group: u64, delta: i64) -> Result<()> {
        let gd = self.groups.get_mut(group as usize).ok_or_else(|| {
            FsError::corrupt("group descriptor", format!("group {group} out of range"))
        })?;
        gd.dirs = (gd.dirs as i64 + delta).max(0) as u32;
        self.mark_group_dirty(group as usize);
        Ok(())
    }

    pub fn is_committed(&self, block: u64) -> bool {
        let g = self.group_of(block) as usize;
        self.committed
            .get(g)
            .is_some_and(|b| b[(block % self.blocks_per_group) as usize])
    }

    /// Blocks free for allocation now.
    pub fn free_blocks(&self) -> u64 {
        self.committed_free() - self.reserved_count
    }

    pub fn committed_free(&self) -> u64 {
        self.groups.iter().map(|g| g.free_blocks as u64).sum()
    }

    /// Hand out up to `max` contiguous free blocks, the first at or after `goal` (wrapping
    /// around the device). Returns (start, count) or None when the device is full.
    pub fn reserve(&mut self, goal: u64, max: u64) -> Option<(u64, u64)> {
        if max == 0 || self.free_blocks() == 0 {
            return None;
        }
        let ng = self.ngroups();
        let goal = if goal >= self.data_blocks { 0 } else { goal };
        let g0 = self.group_of(goal);
        for step in 0..=ng {
            let g = (g0 + step) % ng;
            let from = if step == 0 {
                goal % self.blocks_per_group
            } else {
                0
            };
            // On the wrap-around pass look at the part of the goal group before the goal.
            let from = if step == ng { 0 } else { from } as usize;
            let hint = self.free_hint[g as usize];
            let found = self.first_free(g as usize, from.max(hint));
            if from <= hint {
                // Everything from the hint up to what was found (or the group's end) is taken.
                self.free_hint[g as usize] = found.unwrap_or(self.blocks_per_group as usize);
            }
            if let Some(first) = found {
                let mut n = 1;
                while (n as u64) < max
                    && first + n < self.blocks_per_group as usize
                    && self.is_free_bit(g as usize, first + n)
                {
                    n += 1;
                }
                self.reserved[g as usize][first..first + n].fill(true);
                self.reserved_count += n as u64;
                if self.free_hint[g as usize] == first {
                    self.free_hint[g as usize] = first + n;
                }
                return Some((g * self.blocks_per_group + first as u64, n as u64));
            }
        }
        None
    }

    /// Like `reserve`, but prefers a run of `max` blocks (at most a group: runs never cross
    /// groups): the first free run that long at or after `goal` (wrapping around), else
    /// whatever `reserve` finds. For preallocation, which wants one extent where the device
    /// allows and can afford to look for it.
    pub fn reserve_run(&mut self, goal: u64, max: u64) -> Option<(u64, u64)> {
        let want = max.min(self.blocks_per_group) as usize;
        if want == 0 || (self.free_blocks() as usize) < want {
            return self.reserve(goal, max);
        }
        let ng = self.ngroups();
        let goal = if goal >= self.data_blocks { 0 } else { goal };
        let g0 = self.group_of(goal);
        for step in 0..=ng {
            let g = ((g0 + step) % ng) as usize;
            let from = match step {
                0 => (goal % self.blocks_per_group) as usize,
                _ => 0,
            };
            let mut pos = from.max(self.free_hint[g]);
            while let Some(first) = self.first_free(g, pos) {
                let mut n = 1;
                while n < want
                    && first + n < self.blocks_per_group as usize
                    && self.is_free_bit(g, first + n)
                {
                    n += 1;
                }
                if n == want {
                    self.reserved[g][first..first + n].fill(true);
                    self.reserved_count += n as u64;
                    if self.free_hint[g] == first {
                        self.free_hint[g] = first + n;
                    }
                    return Some((g as u64 * self.blocks_per_group + first as u64, n as u64));
                }
                pos = first + n;
            }
        }
        self.reserve(goal, max)
    }

    fn is_free_bit(&self, g: usize, b: usize) -> bool {
        !self.committed[g][b] && !self.reserved[g][b]
    }

    fn first_free(&self, g: usize, from: usize) -> Option<usize> {
        let (c, r) = (&self.committed[g], &self.reserved[g]);
        let mut pos = from;
        while pos < c.len() {
            let a = pos + c[pos..].first_zero()?;
            if !r[a] {
                return Some(a);
            }
            pos = a + r[a..].first_zero()?;
        }
        None
    }

    /// Give back reserved blocks that were not used.
    pub fn unreserve(&mut self, start: u64, count: u64) {
        for (g, b, n) in self.pieces(start, count) {
            let r = &mut self.reserved[g][b..b + n];
            let was = r.count_ones() as u64;
            debug_assert_eq!(was, n as u64, "unreserving blocks that were not reserved");
            r.fill(false);
            self.reserved_count -= was;
            self.free_hint[g] = self.free_hint[g].min(b);
        }
    }

    /// A group for a new directory: among groups with at least the average free space, the
    /// one with the fewest directories (ext2's spreading rule).
    pub fn pick_dir_group(&self, parent_group: u64) -> u64 {
        let n = self.groups.len() as u64;
        let avg = self.committed_free() / n.max(1);
        let mut best: Option<(u32, u32, u64)> = None;
        for step in 0..n {
            let g = (parent_group + step) % n;
            let gd = &self.groups[g as usize];
            if gd.free_blocks as u64 >= avg {
                let better = match best {
                    None => true,
                    Some((dirs, free, _)) => {
                        gd.dirs < dirs || (gd.dirs == dirs && gd.free_blocks > free)
                    }
                };
                if better {
                    best = Some((gd.dirs, gd.free_blocks, g));
                }
            }
        }
        best.map(|b| b.2).unwrap_or(parent_group % n.max(1))
    }

    /// First block of group `g` (where a file with no blocks yet starts looking).
    pub fn group_start(&self, g: u64) -> u64 {
        g * self.blocks_per_group
    }

    pub fn encode_block(&self, b: u64) -> Vec<u8> {
        let mut body = vec![0u8; self.block_size as usize - HEADER_SIZE];
        if b < self.desc_blocks {
            for i in 0..self.per_desc_block {
                if let Some(gd) = self.groups.get((b * self.per_desc_block + i) as usize) {
                    gd.encode(&mut body[32 * i as usize..]);
                }
            }
        } else {
            let bits = &self.committed[(b - self.desc_blocks) as usize];
            body[..bits.as_raw_slice().len()].copy_from_slice(bits.as_raw_slice());
        }
        body
    }

    pub fn decode(
        file: MetaFile,
        block_size: u32,
        data_blocks: u64,
        blocks_per_group: u64,
        bodies: &[Vec<u8>],
    ) -> Result<DataMap> {
        let bad = |d: String| FsError::corrupt("bitmap file", d);
        // Before allocating anything per group: the file must have a block for each.
        let ngroups = data_blocks.div_ceil(blocks_per_group.max(1));
        let desc_blocks = ngroups.div_ceil(entries32_per_block(block_size) as u64);
        if blocks_per_group == 0 || bodies.len() as u64 != desc_blocks.saturating_add(ngroups) {
            return Err(bad(format!("{} blocks for {ngroups} groups", bodies.len())));
        }
        let mut m = DataMap::new(block_size, data_blocks, blocks_per_group);
        for g in 0..m.ngroups() {
            let body = &bodies[(g / m.per_desc_block) as usize];
            let gd = GroupDesc::decode(&body[32 * (g % m.per_desc_block) as usize..]);
            let raw =
                &bodies[(m.desc_blocks + g) as usize][..(blocks_per_group as usize).div_ceil(8)];
            let mut bits = BitVec::<u8, Lsb0>::from_slice(raw);
            bits.truncate(blocks_per_group as usize);
            let real = m.group_len(g) as usize;
            let free = bits[..real].count_zeros();
            if free as u32 != gd.free_blocks || bits[real..].not_all() {
                return Err(bad(format!(
                    "group {g}: descriptor says {} free, bitmap {free}",
                    gd.free_blocks
                )));
            }
            m.committed[g as usize] = bits;
            m.groups[g as usize] = gd;
        }
        if !m.committed[0][0] {
            return Err(bad("the data superblock is marked free".into()));
        }
        m.file = file;
        Ok(m)
    }
}

impl DataMap {
    /// The bitmap file as far as it can be read, for fsck: descriptors that disagree with
    /// their bitmaps are taken as wrong (each group's free count is recounted from its bitmap),
    /// a group whose bitmap block is missing (`None`) is all free, bits past the device's end
    /// and block 0 are set. Every block is marked dirty (the next checkpoint rewrites them).
    pub fn decode_lenient(
        file: Option<MetaFile>,
        block_size: u32,
        data_blocks: u64,
        blocks_per_group: u64,
        bodies: &[Option<Vec<u8>>],
    ) -> DataMap {
        let mut m = DataMap::new(block_size, data_blocks, blocks_per_group);
        for g in 0..m.ngroups() {
            if let Some(Some(body)) = bodies.get((g / m.per_desc_block) as usize) {
                let gd = GroupDesc::decode(&body[32 * (g % m.per_desc_block) as usize..]);
                m.groups[g as usize].dirs = gd.dirs;
                m.groups[g as usize].flags = gd.flags;
            }
            let real = m.group_len(g) as usize;
            if let Some(Some(body)) = bodies.get((m.desc_blocks + g) as usize) {
                let raw = &body[..(blocks_per_group as usize).div_ceil(8)];
                let mut bits = BitVec::<u8, Lsb0>::from_slice(raw);
                bits.truncate(blocks_per_group as usize);
                bits[real..].fill(true);
                m.committed[g as usize] = bits;
            }
        }
        m.committed[0].set(0, true);
        for g in 0..m.ngroups() as usize {
            let real = m.group_len(g as u64) as usize;
            m.groups[g].free_blocks = m.committed[g][..real].count_zeros() as u32;
        }
        let len = m.desc_blocks + m.ngroups();
        m.file = match file {
            Some(f) if f.len() == len => f,
            _ => MetaFile::new(BITMAP_ID, block_size, len),
        };
        m.file.dirty = (0..len).collect();
        m
    }

    /// Make the committed state exactly the blocks for which `used` is true (block 0 and the
    /// bits past the device's end stay set), with matching free counts, directory counts
    /// `dirs` (one per group) and descriptor flags 0 (fsck, with nothing reserved). Marks what
    /// changed dirty; returns whether anything did.
    pub fn rebuild(&mut self, used: &dyn Fn(u64) -> bool, dirs: &[u32]) -> bool {
        assert_eq!(
            self.reserved_count, 0,
            "rebuilding bitmaps with blocks reserved"
        );
        let mut changed = false;
        for g in 0..self.ngroups() as usize {
            let base = g as u64 * self.blocks_per_group;
            let real = self.group_len(g as u64) as usize;
            let mut bits = bitvec![u8, Lsb0; 0; self.blocks_per_group as usize];
            for j in 0..real {
                let b = base + j as u64;
                if b == 0 || used(b) {
                    bits.set(j, true);
                }
            }
            bits[real..].fill(true);
            let gd = GroupDesc {
                free_blocks: bits[..real].count_zeros() as u32,
                dirs: dirs.get(g).copied().unwrap_or(0),
                flags: 0,
            };
            if bits != self.committed[g] || gd != self.groups[g] {
                self.free_hint[g] = 0;
                self.committed[g] = bits;
                self.groups[g] = gd;
                self.mark_group_dirty(g);
                changed = true;
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The search hint never hides a free block: after any mix of reservations, commits,
    /// frees and give-backs, every block below a group's hint is taken, and `reserve` hands
    /// out the first free block at or after the goal, as a plain scan finds it.
    #[test]
    fn free_hint_never_hides_a_free_block() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut m = DataMap::new(4096, 2000, 512);
        let mut reserved: Vec<(u64, u64)> = Vec::new();
        let mut committed: Vec<(u64, u64)> = Vec::new();
        for _ in 0..20_000 {
            match rng.gen_range(0..4) {
                0 | 1 => {
                    let goal = if rng.gen_bool(0.5) {
                        0
                    } else {
                        rng.gen_range(0..2000)
                    };
                    let want = (0..=m.ngroups())
                        .map(|k| (m.group_of(goal) + k) % m.ngroups())
                        .enumerate()
                        .find_map(|(k, g)| {
                            let from = if k == 0 { goal % 512 } else { 0 } as usize;
                            let wrap = k as u64 == m.ngroups();
                            let from = if wrap { 0 } else { from };
                            (from..512)
                                .find(|&b| m.is_free_bit(g as usize, b))
                                .map(|b| g * 512 + b as u64)
                        });
                    let got = m.reserve(goal, rng.gen_range(1..8));
                    assert_eq!(got.map(|r| r.0), want, "goal {goal}");
                    if let Some(r) = got {
                        reserved.push(r);
                    }
                }
                2 if !reserved.is_empty() => {
                    let (s, n) = reserved.swap_remove(rng.gen_range(0..reserved.len()));
                    if rng.gen_bool(0.7) {
                        m.commit_alloc(s, n).unwrap();
                        committed.push((s, n));
                    } else {
                        m.unreserve(s, n);
                    }
                }
                _ if !committed.is_empty() => {
                    let (s, n) = committed.swap_remove(rng.gen_range(0..committed.len()));
                    m.commit_free(s, n).unwrap();
                }
                _ => {}
            }
            for g in 0..m.ngroups() as usize {
                assert!(
                    (0..m.free_hint[g].min(512)).all(|b| !m.is_free_bit(g, b)),
                    "group {g}: a free block below the hint {}",
                    m.free_hint[g]
                );
            }
        }
    }

    #[test]
    fn reserve_commit_free() {
        let mut m = DataMap::new(4096, 1000, 300);
        assert_eq!(m.ngroups(), 4);
        assert_eq!(m.group_len(3), 100);
        assert_eq!(m.free_blocks(), 999);
        let (s, n) = m.reserve(0, 10).unwrap();
        assert_eq!((s, n), (1, 10));
        assert_eq!(m.free_blocks(), 989);
        m.commit_alloc(1, 10).unwrap();
        assert_eq!(m.free_blocks(), 989);
        assert!(m.commit_alloc(5, 1).is_err());
        // A run stops at a group end.
        let (s, n) = m.reserve(295, 20).unwrap();
        assert_eq!((s, n), (295, 5));
        m.unreserve(295, 5);
        m.commit_free(1, 10).unwrap();
        assert!(m.commit_free(1, 1).is_err());
        assert_eq!(m.free_blocks(), 999);
        // Round trip through the on-disk encoding.
        m.commit_alloc(400, 3).unwrap();
        let bodies: Vec<Vec<u8>> = (0..m.file.len()).map(|b| m.encode_block(b)).collect();
        let file = MetaFile::new(BITMAP_ID, 4096, m.file.len());
        let d = DataMap::decode(file, 4096, 1000, 300, &bodies).unwrap();
        assert_eq!(d.free_blocks(), 996);
        assert!(d.is_committed(401));
    }

    #[test]
    fn lenient_decode_and_rebuild() {
        let mut m = DataMap::new(4096, 1000, 300);
        m.commit_alloc(400, 3).unwrap();
        let mut bodies: Vec<Option<Vec<u8>>> =
            (0..m.file.len()).map(|b| Some(m.encode_block(b))).collect();
        // A descriptor that lies, and a bitmap block that is lost.
        GroupDesc {
            free_blocks: 7,
            dirs: 2,
            flags: 0,
        }
        .encode(&mut bodies[0].as_mut().unwrap()[32..]);
        bodies[1 + 3] = None;
        let file = MetaFile::new(BITMAP_ID, 4096, m.file.len());
        assert!(DataMap::decode(
            MetaFile::new(BITMAP_ID, 4096, m.file.len()),
            4096,
            1000,
            300,
            &bodies
                .iter()
                .map(|b| b.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        )
        .is_err());
        let mut d = DataMap::decode_lenient(Some(file), 4096, 1000, 300, &bodies);
        assert_eq!(d.groups[1].free_blocks, 297);
        assert_eq!(d.groups[1].dirs, 2);
        assert_eq!(d.groups[3].free_blocks, 100);
        assert!(d.is_committed(0) && d.is_committed(401) && d.is_committed(999 + 1));
        assert!(d.rebuild(&|b| b == 5, &[1, 0, 0, 0]));
        assert!(d.is_committed(5) && !d.is_committed(401));
        assert_eq!(d.committed_free(), 998);
        assert_eq!(d.groups[0].dirs, 1);
        assert!(!d.rebuild(&|b| b == 5, &[1, 0, 0, 0]));
        let bodies: Vec<Vec<u8>> = (0..d.file.len()).map(|b| d.encode_block(b)).collect();
        let file = MetaFile::new(BITMAP_ID, 4096, d.file.len());
        assert_eq!(
            DataMap::decode(file, 4096, 1000, 300, &bodies)
                .unwrap()
                .committed_free(),
            998
        );
    }

    /// `reserve_run` takes the first run long enough, past shorter free fragments, wrapping
    /// around; with none that long it takes what `reserve` would.
    #[test]
    fn reserve_run_prefers_one_extent() {
        let mut m = DataMap::new(4096, 1000, 300);
        // Group 0: blocks 1..=100 free one in two; the rest of it allocated.
        m.commit_alloc(1, 299).unwrap();
        for b in (1..100).step_by(2) {
            m.commit_free(b, 1).unwrap();
        }
        assert_eq!(m.reserve_run(0, 50), Some((300, 50)));
        // From a goal past every long run: wraps around to the first one.
        m.commit_alloc(350, 650).unwrap();
        m.unreserve(300, 50);
        assert_eq!(m.reserve_run(999, 40), Some((300, 40)));
        // No run that long anywhere: the first free block, as `reserve` finds it.
        assert_eq!(m.reserve_run(999, 40), Some((1, 1)));
    }

    #[test]
    fn fills_up_and_wraps() {
        let mut m = DataMap::new(4096, 64, 32);
        let mut got = 0;
        while let Some((_, n)) = m.reserve(40, 7) {
            got += n;
        }
        assert_eq!(got, 63);
        assert!(m.reserve(0, 1).is_none());
    }
}
