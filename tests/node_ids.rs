//! Node ids through a real mount: an inode number the kernel still holds is never handed out
//! for another object (FUSE's rule: a node id stays unique until FORGET brings its lookup
//! count to zero). Before DualFS counted lookups, a directory removed while something held it
//! gave its number to the next mkdir with the same generation, and the kernel answered that
//! mkdir with ESTALE (its `d_splice_alias` found the old directory's dentry elsewhere) or
//! spliced the dead directory in, so the new one refused entries.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};

const WORKERS: usize = 4;
/// Rounds per worker: each makes and removes a directory and two files, holding some open.
const ROUNDS: usize = 1_500;
/// Descriptors of removed objects each worker keeps open (the kernel keeps their inodes).
const HELD: usize = 100;

/// Everything that went wrong, as "operation path: errno".
#[derive(Default)]
struct Failures(Mutex<Vec<String>>);

impl Failures {
    fn check<T>(&self, what: &str, path: &Path, r: std::io::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(-1);
                self.0.lock().unwrap().push(format!(
                    "{what} {}: {}",
                    path.display(),
                    sys::errno_name(errno)
                ));
                None
            }
        }
    }

    fn note(&self, message: String) {
        self.0.lock().unwrap().push(message);
    }

    fn assert_none(&self) {
        let f = self.0.lock().unwrap();
        // How often each kind (the message without its path) happened, then the first ones.
        let mut kinds = std::collections::BTreeMap::<String, usize>::new();
        for m in f.iter() {
            let kind = m
                .split_whitespace()
                .filter(|w| !w.contains('/'))
                .collect::<Vec<_>>();
            *kinds.entry(kind.join(" ")).or_default() += 1;
        }
        assert!(
            f.is_empty(),
            "{} failures:\n{}\nthe first ones:\n{}",
            f.len(),
            kinds
                .iter()
                .map(|(k, n)| format!("{n:6} x {k}"))
                .collect::<Vec<_>>()
                .join("\n"),
            f.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
        );
    }
}

/// One worker's round: make a directory (alternately in the shared directory and in its own,
/// so a reused number can meet its old dentry under another parent), put a file in it, hold
/// the directory open, empty and remove it; make a file, hold it open, unlink it. Every name
/// belongs to this worker, so every call must succeed.
fn round(shared: &Path, own: &Path, w: usize, k: usize, held: &mut Vec<fs::File>, f: &Failures) {
    let parent = if k % 2 == 0 { shared } else { own };
    let dir = parent.join(format!("w{w}-d{k}"));
    if f.check("mkdir", &dir, sys::mkdir(&dir, 0o755)).is_none() {
        return;
    }
    let inner = dir.join("f");
    let made = sys::open(&inner, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644);
    f.check("create in a new directory", &inner, made);
    if let Some(d) = f.check(
        "open",
        &dir,
        sys::open(&dir, libc::O_RDONLY | libc::O_DIRECTORY, 0),
    ) {
        held.push(d);
    }
    f.check("unlink", &inner, sys::unlink(&inner));
    f.check("rmdir", &dir, sys::rmdir(&dir));

    let file = parent.join(format!("w{w}-f{k}"));
    let made = sys::open(&file, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o644);
    if let Some(fd) = f.check("create", &file, made) {
        held.push(fd);
    }
    f.check("unlink", &file, sys::unlink(&file));

    // The removed objects held open keep their attributes, with no links.
    while held.len() > HELD {
        let fd = held.remove(0);
        match fd.metadata() {
            Ok(m) if m.nlink() == 0 => {}
            Ok(m) => f.note(format!("fstat of a removed object: nlink {}", m.nlink())),
            Err(e) => f.note(format!(
                "fstat of a removed object: {}",
                sys::errno_name(e.raw_os_error().unwrap_or(-1))
            )),
        }
    }
}

