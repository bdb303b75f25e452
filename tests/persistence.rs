//! Persistence: a large generated tree (20,000+ files, every kind of entry, files at block
//! edges, a 100 MiB file and a sparse file with a 10 GiB hole) copied in, compared byte for
//! byte, compared again after a remount and after deleting and renaming parts of it; and many
//! small remount cycles checked against a copy on the host.

#[macro_use]
mod common;

use common::tree::{self, CompareOpts, TreeSpec};
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::Instant;

const MIB: u64 = 1 << 20;

/// The fixed-size files and the two big ones, under `root/special`.
fn make_special_files(root: &Path) {
    let d = root.join("special");
    fs::create_dir(&d).unwrap();
    for (i, size) in [
        0usize, 1, 4095, 4096, 4097, 8191, 8192, 8193, 49_152, 53_248,
    ]
    .iter()
    .enumerate()
    {
        fs::write(
            d.join(format!("size-{size}")),
            content(1000 + i as u64, *size),
        )
        .unwrap();
    }
    // 100 MiB of seeded random bytes.
    let f = fs::File::create(d.join("big-100MiB")).unwrap();
    let mut s = ByteStream::new(100);
    let mut buf = vec![0u8; MIB as usize];
    for i in 0..100 {
        s.fill(&mut buf);
        f.write_all_at(&buf, i * MIB).unwrap();
    }
    // Data, a 10 GiB hole, data (ending in a partial block).
    let f = fs::File::create(d.join("sparse-10GiB-hole")).unwrap();
    f.write_all_at(&content(7, MIB as usize), 0).unwrap();
    f.write_all_at(&content(8, MIB as usize + 123), MIB + (10 << 30))
        .unwrap();
}

#[test]
fn large_tree_survives_copy_remount_and_partial_delete() {
    let t0 = Instant::now();
    let mut fs = TestFs::new();
    let host = TmpfsDir::new(2 << 30);
    let src = host.path().join("src");
    fs::create_dir(&src).unwrap();
    let spec = TreeSpec {
        seed: 20_000,
        dirs: 1_500,
        files: 20_000,
        max_depth: 8,
        symlinks: 600,
        hardlinks: 400,
        fifos: 10,
        vary_attrs: true,
        max_file: MIB,
    };
    let st = tree::generate(&src, &spec);
    make_special_files(&src);
    eprintln!("generated {st:?} in {:?}", t0.elapsed());
    assert!(st.files >= 20_000);

    let dst = fs.join("tree");
    fs::create_dir(&dst).unwrap();
    let t = Instant::now();
    tree::copy_tree(&src, &dst);
    eprintln!("copied in {:?}", t.elapsed());

    let opts = CompareOpts::default();
    let t = Instant::now();
    let cs = tree::compare_trees(&src, &dst, opts);
    eprintln!("compared {cs:?} in {:?}", t.elapsed());
    assert!(cs.entries >= 22_000, "compared only {} entries", cs.entries);
    assert!(
        cs.bytes >= st.bytes + 100 * MIB,
        "compared only {} bytes",
        cs.bytes
    );

    let sparse = dst.join("special/sparse-10GiB-hole");
    let m = lstat(&sparse);
    assert_eq!(m.len(), (10 << 30) + 2 * MIB + 123);
    assert!(
        m.blocks() * 512 < 8 * MIB,
        "a file with 2 MiB of data and a 10 GiB hole allocates {} bytes",
        m.blocks() * 512
    );
    let big = lstat(dst.join("special/big-100MiB"));
    assert!(
        big.blocks() * 512 >= 100 * MIB,
        "100 MiB file allocates only {} bytes",
        big.blocks() * 512
    );

    let t = Instant::now();
    fs.remount();
    eprintln!("remounted (checker included) in {:?}", t.elapsed());
    let t = Instant::now();
    tree::compare_trees(&src, &dst, opts);
    eprintln!("compared after remount in {:?}", t.elapsed());
    assert!(lstat(&sparse).blocks() * 512 < 8 * MIB);

    // Delete about a quarter of the top-level directories, rename a few others, on both sides.
    let mut top: Vec<_> = fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| src.join(n).is_dir() && n != "special")
        .collect();
    top.sort();
    let mut rng = StdRng::seed_from_u64(4);
    let t = Instant::now();
    for (k, n) in top.iter().enumerate() {
        match rng.gen_range(0..8) {
            0 | 1 => {
                fs::remove_dir_all(src.join(n)).unwrap();
                fs::remove_dir_all(dst.join(n)).unwrap();
            }
            2 => {
                let to = format!("renamed-{k}");
                rename(src.join(n), src.join(&to)).unwrap();
                rename(dst.join(n), dst.join(&to)).unwrap();
            }
            _ => {}
        }
    }
    fs::remove_file(src.join("special/big-100MiB")).unwrap();
    fs::remove_file(dst.join("special/big-100MiB")).unwrap();
    // Renames and deletes changed directory times on both sides differently: re-copy them.
    copy_dir_times(&src, &dst);
    eprintln!("deleted and renamed in {:?}", t.elapsed());
    tree::compare_trees(&src, &dst, opts);
    fs.remount();
    tree::compare_trees(&src, &dst, opts);
    fs.unmount();
    eprintln!("total {:?}", t0.elapsed());
}

