//! Bad input to `dualfs mount`: each case must end with a non-zero exit code and a one-line
//! message on stderr, must not mount, and must leave both images byte-identical. Plus the good
//! case of mounting with META alone.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};

const META: u64 = 64 << 20;
const DATA: u64 = 256 << 20;

/// A scratch directory with a formatted pair `meta.img` + `data.img` (and more files as asked).
struct Images {
    dir: tempfile::TempDir,
}

impl Images {
    fn new() -> Images {
        user::require_root();
        let dir = tempfile::Builder::new()
            .prefix("dualfs-bad-")
            .tempdir()
            .unwrap();
        Images { dir }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().canonicalize().unwrap().join(name)
    }
    /// A formatted pair named `<prefix>meta.img`, `<prefix>data.img`.
    fn pair(&self, prefix: &str) -> (PathBuf, PathBuf) {
        let (m, d) = (
            self.path(&format!("{prefix}meta.img")),
            self.path(&format!("{prefix}data.img")),
        );
        make_image(&m, META);
        make_image(&d, DATA);
        let p = dualfs::mkfs::MkfsParams {
            data_path: d.to_str().unwrap().to_string(),
            ..Default::default()
        };
        mkfs_pair(&m, &d, &p);
        (m, d)
    }
    fn random(&self, name: &str, size: usize, seed: u64) -> PathBuf {
        let p = self.path(name);
        fs::write(&p, ByteStream::new(seed).bytes(size)).unwrap();
        p
    }
    fn zeros(&self, name: &str, size: u64) -> PathBuf {
        let p = self.path(name);
        make_image(&p, size);
        p
    }
}

/// Mount `args`, expect a clear refusal, and require every file in `untouched` unchanged.
fn refuse(what: &str, img: &Images, args: &[&Path], untouched: &[&Path]) {
    let before: Vec<u128> = untouched.iter().map(|p| digest_file(p)).collect();
    let r = mount_expecting_failure(args, img.dir.path());
    r.assert_clear_error(what);
    eprintln!("{what}: {} -> {}", r.status, r.stderr.trim());
    let after: Vec<u128> = untouched.iter().map(|p| digest_file(p)).collect();
    for ((p, b), a) in untouched.iter().zip(&before).zip(&after) {
        assert_eq!(
            b,
            a,
            "{what}: {} was modified by a refused mount",
            p.display()
        );
    }
}

#[test]
fn garbage_images_are_refused() {
    dualfs_only!();
    let img = Images::new();
    let (rm, rd) = (
        img.random("rand-meta.img", 16 << 20, 1),
        img.random("rand-data.img", 32 << 20, 2),
    );
    refuse("random META and DATA", &img, &[&rm, &rd], &[&rm, &rd]);
    let (zm, zd) = (
        img.zeros("zero-meta.img", META),
        img.zeros("zero-data.img", DATA),
    );
    refuse("all-zero META and DATA", &img, &[&zm, &zd], &[&zm, &zd]);
    refuse("all-zero META alone", &img, &[&zm], &[&zm]);
    let (m, d) = img.pair("");
    refuse("random META, good DATA", &img, &[&rm, &d], &[&rm, &d]);
    refuse("good META, random DATA", &img, &[&m, &rd], &[&m, &rd]);
    refuse("META given twice", &img, &[&m, &m], &[&m, &d]);
    let tiny = img.zeros("tiny.img", 1000);
    refuse("a 1000-byte META", &img, &[&tiny, &d], &[&tiny, &d]);
    refuse(
        "missing files",
        &img,
        &[&img.path("nope-meta"), &img.path("nope-data")],
        &[],
    );
}

#[test]
fn damaged_superblocks_are_refused() {
    dualfs_only!();
    let img = Images::new();
    // One flipped bit in the label of the superblock and of every copy in the log (located
    // as docs/FORMAT.md says), so that no superblock policy can find a good one: CRCs fail.
    let (m, d) = img.pair("");
    let mut b = fs::read(&m).unwrap();
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    assert_eq!(&b[..8], b"DUALFSSB", "mkfs wrote no superblock magic");
    let (bs, seg) = (u32_at(&b, 36) as usize, u32_at(&b, 56) as usize);
    let copies = u32_at(&b, 136) as usize;
    let mut at = vec![0usize];
    for i in 0..copies.min(8) {
        at.push(u64_at(&b, 144 + 8 * i) as usize * seg * bs);
    }
    for a in at {
        assert_eq!(&b[a..a + 8], b"DUALFSSB", "no superblock copy at byte {a}");
        b[a + 104] ^= 1;
    }
    fs::write(&m, &b).unwrap();
    drop(b);
    refuse(
        "META superblocks (all copies) with bad CRCs",
        &img,
        &[&m, &d],
        &[&m, &d],
    );
    // A META device smaller than its superblock says.
    let (m2, d2) = img.pair("short-");
    fs::OpenOptions::new()
        .write(true)
        .open(&m2)
        .unwrap()
        .set_len(META / 2)
        .unwrap();
    refuse("META cut to half its size", &img, &[&m2, &d2], &[&m2, &d2]);
    // A DATA device smaller than its superblock says.
    let (m3, d3) = img.pair("shortdata-");
    fs::OpenOptions::new()
        .write(true)
        .open(&d3)
        .unwrap()
        .set_len(DATA / 2)
        .unwrap();
    refuse("DATA cut to half its size", &img, &[&m3, &d3], &[&m3, &d3]);
}

