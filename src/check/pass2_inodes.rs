//! Pass 2: the IFile's inode map against the log. Every allocated entry must lead to an
//! `INODES` block whose slot holds that inode number and generation with a valid mode; the
//! on-disk free list (free entries chained in ascending order from `if_free_head`) and the
//! header's counts must agree with the entries; only inodes with no links may be ORPHANs, and
//! every inode with no links must be one (else nothing ever frees it).
//!
//! Inodes that pass are handed to the later passes; the others are remembered as unreadable so
//! later passes do not report them again.

use super::context::{list, Claims, LogReader, Sink};
use super::findings::{Finding, Lost};
use super::pass1_checkpoints::Loaded;
use crate::format::inode::{check_inode_block, DiskInode, KNOWN_INODE_FLAGS};
use crate::format::kind::FileKind;
use crate::format::meta::{
    entries16_per_block, IfileHeader, ImapEntry, SegUsage, IMAP_ALLOCATED, IMAP_ORPHAN,
};
use crate::format::INODE_SIZE;
use crate::Result;
use std::collections::BTreeSet;

pub const NAME: &str = "inodes";

pub struct InodeInfo {
    pub disk: DiskInode,
    /// The inode map's ORPHAN flag.
    pub orphan: bool,
}

impl InodeInfo {
    pub fn kind(&self) -> Option<FileKind> {
        FileKind::from_mode(self.disk.mode)
    }

    pub fn is_dir(&self) -> bool {
        self.kind() == Some(FileKind::Directory)
    }
}

pub struct Inodes {
    /// Allocated inodes that decode and match their inode map entry.
    pub good: InodeTable,
    /// Allocated inodes that could not be read (already reported).
    pub unreadable: BTreeSet<u64>,
}

/// Inodes by number: a dense index over a vector sorted by number (a lookup is two array
/// reads; the later passes do one for every entry and pointer, where a search tree of
/// 300-byte values spent most of its time in cache misses).
#[derive(Default)]
pub struct InodeTable {
    entries: Vec<(u64, InodeInfo)>,
    /// `index[ino]` is 1 + the position of `ino` in `entries`, 0 when absent.
    index: Vec<u32>,
    /// `kinds[ino]`: the file type code, 0 when absent or unknown (a byte per number, so
    /// a pass over every entry stays in cache).
    kinds: Vec<u8>,
}

impl InodeTable {
    /// The table of `entries` (any order; a number given twice keeps its first record).
    /// Records are not moved (they are large): the index gives the order.
    pub fn new(entries: Vec<(u64, InodeInfo)>) -> InodeTable {
        let len = entries.iter().map(|e| e.0 as usize + 1).max().unwrap_or(0);
        let mut index = vec![0u32; len];
        let mut kinds = vec![0u8; len];
        for (pos, (ino, info)) in entries.iter().enumerate() {
            if index[*ino as usize] == 0 {
                index[*ino as usize] = pos as u32 + 1;
                kinds[*ino as usize] = info.kind().map_or(0, |k| k.code());
            }
        }
        InodeTable {
            entries,
            index,
            kinds,
        }
    }

    /// Positions of the records in ascending inode order.
    fn ordered(&self) -> impl Iterator<Item = &(u64, InodeInfo)> + '_ {
        self.index
            .iter()
            .filter(|&&p| p != 0)
            .map(|&p| &self.entries[p as usize - 1])
    }

    /// The type code of inode `ino`, if it is in the table.
    pub fn kind_code(&self, ino: u64) -> Option<u8> {
        let k = *self.kinds.get(usize::try_from(ino).ok()?)?;
        (k != 0).then_some(k)
    }

    /// Is `ino` in the table and a directory?
    pub fn is_dir(&self, ino: u64) -> bool {
        self.kind_code(ino) == Some(FileKind::Directory.code())
    }

    pub fn get(&self, ino: &u64) -> Option<&InodeInfo> {
        let pos = *self.index.get(usize::try_from(*ino).ok()?)?;
        (pos > 0).then(|| &self.entries[pos as usize - 1].1)
    }

    pub fn contains_key(&self, ino: &u64) -> bool {
        self.get(ino).is_some()
    }

    /// In ascending inode order.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &InodeInfo)> + '_ {
        self.ordered().map(|(i, info)| (i, info))
    }

    pub fn keys(&self) -> impl Iterator<Item = &u64> + '_ {
        self.ordered().map(|(i, _)| i)
    }

    pub fn values(&self) -> impl Iterator<Item = &InodeInfo> + '_ {
        self.ordered().map(|(_, info)| info)
    }

    pub fn len(&self) -> usize {
        self.index.iter().filter(|&&p| p != 0).count()
    }
}

impl std::ops::Index<&u64> for InodeTable {
    type Output = InodeInfo;
    fn index(&self, ino: &u64) -> &InodeInfo {
        self.get(ino).expect("inode in the table")
    }
}

