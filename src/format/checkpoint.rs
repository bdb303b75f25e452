//! Checkpoint regions (docs/FORMAT.md "Checkpoint region").

use super::inode::DiskInode;
use super::*;
use crate::{FsError, Result};

pub const CP_MAGIC: &[u8; 8] = b"DFSCKPT1";
const CP_SIZE: usize = 1024;
pub const CP_CLEAN: u32 = 1;
/// Log addresses of the two regions.
pub const CP_REGION_A: u64 = 1;
pub const CP_REGION_B: u64 = 2;

/// Byte offsets of the checkpoint's fields, named as in docs/FORMAT.md "Checkpoint region"
/// (`cp_log_head` is `at::LOG_HEAD`).
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const CRC: usize = 12;
    pub const SERIAL: usize = 16;
    pub const UUID_TAG: usize = 24;
    pub const LOG_HEAD: usize = 32;
    pub const NEXT_SEGMENT: usize = 40;
    pub const NEXT_SERIAL: usize = 48;
    pub const TIME_NS: usize = 56;
    pub const FLAGS: usize = 64;
    pub const NEXT_NODE_ID: usize = 72;
    pub const FREE_DATA_BLOCKS: usize = 80;
    pub const LIVE_INODES: usize = 88;
    /// The meta files' inodes, `INODE_SIZE` bytes each.
    pub const IFILE_INODE: usize = 256;
    pub const BITMAP_INODE: usize = 512;
    pub const NODEMAP_INODE: usize = 768;
}
// The last inode ends where the checksummed part does.
const _: () = assert!(at::NODEMAP_INODE + INODE_SIZE == CP_SIZE);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub serial: u64,
    pub uuid_tag: u64,
    pub log_head: u64,
    pub next_segment: u64,
    pub next_serial: u64,
    pub time_ns: u64,
    pub flags: u32,
    pub next_node_id: u64,
    pub free_data_blocks: u64,
    pub live_inodes: u64,
    pub ifile: DiskInode,
    pub bitmap: DiskInode,
    pub nodemap: DiskInode,
}

impl Checkpoint {
    /// The region a checkpoint of this serial goes to.
    pub fn region(serial: u64) -> u64 {
        if serial % 2 == 0 {
            CP_REGION_A
        } else {
            CP_REGION_B
        }
    }

    pub fn is_clean(&self) -> bool {
        self.flags & CP_CLEAN != 0
    }

    pub fn encode(&self, block_size: u32) -> Vec<u8> {
        let mut b = vec![0u8; block_size as usize];
        b[at::MAGIC..at::MAGIC + CP_MAGIC.len()].copy_from_slice(CP_MAGIC);
        put_u32(&mut b, at::VERSION, FORMAT_VERSION);
        put_u64(&mut b, at::SERIAL, self.serial);
        put_u64(&mut b, at::UUID_TAG, self.uuid_tag);
        put_u64(&mut b, at::LOG_HEAD, self.log_head);
        put_u64(&mut b, at::NEXT_SEGMENT, self.next_segment);
        put_u64(&mut b, at::NEXT_SERIAL, self.next_serial);
        put_u64(&mut b, at::TIME_NS, self.time_ns);
        put_u32(&mut b, at::FLAGS, self.flags);
        put_u64(&mut b, at::NEXT_NODE_ID, self.next_node_id);
        put_u64(&mut b, at::FREE_DATA_BLOCKS, self.free_data_blocks);
        put_u64(&mut b, at::LIVE_INODES, self.live_inodes);
        for (inode, off) in [
            (&self.ifile, at::IFILE_INODE),
            (&self.bitmap, at::BITMAP_INODE),
            (&self.nodemap, at::NODEMAP_INODE),
        ] {
            inode.encode_into(&mut b[off..off + INODE_SIZE]);
        }
        seal_crc(&mut b[..CP_SIZE], at::CRC);
        b
    }

    pub fn decode(b: &[u8], uuid_tag: u64) -> Result<Checkpoint> {
        let bad = |d: String| FsError::corrupt("checkpoint", d);
        if b.len() < CP_SIZE || &b[at::MAGIC..at::MAGIC + CP_MAGIC.len()] != CP_MAGIC {
            return Err(bad("no checkpoint (bad magic)".into()));
        }
        if get_u32(b, at::VERSION) != FORMAT_VERSION {
            return Err(bad(format!("version {}", get_u32(b, at::VERSION))));
        }
        if !check_crc(&b[..CP_SIZE], at::CRC) {
            return Err(bad("CRC mismatch".into()));
        }
        if get_u64(b, at::UUID_TAG) != uuid_tag {
            return Err(bad("checkpoint of another file system".into()));
        }
        let meta = |off: usize, id: u64| -> Result<DiskInode> {
            let i = DiskInode::decode(&b[off..off + INODE_SIZE])?;
            if i.ino != id {
                return Err(bad(format!("meta file inode {} where {id} belongs", i.ino)));
            }
            Ok(i)
        };
        Ok(Checkpoint {
            serial: get_u64(b, at::SERIAL),
            uuid_tag: get_u64(b, at::UUID_TAG),
            log_head: get_u64(b, at::LOG_HEAD),
            next_segment: get_u64(b, at::NEXT_SEGMENT),
            next_serial: get_u64(b, at::NEXT_SERIAL),
            time_ns: get_u64(b, at::TIME_NS),
            flags: get_u32(b, at::FLAGS),
            next_node_id: get_u64(b, at::NEXT_NODE_ID),
            free_data_blocks: get_u64(b, at::FREE_DATA_BLOCKS),
            live_inodes: get_u64(b, at::LIVE_INODES),
            ifile: meta(at::IFILE_INODE, IFILE_ID)?,
            bitmap: meta(at::BITMAP_INODE, BITMAP_ID)?,
            nodemap: meta(at::NODEMAP_INODE, NODEMAP_ID)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta_inode(id: u64) -> DiskInode {
        DiskInode {
            ino: id,
            mode: libc::S_IFREG | 0o600,
            nlink: 1,
            size: 4096 * 3,
            direct: [5; 12],
            ..Default::default()
        }
    }

    fn sample() -> Checkpoint {
        Checkpoint {
            serial: 7,
            uuid_tag: 42,
            log_head: 300,
            next_segment: 9,
            next_serial: 1000,
            time_ns: 5,
            flags: CP_CLEAN,
            next_node_id: 66,
            free_data_blocks: 1234,
            live_inodes: 10,
            ifile: meta_inode(IFILE_ID),
            bitmap: meta_inode(BITMAP_ID),
            nodemap: meta_inode(NODEMAP_ID),
        }
    }

    /// The bytes this encoder writes are the format's: pinned, so that no change to the code
    /// (naming an offset, say) moves a field unnoticed.
    #[test]
    fn encoding_is_pinned() {
        assert_eq!(crc32fast::hash(&sample().encode(4096)), 0x262cb38a);
    }

    #[test]
    fn round_trip() {
        let c = sample();
        let b = c.encode(4096);
        assert_eq!(Checkpoint::decode(&b, 42).unwrap(), c);
        assert!(Checkpoint::decode(&b, 43).is_err());
        let mut d = b.clone();
        d[40] ^= 4;
        assert!(Checkpoint::decode(&d, 42).is_err());
        assert_eq!(Checkpoint::region(7), CP_REGION_B);
    }
}
