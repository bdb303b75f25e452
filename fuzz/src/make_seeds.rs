//! Writes starting inputs for every fuzz target into corpus/<target>/, cut from a real image
//! (superblocks, checkpoints, summaries, inode, indirect and node blocks, meta-file bodies),
//! so a short run starts inside the decoders rather than at their first checksum.
//!
//!   cargo run --release --bin make-seeds     (fuzz/run.sh does it when the corpus is empty)

use dualfs::device::{BlockDevice, MemDevice};
use dualfs::format::header::BLOCK_MAGIC;
use dualfs::format::summary::{Summary, SS_MAGIC};
use dualfs::format::superblock::Superblock;
use dualfs::format::{get_u32, HEADER_SIZE, INODE_SIZE};
use dualfs::log::checkpoint::read_newest;
use dualfs::log::recovery::load_tables;
use dualfs_fuzz::{base_image, BS};
use std::path::Path;
use std::sync::Arc;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn main() {
    let (meta, data) = base_image();
    let blk = |i: usize| &meta[i * BS..(i + 1) * BS];
    // An odd last byte asks the targets to seal the checksum: keep both kinds.
    let sealed = |b: &[u8]| {
        let mut v = b.to_vec();
        v.push(1);
        v
    };
    write("superblock", "meta", &sealed(&blk(0)[..4096]));
    write("superblock", "data", &sealed(&data[..4096]));
    write("checkpoint", "a", &sealed(blk(1)));
    write("checkpoint", "b", &sealed(blk(2)));
    let sb = Superblock::decode(blk(0)).unwrap();
    let tag = sb.uuid_tag();
    let (mut inode_blocks, mut ptr_blocks, mut nodes, mut sums) = (0, 0, 0, 0);
    for i in 3..meta.len() / BS {
        let b = blk(i);
        match get_u32(b, 0) {
            SS_MAGIC if sums < 8 => {
                if let Ok(n) = Summary::peek_len(b, tag) {
                    let end = ((i + n) * BS).min(meta.len());
                    write("summary", &format!("s{i}"), &sealed(&meta[i * BS..end]));
                    sums += 1;
                }
            }
            BLOCK_MAGIC => match b[4] {
                1 if inode_blocks < 8 => {
                    write("inode_block", &format!("b{i}"), &sealed(b));
                    write(
                        "inode",
                        &format!("i{i}"),
                        &sealed(&b[INODE_SIZE..2 * INODE_SIZE]),
                    );
                    inode_blocks += 1;
                }
                2 | 3 | 5 | 6 if ptr_blocks < 8 => {
                    write("pointer_block", &format!("p{i}"), &sealed(b));
                    write("meta_file", &format!("m{i}"), b);
                    ptr_blocks += 1;
                }
                4 | 7 if nodes < 12 => {
                    write("node", &format!("n{i}"), &sealed(b));
                    nodes += 1;
                }
                _ => {}
            },
            _ => {}
        }
    }
    // Meta-file bodies, with the geometry the targets read from the first bytes.
    let dev = Arc::new(MemDevice::from_bytes(meta.clone()));
    let sb = Arc::new(sb);
    let cp = read_newest(&sb, &*dev).unwrap();
    let t = load_tables(&sb, &*dev, &cp).unwrap();
    let bodies = |blocks: &[u64]| -> Vec<u8> {
        let mut out = Vec::new();
        for &a in blocks {
            let mut b = vec![0u8; BS];
            dev.read_at(&mut b, a * BS as u64).unwrap();
            out.extend_from_slice(&b[HEADER_SIZE..]);
        }
        out
    };
    let mut ifile = sb.segments.to_le_bytes().to_vec();
    ifile.extend(bodies(&t.ifile.file.blocks));
    write("ifile", "ifile", &ifile);
    let mut bitmap = sb.data_blocks.to_le_bytes().to_vec();
    bitmap.extend(sb.blocks_per_group.to_le_bytes());
    bitmap.extend(bodies(&t.data.file.blocks));
    write("bitmap_file", "bitmap", &bitmap);
    let mut mf = cp.ifile.encode().to_vec();
    mf.extend(bodies(&t.ifile.file.blocks));
    write("meta_file", "ifile-inode", &mf);
    write("acl", "default", &dualfs_fuzz::ACL);
    // check_image: a few patches, from nothing to a sealed lie in an inode block.
    write("check_image", "none", &[]);
    write("check_image", "flip", &[3, 0, 16, 0, 1, 0, 0xff]);
    write(
        "check_image",
        "lie",
        &[3, 0, 40, 1, 8, 1, 0, 0, 0, 0, 0, 0, 0, 0x40],
    );
    println!("seeds written under {}/corpus", env!("CARGO_MANIFEST_DIR"));
}
