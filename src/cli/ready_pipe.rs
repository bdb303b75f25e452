//! Detaching from the terminal only once the mount is ready.
//!
//! The parent forks (before any thread exists: the core starts threads when it mounts) and
//! waits on a pipe. The child becomes the daemon: it mounts, then writes "OK" or the reason
//! it failed. So `dualfs mount` returns only when the file system can be used, and its exit
//! code and message tell whether it can.

use super::error::{describe_io, print_error};
use log::error;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::ExitCode;

const READY: &[u8] = b"OK";
const FAILED: &[u8] = b"E:";

/// How the mounting process tells whoever started it that the mount is up, or why not.
pub enum Startup {
    /// `--foreground`: messages go to stderr.
    Foreground,
    /// The daemon child: messages go to the waiting parent.
    Daemon { pipe: File },
}

impl Startup {
    /// The mount is ready to use.
    pub fn ready(self) {
        if let Startup::Daemon { mut pipe } = self {
            // The parent may be gone (killed); the daemon carries on regardless.
            let _ = pipe.write_all(READY);
        }
    }

    /// The mount failed; nothing is mounted.
    pub fn fail(self, message: &str) {
        match self {
            Startup::Foreground => print_error(message),
            Startup::Daemon { mut pipe } => {
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
    /// In the parent, once the child reported: the exit code of `dualfs mount`.
    Parent(ExitCode),
    /// In the child, now a daemon in its own session with "/" as its working directory and
    /// stdio on /dev/null or the log file.
    Child(Startup),
}

/// Fork; must be called while the process has a single thread.
pub fn detach(log_file: Option<File>) -> Result<Detached, String> {
    let (read_end, write_end) =
        nix::unistd::pipe().map_err(|e| format!("cannot create a pipe: {}", e.desc()))?;
    // SAFETY: the process is single-threaded here (no thread is started before this call),
    // so the child may run arbitrary code.
    match unsafe { fork() } {
        Err(e) => Err(format!("cannot fork: {}", e.desc())),
        Ok(ForkResult::Parent { child }) => {
            drop(write_end);
            Ok(Detached::Parent(wait_for_child(
                File::from(read_end),
                child,
            )))
        }
        Ok(ForkResult::Child) => {
            drop(read_end);
            let pipe = File::from(write_end);
            match become_daemon(log_file) {
                Ok(()) => Ok(Detached::Child(Startup::Daemon { pipe })),
                Err(message) => {
                    Startup::Daemon { pipe }.fail(&message);
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
fn wait_for_child(mut pipe: File, child: Pid) -> ExitCode {
    let mut report = Vec::new();
    // Read until the child closes its end: after "OK", or after the reason it failed.
    let read = pipe.read_to_end(&mut report);
    if read.is_ok() && report == READY {
        return ExitCode::SUCCESS;
    }
    if let Some(message) = report.strip_prefix(FAILED) {
        print_error(&String::from_utf8_lossy(message));
        // The child exits right after reporting; reap it.
        let _ = waitpid(child, None);
        return ExitCode::from(1);
    }
    let how = match waitpid(child, None) {
        Ok(WaitStatus::Exited(_, code)) => format!("exited with status {code}"),
        Ok(WaitStatus::Signaled(_, signal, _)) => format!("was killed by {signal}"),
        _ => "vanished".to_string(),
    };
    print_error(&format!(
        "the mount process {how} before the file system was ready"
    ));
    ExitCode::from(1)
}
