//! The mount's supervisor: a small process that holds the FUSE connection while a worker
//! process serves it, and starts a successor when the worker dies (kill -9, the OOM killer, a
//! panic), so that the mount outlives its daemon (docs/DESIGN.md, "Surviving the daemon").
//!
//! The supervisor opens /dev/fuse and forks the first worker, which mounts that descriptor,
//! answers INIT and reports the outcome (`Inheritance`) through a pipe once it serves. The
//! supervisor's copy of the descriptor keeps the connection alive when the worker dies: the
//! requests the worker had read stay queued in the kernel, unanswered. A successor inherits
//! the descriptor, mounts the core (roll-forward, then the intent log's replay: nothing
//! acknowledged is lost), serves the connection without INIT and asks the kernel to resend
//! what the dead worker had read. A serving worker killed from outside (SIGKILL: an
//! administrator, the OOM killer) is always replaced; five crashes or deaths before serving
//! within a minute end the restarts: the supervisor then fails every request with EIO until
//! the file system is unmounted (the intent log keeps what was acknowledged for the next
//! mount).
//!
//! The supervisor sets its own OOM score to the lowest, so the OOM killer picks the worker;
//! it forwards shutdown signals to the worker and exits with the worker's status once the
//! worker ends by itself.

use super::shutdown::shutdown_signals;
use dualfs::daemon::Startup;
use dualfs::session::Negotiated;
use log::{error, info, warn};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Crashes (or deaths before serving) within `DEATH_WINDOW` after which the supervisor
/// stops restarting.
const MAX_DEATHS: usize = 5;
const DEATH_WINDOW: Duration = Duration::from_secs(60);

/// What a successor needs of the connection it takes over.
pub(super) struct Inheritance {
    /// The connection (the supervisor's descriptor, inherited).
    pub device: OwnedFd,
    /// What INIT granted.
    pub negotiated: Negotiated,
    /// The mount's identity in the mount table (`KernelMount::identity`).
    pub identity: Option<[u32; 3]>,
    /// How many workers died before this one.
    pub incarnation: u32,
}

/// Which worker this process is.
pub(super) enum Role {
    /// The first: mount `device`, answer INIT, then report the outcome on `report`.
    First { device: OwnedFd, report: Reporter },
    /// A successor of a dead worker; `report` hears that it serves.
    Successor {
        inheritance: Inheritance,
        report: Reporter,
    },
}

/// The worker's end of its report pipe.
pub(super) struct Reporter(std::fs::File);

impl Reporter {
    /// The first worker serves: what a successor needs (INIT's outcome, the mount's identity).
    pub fn serving_first(mut self, negotiated: &Negotiated, identity: Option<[u32; 3]>) {
        let mut b = negotiated.to_bytes().to_vec();
        b.push(u8::from(identity.is_some()));
        for v in identity.unwrap_or_default() {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let _ = self.0.write_all(&b);
    }

    /// A successor serves.
    pub fn serving(mut self) {
        let _ = self.0.write_all(&[1]);
    }
}

const REPORT_LEN: usize = Negotiated::ENCODED + 1 + 12;

fn decode_report(b: &[u8; REPORT_LEN]) -> (Negotiated, Option<[u32; 3]>) {
    let negotiated = Negotiated::from_bytes(b[..Negotiated::ENCODED].try_into().unwrap());
    let at = Negotiated::ENCODED;
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let identity = (b[at] != 0).then(|| [u32_at(at + 1), u32_at(at + 5), u32_at(at + 9)]);
    (negotiated, identity)
}

/// Run the mount under a supervisor: `work` is the worker (it returns the worker's exit
/// status); `startup` goes to the first worker, which says when the mount is up.
pub(super) fn supervise(
    startup: Startup,
    mountpoint: &Path,
    work: impl Fn(Role, Option<Startup>) -> ExitCode,
) -> ExitCode {
    // Blocked before the first fork: a worker's death or a shutdown signal waits for
    // `sigwait` below. The workers unblock what is theirs.
    let mut signals = shutdown_signals();
    signals.add(Signal::SIGCHLD);
    if let Err(e) = signals.thread_block() {
        startup.fail(&format!("cannot block signals: {}", e.desc()));
        return ExitCode::from(1);
    }
    let device = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(f) => OwnedFd::from(f),
        Err(e) => {
            startup.fail(&format!("cannot open /dev/fuse: {e}"));
            return ExitCode::from(1);
        }
    };
    let oom_score = std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .unwrap_or(0);

