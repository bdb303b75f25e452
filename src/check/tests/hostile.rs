//! Hostile images: 1,000 small file systems damaged in every way a disk, a bug or an attacker
//! can (bits flipped, blocks zeroed or copied elsewhere, devices truncated, swapped or
//! mismatched, and consistent lies: structures rewritten with their checksums sealed again,
//! summaries that lie about their blocks). On each the checker and `Fs::mount` (with reads
//! and listings through the core API) run: no panic, no hang, the checker never writes,
//! and mount either refuses with an error or works.

use super::image::{file, quiet_mount_options, Image, BS, ROOT, U};
use crate::check::check;
use crate::device::{BlockDevice, MemDevice};
use crate::format::summary::{Summary, SS_MAGIC};
use crate::format::superblock::Superblock;
use crate::format::{get_u32, seal_crc, BlockHeader, HEADER_SIZE, INODE_SIZE};
use crate::fs::{FileKind, Fs};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Longest any one image may take (check, mount, walk, unmount), in the unoptimized build.
const PER_IMAGE: Duration = Duration::from_secs(60);
const IMAGES: u64 = 1000;

/// `DUALFS_HOSTILE_IMAGES=N` runs N images instead (to hunt further).
fn images() -> u64 {
    std::env::var("DUALFS_HOSTILE_IMAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(IMAGES)
}

/// Blocks of each base worth damaging most: the live ones, and the summaries roll-forward
/// reads.
struct Targets {
    live: Vec<usize>,
    summaries: Vec<usize>,
}

fn targets() -> &'static [Targets; 2] {
    static TARGETS: OnceLock<[Targets; 2]> = OnceLock::new();
    TARGETS.get_or_init(|| {
        let t = |(meta, data): &(Vec<u8>, Vec<u8>)| {
            let meta = MemDevice::from_bytes(meta.clone());
            let data = MemDevice::from_bytes(data.clone());
            let out = crate::check::run(&meta, &data, &Default::default(), None).unwrap();
            assert!(out.report.is_clean(), "{}", out.report);
            let img = Image {
                meta: Arc::new(meta),
                data: Arc::new(data),
                listing: Vec::new(),
            };
            Targets {
                live: out.live_log_blocks().iter().map(|&b| b as usize).collect(),
                summaries: super::damage::parts_after_checkpoint(&img)
                    .iter()
                    .map(|p| p.0 as usize)
                    .collect(),
            }
        };
        let b = bases();
        [t(&b[0]), t(&b[1])]
    })
}

/// `user::rw- user:1000:r-- group::r-- mask::r-- other::---`.
const ACL: [u8; 44] = [
    2, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255, 2, 0, 4, 0, 232, 3, 0, 0, 4, 0, 4, 0, 255, 255,
    255, 255, 16, 0, 4, 0, 255, 255, 255, 255, 32, 0, 0, 0, 255, 255, 255, 255,
];

