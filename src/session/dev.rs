//! The /dev/fuse transport: worker threads, each reading requests from its own descriptor
//! (cloned with FUSE_DEV_IOC_CLONE, so the kernel hands each its own queue of answers to
//! look up), writing each reply with one write().

use super::abi::{self, InitIn, OutHeader};
use super::request::{decode_dev, Layout, Operation};
use super::{serve, Dispatch, End, Negotiated, Reply, Stats};
use log::{debug, warn};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the /dev/fuse reader of a mount served over io_uring waits after a FORGET before
/// reading again. The kernel wakes a reader sleeping in read() for every inode it evicts, and
/// the process that dropped the inode (an unlink's, mostly) pays that wake-up: a
/// cross-CPU interrupt, ~10 µs on this machine's virtual CPUs, a third of an unlink. While the
/// reader pauses, nobody sleeps on the queue: the forgets collect in the kernel's list and
/// come as one BATCH_FORGET. Over /dev/fuse alone the readers serve every request and never
/// pause. docs/DESIGN.md, "The FUSE session layer".
const FORGET_PAUSE: Duration = Duration::from_millis(1);
use zerocopy::{FromBytes, IntoBytes};

/// Read until the kernel's INIT arrives (it is the first request).
pub(super) fn read_init(device: &OwnedFd, max_write: u32) -> io::Result<(u64, InitIn)> {
    let mut buf = vec![0u8; (max_write as usize).max(1 << 20) + 4096];
    loop {
        let n = match read(device, &mut buf) {
            Ok(n) => n,
            Err(e) if retry(&e) => continue,
            Err(e) => return Err(e),
        };
        match decode_dev(&buf[..n], Layout::default()) {
            Ok(req) => match req.op {
                Operation::Init(init) => return Ok((req.unique(), init)),
                _ => {
                    warn!("request {} before INIT: EIO", req.header.opcode);
                    send_error(device, req.unique(), libc::EIO)?;
                }
            },
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("INIT: {e}"),
                ));
            }
        }
    }
}

fn read(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the buffer is valid for writes of its length.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Errors after which a reader tries again: ENOENT is a request interrupted before it was
/// read.
fn retry(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::EINTR | libc::EAGAIN)
    )
}

/// Write one message: the out header (`error` is a negative errno, or a notification code
/// when `unique` is 0), then `body`.
pub(super) fn send(fd: &OwnedFd, unique: u64, error: i32, body: &[u8]) -> io::Result<()> {
    let header = OutHeader {
        len: (size_of::<OutHeader>() + body.len()) as u32,
        error,
        unique,
    };
    let iov = [
        libc::iovec {
            iov_base: header.as_bytes().as_ptr() as *mut _,
            iov_len: size_of::<OutHeader>(),
        },
        libc::iovec {
            iov_base: body.as_ptr() as *mut _,
            iov_len: body.len(),
        },
    ];
    // SAFETY: both iovecs point at live buffers of their lengths.
    let n = unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), 2) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(super) fn send_error(fd: &OwnedFd, unique: u64, errno: i32) -> io::Result<()> {
    send(fd, unique, -errno, &[])
}

/// A descriptor of the same connection with its own processing queue; the session's own
/// (duplicated) if the kernel cannot clone.
fn clone_device(device: &OwnedFd) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let cloned = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")
        .map(OwnedFd::from)
        .and_then(|fd| {
            let mut session = device.as_raw_fd() as u32;
            // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 through the pointer.
            let r = unsafe { libc::ioctl(fd.as_raw_fd(), abi::DEV_IOC_CLONE as _, &mut session) };
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(fd)
            }
        });
    match cloned {
        Ok(fd) => Ok(fd),
        Err(e) => {
            debug!("FUSE_DEV_IOC_CLONE failed ({e}): threads share one descriptor");
            device.try_clone()
        }
    }
}

/// What every /dev/fuse worker of a session shares.
pub(super) struct Workers {
    pub device: Arc<OwnedFd>,
    pub negotiated: Negotiated,
    /// Each worker reads its own clone of the session's descriptor.
    pub clone: bool,
    pub stats: Arc<Stats>,
    pub end: Arc<End>,
    /// Set once the io_uring queues serve: the workers then see only FORGET and INTERRUPT.
    pub ring_serves: Arc<AtomicBool>,
}

