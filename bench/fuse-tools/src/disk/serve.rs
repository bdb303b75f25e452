//! The FUSE side of diskmodel: the regular files of one flat backing directory, each a
//! partition of a simulated disk, served with direct I/O so the kernel caches nothing: every
//! read and write of them goes through the disk's model (`LiveDisk::serve`) and returns when
//! the simulated disk completes it. fsync (a loop device's FLUSH, a file system's own fsync
//! of its image) waits until the disk's write cache is on the platter (at once without a
//! write cache) and does not sync the backing file: the backing store's own speed must not
//! leak into the timing. `.diskmodel-stats` in the mount's root (not listed) reads as the report.

use super::live::LiveDisk;
use super::model::{next_partition_start, Op, Partition, MIB};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, UNIX_EPOCH};

pub const STATS_FILE: &str = ".diskmodel-stats";
const ROOT: u64 = 1;
const STATS_INO: u64 = 2;
/// Backing files get inode numbers from here on, by the order they are first seen.
const FIRST_FILE_INO: u64 = 3;
const TTL: Duration = Duration::from_secs(1);

/// A backing file's place: which disk, and where on it.
#[derive(Clone, Copy, Debug)]
pub struct Placement {
    pub disk: usize,
    pub part: Partition,
}

/// The disks, the files on them and the report; shared by the FUSE threads and main.
pub struct Shared {
    pub backing: PathBuf,
    pub disks: Vec<LiveDisk>,
    files: Mutex<Files>,
    epoch: Instant,
    /// Requests and bytes by partition ((disk, start) -> reads, writes, bytes read, bytes
    /// written): which image of a disk the work was for.
    traffic: Mutex<HashMap<(usize, u64), [u64; 4]>>,
}

#[derive(Default)]
struct Files {
    /// Names by inode number (ino - FIRST_FILE_INO is the index).
    names: Vec<OsString>,
    placed: HashMap<OsString, Placement>,
    /// In the order placed, for the report.
    order: Vec<OsString>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            c if (c as u32) < 0x20 => out += &format!("\\u{:04x}", c as u32),
            c => out.push(c),
        }
    }
    out + "\""
}

impl Shared {
    pub fn new(backing: PathBuf, disks: Vec<LiveDisk>, epoch: Instant) -> Shared {
        Shared {
            backing,
            disks,
            files: Mutex::new(Files::default()),
            epoch,
            traffic: Mutex::new(HashMap::new()),
        }
    }

    /// Put a file on a disk; refused if it overlaps a partition there or passes the disk's end.
    pub fn place(
        &self,
        name: &OsStr,
        disk: usize,
        start: Option<u64>,
        length: u64,
    ) -> Result<Placement, String> {
        let mut files = lock(&self.files);
        if files.placed.contains_key(name) {
            return Err(format!("{} is placed twice", name.to_string_lossy()));
        }
        self.place_in(&mut files, name, disk, start, length)
    }

    fn place_in(
        &self,
        files: &mut Files,
        name: &OsStr,
        disk: usize,
        start: Option<u64>,
        length: u64,
    ) -> Result<Placement, String> {
        let display = name.to_string_lossy();
        let on_disk: Vec<Partition> = files
            .placed
            .values()
            .filter(|p| p.disk == disk)
            .map(|p| p.part)
            .collect();
        let part = Partition {
            start: start.unwrap_or_else(|| next_partition_start(&on_disk)),
            length,
        };
        let live = &self.disks[disk];
        if let Some((other, _)) = files
            .placed
            .iter()
            .find(|(_, p)| p.disk == disk && p.part.overlaps(&part))
        {
            return Err(format!(
                "{display} at {} overlaps {} on disk {}",
                part.start,
                other.to_string_lossy(),
                live.name
            ));
        }
        if part.end() > live.params.capacity() {
            return Err(format!(
                "{display} ({length} bytes at {}) passes the end of disk {} ({} bytes): give it a larger capacity=",
                part.start,
                live.name,
                live.params.capacity()
            ));
        }
        let placement = Placement { disk, part };
        files.placed.insert(name.to_os_string(), placement);
        files.order.push(name.to_os_string());
        Ok(placement)
    }

