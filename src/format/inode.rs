//! Inodes and `INODES` blocks (docs/FORMAT.md "Inode").

use super::*;
use crate::{FsError, Result};

pub const NDIRECT: usize = 12;

/// `i_flags` bits (format 2). Linux's inode flags (`FS_*_FL`, as chattr(1) sets them) keep
/// their Linux values at the low end; DualFS's own bits are taken from the high end.
pub const FLAG_IMMUTABLE: u32 = 0x10;
pub const FLAG_APPEND: u32 = 0x20;
pub const FLAG_NODUMP: u32 = 0x40;
pub const FLAG_NOATIME: u32 = 0x80;
/// The flags FS_IOC_SETFLAGS may change.
pub const CHATTR_FLAGS: u32 = FLAG_IMMUTABLE | FLAG_APPEND | FLAG_NODUMP | FLAG_NOATIME;
/// The inode has extended attributes.
pub const IFLAG_XATTRS: u32 = 1 << 31;
/// At least one of them keeps its value in `VALUE` blocks.
pub const IFLAG_XATTR_BLOCKS: u32 = 1 << 30;
/// Every `i_flags` bit with a meaning; the checker reports (and fsck clears) the others.
pub const KNOWN_INODE_FLAGS: u32 = CHATTR_FLAGS | IFLAG_XATTRS | IFLAG_XATTR_BLOCKS;

/// Byte offsets of an inode's fields, named as in docs/FORMAT.md "Inode" (`i_nlink` is
/// `at::NLINK`).
mod at {
    pub const INO: usize = 0;
    pub const GENERATION: usize = 8;
    pub const MODE: usize = 12;
    pub const UID: usize = 16;
    pub const GID: usize = 20;
    pub const NLINK: usize = 24;
    pub const FLAGS: usize = 28;
    pub const SIZE: usize = 32;
    pub const BLOCKS: usize = 40;
    /// Times: seconds (i64) then nanoseconds (u32), 12 bytes each.
    pub const ATIME: usize = 48;
    pub const MTIME: usize = 60;
    pub const CTIME: usize = 72;
    pub const CRTIME: usize = 84;
    pub const PARENT: usize = 96;
    pub const RDEV: usize = 104;
    pub const GROUP: usize = 108;
    /// `NDIRECT` u64s; an inline symlink target is stored here instead (`INLINE`).
    pub const DIRECT: usize = 112;
    pub const INLINE: usize = DIRECT;
    /// Single, double and triple indirect: 3 u64s.
    pub const INDIRECT: usize = 208;
    pub const META_BLOCKS: usize = 232;
    pub const CRC: usize = 252;
}
const _: () = assert!(
    at::DIRECT + 8 * NDIRECT == at::INDIRECT
        && at::INLINE + INLINE_SYMLINK_MAX <= at::META_BLOCKS
        && at::CRC + 4 == INODE_SIZE
);
/// `ib_count` of an `INODES` block (u16): right after the block header, in slot 0.
const IB_COUNT: usize = HEADER_SIZE;

/// Seconds and nanoseconds, as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DiskTime {
    pub sec: i64,
    pub nsec: u32,
}

/// An inode as it is on disk. Meta files use the same layout (pointers are log addresses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskInode {
    pub ino: u64,
    pub generation: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub flags: u32,
    pub size: u64,
    pub blocks: u64,
    pub atime: DiskTime,
    pub mtime: DiskTime,
    pub ctime: DiskTime,
    pub crtime: DiskTime,
    pub parent: u64,
    pub rdev: u32,
    pub group: u32,
    pub direct: [u64; NDIRECT],
    /// Single, double and triple indirect block (log addresses).
    pub indirect: [u64; 3],
    pub meta_blocks: u64,
    /// Inline symlink target (fast symlink); when set, `direct`/`indirect` are not stored.
    pub inline: Option<Vec<u8>>,
}

fn put_time(b: &mut [u8], off: usize, t: DiskTime) {
    put_i64(b, off, t.sec);
    put_u32(b, off + 8, t.nsec);
}
fn get_time(b: &[u8], off: usize) -> DiskTime {
    DiskTime {
        sec: get_i64(b, off),
        nsec: get_u32(b, off + 8),
    }
}

