//! The io_uring transport (Documentation/filesystems/fuse-io-uring.rst): one ring per
//! possible CPU, each served by one thread pinned to that CPU, each with `queue_depth`
//! entries. An entry is a header buffer (`fuse_uring_req_header`) and a payload buffer,
//! handed to the kernel once with REGISTER; afterwards every answer goes back with
//! COMMIT_AND_FETCH, which also waits for the entry's next request. The kernel queues a
//! request on the ring of the CPU its caller runs on.
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
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
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
    /// The request being answered (its `commit_id`).
    commit_id: u64,
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
            commit_id: 0,
        }
    }
}

struct Queue {
    qid: usize,
    ring: Ring,
    entries: Vec<Entry>,
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
            let ring = Ring::builder().build(depth as u32)?;
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
        let (tx, rx) = mpsc::channel();
        let mut handles = Vec::new();
        let mut failed = false;
        for queue in queues {
            let qid = queue.qid;
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

/// Serve a registered queue until the connection ends (Ok), or the ring fails.
fn serve_queue<D: Dispatch>(
    fs: &D,
    queue: &mut Queue,
    fd: RawFd,
    layout: super::request::Layout,
    stats: &Stats,
    registered: Registered,
) -> io::Result<()> {
    let payload_size = queue.entries.first().map_or(0, |e| e.payload.len());
    // The reply is built here, then copied into the entry's payload: the request's names
    // and data are still borrowed from that payload while the handler runs.
    let mut body = vec![0u8; payload_size];
    let mut in_flight = registered.entries;
    let mut done = registered.early;
    // Refusals at REGISTER were counted out already.
    done.retain(|&(_, result)| result >= 0);
    while in_flight > 0 {
        if done.is_empty() {
            match queue.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    warn!("ring {}: {e}", queue.qid);
                    return Err(e);
                }
            }
            done.extend(queue.ring.completion().map(|c| (c.user_data(), c.result())));
        }
        for (user_data, result) in done.drain(..) {
            let i = user_data as usize;
            if i >= queue.entries.len() {
                warn!("ring {}: completion for unknown entry {i}", queue.qid);
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
                            "ring {} entry {i}: {}",
                            queue.qid,
                            io::Error::from_raw_os_error(errno)
                        );
                        in_flight -= 1;
                        continue;
                    }
                }
            }
            let sqe = answer(fs, queue, i, fd, layout, &mut body, stats);
            // SAFETY: the entry's buffers live as long as the ring.
            if unsafe { queue.ring.submission().push(&sqe) }.is_err() {
                // One command per entry and as many SQEs as entries: cannot be full.
                warn!("ring {}: submission queue full", queue.qid);
                in_flight -= 1;
            }
        }
    }
    Ok(())
}

/// Handle the request in entry `i` and build its COMMIT_AND_FETCH.
fn answer<D: Dispatch>(
    fs: &D,
    queue: &mut Queue,
    i: usize,
    fd: RawFd,
    layout: super::request::Layout,
    body: &mut [u8],
    stats: &Stats,
) -> squeue::Entry128 {
    let qid = queue.qid;
    let entry = &mut queue.entries[i];
    let ent = entry.header.ring_ent_in_out;
    entry.commit_id = ent.commit_id;
    let payload_len = (ent.payload_sz as usize).min(entry.payload.len());
    let mut reply = Reply::new(body);
    let unique = match decode_ring(
        &entry.header.in_out,
        &entry.header.op_in,
        &entry.payload[..payload_len],
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
            abi::InHeader::read_from_prefix(&entry.header.in_out[..])
                .map_or(ent.commit_id, |(h, _)| h.unique)
        }
    };
    // Every request over the ring wants an answer (FORGET and INTERRUPT stay on /dev/fuse).
    if reply.answer() == super::Answer::None {
        reply.error(libc::EIO);
    }
    let out = super::reply::out_header(unique, &reply).expect("answered above");
    let n = reply.len();
    entry.payload[..n].copy_from_slice(reply.body());
    entry.header.in_out[..size_of::<abi::OutHeader>()].copy_from_slice(out.as_bytes());
    entry.header.ring_ent_in_out = UringEntInOut {
        payload_sz: n as u32,
        ..ent
    };
    let req = UringCmdReq {
        commit_id: entry.commit_id,
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
