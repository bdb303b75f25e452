//! Decoding a request: the header, then the operation's arguments. Names and data stay
//! slices of the transport's buffer; the small fixed structures are copied out (any
//! alignment of the buffer works).
//!
//! A request comes in two shapes. Over /dev/fuse the arguments follow the header in one
//! buffer. Over io_uring the kernel puts the operation's fixed structure (its first
//! argument) in the entry's `op_in` area and everything after it (names, data) in the
//! payload buffer. [`Body`] hides the difference. What the kernel sends is checked, never
//! trusted: a short or malformed request is an [`DecodeError`], answered with EIO.

use super::abi::{self, opcode, InHeader};
use zerocopy::{FromBytes, IntoBytes};

/// Why a request could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than its header or than its length field says.
    Short,
    /// An argument is shorter than its structure, or a name has no terminating NUL.
    BadArgument(u32),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Short => write!(f, "request shorter than its header says"),
            DecodeError::BadArgument(op) => write!(f, "malformed arguments of opcode {op}"),
        }
    }
}

/// The arguments of a request, as the transport holds them.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    /// /dev/fuse: the bytes after the header (extensions already cut off).
    Dev(&'a [u8]),
    /// io_uring: the entry's `op_in` area and the payload the kernel filled.
    Ring { op_in: &'a [u8], payload: &'a [u8] },
}

impl<'a> Body<'a> {
    /// The operation's fixed structure and what follows it.
    fn fixed<T: FromBytes + IntoBytes>(self, op: u32) -> Result<(T, &'a [u8]), DecodeError> {
        self.fixed_sized(op, size_of::<T>())
    }

    /// As `fixed`, for a structure of which the kernel sends only the first `size` bytes
    /// (the rest reads as zero).
    fn fixed_sized<T: FromBytes + IntoBytes>(
        self,
        op: u32,
        size: usize,
    ) -> Result<(T, &'a [u8]), DecodeError> {
        assert!(size <= size_of::<T>(), "a prefix of the structure");
        let (arg, rest) = match self {
            Body::Dev(b) => {
                if b.len() < size {
                    return Err(DecodeError::BadArgument(op));
                }
                b.split_at(size)
            }
            Body::Ring { op_in, payload } => (
                op_in.get(..size).ok_or(DecodeError::BadArgument(op))?,
                payload,
            ),
        };
        let mut value = T::new_zeroed();
        value.as_mut_bytes()[..size].copy_from_slice(arg);
        Ok((value, rest))
    }

    /// The bytes of an operation without a fixed structure (names only).
    fn rest(self) -> &'a [u8] {
        match self {
            Body::Dev(b) => b,
            Body::Ring { payload, .. } => payload,
        }
    }
}

/// A NUL-terminated name at the start of `bytes`, and what follows it.
fn name(op: u32, bytes: &[u8]) -> Result<(&[u8], &[u8]), DecodeError> {
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .ok_or(DecodeError::BadArgument(op))?;
    Ok((&bytes[..end], &bytes[end + 1..]))
}

/// The list of a BATCH_FORGET, read in place.
#[derive(Clone, Copy, Debug)]
pub struct ForgetList<'a> {
    bytes: &'a [u8],
}

impl<'a> ForgetList<'a> {
    pub fn len(&self) -> usize {
        self.bytes.len() / size_of::<abi::ForgetOne>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = abi::ForgetOne> + 'a {
        self.bytes
            .chunks_exact(size_of::<abi::ForgetOne>())
            .filter_map(|c| abi::ForgetOne::read_from_bytes(c).ok())
    }
}

