//! Lies told on disk: a structure is rewritten in place and its CRC re-sealed, so the damage
//! looks consistent and only the checker's cross-checks can find it.

use super::image::Image;
use crate::device::BlockDevice;
use crate::format::checkpoint::Checkpoint;
use crate::format::inode::DiskInode;
use crate::format::meta::{
    entries16_per_block, entries32_per_block, GroupDesc, IfileHeader, ImapEntry, SegUsage,
};
use crate::format::summary::Summary;
use crate::format::superblock::Superblock;
use crate::format::{
    get_u16, get_u64, put_u64, BlockHeader, BITMAP_ID, HEADER_SIZE, IFILE_ID, INODE_SIZE,
};
use crate::log::checkpoint::read_newest;
use crate::log::recovery::load_tables;
use crate::meta::Tables;
use std::sync::Arc;

/// Where things are, as the newest checkpoint says (test images are cleanly unmounted, so
/// there is nothing to roll forward).
pub struct Layout {
    pub sb: Superblock,
    pub cp: Checkpoint,
    pub tables: Tables,
}

pub fn layout(img: &Image) -> Layout {
    let sb = img.superblock();
    let cp = read_newest(&sb, &*img.meta).unwrap();
    let tables = load_tables(&Arc::new(sb.clone()), &*img.meta, &cp).unwrap();
    Layout { sb, cp, tables }
}

/// The orphan the workload leaves (a file unlinked while open): its inode number.
pub fn orphan_of(img: &Image) -> u64 {
    layout(img)
        .tables
        .ifile
        .imap
        .iter()
        .position(|e| e.allocated() && e.flags & crate::format::meta::IMAP_ORPHAN != 0)
        .expect("the image holds an orphan") as u64
}

pub fn read_block(img: &Image, addr: u64) -> Vec<u8> {
    let mut b = vec![0u8; super::image::BS as usize];
    img.meta.read_at(&mut b, addr * super::image::BS).unwrap();
    b
}

pub fn write_block(img: &Image, addr: u64, b: &[u8]) {
    img.meta.write_at(b, addr * super::image::BS).unwrap();
}

/// Change log block `addr` and re-seal its header CRC.
pub fn rewrite_log_block(img: &Image, addr: u64, f: impl FnOnce(&mut [u8])) {
    let mut b = read_block(img, addr);
    f(&mut b);
    BlockHeader::seal(&mut b);
    write_block(img, addr, &b);
}

pub fn inode(img: &Image, ino: u64) -> DiskInode {
    let e = layout(img).tables.ifile.entry(ino).expect("allocated");
    let b = read_block(img, e.addr);
    let slot = e.slot as usize;
    DiskInode::decode(&b[INODE_SIZE * slot..INODE_SIZE * (slot + 1)]).unwrap()
}

/// Change inode `ino` where the inode map says it is (inode CRC and block CRC re-sealed).
pub fn rewrite_inode(img: &Image, ino: u64, f: impl FnOnce(&mut DiskInode)) {
    let e = layout(img).tables.ifile.entry(ino).expect("allocated");
    let slot = e.slot as usize;
    rewrite_log_block(img, e.addr, |b| {
        let raw = &mut b[INODE_SIZE * slot..INODE_SIZE * (slot + 1)];
        let mut d = DiskInode::decode(raw).unwrap();
        f(&mut d);
        d.encode_into(raw);
    });
}

/// Change the body of block `index` of meta file `file`.
pub fn rewrite_meta_block(img: &Image, file: u64, index: u64, f: impl FnOnce(&mut [u8])) {
    let l = layout(img);
    let mf = match file {
        IFILE_ID => &l.tables.ifile.file,
        BITMAP_ID => &l.tables.data.file,
        _ => &l.tables.nodes.file,
    };
    rewrite_log_block(img, mf.blocks[index as usize], |b| f(&mut b[HEADER_SIZE..]));
}

/// (entries per IFile block, segment usage blocks)
fn ifile_geometry(sb: &Superblock) -> (u64, u64) {
    let per = entries16_per_block(sb.block_size) as u64;
    (per, sb.segments.div_ceil(per))
}

pub fn rewrite_usage(img: &Image, seg: u64, f: impl FnOnce(&mut SegUsage)) {
    let (per, _) = ifile_geometry(&img.superblock());
    let off = 16 * (seg % per) as usize;
    rewrite_meta_block(img, IFILE_ID, 1 + seg / per, |body| {
        let mut u = SegUsage::decode(&body[off..]);
        f(&mut u);
        u.encode(&mut body[off..]);
    });
}

pub fn rewrite_imap(img: &Image, ino: u64, f: impl FnOnce(&mut ImapEntry)) {
    let (per, usage_blocks) = ifile_geometry(&img.superblock());
    let off = 16 * (ino % per) as usize;
    rewrite_meta_block(img, IFILE_ID, 1 + usage_blocks + ino / per, |body| {
        let mut e = ImapEntry::decode(&body[off..]);
        f(&mut e);
        e.encode(&mut body[off..]);
    });
}