impl Workers {
    /// Start the workers numbered `ids` (their threads' names).
    pub fn spawn<D: Dispatch>(
        &self,
        fs: &Arc<D>,
        ids: std::ops::Range<usize>,
    ) -> io::Result<Vec<JoinHandle<()>>> {
        let mut handles = Vec::with_capacity(ids.len());
        for i in ids {
            let fd = if self.clone {
                clone_device(&self.device)?
            } else {
                self.device.try_clone()?
            };
            let fs = fs.clone();
            let stats = self.stats.clone();
            let end = self.end.clone();
            let ring_serves = self.ring_serves.clone();
            // Keeps the session's descriptor open while a worker runs.
            let session = self.device.clone();
            let negotiated = self.negotiated;
            let handle = std::thread::Builder::new()
                .name(format!("fuse-dev-{i}"))
                .spawn(move || {
                    if let Err(e) = worker(&*fs, &fd, &negotiated, &stats, &ring_serves) {
                        end.failed(e);
                    }
                    drop(session);
                })?;
            handles.push(handle);
        }
        Ok(handles)
    }
}

/// Serve until the connection ends: Ok when the kernel ended it with ENODEV (unmounted, or
/// aborted), the error otherwise (ECONNABORTED among them). Once `ring_serves`, a FORGET is
/// followed by [`FORGET_PAUSE`].
fn worker<D: Dispatch>(
    fs: &D,
    fd: &OwnedFd,
    negotiated: &Negotiated,
    stats: &Stats,
    ring_serves: &AtomicBool,
) -> io::Result<()> {
    let layout = negotiated.layout();
    let mut input = vec![0u8; negotiated.dev_buffer_size()];
    // The reply's header goes in front of its body: one write, no copy.
    let mut output = vec![0u8; size_of::<OutHeader>() + negotiated.payload_size()];
    loop {
        let n = match read(fd, &mut input) {
            Ok(n) => n,
            Err(e) if retry(&e) => continue,
            // ENODEV: unmounted or aborted; ECONNABORTED: the same, seen by a reader caught
            // between taking a request and queueing it for its reply.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            Err(e) => {
                if e.raw_os_error() != Some(libc::ECONNABORTED) {
                    warn!("reading /dev/fuse: {e}");
                }
                return Err(e);
            }
        };
        let req = match decode_dev(&input[..n], layout) {
            Ok(req) => req,
            Err(e) => {
                warn!("bad request from the kernel: {e}");
                if let Ok((header, _)) = abi::InHeader::read_from_prefix(&input[..n]) {
                    let _ = send_error(fd, header.unique, libc::EIO);
                }
                continue;
            }
        };
        stats.dev_requests.fetch_add(1, Ordering::Relaxed);
        let (head, body) = output.split_at_mut(size_of::<OutHeader>());
        let mut reply = Reply::new(body);
        serve(fs, &req, &mut reply);
        if !req.op.wants_reply() {
            let forget = matches!(req.op, Operation::Forget(_) | Operation::BatchForget(_));
            if forget && ring_serves.load(Ordering::Acquire) {
                std::thread::sleep(FORGET_PAUSE);
            }
            continue;
        }
        let Some(header) = super::reply::out_header(req.unique(), &reply) else {
            continue;
        };
        let len = header.len as usize;
        head.copy_from_slice(header.as_bytes());
        // SAFETY: the first `len` bytes of `output` are the header and the body.
        let w = unsafe { libc::write(fd.as_raw_fd(), output.as_ptr().cast(), len) };
        if w < 0 {
            let e = io::Error::last_os_error();
            // ENOENT: the request was interrupted and is gone.
            if e.raw_os_error() != Some(libc::ENOENT) {
                warn!("writing a reply to /dev/fuse: {e}");
            }
        }
    }
}

/// Answer every request with EIO until the kernel ends the connection (ENODEV): a
/// supervisor that gave up on its daemon keeps the mount failing cleanly instead of hanging.
/// FORGET and INTERRUPT want no answer.
pub(super) fn fail_all(fd: &OwnedFd, negotiated: &Negotiated) -> io::Result<()> {
    let mut buf = vec![0u8; negotiated.dev_buffer_size()];
    loop {
        let n = match read(fd, &mut buf) {
            Ok(n) => n,
            Err(e) if retry(&e) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            Err(e) => return Err(e),
        };
        let Ok((header, _)) = abi::InHeader::read_from_prefix(&buf[..n]) else {
            continue;
        };
        use abi::opcode::{BATCH_FORGET, FORGET, INTERRUPT};
        if !matches!(header.opcode, FORGET | BATCH_FORGET | INTERRUPT) {
            let _ = send_error(fd, header.unique, libc::EIO);
        }
    }
}
