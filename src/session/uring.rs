//! The io_uring transport (Documentation/filesystems/fuse-io-uring.rst): one ring per
//! possible CPU, each served by one thread pinned to that CPU, each with `queue_depth`
//! entries. An entry is a header buffer (`fuse_uring_req_header`) and a payload buffer,
//! handed to the kernel once with REGISTER; afterwards every answer goes back with
//! COMMIT_AND_FETCH, which also waits for the entry's next request. The kernel queues a
//! request on the ring of the CPU its caller runs on.
//!
//! **Large reads go to data threads.** A reader's read-ahead arrives as several large READs
//! at once, all on its CPU's queue; served one after the other by that queue's thread, on
//! the reader's own CPU, they ran at two thirds of /dev/fuse's rate, where several readers
//! serve them side by side. So a queue's thread hands a READ of `DATA_THREAD_READ` bytes or
//! more, with its entry, to the session's data threads (not pinned) and fetches the next
//! request; the data thread answers into the entry's buffers and hands the entry back
//! through an eventfd the queue's ring polls, and the queue's thread commits it. Every
//! submission to a ring stays with its own thread.
//!
//! **Never hang a mount.** Once FUSE_OVER_IO_URING is granted, the kernel holds every
//! request until each queue has an entry registered. So the rings are built before INIT is
//! answered (no rings: the flag is not granted), and if a queue then fails to register, the
//! kernel is made to give up the ring: a REGISTER it refuses (a malformed one, sent through
//! a spare ring) clears the connection's io_uring mode, and requests flow over /dev/fuse.

use super::abi::{self, UringCmdReq, UringEntInOut, UringReqHeader};
use super::request::decode_ring;
use super::{serve, Dispatch, End, Negotiated, Reply, SessionConfig, Stats, UringFault};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use log::{debug, warn};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use zerocopy::{FromBytes, IntoBytes};

type Ring = IoUring<squeue::Entry128, cqueue::Entry>;

// The SQE is patched as bytes (below): it must be the kernel's 128-byte SQE.
const _: () = assert!(size_of::<squeue::Entry128>() == 128);
/// `io_uring_sqe::len`'s offset.
const SQE_LEN_OFFSET: usize = 24;
/// How long the session waits for every queue to report its registration.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);
/// READs of this many bytes or more are served by the data threads.
const DATA_THREAD_READ: u32 = 128 << 10;
/// The user data of the completion that says a data thread handed entries back.
const HANDED_BACK: u64 = u64::MAX;

/// The number of possible CPUs, which is the kernel's number of queues
/// (`num_possible_cpus`).
pub(super) fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(text.trim())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {text:?}")))
}

/// Count the CPUs of a list like "0-3,5".
fn parse_cpu_list(list: &str) -> Option<usize> {
    let mut n = 0;
    for part in list.split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => {
                b.parse::<usize>()
                    .ok()?
                    .checked_sub(a.parse::<usize>().ok()?)?
                    + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// A URING_CMD for the FUSE device with the command `req`; for REGISTER, `iov` points at
/// the entry's two buffers.
fn fuse_cmd(
    fd: RawFd,
    cmd_op: u32,
    req: &UringCmdReq,
    iov: Option<(*const libc::iovec, u32)>,
    user_data: u64,
) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[..size_of::<UringCmdReq>()].copy_from_slice(req.as_bytes());
    let mut op = opcode::UringCmd80::new(types::Fd(fd), cmd_op).cmd(cmd);
    if let Some((addr, _)) = iov {
        op = op.addr(Some(addr as u64));
    }
    let entry = op.build().user_data(user_data);
    let Some((_, len)) = iov else {
        return entry;
    };
    // UringCmd80 cannot set `len`, which REGISTER needs (the iovec count). Both types are
    // the kernel's plain 128-byte SQE, any bytes valid.
    // SAFETY: same size (asserted above), both plain old data.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(entry) };
    bytes[SQE_LEN_OFFSET..SQE_LEN_OFFSET + 4].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes) }
}

/// One ring entry's buffers. Boxed: the kernel keeps their addresses from REGISTER on.
struct Entry {
    header: Box<UringReqHeader>,
    payload: Box<[u8]>,
    iov: Box<[libc::iovec; 2]>,
}