/// A small file system with one of everything, cleanly unmounted; and the same with
/// transactions after the last checkpoint (a crash), so roll-forward has work.
fn bases() -> &'static [(Vec<u8>, Vec<u8>); 2] {
    static BASES: OnceLock<[(Vec<u8>, Vec<u8>); 2]> = OnceLock::new();
    BASES.get_or_init(|| {
        let work = |fs: &Fs| {
            let a = fs.mkdir(&U, ROOT, b"a", 0o755).unwrap().ino;
            let b = fs.mkdir(&U, a, b"b", 0o755).unwrap().ino;
            for i in 0..20u64 {
                file(
                    fs,
                    b,
                    format!("f{i}").as_bytes(),
                    &[(0, (i * 300) as usize)],
                );
            }
            let big = file(fs, a, b"big", &[(0, 600 * BS as usize)]);
            file(fs, ROOT, b"sparse", &[(3000 * BS, 10)]);
            fs.link(&U, big, ROOT, b"big-link").unwrap();
            fs.symlink(&U, a, b"short", b"b/f1").unwrap();
            fs.symlink(&U, ROOT, b"long", &[b'l'; 500]).unwrap();
            fs.mknod(&U, ROOT, b"fifo", libc::S_IFIFO | 0o644, 0)
                .unwrap();
            // Attributes: inline, in value blocks, an ACL, on a file freed later.
            let root = crate::fs::Caller::ROOT;
            let flags = crate::fs::XattrFlags::default();
            fs.setxattr(&root, big, b"user.small", b"v", flags).unwrap();
            fs.setxattr(&root, big, b"user.large", &[7u8; 9000], flags)
                .unwrap();
            fs.setxattr(&root, b, b"system.posix_acl_default", &ACL, flags)
                .unwrap();
            fs.setxattr(&root, a, b"trusted.t", &[1u8; 300], flags)
                .unwrap();
            fs.sync().unwrap();
            for i in (0..20u64).step_by(3) {
                fs.unlink(&U, b, format!("f{i}").as_bytes()).unwrap();
            }
            let (o, fh) = fs.create(&U, ROOT, b"open", 0o644, libc::O_RDWR).unwrap();
            fs.write(o.ino, fh, 0, &[1u8; 5000]).unwrap();
            fs.setxattr(
                &crate::fs::Caller::ROOT,
                o.ino,
                b"user.o",
                &[2u8; 5000],
                Default::default(),
            )
            .unwrap();
            fs.unlink(&U, ROOT, b"open").unwrap();
            // Unwritten pointers, and indirect blocks past the end of a file.
            super::clean::unwritten_work(fs);
        };
        let clean = Image::fresh_with_log(16);
        let fs = clean.mount_with(quiet_mount_options());
        work(&fs);
        fs.unmount().unwrap();

        let crashed = Image::fresh_with_log(16);
        let fs = crashed.mount_with(quiet_mount_options());
        work(&fs);
        fs.sync().unwrap();
        file(&fs, ROOT, b"late", &[(0, 20 * BS as usize)]);
        fs.mkdir(&U, ROOT, b"late-dir", 0o755).unwrap();
        fs.fsync(ROOT, false).unwrap();
        let snap = (crashed.meta.snapshot(), crashed.data.snapshot());
        fs.unmount().unwrap();
        [(clean.meta.snapshot(), clean.data.snapshot()), snap]
    })
}

/// Values that break assumptions.
fn interesting(rng: &mut StdRng, device_blocks: u64) -> u64 {
    match rng.gen_range(0..12) {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => u64::MAX,
        4 => u32::MAX as u64,
        5 => u32::MAX as u64 + 1,
        6 => device_blocks,
        7 => device_blocks.saturating_sub(1),
        8 => rng.gen_range(0..device_blocks.max(1)),
        9 => 1 << rng.gen_range(0..64),
        10 => rng.gen_range(0..64),
        _ => rng.gen(),
    }
}

fn put(b: &mut [u8], off: usize, width: usize, v: u64) {
    let bytes = v.to_le_bytes();
    let end = (off + width).min(b.len());
    if off < end {
        b[off..end].copy_from_slice(&bytes[..end - off]);
    }
}

/// Blocks of `bytes` that hold anything.
fn written(bytes: &[u8]) -> Vec<usize> {
    bytes
        .chunks(BS as usize)
        .enumerate()
        .filter(|(_, b)| b.iter().any(|&x| x != 0))
        .map(|(i, _)| i)
        .collect()
}

/// Damage a copy of a base image; returns the devices' bytes and what was done.
/// One of `blocks` (block numbers of the metadata image `meta`) that holds a log block (a
/// block header's magic), at random; None if none does.
fn pick_log_block(meta: &[u8], blocks: &[usize], rng: &mut StdRng) -> Option<usize> {
    let bs = BS as usize;
    let logs: Vec<usize> = blocks
        .iter()
        .copied()
        .filter(|&b| get_u32(&meta[b * bs..], 0) == crate::format::header::BLOCK_MAGIC)
        .collect();
    (!logs.is_empty()).then(|| logs[rng.gen_range(0..logs.len())])
}