/// The inode map entry as written (free entries carry their free-list link).
pub fn raw_imap(img: &Image, ino: u64) -> ImapEntry {
    let (per, usage_blocks) = ifile_geometry(&img.superblock());
    let l = layout(img);
    let b = read_block(
        img,
        l.tables.ifile.file.blocks[(1 + usage_blocks + ino / per) as usize],
    );
    ImapEntry::decode(&b[HEADER_SIZE + 16 * (ino % per) as usize..])
}

pub fn rewrite_ifile_header(img: &Image, f: impl FnOnce(&mut IfileHeader)) {
    rewrite_meta_block(img, IFILE_ID, 0, |body| {
        let mut h = IfileHeader::decode(body);
        f(&mut h);
        h.encode(body);
    });
}

/// Mark data block `block` allocated or free, keeping its group's free count in step (the
/// loader refuses a bitmap and descriptor that disagree).
pub fn set_data_block(img: &Image, block: u64, allocated: bool) {
    let l = layout(img);
    let per = entries32_per_block(l.sb.block_size) as u64;
    let desc_blocks = l.sb.groups.div_ceil(per);
    let bpg = l.sb.blocks_per_group as u64;
    let (g, bit) = (block / bpg, block % bpg);
    let blocks = &l.tables.data.file.blocks;
    rewrite_log_block(img, blocks[(desc_blocks + g) as usize], |b| {
        let (byte, mask) = (HEADER_SIZE + (bit / 8) as usize, 1u8 << (bit % 8));
        assert_ne!(
            b[byte] & mask != 0,
            allocated,
            "data block {block} already had that state"
        );
        b[byte] ^= mask;
    });
    let off = HEADER_SIZE + 32 * (g % per) as usize;
    rewrite_log_block(img, blocks[(g / per) as usize], |b| {
        let mut gd = GroupDesc::decode(&b[off..]);
        if allocated {
            gd.free_blocks -= 1;
        } else {
            gd.free_blocks += 1;
        }
        gd.encode(&mut b[off..]);
    });
}

/// Change the checkpoint in `region` (block 1 or 2) and re-seal it.
pub fn rewrite_checkpoint(img: &Image, region: u64, f: impl FnOnce(&mut Checkpoint)) {
    let sb = img.superblock();
    let mut cp = Checkpoint::decode(&read_block(img, region), sb.uuid_tag()).unwrap();
    f(&mut cp);
    write_block(img, region, &cp.encode(sb.block_size));
}

pub fn zero_block(img: &Image, addr: u64) {
    write_block(img, addr, &vec![0u8; super::image::BS as usize]);
}

/// Point entry (`dir`, `name`) at `ino` inside the real tree's root node, which must be a leaf
/// (docs/FORMAT.md "B-epsilon tree node": entries from byte 40, each dir, hash, ino u64,
/// type u8, name_len u8, name).
pub fn rewrite_entry_in_root_leaf(img: &Image, dir: u64, name: &[u8], ino: u64) {
    let addr = layout(img).tables.nodes.get(crate::format::ROOT_NODE_ID);
    assert_ne!(addr, 0, "the node map has no root node");
    rewrite_log_block(img, addr, |b| {
        assert_eq!(b[5], 0, "the root node is not a leaf: use a smaller tree");
        let count = get_u16(b, 32) as usize;
        let mut off = 40;
        for _ in 0..count {
            let len = b[off + 25] as usize;
            if get_u64(b, off) == dir && &b[off + 26..off + 26 + len] == name {
                put_u64(b, off + 16, ino);
                return;
            }
            off += 26 + len;
        }
        panic!("no entry '{}' in directory {dir}", name.escape_ascii());
    });
}

/// Where each partial segment after the newest checkpoint starts, and its summary, as far as
/// roll-forward would follow them.
pub fn parts_after_checkpoint(img: &Image) -> Vec<(u64, Summary)> {
    let l = layout(img);
    let (sb, tag) = (&l.sb, l.sb.uuid_tag());
    let (mut addr, mut serial) = (l.cp.log_head, l.cp.next_serial);
    let mut parts = Vec::new();
    while let Ok(n) = Summary::peek_len(&read_block(img, addr), tag) {
        let raw: Vec<u8> = (0..n as u64)
            .flat_map(|i| read_block(img, addr + i))
            .collect();
        let Ok(s) = Summary::decode(&raw, tag) else {
            break;
        };
        if s.serial != serial || s.ckpt_serial != l.cp.serial {
            break;
        }
        let start = addr;
        addr += s.total_blocks();
        if sb.segment_end(sb.segment_of(start)) - addr < 2 {
            addr = sb.segment_start(s.next_segment);
        }
        serial += 1;
        parts.push((start, s));
    }
    parts
}
