//! `-o devio=direct`: the devices opened for direct I/O (O_DIRECT), seen in the daemon's open
//! file flags, image files and loop block devices alike, under a workload of writes at odd
//! offsets and lengths (each a read-modify-write of the device's partly covered units),
//! truncates, punched and zeroed ranges, and copies, checked against a model, across a
//! remount, and by the checker at unmount; buffered without the option; and a mount refused,
//! naming the image and the way out, where the images' file system refuses O_DIRECT.

#[macro_use]
mod common;

use common::*;
use dualfs_testkit::Ramfs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Whether the daemon has `device` open with O_DIRECT (from /proc/PID/fdinfo: its flags).
fn opened_direct(pid: u32, device: &Path) -> bool {
    let device = device.canonicalize().unwrap();
    for entry in fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        if fs::read_link(entry.path()).ok().as_deref() != Some(device.as_path()) {
            continue;
        }
        let info = fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            entry.file_name().to_str().unwrap()
        ))
        .unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        return flags & libc::O_DIRECT as u32 != 0;
    }
    panic!("the daemon has no descriptor of {}", device.display());
}

fn fallocate(f: &fs::File, mode: i32, offset: u64, len: u64) {
    // SAFETY: fallocate on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, len as i64) };
    assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
}

/// Seeded writes, truncates, punches, zeroed ranges and copies at odd offsets and lengths on a
/// few files, each file checked against its model after every step and at the end.
fn workload(fs: &TestFs, seed: u64) -> Vec<Vec<u8>> {
    const FILES: usize = 4;
    const MAX: u64 = 3 << 20;
    let mut rng = StdRng::seed_from_u64(seed);
    let paths: Vec<_> = (0..FILES).map(|i| fs.join(format!("f{i}"))).collect();
    let files: Vec<fs::File> = paths
        .iter()
        .map(|p| {
            fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(p)
                .unwrap()
        })
        .collect();
    let mut model = vec![Vec::<u8>::new(); FILES];
    for step in 0..400 {
        let i = rng.gen_range(0..FILES);
        let (f, m) = (&files[i], &mut model[i]);
        match rng.gen_range(0..10) {
            0 => {
                let to = rng.gen_range(0..MAX);
                f.set_len(to).unwrap();
                m.resize(to as usize, 0);
            }
            1 if !m.is_empty() => {
                let off = rng.gen_range(0..m.len() as u64);
                let len = rng.gen_range(1..=(m.len() as u64 - off).min(200_000));
                fallocate(
                    f,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off,
                    len,
                );
                m[off as usize..(off + len) as usize].fill(0);
            }
            2 if !m.is_empty() => {
                let off = rng.gen_range(0..m.len() as u64);
                let len = rng.gen_range(1..=(m.len() as u64 - off).min(200_000));
                fallocate(f, libc::FALLOC_FL_ZERO_RANGE, off, len);
                m[off as usize..(off + len) as usize].fill(0);
            }
            3 => {
                // copy_file_range from another file, to an odd offset.
                let j = (i + 1) % FILES;
                let src_len = model[j].len() as u64;
                if src_len == 0 {
                    continue;
                }
                let off_in = rng.gen_range(0..src_len);
                let len = rng.gen_range(1..=(src_len - off_in).min(300_000));
                let off_out = rng.gen_range(0..MAX - len);
                let (mut a, mut b) = (off_in as i64, off_out as i64);
                // SAFETY: both descriptors are ours; the offsets are locals.
                let n = unsafe {
                    libc::copy_file_range(
                        files[j].as_raw_fd(),
                        &mut a,
                        files[i].as_raw_fd(),
                        &mut b,
                        len as usize,
                        0,
                    )
                };
                assert_eq!(n, len as isize, "copy_file_range");
                let bytes = model[j][off_in as usize..(off_in + len) as usize].to_vec();
                let m = &mut model[i];
                let end = (off_out + len) as usize;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off_out as usize..end].copy_from_slice(&bytes);
            }
            _ => {
                let len = match rng.gen_range(0..4) {
                    0 => rng.gen_range(1..64),
                    1 => rng.gen_range(1..=600_000),
                    _ => rng.gen_range(1..20_000),
                };
                let off = rng.gen_range(0..MAX - len);
                let data = content(seed * 1000 + step, len as usize);
                f.write_all_at(&data, off).unwrap();
                let end = (off + len) as usize;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
            }
        }
        // A read of some of what the step touched, at an odd place, from the devices: the
        // kernel's cached pages of the file are dropped first.
        let m = &model[i];
        // SAFETY: posix_fadvise on a descriptor we own; no memory is passed.
        unsafe { libc::posix_fadvise(files[i].as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if !m.is_empty() {
            let off = rng.gen_range(0..m.len());
            let len = rng.gen_range(1..=(m.len() - off).min(70_000));
            let mut got = vec![0u8; len];
            files[i].read_exact_at(&mut got, off as u64).unwrap();
            assert!(
                got == m[off..off + len],
                "step {step}: file {i} at {off}+{len}"
            );
        }
    }
    for (i, p) in paths.iter().enumerate() {
        assert!(
            fs::read(p).unwrap() == model[i],
            "file {i} differs from its model"
        );
    }
    model
}

#[test]
fn devio_direct_on_image_files() {
    dualfs_only!();
    let mut fs = TestFs::builder()
        .sizes(128 << 20, 512 << 20)
        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},devio=direct"))
        .mount();
    let pid = fs.worker_pid();
    assert!(
        opened_direct(pid, fs.meta_path()),
        "meta not opened O_DIRECT"
    );
    assert!(
        opened_direct(pid, fs.data_path()),
        "data not opened O_DIRECT"
    );
    let model = workload(&fs, 1);
    fs.remount();
    for (i, want) in model.iter().enumerate() {
        assert!(
            fs::read(fs.join(format!("f{i}"))).unwrap() == *want,
            "file {i} after remount"
        );
    }
    // The checker runs at unmount.
    fs.unmount();
}

