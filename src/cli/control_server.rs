//! The mount's side of the control channel: a Unix socket served by one thread per
//! connection (the protocol is in `dualfs::control_protocol`). Only root and the mount owner
//! get answers. It lives with the program, not in the library: it only calls the core's
//! plain API (`Fs::cleaner_status`, `clean_pass`, `attach_daemon`, ...).

use super::remount::{RemountRefused, Remounter};
use dualfs::control_protocol::{
    encode_line, PassReport, Request, Response, MAX_LINE, PROTOCOL_VERSION,
};
use dualfs::fs::Fs;
use dualfs::session::Transport;
use dualfs::FsError;
use parking_lot::Mutex;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

/// The listening socket and its connections; `stop` (or drop) ends them all.
pub struct ControlServer {
    path: PathBuf,
    listener: Arc<UnixListener>,
    stopping: Arc<AtomicBool>,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    /// Streams of open connections (clones, to shut them down) and their threads.
    conns: Mutex<Vec<(UnixStream, JoinHandle<()>)>>,
}

/// Who is on the other end of a connection (SO_PEERCRED).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

pub fn peer_of(s: &UnixStream) -> io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of the length given.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Peer {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

impl ControlServer {
    /// Listen on `path` (replacing a stale socket there), mode 0600, owned by this process's
    /// user; serve root and `owner`. Remounts go to `remounter` (none: refused).
    pub fn start(
        fs: Arc<Fs>,
        path: &Path,
        owner: u32,
        mountpoint: &Path,
        remounter: Option<Arc<Remounter>>,
        transport: Arc<OnceLock<Transport>>,
    ) -> io::Result<ControlServer> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
                if UnixStream::connect(path).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("{} is served by another process", path.display()),
                    ));
                }
                std::fs::remove_file(path)?;
            }
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ))
            }
            Err(_) => {}
        }
        // Bind with a umask that leaves the socket 0600 from its first moment.
        // SAFETY: umask only changes this process's file creation mask.
        let old = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(path);
        unsafe { libc::umask(old) };
        let listener = Arc::new(bound?);
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            conns: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let (listener, stopping, shared) = (listener.clone(), stopping.clone(), shared.clone());
            let mountpoint = mountpoint.display().to_string();
            std::thread::Builder::new()
                .name("dualfs-control".into())
                .spawn(move || {
                    let serving = Serving {
                        fs,
                        remounter,
                        owner,
                        mountpoint,
                        transport,
                    };
                    accept_loop(serving, listener, stopping, shared)
                })?
        };
        Ok(ControlServer {
            path: path.to_path_buf(),
            listener,
            stopping,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Stop accepting, end every connection (a request being served finishes first) and
    /// remove the socket.
    pub fn stop(&mut self) {
        if self.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        // SAFETY: shutdown on a listening socket wakes the thread blocked in accept (EINVAL).
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        let conns = std::mem::take(&mut *self.shared.conns.lock());
        for (s, _) in &conns {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for (_, h) in conns {
            let _ = h.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What every connection serves.
struct Serving {
    fs: Arc<Fs>,
    remounter: Option<Arc<Remounter>>,
    owner: u32,
    mountpoint: String,
    /// The FUSE transport, once the session serves.
    transport: Arc<OnceLock<Transport>>,
}

fn accept_loop(
    serving: Serving,
    listener: Arc<UnixListener>,
    stopping: Arc<AtomicBool>,
    shared: Arc<Shared>,
) {
    let serving = Arc::new(serving);
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) if stopping.load(Ordering::Acquire) => return,
            Err(e) => {
                log::warn!("control socket: accept failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        if stopping.load(Ordering::Acquire) {
            return;
        }
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        let serving = serving.clone();
        let spawned = std::thread::Builder::new()
            .name("dualfs-control-conn".into())
            .spawn(move || {
                if let Err(e) = serve_connection(&serving, stream) {
                    log::debug!("control connection ended: {e}");
                }
            });
        if let Ok(h) = spawned {
            let mut conns = shared.conns.lock();
            conns.retain(|(_, h)| !h.is_finished());
            conns.push((clone, h));
        }
    }
}

fn serve_connection(serving: &Serving, stream: UnixStream) -> io::Result<()> {
    let (fs, owner, mountpoint) = (&serving.fs, serving.owner, &serving.mountpoint);
    let peer = peer_of(&stream)?;
    let mut writer = stream.try_clone()?;
    if peer.uid != 0 && peer.uid != owner {
        log::warn!(
            "control socket: refused uid {} (pid {}): only root and the mount owner (uid \
             {owner}) may use it",
            peer.uid,
            peer.pid
        );
        let refusal = Response::Error {
            errno: libc::EACCES,
            message: format!(
                "permission denied: only root and the owner of this mount (uid {owner}) may \
                 control it"
            ),
        };
        writer.write_all(&encode_line(&refusal))?;
        return Ok(());
    }
    let mut reader = BufReader::new(stream);
    let mut daemon = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.len() > MAX_LINE {
            let r = Response::Error {
                errno: libc::E2BIG,
                message: "request too long".into(),
            };
            writer.write_all(&encode_line(&r))?;
            return Ok(());
        }
        let response = match serde_json::from_slice::<Request>(&line) {
            Err(e) => Response::Error {
                errno: libc::EINVAL,
                message: format!("bad request: {e}"),
            },
            Ok(Request::Hello { client, takeover }) => {
                if takeover && daemon.is_none() {
                    log::info!(
                        "cleaner {client:?} (pid {}) took over background cleaning",
                        peer.pid
                    );
                    daemon = Some(fs.attach_daemon());
                }
                Response::Hello {
                    version: PROTOCOL_VERSION,
                    pid: std::process::id(),
                    mountpoint: mountpoint.to_string(),
                    transport: serving.transport.get().map(|t| t.to_string()),
                    restarts: Some(serving.fs.restarts()),
                }
            }
            Ok(Request::Remount { options }) => remount(serving.remounter.as_deref(), &options),
            Ok(req) => handle(fs, req),
        };
        writer.write_all(&encode_line(&response))?;
    }
}

/// A remount: the daemon's own mount and its file system change together.
fn remount(remounter: Option<&Remounter>, options: &[String]) -> Response {
    let Some(remounter) = remounter else {
        return Response::Error {
            errno: libc::EPERM,
            message: "this mount cannot be remounted: it was made through fusermount".into(),
        };
    };
    match remounter.remount(options) {
        Ok(read_only) => Response::Remounted { read_only },
        Err(RemountRefused { errno, message }) => Response::Error { errno, message },
    }
}

fn error(e: FsError) -> Response {
    Response::Error {
        errno: e.errno(),
        message: e.to_string(),
    }
}

fn cleaned(r: dualfs::Result<PassReport>) -> Response {
    match r {
        Ok(r) => Response::Cleaned(r),
        Err(e) => error(e),
    }
}

/// Answer one request.
pub fn handle(fs: &Fs, req: Request) -> Response {
    let segments = fs.superblock().segments;
    match req {
        Request::Hello { .. } => Response::Error {
            errno: libc::EINVAL,
            message: "hello is answered by the connection".into(),
        },
        Request::Status => Response::Status(fs.cleaner_status()),
        Request::Usage => Response::Usage(fs.usage_table()),
        Request::Clean { segments: list } => {
            if list.len() as u64 > segments {
                return Response::Error {
                    errno: libc::EINVAL,
                    message: format!("{} segments asked for, the log has {segments}", list.len()),
                };
            }
            cleaned(fs.clean_segments(&list))
        }
        Request::CleanPass {
            policy,
            max_segments,
        } => cleaned(fs.clean_pass(policy, max_segments.min(segments) as usize)),
        Request::GetThresholds => Response::Thresholds(fs.thresholds()),
        Request::Remount { .. } => Response::Error {
            errno: libc::EINVAL,
            message: "a remount is answered by the connection".into(),
        },
        Request::Sync => match fs.commit() {
            Ok(()) => Response::Synced,
            Err(e) => error(e),
        },
        Request::SetThresholds { update } => match fs.set_thresholds(&update) {
            Ok(t) => Response::Thresholds(t),
            Err(message) => Response::Error {
                errno: libc::EINVAL,
                message,
            },
        },
    }
}
