//! The protocol of a mount's control socket: what the `dualfs-cleaner` daemon and `dualfs
//! sync`, `umount`, `remount` and `info` ask a running mount (the client, here), and what the
//! mount program answers (its server is `cli/control_server.rs`).
//!
//! The mount daemon listens on a Unix stream socket, `/run/dualfs/<escaped mount point>.sock`
//! (beside its pid file), mode 0600 and owned by the user who mounted. It serves only peers
//! whose credentials (SO_PEERCRED) are root's or the mount owner's.
//!
//! Protocol: one JSON object per line each way, strictly request then response, any number of
//! requests per connection. A request is `{"op": "...", ...}` ([`Request`]); the answer is
//! `{"result": "...", ...}` ([`Response`]), `{"result": "error", "errno": N, "message": "..."}`
//! when the request failed. A connection that sent `hello` with `takeover: true` is a cleaner
//! daemon: while it stays connected the mount does no threshold cleaning of its own (it still
//! cleans in the write path when clean segments run short, so writes never wait on the daemon).
//!
//! ```text
//! -> {"op":"status"}
//! <- {"result":"status","segments":192,"clean":40,...}
//! -> {"op":"clean_pass","policy":"cost-benefit","max_segments":4}
//! <- {"result":"cleaned","cleaned":[17,52],"refused":[],...}
//! -> {"op":"sync"}
//! <- {"result":"synced"}
//! -> {"op":"remount","options":["ro,nosuid,nodev,relatime,remount"]}
//! <- {"result":"remounted","read_only":true}
//! ```

use crate::fs::clean::policy::{Policy, ThresholdUpdate, Thresholds};
use crate::run_dir::run_file_path;
use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Version of this protocol, reported by `hello`.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest request line a server reads (a `clean` request naming every segment of a big log
/// is the longest legitimate one).
pub const MAX_LINE: usize = 16 << 20;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Say who is calling; `takeover: true` makes the mount leave threshold cleaning to the
    /// caller for as long as this connection lasts.
    Hello {
        client: String,
        takeover: bool,
    },
    /// Clean and dirty segments, utilization, what cleaning did so far.
    Status,
    /// The segment usage table.
    Usage,
    /// Clean exactly these segments (those that cannot be cleaned are listed as refused).
    Clean {
        segments: Vec<u64>,
    },
    /// One pass: up to `max_segments` chosen by `policy`.
    CleanPass {
        policy: Policy,
        max_segments: u64,
    },
    GetThresholds,
    SetThresholds {
        update: ThresholdUpdate,
    },
    /// Make everything written before this request durable (`dualfs sync`): one log commit
    /// of everything dirty, with the data device flushed before it. Answered `synced`.
    Sync,
    /// Remount (`mount -o remount,ro MOUNTPOINT`): the `-o` lists as mount(8) passes them,
    /// for the mount program to interpret. A mount changes between read-write and read-only
    /// and refuses to change anything else. Answered `remounted`.
    Remount {
        options: Vec<String>,
    },
}

/// Who serves a mount (`Client::daemon`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DaemonInfo {
    pub pid: u32,
    pub transport: Option<String>,
    pub restarts: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    Hello {
        version: u32,
        pid: u32,
        mountpoint: String,
        /// The FUSE transport the mount serves over ("uring" or "dev"); absent from older
        /// daemons, and while the session is not serving yet.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        transport: Option<String>,
        /// How many times a supervisor restarted the mount's daemon (`pid` is the one serving
        /// now); absent from older daemons.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        restarts: Option<u32>,
    },
    Status(Status),
    Usage(UsageTable),
    Cleaned(PassReport),
    Thresholds(Thresholds),
    Synced,
    Remounted {
        read_only: bool,
    },
    Error {
        errno: i32,
        message: String,
    },
}

pub use crate::fs::clean::report::{PassReport, SegmentInfo, Status, UsageTable};

/// The control socket of the mount on `mountpoint` (a canonical path).
pub fn socket_path(mountpoint: &Path) -> PathBuf {
    run_file_path(mountpoint, "sock")
}

/// Encode one message as a line.
pub fn encode_line<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec(msg).expect("protocol types always serialize");
    v.push(b'\n');
    v
}