    let (mut report, worker) = match start_worker(oom_score, |reporter| {
        let device = device.try_clone().expect("a descriptor for the worker");
        work(
            Role::First {
                device,
                report: reporter,
            },
            Some(startup),
        )
    }) {
        Ok(started) => started,
        Err(e) => {
            error!("cannot start the worker: {e}");
            return ExitCode::from(1);
        }
    };
    let mut bytes = [0u8; REPORT_LEN];
    if report.read_exact(&mut bytes).is_err() {
        // The first worker ended before it served: it reported why (or died trying).
        return match waitpid(worker, None) {
            Ok(WaitStatus::Exited(_, code)) => ExitCode::from(code as u8),
            _ => ExitCode::from(1),
        };
    }
    drop(report);
    // Once the mount is up (a mount refused says only why).
    lower_own_oom_score();
    let (negotiated, identity) = decode_report(&bytes);
    info!(
        "supervisor {}: worker {worker} serves {}",
        std::process::id(),
        mountpoint.display()
    );

    let mut deaths: VecDeque<Instant> = VecDeque::new();
    let mut worker = worker;
    let mut successor_report: Option<std::fs::File> = None;
    let mut incarnation = 0u32;
    loop {
        let signal = match signals.wait() {
            Ok(s) => s,
            Err(e) => {
                error!("supervisor: sigwait failed: {}", e.desc());
                continue;
            }
        };
        if signal != Signal::SIGCHLD {
            let _ = kill(worker, signal);
            continue;
        }
        let status = match waitpid(worker, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => continue,
            Ok(status) => status,
        };
        // Did the worker that ended serve? (A successor reports once it does.)
        let served = successor_report.take().is_none_or(|mut r| {
            let mut b = [0u8; 1];
            matches!(r.read(&mut b), Ok(1))
        });
        match status {
            WaitStatus::Exited(_, 0) => return ExitCode::SUCCESS,
            WaitStatus::Exited(_, code) if served => {
                // It ended its session itself (an abort, a failure) and said why.
                return ExitCode::from(code as u8);
            }
            WaitStatus::Exited(_, code) => {
                error!("worker {worker} exited with status {code} before it served")
            }
            WaitStatus::Signaled(_, sig, _) if served => error!("worker {worker} died of {sig:?}"),
            WaitStatus::Signaled(_, sig, _) => {
                error!("worker {worker} died of {sig:?} before it served")
            }
            other => {
                warn!("worker {worker}: {other:?}");
                continue;
            }
        }
        // A serving worker killed from outside (an administrator, the OOM killer) is simply
        // replaced; a crash (a panic's abort, a fault), or a death before serving (during
        // recovery), counts toward giving up: a worker that cannot serve is not restarted
        // forever.
        let killed_while_serving =
            served && matches!(status, WaitStatus::Signaled(_, Signal::SIGKILL, _));
        let now = Instant::now();
        if !killed_while_serving {
            deaths.push_back(now);
        }
        while deaths
            .front()
            .is_some_and(|&t| now.duration_since(t) > DEATH_WINDOW)
        {
            deaths.pop_front();
        }
        if deaths.len() >= MAX_DEATHS {
            return give_up(&device, &negotiated, mountpoint, &signals);
        }
        incarnation += 1;
        let started = start_worker(oom_score, |reporter| {
            let inheritance = Inheritance {
                device: device.try_clone().expect("a descriptor for the worker"),
                negotiated,
                identity,
                incarnation,
            };
            work(
                Role::Successor {
                    inheritance,
                    report: reporter,
                },
                None,
            )
        });
        match started {
            Ok((report, pid)) => {
                set_nonblocking(&report);
                successor_report = Some(report);
                worker = pid;
                info!(
                    "supervisor: worker {pid} takes over {} (restart {incarnation})",
                    mountpoint.display()
                );
            }
            Err(e) => {
                error!("supervisor: cannot start a successor: {e}");
                return give_up(&device, &negotiated, mountpoint, &signals);
            }
        }
    }
}