/// Cross-directory renames hold the kernel's rename mutex, which the kernel only tries to take
/// when it finds a directory's old dentry under another parent.
fn renamer(shared: &Path, stop: &AtomicBool, f: &Failures) {
    let (a, b) = (shared.join("ren-a"), shared.join("ren-b"));
    sys::mkdir(&a, 0o755).unwrap();
    sys::mkdir(&b, 0o755).unwrap();
    fs::write(a.join("x"), b"x").unwrap();
    let (mut from, mut to) = (a.join("x"), b.join("x"));
    while !stop.load(Ordering::Relaxed) {
        f.check("rename", &from, sys::rename(&from, &to));
        std::mem::swap(&mut from, &mut to);
    }
}

#[test]
fn racing_creates_and_removals_never_see_a_stale_node_id() {
    // Freed numbers come back for reuse at every log write: a short flush interval recycles
    // them while the kernel still holds the removed objects.
    let mut t = TestFs::builder()
        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},flush_interval=0.01"))
        .mount();
    let shared = t.join("shared");
    sys::mkdir(&shared, 0o755).unwrap();
    let owns: Vec<PathBuf> = (0..WORKERS).map(|w| t.join(format!("own{w}"))).collect();
    for d in &owns {
        sys::mkdir(d, 0o755).unwrap();
    }
    let failures = Failures::default();
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(WORKERS);
    std::thread::scope(|s| {
        let ren = s.spawn(|| renamer(&shared, &stop, &failures));
        let workers: Vec<_> = owns
            .iter()
            .enumerate()
            .map(|(w, own)| {
                let (shared, failures, barrier) = (&shared, &failures, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut held = Vec::new();
                    for k in 0..ROUNDS {
                        round(shared, own, w, k, &mut held, failures);
                    }
                })
            })
            .collect();
        for h in workers {
            h.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        ren.join().unwrap();
    });
    failures.assert_none();
    for d in &owns {
        assert!(names(d).is_empty(), "{} not empty", d.display());
    }
    t.unmount();
}

