//! Run code as another user.
//!
//! Linux credentials belong to threads; only glibc's wrappers make `setresuid` process-wide. The
//! raw system calls change the calling thread alone, so [`as_user`] runs the closure on a fresh
//! thread that drops to the given ids with raw `setgroups`/`setresgid`/`setresuid` (which also
//! clears its capabilities) and then ends. This avoids `fork` inside the multi-threaded test
//! binary (where a child may deadlock on a lock another thread held) and lets the closure borrow
//! and return ordinary values. Every system call the closure makes, and so every FUSE request
//! it causes, carries these ids.

use std::fs;

/// Ids used by the permission tests (they need no /etc/passwd entry).
pub const ALICE: (u32, u32) = (1001, 1001);
pub const BOB: (u32, u32) = (1002, 1002);

/// Run `f` as `uid`/`gid` with supplementary groups `groups`, on its own thread; return what
/// it returns (a panic inside propagates).
pub fn as_user_groups<T, F>(uid: u32, gid: u32, groups: &[u32], f: F) -> T
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            drop_to(uid, gid, groups);
            f()
        });
        match h.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

/// Run `f` as `uid`/`gid` (supplementary groups: just `gid`).
pub fn as_user<T, F>(uid: u32, gid: u32, f: F) -> T
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    as_user_groups(uid, gid, &[gid], f)
}

fn drop_to(uid: u32, gid: u32, groups: &[u32]) {
    unsafe {
        let g: Vec<libc::gid_t> = groups.to_vec();
        let r = libc::syscall(libc::SYS_setgroups, g.len(), g.as_ptr());
        assert_eq!(r, 0, "setgroups: {}", std::io::Error::last_os_error());
        let r = libc::syscall(libc::SYS_setresgid, gid, gid, gid);
        assert_eq!(r, 0, "setresgid: {}", std::io::Error::last_os_error());
        let r = libc::syscall(libc::SYS_setresuid, uid, uid, uid);
        assert_eq!(r, 0, "setresuid: {}", std::io::Error::last_os_error());
    }
    // Make sure the drop really happened for this thread (and only its credentials matter).
    let status = fs::read_to_string("/proc/thread-self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing"))
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse::<u64>().unwrap_or(u64::MAX))
            .collect::<Vec<_>>()
    };
    assert_eq!(field("Uid:"), vec![uid as u64; 4], "thread uid after drop");
    assert_eq!(field("Gid:"), vec![gid as u64; 4], "thread gid after drop");
    let capeff = status
        .lines()
        .find(|l| l.starts_with("CapEff:"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    if uid != 0 {
        assert_eq!(
            u64::from_str_radix(&capeff, 16).unwrap(),
            0,
            "capabilities left after dropping to uid {uid}"
        );
    }
}

/// The current process is root (the suite needs it; it fails loudly otherwise).
pub fn require_root() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "these tests mount file systems and switch users: run them as root"
    );
}
