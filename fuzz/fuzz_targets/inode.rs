//! One inode (256 bytes).
#![no_main]
use dualfs::format::inode::DiskInode;
use dualfs::format::INODE_SIZE;
use dualfs_fuzz::{block, maybe_seal};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut b = block(data, INODE_SIZE);
    maybe_seal(&mut b, INODE_SIZE, 252, data);
    let _ = DiskInode::decode(data);
    if let Ok(d) = DiskInode::decode(&b) {
        let again = DiskInode::decode(&d.encode()).expect("re-decode");
        assert_eq!(again, d);
        let _ = d.is_symlink();
    }
});