/// A decoded operation.
#[derive(Clone, Copy, Debug)]
pub enum Operation<'a> {
    Init(abi::InitIn),
    Destroy,
    Interrupt(abi::InterruptIn),
    Lookup {
        name: &'a [u8],
    },
    Forget(abi::ForgetIn),
    BatchForget(ForgetList<'a>),
    Getattr(abi::GetattrIn),
    /// FUSE_STATX: the attributes with the birth time (sent for a `statx` asking for it).
    Statx(abi::StatxIn),
    Setattr(abi::SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        arg: abi::MknodIn,
        name: &'a [u8],
    },
    Mkdir {
        arg: abi::MkdirIn,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    /// RENAME and RENAME2 (flags 0 for RENAME).
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Link {
        arg: abi::LinkIn,
        newname: &'a [u8],
    },
    Open(abi::OpenIn),
    Read(abi::ReadIn),
    Write {
        arg: abi::WriteIn,
        data: &'a [u8],
    },
    Statfs,
    Release(abi::ReleaseIn),
    Fsync(abi::FsyncIn),
    Setxattr {
        arg: abi::SetxattrIn,
        name: &'a [u8],
        value: &'a [u8],
    },
    Getxattr {
        arg: abi::GetxattrIn,
        name: &'a [u8],
    },
    Listxattr(abi::GetxattrIn),
    Removexattr {
        name: &'a [u8],
    },
    Flush(abi::FlushIn),
    Opendir(abi::OpenIn),
    Readdir(abi::ReadIn),
    Readdirplus(abi::ReadIn),
    Releasedir(abi::ReleaseIn),
    Fsyncdir(abi::FsyncIn),
    Access(abi::AccessIn),
    Create {
        arg: abi::CreateIn,
        name: &'a [u8],
    },
    /// open(2) with O_TMPFILE: CREATE's arguments; the name is the kernel's placeholder ("/").
    Tmpfile {
        arg: abi::CreateIn,
        name: &'a [u8],
    },
    Ioctl {
        arg: abi::IoctlIn,
        data: &'a [u8],
    },
    Fallocate(abi::FallocateIn),
    Lseek(abi::LseekIn),
    CopyFileRange(abi::CopyFileRangeIn),
    Syncfs,
    /// An opcode this layer does not decode: answered ENOSYS.
    Unknown(u32),
}

impl Operation<'_> {
    /// The opcode's name (as fuse_kernel.h spells it, without `FUSE_`), with the open flags
    /// of OPEN and CREATE: for debug logs.
    pub fn summary(&self) -> String {
        let name = match self {
            Operation::Init(_) => "INIT",
            Operation::Destroy => "DESTROY",
            Operation::Interrupt(_) => "INTERRUPT",
            Operation::Lookup { .. } => "LOOKUP",
            Operation::Forget(_) => "FORGET",
            Operation::BatchForget(_) => "BATCH_FORGET",
            Operation::Getattr(_) => "GETATTR",
            Operation::Statx(_) => "STATX",
            Operation::Setattr(_) => "SETATTR",
            Operation::Readlink => "READLINK",
            Operation::Symlink { .. } => "SYMLINK",
            Operation::Mknod { .. } => "MKNOD",
            Operation::Mkdir { .. } => "MKDIR",
            Operation::Unlink { .. } => "UNLINK",
            Operation::Rmdir { .. } => "RMDIR",
            Operation::Rename { .. } => "RENAME",
            Operation::Link { .. } => "LINK",
            Operation::Open(a) => return format!("OPEN flags {:#o}", a.flags),
            Operation::Read(_) => "READ",
            Operation::Write { .. } => "WRITE",
            Operation::Statfs => "STATFS",
            Operation::Release(_) => "RELEASE",
            Operation::Fsync(_) => "FSYNC",
            Operation::Setxattr { .. } => "SETXATTR",
            Operation::Getxattr { .. } => "GETXATTR",
            Operation::Listxattr(_) => "LISTXATTR",
            Operation::Removexattr { .. } => "REMOVEXATTR",
            Operation::Flush(_) => "FLUSH",
            Operation::Opendir(_) => "OPENDIR",
            Operation::Readdir(_) => "READDIR",
            Operation::Readdirplus(_) => "READDIRPLUS",
            Operation::Releasedir(_) => "RELEASEDIR",
            Operation::Fsyncdir(_) => "FSYNCDIR",
            Operation::Access(_) => "ACCESS",
            Operation::Create { arg, .. } => return format!("CREATE flags {:#o}", arg.flags),
            Operation::Tmpfile { arg, .. } => return format!("TMPFILE flags {:#o}", arg.flags),
            Operation::Ioctl { .. } => "IOCTL",
            Operation::Fallocate(_) => "FALLOCATE",
            Operation::Lseek(_) => "LSEEK",
            Operation::CopyFileRange(_) => "COPY_FILE_RANGE",
            Operation::Syncfs => "SYNCFS",
            Operation::Unknown(op) => return format!("opcode {op}"),
        };
        name.to_string()
    }

    /// Does the kernel wait for an answer?
    pub fn wants_reply(&self) -> bool {
        !matches!(
            self,
            Operation::Forget(_) | Operation::BatchForget(_) | Operation::Interrupt(_)
        )
    }
}