#[test]
fn fstat_of_a_removed_directory_still_open_shows_it_with_no_links() {
    let mut t = TestFs::new();
    for (how, dir) in [("rmdir", "a"), ("renamed over", "b")] {
        let d = t.join(dir);
        sys::mkdir(&d, 0o750).unwrap();
        let fd = sys::open(&d, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
        let before = fd.metadata().unwrap();
        if how == "rmdir" {
            sys::rmdir(&d).unwrap();
        } else {
            sys::mkdir(t.join("other"), 0o755).unwrap();
            sys::rename(t.join("other"), &d).unwrap();
        }
        let m = fd
            .metadata()
            .unwrap_or_else(|e| panic!("fstat after {how}: {e}"));
        assert!(m.is_dir(), "{how}");
        assert_eq!(m.nlink(), 0, "{how}");
        assert_eq!((m.ino(), m.mode()), (before.ino(), before.mode()), "{how}");
        // As on Linux, a removed directory takes no entries and lists nothing.
        assert_errno!(
            sys::mkdir(format!("/proc/self/fd/{}/x", fd_of(&fd)), 0o755),
            libc::ENOENT
        );
        drop(fd);
    }
    // The root lost both '..' links: 2 + lost+found + "b".
    assert_eq!(lstat(t.path()).nlink(), 4);
    // Held open across an unmount it is an orphan, freed by the next mount.
    let d = t.join("c");
    sys::mkdir(&d, 0o755).unwrap();
    let fd = sys::open(&d, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    sys::rmdir(&d).unwrap();
    sys::fsync(&fd).unwrap();
    t.kill_daemon_hard();
    drop(fd);
    t.mount();
    assert!(
        t.daemon_log().contains("freeing orphan inode"),
        "{}",
        t.daemon_log()
    );
    t.unmount();
}

fn fd_of(f: &fs::File) -> i32 {
    use std::os::unix::io::AsRawFd;
    f.as_raw_fd()
}

/// A `struct file_handle` with room for the largest handle (MAX_HANDLE_SZ).
#[repr(C)]
struct Handle {
    bytes: u32,
    kind: i32,
    f_handle: [u8; 128],
}

fn name_to_handle(p: &Path) -> std::io::Result<Handle> {
    let mut h = Handle {
        bytes: 128,
        kind: 0,
        f_handle: [0; 128],
    };
    let mut mount_id = 0;
    let c = sys::cstr(p);
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            (&mut h as *mut Handle).cast(),
            &mut mount_id,
            0,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(h)
}

fn open_by_handle(mount: &fs::File, h: &mut Handle, flags: i32) -> std::io::Result<fs::File> {
    use std::os::unix::io::FromRawFd;
    let fd = unsafe {
        libc::open_by_handle_at(
            fd_of(mount),
            (h as *mut Handle).cast(),
            flags | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

/// Make the kernel drop the inodes it caches but nobody uses (the daemon then sees LOOKUP of
/// "." for a handle's node id).
fn drop_kernel_inodes() {
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
}

#[test]
fn file_handles_outlive_the_kernel_cache_and_remounts_and_go_stale_with_their_file() {
    use std::io::Read;
    let mut t = TestFs::builder()
        .mount_opts(&format!("{DEFAULT_MOUNT_OPTS},flush_interval=0.05"))
        .mount();
    let dir = t.join("d");
    sys::mkdir(&dir, 0o755).unwrap();
    let file = dir.join("f");
    fs::write(&file, b"handle me").unwrap();
    // Any user may make a handle; opening one needs CAP_DAC_READ_SEARCH (the kernel checks).
    let (mut hf, mut hd) = user::as_user(user::ALICE.0, user::ALICE.1, || {
        (
            name_to_handle(&file).unwrap(),
            name_to_handle(&dir).unwrap(),
        )
    });
    let read = |mount: &fs::File, h: &mut Handle| -> std::io::Result<String> {
        let mut s = String::new();
        open_by_handle(mount, h, libc::O_RDONLY)?.read_to_string(&mut s)?;
        Ok(s)
    };
    let open_mount =
        |t: &TestFs| sys::open(t.path(), libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();

    let mount = open_mount(&t);
    assert_eq!(read(&mount, &mut hf).unwrap(), "handle me", "cached");
    user::as_user(user::ALICE.0, user::ALICE.1, || {
        assert_errno!(open_by_handle(&mount, &mut hf, libc::O_RDONLY), libc::EPERM);
    });
    drop_kernel_inodes();
    assert_eq!(
        read(&mount, &mut hf).unwrap(),
        "handle me",
        "after drop_caches"
    );
    let d = open_by_handle(&mount, &mut hd, libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
    assert_eq!(d.metadata().unwrap().ino(), lstat(&dir).ino());
    drop((d, mount));

    t.remount();
    let mount = open_mount(&t);
    assert_eq!(
        read(&mount, &mut hf).unwrap(),
        "handle me",
        "after a remount"
    );
    let d = open_by_handle(&mount, &mut hd, libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
    assert_eq!(
        sys::names(format!("/proc/self/fd/{}", fd_of(&d))),
        vec![b"f".to_vec()]
    );
    drop(d);

    // Removed: stale, whether the kernel still caches the inode or not.
    let old_ino = lstat(&file).ino();
    sys::unlink(&file).unwrap();
    assert_errno!(read(&mount, &mut hf), libc::ESTALE);
    drop_kernel_inodes();
    assert_errno!(read(&mount, &mut hf), libc::ESTALE);
    // Its number reused by a new file (the lowest free number comes first once the kernel has
    // forgotten the old one): the handle is still stale, the new file's own handle works.
    let mut reused = None;
    for i in 0..200 {
        let p = dir.join(format!("n{i}"));
        fs::write(&p, format!("new {i}")).unwrap();
        if lstat(&p).ino() == old_ino {
            reused = Some(p);
            break;
        }
        sys::unlink(&p).unwrap();
        drop_kernel_inodes();
        sys::fsync_dir(&dir);
    }
    let reused = reused.expect("the removed file's number was never reused");
    assert_errno!(read(&mount, &mut hf), libc::ESTALE);
    drop_kernel_inodes();
    assert_errno!(read(&mount, &mut hf), libc::ESTALE);
    let mut hn = name_to_handle(&reused).unwrap();
    assert!(read(&mount, &mut hn).unwrap().starts_with("new "));
    drop(mount);
    t.unmount();
}