fn damage(seed: u64) -> (Vec<u8>, Vec<u8>, String) {
    let mut rng = StdRng::seed_from_u64(seed);
    let which = rng.gen_range(0..2);
    let (meta0, data0) = &bases()[which];
    let target = &targets()[which];
    let (mut meta, mut data) = (meta0.clone(), data0.clone());
    let bs = BS as usize;
    // Mostly live blocks (damage to dead ones is harmless by design).
    let blocks = if rng.gen_bool(0.75) {
        target.live.clone()
    } else {
        written(&meta)
    };
    let nblocks = (meta.len() / bs) as u64;
    let tag = Superblock::decode(&meta[..4096]).unwrap().uuid_tag();
    let pick = |rng: &mut StdRng| blocks[rng.gen_range(0..blocks.len())];
    let what = match rng.gen_range(0..14) {
        0 => {
            let mut w = Vec::new();
            for _ in 0..rng.gen_range(1..=4) {
                let blk = pick(&mut rng);
                for _ in 0..rng.gen_range(1..=16) {
                    let bit = rng.gen_range(0..bs * 8);
                    meta[blk * bs + bit / 8] ^= 1 << (bit % 8);
                }
                w.push(blk);
            }
            format!("bits flipped in metadata blocks {w:?}")
        }
        1 => {
            let mut w = Vec::new();
            for _ in 0..rng.gen_range(1..=3) {
                let blk = pick(&mut rng);
                meta[blk * bs..(blk + 1) * bs].fill(0);
                w.push(blk);
            }
            format!("metadata blocks zeroed {w:?}")
        }
        2 => {
            let mut len = rng.gen_range(0..meta.len());
            if rng.gen_bool(0.5) {
                len -= len % bs;
            }
            meta.truncate(len);
            format!("metadata device truncated to {len} bytes")
        }
        3 => {
            let len = rng.gen_range(0..data.len());
            data.truncate(len);
            format!("data device truncated to {len} bytes")
        }
        4 => {
            std::mem::swap(&mut meta, &mut data);
            "devices swapped".into()
        }
        5 => {
            let other = &bases()[1].1;
            data = other.clone();
            "the data device of another file system".into()
        }
        6 => {
            let mut w = Vec::new();
            for _ in 0..rng.gen_range(1..=3) {
                let (from, to) = (pick(&mut rng), pick(&mut rng));
                let b = meta[from * bs..(from + 1) * bs].to_vec();
                meta[to * bs..(to + 1) * bs].copy_from_slice(&b);
                w.push((from, to));
            }
            format!("metadata blocks copied over others {w:?}")
        }
        7 => {
            // A summary that lies about its blocks or records (its CRC sealed again).
            let sums: Vec<usize> = if !target.summaries.is_empty() && rng.gen_bool(0.8) {
                target.summaries.clone()
            } else {
                written(&meta)
                    .into_iter()
                    .filter(|&b| get_u32(&meta[b * bs..], 0) == SS_MAGIC)
                    .collect()
            };
            let blk = sums[rng.gen_range(0..sums.len())];
            let n = Summary::peek_len(&meta[blk * bs..(blk + 1) * bs], tag).unwrap_or(1);
            let end = ((blk + n) * bs).min(meta.len());
            let Ok(mut s) = Summary::decode(&meta[blk * bs..end], tag) else {
                return (meta, data, "an undecodable summary left alone".into());
            };
            let mut what = Vec::new();
            for _ in 0..rng.gen_range(1..=3) {
                match rng.gen_range(0..6) {
                    0 if !s.descriptors.is_empty() => {
                        let i = rng.gen_range(0..s.descriptors.len());
                        let kinds = [1u8, 2, 3, 4, 5, 6];
                        let k = kinds[rng.gen_range(0..kinds.len())];
                        s.descriptors[i].kind = crate::format::BlockKind::from_u8(k).unwrap();
                        what.push(format!("descriptor {i} kind {k}"));
                    }
                    1 if !s.descriptors.is_empty() => {
                        let i = rng.gen_range(0..s.descriptors.len());
                        s.descriptors[i].owner = interesting(&mut rng, nblocks);
                        s.descriptors[i].index = interesting(&mut rng, nblocks);
                        s.descriptors[i].level = rng.gen_range(0..6);
                        what.push(format!("descriptor {i} owner/index/level"));
                    }
                    2 if !s.records.is_empty() => {
                        use crate::format::summary::Record;
                        let i = rng.gen_range(0..s.records.len());
                        let a = interesting(&mut rng, nblocks);
                        let c = interesting(&mut rng, nblocks);
                        s.records[i] = match rng.gen_range(0..6) {
                            0 => Record::IFree {
                                ino: a,
                                generation: c as u32,
                            },
                            1 => Record::NFree { node: a },
                            2 => Record::Dead { addr: a, count: c },
                            3 => Record::DAlloc { start: a, count: c },
                            4 => Record::DFree { start: a, count: c },
                            _ => Record::GroupDirs {
                                group: a,
                                delta: c as i64,
                            },
                        };
                        what.push(format!("record {i}: {:?}", s.records[i]));
                    }
                    3 => {
                        s.next_segment = interesting(&mut rng, 16);
                        what.push("next segment".into());
                    }
                    4 => {
                        s.flags = rng.gen_range(0..4);
                        what.push("flags".into());
                    }
                    _ => {
                        s.serial = s.serial.wrapping_add(rng.gen_range(0..3));
                        what.push("serial".into());
                    }
                }
            }
            let enc = s.encode(BS as u32);
            let end = (blk * bs + enc.len()).min(meta.len());
            meta[blk * bs..end].copy_from_slice(&enc[..end - blk * bs]);
            // Sometimes the block count lies too.
            if rng.gen_bool(0.2) {
                put(&mut meta[blk * bs..], 60, 4, interesting(&mut rng, 64));
                let len = (n * bs).min(meta.len() - blk * bs);
                seal_crc(&mut meta[blk * bs..blk * bs + len], 8);
                what.push("block count".into());
            }
            format!("summary at {blk} lies: {what:?}")
        }
        8 => {
            // A log block whose header lies (kind, level, owner, index), sealed again.
            let Some(blk) = pick_log_block(&meta, &blocks, &mut rng) else {
                return (meta, data, "no log block to damage".into());
            };
            let b = &mut meta[blk * bs..(blk + 1) * bs];
            match rng.gen_range(0..4) {
                0 => b[4] = rng.gen_range(0..8),
                1 => b[5] = rng.gen_range(0..8),
                2 => put(b, 16, 8, interesting(&mut rng, nblocks)),
                _ => put(b, 24, 8, interesting(&mut rng, nblocks)),
            }
            BlockHeader::seal(b);
            format!("header of block {blk} lies")
        }
        9 | 10 => {
            // A consistent lie inside a log block: a field of an inode, pointer, table
            // entry or tree node, with the inode and block checksums sealed again.
            let Some(blk) = pick_log_block(&meta, &blocks, &mut rng) else {
                return (meta, data, "no log block to damage".into());
            };
            let b = &mut meta[blk * bs..(blk + 1) * bs];
            let kind = b[4];
            let mut what = Vec::new();
            for _ in 0..rng.gen_range(1..=3) {
                if kind == 1 {
                    // INODES: a field of one inode, or the count.
                    if rng.gen_bool(0.1) {
                        put(b, 32, 2, rng.gen_range(0..20));
                        what.push("inode count".to_string());
                        continue;
                    }
                    let slot = rng.gen_range(1..bs / INODE_SIZE);
                    let offs = [
                        0usize, 8, 12, 24, 28, 32, 40, 96, 108, 112, 120, 200, 208, 216, 224, 232,
                    ];
                    let off = offs[rng.gen_range(0..offs.len())];
                    let width = if [8, 12, 24, 28, 108].contains(&off) {
                        4
                    } else {
                        8
                    };
                    let v = if off == 12 {
                        let types = [libc::S_IFREG, libc::S_IFDIR, libc::S_IFLNK, libc::S_IFIFO];
                        (types[rng.gen_range(0..types.len())] | 0o644) as u64
                    } else {
                        interesting(&mut rng, nblocks)
                    };
                    let s = &mut b[slot * INODE_SIZE..(slot + 1) * INODE_SIZE];
                    put(s, off, width, v);
                    seal_crc(s, 252);
                    what.push(format!("slot {slot} offset {off}"));
                } else {
                    let off = HEADER_SIZE + 8 * rng.gen_range(0..(bs - HEADER_SIZE) / 8);
                    let off = if rng.gen_bool(0.5) {
                        off
                    } else {
                        HEADER_SIZE + rng.gen_range(0..16)
                    };
                    let width = [1usize, 2, 4, 8][rng.gen_range(0..4)];
                    put(b, off, width, interesting(&mut rng, nblocks));
                    what.push(format!("offset {off}"));
                }
            }
            BlockHeader::seal(b);
            format!("block {blk} (kind {kind}) lies: {what:?}")
        }
        11 => {
            // A checkpoint that lies.
            let region = rng.gen_range(1..=2);
            let b = &mut meta[region * bs..(region + 1) * bs];
            for _ in 0..rng.gen_range(1..=3) {
                let off = 8 * rng.gen_range(2..128);
                put(b, off, 8, interesting(&mut rng, nblocks));
            }
            seal_crc(&mut b[..1024], 12);
            format!("checkpoint region {region} lies")
        }
        12 => {
            // A superblock that lies (primary or the data device's).
            let dev = if rng.gen_bool(0.7) {
                &mut meta
            } else {
                &mut data
            };
            let offs = [36usize, 40, 48, 56, 60, 64, 72, 80, 136, 144, 152, 208];
            let off = offs[rng.gen_range(0..offs.len())];
            let width = if [36, 56, 60, 136].contains(&off) {
                4
            } else {
                8
            };
            put(dev, off, width, interesting(&mut rng, nblocks));
            seal_crc(&mut dev[..4096], 12);
            format!("superblock field at {off} lies")
        }
        _ => {
            let mut w = Vec::new();
            for _ in 0..rng.gen_range(1..=64) {
                let bit = rng.gen_range(0..meta.len() * 8);
                meta[bit / 8] ^= 1 << (bit % 8);
                w.push(bit / 8 / bs);
            }
            format!("bits flipped anywhere (blocks {w:?})")
        }
    };
    (meta, data, what)
}

