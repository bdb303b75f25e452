//! What the fsck tests share: file systems made on image files with the library, damage done
//! through the core's format and table code, and running the program.

#![allow(dead_code)]

use dualfs::device::{BlockDevice, FileDevice, OpenMode};
use dualfs::format::inode::DiskInode;
use dualfs::format::superblock::{Superblock, SB_SIZE};
use dualfs::format::{BlockHeader, INODE_SIZE};
use dualfs::fs::{Caller, Fs, MountOptions};
use dualfs::log::checkpoint::read_newest;
use dualfs::log::recovery::load_tables;
use dualfs::meta::Tables;
use dualfs::mkfs::{mkfs, MkfsParams};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

pub const ROOT: u64 = 1;
pub const U: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: 0,
    umask: 0,
    holds_fsetid: None,
};

pub struct Images {
    pub dir: tempfile::TempDir,
    pub meta: PathBuf,
    pub data: PathBuf,
}

/// Open an image, exclusively unless read-only. "In use" is retried for a while: the tests
/// run on several threads, and a child (an fsck run) that another thread is starting inherits,
/// until its exec, the descriptors this thread just closed, with their flock on the image.
fn open(path: &Path, read_only: bool) -> Arc<dyn BlockDevice> {
    let mode = OpenMode {
        read_only,
        exclusive: !read_only,
        ..OpenMode::default()
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        match FileDevice::open(path, mode) {
            Ok(d) => return Arc::new(d),
            Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy && attempts < 40 => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("open {} (attempt {attempts}): {e}", path.display()),
        }
    }
}

impl Images {
    /// A fresh file system (16 MiB log in 64 segments, 64 MiB of data) after `populate`
    /// ran on it in one mount session.
    pub fn new(populate: impl FnOnce(&Fs)) -> Images {
        let dir = tempfile::Builder::new()
            .prefix("fsck-test-")
            .tempdir()
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (meta, data) = (root.join("meta.img"), root.join("data.img"));
        std::fs::File::create(&meta)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        std::fs::File::create(&data)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let params = MkfsParams {
            segment_blocks: 64,
            blocks_per_group: 4096,
            data_path: data.to_str().unwrap().to_string(),
            ..MkfsParams::default()
        };
        mkfs(open(&meta, false), open(&data, false), &params).unwrap();
        let img = Images { dir, meta, data };
        let fs = img.mount();
        populate(&fs);
        fs.unmount().unwrap();
        img
    }

    pub fn mount(&self) -> Arc<Fs> {
        Fs::mount(
            open(&self.meta, false),
            open(&self.data, false),
            MountOptions::default(),
        )
        .unwrap()
    }

    /// The inode of `path` ("a/b"), looked up on a read-only mount.
    pub fn ino(&self, path: &str) -> u64 {
        ino_of(&self.meta, &self.data, path)
    }

    pub fn inode(&self, ino: u64) -> DiskInode {
        inode_at(&self.meta, ino)
    }

    /// Change inode `ino` in place (inode and block CRCs sealed again: a consistent lie).
    pub fn rewrite_inode(&self, ino: u64, f: impl FnOnce(&mut DiskInode)) {
        rewrite_inode_at(&self.meta, ino, f)
    }

    /// A digest of both images (to prove nothing was written).
    pub fn digest(&self) -> (Vec<u8>, Vec<u8>) {
        (
            std::fs::read(&self.meta).unwrap(),
            std::fs::read(&self.data).unwrap(),
        )
    }
}

/// Create `name` in `dir` holding `len` bytes.
pub fn file(fs: &Fs, dir: u64, name: &str, len: usize) -> u64 {
    let (attr, fh) = fs
        .create(&U, dir, name.as_bytes(), 0o644, libc::O_WRONLY)
        .unwrap();
    if len > 0 {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        fs.write(attr.ino, fh, 0, &data).unwrap();
    }
    fs.release(attr.ino, fh).unwrap();
    attr.ino
}

/// A small tree: directories, files of several sizes (one with indirect blocks), links.
pub fn small_tree(fs: &Fs) {
    let a = fs.mkdir(&U, ROOT, b"a", 0o755).unwrap().ino;
    let b = fs.mkdir(&U, a, b"b", 0o755).unwrap().ino;
    file(fs, ROOT, "one", 100);
    file(fs, a, "two", 3 * 4096 + 5);
    let big = file(fs, b, "big", 40 * 4096);
    fs.link(&U, big, ROOT, b"big-link").unwrap();
    fs.symlink(&U, a, b"sym", b"../one").unwrap();
    for i in 0..30 {
        file(fs, b, &format!("f{i}"), i * 50);
    }
}

