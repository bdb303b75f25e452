//! The daemon's own mount(2) of its FUSE connection.
//!
//! Unmounting when a session ends (as libfuse's and fuser's sessions do) would destroy the
//! one fact that tells how it ended: whether the mount is still there. So when the daemon may
//! call mount(2) itself (root), it opens /dev/fuse, mounts it as `fuse.<subtype>`
//! (`fuse.dualfs`: what /proc/mounts, findmnt and fstab show) with META as the source, hands
//! the descriptor to the session layer (`dualfs::session::Session::handshake`), and owns the
//! unmount. After the session's threads end, [`KernelMount::still_mounted`] says whether
//! the kernel ended the connection because the file system was unmounted (the mount is gone)
//! or aborted it under a mount that stays (`/sys/fs/fuse/connections/N/abort`, `umount -f`
//! of a busy mount). docs/DESIGN.md ("The mount and how a session ends") gives the kernel's reasons.

use dualfs::mountinfo::{self, MountEntry};
use log::{error, info, warn};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What to mount: the mount(2) arguments besides the FUSE descriptor.
pub struct MountRequest<'a> {
    pub mountpoint: &'a Path,
    /// `fuse.<subtype>`.
    pub fs_type: &'a str,
    /// What /proc/mounts shows as the source (the META path unless `-o fsname=`).
    pub source: &'a str,
    pub flags: MsFlags,
    pub allow_other: bool,
}

/// Our mount's entry in the mount table, found right after mount(2). The mount id and the
/// device number are both reused once the mount is gone, so an entry counts as ours only if
/// it also sits on our mount point: a new mount would need all three within the moment
/// between our session's end and the look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    id: u32,
    major: u32,
    minor: u32,
}

/// A FUSE mount made by this process.
pub struct KernelMount {
    mountpoint: PathBuf,
    identity: Option<Identity>,
    /// Set when this daemon started unmounting (a shutdown signal), for the log.
    own_unmount: AtomicBool,
}

impl KernelMount {
    /// Open /dev/fuse and mount it. An error of kind `PermissionDenied` (EPERM) means this
    /// process may not mount; the caller then goes through fusermount instead.
    pub fn mount(request: &MountRequest) -> io::Result<(OwnedFd, KernelMount)> {
        let device = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open("/dev/fuse")?;
        Self::mount_on(OwnedFd::from(device), request)
    }

    /// Mount the connection of `device`, an open /dev/fuse (a supervisor's, which keeps it
    /// for a successor).
    pub fn mount_on(device: OwnedFd, request: &MountRequest) -> io::Result<(OwnedFd, KernelMount)> {
        let root_mode = std::fs::metadata(request.mountpoint)?.mode() & libc::S_IFMT;
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let mut data = format!(
            "fd={},rootmode={root_mode:o},user_id={uid},group_id={gid},default_permissions",
            device.as_raw_fd()
        );
        if request.allow_other {
            data.push_str(",allow_other");
        }
        mount(
            Some(request.source),
            request.mountpoint,
            Some(request.fs_type),
            request.flags,
            Some(data.as_str()),
        )
        .map_err(io::Error::from)?;
        let identity = find_new_mount(request);
        if identity.is_none() {
            warn!(
                "{} is mounted but not found in /proc/self/mountinfo: how the session ends \
                 cannot be told, an end is taken for an unmount",
                request.mountpoint.display()
            );
        }
        let mounted = KernelMount {
            mountpoint: request.mountpoint.to_path_buf(),
            identity,
            own_unmount: AtomicBool::new(false),
        };
        Ok((device, mounted))
    }

    /// The mount a dead daemon made, which a successor serves: `identity` as the dead one
    /// found it (`identity_bytes`).
    pub fn adopt(mountpoint: &Path, identity: Option<[u32; 3]>) -> KernelMount {
        KernelMount {
            mountpoint: mountpoint.to_path_buf(),
            identity: identity.map(|[id, major, minor]| Identity { id, major, minor }),
            own_unmount: AtomicBool::new(false),
        }
    }

    /// Our mount's identity, for a successor (`adopt`).
    pub fn identity(&self) -> Option<[u32; 3]> {
        self.identity.map(|i| [i.id, i.major, i.minor])
    }

    /// The connection's number in /sys/fs/fuse/connections: the kernel's dev_t of the mount,
    /// `major << 20 | minor` (the minor alone, for the anonymous devices FUSE gets).
    pub fn connection(&self) -> Option<u32> {
        self.identity.map(|i| (i.major << 20) | i.minor)
    }

    /// Did this daemon start the unmount (a shutdown signal)?
    pub fn own_unmount_started(&self) -> bool {
        self.own_unmount.load(Ordering::Acquire)
    }

