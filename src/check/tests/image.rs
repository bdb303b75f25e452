//! Test images: file systems made with mkfs on memory devices and changed through the `Fs`
//! API, plus the directory entries the live file system held at unmount.
//!
//! While the B-epsilon tree is the in-memory stand-in, entries do not survive unmount, so
//! each image keeps a listing taken from the live file system just before unmount, and
//! `Mode::Listed` checks against it. `Mode::Tree` checks exactly what is on the devices.

use crate::betree::BeTree;
use crate::check::entry::Entry;
use crate::check::{run, Options, Outcome, Report};
use crate::device::{BlockDevice, MemDevice};
use crate::format::superblock::{Superblock, SB_SIZE};
use crate::fs::{Caller, FileKind, Fs, MountOptions, RenameFlags, SetAttr};
use crate::mkfs::{mkfs, MkfsParams};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub const ROOT: u64 = crate::format::ROOT_INO;
pub const BS: u64 = 4096;
pub const U: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: 0,
    umask: 0,
    holds_fsetid: None,
};

/// Where the directory entries come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// From the listing taken before unmount (works with the tree stand-in).
    Listed,
    /// From the tree on the device (needs the real B-epsilon tree).
    Tree,
}

/// One test in both modes; the tree one waits for the real tree.
macro_rules! in_both_modes {
    ($listed:ident, $tree:ident, $body:expr) => {
        #[test]
        fn $listed() {
            ($body)(crate::check::tests::image::Mode::Listed)
        }
        #[test]
        fn $tree() {
            ($body)(crate::check::tests::image::Mode::Tree)
        }
    };
}

pub struct Image {
    pub meta: Arc<MemDevice>,
    pub data: Arc<MemDevice>,
    /// Entries at unmount, in key order.
    pub listing: Vec<Entry>,
}

fn params() -> MkfsParams {
    MkfsParams {
        segment_blocks: 64,
        blocks_per_group: 1024,
        ..MkfsParams::default()
    }
}

/// Options that keep the background thread from writing on its own.
pub fn quiet_mount_options() -> MountOptions {
    MountOptions {
        flush_interval: Duration::from_secs(3600),
        checkpoint_interval: Duration::from_secs(3600),
        background_cleaning: false,
        ..MountOptions::default()
    }
}

impl Image {
    /// A fresh file system: 16 MiB metadata (64 segments of 64 blocks), 16 MiB data (4 groups).
    pub fn fresh() -> Image {
        Image::fresh_with_log(64)
    }

    /// A fresh file system with a log of `segments` segments of 64 blocks, 16 MiB data.
    pub fn fresh_with_log(segments: u64) -> Image {
        let meta = Arc::new(MemDevice::new(segments * 64 * BS));
        let data = Arc::new(MemDevice::new(16 << 20));
        mkfs(meta.clone(), data.clone(), &params()).unwrap();
        let mut img = Image {
            meta,
            data,
            listing: Vec::new(),
        };
        // What mkfs made: the root holding lost+found.
        img.listing = vec![img.entry(ROOT, b"lost+found", 2, FileKind::Directory)];
        img
    }

    /// A fresh file system after `work` ran in one mount session and it was unmounted.
    pub fn after(work: impl FnOnce(&Fs)) -> Image {
        let mut img = Image::fresh();
        let fs = img.mount();
        work(&fs);
        img.listing = img.list(&fs);
        fs.unmount().unwrap();
        img
    }

    pub fn mount(&self) -> Arc<Fs> {
        self.mount_with(MountOptions::default())
    }

    pub fn mount_with(&self, opts: MountOptions) -> Arc<Fs> {
        Fs::mount(self.meta.clone(), self.data.clone(), opts).unwrap()
    }

    /// An independent copy of both devices.
    pub fn copy(&self) -> Image {
        Image {
            meta: Arc::new(MemDevice::from_bytes(self.meta.snapshot())),
            data: Arc::new(MemDevice::from_bytes(self.data.snapshot())),
            listing: self.listing.clone(),
        }
    }

