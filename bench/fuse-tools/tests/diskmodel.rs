//! diskmodel mounted for real (root and /dev/fuse, as the rest of the suite): requests through
//! the mount take the time the model gives them, in real time, and the reported busy time is
//! the model's prediction; a loop device with direct I/O over a model file carries ext4.

use std::fs;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const SSD: &str = "ssd,capacity=64M";
/// A small, fast HDD so that a few hundred seeks take a fraction of a second: one turn per
/// millisecond, seeks of 0.05 to 0.6 ms, one zone at 400 MB/s, over 64 MiB.
const FAST_HDD: &str = "hdd7200,capacity=64M,rpm=60000,heads=1,seek_track_ms=0.05,seek_avg_ms=0.3,seek_full_ms=0.6,rate_outer_mbs=400,rate_inner_mbs=400,readahead=1M";
const TURN: f64 = 1e-3;
const HDD_RATE: f64 = 400e6;

fn is_mountpoint(p: &Path) -> bool {
    let want = p.to_str().unwrap();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want))
}

/// diskmodel on a fresh folder; unmounted (and waited for) on drop, also when a test fails.
struct Mounted {
    dir: PathBuf,
    mnt: PathBuf,
    child: Option<Child>,
}

impl Mounted {
    /// `files`: (name, size) made in the backing folder before the mount.
    fn start(name: &str, files: &[(&str, u64)], args: &[&str]) -> Mounted {
        let dir =
            std::env::temp_dir().join(format!("dualfs-diskmodel-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (back, mnt) = (dir.join("back"), dir.join("mnt"));
        fs::create_dir_all(&back).unwrap();
        fs::create_dir_all(&mnt).unwrap();
        for (file, size) in files {
            fs::File::create(back.join(file))
                .unwrap()
                .set_len(*size)
                .unwrap();
        }
        let child = Command::new(env!("CARGO_BIN_EXE_diskmodel"))
            .arg(&back)
            .arg(&mnt)
            .args(
                args.iter()
                    .map(|a| a.replace("{dir}", dir.to_str().unwrap())),
            )
            .args(["--threads", "8"])
            .stdout(fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .unwrap();
        let mut m = Mounted {
            dir,
            mnt,
            child: Some(child),
        };
        let t = Instant::now();
        while !is_mountpoint(&m.mnt) {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("diskmodel exited with {status}");
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "diskmodel did not mount"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }

    fn report(&self) -> Report {
        Report(fs::read_to_string(self.path(".diskmodel-stats")).unwrap())
    }

    fn unmount(&mut self) {
        if let Some(mut child) = self.child.take() {
            let done = Command::new("umount").arg(&self.mnt).status();
            if !done.is_ok_and(|s| s.success()) {
                // Still in use (a failed test's loop device): detach it lazily.
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.unmount();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A report: one disk a line, figures read by name.
struct Report(String);

impl Report {
    fn get(&self, disk: &str, field: &str) -> f64 {
        let line = self
            .0
            .lines()
            .find(|l| l.starts_with(&format!("{{\"name\": \"{disk}\"")))
            .unwrap_or_else(|| panic!("no disk {disk} in {}", self.0));
        let key = format!("\"{field}\": ");
        let at = line
            .find(&key)
            .unwrap_or_else(|| panic!("no {field} in {line}"))
            + key.len();
        line[at..]
            .split([',', '}'])
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }
}

fn open_direct(path: &Path, write: bool) -> fs::File {
    fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap()
}

/// A buffer aligned for direct I/O.
struct Aligned(Vec<u8>, usize, usize);

impl Aligned {
    fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + 4096];
        let at = raw.as_ptr().align_offset(4096);
        Aligned(raw, at, len)
    }
    fn buf(&mut self) -> &mut [u8] {
        &mut self.0[self.1..self.1 + self.2]
    }
}

/// Reads `size` bytes at each offset, one after the other; the wall time taken.
fn read_at_offsets(path: &Path, size: usize, offsets: &[u64]) -> f64 {
    let f = open_direct(path, false);
    let mut buf = Aligned::new(size);
    let t = Instant::now();
    for &off in offsets {
        f.read_exact_at(buf.buf(), off).unwrap();
    }
    t.elapsed().as_secs_f64()
}

/// 4 KiB-aligned offsets spread over `span` bytes by a fixed-seed generator.
fn random_offsets(span: u64, count: usize, mut seed: u64) -> Vec<u64> {
    (0..count)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % (span / 4096) * 4096
        })
        .collect()
}

fn close(got: f64, want: f64, tolerance: f64) -> bool {
    (got - want).abs() <= tolerance * want
}

#[test]
fn requests_take_the_models_time_and_the_busy_time_is_its_prediction() {
    let mut m = Mounted::start(
        "timing",
        &[("fast.img", 32 << 20), ("slow.img", 64 << 20)],
        &[
            "--disk",
            &format!("s:{SSD}"),
            "--disk",
            &format!("h:{FAST_HDD}"),
            "--file",
            "fast.img:s",
            "--file",
            "slow.img:h",
            "--report",
            "{dir}/report.json",
        ],
    );
    let r0 = m.report();
    assert_eq!(r0.get("s", "reads"), 0.0);
    assert_eq!(r0.get("s", "late"), 0.0);
    assert_eq!(r0.get("h", "capacity"), (64 << 20) as f64);

    // SSD, 16 sequential 1 MiB reads: each the latency plus its transfer, exactly.
    let wall = read_at_offsets(
        &m.path("fast.img"),
        1 << 20,
        &(0..16).map(|i| i << 20).collect::<Vec<_>>(),
    );
    let r1 = m.report();
    let busy = r1.get("s", "busy_s") - r0.get("s", "busy_s");
    let want = 16.0 * (70e-6 + (1 << 20) as f64 / 550e6);
    assert_eq!(r1.get("s", "reads"), 16.0);
    assert_eq!(r1.get("s", "bytes_read"), (16 << 20) as f64);
    assert!(
        close(busy, want, 0.001),
        "SSD sequential: busy {busy} s, model {want} s"
    );
    assert!(
        wall >= want,
        "served faster than the model: {wall} s < {want} s"
    );

    // SSD, 200 random 4 KiB reads.
    let wall = read_at_offsets(&m.path("fast.img"), 4096, &random_offsets(32 << 20, 200, 1));
    let r2 = m.report();
    let busy = r2.get("s", "busy_s") - r1.get("s", "busy_s");
    let want = 200.0 * (70e-6 + 4096.0 / 550e6);
    assert!(
        close(busy, want, 0.001),
        "SSD random: busy {busy} s, model {want} s"
    );
    assert!(wall >= want);

    // SSD, 4 MiB of direct writes: on the backing file, at the write latency and rate.
    let mut data = Aligned::new(1 << 20);
    data.buf().fill(0xa5);
    let f = open_direct(&m.path("fast.img"), true);
    for i in 0..4u64 {
        f.write_all_at(data.buf(), (8 + i) << 20).unwrap();
    }
    f.sync_data().unwrap();
    drop(f);
    let r3 = m.report();
    let busy = r3.get("s", "busy_s") - r2.get("s", "busy_s");
    assert!(close(busy, 4.0 * (50e-6 + (1 << 20) as f64 / 500e6), 0.001));
    assert_eq!(r3.get("s", "bytes_written"), (4 << 20) as f64);
    assert_eq!(r3.get("s", "flushes"), 1.0);
    let backing = fs::read(m.dir.join("back/fast.img")).unwrap();
    assert!(backing[8 << 20..12 << 20].iter().all(|&b| b == 0xa5));
    assert_eq!(r3.get("h", "reads"), 0.0, "the other disk saw nothing");

    // HDD, 32 MiB sequential: the media rate; never faster in real time (the read-ahead
    // streams during the gaps between requests, so the busy time may be a little less).
    let media = (32 << 20) as f64 / HDD_RATE;
    let wall = read_at_offsets(
        &m.path("slow.img"),
        1 << 20,
        &(0..32).map(|i| i << 20).collect::<Vec<_>>(),
    );
    let r4 = m.report();
    let busy = r4.get("h", "busy_s");
    assert!(
        busy <= media + 0.6e-3 + TURN,
        "HDD sequential: busy {busy} s, media {media} s"
    );
    assert!(
        busy >= 0.5 * media,
        "HDD sequential: busy {busy} s, media {media} s"
    );
    assert!(
        wall >= media * 0.999,
        "served faster than the media: {wall} s < {media} s"
    );
    assert_eq!(r4.get("h", "seeks"), 0.0);

    // HDD, 300 random 4 KiB reads over the whole disk: average seek + half a turn each.
    let n = 300.0;
    read_at_offsets(
        &m.path("slow.img"),
        4096,
        &random_offsets(64 << 20, n as usize, 2),
    );
    let r5 = m.report();
    let busy_a_read = (r5.get("h", "busy_s") - r4.get("h", "busy_s")) / n;
    let want = 0.3e-3 + TURN / 2.0 + 4096.0 / HDD_RATE;
    assert!(
        close(busy_a_read, want, 0.15),
        "HDD random: {busy_a_read} s a read, model {want} s"
    );
    assert!(r5.get("h", "seeks") - r4.get("h", "seeks") > 0.9 * n);

    // Eight readers at once: requests queue (several FUSE threads), and C-LOOK shortens seeks.
    let readers: Vec<_> = (0..8)
        .map(|i| {
            let path = m.path("slow.img");
            std::thread::spawn(move || {
                read_at_offsets(&path, 4096, &random_offsets(64 << 20, 40, 10 + i))
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    let r6 = m.report();
    assert!(
        r6.get("h", "max_queue") >= 4.0,
        "requests did not queue: {}",
        r6.0
    );
    // Per read, alone (the 300 above) and eight at a time (these 320).
    let per_read = |a: &Report, b: &Report, field: &str, reads: f64| {
        (b.get("h", field) - a.get("h", field)) / reads
    };
    let (seek_alone, seek_queued) = (
        per_read(&r4, &r5, "seek_s", n),
        per_read(&r5, &r6, "seek_s", 320.0),
    );
    assert!(
        seek_queued < 0.75 * seek_alone,
        "C-LOOK did not shorten seeks: {seek_queued} s vs {seek_alone} s a read"
    );
    assert!(per_read(&r5, &r6, "busy_s", 320.0) < busy_a_read);

    // SIGUSR1 writes the report; unmounting writes the final one.
    let report_file = m.dir.join("report.json");
    let pid = m.child.as_ref().unwrap().id() as i32;
    // SAFETY: a signal to the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    let t = Instant::now();
    while !report_file.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no report on SIGUSR1"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    read_at_offsets(&m.path("fast.img"), 4096, &[0]);
    m.unmount();
    let last = Report(fs::read_to_string(&report_file).unwrap());
    assert_eq!(last.get("s", "reads"), r6.get("s", "reads") + 1.0);
    assert_eq!(last.get("h", "reads"), r6.get("h", "reads"));
}

/// Kernel mounts and loop devices made by the test, undone on drop in reverse order.
struct Undo(Vec<(&'static str, String)>);

impl Drop for Undo {
    fn drop(&mut self) {
        while let Some((what, arg)) = self.0.pop() {
            let _ = match what {
                "umount" => Command::new("umount").arg(&arg).status(),
                _ => Command::new("losetup").args(["-d", &arg]).status(),
            };
        }
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_loop_device_with_direct_io_carries_ext4_on_a_model_file() {
    if Command::new("mkfs.ext4").arg("-V").output().is_err() {
        eprintln!("skipped: mkfs.ext4 is not installed");
        return;
    }
    let m = Mounted::start(
        "loop",
        &[("ext4.img", 64 << 20)],
        &["--disk", &format!("s:{SSD}")],
    );
    let mut undo = Undo(Vec::new());
    let image = m.path("ext4.img");
    let dev = run(Command::new("losetup")
        .args(["-f", "--show", "--direct-io=on"])
        .arg(&image));
    let dev = dev.trim().to_string();
    undo.0.push(("detach", dev.clone()));
    let name = dev.trim_start_matches("/dev/");
    let dio = fs::read_to_string(format!("/sys/block/{name}/loop/dio")).unwrap();
    assert_eq!(dio.trim(), "1", "the loop device does not use direct I/O");
    run(Command::new("mkfs.ext4").args(["-q", "-F", &dev]));
    let on = m.dir.join("ext4");
    fs::create_dir_all(&on).unwrap();
    run(Command::new("mount").args(["-t", "ext4", &dev]).arg(&on));
    undo.0.push(("umount", on.to_str().unwrap().to_string()));
    let before = m.report();
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 253) as u8).collect();
    fs::write(on.join("f"), &data).unwrap();
    run(Command::new("sync").arg("-f").arg(on.join("f")));
    drop(undo);
    let after = m.report();
    assert!(after.get("s", "bytes_written") - before.get("s", "bytes_written") >= (3 << 20) as f64);
    assert!(after.get("s", "busy_s") > before.get("s", "busy_s"));

    // Mounted again, the file reads back (through the model too).
    let mut undo = Undo(Vec::new());
    let dev = run(Command::new("losetup")
        .args(["-f", "--show", "--direct-io=on"])
        .arg(&image));
    let dev = dev.trim().to_string();
    undo.0.push(("detach", dev.clone()));
    run(Command::new("mount")
        .args(["-t", "ext4", "-o", "ro", &dev])
        .arg(&on));
    undo.0.push(("umount", on.to_str().unwrap().to_string()));
    assert_eq!(fs::read(on.join("f")).unwrap(), data);
    drop(undo);
    assert!(m.report().get("s", "reads") > after.get("s", "reads"));
}

#[test]
fn bad_arguments_are_refused_in_one_line() {
    for (args, says) in [
        (&["--show", "floppy"][..], "unknown disk model"),
        (
            &["--show", "hdd7200,seek_avg_ms=30"][..],
            "seek times must grow",
        ),
        (&["/", "/mnt", "--disk", "d"][..], "NAME:MODEL"),
        (&["/", "/mnt"][..], "at least one --disk"),
        (
            &["/", "/mnt", "--disk", "d:ssd", "--file", "a/b:d"][..],
            "a name in BACKING_DIR",
        ),
        (
            &["/", "/mnt", "--disk", "d:ssd", "--file", "x:e"][..],
            "no --disk named e",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_diskmodel"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("diskmodel: ") && err.contains(says),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_diskmodel"))
        .args(["--show", "hdd7200"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("\"random_read_4k_iops\": "),
        "{text}"
    );
}
