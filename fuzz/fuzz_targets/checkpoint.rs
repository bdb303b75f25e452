//! The checkpoint region decoder.
#![no_main]
use dualfs::format::checkpoint::Checkpoint;
use dualfs::format::get_u64;
use dualfs_fuzz::{block, maybe_seal, BS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut b = block(data, BS);
    maybe_seal(&mut b, 1024, 12, data);
    // The UUID tag the input itself carries, so the tag check passes too.
    let tag = get_u64(&b, 24);
    let _ = Checkpoint::decode(data, tag);
    if let Ok(cp) = Checkpoint::decode(&b, tag) {
        let again = Checkpoint::decode(&cp.encode(BS as u32), tag).expect("re-decode");
        assert_eq!(again, cp);
        let _ = (Checkpoint::region(cp.serial), cp.is_clean());
    }
});