    pub fn superblock(&self) -> Superblock {
        let mut b = vec![0u8; SB_SIZE];
        self.meta.read_at(&mut b, 0).unwrap();
        Superblock::decode(&b).unwrap()
    }

    pub fn hash(&self, name: &[u8]) -> u64 {
        let sb = self.superblock();
        BeTree::new_empty(sb.block_size, sb.hash_seed, 0).hash(name)
    }

    pub fn entry(&self, dir: u64, name: &[u8], ino: u64, kind: FileKind) -> Entry {
        Entry {
            dir,
            hash: self.hash(name),
            name: name.to_vec(),
            ino,
            kind: kind.code(),
        }
    }

    /// The entries `fs` holds now, merged with the ones this image listed before (the
    /// stand-in tree forgets those at mount, but nothing changed them: the workloads here
    /// never touch lost+found).
    pub fn list(&self, fs: &Fs) -> Vec<Entry> {
        let mut all: BTreeMap<(u64, Vec<u8>), Entry> = self
            .listing
            .iter()
            .map(|e| ((e.dir, e.name.clone()), e.clone()))
            .collect();
        let mut dirs = vec![ROOT];
        while let Some(dir) = dirs.pop() {
            let mut found = Vec::new();
            fs.readdir(dir, 0, &mut |e| {
                if e.name != b"." && e.name != b".." {
                    found.push(e.clone());
                }
                true
            })
            .unwrap();
            for e in found {
                if e.kind == FileKind::Directory {
                    dirs.push(e.ino);
                }
                all.insert(
                    (dir, e.name.clone()),
                    self.entry(dir, &e.name, e.ino, e.kind),
                );
            }
        }
        let mut v: Vec<Entry> = all.into_values().collect();
        v.sort();
        v
    }

    /// The inode number of `path` ("a/b/c" from the root), from the listing.
    pub fn ino(&self, path: &str) -> u64 {
        let mut cur = ROOT;
        for part in path.split('/') {
            cur = self
                .listing
                .iter()
                .find(|e| e.dir == cur && e.name == part.as_bytes())
                .unwrap_or_else(|| panic!("{path}: no '{part}' in directory {cur}"))
                .ino;
        }
        cur
    }

    pub fn outcome(&self, mode: Mode) -> Outcome {
        let listed = match mode {
            Mode::Listed => Some(self.listing.clone()),
            Mode::Tree => None,
        };
        run(
            &*self.meta,
            &*self.data,
            &Options {
                verbose: true,
                ..Options::default()
            },
            listed,
        )
        .unwrap()
    }

    pub fn check(&self, mode: Mode) -> Report {
        self.outcome(mode).report
    }
}

/// Bytes that differ from block to block.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64).map(|i| ((i / 7) ^ seed) as u8).collect()
}

/// Create `name` in `dir` and write each (offset, length) chunk; returns the inode number.
pub fn file(fs: &Fs, dir: u64, name: &[u8], chunks: &[(u64, usize)]) -> u64 {
    let (attr, fh) = fs.create(&U, dir, name, 0o644, libc::O_WRONLY).unwrap();
    for &(off, len) in chunks {
        assert_eq!(
            fs.write(attr.ino, fh, off, &pattern(len, off)).unwrap() as usize,
            len
        );
    }
    fs.release(attr.ino, fh).unwrap();
    attr.ino
}

pub fn truncate(fs: &Fs, ino: u64, size: u64) {
    let set = SetAttr {
        size: Some(size),
        ..SetAttr::default()
    };
    fs.setattr(&U, ino, &set).unwrap();
}

/// Files made one transaction and checkpoint at a time; every other one is removed again.
pub const MANY: u64 = 80;

const MOVE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
};
const EXCHANGE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: true,
};

