//! The IFile in memory: segment usage table and inode map (docs/FORMAT.md "IFile").

use super::metafile::MetaFile;
use crate::format::meta::*;
use crate::format::{IFILE_ID, INODE_SIZE};
use crate::{FsError, Result};
use std::collections::BTreeSet;

pub struct Ifile {
    pub file: MetaFile,
    block_size: u32,
    per_block: u64,
    usage_blocks: u64,
    pub usage: Vec<SegUsage>,
    /// Indexed by inode number; free entries keep their last generation.
    pub imap: Vec<ImapEntry>,
    /// Free inode numbers below `imap.len()` (never 0).
    pub free: BTreeSet<u64>,
    pub live_inodes: u64,
    /// Segments that are clean now (kept in step with `usage`).
    clean: u64,
}

impl Ifile {
    /// A fresh IFile for `segments` segments; `reserved` get the RESERVED flag, `sb_copies` SUPERBLOCK.
    pub fn new(block_size: u32, segments: u64, sb_copies: &[u64]) -> Ifile {
        let per_block = entries16_per_block(block_size) as u64;
        let usage_blocks = segments.div_ceil(per_block);
        let mut usage = vec![SegUsage::default(); segments as usize];
        usage[0].flags = SEG_RESERVED;
        for &s in sb_copies {
            usage[s as usize].flags |= SEG_SUPERBLOCK;
        }
        let mut f = Ifile {
            file: MetaFile::new(IFILE_ID, block_size, 1 + usage_blocks),
            block_size,
            per_block,
            usage_blocks,
            usage,
            imap: Vec::new(),
            free: BTreeSet::new(),
            live_inodes: 0,
            clean: 0,
        };
        f.clean = f.usage.iter().filter(|u| u.is_clean()).count() as u64;
        f.grow_imap(1);
        f
    }

    fn imap_block(&self, ino: u64) -> u64 {
        1 + self.usage_blocks + ino / self.per_block
    }

    fn usage_block(&self, seg: u64) -> u64 {
        1 + seg / self.per_block
    }

    /// Make room for inode numbers below `n` (whole blocks of entries, new ones free).
    pub fn grow_imap(&mut self, n: u64) {
        let old = self.imap.len() as u64;
        let want = n.div_ceil(self.per_block) * self.per_block;
        if want <= old {
            return;
        }
        self.imap.resize(want as usize, ImapEntry::default());
        for i in old.max(1)..want {
            self.free.insert(i);
        }
        self.file
            .grow(1 + self.usage_blocks + want / self.per_block);
        // The previously last free entry now links to the new ones.
        if let Some(&last) = self.free.range(..old).next_back() {
            self.file.mark_dirty(self.imap_block(last));
        }
        self.file.mark_dirty(0);
    }

    pub fn entry(&self, ino: u64) -> Option<ImapEntry> {
        self.imap
            .get(ino as usize)
            .copied()
            .filter(|e| e.allocated())
    }

    /// Mark the blocks whose encoding changes when `ino` enters or leaves the free list.
    fn touch_free_neighbours(&mut self, ino: u64) {
        if let Some(&prev) = self.free.range(..ino).next_back() {
            self.file.mark_dirty(self.imap_block(prev));
        }
        self.file.mark_dirty(self.imap_block(ino));
        self.file.mark_dirty(0);
    }

    /// Inode `ino` now lives at (addr, slot); returns its previous address if it had one.
    pub fn place_inode(
        &mut self,
        ino: u64,
        generation: u32,
        addr: u64,
        slot: u16,
        orphan: bool,
    ) -> Option<u64> {
        self.grow_imap(ino + 1);
        let old = self.imap[ino as usize];
        let prev = if old.allocated() {
            Some(old.addr)
        } else {
            None
        };
        if !old.allocated() {
            self.free.remove(&ino);
            self.touch_free_neighbours(ino);
            self.live_inodes += 1;
        }
        let flags = IMAP_ALLOCATED | if orphan { IMAP_ORPHAN } else { 0 };
        self.imap[ino as usize] = ImapEntry {
            addr,
            generation,
            slot,
            flags,
        };
        self.file.mark_dirty(self.imap_block(ino));
        prev
    }

    /// Free `ino`, whose use of the number had `generation` (0: unknown, the entry keeps its
    /// own); returns the address it had. The entry keeps the generation, also for a use that
    /// never reached the log, so the number's next use gets a newer one.
    pub fn free_inode(&mut self, ino: u64, generation: u32) -> Option<u64> {
        if generation != 0 {
            self.grow_imap(ino + 1);
        }
        let old = *self.imap.get(ino as usize)?;
        if !old.allocated() {
            if generation != 0 && old.generation != generation {
                self.imap[ino as usize].generation = generation;
                self.file.mark_dirty(self.imap_block(ino));
            }
            return None;
        }
        self.imap[ino as usize] = ImapEntry {
            addr: 0,
            generation: if generation != 0 {
                generation
            } else {
                old.generation
            },
            slot: 0,
            flags: 0,
        };
        self.free.insert(ino);
        self.touch_free_neighbours(ino);
        self.live_inodes -= 1;
        Some(old.addr)
    }

