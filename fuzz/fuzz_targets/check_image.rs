//! The checker, and mount with a walk through the file system, over a small image damaged by
//! the input: a list of patches (block, offset, bytes), some sealed again (a consistent lie).
#![no_main]
use dualfs::format::{get_u16, BlockHeader};
use dualfs_fuzz::{base_image, check_and_mount, BS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (meta0, data0) = base_image();
    let (mut meta, mut dev_data) = (meta0.clone(), data0.clone());
    let blocks = meta.len() / BS;
    let mut rest = data;
    // Each patch: u16 block (of the metadata device; the top bit picks the data device),
    // u16 offset, u8 length, u8 flags (1: seal the block header CRC again), bytes.
    while rest.len() >= 6 {
        let blk = get_u16(rest, 0) as usize;
        let off = get_u16(rest, 2) as usize % BS;
        let len = (rest[4] as usize).min(rest.len() - 6);
        let seal = rest[5] & 1 == 1;
        let bytes = &rest[6..6 + len];
        rest = &rest[6 + len..];
        let (dev, nblocks) = if blk & 0x8000 != 0 {
            let n = dev_data.len() / BS;
            (&mut dev_data, n)
        } else {
            (&mut meta, blocks)
        };
        let b = (blk & 0x7fff) % nblocks.max(1);
        let start = b * BS + off;
        let end = (start + bytes.len()).min((b + 1) * BS);
        dev[start..end].copy_from_slice(&bytes[..end - start]);
        if seal {
            BlockHeader::seal(&mut dev[b * BS..(b + 1) * BS]);
        }
    }
    check_and_mount(meta, dev_data);
});
