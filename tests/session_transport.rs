//! The session layer serves a real mount over both transports: a small in-memory file
//! system behind `dualfs::session::Dispatch`, driven through the kernel with ordinary file
//! calls. Needs root (mount(2)); io_uring also needs a kernel with FUSE over io_uring (the
//! tests switch `enable_uring` on and restore it; they are skipped, with a note, on a kernel
//! without it).

#[path = "common/session_memfs.rs"]
mod session_memfs;

use dualfs::session::{MountSpec, Session, SessionConfig, Transport, UringFault};
use nix::mount::{umount2, MntFlags, MsFlags};
use session_memfs::MemFs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Tests that change `enable_uring` run one at a time.
static URING_PARAM: Mutex<()> = Mutex::new(());

/// Sets `enable_uring` and puts back what it was.
struct UringParam {
    old: String,
}

impl UringParam {
    fn set(on: bool) -> Option<UringParam> {
        let old = std::fs::read_to_string(ENABLE_URING).ok()?;
        std::fs::write(ENABLE_URING, if on { "Y" } else { "N" }).ok()?;
        Some(UringParam {
            old: old.trim().to_string(),
        })
    }
}

impl Drop for UringParam {
    fn drop(&mut self) {
        let _ = std::fs::write(ENABLE_URING, &self.old);
    }
}

/// A mounted session; always unmounted (lazily) when dropped, even on a failed assertion.
struct Mounted {
    dir: tempfile::TempDir,
    fs: Arc<MemFs>,
    session: Option<Session>,
}

impl Mounted {
    fn new(transport: Transport, fault: Option<UringFault>) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let config = SessionConfig {
            transport,
            threads: 2,
            fault,
            ..SessionConfig::default()
        };
        let spec = MountSpec {
            mountpoint: dir.path(),
            fs_type: "fuse.sessiontest",
            source: "sessiontest",
            flags: MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
            allow_other: false,
        };
        let fs = Arc::new(MemFs::default());
        let session = Session::mount(fs.clone(), &spec, &config).expect("mount");
        Mounted {
            dir,
            fs,
            session: Some(session),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn session(&self) -> &Session {
        self.session.as_ref().unwrap()
    }

    /// Unmount and wait for the session's threads (10 s at most).
    fn unmount(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let _ = umount2(self.dir.path(), MntFlags::MNT_DETACH);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = session.join();
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "session threads did not end after unmount"
        );
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.session.is_some() {
            let _ = umount2(self.dir.path(), MntFlags::MNT_DETACH);
            if !std::thread::panicking() {
                self.unmount();
            }
        }
    }
}

