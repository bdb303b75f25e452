//! Unmounting on SIGTERM, SIGINT and SIGHUP.
//!
//! The signals are blocked before any thread starts, so every thread inherits the mask and
//! none is interrupted; one thread takes them with sigwait and unmounts. The session loop
//! then ends like after an external `umount`, and the main thread writes the final
//! checkpoint.

use super::kernel_mount::KernelMount;
use fuser::SessionUnmounter;
use log::{error, info, warn};
use nix::mount::{umount2, MntFlags};
use nix::sys::signal::{SigSet, Signal};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::{self, JoinHandle};

/// How to unmount: our own mount, or fuser's (made through fusermount).
pub enum Unmounter {
    Own(Arc<KernelMount>),
    Fuser(SessionUnmounter),
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

fn watch_signals(mut unmounter: Unmounter, mountpoint: PathBuf) {
    let signals = shutdown_signals();
    loop {
        match signals.wait() {
            Ok(signal) => {
                info!("{signal} received: unmounting {}", mountpoint.display());
                match &mut unmounter {
                    Unmounter::Own(mount) => mount.unmount(),
                    Unmounter::Fuser(fuser) => unmount(fuser, &mountpoint),
                }
            }
            Err(e) => {
                error!("waiting for signals failed ({e}); stop with `dualfs umount`");
                return;
            }
        }
    }
}

/// Unmount a mount made through fuser; while files are open, detach instead, so that the
/// daemon exits (with its final checkpoint) as soon as the last one is closed.
fn unmount(unmounter: &mut SessionUnmounter, mountpoint: &PathBuf) {
    match unmounter.unmount() {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            warn!(
                "{} is busy: detaching it; the file system stays up until its last user leaves",
                mountpoint.display()
            );
            if let Err(e) = umount2(mountpoint, MntFlags::MNT_DETACH) {
                error!("cannot detach {}: {}", mountpoint.display(), e.desc());
            }
        }
        Err(e) => error!("cannot unmount {}: {e}", mountpoint.display()),
    }
}
