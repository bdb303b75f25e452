//! delayfs — a slow device for DualFS's benchmarks: serves the regular files of one backing
//! directory (flat, no subdirectories) and delays every read, write and fsync of them by a
//! fixed time, as a disk with a seek in every request would. A DualFS image put under it
//! behaves like an image on an HDD-like device, with no change to DualFS.
//!
//!     delayfs BACKING_DIR MOUNTPOINT [--delay-ms 5] [--threads 16]   # stop: umount MOUNTPOINT
//!
//! Files are opened with direct I/O, so the kernel caches nothing and every pread/pwrite of
//! the user becomes requests here (of at most 1 MiB each); each waits the delay and then does
//! the I/O on the backing file. Requests wait side by side (one thread each, up to --threads),
//! like a device with a queue, not one at a time. Nothing is created or removed through it:
//! the benchmark makes the images in BACKING_DIR first (mkfs there, then mount through this).

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

const ROOT: u64 = 1;
const TTL: Duration = Duration::from_secs(1);

struct DelayFs {
    backing: PathBuf,
    delay: Duration,
    /// Inode numbers given out by name (the backing directory is flat): ino - 2 is the index.
    names: Mutex<Vec<OsString>>,
    /// Open backing files by handle.
    open: Mutex<HashMap<u64, std::sync::Arc<File>>>,
    next_fh: Mutex<u64>,
}

fn attr_of(ino: u64, md: &std::fs::Metadata) -> FileAttr {
    let t = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns as u32);
    FileAttr {
        ino: INodeNo(ino),
        size: md.size(),
        blocks: md.blocks(),
        atime: t(md.atime(), md.atime_nsec()),
        mtime: t(md.mtime(), md.mtime_nsec()),
        ctime: t(md.ctime(), md.ctime_nsec()),
        crtime: t(md.ctime(), md.ctime_nsec()),
        kind: if md.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: (md.mode() & 0o7777) as u16,
        nlink: md.nlink() as u32,
        uid: md.uid(),
        gid: md.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl DelayFs {
    fn ino_of(&self, name: &OsStr) -> u64 {
        let mut names = self.names.lock().unwrap();
        let i = match names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                names.push(name.to_os_string());
                names.len() - 1
            }
        };
        i as u64 + 2
    }

    fn path_of(&self, ino: u64) -> Result<PathBuf, Errno> {
        if ino == ROOT {
            return Ok(self.backing.clone());
        }
        let names = self.names.lock().unwrap();
        let name = names.get((ino - 2) as usize).ok_or(Errno::ENOENT)?;
        Ok(self.backing.join(name))
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let md = std::fs::metadata(self.path_of(ino)?).map_err(Errno::from)?;
        Ok(attr_of(ino, &md))
    }

    fn file(&self, fh: FileHandle) -> Result<std::sync::Arc<File>, Errno> {
        let open = self.open.lock().unwrap();
        open.get(&u64::from(fh)).cloned().ok_or(Errno::EBADF)
    }

    /// The device's latency, paid by every request before it is served.
    fn wait(&self) {
        std::thread::sleep(self.delay);
    }
}

impl Filesystem for DelayFs {
    fn init(&mut self, _req: &Request, cfg: &mut KernelConfig) -> std::io::Result<()> {
        let _ = cfg.add_capabilities(InitFlags::FUSE_MAX_PAGES);
        let _ = cfg.set_max_write(1 << 20);
        let _ = cfg.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if u64::from(parent) != ROOT {
            return reply.error(Errno::ENOENT);
        }
        match std::fs::symlink_metadata(self.backing.join(name)) {
            Ok(md) if md.is_file() => {
                reply.entry(&TTL, &attr_of(self.ino_of(name), &md), Generation(0))
            }
            Ok(_) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(Errno::from(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(u64::from(ino)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    /// Only truncation is passed on (an image may be grown or cut); times and modes are
    /// accepted and left as they are.
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ino = u64::from(ino);
        let r = (|| {
            if let Some(size) = size {
                let f = OpenOptions::new().write(true).open(self.path_of(ino)?);
                f.and_then(|f| f.set_len(size)).map_err(Errno::from)?;
            }
            self.attr(ino)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
        let r = self.path_of(u64::from(ino)).and_then(|p| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .open(p)
                .map_err(Errno::from)
        });
        match r {
            Ok(f) => {
                let fh = {
                    let mut next = self.next_fh.lock().unwrap();
                    *next += 1;
                    *next
                };
                self.open.lock().unwrap().insert(fh, std::sync::Arc::new(f));
                let flags = FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
                reply.opened(FileHandle(fh), flags);
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.wait();
        let r = self.file(fh).and_then(|f| {
            let mut buf = vec![0u8; size as usize];
            let mut done = 0;
            while done < buf.len() {
                match f.read_at(&mut buf[done..], offset + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Errno::from(e)),
                }
            }
            buf.truncate(done);
            Ok(buf)
        });
        match r {
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.wait();
        let r = self
            .file(fh)
            .and_then(|f| f.write_all_at(data, offset).map_err(Errno::from));
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        self.wait();
        match self
            .file(fh)
            .and_then(|f| f.sync_data().map_err(Errno::from))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.open.lock().unwrap().remove(&u64::from(fh));
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if u64::from(ino) != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let mut names: Vec<OsString> = match std::fs::read_dir(&self.backing) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name())
                .collect(),
            Err(e) => return reply.error(Errno::from(e)),
        };
        names.sort();
        let mut entries = vec![
            (ROOT, FileType::Directory, OsString::from(".")),
            (ROOT, FileType::Directory, OsString::from("..")),
        ];
        entries.extend(
            names
                .into_iter()
                .map(|n| (self.ino_of(&n), FileType::RegularFile, n)),
        );
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }
}

fn usage(code: i32) -> ! {
    let text = "usage: delayfs BACKING_DIR MOUNTPOINT [--delay-ms MS] [--threads N]   (stop it with: umount MOUNTPOINT)";
    if code == 0 {
        println!("{text}");
    } else {
        eprintln!("{text}");
    }
    std::process::exit(code)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut paths = Vec::new();
    let (mut delay_ms, mut threads) = (5.0f64, 16usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--delay-ms" => {
                delay_ms = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|d: &f64| *d >= 0.0)
                    .unwrap_or_else(|| usage(2))
            }
            "--threads" => {
                threads = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| usage(2))
            }
            "-h" | "--help" => usage(0),
            _ if !a.starts_with('-') && paths.len() < 2 => paths.push(PathBuf::from(a)),
            _ => usage(2),
        }
    }
    let [backing, mountpoint] = <[PathBuf; 2]>::try_from(paths).unwrap_or_else(|_| usage(2));
    if !backing.is_dir() {
        eprintln!("delayfs: {}: not a directory", backing.display());
        std::process::exit(1);
    }
    let fs = DelayFs {
        backing,
        delay: Duration::from_secs_f64(delay_ms / 1000.0),
        names: Mutex::new(Vec::new()),
        open: Mutex::new(HashMap::new()),
        next_fh: Mutex::new(0),
    };
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("delayfs".into()),
        MountOption::Subtype("delayfs".into()),
        MountOption::DefaultPermissions,
    ];
    cfg.n_threads = Some(threads);
    cfg.clone_fd = true;
    if let Err(e) = fuser::mount(fs, &mountpoint, &cfg) {
        eprintln!("delayfs: {}: {e}", mountpoint.display());
        std::process::exit(1);
    }
}
