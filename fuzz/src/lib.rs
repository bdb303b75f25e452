//! What the fuzz targets share: sealing checksums (so the fuzzer gets past them and into the
//! decoders' real work), and a small file system image to damage.

use dualfs::device::{BlockDevice, MemDevice};
use dualfs::format::{seal_crc, BlockHeader};
use dualfs::fs::{Caller, FileKind, Fs, MountOptions};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub const BS: usize = 4096;

/// `data` as a block of `len` bytes (cut or zero-padded).
pub fn block(data: &[u8], len: usize) -> Vec<u8> {
    let mut b = data[..data.len().min(len)].to_vec();
    b.resize(len, 0);
    b
}

/// Seal a log block's header CRC when the input's last byte asks for it (half of the inputs
/// get past the CRC check, the other half test it).
pub fn maybe_seal_block(b: &mut [u8], data: &[u8]) {
    if data.last().is_some_and(|x| x & 1 == 1) && b.len() >= 32 {
        BlockHeader::seal(b);
    }
}

/// The same for a structure whose CRC sits at `crc_off` and covers `b[..len]`.
pub fn maybe_seal(b: &mut [u8], len: usize, crc_off: usize, data: &[u8]) {
    if data.last().is_some_and(|x| x & 1 == 1) && b.len() >= len {
        seal_crc(&mut b[..len], crc_off);
    }
}

pub const U: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: 0,
    umask: 0,
    holds_fsetid: None,
};

fn quiet() -> MountOptions {
    MountOptions {
        flush_interval: Duration::from_secs(3600),
        checkpoint_interval: Duration::from_secs(3600),
        cache_bytes: 16 << 20,
        ..MountOptions::default()
    }
}

/// `user::rw- user:1000:r-- group::r-- mask::r-- other::---`.
pub const ACL: [u8; 44] = [
    2, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255, 2, 0, 4, 0, 232, 3, 0, 0, 4, 0, 4, 0, 255, 255,
    255, 255, 16, 0, 4, 0, 255, 255, 255, 255, 32, 0, 0, 0, 255, 255, 255, 255,
];

/// A small file system (4 MiB log of 16 segments, 4 MiB data) with directories, files of
/// several sizes (one through indirect blocks), links, symlinks and an open-unlinked file;
/// (metadata bytes, data bytes), made once.
pub fn base_image() -> &'static (Vec<u8>, Vec<u8>) {
    static BASE: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    BASE.get_or_init(|| {
        let meta = Arc::new(MemDevice::new(16 * 64 * BS as u64));
        let data = Arc::new(MemDevice::new(4 << 20));
        let params = dualfs::mkfs::MkfsParams {
            segment_blocks: 64,
            blocks_per_group: 512,
            ..Default::default()
        };
        dualfs::mkfs::mkfs(meta.clone(), data.clone(), &params).unwrap();
        let fs = Fs::mount(meta.clone(), data.clone(), quiet()).unwrap();
        let root = 1;
        let a = fs.mkdir(&U, root, b"a", 0o755).unwrap().ino;
        let mut big = 0;
        for (i, len) in [0usize, 100, 5000, 60 * BS].into_iter().enumerate() {
            let (attr, fh) = fs
                .create(&U, a, format!("f{i}").as_bytes(), 0o644, libc::O_WRONLY)
                .unwrap();
            fs.write(attr.ino, fh, 0, &vec![i as u8 + 1; len]).unwrap();
            fs.release(attr.ino, fh).unwrap();
            big = attr.ino;
        }
        fs.link(&U, big, root, b"big").unwrap();
        fs.symlink(&U, a, b"short", b"f1").unwrap();
        fs.symlink(&U, root, b"long", &[b'x'; 300]).unwrap();
        fs.mknod(&U, root, b"fifo", libc::S_IFIFO | 0o644, 0)
            .unwrap();
        // Attributes: inline, in VALUE blocks, an ACL; one of a file freed while open.
        let flags = dualfs::fs::XattrFlags::default();
        let r = dualfs::fs::Caller::ROOT;
        fs.setxattr(&r, big, b"user.k", b"v", flags).unwrap();
        fs.setxattr(&r, big, b"user.large", &[3; 6000], flags).unwrap();
        fs.setxattr(&r, a, b"system.posix_acl_default", &ACL, flags)
            .unwrap();
        let (o, fh) = fs.create(&U, root, b"open", 0o644, libc::O_RDWR).unwrap();
        fs.write(o.ino, fh, 0, &[7; 3000]).unwrap();
        fs.setxattr(&r, o.ino, b"trusted.t", &[4; 500], flags).unwrap();
        fs.unlink(&U, root, b"open").unwrap();
        // Unwritten pointers: preallocated blocks (some past the end), a punched hole.
        let (p, fh) = fs.create(&U, root, b"pre", 0o644, libc::O_RDWR).unwrap();
        fs.write(p.ino, fh, 0, &[8; 100]).unwrap();
        fs.fallocate(p.ino, fh, 0, 30 * BS as u64, libc::FALLOC_FL_KEEP_SIZE)
            .unwrap();
        fs.fallocate(
            p.ino,
            fh,
            2 * BS as u64,
            5 * BS as u64,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        )
        .unwrap();
        fs.release(p.ino, fh).unwrap();
        fs.unmount().unwrap();
        (meta.snapshot(), data.snapshot())
    })
}

/// Check `meta` + `data`, then mount them and read through everything a listing reaches.
/// Nothing here may panic or hang, whatever the bytes.
pub fn check_and_mount(meta: Vec<u8>, data: Vec<u8>) {
    let meta = Arc::new(MemDevice::from_bytes(meta));
    let data = Arc::new(MemDevice::from_bytes(data));
    let before = meta.snapshot();
    let _ = dualfs::check::check(&*meta, &*data);
    assert!(meta.snapshot() == before, "the checker wrote");
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (meta, data);
    let Ok(fs) = Fs::mount(m, d, quiet()) else {
        return;
    };
    let mut dirs = vec![1u64];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        let mut found = Vec::new();
        let _ = fs.readdir(dir, 0, &mut |e| {
            found.push(e.clone());
            found.len() < 200
        });
        for e in found {
            seen += 1;
            if seen > 500 || e.name == b"." || e.name == b".." {
                continue;
            }
            let _ = fs.lookup(dir, &e.name);
            let Ok(attr) = fs.getattr(e.ino) else {
                continue;
            };
            let r = dualfs::fs::Caller::ROOT;
            if let Ok(names) = fs.listxattr(&r, e.ino) {
                for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()).take(10) {
                    let _ = fs.getxattr(&r, e.ino, name);
                }
            }
            match attr.kind {
                FileKind::Directory if dirs.len() < 50 => dirs.push(e.ino),
                FileKind::Regular => {
                    let _ = fs.read(e.ino, 0, 0, 65536);
                    let _ = fs.seek(e.ino, 0, dualfs::fs::Whence::Data);
                    let _ = fs.seek(e.ino, 0, dualfs::fs::Whence::Hole);
                }
                FileKind::Symlink => {
                    let _ = fs.readlink(e.ino);
                }
                _ => {}
            }
        }
    }
    let _ = fs.statfs();
    let _ = fs.unmount();
}
