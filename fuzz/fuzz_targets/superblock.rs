//! The superblock decoder (both devices), and the encoder on whatever it accepts.
#![no_main]
use dualfs::format::superblock::{Superblock, SB_SIZE};
use dualfs_fuzz::{block, maybe_seal};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut b = block(data, SB_SIZE);
    maybe_seal(&mut b, SB_SIZE, 12, data);
    let _ = Superblock::decode(data);
    if let Ok(sb) = Superblock::decode(&b) {
        // What decodes, encodes, and decodes to the same.
        let again = Superblock::decode(&sb.encode()).expect("re-decode");
        assert_eq!(again, sb);
        for a in [0, 1, sb.meta_blocks, u64::MAX] {
            let _ = sb.segment_of(a);
        }
        let s = sb.segment_of(sb.meta_blocks.saturating_sub(1));
        let _ = (sb.segment_start(s), sb.segment_end(s), sb.uuid_tag());
        let _ = sb.pairs_with(&sb);
    }
});