/// Set the format version of every superblock of `m` (the primary and the copies) and of `d`.
fn set_version(m: &Path, d: &Path, version: u32) {
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let mut b = fs::read(m).unwrap();
    let (bs, seg) = (u32_at(&b, 36) as usize, u32_at(&b, 56) as usize);
    let mut at = vec![0usize];
    for i in 0..(u32_at(&b, 136) as usize).min(8) {
        at.push(u64_at(&b, 144 + 8 * i) as usize * seg * bs);
    }
    for a in at {
        b[a + 8..a + 12].copy_from_slice(&version.to_le_bytes());
        dualfs::format::seal_crc(&mut b[a..a + 4096], 12);
    }
    fs::write(m, &b).unwrap();
    let mut b = fs::read(d).unwrap();
    b[8..12].copy_from_slice(&version.to_le_bytes());
    dualfs::format::seal_crc(&mut b[..4096], 12);
    fs::write(d, &b).unwrap();
}

#[test]
fn other_format_versions_are_refused_saying_what_to_do() {
    dualfs_only!();
    let img = Images::new();
    for (version, says) in [
        (1u32, "format version 1 was written by an older DualFS"),
        (3, "format version 3 is newer than this program"),
    ] {
        let (m, d) = img.pair(&format!("v{version}-"));
        set_version(&m, &d, version);
        let what = format!("an image of format version {version}");
        refuse(&what, &img, &[&m, &d], &[&m, &d]);
        let r = mount_expecting_failure(&[&m, &d], img.dir.path());
        assert!(r.stderr.contains(says), "{what}: {}", r.stderr);
    }
}

#[test]
fn wrong_pairings_are_refused() {
    dualfs_only!();
    let img = Images::new();
    let (m1, d1) = img.pair("one-");
    let (m2, d2) = img.pair("two-");
    refuse("swapped META and DATA", &img, &[&d1, &m1], &[&m1, &d1]);
    refuse(
        "META and DATA of two mkfs runs",
        &img,
        &[&m1, &d2],
        &[&m1, &d2],
    );
    refuse(
        "META and DATA of two mkfs runs (2)",
        &img,
        &[&m2, &d1],
        &[&m2, &d1],
    );
    let z = img.zeros("zero-data.img", DATA);
    refuse(
        "explicit DATA that is not DualFS",
        &img,
        &[&m1, &z],
        &[&m1, &z],
    );
    refuse("DATA alone given as META", &img, &[&d1], &[&d1, &m1]);
    // And the right pairs still mount afterwards (nothing was damaged).
    for (m, d) in [(&m1, &d1), (&m2, &d2)] {
        let mut fs = TestFs::builder().images(m, d).mount();
        fs::write(fs.join("ok"), b"ok").unwrap();
        fs.unmount();
    }
}

#[test]
fn second_mount_of_a_mounted_pair_is_refused() {
    dualfs_only!();
    let mut fs = TestFs::new();
    fs::write(fs.join("before"), b"1").unwrap();
    let (m, d) = (fs.meta_path().to_path_buf(), fs.data_path().to_path_buf());
    // The first mount may write at any time, so the images are not compared here; what
    // matters is the refusal, and that the first mount is unharmed (checker at unmount).
    for args in [vec![&m, &d], vec![&m]] {
        let r = mount_expecting_failure(
            &args.iter().map(|p| p.as_path()).collect::<Vec<_>>(),
            fs.scratch(),
        );
        r.assert_clear_error("second mount of a mounted pair");
    }
    fs::write(fs.join("after"), b"2").unwrap();
    assert_eq!(fs::read(fs.join("before")).unwrap(), b"1");
    fs.remount();
    assert_eq!(fs::read(fs.join("after")).unwrap(), b"2");
}

#[test]
fn meta_alone_finds_its_data_device() {
    dualfs_only!();
    let mut fs = TestFs::builder().sizes(META, DATA).pass_data(false).mount();
    fs::write(fs.join("f"), content(1, 100_000)).unwrap();
    fs.remount();
    assert_eq!(fs::read(fs.join("f")).unwrap(), content(1, 100_000));
    fs.unmount();
}

#[test]
fn meta_alone_with_its_data_device_gone_is_refused() {
    dualfs_only!();
    let img = Images::new();
    let (m, d) = img.pair("");
    let moved = img.path("moved-data.img");
    fs::rename(&d, &moved).unwrap();
    refuse(
        "META alone, its DATA path missing",
        &img,
        &[&m],
        &[&m, &moved],
    );
    // A different file at the recorded path is not accepted either.
    let other = img.zeros("data.img", DATA);
    refuse(
        "META alone, a stranger at its DATA path",
        &img,
        &[&m],
        &[&m, &other, &moved],
    );
}
