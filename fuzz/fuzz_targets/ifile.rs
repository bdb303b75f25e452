//! The IFile (header, segment usage table, inode map) from the bodies of its blocks, and the
//! entry decoders on their own.
#![no_main]
use dualfs::format::get_u64;
use dualfs::format::meta::{IfileHeader, ImapEntry, SegUsage};
use dualfs::format::IFILE_ID;
use dualfs::meta::ifile::Ifile;
use dualfs::meta::metafile::MetaFile;
use dualfs_fuzz::BS;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = BS - 32;
    if data.len() < 8 {
        return;
    }
    // Segments: from the input, bounded (the superblock bounds them for real).
    let segments = get_u64(data, 0) % 4096;
    let bodies: Vec<Vec<u8>> = data[8..]
        .chunks(body)
        .take(64)
        .map(|c| {
            let mut v = c.to_vec();
            v.resize(body, 0);
            v
        })
        .collect();
    if let Some(b) = bodies.first() {
        let _ = IfileHeader::decode(b);
        for i in 0..body / 16 {
            let _ = (
                SegUsage::decode(&b[16 * i..]),
                ImapEntry::decode(&b[16 * i..]),
            );
        }
    }
    let file = MetaFile::new(IFILE_ID, BS as u32, bodies.len() as u64);
    if let Ok(mut f) = Ifile::decode(file, BS as u32, segments, &bodies) {
        // What loads can be used: entries, frees, growth, encoding.
        let n = f.imap.len() as u64;
        for ino in [0, 1, n / 2, n.saturating_sub(1), n, n + 1] {
            let _ = f.entry(ino);
        }
        if n > 1 {
            let _ = f.free_inode(n - 1, 7);
        }
        for b in 0..f.file.len() {
            let _ = f.encode_block(b);
        }
    }
});