impl<'a> IntoIterator for &'a InodeTable {
    type Item = (&'a u64, &'a InodeInfo);
    type IntoIter = Box<dyn Iterator<Item = (&'a u64, &'a InodeInfo)> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

pub fn run(
    sink: &mut Sink,
    log: &LogReader,
    claims: &mut Claims,
    state: &Loaded,
) -> Result<Inodes> {
    let mut inodes = Inodes {
        good: InodeTable::default(),
        unreadable: BTreeSet::new(),
    };
    // Allocated entries by the block that holds them, so each block is read once.
    let mut by_block: Vec<(u64, u64, ImapEntry)> = Vec::new();
    for (ino, e) in state.tables.ifile.imap.iter().enumerate() {
        let ino = ino as u64;
        if !e.allocated() {
            continue;
        }
        sink.stats.inodes += 1;
        if ino == 0 {
            sink.error(NAME, "inode map entry 0 (never used) is allocated");
            sink.found(Finding::ImapEntryZero);
            continue;
        }
        if e.flags & !(IMAP_ALLOCATED | IMAP_ORPHAN) != 0 {
            sink.found(Finding::ImapFlags { ino });
            sink.warning(
                NAME,
                format!("inode {ino}: unknown inode map flags {:#x}", e.flags),
            );
        }
        if let Some(why) = log.bad_address(e.addr) {
            sink.error(
                NAME,
                format!(
                    "inode {ino}: the inode map places it at log block {}: {why}",
                    e.addr
                ),
            );
            sink.found(Finding::InodeLost {
                ino,
                how: Lost::Gone,
            });
            inodes.unreadable.insert(ino);
            continue;
        }
        by_block.push((e.addr, ino, *e));
    }

    // Grouped by the block that holds them, so each block is read once, in log order.
    by_block.sort_unstable_by_key(|&(addr, ino, _)| (addr, ino));
    let mut groups: std::collections::HashMap<u64, std::ops::Range<usize>> =
        std::collections::HashMap::new();
    let mut addrs: Vec<u64> = Vec::new();
    let mut i = 0;
    while i < by_block.len() {
        let addr = by_block[i].0;
        let mut j = i + 1;
        while j < by_block.len() && by_block[j].0 == addr {
            j += 1;
        }
        // One claim per block (pass 2 claims first, so nothing else holds it yet).
        if let Err(other) = claims.claim_inodes(addr, (j - i) as u32) {
            for &(_, ino, _) in &by_block[i..j] {
                sink.found(Finding::InodeLost {
                    ino,
                    how: Lost::Gone,
                });
                sink.error(
                    NAME,
                    format!("inode {ino}: the inode map places it in log block {addr}, which is {other}"),
                );
                inodes.unreadable.insert(ino);
            }
            i = j;
            continue;
        }
        groups.insert(addr, i..j);
        addrs.push(addr);
        i = j;
    }
    let blocks = addrs.len() as u64;
    // Reading and decoding run on two threads when there is enough to share (each half of
    // the blocks, in log order; the second half's problems follow the first's).
    // (Tests split small file systems too, so every test covers the merge.)
    const SPLIT_AT: usize = if cfg!(test) { 4 } else { 2048 };
    let half = if addrs.len() >= SPLIT_AT {
        addrs.len() / 2
    } else {
        addrs.len()
    };
    let (first, second) = addrs.split_at(half);
    let blocks_of = |addr: u64| -> Vec<(u64, ImapEntry)> {
        // (one small vector per block: a block holds at most 15 inodes with 4 KiB blocks)
        by_block[groups[&addr].clone()]
            .iter()
            .map(|&(_, ino, e)| (ino, e))
            .collect()
    };
    let count = |part: &[u64]| part.iter().map(|a| groups[a].len()).sum::<usize>();
    let (mine, theirs) = std::thread::scope(|scope| {
        let mut side = sink.side();
        let other = (!second.is_empty()).then(|| {
            let blocks_of = &blocks_of;
            scope.spawn(move || {
                let r = read_inodes(&mut side, log, second, blocks_of, None, count(second));
                (r, side)
            })
        });
        let mine = read_inodes(sink, log, first, &blocks_of, Some(blocks), count(first));
        let theirs = other.map(|h| match h.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        });
        (mine, theirs)
    });
    let (mut good, lost) = mine?;
    inodes.unreadable.extend(lost);
    if let Some((r, side)) = theirs {
        let (g, lost) = r?;
        sink.absorb(side);
        good.extend(g);
        inodes.unreadable.extend(lost);
    }
    sink.progress(2, NAME, blocks, blocks);
    inodes.good = InodeTable::new(good);
    check_free_list(sink, log, state);
    Ok(inodes)
}

