//! fallocate (every mode and error), lseek SEEK_DATA/SEEK_HOLE, copy_file_range, through a
//! real mount, as root and as an unprivileged user; sparse files through cp, tar and rsync;
//! preallocated and punched files across remount and kill -9.
//!
//! With `-o writeback_cache` (scripts/test.sh runs this file again so) the kernel answers
//! SEEK_DATA/SEEK_HOLE from the size alone (DualFS declines LSEEK there: the kernel would not
//! write dirty pages back before asking), which the seek checks allow for.

#[macro_use]
mod common;

use common::user::as_user;
use common::*;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
const BS: u64 = 4096;
/// DualFS's largest file with 4 KiB blocks (docs/FORMAT.md).
const LARGEST: u64 = 538_030_473_216;
const USER: (u32, u32) = (1000, 1000);

fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> io::Result<()> {
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn seek(f: &File, off: u64, whence: i32) -> io::Result<u64> {
    let r = unsafe { libc::lseek(f.as_raw_fd(), off as i64, whence) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

fn copy_range(
    src: &File,
    off_in: u64,
    dst: &File,
    off_out: u64,
    len: u64,
    flags: u32,
) -> io::Result<u64> {
    let (mut i, mut o) = (off_in as i64, off_out as i64);
    let r = unsafe {
        libc::copy_file_range(
            src.as_raw_fd(),
            &mut i,
            dst.as_raw_fd(),
            &mut o,
            len as usize,
            flags,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

/// Copy all of [off_in, off_in + len) (copy_file_range may stop short).
fn copy_all(src: &File, off_in: u64, dst: &File, off_out: u64, len: u64) -> u64 {
    let mut done = 0;
    while done < len {
        let n = copy_range(src, off_in + done, dst, off_out + done, len - done, 0).unwrap();
        if n == 0 {
            break;
        }
        done += n;
    }
    done
}

fn rw(p: &Path) -> File {
    open(p, libc::O_RDWR | libc::O_CREAT, 0o644).unwrap()
}

/// st_blocks of an open file, asked of the file system (with the writeback cache the kernel
/// would answer from attributes it cached before its pages were written back).
fn fresh_blocks(f: &File) -> u64 {
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::statx(
            f.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_FORCE_SYNC,
            libc::STATX_BLOCKS,
            &mut stx,
        )
    };
    assert_eq!(r, 0, "statx: {}", io::Error::last_os_error());
    stx.stx_blocks
}

/// st_blocks in 4 KiB blocks, after the file's data is written back.
fn blocks(f: &File) -> u64 {
    fsync(f).unwrap();
    fresh_blocks(f) / 8
}

fn bfree(fs: &TestFs) -> u64 {
    statvfs(fs.path()).f_bfree
}

fn read_all(p: &Path) -> Vec<u8> {
    fs::read(p).unwrap()
}

/// A directory of its own for `who` (root or USER) under the mount.
fn home(fs: &TestFs, name: &str, who: Option<(u32, u32)>) -> PathBuf {
    let d = fs.join(name);
    mkdir(&d, 0o755).unwrap();
    if let Some((u, g)) = who {
        chown(&d, u, g).unwrap();
    }
    d
}

/// Run `f` as root (None) or as the user.
fn run_as<T: Send>(who: Option<(u32, u32)>, f: impl FnOnce() -> T + Send) -> T {
    match who {
        None => f(),
        Some((u, g)) => as_user(u, g, f),
    }
}

const WHO: [Option<(u32, u32)>; 2] = [None, Some(USER)];

#[test]
fn fallocate_modes_sizes_and_blocks() {
    let fs = TestFs::new();
    let dualfs = fs.is_dualfs();
    for (i, who) in WHO.into_iter().enumerate() {
        let dir = home(&fs, &format!("d{i}"), who);
        run_as(who, || {
            // Mode 0: allocated, the size grows, zeros.
            let p = dir.join("pre");
            let f = rw(&p);
            fallocate(&f, 0, 0, 10 << 20).unwrap();
            assert_eq!(f.metadata().unwrap().len(), 10 << 20);
            assert_eq!(blocks(&f), 2560);
            assert!(read_all(&p).iter().all(|&b| b == 0));
            // KEEP_SIZE past the end: allocated, the size stays.
            fallocate(&f, KEEP, 10 << 20, 4 << 20).unwrap();
            assert_eq!(f.metadata().unwrap().len(), 10 << 20);
            assert_eq!(blocks(&f), 3584);
            // A write into preallocated blocks allocates nothing; around it, zeros.
            f.write_all_at(b"written", 5000).unwrap();
            assert_eq!(blocks(&f), 3584);
            let all = read_all(&p);
            assert_eq!(&all[5000..5007], b"written");
            assert_eq!(all.iter().filter(|&&b| b != 0).count(), 7);
            // Growing over the preallocation past the end shows zeros.
            f.set_len(12 << 20).unwrap();
            assert!(read_all(&p)[10 << 20..].iter().all(|&b| b == 0));

            // Punch: whole blocks freed, partial ones zeroed, the size kept.
            let p = dir.join("punched");
            let f = rw(&p);
            let data = content(7, 100_000);
            f.write_all_at(&data, 0).unwrap();
            assert_eq!(blocks(&f), 25);
            let free = bfree(&fs);
            fallocate(&f, PUNCH, 5000, 60_000).unwrap();
            assert_eq!(blocks(&f), 12);
            if dualfs {
                fsync(&f).unwrap();
                assert_eq!(
                    bfree(&fs),
                    free + 13,
                    "statfs counts the punched blocks free"
                );
            }
            assert_eq!(f.metadata().unwrap().len(), 100_000);
            let all = read_all(&p);
            assert_eq!(&all[..5000], &data[..5000]);
            assert!(all[5000..65_000].iter().all(|&b| b == 0));
            assert_eq!(&all[65_000..], &data[65_000..]);
            // Everything.
            fallocate(&f, PUNCH, 0, 1 << 20).unwrap();
            assert_eq!(blocks(&f), 0);
            assert_eq!(f.metadata().unwrap().len(), 100_000);

            // Zero range: zeros, still allocated; without KEEP_SIZE the size grows.
            let p = dir.join("zeroed");
            let f = rw(&p);
            let data = content(8, 40_000);
            f.write_all_at(&data, 0).unwrap();
            match fallocate(&f, ZERO | KEEP, 5000, 15_000) {
                // tmpfs has no ZERO_RANGE.
                Err(e) if !dualfs && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
                r => {
                    r.unwrap();
                    if dualfs {
                        assert_eq!(blocks(&f), 10, "nothing is freed");
                    }
                    let all = read_all(&p);
                    assert_eq!(&all[..5000], &data[..5000]);
                    assert!(all[5000..20_000].iter().all(|&b| b == 0));
                    assert_eq!(&all[20_000..], &data[20_000..]);
                    fallocate(&f, ZERO, 30_000, 70_000).unwrap();
                    assert_eq!(f.metadata().unwrap().len(), 100_000);
                    if dualfs {
                        assert_eq!(blocks(&f), 25, "the range is allocated");
                    }
                    assert!(read_all(&p)[30_000..].iter().all(|&b| b == 0));
                }
            }

            // The errors.
            assert_errno!(fallocate(&f, 0, 0, 0), libc::EINVAL);
            assert_errno!(
                fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE, 0, BS),
                libc::EOPNOTSUPP
            );
            assert_errno!(
                fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE | ZERO | KEEP, 0, BS),
                libc::EOPNOTSUPP
            );
            let ro = File::open(&p).unwrap();
            assert_errno!(fallocate(&ro, 0, 0, BS), libc::EBADF);
            if dualfs {
                for mode in [
                    libc::FALLOC_FL_COLLAPSE_RANGE,
                    libc::FALLOC_FL_INSERT_RANGE,
                    libc::FALLOC_FL_UNSHARE_RANGE,
                ] {
                    assert_errno!(fallocate(&f, mode, 0, BS), libc::EOPNOTSUPP);
                }
                // The largest file: nothing may be allocated past it.
                let big = rw(&dir.join("largest"));
                assert_errno!(fallocate(&big, 0, LARGEST - BS, 2 * BS), libc::EFBIG);
                assert_errno!(fallocate(&big, KEEP, LARGEST, 1), libc::EFBIG);
                fallocate(&big, 0, LARGEST - BS, BS).unwrap();
                assert_eq!(big.metadata().unwrap().len(), LARGEST);
                assert_eq!(blocks(&big), 1);
                fallocate(&big, PUNCH, LARGEST - BS, 1 << 30).unwrap();
                assert_eq!(blocks(&big), 0);
            }
        });
    }
    // Another user may not fallocate a file it cannot write.
    let theirs = fs.join("d0/pre");
    as_user(USER.0, USER.1, || {
        assert_errno!(open(&theirs, libc::O_RDWR, 0), libc::EACCES);
    });
}

#[test]
fn fallocate_enospc_leaves_the_file_as_it_was() {
    dualfs_only!();
    let fs = TestFs::builder().sizes(64 << 20, 16 << 20).mount();
    for (i, who) in WHO.into_iter().enumerate() {
        let dir = home(&fs, &format!("d{i}"), who);
        run_as(who, || {
            let p = dir.join("f");
            let f = rw(&p);
            let data = content(9, 4 << 20);
            f.write_all_at(&data, 0).unwrap();
            fsync(&f).unwrap();
            let before = f.metadata().unwrap();
            let before_blocks = fresh_blocks(&f);
            let free = bfree(&fs);
            for (mode, off, len) in [
                (0, 0, 32 << 20),
                (KEEP, 4 << 20, 32 << 20),
                (ZERO, 2 << 20, 32 << 20),
                (ZERO | KEEP, 2 << 20, 32 << 20),
            ] {
                assert_errno!(fallocate(&f, mode, off, len), libc::ENOSPC);
                let now = f.metadata().unwrap();
                assert_eq!(now.len(), before.len(), "mode {mode:#x}");
                assert_eq!(fresh_blocks(&f), before_blocks, "mode {mode:#x}");
                // With the writeback cache the kernel stamps the times itself before it asks.
                if !fs.writeback_cache() {
                    assert_eq!(
                        (now.mtime(), now.mtime_nsec()),
                        (before.mtime(), before.mtime_nsec()),
                        "mode {mode:#x}"
                    );
                }
                assert_eq!(read_all(&p), data, "mode {mode:#x}");
                assert_eq!(bfree(&fs), free, "mode {mode:#x}");
            }
            drop(f);
            unlink(&p).unwrap();
        });
    }
}

/// A preallocation whose indirect blocks the metadata log cannot take is refused before
/// anything changes, although the data device has the room.
#[test]
fn fallocate_too_big_for_the_log_is_enospc() {
    dualfs_only!();
    let fs = TestFs::builder().sizes(48 << 20, 100 << 30).mount();
    let p = fs.join("f");
    let f = rw(&p);
    f.write_all_at(b"data", 0).unwrap();
    fsync(&f).unwrap();
    let free = bfree(&fs);
    // 90 GiB take about 180 MiB of indirect blocks.
    assert_errno!(fallocate(&f, 0, 0, 90 << 30), libc::ENOSPC);
    assert_eq!(f.metadata().unwrap().len(), 4);
    assert_eq!(blocks(&f), 1);
    assert_eq!(bfree(&fs), free);
    // A preallocation the log can take still works.
    fallocate(&f, 0, 0, 1 << 30).unwrap();
    assert_eq!(blocks(&f), 262_144);
    assert_eq!(read_all(&p)[..4], *b"data");
}

/// What lseek must answer: from the block map, or with the writeback cache from the size.
struct Seeker {
    writeback: bool,
}

impl Seeker {
    fn data(&self, f: &File, off: u64, want: io::Result<u64>) {
        self.check(f, off, libc::SEEK_DATA, want)
    }
    fn hole(&self, f: &File, off: u64, want: io::Result<u64>) {
        self.check(f, off, libc::SEEK_HOLE, want)
    }
    fn check(&self, f: &File, off: u64, whence: i32, want: io::Result<u64>) {
        let size = f.metadata().unwrap().len();
        let want = match want {
            // The kernel's answer from the size: everything before the end is data.
            _ if self.writeback && off >= size => Err(libc::ENXIO),
            _ if self.writeback && whence == libc::SEEK_DATA => Ok(off),
            _ if self.writeback => Ok(size),
            Ok(v) => Ok(v),
            Err(e) => Err(e.raw_os_error().unwrap()),
        };
        let got = seek(f, off, whence).map_err(|e| e.raw_os_error().unwrap());
        assert_eq!(
            got, want,
            "lseek({off}, {whence}) of a file of {size} bytes"
        );
    }
}

#[test]
fn seek_data_and_hole_on_dense_sparse_preallocated_and_empty_files() {
    let fs = TestFs::new();
    let s = Seeker {
        writeback: fs.writeback_cache(),
    };
    let enxio = || Err(io::Error::from_raw_os_error(libc::ENXIO));
    for (i, who) in WHO.into_iter().enumerate() {
        let dir = home(&fs, &format!("d{i}"), who);
        run_as(who, || {
            let empty = rw(&dir.join("empty"));
            s.data(&empty, 0, enxio());
            s.hole(&empty, 0, enxio());
            let dense = rw(&dir.join("dense"));
            dense.write_all_at(&content(1, 50_000), 0).unwrap();
            s.data(&dense, 0, Ok(0));
            s.data(&dense, 777, Ok(777));
            s.hole(&dense, 0, Ok(50_000));
            s.hole(&dense, 49_999, Ok(50_000));
            s.data(&dense, 50_000, enxio());
            s.hole(&dense, 50_000, enxio());
            s.data(&dense, 1 << 40, enxio());
            // The file: 8 MiB of data at the end of 4.6 GiB.
            let sparse = rw(&dir.join("sparse"));
            let at = 4_600 << 20;
            sparse.write_all_at(&content(2, 8 << 20), at).unwrap();
            fsync(&sparse).unwrap();
            s.data(&sparse, 0, Ok(at));
            s.hole(&sparse, 0, Ok(0));
            s.data(&sparse, at + 100, Ok(at + 100));
            s.hole(&sparse, at, Ok(at + (8 << 20)));
            // Preallocated blocks are holes, as ext4 and XFS report them.
            let pre = rw(&dir.join("pre"));
            fallocate(&pre, 0, 0, 1 << 20).unwrap();
            s.data(&pre, 0, enxio());
            s.hole(&pre, 0, Ok(0));
            pre.write_all_at(b"x", 300_000).unwrap();
            fsync(&pre).unwrap();
            s.data(&pre, 0, Ok(73 * BS));
            s.hole(&pre, 73 * BS, Ok(74 * BS));
            // A punched hole.
            let punched = rw(&dir.join("punched"));
            punched.write_all_at(&content(3, 100_000), 0).unwrap();
            fallocate(&punched, PUNCH, 5000, 60_000).unwrap();
            s.hole(&punched, 0, Ok(2 * BS));
            s.data(&punched, 2 * BS, Ok(15 * BS));
        });
    }
}

#[test]
fn copy_file_range_keeps_holes_and_gives_linux_errors() {
    let fs = TestFs::new();
    let dualfs = fs.is_dualfs();
    for (i, who) in WHO.into_iter().enumerate() {
        let dir = home(&fs, &format!("d{i}"), who);
        let scratch = fs.scratch().join(format!("s{i}"));
        mkdir(&scratch, 0o755).unwrap();
        if let Some((u, g)) = who {
            chown(&scratch, u, g).unwrap();
        }
        run_as(who, || {
            // 1 MiB of data, a 10 MiB hole with 1 MiB preallocated in it, 12345 bytes.
            let sp = dir.join("src");
            let src = rw(&sp);
            src.write_all_at(&content(4, 1 << 20), 0).unwrap();
            fallocate(&src, 0, 3 << 20, 1 << 20).unwrap();
            src.write_all_at(&content(5, 12_345), 11 << 20).unwrap();
            let size = (11 << 20) + 12_345;
            let want = read_all(&sp);
            // Into a new file: the same bytes, only the data's blocks.
            let dp = dir.join("dst");
            let dst = rw(&dp);
            utimens(&dp, SetTs::At(1000, 0), SetTs::At(1000, 0), false).unwrap();
            assert_eq!(copy_all(&src, 0, &dst, 0, size), size);
            assert_eq!(read_all(&dp), want);
            assert_eq!(dst.metadata().unwrap().len(), size);
            assert!(dst.metadata().unwrap().mtime() > 1000, "mtime updated");
            if dualfs {
                assert_eq!(blocks(&dst), 256 + 4, "the source's holes stay holes");
            }
            // Over a file full of data: the holes are punched there.
            let fp = dir.join("full");
            let full = rw(&fp);
            let old = content(6, 12 << 20);
            full.write_all_at(&old, 0).unwrap();
            assert_eq!(copy_all(&src, 0, &full, 0, size), size);
            let got = read_all(&fp);
            assert_eq!(&got[..size as usize], &want[..]);
            assert_eq!(&got[size as usize..], &old[size as usize..]);
            if dualfs {
                assert_eq!(blocks(&full), 512);
            }
            // Within one file: ranges that share a block but no byte; then to its end.
            let wp = dir.join("within");
            let w = rw(&wp);
            let mut expect = content(7, 3 * BS as usize);
            w.write_all_at(&expect, 0).unwrap();
            assert_eq!(copy_range(&w, 0, &w, 100, 100, 0).unwrap(), 100);
            expect.copy_within(0..100, 100);
            assert_eq!(read_all(&wp), expect);
            assert_eq!(copy_all(&w, 0, &w, 3 * BS, 3 * BS), 3 * BS);
            let doubled: Vec<u8> = expect.iter().chain(&expect).copied().collect();
            assert_eq!(read_all(&wp), doubled);
            // Past the source's end: nothing.
            assert_eq!(copy_range(&src, size, &dst, 0, 100, 0).unwrap(), 0);
            // The errors, as Linux gives them.
            assert_errno!(copy_range(&w, 0, &w, 50, 100, 0), libc::EINVAL);
            assert_errno!(copy_range(&w, 100, &w, 0, 200, 0), libc::EINVAL);
            assert_errno!(copy_range(&src, 0, &dst, 0, 10, 1), libc::EINVAL);
            let append = open(&dp, libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
            assert_errno!(copy_range(&src, 0, &append, 0, 10, 0), libc::EBADF);
            let ro = File::open(&dp).unwrap();
            assert_errno!(copy_range(&src, 0, &ro, 0, 10, 0), libc::EBADF);
            let dirf = File::open(&dir).unwrap();
            assert_errno!(copy_range(&dirf, 0, &dst, 0, 10, 0), libc::EISDIR);
            if dualfs {
                // Across file systems (the scratch directory is on the host's).
                let out = rw(&scratch.join("out"));
                assert_errno!(copy_range(&src, 0, &out, 0, 10, 0), libc::EXDEV);
                assert_errno!(copy_range(&out, 0, &dst, 0, 10, 0), libc::EXDEV);
                assert_errno!(copy_range(&src, 0, &dst, LARGEST, 10, 0), libc::EFBIG);
            }
        });
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A sparse file: data at the start, in the middle and at the end of 64 MiB.
fn make_sparse(p: &Path) {
    let f = rw(p);
    f.write_all_at(&content(10, 1 << 20), 0).unwrap();
    f.write_all_at(&content(11, 100_000), 20 << 20).unwrap();
    f.write_all_at(b"the end", (64 << 20) - 7).unwrap();
    fsync(&f).unwrap();
}

fn st_blocks(p: &Path) -> u64 {
    fresh_blocks(&File::open(p).unwrap())
}

/// Blocks (of 512 bytes) another file system may count on top of the data: its own extent
/// tree blocks, which ext4 adds once its allocator split the data into more extents than the
/// inode holds (how it splits them depends on what else the disk is doing).
const OTHER_FS_SLACK: u64 = 8 * 8;

/// `p` has the same bytes as `orig` and as few blocks (DualFS: exactly as few; another file
/// system, where `p` may lie, may add its own metadata blocks, `OTHER_FS_SLACK`).
fn assert_same_and_sparse(orig: &Path, p: &Path, on_dualfs: bool) {
    assert_eq!(digest_file(p), digest_file(orig), "{}", p.display());
    let (a, b) = (st_blocks(orig), st_blocks(p));
    let slack = if on_dualfs { 0 } else { OTHER_FS_SLACK };
    assert!(
        b <= a + slack,
        "{}: {b} blocks, the original has {a}",
        p.display()
    );
    assert!(
        b < (64 << 20) / 512 / 10,
        "{}: {b} blocks: not sparse",
        p.display()
    );
}

#[test]
fn sparse_files_round_trip_through_cp_tar_and_rsync() {
    let fs = TestFs::new();
    let orig = fs.join("sparse");
    make_sparse(&orig);
    let want_blocks = st_blocks(&orig);
    if fs.is_dualfs() {
        assert_eq!(want_blocks, (256 + 25 + 1) * 8);
    }
    let out = fs.scratch().to_path_buf();
    // cp out and back in.
    for sparse in ["--sparse=always", "--sparse=auto"] {
        let (o, back) = (
            out.join(format!("cp{sparse}")),
            fs.join(format!("cp{sparse}")),
        );
        run(Command::new("cp").arg(sparse).arg(&orig).arg(&o));
        run(Command::new("cp").arg(sparse).arg(&o).arg(&back));
        assert_same_and_sparse(&orig, &o, false);
        assert_same_and_sparse(&orig, &back, fs.is_dualfs());
        if fs.is_dualfs() && sparse == "--sparse=always" {
            assert_eq!(st_blocks(&back), want_blocks);
        }
    }
    // tar -S out and back in.
    let tarball = out.join("a.tar");
    run(Command::new("tar")
        .arg("-S")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(fs.path())
        .arg("sparse"));
    let untar = fs.join("untar");
    mkdir(&untar, 0o755).unwrap();
    run(Command::new("tar")
        .arg("-S")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&untar));
    assert_same_and_sparse(&orig, &untar.join("sparse"), fs.is_dualfs());
    assert!(
        fs::metadata(&tarball).unwrap().len() < 4 << 20,
        "tar -S stored the holes"
    );
    // rsync -S out and back in.
    let (o, back) = (out.join("rsync"), fs.join("rsync"));
    run(Command::new("rsync").arg("-S").arg(&orig).arg(&o));
    run(Command::new("rsync").arg("-S").arg(&o).arg(&back));
    assert_same_and_sparse(&orig, &o, false);
    assert_same_and_sparse(&orig, &back, fs.is_dualfs());
    if fs.is_dualfs() {
        assert_eq!(st_blocks(&back), want_blocks);
    }
}

/// What a file is: its bytes, its blocks and where its data is.
fn state(p: &Path) -> (Vec<u8>, u64) {
    (read_all(p), st_blocks(p))
}

#[test]
fn preallocated_and_punched_files_survive_remount_and_kill_9() {
    let mut fs = TestFs::new();
    let make = |fs: &TestFs, name: &str, k: u64| {
        let p = fs.join(name);
        let f = rw(&p);
        f.write_all_at(&content(20 + k, 300_000), 0).unwrap();
        fallocate(&f, 0, 200_000, 1 << 20).unwrap();
        fallocate(&f, KEEP, 2 << 20, 1 << 20).unwrap();
        fallocate(&f, PUNCH, 10_000 + k * 1000, 100_000).unwrap();
        if fs.is_dualfs() {
            fallocate(&f, ZERO | KEEP, 250_000, 30_000).unwrap();
        }
        f.write_all_at(b"inside the preallocation", 700_000)
            .unwrap();
        fsync(&f).unwrap();
        let s = state(&p);
        (p, s)
    };
    let mut files = vec![make(&fs, "a", 1), make(&fs, "b", 2)];
    fs.remount();
    for (p, s) in &files {
        assert_eq!(&state(p), s, "{} after remount", p.display());
    }
    if !fs.is_dualfs() {
        return;
    }
    files.push(make(&fs, "c", 3));
    fs.kill_daemon_hard();
    fs.mount();
    for (p, s) in &files {
        assert_eq!(&state(p), s, "{} after kill -9", p.display());
    }
    // The punched hole of "a" is still one: [11000, 111000) frees blocks 3..=26.
    let s = Seeker {
        writeback: fs.writeback_cache(),
    };
    let f = File::open(&files[0].0).unwrap();
    s.hole(&f, 0, Ok(3 * BS));
    s.data(&f, 3 * BS, Ok(27 * BS));
}

/// Preallocated blocks that held a deleted file's bytes read as zeros through the mount, and
/// still after kill -9: whether the preallocation grew the file (mode 0) or lay past its end
/// (KEEP_SIZE, then a truncate up), and around a partial write made after the restart.
#[test]
fn preallocation_over_freed_data_reads_zeros_after_kill_9() {
    dualfs_only!();
    let mut fs = TestFs::builder().sizes(64 << 20, 16 << 20).mount();
    // Nonzero bytes over all but 64 of the free blocks, durable, then deleted durably.
    let old = fs.join("old");
    let spare = 64;
    let secret_blocks = bfree(&fs) - spare;
    let f = rw(&old);
    f.write_all_at(&vec![0xA5; (secret_blocks * BS) as usize], 0)
        .unwrap();
    fsync(&f).unwrap();
    drop(f);
    unlink(&old).unwrap();
    fsync_dir(fs.path());
    // Preallocate all but 64 free blocks: at least secret_blocks - 64 of them held the bytes.
    let p = fs.join("pre");
    let f = rw(&p);
    let len = (bfree(&fs) - spare) * BS;
    assert!(
        len / BS >= secret_blocks,
        "the deleted file's blocks are free"
    );
    let grown = len / 2 / BS * BS;
    fallocate(&f, 0, 0, grown).unwrap();
    fallocate(&f, KEEP, grown, len - grown).unwrap();
    f.write_all_at(b"before the kill", 12_345).unwrap();
    fsync(&f).unwrap();
    assert!(bfree(&fs) <= 2 * spare, "{} blocks free", bfree(&fs));
    drop(f);
    fs.kill_daemon_hard();
    fs.mount();
    let nonzero_but = |skip: &[(u64, usize)]| {
        let all = read_all(&p);
        let skipped = |i: u64| skip.iter().any(|&(at, n)| (at..at + n as u64).contains(&i));
        all.iter()
            .enumerate()
            .filter(|&(i, &b)| b != 0 && !skipped(i as u64))
            .count()
    };
    assert_eq!(fs::metadata(&p).unwrap().len(), grown);
    let mut written = vec![(12_345, 15)];
    assert_eq!(nonzero_but(&written), 0, "old bytes in the preallocation");
    assert_eq!(&read_all(&p)[12_345..12_360], b"before the kill");
    // Over the blocks past the end, and into the middle of one of them.
    let f = rw(&p);
    f.set_len(len).unwrap();
    let at = grown + 3 * BS + 100;
    f.write_all_at(b"after", at).unwrap();
    written.push((at, 5));
    fsync(&f).unwrap();
    assert_eq!(blocks(&f), len / BS, "the writes took no new block");
    drop(f);
    assert_eq!(nonzero_but(&written), 0, "old bytes past the old end");
    fs.remount();
    assert_eq!(fs::metadata(&p).unwrap().len(), len);
    assert_eq!(nonzero_but(&written), 0, "old bytes after the remount");
    assert_eq!(&read_all(&p)[at as usize..at as usize + 5], b"after");
}