/// A connection to a mount's control socket.
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    /// Connect to the mount on `mountpoint` (resolved to its canonical path first).
    pub fn connect(mountpoint: &Path) -> io::Result<Client> {
        let canonical = std::fs::canonicalize(mountpoint)?;
        Client::connect_socket(&socket_path(&canonical))
    }

    pub fn connect_socket(path: &Path) -> io::Result<Client> {
        let stream = UnixStream::connect(path)?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    pub fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.writer.set_read_timeout(t)?;
        self.writer.set_write_timeout(t)
    }

    /// Send a request and read its response. An `Error` response comes back as `Ok`.
    pub fn call(&mut self, req: &Request) -> io::Result<Response> {
        self.writer.write_all(&encode_line(req))?;
        let mut line = String::new();
        let n = self.reader.read_line(&mut line)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the mount closed the control connection",
            ));
        }
        serde_json::from_str(&line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad response from the mount: {e}"),
            )
        })
    }

    /// `call`, turning an `Error` response into an `io::Error` with its errno.
    pub fn call_ok(&mut self, req: &Request) -> io::Result<Response> {
        match self.call(req)? {
            Response::Error { errno, message } => Err(io::Error::new(
                io::Error::from_raw_os_error(errno).kind(),
                message,
            )),
            r => Ok(r),
        }
    }

    pub fn status(&mut self) -> io::Result<Status> {
        match self.call_ok(&Request::Status)? {
            Response::Status(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    pub fn usage(&mut self) -> io::Result<UsageTable> {
        match self.call_ok(&Request::Usage)? {
            Response::Usage(u) => Ok(u),
            other => Err(unexpected(&other)),
        }
    }

    pub fn clean(&mut self, segments: Vec<u64>) -> io::Result<PassReport> {
        match self.call_ok(&Request::Clean { segments })? {
            Response::Cleaned(r) => Ok(r),
            other => Err(unexpected(&other)),
        }
    }

    pub fn clean_pass(&mut self, policy: Policy, max_segments: u64) -> io::Result<PassReport> {
        match self.call_ok(&Request::CleanPass {
            policy,
            max_segments,
        })? {
            Response::Cleaned(r) => Ok(r),
            other => Err(unexpected(&other)),
        }
    }

    pub fn thresholds(&mut self) -> io::Result<Thresholds> {
        match self.call_ok(&Request::GetThresholds)? {
            Response::Thresholds(t) => Ok(t),
            other => Err(unexpected(&other)),
        }
    }

    pub fn set_thresholds(&mut self, update: ThresholdUpdate) -> io::Result<Thresholds> {
        match self.call_ok(&Request::SetThresholds { update })? {
            Response::Thresholds(t) => Ok(t),
            other => Err(unexpected(&other)),
        }
    }

    /// Everything written to the mount before this call is durable when it returns Ok.
    pub fn sync(&mut self) -> io::Result<()> {
        match self.call_ok(&Request::Sync)? {
            Response::Synced => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Remount with these `-o` lists; whether the mount is read-only now.
    pub fn remount(&mut self, options: Vec<String>) -> io::Result<bool> {
        match self.call_ok(&Request::Remount { options })? {
            Response::Remounted { read_only } => Ok(read_only),
            other => Err(unexpected(&other)),
        }
    }

    pub fn hello(&mut self, client: &str, takeover: bool) -> io::Result<(u32, u32)> {
        match self.call_ok(&Request::Hello {
            client: client.into(),
            takeover,
        })? {
            Response::Hello { version, pid, .. } => Ok((version, pid)),
            other => Err(unexpected(&other)),
        }
    }

    /// Who serves the mount: the daemon's pid, its FUSE transport and restarts (`None` from
    /// a daemon that does not say).
    pub fn daemon(&mut self, client: &str) -> io::Result<DaemonInfo> {
        match self.call_ok(&Request::Hello {
            client: client.into(),
            takeover: false,
        })? {
            Response::Hello {
                pid,
                transport,
                restarts,
                ..
            } => Ok(DaemonInfo {
                pid,
                transport,
                restarts,
            }),
            other => Err(unexpected(&other)),
        }
    }
}

fn unexpected(r: &Response) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected response from the mount: {r:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_json_lines() {
        let r = Request::CleanPass {
            policy: Policy::Greedy,
            max_segments: 4,
        };
        let line = encode_line(&r);
        assert_eq!(
            std::str::from_utf8(&line).unwrap(),
            "{\"op\":\"clean_pass\",\"policy\":\"greedy\",\"max_segments\":4}\n"
        );
        let back: Request = serde_json::from_slice(&line).unwrap();
        assert_eq!(back, r);
        let s: Request = serde_json::from_str("{\"op\":\"status\"}").unwrap();
        assert_eq!(s, Request::Status);
        assert_eq!(encode_line(&Request::Sync), b"{\"op\":\"sync\"}\n");
        assert_eq!(encode_line(&Response::Synced), b"{\"result\":\"synced\"}\n");
        let e = Response::Error {
            errno: 1,
            message: "no".into(),
        };
        let j = String::from_utf8(encode_line(&e)).unwrap();
        assert!(j.starts_with("{\"result\":\"error\",\"errno\":1"), "{j}");
    }

    #[test]
    fn socket_beside_the_pid_file() {
        assert_eq!(
            socket_path(Path::new("/mnt/x")),
            PathBuf::from("/run/dualfs/mnt-x.sock")
        );
        let long = format!("/{}", "a".repeat(400));
        let p = socket_path(Path::new(&long));
        assert!(p.file_name().unwrap().len() <= 255);
        assert!(p.to_str().unwrap().ends_with(".sock"));
    }
}