/// Everything the file system does to files and names, once: many small transactions and
/// checkpoints (the log crosses several segments and a superblock copy, and dead segments are
/// cleaned), files of all sizes (direct pointers only, single, double and triple indirect,
/// sparse), hard links, short and long symlinks, special files, renames of every kind,
/// unlinks, rmdir, truncates down and up, and a file left open after its last unlink.
pub fn workload(fs: &Fs) {
    let bs = BS as usize;
    let many = fs.mkdir(&U, ROOT, b"many", 0o755).unwrap().ino;
    for i in 0..MANY {
        file(
            fs,
            many,
            format!("f{i}").as_bytes(),
            &[(0, 100 + i as usize)],
        );
        fs.sync().unwrap();
    }
    for i in (0..MANY).step_by(2) {
        fs.unlink(&U, many, format!("f{i}").as_bytes()).unwrap();
    }

    let a = fs.mkdir(&U, ROOT, b"a", 0o755).unwrap().ino;
    let b = fs.mkdir(&U, ROOT, b"b", 0o755).unwrap().ino;
    let sub = fs.mkdir(&U, a, b"sub", 0o755).unwrap().ino;
    file(fs, ROOT, b"empty", &[]);
    let small = file(fs, ROOT, b"small", &[(0, 100)]);
    file(fs, a, b"five", &[(0, 5 * bs + 10)]);
    file(fs, a, b"twelve", &[(0, 12 * bs)]);
    let single = file(fs, b, b"single", &[(0, 100 * bs)]);
    let double = file(fs, b, b"double", &[(0, 600 * bs)]);
    // A hole, a block through the double indirect tree, 3 bytes through the triple one.
    file(fs, sub, b"sparse", &[(5000 * BS, bs), (2 << 30, 3)]);
    fs.sync().unwrap();

    fs.link(&U, small, a, b"small-link").unwrap();
    fs.link(&U, small, b, b"small-link2").unwrap();
    fs.symlink(&U, a, b"short", b"five").unwrap();
    fs.symlink(&U, a, b"short2", b"twelve").unwrap();
    fs.symlink(&U, b, b"long", &[b'x'; 300]).unwrap();
    fs.symlink(&U, ROOT, b"longest", &[b'y'; 4095]).unwrap();
    fs.mknod(&U, ROOT, b"fifo", libc::S_IFIFO | 0o644, 0)
        .unwrap();
    fs.mknod(&U, ROOT, b"tty", libc::S_IFCHR | 0o600, 0x0501)
        .unwrap();

    fs.rename(&U, a, b"five", b, b"five-moved", MOVE).unwrap();
    fs.rename(&U, a, b"sub", b, b"sub", MOVE).unwrap(); // a directory changes parents
    fs.rename(&U, b, b"single", ROOT, b"small", MOVE).unwrap(); // replaces one of three links
    fs.rename(&U, a, b"twelve", b, b"sub", EXCHANGE).unwrap(); // file <-> directory, across

    file(fs, a, b"gone", &[(0, 20 * bs)]);
    fs.unlink(&U, a, b"gone").unwrap();
    fs.unlink(&U, b, b"small-link2").unwrap();
    fs.unlink(&U, a, b"short").unwrap();
    fs.mkdir(&U, b, b"tmpdir", 0o755).unwrap();
    fs.rmdir(&U, b, b"tmpdir").unwrap();

    truncate(fs, double, 530 * BS + 17); // frees blocks, keeps part of the double tree
    truncate(fs, single, 12 * BS); // drops the single indirect block
    truncate(fs, small, 10_000); // grows: a hole

    // Open, written, unlinked and still open at unmount: an orphan for the next mount.
    let (o, fh) = fs
        .create(&U, ROOT, b"open-unlinked", 0o644, libc::O_RDWR)
        .unwrap();
    fs.write(o.ino, fh, 0, &pattern(3 * bs, 1)).unwrap();
    fs.unlink(&U, ROOT, b"open-unlinked").unwrap();
}
