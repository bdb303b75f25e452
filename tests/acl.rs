//! POSIX ACLs through a real mount (FUSE_POSIX_ACL: the kernel enforces them, DualFS keeps the
//! mode in step, inherits default ACLs and applies the umask itself), as the files' owners
//! and as other users: setfacl/getfacl round trips, permissions granted and limited through
//! named entries and the mask, default ACLs inherited by files and directories (instead of the
//! umask), chmod and ACLs changing each other, setgid cleared on an ACL change by a non-member,
//! and ACLs across a remount.

#[macro_use]
mod common;

use common::sys::{getxattr, setxattr};
use common::user::{as_user, as_user_groups, ALICE, BOB};
use common::*;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// Run setfacl with `args` on `p` (as whoever runs this); its exit status.
fn setfacl(args: &[&str], p: &Path) -> Result<(), String> {
    let out = Command::new("setfacl").args(args).arg(p).output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Give the calling thread a umask of its own (threads share one, and tests run on several),
/// inherited by what it starts.
fn own_umask() {
    let r = unsafe { libc::unshare(libc::CLONE_FS) };
    assert_eq!(
        r,
        0,
        "unshare(CLONE_FS): {}",
        std::io::Error::last_os_error()
    );
}

/// getfacl of `p` without the comment header or effective-rights comments, one entry a line.
fn getfacl(p: &Path) -> Vec<String> {
    let out = Command::new("getfacl")
        .args(["-c", "-n", "-E"])
        .arg(p)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn lines(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn perm(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// A directory for Alice's files, writable by everyone.
fn shared(fs: &TestFs) -> std::path::PathBuf {
    let d = fs.join("shared");
    fs::create_dir(&d).unwrap();
    sys::chmod(&d, 0o777).unwrap();
    d
}

#[test]
fn setfacl_getfacl_round_trip_and_the_mode_follows_the_mask() {
    let mut fs = TestFs::new();
    let d = shared(&fs);
    let f = d.join("f");
    let (u, g) = ALICE;
    as_user(u, g, || {
        fs::write(&f, b"x").unwrap();
        sys::chmod(&f, 0o640).unwrap();
        setfacl(&["-m", "u:1002:rw,g:1003:r"], &f).unwrap();
        assert_eq!(
            getfacl(&f),
            lines(&[
                "user::rw-",
                "user:1002:rw-",
                "group::r--",
                "group:1003:r--",
                "mask::rw-",
                "other::---"
            ])
        );
        // The group class of the mode is the mask.
        assert_eq!(perm(&f), 0o660);
        setfacl(&["-m", "m::r"], &f).unwrap();
        assert_eq!(perm(&f), 0o640);
        assert!(getfacl(&f).contains(&"user:1002:rw-".to_string()));
        // An ACL that the mode can say is not kept: the mode is it.
        setfacl(&["-b"], &f).unwrap();
        assert_errno!(getxattr(&f, "system.posix_acl_access"), libc::ENODATA);
        assert_eq!(
            getfacl(&f),
            lines(&["user::rw-", "group::r--", "other::---"])
        );
        setfacl(&["-m", "u::rwx,g::r-x,o::r--"], &f).unwrap();
        assert_eq!(perm(&f), 0o754);
        assert_errno!(getxattr(&f, "system.posix_acl_access"), libc::ENODATA);
        setfacl(&["-m", "u:1002:r-x"], &f).unwrap();
    });
    let want = getfacl(&f);
    fs.remount();
    assert_eq!(getfacl(&f), want, "after a remount");
    assert_eq!(perm(&f), 0o754 & !0o070 | 0o050);
    // Only the owner may change an ACL.
    let (bu, bg) = BOB;
    as_user(bu, bg, || {
        assert!(setfacl(&["-m", "u:1002:rwx"], &f).is_err());
    });
}

#[test]
fn named_entries_grant_and_the_mask_limits_them() {
    let fs = TestFs::new();
    let d = shared(&fs);
    let f = d.join("secret");
    let (au, ag) = ALICE;
    let (bu, bg) = BOB;
    as_user(au, ag, || {
        fs::write(&f, b"for bob").unwrap();
        sys::chmod(&f, 0o600).unwrap();
    });
    as_user(bu, bg, || assert_errno!(fs::read(&f), libc::EACCES));
    as_user(au, ag, || setfacl(&["-m", "u:1002:r"], &f)).unwrap();
    as_user(bu, bg, || {
        assert_eq!(fs::read(&f).unwrap(), b"for bob");
        assert_errno!(fs::OpenOptions::new().write(true).open(&f), libc::EACCES);
    });
    // chmod g-rwx makes the mask ---: the named entry stays but grants nothing.
    as_user(au, ag, || sys::chmod(&f, 0o600)).unwrap();
    assert!(getfacl(&f).contains(&"mask::---".to_string()));
    assert!(getfacl(&f).contains(&"user:1002:r--".to_string()));
    as_user(bu, bg, || assert_errno!(fs::read(&f), libc::EACCES));
    as_user(au, ag, || sys::chmod(&f, 0o640)).unwrap();
    as_user(bu, bg, || assert_eq!(fs::read(&f).unwrap(), b"for bob"));
    // A named group entry, for a member of that group only.
    let g_file = d.join("group");
    as_user(au, ag, || {
        fs::write(&g_file, b"group").unwrap();
        sys::chmod(&g_file, 0o600).unwrap();
        setfacl(&["-m", "g:2000:rw"], &g_file).unwrap();
    });
    as_user_groups(bu, bg, &[bg, 2000], || {
        fs::OpenOptions::new().write(true).open(&g_file).unwrap();
    });
    as_user(bu, bg, || assert_errno!(fs::read(&g_file), libc::EACCES));
    // Directories: search and listing through a named entry.
    let sub = d.join("sub");
    as_user(au, ag, || {
        sys::mkdir(&sub, 0o700).unwrap();
        fs::write(sub.join("inside"), b"i").unwrap();
        sys::chmod(sub.join("inside"), 0o644).unwrap();
    });
    as_user(bu, bg, || {
        assert_errno!(fs::read(sub.join("inside")), libc::EACCES)
    });
    as_user(au, ag, || setfacl(&["-m", "u:1002:rx"], &sub)).unwrap();
    as_user(bu, bg, || {
        assert_eq!(fs::read(sub.join("inside")).unwrap(), b"i");
        assert_errno!(fs::write(sub.join("new"), b"n"), libc::EACCES);
    });
}

#[test]
fn default_acls_are_inherited_instead_of_the_umask() {
    let fs = TestFs::new();
    let d = shared(&fs);
    let top = d.join("top");
    let (au, ag) = ALICE;
    let (bu, bg) = BOB;
    as_user(au, ag, || {
        sys::mkdir(&top, 0o755).unwrap();
        setfacl(&["-d", "-m", "u:1002:rwx,g::r-x,o::---"], &top).unwrap();
        own_umask();
        let old = sys::umask(0o077);
        // A file: the default ACL limited by the mode asked (0666), the umask ignored.
        fs::write(top.join("file"), b"f").unwrap();
        let mut acl = getfacl(&top.join("file"));
        acl.retain(|l| !l.starts_with("default:"));
        assert_eq!(
            acl,
            lines(&[
                "user::rw-",
                "user:1002:rwx",
                "group::r-x",
                "mask::rw-",
                "other::---"
            ])
        );
        assert_eq!(perm(&top.join("file")), 0o660);
        // A directory takes the default ACL as its own default too.
        sys::mkdir(top.join("dir"), 0o777).unwrap();
        let dacl = getfacl(&top.join("dir"));
        assert!(dacl.contains(&"user:1002:rwx".to_string()), "{dacl:?}");
        assert!(
            dacl.contains(&"default:user:1002:rwx".to_string()),
            "{dacl:?}"
        );
        assert_eq!(perm(&top.join("dir")), 0o770);
        // And passes it on.
        fs::write(top.join("dir/deeper"), b"x").unwrap();
        assert_eq!(perm(&top.join("dir/deeper")), 0o660);
        // Symbolic links take none.
        sys::symlink("file", top.join("link")).unwrap();
        // Without a default ACL the umask applies.
        sys::umask(0o027);
        fs::write(d.join("plain"), b"p").unwrap();
        sys::mkdir(d.join("plaindir"), 0o777).unwrap();
        sys::umask(old);
    });
    assert_eq!(perm(&d.join("plain")), 0o640);
    assert_eq!(perm(&d.join("plaindir")), 0o750);
    assert_errno!(
        getxattr(d.join("plain"), "system.posix_acl_access"),
        libc::ENODATA
    );
    as_user(bu, bg, || {
        assert_eq!(fs::read(top.join("dir/deeper")).unwrap(), b"x");
        fs::write(top.join("dir/deeper"), b"bob was here").unwrap();
    });
    // mknod follows the same rules.
    sys::mkfifo(top.join("fifo"), 0o666).unwrap();
    let fifo = getfacl(&top.join("fifo"));
    assert!(fifo.contains(&"user:1002:rwx".to_string()) && fifo.contains(&"mask::rw-".to_string()));
    // A default ACL only on directories.
    let acl = getxattr(&top, "system.posix_acl_default").unwrap();
    assert_errno!(
        setxattr(top.join("file"), "system.posix_acl_default", &acl, 0, false),
        libc::EACCES
    );
}

#[test]
fn chmod_rewrites_the_acl_and_a_non_member_loses_setgid() {
    let fs = TestFs::new();
    let d = shared(&fs);
    let f = d.join("f");
    let (au, ag) = ALICE;
    as_user(au, ag, || {
        fs::write(&f, b"x").unwrap();
        setfacl(&["-m", "u:1002:rwx,o::r"], &f).unwrap();
        sys::chmod(&f, 0o640).unwrap();
        assert_eq!(
            getfacl(&f),
            lines(&[
                "user::rw-",
                "user:1002:rwx",
                "group::r--",
                "mask::r--",
                "other::---"
            ])
        );
        sys::chmod(&f, 0o777).unwrap();
        assert!(getfacl(&f).contains(&"mask::rwx".to_string()));
        assert!(getfacl(&f).contains(&"other::rwx".to_string()));
    });
    // A setgid file of a group Alice is not in: setting an ACL clears setgid (Linux's rule).
    let g = d.join("setgid");
    fs::write(&g, b"x").unwrap();
    sys::chown(&g, au, 4242).unwrap();
    sys::chmod(&g, 0o2750).unwrap();
    as_user(au, ag, || setfacl(&["-m", "u:1002:r"], &g)).unwrap();
    assert_eq!(perm(&g) & libc::S_ISGID, 0, "setgid cleared");
    // Root (CAP_FSETID) keeps it.
    sys::chmod(&g, 0o2750).unwrap();
    setfacl(&["-m", "u:1003:r"], &g).unwrap();
    assert_eq!(perm(&g) & libc::S_ISGID, libc::S_ISGID);
}