/// create, write, read, stat, readdir, unlink and rmdir through the kernel.
fn exercise(root: &Path) {
    let dir = root.join("d");
    std::fs::create_dir(&dir).unwrap();
    assert!(std::fs::metadata(&dir).unwrap().is_dir());

    let file = dir.join("f");
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    f.write_all(b"hello world").unwrap();
    f.write_all_at(b"tail", 8192).unwrap();
    // Large enough to need several write requests.
    let big: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
    f.write_all_at(&big, 16384).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    f.read_to_end(&mut back).unwrap();
    drop(f);
    assert_eq!(&back[..11], b"hello world");
    assert_eq!(&back[8192..8196], b"tail");
    assert_eq!(&back[16384..], &big[..]);
    let meta = std::fs::metadata(&file).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.len(), 16384 + big.len() as u64);
    assert_eq!(meta.mode() & 0o777, 0o644 & !current_umask());

    let names: Vec<String> = (0..200)
        .map(|i| format!("file-with-a-longer-name-{i:04}"))
        .collect();
    for name in &names {
        std::fs::File::create(dir.join(name)).unwrap();
    }
    let mut listed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    listed.sort();
    let mut expected = names.clone();
    expected.push("f".into());
    expected.sort();
    assert_eq!(listed, expected);

    assert_eq!(
        std::fs::remove_dir(&dir).unwrap_err().raw_os_error(),
        Some(libc::ENOTEMPTY)
    );
    for name in names.iter().chain(std::iter::once(&"f".to_string())) {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    assert_eq!(
        std::fs::metadata(&file).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
    std::fs::remove_dir(&dir).unwrap();
    assert_eq!(
        std::fs::metadata(&dir).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
    assert_eq!(std::fs::read_dir(root).unwrap().count(), 0);
}

fn current_umask() -> u32 {
    // SAFETY: umask cannot fail; the old mask is put back at once.
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    }
}

#[test]
fn dev_fuse_serves_requests() {
    assert!(
        is_root(),
        "the end-to-end tests need root (tests/README.md)"
    );
    let mut m = Mounted::new(Transport::Dev, None);
    assert_eq!(m.session().transport(), Transport::Dev);
    exercise(m.path());
    let stats = m.session().stats();
    m.unmount();
    assert!(
        stats.dev() > 400,
        "requests over /dev/fuse: {}",
        stats.dev()
    );
    assert_eq!(stats.uring(), 0);
}

/// The kernel offers FUSE over io_uring once `enable_uring` is on; None where it cannot.
fn uring_param(on: bool) -> Option<UringParam> {
    let param = UringParam::set(on);
    if param.is_none() {
        eprintln!("skipped: {ENABLE_URING} cannot be set (no FUSE over io_uring in this kernel)");
    }
    param
}

#[test]
fn io_uring_serves_requests() {
    let Some((_serial, _param, mut m)) = ring_mount() else {
        return;
    };
    exercise(m.path());
    let stats = m.session().stats();
    m.unmount();
    eprintln!(
        "/dev/fuse: {} requests, ring: {}",
        stats.dev(),
        stats.uring()
    );
    // Everything but INIT, FORGET and INTERRUPT goes over the ring.
    assert!(
        stats.uring() > 400,
        "requests over the ring: {}",
        stats.uring()
    );
    assert!(
        stats.dev() < stats.uring() / 4,
        "requests over /dev/fuse: {}",
        stats.dev()
    );
}

/// A mount over the ring, with `enable_uring` held on (None, with a note, where the kernel
/// has no FUSE over io_uring). Dropped in reverse order: unmounted, then the parameter put back.
fn ring_mount() -> Option<(std::sync::MutexGuard<'static, ()>, UringParam, Mounted)> {
    assert!(
        is_root(),
        "the end-to-end tests need root (tests/README.md)"
    );
    let serial = URING_PARAM.lock().unwrap_or_else(|e| e.into_inner());
    let param = uring_param(true)?;
    let m = Mounted::new(Transport::Uring, None);
    assert_eq!(m.session().transport(), Transport::Uring);
    Some((serial, param, m))
}

/// Read 1 MiB at `offset` of a file opened with O_DIRECT (into an aligned buffer): the read
/// reaches the file system whatever the page cache holds.
fn read_direct_mib(f: &std::fs::File, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; (1 << 20) + 4096];
    let skip = buf.as_ptr().align_offset(4096);
    let n = f.read_at(&mut buf[skip..skip + (1 << 20)], offset)?;
    Ok(buf[skip..skip + n].to_vec())
}

fn open_direct(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap()
}

/// Over the ring, large READs (a reader's read-ahead, direct reads) are served by the data
/// threads, beside the queue's own thread, and come back whole and in place.
#[test]
fn large_reads_over_the_ring_go_to_the_data_threads() {
    let Some((_serial, _param, mut m)) = ring_mount() else {
        return;
    };
    let file = m.path().join("big");
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 253) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let f = open_direct(&file);
    let mut back = Vec::new();
    for chunk in 0..4u64 {
        let read = read_direct_mib(&f, chunk << 20).unwrap();
        assert_eq!(read.len(), 1 << 20, "chunk {chunk}");
        back.extend_from_slice(&read);
    }
    drop(f);
    let stats = m.session().stats();
    m.unmount();
    assert!(back == data, "the file read back differs");
    assert!(
        stats.data_threads() >= 4,
        "READs served by the data threads: {} of {}",
        stats.data_threads(),
        stats.uring()
    );
}