/// What was negotiated at INIT and changes how requests are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// FUSE_SETXATTR_EXT: SETXATTR carries the whole `fuse_setxattr_in`.
    pub setxattr_ext: bool,
}

/// A decoded request.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub header: InHeader,
    pub op: Operation<'a>,
}

impl Request<'_> {
    pub fn unique(&self) -> u64 {
        self.header.unique
    }

    pub fn nodeid(&self) -> u64 {
        self.header.nodeid
    }
}

/// Decode a request read from /dev/fuse (`buf` is what one read returned).
pub fn decode_dev(buf: &[u8], layout: Layout) -> Result<Request<'_>, DecodeError> {
    let (header, _) = InHeader::read_from_prefix(buf).map_err(|_| DecodeError::Short)?;
    let len = header.len as usize;
    let ext = usize::from(header.total_extlen) * 8;
    if len > buf.len() || len < size_of::<InHeader>() + ext {
        return Err(DecodeError::Short);
    }
    // Extensions (security context, groups) trail the arguments; none is negotiated, and
    // none is read.
    let body = &buf[size_of::<InHeader>()..len - ext];
    decode(header, Body::Dev(body), layout)
}

/// Decode a request the kernel put into a ring entry: its header area, its `op_in` area
/// and the first `payload_sz` bytes of its payload.
pub fn decode_ring<'a>(
    in_out: &[u8],
    op_in: &'a [u8],
    payload: &'a [u8],
    layout: Layout,
) -> Result<Request<'a>, DecodeError> {
    let (header, _) = InHeader::read_from_prefix(in_out).map_err(|_| DecodeError::Short)?;
    let ext = usize::from(header.total_extlen) * 8;
    let payload = payload
        .get(..payload.len().checked_sub(ext).ok_or(DecodeError::Short)?)
        .ok_or(DecodeError::Short)?;
    decode(header, Body::Ring { op_in, payload }, layout)
}

