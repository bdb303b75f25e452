//! How the program fails: a usage error (exit 2) or a failure (exit 1), each one line.

use dualfs::FsError;
use std::fmt;
use std::io;
use std::process::ExitCode;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// The command line is wrong: exit code 2, like clap's own errors.
    Usage(String),
    /// The command line is fine but the job could not be done: exit code 1.
    Failure(String),
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError::Usage(message.into())
    }
    pub fn failure(message: impl Into<String>) -> CliError {
        CliError::Failure(message.into())
    }
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Usage(_) => ExitCode::from(2),
            CliError::Failure(_) => ExitCode::from(1),
        }
    }
    pub fn message(&self) -> &str {
        match self {
            CliError::Usage(m) | CliError::Failure(m) => m,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for CliError {}

/// An I/O error as a person reads it: "No such file or directory", without "(os error 2)".
pub fn describe_io(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(code) => describe_errno(code),
        None => err.to_string(),
    }
}

pub fn describe_errno(code: i32) -> String {
    nix::errno::Errno::from_raw(code).desc().to_string()
}

pub fn describe_fs_error(err: &FsError) -> String {
    match err {
        FsError::Errno(code) => describe_errno(*code),
        FsError::Io(e) => describe_io(e),
        FsError::Corrupt { .. } | FsError::Refused(_) => err.to_string(),
    }
}

/// Print the one line of a failure on stderr.
pub fn print_error(message: &str) {
    // A message from the core or the kernel could span lines; keep it to one.
    let one_line = message.replace('\n', " ");
    eprintln!("dualfs: {one_line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_without_os_error_codes() {
        let e = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(describe_io(&e), "No such file or directory");
        let custom = io::Error::other("plain words");
        assert_eq!(describe_io(&custom), "plain words");
        assert_eq!(
            describe_fs_error(&FsError::Errno(libc::EBUSY)),
            "Device or resource busy"
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(CliError::usage("x").exit_code(), ExitCode::from(2));
        assert_eq!(CliError::failure("x").exit_code(), ExitCode::from(1));
    }
}