/// Fork a worker running `work` with the write end of a fresh report pipe; the parent gets
/// the read end and the worker's pid. The child never returns.
fn start_worker(
    oom_score: i32,
    work: impl FnOnce(Reporter) -> ExitCode,
) -> std::io::Result<(std::fs::File, Pid)> {
    let (read_end, write_end) = nix::unistd::pipe().map_err(std::io::Error::from)?;
    let supervisor = nix::unistd::getpid();
    // SAFETY: the supervisor is single-threaded (it starts no thread before or between its
    // forks), so the child may run anything.
    match unsafe { fork() }.map_err(std::io::Error::from)? {
        ForkResult::Child => {
            drop(read_end);
            // The supervisor's death (kill -9 of it) ends the worker too: the connection then
            // goes with both, as an unsupervised daemon's death ends it. Nothing acknowledged
            // is lost; the next mount replays the intent log.
            // SAFETY: prctl with plain integer arguments.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            if nix::unistd::getppid() != supervisor {
                std::process::exit(1);
            }
            // The worker is what the OOM killer should pick, as any process would be.
            let _ = std::fs::write("/proc/self/oom_score_adj", oom_score.to_string());
            let mut chld = SigSet::empty();
            chld.add(Signal::SIGCHLD);
            let _ = chld.thread_unblock();
            // A panic ends the worker at once, so that a successor takes over.
            let hook = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                hook(info);
                std::process::abort();
            }));
            let code = work(Reporter(std::fs::File::from(write_end)));
            log::logger().flush();
            std::process::exit(exit_status(code));
        }
        ForkResult::Parent { child } => {
            drop(write_end);
            Ok((std::fs::File::from(read_end), child))
        }
    }
}

/// The number behind an ExitCode (0 success, else the failure's).
fn exit_status(code: ExitCode) -> i32 {
    if code == ExitCode::SUCCESS {
        0
    } else {
        1
    }
}

fn lower_own_oom_score() {
    // Lowering needs CAP_SYS_RESOURCE, which containers often drop: then said, not warned.
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", "-1000") {
        info!(
            "supervisor: cannot lower its own OOM score ({e}): the OOM killer may pick it, \
             which ends the mount"
        );
    }
}

fn set_nonblocking(f: &std::fs::File) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}

/// Too many deaths: fail every request with EIO until unmounted; a shutdown signal unmounts.
fn give_up(
    device: &OwnedFd,
    negotiated: &Negotiated,
    mountpoint: &Path,
    signals: &SigSet,
) -> ExitCode {
    error!(
        "supervisor: the worker crashed or died before serving {MAX_DEATHS} times within {} \
         s: no more restarts. {} \
         fails every request with EIO until it is unmounted; nothing acknowledged is lost (the \
         intent log keeps it for the next mount)",
        DEATH_WINDOW.as_secs(),
        mountpoint.display()
    );
    let failing = match device.try_clone() {
        Ok(fd) => fd,
        Err(e) => {
            error!("supervisor: {e}");
            return ExitCode::from(1);
        }
    };
    let negotiated = *negotiated;
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let failer = {
        let ended = ended.clone();
        std::thread::spawn(move || {
            if let Err(e) = dualfs::session::fail_all(&failing, &negotiated) {
                error!("supervisor: failing requests: {e}");
            }
            // Said before the wake-up: the main thread's sigwait sees it once woken.
            ended.store(true, std::sync::atomic::Ordering::Release);
            let _ = kill(Pid::this(), Signal::SIGCHLD);
        })
    };
    let mountpoint = mountpoint.to_path_buf();
    let mut unmounting = false;
    while !ended.load(std::sync::atomic::Ordering::Acquire) {
        if let Ok(sig) = signals.wait() {
            if sig != Signal::SIGCHLD && !unmounting {
                unmounting = true;
                info!("supervisor: {sig:?}: detaching {}", mountpoint.display());
                let _ = nix::mount::umount2(&mountpoint, nix::mount::MntFlags::MNT_DETACH);
            }
        }
    }
    let _ = failer.join();
    ExitCode::from(1)
}
