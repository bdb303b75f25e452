//! Access times through a real mount under each atime option: relatime (the default),
//! strictatime, noatime, nodiratime, and lazytime (accepted; DualFS logs time stamps with the
//! next flush anyway).
//!
//! FUSE leaves access times to the file system, and the kernel does not tell it about reads
//! its page cache serves. So "a read" below is one that reaches DualFS: the first after a
//! remount, or any read with strictatime (which opens files for direct I/O).

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::io::Read;
use std::path::Path;

/// An access time long ago, before the files' last change (relatime's case for an update).
const OLD: (i64, i64) = (1_000_000_000, 0);

fn mount(opts: &str) -> TestFs {
    TestFs::builder()
        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},{opts}"))
        .mount()
}

/// A file with content and a directory with an entry.
fn prepare(t: &TestFs) {
    fs::write(t.join("f"), b"some bytes").unwrap();
    sys::mkdir(t.join("d"), 0o755).unwrap();
    fs::write(t.join("d/x"), b"").unwrap();
}

fn set_atime(p: &Path, at: Ts) {
    sys::utimens(p, SetTs::At(at.0, at.1), SetTs::Omit, false).unwrap();
}

/// An access time newer than any change: relatime leaves it alone.
fn future() -> Ts {
    (now().0 + 3600, 0)
}

/// The access times of f and d after a read of f and a listing of d, both set to `before`
/// first (with `OLD`, their mtime is set just after it: a change since the last access).
fn atimes_after(t: &TestFs, before: Ts) -> (Ts, Ts) {
    let (f, d) = (t.join("f"), t.join("d"));
    for p in [&f, &d] {
        let mtime = if before == OLD {
            OLD.0 + 10
        } else {
            before.0 - 10
        };
        sys::utimens(p, SetTs::At(before.0, before.1), SetTs::At(mtime, 0), false).unwrap();
    }
    let mut s = Vec::new();
    fs::File::open(&f).unwrap().read_to_end(&mut s).unwrap();
    assert_eq!(s, b"some bytes");
    assert_eq!(names(&d), vec![b"x".to_vec()]);
    (atime(&lstat(&f)), atime(&lstat(&d)))
}

fn is_now(ts: Ts) -> bool {
    ts_diff(ts, now()).abs() < 120.0
}

#[test]
fn relatime_is_the_default_and_updates_a_stale_access_time_once() {
    for opts in ["", "relatime", "atime", "lazytime"] {
        let mut t = mount(opts);
        prepare(&t);
        t.remount(); // nothing in the page cache: the read reaches DualFS
        let (f, d) = atimes_after(&t, OLD);
        assert!(
            is_now(f) && is_now(d),
            "-o {opts}: stale atimes kept: {f:?} {d:?}"
        );
        t.remount();
        let later = future();
        let (f, d) = atimes_after(&t, later);
        assert_eq!((f, d), (later, later), "-o {opts}: fresh atimes changed");
        t.unmount();
    }
}

#[test]
fn strictatime_updates_the_access_time_at_every_read_and_listing() {
    let mut t = mount("strictatime");
    prepare(&t);
    let (f, d) = (t.join("f"), t.join("d"));
    let fd = fs::File::open(&f).unwrap();
    for round in 0..3 {
        let later = (now().0 + 3600, round);
        set_atime(&f, later);
        set_atime(&d, later);
        // The same descriptor and bytes each round: a page cache would serve them.
        let mut buf = [0u8; 4];
        std::os::unix::fs::FileExt::read_at(&fd, &mut buf, 0).unwrap();
        assert_eq!(&buf, b"some");
        assert_eq!(names(&d), vec![b"x".to_vec()]);
        let (fa, da) = (atime(&lstat(&f)), atime(&lstat(&d)));
        assert!(is_now(fa), "round {round}: file atime {fa:?} not updated");
        assert!(
            is_now(da),
            "round {round}: directory atime {da:?} not updated"
        );
    }
    // Files are opened for direct I/O; shared mappings still work.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::unix::io::AsRawFd::as_raw_fd(&fd),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    let mapped = unsafe { std::slice::from_raw_parts(map as *const u8, 10) }.to_vec();
    unsafe { libc::munmap(map, 4096) };
    assert_eq!(mapped, b"some bytes");
    drop(fd);
    t.remount();
    assert!(is_now(atime(&lstat(&f))), "the access time reached the log");
    t.unmount();
}

#[test]
fn noatime_never_and_nodiratime_never_for_directories() {
    let mut t = mount("noatime");
    prepare(&t);
    t.remount();
    assert_eq!(atimes_after(&t, OLD), (OLD, OLD), "noatime updated one");
    t.unmount();

    let mut t = mount("nodiratime");
    prepare(&t);
    t.remount();
    let (f, d) = atimes_after(&t, OLD);
    assert!(is_now(f), "nodiratime: the file's atime is updated");
    assert_eq!(d, OLD, "nodiratime: the directory's is not");
    t.unmount();

    let t = mount("strictatime,nodiratime");
    prepare(&t);
    let later = future();
    let (f, d) = atimes_after(&t, later);
    assert!(
        is_now(f),
        "strictatime,nodiratime: the file's atime is updated"
    );
    assert_eq!(d, later, "strictatime,nodiratime: the directory's is not");
    drop(t);
}