// The raw pointers in `iov` point into the entry's own boxes.
unsafe impl Send for Entry {}

impl Entry {
    fn new(payload_size: usize) -> Entry {
        let mut header = Box::new(UringReqHeader::default());
        let mut payload = vec![0u8; payload_size].into_boxed_slice();
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_mut_bytes().as_mut_ptr().cast(),
                iov_len: size_of::<UringReqHeader>(),
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload.len(),
            },
        ]);
        Entry {
            header,
            payload,
            iov,
        }
    }
}

struct Queue {
    qid: usize,
    ring: Ring,
    entries: Vec<Entry>,
}

/// Where data threads hand a queue's entries back: the entries answered (index, commit
/// id), and an eventfd the queue's ring polls.
struct Handback {
    answered: Mutex<Vec<(usize, u64)>>,
    efd: OwnedFd,
}

impl Handback {
    fn new() -> io::Result<Handback> {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Handback {
            answered: Mutex::new(Vec::new()),
            // SAFETY: a new descriptor that nothing else owns.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn hand_back(&self, index: usize, commit_id: u64) {
        self.answered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((index, commit_id));
        let one = 1u64;
        // SAFETY: writes the 8 bytes of a live u64. It cannot fail short of 2^64 - 1
        // hand-backs unread.
        unsafe { libc::write(self.efd.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// The entries handed back since the last look (the eventfd reset first, so that a
    /// hand-back racing with this look wakes the ring again).
    fn take(&self) -> Vec<(usize, u64)> {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN (nothing counted) is fine.
        unsafe { libc::read(self.efd.as_raw_fd(), (&raw mut n).cast(), 8) };
        std::mem::take(&mut *self.answered.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Wait until `out` entries have come back (the session is ending: the entries'
    /// buffers must outlive the data threads' use of them).
    fn wait_for(&self, mut out: usize) {
        while out > 0 {
            let mut pfd = libc::pollfd {
                fd: self.efd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd.
            unsafe { libc::poll(&mut pfd, 1, 1000) };
            out = out.saturating_sub(self.take().len());
        }
    }

    /// The poll that wakes the queue's thread when entries come back.
    fn poll_sqe(&self) -> squeue::Entry128 {
        opcode::PollAdd::new(types::Fd(self.efd.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(HANDED_BACK)
            .into()
    }
}

/// A READ for a data thread, with its entry's buffers: nobody else touches them until the
/// data thread hands the entry back (the queue's thread neither reads them nor ends
/// before it has all its entries back).
struct DataJob {
    header: *mut UringReqHeader,
    payload: *mut [u8],
    index: usize,
    qid: usize,
    layout: super::request::Layout,
    back: Arc<Handback>,
}

// SAFETY: the buffers belong to the job alone while it is out (see `DataJob`).
unsafe impl Send for DataJob {}

/// A queue's way to the data threads.
struct DataThreads {
    jobs: mpsc::Sender<DataJob>,
    back: Arc<Handback>,
}

/// Start `count` data threads serving the jobs sent on the returned channel; they end
/// when every sender is gone.
fn start_data_threads<D: Dispatch>(
    fs: &Arc<D>,
    count: usize,
    payload_size: usize,
    stats: &Arc<Stats>,
) -> (mpsc::Sender<DataJob>, Vec<JoinHandle<()>>) {
    let (tx, rx) = mpsc::channel::<DataJob>();
    let rx = Arc::new(Mutex::new(rx));
    let mut handles = Vec::new();
    for n in 0..count {
        let (fs, rx, stats) = (fs.clone(), rx.clone(), stats.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("fuse-data-{n}"))
            .spawn(move || {
                let mut body = vec![0u8; payload_size];
                loop {
                    let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    };
                    // SAFETY: the job's buffers are its alone until handed back (DataJob).
                    let (header, payload) = unsafe { (&mut *job.header, &mut *job.payload) };
                    let filled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        fill(
                            &*fs, header, payload, job.qid, job.layout, &mut body, &stats,
                        )
                    }));
                    stats.data_thread_requests.fetch_add(1, Ordering::Relaxed);
                    match filled {
                        Ok(commit_id) => job.back.hand_back(job.index, commit_id),
                        Err(panic) => {
                            // The entry still goes back (its queue's thread waits for it),
                            // answered EIO; the panic then ends this thread, which the
                            // session reports when it is joined.
                            let commit_id = fail(header, &mut body);
                            job.back.hand_back(job.index, commit_id);
                            std::panic::resume_unwind(panic);
                        }
                    }
                }
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => warn!("cannot start data thread {n}: {e}"),
        }
    }
    (tx, handles)
}

/// The rings, built before INIT is answered.
pub(super) struct Rings {
    queues: Vec<Queue>,
    /// A spare ring for the REGISTER that makes the kernel give up the ring.
    spare: Ring,
}

impl Rings {
    pub(super) fn prepare(negotiated: &Negotiated, config: &SessionConfig) -> io::Result<Rings> {
        if config.fault == Some(UringFault::Setup) {
            return Err(io::Error::other("injected setup failure"));
        }
        let depth = config.queue_depth.clamp(1, 1024);
        let payload = negotiated.payload_size();
        let mut queues = Vec::new();
        for qid in 0..possible_cpus()? {
            // One more than the entries: the poll for entries handed back.
            let ring = Ring::builder().build(depth as u32 + 1)?;
            let entries = (0..depth).map(|_| Entry::new(payload)).collect();
            queues.push(Queue { qid, ring, entries });
        }
        let spare = Ring::builder().build(2)?;
        Ok(Rings { queues, spare })
    }

    /// Start one thread per queue, each registering its entries. True when every queue
    /// holds an entry (the kernel then starts the ring); otherwise the kernel was made to
    /// give up the ring.
    pub(super) fn start<D: Dispatch>(
        self,
        fs: &Arc<D>,
        device: &Arc<OwnedFd>,
        negotiated: &Negotiated,
        fault: Option<UringFault>,
        stats: &Arc<Stats>,
        end: &Arc<End>,
    ) -> (Vec<JoinHandle<()>>, bool) {
        let Rings { queues, mut spare } = self;
        let count = queues.len();
        let payload_size = queues
            .first()
            .and_then(|q| q.entries.first())
            .map_or(0, |e| e.payload.len());
        let (jobs, data_handles) = start_data_threads(fs, count, payload_size, stats);
        let (tx, rx) = mpsc::channel();
        let mut handles = Vec::new();
        let mut failed = false;
        for queue in queues {
            let qid = queue.qid;
            // Without its eventfd a queue serves its large reads itself.
            let data = match Handback::new() {
                Ok(back) if !data_handles.is_empty() => Some(DataThreads {
                    jobs: jobs.clone(),
                    back: Arc::new(back),
                }),
                Ok(_) => None,
                Err(e) => {
                    warn!("ring {qid}: no eventfd for the data threads: {e}");
                    None
                }
            };
            let fs = fs.clone();
            let device = device.clone();
            let stats = stats.clone();
            let end = end.clone();
            let tx = tx.clone();
            let layout = negotiated.layout();
            let spawned = std::thread::Builder::new()
                .name(format!("fuse-ring-{qid}"))
                .spawn(move || {
                    let mut queue = queue;
                    pin_to_cpu(queue.qid);
                    let mut registered = register(&mut queue, device.as_raw_fd(), fault);
                    let error = registered.error.take();
                    let _ = tx.send((queue.qid, registered.entries, error));
                    // Whatever the others did: entries the kernel holds are served (if every
                    // queue holds one, the ring carries requests even after a refusal).
                    if registered.entries > 0 {
                        let served = serve_queue(
                            &*fs,
                            &mut queue,
                            device.as_raw_fd(),
                            layout,
                            &stats,
                            registered,
                            data.as_ref(),
                        );
                        if let Err(e) = served {
                            end.failed(e);
                        }
                    }
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    warn!("cannot start the thread of ring {qid}: {e}");
                    failed = true;
                }
            }
        }
        drop(tx);
        // The data threads end once the queues' threads (which hold the other senders) do.
        drop(jobs);
        let mut reported = 0;
        while reported < handles.len() {
            match rx.recv_timeout(REGISTER_TIMEOUT) {
                Ok((qid, entries, error)) => {
                    reported += 1;
                    debug!("ring {qid}: {entries} entries registered");
                    if let Some(e) = error {
                        warn!("ring {qid}: {entries} entries registered, then: {e}");
                    }
                    // The kernel starts the ring once every queue holds an entry.
                    if entries == 0 {
                        failed = true;
                    }
                }
                Err(_) => {
                    warn!(
                        "{} of {count} rings did not report",
                        handles.len() - reported
                    );
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            match give_up_ring(&mut spare, device.as_raw_fd()) {
                Ok(()) => warn!("FUSE over io_uring not started: serving over /dev/fuse"),
                Err(e) => warn!("cannot make the kernel give up the ring: {e}"),
            }
        }
        handles.extend(data_handles);
        (handles, !failed)
    }
}

/// Keep a queue's thread on its CPU: the kernel queues a caller's request on the ring of
/// the caller's CPU, so its answer is made there too. Best effort.
fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays inside it for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return;
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            debug!(
                "cannot pin ring {cpu} to its CPU: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// What registering a queue did.
struct Registered {
    /// Entries the kernel holds.
    entries: usize,
    /// Completions that came with the registration: refusals (counted out of `entries`
    /// already) and, once the ring is ready, the first requests, to be served.
    early: Vec<(u64, i32)>,
    /// Why some entries were not registered.
    error: Option<io::Error>,
}

/// Register every entry of `queue`. A refusal completes at once (the kernel handles a
/// REGISTER while it is submitted), so what is not refused by now is registered.
fn register(queue: &mut Queue, fd: RawFd, fault: Option<UringFault>) -> Registered {
    let mut done = Registered {
        entries: 0,
        early: Vec::new(),
        error: None,
    };
    if fault == Some(UringFault::QueueFails { qid: queue.qid }) {
        done.error = Some(io::Error::other("injected queue failure"));
        return done;
    }
    let refuse = fault == Some(UringFault::RefuseRegister { qid: queue.qid });
    let req = UringCmdReq {
        qid: queue.qid as u16,
        ..UringCmdReq::default()
    };
    for (i, entry) in queue.entries.iter().enumerate() {
        // A malformed REGISTER (one iovec) for the injected refusal.
        let iovs = if refuse { 1 } else { 2 };
        let sqe = fuse_cmd(
            fd,
            abi::URING_CMD_REGISTER,
            &req,
            Some((entry.iov.as_ptr(), iovs)),
            i as u64,
        );
        // SAFETY: the entry's buffers live as long as the queue, i.e. the ring.
        if unsafe { queue.ring.submission().push(&sqe) }.is_err() {
            done.error = Some(io::Error::other("submission queue full"));
            break;
        }
    }
    let pushed = queue.ring.submission().len();
    match queue.ring.submit() {
        Ok(n) => done.entries = n,
        Err(e) => {
            done.error = Some(e);
            return done;
        }
    }
    debug_assert_eq!(done.entries, pushed, "every REGISTER submitted");
    for cqe in queue.ring.completion() {
        if cqe.result() < 0 {
            done.entries -= 1;
            done.error = Some(io::Error::from_raw_os_error(-cqe.result()));
        }
        // A request that arrived meanwhile is served first; a refusal is skipped there.
        done.early.push((cqe.user_data(), cqe.result()));
    }
    done
}

/// Make the kernel give up the ring: a REGISTER with one iovec is refused, and a refused
/// REGISTER clears the connection's io_uring mode and wakes the requests waiting for it.
fn give_up_ring(spare: &mut Ring, fd: RawFd) -> io::Result<()> {
    let iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }];
    let sqe = fuse_cmd(
        fd,
        abi::URING_CMD_REGISTER,
        &UringCmdReq::default(),
        Some((iov.as_ptr(), 1)),
        0,
    );
    // SAFETY: `iov` outlives the submission, which completes before submit_and_wait returns.
    unsafe { spare.submission().push(&sqe) }
        .map_err(|_| io::Error::other("submission queue full"))?;
    spare.submit_and_wait(1)?;
    match spare.completion().next() {
        Some(cqe) if cqe.result() < 0 => Ok(()),
        Some(_) => Err(io::Error::other("the kernel accepted a malformed REGISTER")),
        None => Err(io::Error::other("no completion")),
    }
}

/// Serve a registered queue until the connection ends (Ok), or the ring fails. With
/// `data`, large READs go to the data threads; all are back before this returns.
fn serve_queue<D: Dispatch>(
    fs: &D,
    queue: &mut Queue,
    fd: RawFd,
    layout: super::request::Layout,
    stats: &Stats,
    registered: Registered,
    data: Option<&DataThreads>,
) -> io::Result<()> {
    let mut out = 0;
    let served = serve_entries(fs, queue, fd, layout, stats, registered, data, &mut out);
    if let Some(d) = data {
        d.back.wait_for(out);
    }
    served
}

#[allow(clippy::too_many_arguments)]
fn serve_entries<D: Dispatch>(
    fs: &D,
    queue: &mut Queue,
    fd: RawFd,
    layout: super::request::Layout,
    stats: &Stats,
    registered: Registered,
    data: Option<&DataThreads>,
    out: &mut usize,
) -> io::Result<()> {
    let qid = queue.qid;
    let payload_size = queue.entries.first().map_or(0, |e| e.payload.len());
    // The reply is built here, then copied into the entry's payload: the request's names
    // and data are still borrowed from that payload while the handler runs.
    let mut body = vec![0u8; payload_size];
    let mut in_flight = registered.entries;
    let mut done = registered.early;
    // Refusals at REGISTER were counted out already.
    done.retain(|&(_, result)| result >= 0);
    let mut polling = false;
    while in_flight > 0 {
        if let Some(d) = data.filter(|_| !polling) {
            // SAFETY: the poll holds no buffer.
            polling = unsafe { queue.ring.submission().push(&d.back.poll_sqe()) }.is_ok();
        }
        if done.is_empty() {
            match queue.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    warn!("ring {qid}: {e}");
                    return Err(e);
                }
            }
            done.extend(queue.ring.completion().map(|c| (c.user_data(), c.result())));
        }
        for (user_data, result) in done.drain(..) {
            if user_data == HANDED_BACK {
                polling = false;
                for (i, commit_id) in data.map(|d| d.back.take()).unwrap_or_default() {
                    *out -= 1;
                    let sqe = commit(fd, qid, i, commit_id);
                    // SAFETY: the entry's buffers live as long as the ring.
                    if unsafe { queue.ring.submission().push(&sqe) }.is_err() {
                        warn!("ring {qid}: submission queue full");
                        in_flight -= 1;
                    }
                }
                continue;
            }
            let i = user_data as usize;
            if i >= queue.entries.len() {
                warn!("ring {qid}: completion for unknown entry {i}");
                continue;
            }
            if result < 0 {
                match -result {
                    // The connection ended (unmount or abort): every entry ends so.
                    libc::ENOTCONN | libc::ECONNABORTED | libc::ENODEV | libc::ECANCELED => {
                        return Ok(())
                    }
                    errno => {
                        warn!(
                            "ring {qid} entry {i}: {}",
                            io::Error::from_raw_os_error(errno)
                        );
                        in_flight -= 1;
                        continue;
                    }
                }
            }
            let entry = &mut queue.entries[i];
            if let Some(d) = data.filter(|_| for_data_thread(&entry.header)) {
                let job = DataJob {
                    header: &raw mut *entry.header,
                    payload: &raw mut *entry.payload,
                    index: i,
                    qid,
                    layout,
                    back: d.back.clone(),
                };
                if d.jobs.send(job).is_ok() {
                    *out += 1;
                    continue;
                }
                // The data threads are gone: served here.
            }
            let commit_id = fill(
                fs,
                &mut entry.header,
                &mut entry.payload,
                qid,
                layout,
                &mut body,
                stats,
            );
            let sqe = commit(fd, qid, i, commit_id);
            // SAFETY: the entry's buffers live as long as the ring.
            if unsafe { queue.ring.submission().push(&sqe) }.is_err() {
                // One command per entry, and room for as many SQEs and the poll.
                warn!("ring {qid}: submission queue full");
                in_flight -= 1;
            }
        }
    }
    Ok(())
}

/// Whether the request in `header` is a READ large enough for the data threads.
fn for_data_thread(header: &UringReqHeader) -> bool {
    let read = abi::InHeader::read_from_prefix(&header.in_out[..])
        .is_ok_and(|(h, _)| h.opcode == abi::opcode::READ);
    read && abi::ReadIn::read_from_prefix(&header.op_in[..])
        .is_ok_and(|(r, _)| r.size >= DATA_THREAD_READ)
}

/// Handle the request in an entry's buffers and write its answer there; returns the
/// request's commit id.
fn fill<D: Dispatch>(
    fs: &D,
    header: &mut UringReqHeader,
    payload: &mut [u8],
    qid: usize,
    layout: super::request::Layout,
    body: &mut [u8],
    stats: &Stats,
) -> u64 {
    let ent = header.ring_ent_in_out;
    let payload_len = (ent.payload_sz as usize).min(payload.len());
    let mut reply = Reply::new(body);
    let unique = match decode_ring(
        &header.in_out,
        &header.op_in,
        &payload[..payload_len],
        layout,
    ) {
        Ok(req) => {
            stats.uring_requests.fetch_add(1, Ordering::Relaxed);
            serve(fs, &req, &mut reply);
            req.unique()
        }
        Err(e) => {
            warn!("bad request from the kernel on ring {qid}: {e}");
            reply.error(libc::EIO);
            abi::InHeader::read_from_prefix(&header.in_out[..])
                .map_or(ent.commit_id, |(h, _)| h.unique)
        }
    };
    // Every request over the ring wants an answer (FORGET and INTERRUPT stay on /dev/fuse).
    if reply.answer() == super::Answer::None {
        reply.error(libc::EIO);
    }
    let out = super::reply::out_header(unique, &reply).expect("answered above");
    let n = reply.len();
    payload[..n].copy_from_slice(reply.body());
    header.in_out[..size_of::<abi::OutHeader>()].copy_from_slice(out.as_bytes());
    header.ring_ent_in_out = UringEntInOut {
        payload_sz: n as u32,
        ..ent
    };
    ent.commit_id
}

/// Answer the request in an entry's buffers with EIO (its handler panicked); returns its
/// commit id.
fn fail(header: &mut UringReqHeader, body: &mut [u8]) -> u64 {
    let ent = header.ring_ent_in_out;
    let unique = abi::InHeader::read_from_prefix(&header.in_out[..])
        .map_or(ent.commit_id, |(h, _)| h.unique);
    let mut reply = Reply::new(body);
    reply.error(libc::EIO);
    let out = super::reply::out_header(unique, &reply).expect("answered above");
    header.in_out[..size_of::<abi::OutHeader>()].copy_from_slice(out.as_bytes());
    header.ring_ent_in_out = UringEntInOut {
        payload_sz: 0,
        ..ent
    };
    ent.commit_id
}

/// The COMMIT_AND_FETCH of entry `i`'s answer.
fn commit(fd: RawFd, qid: usize, i: usize, commit_id: u64) -> squeue::Entry128 {
    let req = UringCmdReq {
        commit_id,
        qid: qid as u16,
        ..UringCmdReq::default()
    };
    fuse_cmd(fd, abi::URING_CMD_COMMIT_AND_FETCH, &req, None, i as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count() {
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0-3,5,7-8"), Some(7));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
    }

    #[test]
    fn register_sqe_carries_the_iovec_count_and_command() {
        let iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2];
        let req = UringCmdReq {
            commit_id: 77,
            qid: 3,
            ..UringCmdReq::default()
        };
        let sqe = fuse_cmd(9, abi::URING_CMD_REGISTER, &req, Some((iov.as_ptr(), 2)), 5);
        // SAFETY: as in fuse_cmd.
        let bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(bytes[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(i32::from_ne_bytes(bytes[4..8].try_into().unwrap()), 9);
        assert_eq!(
            u32::from_ne_bytes(bytes[8..12].try_into().unwrap()),
            abi::URING_CMD_REGISTER
        );
        assert_eq!(
            u64::from_ne_bytes(bytes[16..24].try_into().unwrap()),
            iov.as_ptr() as u64
        );
        assert_eq!(u32::from_ne_bytes(bytes[24..28].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(bytes[32..40].try_into().unwrap()), 5);
        // The command area starts at byte 48.
        let cmd = UringCmdReq::read_from_prefix(&bytes[48..]).unwrap().0;
        assert_eq!((cmd.commit_id, cmd.qid), (77, 3));
    }
}
