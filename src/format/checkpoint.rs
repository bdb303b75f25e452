//! Checkpoint regions (docs/FORMAT.md "Checkpoint region").

use super::inode::DiskInode;
use super::*;
use crate::{FsError, Result};

pub const CP_MAGIC: &[u8; 8] = b"DFSCKPT1";
const CRC_OFF: usize = 12;
const CP_SIZE: usize = 1024;
pub const CP_CLEAN: u32 = 1;
/// Log addresses of the two regions.
pub const CP_REGION_A: u64 = 1;
pub const CP_REGION_B: u64 = 2;

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
        b[0..8].copy_from_slice(CP_MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u64(&mut b, 16, self.serial);
        put_u64(&mut b, 24, self.uuid_tag);
        put_u64(&mut b, 32, self.log_head);
        put_u64(&mut b, 40, self.next_segment);
        put_u64(&mut b, 48, self.next_serial);
        put_u64(&mut b, 56, self.time_ns);
        put_u32(&mut b, 64, self.flags);
        put_u64(&mut b, 72, self.next_node_id);
        put_u64(&mut b, 80, self.free_data_blocks);
        put_u64(&mut b, 88, self.live_inodes);
        self.ifile.encode_into(&mut b[256..512]);
        self.bitmap.encode_into(&mut b[512..768]);
        self.nodemap.encode_into(&mut b[768..1024]);
        seal_crc(&mut b[..CP_SIZE], CRC_OFF);
        b
    }

    pub fn decode(b: &[u8], uuid_tag: u64) -> Result<Checkpoint> {
        let bad = |d: String| FsError::corrupt("checkpoint", d);
        if b.len() < CP_SIZE || &b[0..8] != CP_MAGIC {
            return Err(bad("no checkpoint (bad magic)".into()));
        }
        if get_u32(b, 8) != FORMAT_VERSION {
            return Err(bad(format!("version {}", get_u32(b, 8))));
        }
        if !check_crc(&b[..CP_SIZE], CRC_OFF) {
            return Err(bad("CRC mismatch".into()));
        }
        if get_u64(b, 24) != uuid_tag {
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
            serial: get_u64(b, 16),
            uuid_tag: get_u64(b, 24),
            log_head: get_u64(b, 32),
            next_segment: get_u64(b, 40),
            next_serial: get_u64(b, 48),
            time_ns: get_u64(b, 56),
            flags: get_u32(b, 64),
            next_node_id: get_u64(b, 72),
            free_data_blocks: get_u64(b, 80),
            live_inodes: get_u64(b, 88),
            ifile: meta(256, IFILE_ID)?,
            bitmap: meta(512, BITMAP_ID)?,
            nodemap: meta(768, NODEMAP_ID)?,
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

    #[test]
    fn round_trip() {
        let c = Checkpoint {
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
        };
        let b = c.encode(4096);
        assert_eq!(Checkpoint::decode(&b, 42).unwrap(), c);
        assert!(Checkpoint::decode(&b, 43).is_err());
        let mut d = b.clone();
        d[40] ^= 4;
        assert!(Checkpoint::decode(&d, 42).is_err());
        assert_eq!(Checkpoint::region(7), CP_REGION_B);
    }
}