/// Walk what the mounted file system shows, reading a little of everything.
fn walk(fs: &Fs) {
    let mut dirs = vec![ROOT];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        let mut found = Vec::new();
        let _ = fs.readdir(dir, 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                found.push(e.clone());
            }
            found.len() < 500
        });
        for e in found {
            seen += 1;
            if seen > 2000 {
                return;
            }
            let _ = fs.lookup(dir, &e.name);
            let Ok(attr) = fs.getattr(e.ino) else {
                continue;
            };
            let root = crate::fs::Caller::ROOT;
            if let Ok(names) = fs.listxattr(&root, e.ino) {
                for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()).take(20) {
                    let _ = fs.getxattr_len(&root, e.ino, name);
                    let _ = fs.getxattr(&root, e.ino, name);
                }
            }
            let _ = fs.getxattr(&root, e.ino, b"security.capability");
            match attr.kind {
                FileKind::Directory if dirs.len() < 200 => dirs.push(e.ino),
                FileKind::Regular => {
                    let _ = fs.read(e.ino, 0, 0, 65536);
                    let _ = fs.read(e.ino, 0, attr.size.saturating_sub(10), 4096);
                }
                FileKind::Symlink => {
                    let _ = fs.readlink(e.ino);
                }
                _ => {}
            }
        }
    }
    let _ = fs.statfs();
}

