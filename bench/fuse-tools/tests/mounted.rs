//! memfs and delayfs mounted for real (root and /dev/fuse, as the rest of the suite): the
//! POSIX behaviour the benchmarks rely on (a kernel tree is unpacked and built on memfs; DualFS
//! images are served by delayfs). Timing is not asserted: the delay is the benchmarks' to show.

use std::ffi::CString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A FUSE daemon of ours mounted on a fresh folder; unmounted (and waited for) on drop, also
/// when the test fails.
struct Mounted {
    dir: PathBuf,
    mnt: PathBuf,
    child: Child,
}

fn is_mountpoint(p: &Path) -> bool {
    let want = p.to_str().unwrap();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(want))
}

impl Mounted {
    fn start(name: &str, program: &str, args: &[&str]) -> Mounted {
        let dir =
            std::env::temp_dir().join(format!("dualfs-fuse-tools-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mnt = dir.join("mnt");
        fs::create_dir_all(&mnt).unwrap();
        fs::create_dir_all(dir.join("back")).unwrap();
        let mut cmd = Command::new(program);
        for a in args {
            cmd.arg(a.replace("{back}", dir.join("back").to_str().unwrap()));
        }
        let child = cmd.arg(&mnt).args(["--threads", "4"]).spawn().unwrap();
        let m = Mounted { dir, mnt, child };
        let t = Instant::now();
        while !is_mountpoint(&m.mnt) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{program} did not mount"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }
    fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).expect("an error")
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> i32 {
    let (f, t) = (
        CString::new(from.as_os_str().as_bytes()).unwrap(),
        CString::new(to.as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: two NUL-terminated paths; AT_FDCWD.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

#[test]
fn memfs_is_a_posix_tree() {
    let m = Mounted::start("memfs", env!("CARGO_BIN_EXE_memfs"), &[]);

    // Files: write, read back, sizes, truncate down and up (zeros), append.
    fs::create_dir_all(m.path("a/b/c")).unwrap();
    fs::write(m.path("a/f"), b"hello world").unwrap();
    assert_eq!(fs::read(m.path("a/f")).unwrap(), b"hello world");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(m.path("a/f"))
        .unwrap();
    f.set_len(5).unwrap();
    f.set_len(8).unwrap();
    drop(f);
    assert_eq!(fs::read(m.path("a/f")).unwrap(), b"hello\0\0\0");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.path("a/f"))
        .unwrap();
    f.write_all(b"!").unwrap();
    drop(f);
    assert_eq!(fs::metadata(m.path("a/f")).unwrap().len(), 9);

    // Symlinks and hard links.
    std::os::unix::fs::symlink("f", m.path("a/s")).unwrap();
    assert_eq!(fs::read_link(m.path("a/s")).unwrap(), Path::new("f"));
    assert_eq!(fs::read(m.path("a/s")).unwrap().len(), 9);
    fs::hard_link(m.path("a/f"), m.path("a/b/h")).unwrap();
    assert_eq!(fs::metadata(m.path("a/f")).unwrap().nlink(), 2);
    assert_eq!(
        errno_of(fs::hard_link(m.path("a/b"), m.path("a/bl"))),
        libc::EPERM
    );

    // Rename: over a file, a directory across parents (link counts follow), NOREPLACE,
    // EXCHANGE, onto a non-empty directory.
    fs::write(m.path("a/g"), b"g").unwrap();
    fs::rename(m.path("a/g"), m.path("a/b/h")).unwrap();
    assert_eq!(fs::read(m.path("a/b/h")).unwrap(), b"g");
    assert_eq!(fs::metadata(m.path("a/f")).unwrap().nlink(), 1);
    let nlink = |p: &str| fs::metadata(m.path(p)).unwrap().nlink();
    assert_eq!((nlink("a"), nlink("a/b")), (3, 3));
    fs::rename(m.path("a/b/c"), m.path("a/c")).unwrap();
    assert_eq!((nlink("a"), nlink("a/b")), (4, 2));
    assert_eq!(fs::read_dir(m.path("a/c")).unwrap().count(), 0);
    assert_eq!(
        renameat2(&m.path("a/f"), &m.path("a/b/h"), libc::RENAME_NOREPLACE),
        libc::EEXIST
    );
    assert_eq!(
        renameat2(&m.path("a/f"), &m.path("a/b/h"), libc::RENAME_EXCHANGE),
        0
    );
    assert_eq!(fs::read(m.path("a/f")).unwrap(), b"g");
    assert_eq!(fs::read(m.path("a/b/h")).unwrap().len(), 9);
    assert_eq!(
        errno_of(fs::rename(m.path("a/c"), m.path("a/b"))),
        libc::ENOTEMPTY
    );
    assert_eq!(errno_of(fs::remove_dir(m.path("a/b"))), libc::ENOTEMPTY);
    assert_eq!(errno_of(fs::remove_file(m.path("a/b"))), libc::EISDIR);

    // An unlinked file stays readable and writable through an open descriptor.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("a/open"))
        .unwrap();
    f.write_all(b"still here").unwrap();
    fs::remove_file(m.path("a/open")).unwrap();
    assert!(!m.path("a/open").exists());
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut back = String::new();
    f.read_to_string(&mut back).unwrap();
    assert_eq!(back, "still here");
    drop(f);

    // A big directory lists every entry once (readdir continues from stable cookies while
    // entries come and go).
    fs::create_dir(m.path("big")).unwrap();
    for i in 0..3000 {
        fs::write(m.path(&format!("big/n{i}")), b"").unwrap();
    }
    let mut names: Vec<_> = fs::read_dir(m.path("big"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3000);
    for i in 0..3000 {
        fs::remove_file(m.path(&format!("big/n{i}"))).unwrap();
    }
    fs::remove_dir(m.path("big")).unwrap();

    // Modes, times, statfs.
    fs::set_permissions(
        m.path("a/f"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    assert_eq!(fs::metadata(m.path("a/f")).unwrap().mode() & 0o777, 0o600);
    let st = nix_statvfs(&m.mnt);
    assert!(st.0 > 0 && st.1 > 0, "statfs: {st:?}");
    fs::remove_dir_all(m.path("a")).unwrap();
    assert_eq!(fs::read_dir(&m.mnt).unwrap().count(), 0);
}

fn nix_statvfs(p: &Path) -> (u64, u64) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs into a zeroed struct we own.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut s), 0);
        (s.f_blocks, s.f_bavail)
    }
}

#[test]
fn delayfs_serves_the_backing_files() {
    let m = Mounted::start(
        "delayfs",
        env!("CARGO_BIN_EXE_delayfs"),
        &["{back}", "--delay-ms", "1"],
    );
    let back = m.dir.join("back");
    fs::write(back.join("img"), vec![7u8; 1 << 20]).unwrap();
    fs::write(back.join("other"), b"x").unwrap();
    let mut listed: Vec<_> = fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    listed.sort();
    assert_eq!(listed, ["img", "other"]);
    assert_eq!(fs::metadata(m.path("img")).unwrap().len(), 1 << 20);

    // Reads and writes at offsets go through to the backing file, across request sizes.
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("img"))
        .unwrap();
    let block: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    f.write_all_at(&block, 12_345).unwrap();
    f.sync_data().unwrap();
    let mut back_bytes = vec![0u8; block.len()];
    f.read_exact_at(&mut back_bytes, 12_345).unwrap();
    assert_eq!(back_bytes, block);
    drop(f);
    let on_disk = fs::read(back.join("img")).unwrap();
    assert_eq!(&on_disk[12_345..12_345 + block.len()], &block[..]);
    assert_eq!(on_disk[0], 7);
    assert!(!m.path("missing").exists());
}
