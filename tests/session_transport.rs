//! The session layer serves a real mount over both transports: a small in-memory file
//! system behind `dualfs::session::Dispatch`, driven through the kernel with ordinary file
//! calls. Needs root (mount(2)); io_uring also needs a kernel with FUSE over io_uring (the
//! tests switch `enable_uring` on and restore it). Skipped, with a note, where either is
//! missing.

use dualfs::session::abi::{self, fopen, EntryOut};
use dualfs::session::{
    Dispatch, MountSpec, Operation, Reply, Request, Session, SessionConfig, Transport, UringFault,
};
use nix::mount::{umount2, MntFlags, MsFlags};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// A tiny in-memory file system: directories and regular files.
#[derive(Default)]
struct MemFs {
    nodes: Mutex<Nodes>,
}

struct Nodes {
    map: HashMap<u64, Node>,
    next: u64,
}

impl Default for Nodes {
    fn default() -> Self {
        let mut map = HashMap::new();
        map.insert(abi::ROOT_ID, Node::new(abi::ROOT_ID, libc::S_IFDIR | 0o755));
        Nodes { map, next: 2 }
    }
}

struct Node {
    ino: u64,
    mode: u32,
    nlink: u32,
    data: Vec<u8>,
    children: BTreeMap<Vec<u8>, u64>,
}

impl Node {
    fn new(ino: u64, mode: u32) -> Node {
        let dir = mode & libc::S_IFMT == libc::S_IFDIR;
        Node {
            ino,
            mode,
            nlink: if dir { 2 } else { 1 },
            data: Vec::new(),
            children: BTreeMap::new(),
        }
    }

    fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    fn attr(&self) -> abi::Attr {
        abi::Attr {
            ino: self.ino,
            size: self.data.len() as u64,
            blocks: (self.data.len() as u64).div_ceil(512),
            mode: self.mode,
            nlink: self.nlink,
            blksize: 4096,
            ..Default::default()
        }
    }

    fn entry(&self) -> EntryOut {
        EntryOut {
            nodeid: self.ino,
            generation: 1,
            entry_valid: 60,
            attr_valid: 60,
            attr: self.attr(),
            ..Default::default()
        }
    }

    fn dtype(&self) -> u32 {
        if self.is_dir() {
            libc::DT_DIR as u32
        } else {
            libc::DT_REG as u32
        }
    }
}

impl Nodes {
    fn make(&mut self, parent: u64, name: &[u8], mode: u32) -> Result<EntryOut, i32> {
        let dir = self.map.get(&parent).ok_or(libc::ENOENT)?;
        if dir.children.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next;
        self.next += 1;
        let node = Node::new(ino, mode);
        let entry = node.entry();
        self.map.insert(ino, node);
        let dir = self.map.get_mut(&parent).expect("looked up above");
        dir.children.insert(name.to_vec(), ino);
        if mode & libc::S_IFMT == libc::S_IFDIR {
            dir.nlink += 1;
        }
        Ok(entry)
    }

