//! Pass 7, attributes against inodes: every extended attribute belongs to an allocated inode
//! of the generation its key names (else it outlived its inode), has a name of a namespace
//! Linux passes (`user.` only on regular files and directories, a default ACL only on
//! directories), an ACL value that parses, and fits its inode's limits; and every inode's
//! attribute flags say exactly what it has — a missing flag would hide its attributes, an
//! extra one costs a tree lookup per getxattr. (Pass 6 already read every value block.)

use super::context::Sink;
use super::findings::Finding;
use super::pass2_inodes::Inodes;
use super::pass6_tree::{AttrRecord, Namespace};
use crate::format::inode::{IFLAG_XATTRS, IFLAG_XATTR_BLOCKS};
use crate::format::node::attr_generation;
use crate::fs::{XATTR_NAMES_TOTAL_MAX, XATTR_TOTAL_MAX};
use std::collections::HashMap;

pub const NAME: &str = "attributes";

/// What is wrong with an attribute of an inode of `mode` by its name and value, if anything.
fn bad_record(a: &AttrRecord, mode: u32) -> Option<String> {
    let ns = match crate::fs::xattr_namespace(&a.name) {
        Ok(ns) => ns,
        Err(_) => return Some("a name of no namespace Linux passes".into()),
    };
    let fmt = mode & libc::S_IFMT;
    match ns {
        crate::fs::XattrNamespace::User if fmt != libc::S_IFREG && fmt != libc::S_IFDIR => {
            Some("a user attribute on something that is neither a file nor a directory".into())
        }
        crate::fs::XattrNamespace::Acl => {
            if a.name.ends_with(b"default") && fmt != libc::S_IFDIR {
                return Some("a default ACL on something that is not a directory".into());
            }
            match &a.value {
                Some(v) if crate::fs::valid_acl(v) => None,
                _ => Some("an ACL that does not parse".into()),
            }
        }
        _ => None,
    }
}

pub fn run(sink: &mut Sink, ns: &Namespace, inodes: &Inodes) {
    if !ns.attrs_known {
        return;
    }
    let bad = |sink: &mut Sink, a: &AttrRecord, why: &str| a.report_bad(sink, NAME, why);
    // Per inode: (flags its kept attributes call for, names bytes, all bytes).
    let mut have: HashMap<u64, (u32, usize, usize)> = HashMap::new();
    for a in &ns.attrs {
        let Some(info) = inodes.good.get(&a.ino) else {
            if !inodes.unreadable.contains(&a.ino) {
                bad(sink, a, "its inode is free");
            }
            continue;
        };
        if attr_generation(a.hash) != info.disk.generation {
            bad(
                sink,
                a,
                &format!(
                    "it belongs to generation {} of the inode, which is at {}",
                    attr_generation(a.hash),
                    info.disk.generation
                ),
            );
            continue;
        }
        if let Some(why) = bad_record(a, info.disk.mode) {
            bad(sink, a, &why);
            continue;
        }
        let (flags, names, all) = have.entry(a.ino).or_insert((IFLAG_XATTRS, 0, 0));
        if *names + a.name.len() + 1 > XATTR_NAMES_TOTAL_MAX
            || *all + a.name.len() + a.len > XATTR_TOTAL_MAX
        {
            bad(
                sink,
                a,
                "the inode's attributes are past their limits with it",
            );
            continue;
        }
        *names += a.name.len() + 1;
        *all += a.name.len() + a.len;
        if !a.ids.is_empty() {
            *flags |= IFLAG_XATTR_BLOCKS;
        }
    }
    for (&ino, info) in inodes.good.iter() {
        let want = have.get(&ino).map_or(0, |h| h.0);
        let got = info.disk.flags & (IFLAG_XATTRS | IFLAG_XATTR_BLOCKS);
        if got == want {
            continue;
        }
        sink.found(Finding::AttrFlags { ino });
        let message = format!(
            "inode {ino}: its attribute flags are {got:#x}, its attributes call for {want:#x}"
        );
        if want & !got != 0 {
            sink.error(NAME, format!("{message} (attributes hidden)"));
        } else {
            sink.warning(NAME, message);
        }
    }
}