impl DiskInode {
    pub fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    /// Encode into a 256-byte slot.
    pub fn encode_into(&self, b: &mut [u8]) {
        assert_eq!(b.len(), INODE_SIZE);
        assert!(self.ino != 0, "encoding inode number 0");
        crate::lockcheck::count_inode_encode();
        b.fill(0);
        put_u64(b, at::INO, self.ino);
        put_u32(b, at::GENERATION, self.generation);
        put_u32(b, at::MODE, self.mode);
        put_u32(b, at::UID, self.uid);
        put_u32(b, at::GID, self.gid);
        put_u32(b, at::NLINK, self.nlink);
        put_u32(b, at::FLAGS, self.flags);
        put_u64(b, at::SIZE, self.size);
        put_u64(b, at::BLOCKS, self.blocks);
        put_time(b, at::ATIME, self.atime);
        put_time(b, at::MTIME, self.mtime);
        put_time(b, at::CTIME, self.ctime);
        put_time(b, at::CRTIME, self.crtime);
        put_u64(b, at::PARENT, self.parent);
        put_u32(b, at::RDEV, self.rdev);
        put_u32(b, at::GROUP, self.group);
        match &self.inline {
            Some(t) => {
                assert!(
                    self.is_symlink()
                        && t.len() <= INLINE_SYMLINK_MAX
                        && t.len() as u64 == self.size
                );
                b[at::INLINE..at::INLINE + t.len()].copy_from_slice(t);
            }
            None => {
                for (i, p) in self.direct.iter().enumerate() {
                    put_u64(b, at::DIRECT + 8 * i, *p);
                }
                for (i, p) in self.indirect.iter().enumerate() {
                    put_u64(b, at::INDIRECT + 8 * i, *p);
                }
            }
        }
        put_u64(b, at::META_BLOCKS, self.meta_blocks);
        seal_crc(b, at::CRC);
    }

    pub fn encode(&self) -> [u8; INODE_SIZE] {
        let mut b = [0u8; INODE_SIZE];
        self.encode_into(&mut b);
        b
    }

    /// Decode a 256-byte slot; checks the CRC and that the type is known.
    pub fn decode(b: &[u8]) -> Result<DiskInode> {
        if b.len() != INODE_SIZE {
            return Err(FsError::corrupt(
                "inode",
                format!("slot of {} bytes", b.len()),
            ));
        }
        if !check_crc(b, at::CRC) {
            return Err(FsError::corrupt("inode", "CRC mismatch"));
        }
        let ino = get_u64(b, at::INO);
        if ino == 0 {
            return Err(FsError::corrupt("inode", "inode number 0"));
        }
        let mode = get_u32(b, at::MODE);
        let fmt = mode & libc::S_IFMT;
        let known = [
            libc::S_IFREG,
            libc::S_IFDIR,
            libc::S_IFLNK,
            libc::S_IFCHR,
            libc::S_IFBLK,
            libc::S_IFIFO,
            libc::S_IFSOCK,
        ];
        if !known.contains(&fmt) || mode & !(libc::S_IFMT | 0o7777) != 0 {
            return Err(FsError::corrupt(
                "inode",
                format!("inode {ino}: bad mode {mode:#o}"),
            ));
        }
        let size = get_u64(b, at::SIZE);
        let mut ino_rec = DiskInode {
            ino,
            generation: get_u32(b, at::GENERATION),
            mode,
            uid: get_u32(b, at::UID),
            gid: get_u32(b, at::GID),
            nlink: get_u32(b, at::NLINK),
            flags: get_u32(b, at::FLAGS),
            size,
            blocks: get_u64(b, at::BLOCKS),
            atime: get_time(b, at::ATIME),
            mtime: get_time(b, at::MTIME),
            ctime: get_time(b, at::CTIME),
            crtime: get_time(b, at::CRTIME),
            parent: get_u64(b, at::PARENT),
            rdev: get_u32(b, at::RDEV),
            group: get_u32(b, at::GROUP),
            meta_blocks: get_u64(b, at::META_BLOCKS),
            ..Default::default()
        };
        if fmt == libc::S_IFLNK && size as usize <= INLINE_SYMLINK_MAX {
            ino_rec.inline = Some(b[at::INLINE..at::INLINE + size as usize].to_vec());
        } else {
            if fmt == libc::S_IFLNK && size as usize > SYMLINK_MAX {
                return Err(FsError::corrupt(
                    "inode",
                    format!("inode {ino}: symlink of {size} bytes"),
                ));
            }
            for i in 0..NDIRECT {
                ino_rec.direct[i] = get_u64(b, at::DIRECT + 8 * i);
            }
            for i in 0..3 {
                ino_rec.indirect[i] = get_u64(b, at::INDIRECT + 8 * i);
            }
        }
        Ok(ino_rec)
    }
}