/// What happened to one image that went well: (the check found it clean, it mounted).
type Seen = (bool, bool);

/// Check and mount one damaged image; Err says what went wrong.
fn one(meta: Vec<u8>, data: Vec<u8>) -> Result<Seen, String> {
    let meta = Arc::new(MemDevice::from_bytes(meta));
    let data = Arc::new(MemDevice::from_bytes(data));
    let before = (meta.snapshot(), data.snapshot());
    let r = catch_unwind(AssertUnwindSafe(|| check(&*meta, &*data)))
        .map_err(|p| format!("the checker panicked: {}", panic_text(&p)))?;
    let clean = r
        .map_err(|e| format!("the checker failed (memory devices never do): {e}"))?
        .is_clean();
    if before != (meta.snapshot(), data.snapshot()) {
        return Err("the checker wrote to a device".into());
    }
    let mounted = catch_unwind(AssertUnwindSafe(|| {
        let m: Arc<dyn BlockDevice> = meta.clone();
        let d: Arc<dyn BlockDevice> = data.clone();
        match Fs::mount(m, d, quiet_mount_options()) {
            Ok(fs) => {
                walk(&fs);
                let _ = fs.unmount();
                Ok::<bool, String>(true)
            }
            Err(e) if e.to_string().is_empty() => Err("mount refused with no message".into()),
            Err(_) => Ok(false),
        }
    }))
    .map_err(|p| format!("mount or a read panicked: {}", panic_text(&p)))?;
    Ok((clean, mounted?))
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Run `f` on a thread; Err if it does not finish in time.
fn bounded<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
    limit: Duration,
) -> Result<T, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .map_err(|_| format!("no answer in {limit:?} (a hang)"))
}

