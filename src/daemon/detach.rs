//! Detaching from the terminal only once the daemon is ready.
//!
//! The parent forks (before any thread exists: the core starts threads when it mounts) and
//! waits on a pipe. The child becomes the daemon: it sets itself up (mounts, or records its
//! pid), then writes "OK" or the reason it failed. So the command returns only when what it
//! started can be used, and its exit code and message tell whether it can.

use super::Daemon;
use log::error;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::ExitCode;

const READY: &[u8] = b"OK";
const FAILED: &[u8] = b"E:";

/// How a starting daemon tells whoever started it that it is ready, or why not.
pub struct Startup {
    daemon: Daemon,
    /// The waiting parent's pipe; None in the foreground, where messages go to stderr.
    pipe: Option<File>,
}

impl Startup {
    /// Staying in the foreground (`--foreground`): nobody waits.
    pub fn foreground(daemon: Daemon) -> Startup {
        Startup { daemon, pipe: None }
    }

    /// The daemon is ready.
    pub fn ready(self) {
        if let Some(mut pipe) = self.pipe {
            // The parent may be gone (killed); the daemon carries on regardless.
            let _ = pipe.write_all(READY);
        }
    }

    /// The daemon failed to start and is about to exit.
    pub fn fail(self, message: &str) {
        match self.pipe {
            None => print_error(self.daemon, message),
            Some(mut pipe) => {
                error!("{message}");
                let mut report = FAILED.to_vec();
                report.extend_from_slice(message.as_bytes());
                let _ = pipe.write_all(&report);
            }
        }
    }
}

/// What `detach` returns in each process.
pub enum Detached {
    /// In the parent, once the child reported: the command's exit code.
    Parent(ExitCode),
    /// In the child, now a daemon in its own session with "/" as its working directory and
    /// stdio on /dev/null, or stdout and stderr on `log_file`.
    Child(Startup),
}

/// Fork; must be called while the process has a single thread.
pub fn detach(daemon: Daemon, log_file: Option<File>) -> Result<Detached, String> {
    let (read_end, write_end) =
        nix::unistd::pipe().map_err(|e| format!("cannot create a pipe: {}", e.desc()))?;
    // SAFETY: the process is single-threaded here (no thread is started before this call),
    // so the child may run arbitrary code.
    match unsafe { fork() } {
        Err(e) => Err(format!("cannot fork: {}", e.desc())),
        Ok(ForkResult::Parent { child }) => {
            drop(write_end);
            Ok(Detached::Parent(wait_for_child(
                daemon,
                File::from(read_end),
                child,
            )))
        }
        Ok(ForkResult::Child) => {
            drop(read_end);
            let startup = Startup {
                daemon,
                pipe: Some(File::from(write_end)),
            };
            match become_daemon(log_file) {
                Ok(()) => Ok(Detached::Child(startup)),
                Err(message) => {
                    startup.fail(&message);
                    std::process::exit(1);
                }
            }
        }
    }
}

fn become_daemon(log_file: Option<File>) -> Result<(), String> {
    nix::unistd::setsid().map_err(|e| format!("setsid failed: {}", e.desc()))?;
    nix::unistd::chdir("/").map_err(|e| format!("cannot change to /: {}", e.desc()))?;
    let null = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("cannot open /dev/null: {}", describe_io(&e)))?;
    let output: OwnedFd = match log_file {
        Some(file) => file.into(),
        None => null
            .try_clone()
            .map_err(|e| format!("cannot duplicate /dev/null: {}", describe_io(&e)))?
            .into(),
    };
    let redirect = nix::unistd::dup2_stdin(&null)
        .and_then(|()| nix::unistd::dup2_stdout(&output))
        .and_then(|()| nix::unistd::dup2_stderr(&output));
    redirect.map_err(|e| format!("cannot redirect standard streams: {}", e.desc()))
}

/// The parent's side: relay the child's verdict.
fn wait_for_child(daemon: Daemon, mut pipe: File, child: Pid) -> ExitCode {
    let mut report = Vec::new();
    // Read until the child closes its end: after "OK", or after the reason it failed.
    let read = pipe.read_to_end(&mut report);
    if read.is_ok() && report == READY {
        return ExitCode::SUCCESS;
    }
    if let Some(message) = report.strip_prefix(FAILED) {
        print_error(daemon, &String::from_utf8_lossy(message));
        // The child exits right after reporting; reap it.
        let _ = waitpid(child, None);
        return ExitCode::from(1);
    }
    let how = match waitpid(child, None) {
        Ok(WaitStatus::Exited(_, code)) => format!("exited with status {code}"),
        Ok(WaitStatus::Signaled(_, signal, _)) => format!("was killed by {signal}"),
        _ => "vanished".to_string(),
    };
    let (process, what) = match daemon {
        Daemon::Mount => ("mount", "the file system"),
        Daemon::Cleaner => ("cleaner", "it"),
    };
    print_error(
        daemon,
        &format!("the {process} process {how} before {what} was ready"),
    );
    ExitCode::from(1)
}

fn print_error(daemon: Daemon, message: &str) {
    let program = match daemon {
        Daemon::Mount => "dualfs",
        Daemon::Cleaner => "dualfs-cleaner",
    };
    // A message from the core or the kernel could span lines; keep it to one.
    let one_line = message.replace('\n', " ");
    eprintln!("{program}: {one_line}");
}

/// An I/O error without Rust's "(os error N)".
fn describe_io(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_string(),
        None => e.to_string(),
    }
}
