//! The bitmap file (group descriptors and data bitmaps), strict and lenient, and the node map.
#![no_main]
use dualfs::format::meta::GroupDesc;
use dualfs::format::{get_u32, get_u64, BITMAP_ID, NODEMAP_ID};
use dualfs::meta::datamap::DataMap;
use dualfs::meta::metafile::MetaFile;
use dualfs::meta::nodemap::NodeMap;
use dualfs_fuzz::BS;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = BS - 32;
    if data.len() < 12 {
        return;
    }
    let data_blocks = (get_u64(data, 0) % (1 << 20)).max(64);
    // At most 4096 groups (a superblock allows no more groups than log blocks).
    let per_group = (get_u32(data, 8) as u64 % (8 * body as u64))
        .max(1)
        .max(data_blocks.div_ceil(4096))
        .min(8 * body as u64);
    let bodies: Vec<Vec<u8>> = data[12..]
        .chunks(body)
        .take(64)
        .map(|c| {
            let mut v = c.to_vec();
            v.resize(body, 0);
            v
        })
        .collect();
    if let Some(b) = bodies.first() {
        for i in 0..body / 32 {
            let _ = GroupDesc::decode(&b[32 * i..]);
        }
    }
    let file = || MetaFile::new(BITMAP_ID, BS as u32, bodies.len() as u64);
    if let Ok(mut m) = DataMap::decode(file(), BS as u32, data_blocks, per_group, &bodies) {
        if let Some((s, n)) = m.reserve(data_blocks / 2, 8) {
            m.unreserve(s, n);
        }
        let _ = m.commit_alloc(1, 1);
        let _ = m.commit_free(1, 1);
    }
    let some: Vec<Option<Vec<u8>>> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| (i % 3 != 2).then(|| b.clone()))
        .collect();
    let mut m = DataMap::decode_lenient(Some(file()), BS as u32, data_blocks, per_group, &some);
    m.rebuild(&|b| b % 7 == 0, &[1, 2, 3]);
    for b in 0..m.file.len() {
        let _ = m.encode_block(b);
    }
    let nm = MetaFile::new(NODEMAP_ID, BS as u32, bodies.len() as u64);
    if let Ok(mut n) = NodeMap::decode(nm, BS as u32, &bodies) {
        let _ = n.get(u64::MAX);
        let _ = n.free_ids(64);
        if !n.addrs.is_empty() {
            n.set(1, 5);
        }
    }
});