    fn remove(&mut self, parent: u64, name: &[u8], want_dir: bool) -> Result<(), i32> {
        let dir = self.map.get(&parent).ok_or(libc::ENOENT)?;
        let ino = *dir.children.get(name).ok_or(libc::ENOENT)?;
        let node = &self.map[&ino];
        match (want_dir, node.is_dir()) {
            (true, false) => return Err(libc::ENOTDIR),
            (false, true) => return Err(libc::EISDIR),
            (true, true) if !node.children.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        // Freed at once: the test never uses a removed node again.
        self.map.remove(&ino);
        let dir = self.map.get_mut(&parent).expect("looked up above");
        dir.children.remove(name);
        if want_dir {
            dir.nlink -= 1;
        }
        Ok(())
    }
}

impl Dispatch for MemFs {
    fn dispatch(&self, req: &Request<'_>, reply: &mut Reply<'_>) {
        let mut nodes = self.nodes.lock().unwrap();
        let ino = req.nodeid();
        let result: Result<(), i32> = (|| {
            match req.op {
                Operation::Lookup { name } => {
                    let dir = nodes.map.get(&ino).ok_or(libc::ENOENT)?;
                    let child = dir.children.get(name).ok_or(libc::ENOENT)?;
                    reply.entry(&nodes.map[child].entry());
                }
                Operation::Forget(_) | Operation::BatchForget(_) => {}
                Operation::Getattr(_) => {
                    let node = nodes.map.get(&ino).ok_or(libc::ENOENT)?;
                    reply.attr(&abi::AttrOut {
                        attr_valid: 60,
                        attr: node.attr(),
                        ..Default::default()
                    });
                }
                Operation::Setattr(s) => {
                    let node = nodes.map.get_mut(&ino).ok_or(libc::ENOENT)?;
                    if s.valid & abi::fattr::SIZE != 0 {
                        node.data.resize(s.size as usize, 0);
                    }
                    if s.valid & abi::fattr::MODE != 0 {
                        node.mode = (node.mode & libc::S_IFMT) | (s.mode & 0o7777);
                    }
                    reply.attr(&abi::AttrOut {
                        attr_valid: 60,
                        attr: node.attr(),
                        ..Default::default()
                    });
                }
                Operation::Mkdir { arg, name } => {
                    let e =
                        nodes.make(ino, name, libc::S_IFDIR | (arg.mode & 0o7777 & !arg.umask))?;
                    reply.entry(&e);
                }
                Operation::Create { arg, name } => {
                    let e =
                        nodes.make(ino, name, libc::S_IFREG | (arg.mode & 0o7777 & !arg.umask))?;
                    reply.create(
                        &e,
                        &abi::OpenOut {
                            fh: 0,
                            open_flags: fopen::KEEP_CACHE,
                            backing_id: 0,
                        },
                    );
                }
                Operation::Unlink { name } => {
                    nodes.remove(ino, name, false)?;
                    reply.ok();
                }
                Operation::Rmdir { name } => {
                    nodes.remove(ino, name, true)?;
                    reply.ok();
                }
                Operation::Open(_) | Operation::Opendir(_) => reply.open(&abi::OpenOut::default()),
                Operation::Release(_)
                | Operation::Releasedir(_)
                | Operation::Flush(_)
                | Operation::Fsync(_)
                | Operation::Fsyncdir(_) => reply.ok(),
                Operation::Read(r) => {
                    let node = nodes.map.get(&ino).ok_or(libc::ENOENT)?;
                    let start = (r.offset as usize).min(node.data.len());
                    let end = (start + r.size as usize).min(node.data.len());
                    reply.bytes(&node.data[start..end]);
                }
                Operation::Write { arg, data } => {
                    let node = nodes.map.get_mut(&ino).ok_or(libc::ENOENT)?;
                    let end = arg.offset as usize + data.len();
                    if node.data.len() < end {
                        node.data.resize(end, 0);
                    }
                    node.data[arg.offset as usize..end].copy_from_slice(data);
                    reply.written(data.len() as u32);
                }
                Operation::Readdir(r) | Operation::Readdirplus(r) => {
                    let plus = matches!(req.op, Operation::Readdirplus(_));
                    let node = nodes.map.get(&ino).ok_or(libc::ENOENT)?;
                    let mut dir = reply.dir(r.size);
                    // Cookies: 1 ".", 2 "..", then 3 + the child's position.
                    let mut all: Vec<(u64, &[u8], &Node)> = vec![(1, b".", node), (2, b"..", node)];
                    for (i, (name, child)) in node.children.iter().enumerate() {
                        all.push((3 + i as u64, name, &nodes.map[child]));
                    }
                    for (cookie, name, n) in all.into_iter().skip(r.offset as usize) {
                        let added = if plus {
                            // The kernel counts no lookup for "." and "..": no entry for them.
                            let entry = if cookie <= 2 {
                                EntryOut {
                                    attr: n.attr(),
                                    ..Default::default()
                                }
                            } else {
                                n.entry()
                            };
                            dir.add_plus(&entry, cookie, n.dtype(), name)
                        } else {
                            dir.add(n.ino, cookie, n.dtype(), name)
                        };
                        if !added {
                            break;
                        }
                    }
                    dir.finish();
                }
                Operation::Statfs => reply.statfs(&abi::Kstatfs {
                    bsize: 4096,
                    namelen: 255,
                    frsize: 4096,
                    ..Default::default()
                }),
                Operation::Getxattr { .. } => return Err(libc::ENODATA),
                Operation::Listxattr(_) => reply.xattr_size(0),
                _ => return Err(libc::ENOSYS),
            }
            Ok(())
        })();
        if let Err(errno) = result {
            reply.error(errno);
        }
    }
}

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
        let session = Session::mount(Arc::new(MemFs::default()), &spec, &config).expect("mount");
        Mounted {
            dir,
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
            session.join();
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
    if !is_root() {
        eprintln!("skipped: mounting needs root");
        return;
    }
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
    if !is_root() {
        eprintln!("skipped: mounting needs root");
        return;
    }
    let _serial = URING_PARAM.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_param) = uring_param(true) else {
        return;
    };
    let mut m = Mounted::new(Transport::Uring, None);
    assert_eq!(m.session().transport(), Transport::Uring);
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

/// Every way the ring can fail to start leaves a working mount over /dev/fuse.
#[test]
fn io_uring_failures_fall_back_to_dev_fuse() {
    if !is_root() {
        eprintln!("skipped: mounting needs root");
        return;
    }
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
