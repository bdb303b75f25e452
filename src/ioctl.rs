//! The ioctls DualFS answers, as FUSE delivers them (FUSE_IOCTL, restricted: the kernel
//! copies `_IOC_SIZE(cmd)` bytes in for `_IOW` commands and out for `_IOR` ones):
//!
//! - FS_IOC_GETFLAGS / FS_IOC_SETFLAGS (and their 32-bit twins): the Linux inode flags
//!   (lsattr, chattr). Since Linux 5.13 the kernel turns them into `fileattr` calls and sends
//!   FUSE_IOCTL with a 4-byte `unsigned int` whatever the command's size field says (it says
//!   `long`); older kernels pass the caller's 8 bytes. Either way the flags are the first 4
//!   bytes, and 4 go back.
//! - FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR (`struct fsxattr`, xfs_io's lsattr/chattr): the
//!   same flags as FS_XFLAG_* bits; extent sizes and project ids are not kept (0, and
//!   EOPNOTSUPP to set them).
//! - FS_IOC_SHUTDOWN (ext4/xfs "going down", `_IOR('X', 125, __u32)`), root only: stop all
//!   writes now. The command says "read" although its argument (how much to flush first) is
//!   an input, so FUSE passes no argument: DualFS always stops at once, as with
//!   FS_GOING_DOWN_NOLOGFLUSH, the behaviour closest to a power failure.
//!
//! Anything else is ENOTTY.

use crate::format::inode::{FLAG_APPEND, FLAG_IMMUTABLE, FLAG_NOATIME, FLAG_NODUMP};
use crate::fs::{Caller, Fs};
use crate::{FsError, Result};
use std::mem::size_of;

pub const FS_IOC_GETFLAGS: u32 = nix::request_code_read!(b'f', 1, size_of::<libc::c_long>()) as u32;
pub const FS_IOC_SETFLAGS: u32 =
    nix::request_code_write!(b'f', 2, size_of::<libc::c_long>()) as u32;
pub const FS_IOC32_GETFLAGS: u32 =
    nix::request_code_read!(b'f', 1, size_of::<libc::c_int>()) as u32;
pub const FS_IOC32_SETFLAGS: u32 =
    nix::request_code_write!(b'f', 2, size_of::<libc::c_int>()) as u32;
/// `struct fsxattr`: xflags, extsize, nextents, projid, cowextsize (u32 each), 8 bytes pad.
const FSXATTR_SIZE: usize = 28;
pub const FS_IOC_FSGETXATTR: u32 = nix::request_code_read!(b'X', 31, FSXATTR_SIZE) as u32;
pub const FS_IOC_FSSETXATTR: u32 = nix::request_code_write!(b'X', 32, FSXATTR_SIZE) as u32;
pub const FS_IOC_SHUTDOWN: u32 = nix::request_code_read!(b'X', 125, size_of::<u32>()) as u32;

/// FS_XFLAG_* bits and the inode flags they stand for.
const XFLAGS: [(u32, u32); 4] = [
    (0x08, FLAG_IMMUTABLE),
    (0x10, FLAG_APPEND),
    (0x40, FLAG_NOATIME),
    (0x80, FLAG_NODUMP),
];

fn einval() -> FsError {
    FsError::Errno(libc::EINVAL)
}

fn u32_at(data: &[u8], at: usize) -> Result<u32> {
    let bytes = data.get(at..at + 4).ok_or_else(einval)?;
    Ok(u32::from_ne_bytes(bytes.try_into().unwrap()))
}

/// Does a successful `cmd` change the inode's attributes (its flags and ctime)?
pub fn changes_attributes(cmd: u32) -> bool {
    matches!(cmd, FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS | FS_IOC_FSSETXATTR)
}

/// Answer ioctl `cmd` on inode `ino` from `caller`: the bytes to copy out (at most
/// `out_size`).
pub fn ioctl(
    fs: &Fs,
    caller: &Caller,
    ino: u64,
    cmd: u32,
    input: &[u8],
    out_size: u32,
) -> Result<Vec<u8>> {
    let out = match cmd {
        FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => fs.inode_flags(ino)?.to_ne_bytes().to_vec(),
        FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
            fs.set_inode_flags(caller, ino, u32_at(input, 0)?)?;
            Vec::new()
        }
        FS_IOC_FSGETXATTR => {
            let flags = fs.inode_flags(ino)?;
            let xflags = XFLAGS
                .iter()
                .filter(|&&(_, f)| flags & f != 0)
                .fold(0u32, |x, &(bit, _)| x | bit);
            let mut out = vec![0u8; FSXATTR_SIZE];
            out[..4].copy_from_slice(&xflags.to_ne_bytes());
            out
        }
        FS_IOC_FSSETXATTR => {
            if input.len() < FSXATTR_SIZE {
                return Err(einval());
            }
            let xflags = u32_at(input, 0)?;
            let known = XFLAGS.iter().fold(0u32, |x, &(bit, _)| x | bit);
            // extsize, projid and cowextsize are not kept (nextents is read-only).
            let kept_fields_zero = [4, 12, 16]
                .iter()
                .all(|&at| matches!(u32_at(input, at), Ok(0)));
            if xflags & !known != 0 || !kept_fields_zero {
                return Err(FsError::Errno(libc::EOPNOTSUPP));
            }
            let flags = XFLAGS
                .iter()
                .filter(|&&(bit, _)| xflags & bit != 0)
                .fold(0u32, |f, &(_, flag)| f | flag);
            fs.set_inode_flags(caller, ino, flags)?;
            Vec::new()
        }
        FS_IOC_SHUTDOWN => {
            if caller.uid != 0 {
                return Err(FsError::Errno(libc::EPERM));
            }
            fs.shutdown();
            Vec::new()
        }
        _ => return Err(FsError::Errno(libc::ENOTTY)),
    };
    if out.len() > out_size as usize {
        return Err(einval());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_numbers_are_linuxs() {
        assert_eq!(FS_IOC_GETFLAGS, 0x8008_6601);
        assert_eq!(FS_IOC_SETFLAGS, 0x4008_6602);
        assert_eq!(FS_IOC32_GETFLAGS, 0x8004_6601);
        assert_eq!(FS_IOC32_SETFLAGS, 0x4004_6602);
        assert_eq!(FS_IOC_FSGETXATTR, 0x801c_581f);
        assert_eq!(FS_IOC_FSSETXATTR, 0x401c_5820);
        assert_eq!(FS_IOC_SHUTDOWN, 0x8004_587d);
        assert_eq!(FS_IOC_GETFLAGS, libc::FS_IOC_GETFLAGS as u32);
    }
}