/// A data thread whose handler panics still hands its entry back (answered EIO): the reader
/// gets an error, the unmount does not hang, and the session reports the panic.
#[test]
fn a_panicking_read_on_a_data_thread_fails_the_read_not_the_unmount() {
    let Some((_serial, _param, mut m)) = ring_mount() else {
        return;
    };
    let file = m.path().join("big");
    std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
    let f = open_direct(&file);
    m.fs.panic_on_read
        .store(true, std::sync::atomic::Ordering::Release);
    // In a thread: were the entry lost, the read would wait for good (until this process
    // ends and the kernel drops the connection).
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(read_direct_mib(&f, 0).map_err(|e| e.raw_os_error()));
    });
    let read = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the read was never answered");
    assert_eq!(read, Err(Some(libc::EIO)));
    let session = m.session.take().unwrap();
    let _ = umount2(m.path(), MntFlags::MNT_DETACH);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(session.join());
    });
    let joined = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("session threads did not end after unmount");
    assert!(joined.is_err(), "the panic is reported");
}

/// Over the ring, /dev/fuse carries the forgets, and its reader pauses after each so that the
/// kernel gathers the next ones into a BATCH_FORGET instead of waking a reader (at the cost of
/// the unlinking process) for every evicted inode.
#[test]
fn forgets_over_the_ring_come_in_batches() {
    assert!(
        is_root(),
        "the end-to-end tests need root (tests/README.md)"
    );
    let _serial = URING_PARAM.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_param) = uring_param(true) else {
        return;
    };
    const FILES: u64 = 2000;
    let mut m = Mounted::new(Transport::Uring, None);
    assert_eq!(m.session().transport(), Transport::Uring);
    let dir = m.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..FILES {
        std::fs::File::create(dir.join(format!("f{i}"))).unwrap();
    }
    let before = m.fs.forgotten();
    let dev_before = m.session().stats().dev();
    for i in 0..FILES {
        std::fs::remove_file(dir.join(format!("f{i}"))).unwrap();
    }
    // The kernel forgets an unlinked inode at once; its FORGET may still be on its way.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while m.fs.forgotten() - before < FILES && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let forgotten = m.fs.forgotten() - before;
    let reads = m.session().stats().dev() - dev_before;
    m.unmount();
    eprintln!("{forgotten} forgets in {reads} requests over /dev/fuse");
    assert!(forgotten >= FILES, "forgotten: {forgotten} of {FILES}");
    assert!(
        reads <= FILES / 4,
        "{reads} /dev/fuse requests carried {forgotten} forgets: one per inode, not batched"
    );
}

/// Every way the ring can fail to start leaves a working mount over /dev/fuse.
#[test]
fn io_uring_failures_fall_back_to_dev_fuse() {
    assert!(
        is_root(),
        "the end-to-end tests need root (tests/README.md)"
    );
    let _serial = URING_PARAM.lock().unwrap_or_else(|e| e.into_inner());
    let cases: [(&str, bool, Option<UringFault>); 5] = [
        ("enable_uring=N", false, None),
        ("the rings cannot be set up", true, Some(UringFault::Setup)),
        (
            "the kernel refuses the first queue's REGISTERs",
            true,
            Some(UringFault::RefuseRegister { qid: 0 }),
        ),
        (
            "the last queue fails before registering",
            true,
            Some(UringFault::QueueFails { qid: last_cpu() }),
        ),
        (
            "the last queue's REGISTERs are refused",
            true,
            Some(UringFault::RefuseRegister { qid: last_cpu() }),
        ),
    ];
    for (what, on, fault) in cases {
        let Some(_param) = uring_param(on) else {
            return;
        };
        let mut m = Mounted::new(Transport::Uring, fault);
        assert_eq!(m.session().transport(), Transport::Dev, "{what}");
        let probe = m.path().join("probe");
        std::fs::create_dir(&probe).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(std::fs::metadata(&probe).unwrap().is_dir(), "{what}");
        std::fs::remove_dir(&probe).unwrap();
        let stats = m.session().stats();
        m.unmount();
        assert_eq!(stats.uring(), 0, "{what}");
        assert!(stats.dev() >= 3, "{what}: {}", stats.dev());
    }
}

fn last_cpu() -> usize {
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let last = possible.trim().rsplit([',', '-']).next().unwrap_or("0");
    last.parse().unwrap_or(0)
}