/// Set the mtime/atime of every directory under `dst` to those of `src` (same shape).
fn copy_dir_times(src: &Path, dst: &Path) {
    for e in fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir_times(&e.path(), &dst.join(e.file_name()));
        }
    }
    let m = lstat(src);
    utimens(
        dst,
        SetTs::At(m.atime(), m.atime_nsec()),
        SetTs::At(m.mtime(), m.mtime_nsec()),
        false,
    )
    .unwrap();
}

/// Apply a deterministic batch of operations to `root`; the same seed on two identical trees
/// makes identical changes.
fn apply_ops(root: &Path, seed: u64, n: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let list = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let dirs = |root: &Path| -> Vec<String> {
        let mut out = vec![String::new()];
        let mut i = 0;
        while i < out.len() {
            let d = root.join(&out[i]);
            for n in list(&d) {
                if d.join(&n).is_dir() {
                    out.push(if out[i].is_empty() {
                        n
                    } else {
                        format!("{}/{n}", out[i])
                    });
                }
            }
            i += 1;
        }
        out
    };
    for k in 0..n {
        let ds = dirs(root);
        let d = root.join(&ds[rng.gen_range(0..ds.len())]);
        let entries = list(&d);
        let pick = |rng: &mut StdRng| entries.get(rng.gen_range(0..entries.len().max(1))).cloned();
        match rng.gen_range(0..10) {
            0..=3 => {
                let len = rng.gen_range(0..20_000);
                fs::write(
                    d.join(format!("f{seed}-{k}")),
                    content(seed * 1000 + k as u64, len),
                )
                .unwrap();
            }
            4 => sys::mkdir(d.join(format!("d{seed}-{k}")), 0o755).unwrap(),
            5 => {
                if let Some(e) = pick(&mut rng) {
                    let p = d.join(e);
                    if p.is_dir() {
                        fs::remove_dir_all(p).unwrap();
                    } else {
                        fs::remove_file(p).unwrap();
                    }
                }
            }
            6 => {
                if let Some(e) = pick(&mut rng) {
                    let p = d.join(e);
                    if p.is_file() {
                        let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
                        let at = rng.gen_range(0..30_000u64);
                        f.write_all_at(&content(k as u64, rng.gen_range(1..9000)), at)
                            .unwrap();
                    }
                }
            }
            7 => {
                if let Some(e) = pick(&mut rng) {
                    let p = d.join(&e);
                    if p.is_file() {
                        truncate(&p, rng.gen_range(0..10_000)).unwrap();
                    }
                }
            }
            _ => {
                // rename an entry into a random directory that is not inside it
                if let Some(e) = pick(&mut rng) {
                    let ds = dirs(root);
                    let to_dir = &ds[rng.gen_range(0..ds.len())];
                    let from_rel = d.strip_prefix(root).unwrap().join(&e);
                    let to = root.join(to_dir).join(format!("r{seed}-{k}"));
                    if !Path::new(to_dir).starts_with(&from_rel) {
                        rename(root.join(&from_rel), to).unwrap();
                    }
                }
            }
        }
    }
}

#[test]
fn many_remount_cycles_keep_every_change() {
    let mut fs = TestFs::new();
    let host = TmpfsDir::new(1 << 30);
    let src = host.path().join("model");
    fs::create_dir(&src).unwrap();
    let dst = fs.join("w");
    fs::create_dir(&dst).unwrap();
    let opts = CompareOpts {
        mtime: false,
        ..CompareOpts::default()
    };
    for cycle in 0..12u64 {
        apply_ops(&src, cycle, 150);
        apply_ops(&dst, cycle, 150);
        tree::compare_trees(&src, &dst, opts);
        fs.remount();
        tree::compare_trees(&src, &dst, opts);
    }
    fs.unmount();
}