    /// Add (or with a negative delta, remove) live bytes in the segment of `addr`.
    pub fn add_live(&mut self, segment: u64, delta: i64, now: u64) -> Result<()> {
        let u = self.usage.get_mut(segment as usize).ok_or_else(|| {
            FsError::corrupt("segment usage", format!("segment {segment} out of range"))
        })?;
        let v = u.live_bytes as i64 + delta;
        if v < 0 {
            return Err(FsError::corrupt(
                "segment usage",
                format!("segment {segment} live bytes would go negative ({v})"),
            ));
        }
        u.live_bytes = v as u32;
        if delta > 0 {
            if u.is_clean() {
                self.clean -= 1;
            }
            u.flags |= SEG_DIRTY;
            u.last_mod = now;
        }
        let b = self.usage_block(segment);
        self.file.mark_dirty(b);
        Ok(())
    }

    pub fn set_seg_flags(&mut self, segment: u64, set: u32, clear: u32) {
        let u = &mut self.usage[segment as usize];
        let f = (u.flags | set) & !clear;
        if f != u.flags {
            let was = u.is_clean();
            u.flags = f;
            match (was, u.is_clean()) {
                (true, false) => self.clean -= 1,
                (false, true) => self.clean += 1,
                _ => {}
            }
            let b = self.usage_block(segment);
            self.file.mark_dirty(b);
        }
    }

    pub fn usage_block_of(&self, segment: u64) -> u64 {
        self.usage_block(segment)
    }

    pub fn clean_segments(&self) -> u64 {
        debug_assert_eq!(
            self.clean,
            self.usage.iter().filter(|u| u.is_clean()).count() as u64
        );
        self.clean
    }

    /// The body (block minus header) of IFile block `b`.
    pub fn encode_block(&self, b: u64) -> Vec<u8> {
        let mut body = vec![0u8; self.block_size as usize - crate::format::HEADER_SIZE];
        if b == 0 {
            IfileHeader {
                segments: self.usage.len() as u64,
                imap_entries: self.imap.len() as u64,
                free_head: self.free.iter().next().copied().unwrap_or(0),
                free_count: self.free.len() as u64,
                clean_segments: self.clean_segments(),
                live_inodes: self.live_inodes,
            }
            .encode(&mut body);
        } else if b <= self.usage_blocks {
            let first = (b - 1) * self.per_block;
            for i in 0..self.per_block {
                if let Some(u) = self.usage.get((first + i) as usize) {
                    u.encode(&mut body[16 * i as usize..]);
                }
            }
        } else {
            let first = (b - 1 - self.usage_blocks) * self.per_block;
            for i in 0..self.per_block {
                let ino = first + i;
                let mut e = self.imap[ino as usize];
                if !e.allocated() {
                    // Free entries carry the ascending free list.
                    e.addr = if ino == 0 {
                        0
                    } else {
                        self.free.range(ino + 1..).next().copied().unwrap_or(0)
                    };
                }
                e.encode(&mut body[16 * i as usize..]);
            }
        }
        body
    }

    /// Rebuild from the bodies of all IFile blocks.
    pub fn decode(
        file: MetaFile,
        block_size: u32,
        segments: u64,
        bodies: &[Vec<u8>],
    ) -> Result<Ifile> {
        let per_block = entries16_per_block(block_size) as u64;
        let usage_blocks = segments.div_ceil(per_block);
        let bad = |d: String| FsError::corrupt("IFile", d);
        if (bodies.len() as u64) < 1 + usage_blocks {
            return Err(bad(format!(
                "{} blocks, at least {} expected",
                bodies.len(),
                1 + usage_blocks
            )));
        }
        let h = IfileHeader::decode(&bodies[0]);
        let imap_blocks = bodies.len() as u64 - 1 - usage_blocks;
        if h.segments != segments || h.imap_entries != imap_blocks * per_block {
            return Err(bad(format!(
                "header says {} segments and {} inodes",
                h.segments, h.imap_entries
            )));
        }
        let mut usage = Vec::with_capacity(segments as usize);
        for s in 0..segments {
            let body = &bodies[(1 + s / per_block) as usize];
            usage.push(SegUsage::decode(&body[16 * (s % per_block) as usize..]));
        }
        let mut imap = Vec::with_capacity(h.imap_entries as usize);
        let mut free = BTreeSet::new();
        let mut live = 0;
        for ino in 0..h.imap_entries {
            let body = &bodies[(1 + usage_blocks + ino / per_block) as usize];
            let e = ImapEntry::decode(&body[16 * (ino % per_block) as usize..]);
            if e.allocated() {
                if ino == 0 {
                    return Err(bad("inode 0 allocated".into()));
                }
                live += 1;
                imap.push(e);
            } else {
                if ino != 0 {
                    free.insert(ino);
                }
                imap.push(ImapEntry { addr: 0, ..e });
            }
        }
        let clean = usage.iter().filter(|u| u.is_clean()).count() as u64;
        Ok(Ifile {
            file,
            block_size,
            per_block,
            usage_blocks,
            usage,
            imap,
            free,
            live_inodes: live,
            clean,
        })
    }

    /// Bytes one inode counts for in segment usage.
    pub const INODE_BYTES: i64 = INODE_SIZE as i64;
}