/// The good inodes read, and the numbers found lost.
type InodesRead = (Vec<(u64, InodeInfo)>, Vec<u64>);

/// Read the inode blocks `addrs` and decode the inodes each should hold (`entries_of`):
/// the good ones, and the numbers that are lost. `total`: report progress against it.
fn read_inodes(
    sink: &mut Sink,
    log: &LogReader,
    addrs: &[u64],
    entries_of: &(dyn Fn(u64) -> Vec<(u64, ImapEntry)> + Sync),
    total: Option<u64>,
    capacity: usize,
) -> Result<InodesRead> {
    let mut good = Vec::with_capacity(capacity);
    let mut lost = Vec::new();
    let gone = |sink: &mut Sink, lost: &mut Vec<u64>, ino: u64| {
        sink.found(Finding::InodeLost {
            ino,
            how: Lost::Gone,
        });
        lost.push(ino);
    };
    let mut done = 0u64;
    log.read_sorted(addrs, &mut |addr, block| {
        if let Some(total) = total {
            if done % 1024 == 0 {
                sink.progress(2, NAME, done, total);
            }
        }
        done += 1;
        let entries = entries_of(addr);
        let block = match block {
            Ok(b) => b,
            Err(why) => {
                sink.error(NAME, format!("log block {addr}: {why}"));
                for &(ino, _) in &entries {
                    gone(sink, &mut lost, ino);
                }
                return Ok(());
            }
        };
        let count = match check_inode_block(block) {
            Ok(n) => n,
            Err(e) => {
                let inos: Vec<u64> = entries.iter().map(|e| e.0).collect();
                sink.error(
                    NAME,
                    format!(
                        "log block {addr} should hold inodes {} but is not a valid inode block: {e}",
                        list(&inos, 8)
                    ),
                );
                for ino in inos {
                    gone(sink, &mut lost, ino);
                }
                return Ok(());
            }
        };
        for &(ino, entry) in &entries {
            let disk = match inode_in_slot(block, count, addr, ino, &entry) {
                Ok(disk) => disk,
                Err(why) => {
                    sink.error(NAME, why);
                    // The block may hold the inode elsewhere (the map entry is what lies).
                    match find_in_block(block, count, ino) {
                        Some((slot, disk)) => {
                            sink.found(Finding::InodeLost {
                                ino,
                                how: Lost::Misplaced {
                                    slot,
                                    generation: disk.generation,
                                },
                            });
                            disk
                        }
                        None => {
                            gone(sink, &mut lost, ino);
                            continue;
                        }
                    }
                }
            };
            let info = InodeInfo {
                disk,
                orphan: entry.flags & IMAP_ORPHAN != 0,
            };
            check_fields(sink, log, ino, &info);
            good.push((ino, info));
        }
        Ok(())
    })?;
    Ok((good, lost))
}

/// The inode an allocated map entry names, if the slot holds exactly it.
fn inode_in_slot(
    block: &[u8],
    count: usize,
    addr: u64,
    ino: u64,
    entry: &ImapEntry,
) -> std::result::Result<DiskInode, String> {
    let slot = entry.slot as usize;
    if slot == 0 || slot > count {
        return Err(format!(
            "inode {ino}: the inode map names slot {slot} of log block {addr}, which holds \
             {count} inodes"
        ));
    }
    // count <= B/256 - 1 (checked), so the slot lies inside the block.
    let raw = &block[INODE_SIZE * slot..INODE_SIZE * (slot + 1)];
    let d = DiskInode::decode(raw)
        .map_err(|e| format!("inode {ino} (log block {addr}, slot {slot}): {e}"))?;
    if d.ino != ino {
        return Err(format!(
            "inode map entry {ino} points at log block {addr}, slot {slot}, which holds inode {}",
            d.ino
        ));
    }
    if d.generation != entry.generation {
        return Err(format!(
            "inode {ino}: generation {} in the inode, {} in the inode map",
            d.generation, entry.generation
        ));
    }
    Ok(d)
}

/// The slot of a checked inode block that holds inode `ino`, if one does.
fn find_in_block(block: &[u8], count: usize, ino: u64) -> Option<(u16, DiskInode)> {
    (1..=count).find_map(|slot| {
        let d = DiskInode::decode(&block[INODE_SIZE * slot..INODE_SIZE * (slot + 1)]).ok()?;
        (d.ino == ino).then_some((slot as u16, d))
    })
}