/// Number of inode slots in an `INODES` block.
pub fn inodes_per_block(block_size: u32) -> usize {
    block_size as usize / INODE_SIZE - 1
}

/// Build an `INODES` block from encoded inode slots (slot i+1 holds `slots[i]`).
pub fn encode_inode_block(block_size: u32, slots: &[[u8; INODE_SIZE]]) -> Vec<u8> {
    assert!(!slots.is_empty() && slots.len() <= inodes_per_block(block_size));
    let mut b = vec![0u8; block_size as usize];
    BlockHeader::new(BlockKind::Inodes, 0, 0, 0).write(&mut b);
    put_u16(&mut b, IB_COUNT, slots.len() as u16);
    for (i, s) in slots.iter().enumerate() {
        let off = INODE_SIZE * (i + 1);
        b[off..off + INODE_SIZE].copy_from_slice(s);
    }
    BlockHeader::seal(&mut b);
    b
}

/// Check an `INODES` block and return how many slots it uses.
pub fn check_inode_block(b: &[u8]) -> Result<usize> {
    BlockHeader::expect(b, BlockHeader::new(BlockKind::Inodes, 0, 0, 0))?;
    let n = get_u16(b, IB_COUNT) as usize;
    if n == 0 || n > inodes_per_block(b.len() as u32) {
        return Err(FsError::corrupt("inode block", format!("{n} inodes")));
    }
    Ok(n)
}

/// The inode in `slot` (1-based) of a checked `INODES` block.
pub fn inode_in_block(b: &[u8], slot: usize) -> Result<DiskInode> {
    let n = check_inode_block(b)?;
    if slot == 0 || slot > n {
        return Err(FsError::corrupt(
            "inode block",
            format!("slot {slot} of {n}"),
        ));
    }
    DiskInode::decode(&b[INODE_SIZE * slot..INODE_SIZE * (slot + 1)])
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn sample(ino: u64) -> DiskInode {
        DiskInode {
            ino,
            generation: 3,
            mode: libc::S_IFREG | 0o644,
            uid: 1000,
            gid: 100,
            nlink: 1,
            size: 123456,
            blocks: 31,
            atime: DiskTime { sec: 5, nsec: 6 },
            mtime: DiskTime { sec: -7, nsec: 8 },
            ctime: DiskTime { sec: 9, nsec: 10 },
            crtime: DiskTime { sec: 11, nsec: 12 },
            direct: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
            indirect: [100, 0, 300],
            meta_blocks: 2,
            ..Default::default()
        }
    }

    /// A symlink whose target is inline in the inode.
    fn inline_symlink() -> DiskInode {
        DiskInode {
            ino: 9,
            mode: libc::S_IFLNK | 0o777,
            size: 5,
            nlink: 1,
            inline: Some(b"a/b/c".to_vec()),
            ..Default::default()
        }
    }

    /// The bytes this encoder writes are the format's: pinned, so that no change to the code
    /// (naming an offset, say) moves a field unnoticed.
    #[test]
    fn encoding_is_pinned() {
        let block = encode_inode_block(4096, &[sample(42).encode(), inline_symlink().encode()]);
        assert_eq!(crc32fast::hash(&block), 0xd1042903);
    }

    #[test]
    fn inode_round_trip() {
        let i = sample(42);
        assert_eq!(DiskInode::decode(&i.encode()).unwrap(), i);
        let l = inline_symlink();
        assert_eq!(DiskInode::decode(&l.encode()).unwrap(), l);
    }

    #[test]
    fn inode_rejects_damage() {
        let e = sample(42).encode();
        for i in 0..INODE_SIZE {
            let mut c = e;
            c[i] ^= 1;
            assert!(DiskInode::decode(&c).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn inode_block_round_trip() {
        let slots: Vec<_> = (1..=15).map(|i| sample(i).encode()).collect();
        let b = encode_inode_block(4096, &slots);
        assert_eq!(check_inode_block(&b).unwrap(), 15);
        assert_eq!(inode_in_block(&b, 15).unwrap().ino, 15);
        assert!(inode_in_block(&b, 16).is_err());
        assert!(inode_in_block(&b, 0).is_err());
    }
}
