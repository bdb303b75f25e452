//! Mounting through fusermount3, for a user who may not call mount(2): as libfuse does it,
//! fusermount3 (set-user-ID root) opens /dev/fuse, mounts it, and passes the descriptor
//! back over a socket named by `_FUSE_COMMFD` (SCM_RIGHTS); the session layer then serves
//! it like the descriptor of the daemon's own mount. docs/DESIGN.md ("The mount and how a
//! session ends").

use log::debug;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};

/// The programs asked, in order (fuse3's, then fuse 2's).
const PROGRAMS: [&str; 2] = ["fusermount3", "fusermount"];

/// Mount `mountpoint` with `options` through fusermount3 and return the FUSE descriptor.
pub fn mount(mountpoint: &Path, options: &[String]) -> io::Result<OwnedFd> {
    let mut tried = Vec::new();
    for program in PROGRAMS {
        match mount_with(program, mountpoint, options) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tried.push(format!("{program}: {e}"));
            }
            result => return result,
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no fusermount to mount with ({})", tried.join("; ")),
    ))
}

fn mount_with(program: &str, mountpoint: &Path, options: &[String]) -> io::Result<OwnedFd> {
    // Ours keeps close-on-exec; the child's end is inherited (cleared below).
    let (ours, theirs) = UnixStream::pair()?;
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(theirs.as_raw_fd(), libc::F_SETFD, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut command = Command::new(program);
    command
        .arg("-o")
        .arg(options.join(","))
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    debug!(
        "{program} -o {} -- {}",
        options.join(","),
        mountpoint.display()
    );
    let child = command.spawn();
    // The child holds its copy: with ours closed, its exit ends the stream.
    drop(theirs);
    let child = child?;
    let received = receive_fd(&ours);
    let out = child.wait_with_output()?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(io::Error::other(format!(
            "{program} failed ({}): {}",
            out.status,
            said.trim()
        )));
    }
    match received? {
        Some(fd) => Ok(fd),
        None => Err(io::Error::other(format!(
            "{program} mounted nothing to serve (no descriptor came back)"
        ))),
    }
}

/// One descriptor sent with SCM_RIGHTS (and a byte of data, which fusermount3 sends with
/// it); `None` at the end of the stream.
fn receive_fd(socket: &UnixStream) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor's control message, aligned for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as _;
    let n = loop {
        // SAFETY: `msg` points at live buffers of the lengths it gives.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    if n == 0 {
        return Ok(None);
    }
    // SAFETY: the kernel filled `msg`; CMSG_FIRSTHDR and CMSG_NXTHDR stay inside its
    // control buffer.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: as above; a non-null header is inside the buffer.
        let header = unsafe { &*cmsg };
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: an SCM_RIGHTS message carries descriptors, at least one here (the
            // buffer has room for one only).
            let fd = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>()) };
            if fd >= 0 {
                // SAFETY: the kernel installed `fd` in this process for us alone.
                return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
        // SAFETY: as above.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    Ok(None)
}

/// Unmount a mount made through fusermount3; `lazy` detaches it while it is busy.
pub fn unmount(mountpoint: &Path, lazy: bool) -> Result<(), String> {
    super::umount::fusermount_unmount(mountpoint, lazy)
}