/// `DUALFS_HOSTILE_SEED=N cargo test hostile` runs image N alone, panics unhidden (with a
/// backtrace under RUST_BACKTRACE=1).
fn only_seed() -> Option<u64> {
    std::env::var("DUALFS_HOSTILE_SEED").ok()?.parse().ok()
}

#[test]
fn a_thousand_damaged_images_never_panic_hang_or_get_written_by_the_checker() {
    bases();
    if let Some(seed) = only_seed() {
        let (meta, data, what) = damage(seed);
        eprintln!("seed {seed}: {what}");
        eprintln!("{:?}", one(meta, data));
        return;
    }
    // Panics are caught and reported per image; keep the default hook quiet meanwhile.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let mut failures = Vec::new();
    let mut slowest = (Duration::ZERO, 0);
    let (mut clean, mut mounted) = (0, 0);
    let images = images();
    for seed in 0..images {
        let (meta, data, what) = damage(seed);
        let t = Instant::now();
        let r = bounded(move || one(meta, data), PER_IMAGE).and_then(|r| r);
        slowest = slowest.max((t.elapsed(), seed));
        match r {
            Ok((c, m)) => {
                clean += c as u32;
                mounted += m as u32;
            }
            Err(e) => failures.push(format!("seed {seed} ({what}): {e}")),
        }
    }
    std::panic::set_hook(hook);
    eprintln!(
        "{images} damaged images in {:?}: {clean} checked clean (damage to dead blocks), \
         {mounted} mounted; slowest {:?} (seed {})",
        started.elapsed(),
        slowest.0,
        slowest.1
    );
    assert!(
        failures.is_empty(),
        "{} of {images} images failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Repair one damaged image with every repair allowed: no panic; a repair that says it left
/// the file system clean leaves one that checks clean and mounts; an image that mounted
/// before still mounts after (a repair never makes things worse).
fn repair_one(meta: Vec<u8>, data: Vec<u8>) -> Result<bool, String> {
    use crate::check::repair::{repair, Policy, RepairOptions};
    let mounts = |m: &Arc<MemDevice>, d: &Arc<MemDevice>| {
        let copy = |x: &Arc<MemDevice>| Arc::new(MemDevice::from_bytes(x.snapshot()));
        let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (copy(m), copy(d));
        match Fs::mount(m, d, quiet_mount_options()) {
            Ok(fs) => {
                walk(&fs);
                let _ = fs.unmount();
                true
            }
            Err(_) => false,
        }
    };
    let meta = Arc::new(MemDevice::from_bytes(meta));
    let data = Arc::new(MemDevice::from_bytes(data));
    let mounted_before = catch_unwind(AssertUnwindSafe(|| mounts(&meta, &data)))
        .map_err(|p| format!("mount panicked: {}", panic_text(&p)))?;
    let (m, d): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) = (meta.clone(), data.clone());
    let opts = RepairOptions {
        policy: Policy::all(),
        ..RepairOptions::default()
    };
    let out = catch_unwind(AssertUnwindSafe(|| repair(&m, &d, &opts, &mut |_| false)))
        .map_err(|p| format!("the repair panicked: {}", panic_text(&p)))?
        .map_err(|e| format!("the repair failed (memory devices never do): {e}"))?;
    let again = check(&*meta, &*data).map_err(|e| e.to_string())?;
    if out.last.is_clean() && !again.is_clean() {
        return Err(format!("repaired, yet a second check finds:\n{again}"));
    }
    let mounted_after = catch_unwind(AssertUnwindSafe(|| mounts(&meta, &data)))
        .map_err(|p| format!("mount after the repair panicked: {}", panic_text(&p)))?;
    if out.last.is_clean() && !mounted_after {
        return Err("repaired clean, but it does not mount".into());
    }
    if mounted_before && !mounted_after {
        return Err(format!(
            "it mounted before the repair and not after; repairs: {:#?}",
            out.done
        ));
    }
    if !out.last.is_clean() && std::env::var("DUALFS_HOSTILE_VERBOSE").is_ok() {
        let first = out
            .last
            .errors()
            .next()
            .map(|p| format!("[{}] {}", p.pass, p.message));
        eprintln!("LEFT {:?} | {:?}", first, out.uncorrectable.first());
    }
    Ok(out.last.is_clean())
}

#[test]
fn repairs_of_damaged_images_never_panic_hang_or_make_things_worse() {
    bases();
    let count = images() / 3;
    let hook = std::panic::take_hook();
    if only_seed().is_none() {
        std::panic::set_hook(Box::new(|_| {}));
    }
    let started = Instant::now();
    let (mut failures, mut repaired) = (Vec::new(), 0);
    let seeds: Vec<u64> = match only_seed() {
        Some(s) => vec![s],
        None => (0..count).map(|i| 7919 * i + 1).collect(),
    };
    for &seed in &seeds {
        let (meta, data, what) = damage(seed);
        match bounded(move || repair_one(meta, data), PER_IMAGE).and_then(|r| r) {
            Ok(clean) => repaired += clean as u32,
            Err(e) => failures.push(format!("seed {seed} ({what}): {e}")),
        }
    }
    std::panic::set_hook(hook);
    eprintln!(
        "{} damaged images repaired in {:?}: {repaired} clean afterwards",
        seeds.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} of {} repairs failed:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
}

// ---- Regressions: each a core bug the images above found ----------------------------------

/// A checkpoint whose next segment (or head) lies outside the log made roll-forward index the
/// usage table out of range: mount panicked.
#[test]
fn checkpoint_naming_a_segment_outside_the_log() {
    use super::damage::{layout, rewrite_checkpoint};
    for lie in 0..3 {
        let img = super::clean::workload_image();
        let cp = layout(&img).cp;
        rewrite_checkpoint(
            &img,
            crate::format::checkpoint::Checkpoint::region(cp.serial),
            |c| match lie {
                0 => c.next_segment = 1023,
                1 => c.log_head = u64::MAX / 2,
                _ => c.next_segment = img.superblock().segment_of(c.log_head),
            },
        );
        let e = Fs::mount(img.meta.clone(), img.data.clone(), quiet_mount_options())
            .err()
            .expect("mount refuses");
        assert!(e.to_string().contains("checkpoint"), "{e}");
        let r = check(&*img.meta, &*img.data).unwrap();
        assert!(!r.is_clean());
    }
}

/// A block pointer past the data device was multiplied into a device offset: reading the
/// file panicked (overflow). It is EIO now, and the rest of the file system still reads.
#[test]
fn pointer_past_the_data_device_is_eio() {
    use super::damage::rewrite_inode;
    let img = super::clean::workload_image();
    let (five, double) = (img.ino("b/five-moved"), img.ino("b/double"));
    rewrite_inode(&img, five, |d| d.direct[1] = u64::MAX / 3);
    let fs = Fs::mount(img.meta.clone(), img.data.clone(), quiet_mount_options()).unwrap();
    assert!(fs.getattr(five).is_ok());
    assert!(fs.read(five, 0, 0, 3 * BS as u32).is_err());
    assert_eq!(
        fs.read(five, 0, 0, 100).unwrap().len(),
        100,
        "block 0 is fine"
    );
    assert_eq!(fs.read(double, 0, 0, 8192).unwrap().len(), 8192);
    // Reads at the far end of the largest offsets do not overflow either.
    assert!(fs.read(double, 0, u64::MAX - 10, 4096).unwrap().is_empty());
    fs.unmount().unwrap();
}

/// getattr multiplied i_blocks (and a directory's i_size) from disk without a bound: a huge
/// value in an inode with a valid CRC panicked (overflow) on stat.
#[test]
fn huge_counts_in_an_inode_do_not_overflow_stat() {
    use super::damage::rewrite_inode;
    let img = super::clean::workload_image();
    let (a, double) = (img.ino("a"), img.ino("b/double"));
    rewrite_inode(&img, a, |d| d.size = u64::MAX);
    rewrite_inode(&img, double, |d| d.blocks = u64::MAX);
    let fs = Fs::mount(img.meta.clone(), img.data.clone(), quiet_mount_options()).unwrap();
    assert_eq!(fs.getattr(double).unwrap().blocks, u64::MAX);
    assert!(fs.getattr(a).unwrap().size > 0);
    assert!(fs.lookup(ROOT, b"a").is_ok());
    fs.unmount().unwrap();
}

/// An indirect or symlink pointer of 2^62 was multiplied into a device offset: reading the
/// file (or mount freeing an orphan) panicked (overflow). It is EIO now.
#[test]
fn indirect_pointer_past_any_device_is_eio() {
    use super::damage::rewrite_inode;
    let img = super::clean::workload_image();
    let (double, long) = (img.ino("b/double"), img.ino("longest"));
    rewrite_inode(&img, double, |d| d.indirect[0] = u64::MAX / 3);
    rewrite_inode(&img, long, |d| d.direct[0] = u64::MAX / 5);
    let fs = Fs::mount(img.meta.clone(), img.data.clone(), quiet_mount_options()).unwrap();
    assert!(fs.read(double, 0, 12 * BS, 4096).is_err());
    assert_eq!(
        fs.read(double, 0, 0, 4096).unwrap().len(),
        4096,
        "direct blocks are fine"
    );
    assert!(fs.readlink(long).is_err());
    fs.unmount().unwrap();
}

/// Unwritten pointers that name no block (address 0, past the device, high bits set): every
/// path through the core that meets them answers EIO or goes on, none panics, and nothing is
/// freed on their account.
#[test]
fn nonsense_unwritten_pointers_are_eio() {
    use super::damage::rewrite_inode;
    use crate::format::bmap::UNWRITTEN;
    use crate::fs::Whence;
    let img = super::clean::unwritten_image();
    let (pre, keep) = (img.ino("pre"), img.ino("keep"));
    rewrite_inode(&img, pre, |d| {
        d.direct[0] = UNWRITTEN;
        d.direct[1] = UNWRITTEN | (u64::MAX >> 2);
        d.direct[3] |= 1 << 55;
    });
    rewrite_inode(&img, keep, |d| d.indirect[0] |= UNWRITTEN);
    let fs = Fs::mount(img.meta.clone(), img.data.clone(), quiet_mount_options()).unwrap();
    let fh = fs.open(&U, pre, libc::O_RDWR).unwrap();
    assert!(fs.read(pre, fh, 0, 4 * BS as u32).is_err());
    assert!(fs.write(pre, fh, 10, b"x").is_err());
    assert!(fs.seek(pre, 0, Whence::Data).is_ok());
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    for mode in [0, punch, libc::FALLOC_FL_ZERO_RANGE] {
        assert_eq!(
            fs.fallocate(pre, fh, 0, 8 * BS, mode).unwrap_err().errno(),
            libc::EIO,
            "mode {mode:#x}"
        );
    }
    let (c, ch) = fs.create(&U, ROOT, b"copy", 0o644, libc::O_RDWR).unwrap();
    assert!(fs
        .copy_file_range(pre, fh, 0, c.ino, ch, 0, 8 * BS, 0)
        .is_err());
    // Blocks 4.. are sound: they read as zeros.
    assert_eq!(
        fs.read(pre, fh, 4 * BS, BS as u32).unwrap(),
        vec![0u8; BS as usize]
    );
    let kh = fs.open(&U, keep, libc::O_RDWR).unwrap();
    assert!(fs.fallocate(keep, kh, 0, 100 * BS, 0).is_err());
    assert!(fs.seek(keep, 0, Whence::Hole).is_ok());
    assert_eq!(fs.read(keep, kh, 0, 100).unwrap(), vec![1u8; 100]);
    for (ino, h) in [(pre, fh), (c.ino, ch), (keep, kh)] {
        fs.release(ino, h).unwrap();
    }
    fs.unmount().unwrap();
}
