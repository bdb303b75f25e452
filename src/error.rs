//! The one error type of the core. Every failure a caller can see maps to an errno.

use std::io;

/// Errors of the file system core.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// A plain POSIX error (ENOENT, EEXIST, ENOTEMPTY, ...).
    #[error("{}", errno_name(*.0))]
    Errno(i32),
    /// On-disk data failed a check: bad magic, CRC, or an impossible value.
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// The devices cannot be used as asked: not DualFS, not a pair, wrong version, in use.
    #[error("{0}")]
    Refused(String),
    /// The device failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

pub type Result<T> = std::result::Result<T, FsError>;

impl FsError {
    pub fn corrupt(what: &'static str, detail: impl Into<String>) -> FsError {
        FsError::Corrupt {
            what,
            detail: detail.into(),
        }
    }

    /// The errno a system call should return for this error.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Errno(e) => *e,
            FsError::Corrupt { .. } => libc::EIO,
            FsError::Refused(_) => libc::EINVAL,
            FsError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

pub fn errno_name(e: i32) -> String {
    io::Error::from_raw_os_error(e).to_string()
}

/// `Err(FsError::Errno(libc::E...))` in one word.
macro_rules! err {
    ($e:ident) => {
        Err($crate::error::FsError::Errno(libc::$e))
    };
}
pub(crate) use err;
