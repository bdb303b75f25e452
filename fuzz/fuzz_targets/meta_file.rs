//! A meta file's block map (direct and indirect pointers, read through a fake log).
#![no_main]
use dualfs::format::inode::DiskInode;
use dualfs::format::{BlockHeader, BlockKind, IFILE_ID, INODE_SIZE};
use dualfs::meta::metafile::MetaFile;
use dualfs::FsError;
use dualfs_fuzz::{block, BS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < INODE_SIZE {
        return;
    }
    // The inode from the first bytes (decoded or not, its fields are what matter here).
    let mut ib = block(data, INODE_SIZE);
    dualfs::format::seal_crc(&mut ib, 252);
    ib[12..16].copy_from_slice(&(libc::S_IFREG | 0o600).to_le_bytes());
    dualfs::format::seal_crc(&mut ib, 252);
    let Ok(inode) = DiskInode::decode(&ib) else {
        return;
    };
    // The "log": block i of the rest of the input, sealed as a meta-indirect block.
    let rest = &data[INODE_SIZE..];
    let mut read = |addr: u64| -> dualfs::Result<Vec<u8>> {
        let i = (addr % 64) as usize;
        let chunk = rest.chunks(BS).nth(i).unwrap_or(&[]);
        let mut b = block(chunk, BS);
        if addr % 2 == 0 && b.len() >= 32 {
            BlockHeader::new(BlockKind::MetaIndirect, b[5].clamp(1, 3), IFILE_ID, 0).write(&mut b);
            BlockHeader::seal(&mut b);
        }
        if addr == 0 {
            return Err(FsError::corrupt("fuzz", "address 0"));
        }
        Ok(b)
    };
    if let Ok(mf) = MetaFile::load(IFILE_ID, BS as u32, 1 << 16, &inode, &mut read) {
        let _ = mf.inode(&inode);
        for b in [0, mf.len().saturating_sub(1)] {
            let _ = mf.ancestors(b);
        }
    }
});
