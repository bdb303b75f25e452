//! Unmounting on SIGTERM, SIGINT and SIGHUP.
//!
//! The signals are blocked before any thread starts, so every thread inherits the mask and
//! none is interrupted; one thread takes them with sigwait and unmounts. The session loop
//! then ends like after an external `umount`, and the main thread writes the final
//! checkpoint.

use super::kernel_mount::KernelMount;
use log::{error, info, warn};
use nix::mount::{umount2, MntFlags};
use nix::sys::signal::{SigSet, Signal};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

/// How to unmount: our own mount, or one made through fusermount3.
pub enum Unmounter {
    Own(Arc<KernelMount>),
    Fusermount,
}

/// The signals that stop the daemon.
pub fn shutdown_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(signal);
    }
    set
}

/// Block the shutdown signals in this thread and every thread it starts from now on.
/// A signal that arrives before the watcher runs stays pending and is handled then.
pub fn block_shutdown_signals() -> nix::Result<()> {
    shutdown_signals().thread_block()
}

/// Start the thread that unmounts `mountpoint` when a shutdown signal arrives.
pub fn spawn_signal_watcher(
    unmounter: Unmounter,
    mountpoint: PathBuf,
) -> io::Result<JoinHandle<()>> {
    thread::Builder::new()
        .name("dualfs-signals".into())
        .spawn(move || watch_signals(unmounter, mountpoint))
}

fn watch_signals(unmounter: Unmounter, mountpoint: PathBuf) {
    let signals = shutdown_signals();
    loop {
        match signals.wait() {
            Ok(signal) => {
                info!("{signal} received: unmounting {}", mountpoint.display());
                match &unmounter {
                    Unmounter::Own(mount) => mount.unmount(),
                    Unmounter::Fusermount => unmount(&mountpoint),
                }
            }
            Err(e) => {
                error!("waiting for signals failed ({e}); stop with `dualfs umount`");
                return;
            }
        }
    }
}

/// Unmount a mount made through fusermount3; while files are open, detach instead, so that
/// the daemon exits (with its final checkpoint) as soon as the last one is closed.
fn unmount(mountpoint: &Path) {
    let busy = match umount2(mountpoint, MntFlags::empty()) {
        Ok(()) => return,
        Err(nix::errno::Errno::EBUSY) => true,
        // Not root: fusermount3 unmounts a mount its user made.
        Err(_) => match super::fusermount::unmount(mountpoint, false) {
            Ok(()) => return,
            Err(why) if why.contains("busy") => true,
            Err(why) => {
                error!("cannot unmount {}: {why}", mountpoint.display());
                false
            }
        },
    };
    if busy {
        warn!(
            "{} is busy: detaching it; the file system stays up until its last user leaves",
            mountpoint.display()
        );
        if umount2(mountpoint, MntFlags::MNT_DETACH).is_err() {
            if let Err(why) = super::fusermount::unmount(mountpoint, true) {
                error!("cannot detach {}: {why}", mountpoint.display());
            }
        }
    }
}