    /// Is our mount still in the mount table? Unknown identity or an unreadable table count
    /// as gone: then nothing better than the session's own end is known.
    pub fn still_mounted(&self) -> bool {
        match mountinfo::read() {
            Ok(table) => self.ours(&table).is_some(),
            Err(e) => {
                warn!("cannot read /proc/self/mountinfo: {e}");
                false
            }
        }
    }

    fn ours<'a>(&self, table: &'a [MountEntry]) -> Option<&'a MountEntry> {
        let identity = self.identity?;
        table.iter().find(|m| {
            m.id == identity.id
                && (m.major, m.minor) == (identity.major, identity.minor)
                && m.mount_point == self.mountpoint
        })
    }

    /// Is our mount the topmost one at the mount point (so that unmounting the path
    /// unmounts it and nothing else)?
    fn ours_on_top(&self) -> bool {
        let Ok(table) = mountinfo::read() else {
            return false;
        };
        match (
            self.ours(&table),
            mountinfo::topmost_at(&table, &self.mountpoint),
        ) {
            (Some(ours), Some(top)) => ours == top,
            _ => false,
        }
    }

    /// Unmount on a shutdown signal; while files are open, detach instead, so that the
    /// session ends (and the daemon writes its final checkpoint) when the last one is closed.
    pub fn unmount(&self) {
        self.own_unmount.store(true, Ordering::Release);
        if !self.ours_on_top() {
            error!(
                "cannot unmount {}: our mount is gone or covered by another mount",
                self.mountpoint.display()
            );
            return;
        }
        match umount2(&self.mountpoint, MntFlags::empty()) {
            Ok(()) => {}
            Err(nix::errno::Errno::EBUSY) => {
                warn!(
                    "{} is busy: detaching it; the file system stays up until its last user \
                     leaves",
                    self.mountpoint.display()
                );
                if let Err(e) = umount2(&self.mountpoint, MntFlags::MNT_DETACH) {
                    error!("cannot detach {}: {}", self.mountpoint.display(), e.desc());
                }
            }
            Err(e) => error!("cannot unmount {}: {}", self.mountpoint.display(), e.desc()),
        }
    }

    /// Change our mount's flags in place (MS_REMOUNT with `flags`: read-only or read-write,
    /// the other flags as they were). The kernel writes back what it caches for the mount
    /// first, and refuses to turn it read-only while files are open for writing (EBUSY).
    pub fn remount(&self, flags: MsFlags) -> io::Result<()> {
        if !self.ours_on_top() {
            return Err(io::Error::other(format!(
                "our mount on {} is gone or covered by another mount",
                self.mountpoint.display()
            )));
        }
        mount(
            None::<&str>,
            &self.mountpoint,
            None::<&str>,
            flags | MsFlags::MS_REMOUNT,
            None::<&str>,
        )
        .map_err(io::Error::from)
    }

    /// Take a dead mount (its connection aborted) out of the tree, so that the mount point
    /// is usable again; programs still inside it keep getting ENOTCONN until they leave.
    pub fn detach_dead_mount(&self) {
        if !self.ours_on_top() {
            warn!(
                "the dead mount on {} is covered by another mount; unmount that first, then \
                 `umount -l {}`",
                self.mountpoint.display(),
                self.mountpoint.display()
            );
            return;
        }
        match umount2(&self.mountpoint, MntFlags::MNT_DETACH) {
            Ok(()) => info!("detached the dead mount on {}", self.mountpoint.display()),
            Err(e) => error!(
                "cannot detach the dead mount on {}: {}",
                self.mountpoint.display(),
                e.desc()
            ),
        }
    }

    /// End the connection from our side (the session failed while the mount is up): every
    /// reader gets ENODEV, requests waiting in the kernel fail.
    pub fn abort_connection(&self) -> io::Result<()> {
        let Some(n) = self.connection() else {
            return Err(io::Error::other("the connection's number is not known"));
        };
        let path = format!("/sys/fs/fuse/connections/{n}/abort");
        let mut file = OpenOptions::new().write(true).open(&path)?;
        io::Write::write_all(&mut file, b"1")
    }
}

/// Our entry in the table right after mount(2): the topmost mount at the mount point, of
/// our type and source (mounting is refused where a DualFS is mounted already, and our
/// devices are locked, so no other DualFS mount can match).
fn find_new_mount(request: &MountRequest) -> Option<Identity> {
    let table = mountinfo::read().ok()?;
    let top = mountinfo::topmost_at(&table, request.mountpoint)?;
    (top.fs_type == request.fs_type && top.source == request.source).then_some(Identity {
        id: top.id,
        major: top.major,
        minor: top.minor,
    })
}
