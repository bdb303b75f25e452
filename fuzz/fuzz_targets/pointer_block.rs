//! Indirect, meta-indirect, symlink and meta blocks, each checked against the header it is
//! expected to have (taken from the input, so it often matches).
#![no_main]
use dualfs::format::meta::{decode_meta_block, decode_pointer_block, decode_symlink_block};
use dualfs::format::{BlockHeader, BlockKind};
use dualfs_fuzz::{block, maybe_seal_block, BS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut b = block(data, BS);
    maybe_seal_block(&mut b, data);
    let h = BlockHeader::read(&b);
    let (level, owner, index) = match &h {
        Ok(h) => (h.level, h.owner, h.index),
        Err(_) => (1, 1, 12),
    };
    for kind in [BlockKind::Indirect, BlockKind::MetaIndirect] {
        let _ = decode_pointer_block(&b, BlockHeader::new(kind, level, owner, index));
    }
    let _ = decode_symlink_block(&b, owner, index);
    let _ = decode_meta_block(&b, owner, index);
    let _ = BlockHeader::expect(data, BlockHeader::new(BlockKind::Node, level, owner, index));
});