/// Run the program with `args`; returns (exit code, stdout + stderr).
/// Run fsck-dualfs. An image found "in use" is tried again for up to 2 s (see `open`: a
/// sibling test's child can hold this test's flock for a moment); a file system that really
/// is in use still ends with exit 8.
pub fn fsck(args: &[&dyn AsRef<std::ffi::OsStr>]) -> (i32, String) {
    let program: &Path = env!("CARGO_BIN_EXE_fsck-dualfs").as_ref();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (code, out) = run(program, args);
        if code == 8 && out.contains("in use") && attempts < 40 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        return (code, out);
    }
}

pub fn run(program: &Path, args: &[&dyn AsRef<std::ffi::OsStr>]) -> (i32, String) {
    let out = Command::new(program)
        .args(args.iter().map(|a| a.as_ref()))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// The inode of `path` ("a/b") of the file system on `meta` + `data`, looked up on a
/// read-only mount.
pub fn ino_of(meta: &Path, data: &Path, path: &str) -> u64 {
    let fs = Fs::mount(
        open(meta, true),
        open(data, true),
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    )
    .unwrap();
    let mut cur = ROOT;
    for part in path.split('/') {
        cur = fs.lookup(cur, part.as_bytes()).unwrap().ino;
    }
    fs.unmount().unwrap();
    cur
}

fn tables(meta: &Path) -> (Arc<Superblock>, Tables, Arc<dyn BlockDevice>) {
    let dev = open(meta, false);
    let mut b = vec![0u8; SB_SIZE];
    dev.read_at(&mut b, 0).unwrap();
    let sb = Arc::new(Superblock::decode(&b).unwrap());
    let cp = read_newest(&sb, &*dev).unwrap();
    let t = load_tables(&sb, &*dev, &cp).unwrap();
    (sb, t, dev)
}

pub fn inode_at(meta: &Path, ino: u64) -> DiskInode {
    let (sb, t, dev) = tables(meta);
    let e = t.ifile.entry(ino).unwrap();
    let mut b = vec![0u8; sb.block_size as usize];
    dev.read_at(&mut b, e.addr * sb.block_size as u64).unwrap();
    let s = e.slot as usize;
    DiskInode::decode(&b[INODE_SIZE * s..INODE_SIZE * (s + 1)]).unwrap()
}

/// Change inode `ino` on the metadata device `meta` in place (inode and block CRCs sealed
/// again: a consistent lie only the checker's cross-checks find).
pub fn rewrite_inode_at(meta: &Path, ino: u64, f: impl FnOnce(&mut DiskInode)) {
    let (sb, t, dev) = tables(meta);
    let e = t.ifile.entry(ino).unwrap();
    let bs = sb.block_size as u64;
    let mut b = vec![0u8; bs as usize];
    dev.read_at(&mut b, e.addr * bs).unwrap();
    let s = e.slot as usize;
    let raw = &mut b[INODE_SIZE * s..INODE_SIZE * (s + 1)];
    let mut d = DiskInode::decode(raw).unwrap();
    f(&mut d);
    d.encode_into(raw);
    BlockHeader::seal(&mut b);
    dev.write_at(&b, e.addr * bs).unwrap();
    dev.flush().unwrap();
}

/// Zero the block of a leaf node of the directory tree (not the root; the middle one by log
/// address) on the metadata device `meta`; returns how many entries it held.
pub fn zero_a_leaf_node(meta: &Path) -> usize {
    use dualfs::format::node::{decode, NodeBody};
    let (sb, t, dev) = tables(meta);
    let bs = sb.block_size as u64;
    let mut leaves: Vec<(u64, usize)> = (2..t.nodes.addrs.len() as u64)
        .filter(|&id| t.nodes.get(id) != 0)
        .filter_map(|id| {
            let addr = t.nodes.get(id);
            let mut b = vec![0u8; bs as usize];
            dev.read_at(&mut b, addr * bs).unwrap();
            match decode(&b, id).ok()?.body {
                NodeBody::Leaf { entries } => Some((addr, entries.len())),
                NodeBody::Internal { .. } | NodeBody::Value { .. } => None,
            }
        })
        .collect();
    assert!(leaves.len() > 2, "the tree has too few leaves");
    leaves.sort_unstable();
    let (addr, held) = leaves[leaves.len() / 2];
    dev.write_at(&vec![0u8; bs as usize], addr * bs).unwrap();
    dev.flush().unwrap();
    held
}
