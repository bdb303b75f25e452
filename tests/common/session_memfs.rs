//! A tiny in-memory file system behind `dualfs::session::Dispatch` (directories and regular
//! files), for the session layer's transport test and its benchmark
//! (`examples/session_bench.rs`).

use dualfs::session::abi::{self, fopen, EntryOut};
use dualfs::session::{Dispatch, Operation, Reply, Request};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// A tiny in-memory file system: directories and regular files.
#[derive(Default)]
pub struct MemFs {
    nodes: Mutex<Nodes>,
    /// Lookups the kernel has given back (FORGET and BATCH_FORGET entries).
    forgotten: AtomicU64,
    /// READs panic (a handler's bug, for the tests of what the session does then).
    pub panic_on_read: AtomicBool,
}

impl MemFs {
    /// How many nodes the kernel has forgotten so far.
    #[allow(dead_code)] // the benchmark does not ask
    pub fn forgotten(&self) -> u64 {
        self.forgotten.load(Ordering::Acquire)
    }
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
        if matches!(req.op, Operation::Read(_)) && self.panic_on_read.load(Ordering::Acquire) {
            panic!("READ asked to panic");
        }
        let mut nodes = self.nodes.lock().unwrap();
        let ino = req.nodeid();
        let result: Result<(), i32> = (|| {
            match req.op {
                Operation::Lookup { name } => {
                    let dir = nodes.map.get(&ino).ok_or(libc::ENOENT)?;
                    let child = dir.children.get(name).ok_or(libc::ENOENT)?;
                    reply.entry(&nodes.map[child].entry());
                }
                Operation::Forget(_) => {
                    self.forgotten.fetch_add(1, Ordering::AcqRel);
                }
                Operation::BatchForget(ref list) => {
                    self.forgotten
                        .fetch_add(list.len() as u64, Ordering::AcqRel);
                }
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
