//! The segment summary decoder (one or more summary blocks).
#![no_main]
use dualfs::format::get_u64;
use dualfs::format::summary::Summary;
use dualfs_fuzz::{maybe_seal, BS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let n = (data.len().div_ceil(BS)).clamp(1, 4);
    let mut b = data[..data.len().min(n * BS)].to_vec();
    b.resize(n * BS, 0);
    let len = b.len();
    maybe_seal(&mut b, len, 8, data);
    let tag = get_u64(&b, 32);
    let _ = Summary::peek_len(&b, tag);
    let _ = Summary::decode(data, tag);
    if let Ok(s) = Summary::decode(&b, tag) {
        let _ = (s.block_count(), s.total_blocks());
        for d in &s.descriptors {
            let _ = d.header();
        }
        if Summary::blocks_needed(BS as u32, s.descriptors.len(), s.records.len())
            <= s.summary_blocks as usize
        {
            let again = Summary::decode(&s.encode(BS as u32), tag).expect("re-decode");
            assert_eq!(again, s);
        }
    }
});