/// Decode the operation of `header` from its arguments.
pub fn decode(
    header: InHeader,
    body: Body<'_>,
    layout: Layout,
) -> Result<Request<'_>, DecodeError> {
    let op = header.opcode;
    let bad = DecodeError::BadArgument(op);
    let operation = match op {
        opcode::INIT => {
            // Kernels before 7.36 send the first 16 bytes only.
            let size = match body {
                Body::Dev(b) => b.len().min(size_of::<abi::InitIn>()),
                Body::Ring { .. } => return Err(bad),
            };
            if size < 16 {
                return Err(bad);
            }
            Operation::Init(body.fixed_sized(op, size)?.0)
        }
        opcode::DESTROY => Operation::Destroy,
        opcode::INTERRUPT => Operation::Interrupt(body.fixed(op)?.0),
        opcode::LOOKUP => Operation::Lookup {
            name: name(op, body.rest())?.0,
        },
        opcode::FORGET => Operation::Forget(body.fixed(op)?.0),
        opcode::BATCH_FORGET => {
            let (arg, rest): (abi::BatchForgetIn, _) = body.fixed(op)?;
            let bytes = (arg.count as usize)
                .checked_mul(size_of::<abi::ForgetOne>())
                .and_then(|n| rest.get(..n))
                .ok_or(bad)?;
            Operation::BatchForget(ForgetList { bytes })
        }
        opcode::GETATTR => Operation::Getattr(body.fixed(op)?.0),
        opcode::STATX => Operation::Statx(body.fixed(op)?.0),
        opcode::SETATTR => Operation::Setattr(body.fixed(op)?.0),
        opcode::READLINK => Operation::Readlink,
        opcode::SYMLINK => {
            let (name_, rest) = name(op, body.rest())?;
            Operation::Symlink {
                name: name_,
                target: name(op, rest)?.0,
            }
        }
        opcode::MKNOD => {
            let (arg, rest) = body.fixed(op)?;
            Operation::Mknod {
                arg,
                name: name(op, rest)?.0,
            }
        }
        opcode::MKDIR => {
            let (arg, rest) = body.fixed(op)?;
            Operation::Mkdir {
                arg,
                name: name(op, rest)?.0,
            }
        }
        opcode::UNLINK => Operation::Unlink {
            name: name(op, body.rest())?.0,
        },
        opcode::RMDIR => Operation::Rmdir {
            name: name(op, body.rest())?.0,
        },
        opcode::RENAME | opcode::RENAME2 => {
            let (newdir, flags, rest) = if op == opcode::RENAME {
                let (arg, rest): (abi::RenameIn, _) = body.fixed(op)?;
                (arg.newdir, 0, rest)
            } else {
                let (arg, rest): (abi::Rename2In, _) = body.fixed(op)?;
                (arg.newdir, arg.flags, rest)
            };
            let (name_, rest) = name(op, rest)?;
            Operation::Rename {
                newdir,
                flags,
                name: name_,
                newname: name(op, rest)?.0,
            }
        }
        opcode::LINK => {
            let (arg, rest) = body.fixed(op)?;
            Operation::Link {
                arg,
                newname: name(op, rest)?.0,
            }
        }
        opcode::OPEN => Operation::Open(body.fixed(op)?.0),
        opcode::READ => Operation::Read(body.fixed(op)?.0),
        opcode::WRITE => {
            let (arg, rest): (abi::WriteIn, _) = body.fixed(op)?;
            let data = rest.get(..arg.size as usize).ok_or(bad)?;
            Operation::Write { arg, data }
        }
        opcode::STATFS => Operation::Statfs,
        opcode::RELEASE => Operation::Release(body.fixed(op)?.0),
        opcode::FSYNC => Operation::Fsync(body.fixed(op)?.0),
        opcode::SETXATTR => {
            let size = if layout.setxattr_ext {
                size_of::<abi::SetxattrIn>()
            } else {
                abi::COMPAT_SETXATTR_IN_SIZE
            };
            let (arg, rest): (abi::SetxattrIn, _) = body.fixed_sized(op, size)?;
            let (name_, rest) = name(op, rest)?;
            let value = rest.get(..arg.size as usize).ok_or(bad)?;
            Operation::Setxattr {
                arg,
                name: name_,
                value,
            }
        }
        opcode::GETXATTR => {
            let (arg, rest) = body.fixed(op)?;
            Operation::Getxattr {
                arg,
                name: name(op, rest)?.0,
            }
        }
        opcode::LISTXATTR => Operation::Listxattr(body.fixed(op)?.0),
        opcode::REMOVEXATTR => Operation::Removexattr {
            name: name(op, body.rest())?.0,
        },
        opcode::FLUSH => Operation::Flush(body.fixed(op)?.0),
        opcode::OPENDIR => Operation::Opendir(body.fixed(op)?.0),
        opcode::READDIR => Operation::Readdir(body.fixed(op)?.0),
        opcode::READDIRPLUS => Operation::Readdirplus(body.fixed(op)?.0),
        opcode::RELEASEDIR => Operation::Releasedir(body.fixed(op)?.0),
        opcode::FSYNCDIR => Operation::Fsyncdir(body.fixed(op)?.0),
        opcode::ACCESS => Operation::Access(body.fixed(op)?.0),
        opcode::CREATE => {
            let (arg, rest) = body.fixed(op)?;
            Operation::Create {
                arg,
                name: name(op, rest)?.0,
            }
        }
        opcode::TMPFILE => {
            let (arg, rest) = body.fixed(op)?;
            Operation::Tmpfile {
                arg,
                name: name(op, rest)?.0,
            }
        }
        opcode::IOCTL => {
            let (arg, rest): (abi::IoctlIn, _) = body.fixed(op)?;
            let data = rest.get(..arg.in_size as usize).ok_or(bad)?;
            Operation::Ioctl { arg, data }
        }
        opcode::FALLOCATE => Operation::Fallocate(body.fixed(op)?.0),
        opcode::LSEEK => Operation::Lseek(body.fixed(op)?.0),
        opcode::COPY_FILE_RANGE => Operation::CopyFileRange(body.fixed(op)?.0),
        opcode::SYNCFS => Operation::Syncfs,
        other => Operation::Unknown(other),
    };
    Ok(Request {
        header,
        op: operation,
    })
}
