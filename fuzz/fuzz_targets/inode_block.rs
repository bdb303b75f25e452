//! An INODES block: its count and every slot.
#![no_main]
use dualfs::format::inode::{check_inode_block, inode_in_block};
use dualfs_fuzz::{block, maybe_seal_block, BS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut b = block(data, BS);
    maybe_seal_block(&mut b, data);
    let _ = check_inode_block(data);
    if let Ok(n) = check_inode_block(&b) {
        for slot in 0..=n + 1 {
            let _ = inode_in_block(&b, slot);
        }
    }
});