/// Per-inode facts that need nothing but the inode and its map entry.
fn check_fields(sink: &mut Sink, log: &LogReader, ino: u64, info: &InodeInfo) {
    let d = &info.disk;
    if info.orphan && d.nlink != 0 {
        sink.found(Finding::OrphanFlag { ino });
        sink.error(
            NAME,
            format!(
                "inode {ino} is flagged orphan but has {} links (mount would free it)",
                d.nlink
            ),
        );
    }
    if !info.orphan && d.nlink == 0 {
        sink.found(Finding::Namespace);
        sink.error(
            NAME,
            format!("inode {ino} has no links but is not flagged orphan (nothing would free it)"),
        );
    }
    if info.orphan {
        sink.stats.orphans += 1;
    }
    let unknown_flags = d.flags & !KNOWN_INODE_FLAGS;
    if unknown_flags != 0 || d.group as u64 >= log.sb.groups || (!info.is_dir() && d.parent != 0) {
        sink.found(Finding::InodeFields { ino });
    }
    if unknown_flags != 0 {
        sink.warning(
            NAME,
            format!(
                "inode {ino}: i_flags {:#x} has unknown bits {unknown_flags:#x}",
                d.flags
            ),
        );
    }
    if d.group as u64 >= log.sb.groups {
        sink.error(
            NAME,
            format!(
                "inode {ino}: home group {} does not exist ({} groups)",
                d.group, log.sb.groups
            ),
        );
    }
    match info.kind() {
        Some(FileKind::Directory) => sink.stats.directories += 1,
        Some(k) => {
            match k {
                FileKind::Regular => sink.stats.files += 1,
                FileKind::Symlink => sink.stats.symlinks += 1,
                _ => sink.stats.special_files += 1,
            }
            if d.parent != 0 {
                sink.warning(
                    NAME,
                    format!(
                        "inode {ino} is not a directory but its '..' field says {}",
                        d.parent
                    ),
                );
            }
        }
        // The decoder admits only known types; keep the checker honest anyway.
        None => sink.error(NAME, format!("inode {ino}: unknown mode {:#o}", d.mode)),
    }
}

/// The header and free list exactly as the checkpoint wrote them. (Mount rebuilds both from
/// the entries' flags, so a lie here goes unnoticed until something trusts them.)
fn check_free_list(sink: &mut Sink, log: &LogReader, state: &Loaded) {
    let bodies = &state.ifile_at_checkpoint;
    let per = entries16_per_block(log.sb.block_size) as u64;
    let usage_blocks = log.sb.segments.div_ceil(per);
    let Some(imap_blocks) = (bodies.len() as u64).checked_sub(1 + usage_blocks) else {
        return; // unreadable: reported by pass 1
    };
    let entry_count = imap_blocks * per;
    let entry = |i: u64| {
        let body = &bodies[(1 + usage_blocks + i / per) as usize];
        ImapEntry::decode(&body[16 * (i % per) as usize..])
    };
    let header = IfileHeader::decode(&bodies[0]);

    let zero = entry(0);
    if zero.flags != 0 || zero.addr != 0 {
        sink.warning(NAME, "inode map entry 0 (never used) is not zero");
        sink.found(Finding::FreeList);
    }
    let mut free = Vec::new();
    let mut allocated = 0u64;
    for i in 1..entry_count {
        if entry(i).allocated() {
            allocated += 1;
        } else {
            free.push(i);
        }
    }
    for (k, &i) in free.iter().enumerate() {
        let want = free.get(k + 1).copied().unwrap_or(0);
        let e = entry(i);
        if e.addr != want {
            sink.found(Finding::FreeList);
            sink.error(
                NAME,
                format!(
                    "free inode map entry {i} links to {}; the ascending free list needs {want}",
                    e.addr
                ),
            );
        }
        if e.flags != 0 {
            sink.found(Finding::FreeList);
            sink.warning(
                NAME,
                format!("free inode map entry {i} carries flags {:#x}", e.flags),
            );
        }
    }
    let head = free.first().copied().unwrap_or(0);
    if header.free_head != head {
        sink.found(Finding::FreeList);
        sink.error(
            NAME,
            format!(
                "IFile header: free list head is {}, the first free inode number is {head}",
                header.free_head
            ),
        );
    }
    if header.free_count != free.len() as u64 {
        sink.found(Finding::FreeList);
        sink.error(
            NAME,
            format!(
                "IFile header: {} free inode numbers, the inode map has {}",
                header.free_count,
                free.len()
            ),
        );
    }
    if header.live_inodes != allocated {
        sink.found(Finding::FreeList);
        sink.error(
            NAME,
            format!(
                "IFile header: {} live inodes, the inode map has {allocated} allocated",
                header.live_inodes
            ),
        );
    }
    let clean = (0..log.sb.segments)
        .filter(|&s| {
            let body = &bodies[(1 + s / per) as usize];
            SegUsage::decode(&body[16 * (s % per) as usize..]).is_clean()
        })
        .count() as u64;
    if header.clean_segments != clean {
        sink.found(Finding::FreeList);
        sink.error(
            NAME,
            format!(
                "IFile header: {} clean segments, the usage table has {clean}",
                header.clean_segments
            ),
        );
    }
}