    /// A file's placement; one not given on the command line goes after the partitions of
    /// the first disk (its size then, rounded up to a MiB), or at its end if it does not fit.
    fn placement_of(&self, name: &OsStr) -> Placement {
        let mut files = lock(&self.files);
        if let Some(p) = files.placed.get(name) {
            return *p;
        }
        let size = std::fs::metadata(self.backing.join(name)).map_or(0, |m| m.len());
        let length = size.div_ceil(MIB).max(1) * MIB;
        let disk = &self.disks[0];
        match self.place_in(&mut files, name, 0, None, length) {
            Ok(p) => {
                println!(
                    "diskmodel: {} on disk {} at {} ({length} bytes)",
                    name.to_string_lossy(),
                    disk.name,
                    p.part.start
                );
                p
            }
            Err(e) => {
                // Still served, at the disk's last MiB.
                eprintln!("diskmodel: {e}; it is served at the disk's end");
                let start = disk.params.capacity().saturating_sub(MIB);
                let p = Placement {
                    disk: 0,
                    part: Partition { start, length },
                };
                files.placed.insert(name.to_os_string(), p);
                files.order.push(name.to_os_string());
                p
            }
        }
    }

    fn count(&self, at: &Placement, op: Op, bytes: u64) {
        let mut traffic = lock(&self.traffic);
        let c = traffic.entry((at.disk, at.part.start)).or_default();
        let i = usize::from(op == Op::Write);
        c[i] += 1;
        c[2 + i] += bytes;
    }

    /// The report: every disk's parameters, partitions and figures, one disk a line.
    pub fn report(&self) -> String {
        let files = lock(&self.files);
        let traffic = lock(&self.traffic).clone();
        let time = self.epoch.elapsed().as_secs_f64();
        let mut out = format!("{{\"time_s\": {time:.6}, \"disks\": [\n");
        for (i, disk) in self.disks.iter().enumerate() {
            let (stats, late) = disk.snapshot();
            let partitions: Vec<String> = files
                .order
                .iter()
                .filter_map(|n| files.placed.get(n).map(|p| (n, p)))
                .filter(|(_, p)| p.disk == i)
                .map(|(n, p)| {
                    let [reads, writes, bytes_read, bytes_written] =
                        traffic.get(&(i, p.part.start)).copied().unwrap_or_default();
                    format!(
                        "{{\"file\": {}, \"start\": {}, \"length\": {}, \"reads\": {reads}, \"writes\": {writes}, \"bytes_read\": {bytes_read}, \"bytes_written\": {bytes_written}}}",
                        json_string(&n.to_string_lossy()),
                        p.part.start,
                        p.part.length
                    )
                })
                .collect();
            out += &format!(
                "{{\"name\": {}, {}, \"late\": {}, \"late_s\": {:.6}, \"partitions\": [{}], \"params\": {}}}{}\n",
                json_string(&disk.name),
                stats.json_members(),
                late.requests,
                late.seconds,
                partitions.join(", "),
                disk.params.to_json(),
                if i + 1 < self.disks.len() { "," } else { "" }
            );
        }
        out + "]}\n"
    }
}

enum Open {
    Image { file: Arc<File>, at: Placement },
    Report(Arc<Vec<u8>>),
}