#[test]
fn devio_direct_on_block_devices_and_buffered_by_default() {
    dualfs_only!();
    let mut fs = TestFs::builder()
        .sizes(128 << 20, 512 << 20)
        .loop_devices(true)
        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},devio=direct"))
        .mount();
    let pid = fs.worker_pid();
    assert!(opened_direct(pid, fs.meta_path()));
    assert!(opened_direct(pid, fs.data_path()));
    workload(&fs, 2);
    fs.unmount();

    for opts in [
        DEFAULT_MOUNT_OPTS.to_string(),
        format!("{DEFAULT_MOUNT_OPTS},devio=buffered"),
    ] {
        let mut fs = TestFs::builder()
            .sizes(128 << 20, 512 << 20)
            .mount_opts(&opts)
            .mount();
        let pid = fs.worker_pid();
        assert!(!opened_direct(pid, fs.meta_path()), "{opts}");
        assert!(!opened_direct(pid, fs.data_path()), "{opts}");
        fs::write(fs.join("a"), b"buffered").unwrap();
        fs.unmount();
    }
}

#[test]
fn devio_direct_where_the_images_file_system_refuses_it_fails_the_mount() {
    dualfs_only!();
    user::require_root();
    // A ramfs refuses O_DIRECT.
    let ramfs = Ramfs::new().expect("a ramfs");
    let dir = ramfs.path();
    let (meta, data) = (dir.join("meta.img"), dir.join("data.img"));
    make_formatted_pair(&meta, &data, 64 << 20, 256 << 20);
    let scratch = tempfile::tempdir().unwrap();
    let failed = mount_expecting_failure(
        &[&meta, &data, Path::new("-o"), Path::new("devio=direct")],
        scratch.path(),
    );
    assert!(
        failed.stderr.contains(&*meta.to_string_lossy()),
        "{}",
        failed.stderr
    );
    assert!(failed.stderr.contains("O_DIRECT"), "{}", failed.stderr);
    assert!(
        failed.stderr.contains("devio=buffered"),
        "{}",
        failed.stderr
    );
    // Buffered, the same images mount.
    let mut fs = TestFs::builder()
        .images(&meta, &data)
        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},devio=buffered"))
        .mount();
    fs::write(fs.join("a"), b"on ramfs").unwrap();
    fs.unmount();
}
