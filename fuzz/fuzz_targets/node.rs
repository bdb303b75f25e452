//! A B-epsilon tree node or VALUE block (entries, attribute records, range messages): decode
//! and validate; what passes re-encodes to itself.
#![no_main]
use dualfs::format::node::{decode, encode, validate};
use dualfs::format::BlockHeader;
use dualfs_fuzz::{block, maybe_seal_block, BS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut b = block(data, BS);
    maybe_seal_block(&mut b, data);
    let id = BlockHeader::read(&b).map(|h| h.owner).unwrap_or(1);
    let _ = decode(data, id);
    if let Ok(node) = decode(&b, id) {
        validate(id, &node, BS).expect("decode validates");
        assert!(node.encoded_len() <= BS);
        let again = decode(&encode(id, &node, BS), id).expect("re-decode");
        assert_eq!(again, node);
    }
});