pub struct DiskModelFs {
    shared: Arc<Shared>,
    open: Mutex<HashMap<u64, Open>>,
    next_fh: AtomicU64,
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

/// The report file: read-only, of no stated size (it is read with direct I/O to its end).
fn report_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(STATS_INO),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0o444,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl DiskModelFs {
    pub fn new(shared: Arc<Shared>) -> DiskModelFs {
        DiskModelFs {
            shared,
            open: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    fn ino_of(&self, name: &OsStr) -> u64 {
        let mut files = lock(&self.shared.files);
        let i = match files.names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                files.names.push(name.to_os_string());
                files.names.len() - 1
            }
        };
        i as u64 + FIRST_FILE_INO
    }

    fn name_of(&self, ino: u64) -> Result<OsString, Errno> {
        let files = lock(&self.shared.files);
        let i = ino.checked_sub(FIRST_FILE_INO).ok_or(Errno::ENOENT)?;
        files.names.get(i as usize).cloned().ok_or(Errno::ENOENT)
    }

    fn path_of(&self, ino: u64) -> Result<PathBuf, Errno> {
        if ino == ROOT {
            return Ok(self.shared.backing.clone());
        }
        Ok(self.shared.backing.join(self.name_of(ino)?))
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        if ino == STATS_INO {
            return Ok(report_attr());
        }
        let md = std::fs::metadata(self.path_of(ino)?).map_err(Errno::from)?;
        Ok(attr_of(ino, &md))
    }

    fn image(&self, fh: FileHandle) -> Result<(Arc<File>, Placement), Errno> {
        match lock(&self.open).get(&u64::from(fh)) {
            Some(Open::Image { file, at }) => Ok((file.clone(), *at)),
            Some(Open::Report(_)) => Err(Errno::EBADF),
            None => Err(Errno::EBADF),
        }
    }

    fn new_handle(&self, open: Open) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.open).insert(fh, open);
        FileHandle(fh)
    }
}

fn read_fully(f: &File, offset: u64, size: usize) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; size];
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
}

impl Filesystem for DiskModelFs {
    fn init(&mut self, _req: &Request, cfg: &mut KernelConfig) -> std::io::Result<()> {
        // Large requests, and asynchronous direct I/O: a loop device's requests reach the
        // model side by side, so that its queue has something to reorder.
        let _ = cfg.add_capabilities(InitFlags::FUSE_MAX_PAGES | InitFlags::FUSE_ASYNC_DIO);
        let _ = cfg.set_max_write(1 << 20);
        let _ = cfg.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if u64::from(parent) != ROOT {
            return reply.error(Errno::ENOENT);
        }
        if name.as_bytes() == STATS_FILE.as_bytes() {
            return reply.entry(&Duration::ZERO, &report_attr(), Generation(0));
        }
        match std::fs::symlink_metadata(self.shared.backing.join(name)) {
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
        if ino == STATS_INO {
            return reply.error(Errno::EACCES);
        }
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
        let ino = u64::from(ino);
        let write = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
        if ino == STATS_INO {
            if write {
                return reply.error(Errno::EACCES);
            }
            let report = Arc::new(self.shared.report().into_bytes());
            let fh = self.new_handle(Open::Report(report));
            return reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO);
        }
        let r = self.name_of(ino).and_then(|name| {
            let file = OpenOptions::new()
                .read(true)
                .write(write)
                .open(self.shared.backing.join(&name))
                .map_err(Errno::from)?;
            Ok((file, self.shared.placement_of(&name)))
        });
        match r {
            Ok((file, at)) => {
                let fh = self.new_handle(Open::Image {
                    file: Arc::new(file),
                    at,
                });
                let flags = FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
                reply.opened(fh, flags);
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
        let report = match lock(&self.open).get(&u64::from(fh)) {
            Some(Open::Report(bytes)) => Some(bytes.clone()),
            _ => None,
        };
        if let Some(bytes) = report {
            let from = (offset as usize).min(bytes.len());
            let to = from.saturating_add(size as usize).min(bytes.len());
            return reply.data(&bytes[from..to]);
        }
        let r = self.image(fh).and_then(|(file, at)| {
            let disk = &self.shared.disks[at.disk];
            self.shared.count(&at, Op::Read, size as u64);
            disk.serve(Op::Read, at.part.address(offset), size as u64, || {
                read_fully(&file, offset, size as usize)
            })
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
        let r = self.image(fh).and_then(|(file, at)| {
            let disk = &self.shared.disks[at.disk];
            self.shared.count(&at, Op::Write, data.len() as u64);
            disk.serve(
                Op::Write,
                at.part.address(offset),
                data.len() as u64,
                || file.write_all_at(data, offset).map_err(Errno::from),
            )
        });
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
        match self.image(fh) {
            Ok((_, at)) => {
                self.shared.disks[at.disk].flush();
                reply.ok()
            }
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
        lock(&self.open).remove(&u64::from(fh));
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
        let mut names: Vec<OsString> = match std::fs::read_dir(&self.shared.backing) {
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
