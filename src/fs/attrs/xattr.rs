//! Extended attributes: getxattr, setxattr, listxattr, removexattr, and what creating,
//! changing the mode of, and freeing an inode do to them.
//!
//! Attributes are records of the directory tree, keyed by (inode, generation and name hash,
//! name) (`betree::attrs`), so an attribute change is a tree mutation like a directory
//! entry's and reaches the log in the same transaction as the inode change it comes with
//! (ctime, the mode an ACL sets, the flags below), under the gate. Two `i_flags` bits say
//! whether the inode has attributes at all and whether any of them keeps its value in `VALUE`
//! blocks: the first answers every getxattr of a file without attributes — the kernel asks
//! for `security.capability` before each write — without touching the tree; the second tells
//! freeing an inode whether it must list the attributes to free their blocks, or can drop
//! them all with one range message without reading anything.
//!
//! What the kernel already enforces before a request reaches DualFS (with
//! `default_permissions`): read/write permission for `user.` and `trusted.`, CAP_SYS_ADMIN for
//! `trusted.` and for writing `security.`, `user.` only on regular files and directories,
//! ownership for ACLs, the 255-byte name and 64 KiB value limits. The core checks the
//! namespace rules again (it is called without FUSE too), and does what the kernel leaves to
//! the file system: unknown namespaces are EOPNOTSUPP, `trusted.` names are listed only to
//! privileged callers, and ACLs are validated and kept in step with the mode (`acl`).

use super::acl::{self, Acl};
use super::privileges::{capable, groups_of, CAP_FSETID, CAP_SYS_ADMIN};
use crate::betree::{AttrValue, Key, Message, Preloaded};
use crate::format::inode::{IFLAG_XATTRS, IFLAG_XATTR_BLOCKS};
use crate::format::node::{attr_range, ATTR_VALUE_MAX};
use crate::fs::clean::Admit;
use crate::fs::inode::{to_disk_time, InodeEntry, InodeState};
use crate::fs::types::*;
use crate::fs::Fs;
use crate::{FsError, Result};
use std::sync::Arc;

/// Longest attribute name, prefix included (XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// The names of an inode's attributes, each with its NUL, take at most this many bytes
/// (XATTR_LIST_MAX): a listing always fits what the kernel accepts.
pub const XATTR_NAMES_TOTAL_MAX: usize = 65536;
/// Names and values of an inode's attributes together take at most this many bytes.
pub const XATTR_TOTAL_MAX: usize = 256 * 1024;

/// ACL attributes a new node inherits from its directory: (name, value).
pub(crate) type InheritedAcls = Vec<(&'static [u8], Vec<u8>)>;

/// The namespaces Linux passes to a file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Namespace {
    User,
    Trusted,
    Security,
    /// `system.posix_acl_access` or `system.posix_acl_default`.
    Acl,
}

/// The namespace of a valid attribute name. ERANGE for an empty or too long name (as the
/// kernel answers), EINVAL for a prefix without a name, EOPNOTSUPP for any other namespace.
pub(crate) fn namespace(name: &[u8]) -> Result<Namespace> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(FsError::Errno(libc::ERANGE));
    }
    if name.contains(&0) {
        return Err(FsError::Errno(libc::EINVAL));
    }
    if name == acl::ACCESS || name == acl::DEFAULT {
        return Ok(Namespace::Acl);
    }
    for (prefix, ns) in [
        (&b"user."[..], Namespace::User),
        (b"trusted.", Namespace::Trusted),
        (b"security.", Namespace::Security),
    ] {
        if let Some(rest) = name.strip_prefix(prefix) {
            return if rest.is_empty() {
                Err(FsError::Errno(libc::EINVAL))
            } else {
                Ok(ns)
            };
        }
    }
    Err(FsError::Errno(libc::EOPNOTSUPP))
}

/// Only regular files and directories take `user.` attributes (Linux's rule: on others they
/// would let anyone with write access to a device node label it).
fn user_allowed(mode: u32) -> bool {
    matches!(mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFDIR)
}

/// Read access to attribute `name` of a file of `mode`: ENODATA where Linux hides it.
fn check_read(caller: &Caller, ns: Namespace, mode: u32) -> Result<()> {
    let hidden = match ns {
        Namespace::User => !user_allowed(mode),
        Namespace::Trusted => !capable(caller, CAP_SYS_ADMIN),
        _ => false,
    };
    if hidden {
        return Err(FsError::Errno(libc::ENODATA));
    }
    Ok(())
}

/// The attributes of an inode as one scan finds them.
pub(crate) struct AttrList {
    pub records: Vec<(Key, AttrValue)>,
}

impl AttrList {
    fn find(&self, name: &[u8]) -> Option<&(Key, AttrValue)> {
        self.records.iter().find(|(k, _)| &*k.name == name)
    }

    /// The `i_flags` attribute bits for these records.
    pub(crate) fn flags(&self) -> u32 {
        let mut f = 0;
        if !self.records.is_empty() {
            f |= IFLAG_XATTRS;
        }
        if self.records.iter().any(|(_, v)| !v.ids().is_empty()) {
            f |= IFLAG_XATTR_BLOCKS;
        }
        f
    }

    /// (bytes of the names with their NULs, bytes of names and values).
    fn totals(&self) -> (usize, usize) {
        self.records.iter().fold((0, 0), |(names, all), (k, v)| {
            (names + k.name.len() + 1, all + k.name.len() + v.len())
        })
    }
}

/// What freeing an inode leaves to do for its attributes, once its state lock is released.
#[must_use]
pub(crate) struct DroppedAttrs {
    ino: u64,
    generation: u32,
    /// Some attribute has value blocks: list them to free the blocks.
    blocks: bool,
}

/// A change of an inode's attributes, prepared before the gate (reads done) and carried out
/// under it.
enum Change {
    Set(Vec<u8>),
    Remove,
}

impl Fs {
    /// A stand-in for how a value of `len` bytes is stored (inline or in blocks): all the
    /// flags need to know of it.
    fn stored_shape(&self, len: usize) -> AttrValue {
        if len > crate::format::node::attr_inline_max(self.sb.block_size as usize) {
            AttrValue::Blocks {
                len: len as u32,
                ids: Arc::from(&[0u64][..]),
            }
        } else {
            AttrValue::Inline(Arc::from(&[][..]))
        }
    }

    /// The attributes of inode `e` (of its current generation), read from the tree; none
    /// without looking when its flags say it has none.
    pub(crate) fn attr_list(&self, st_flags: u32, ino: u64, generation: u32) -> Result<AttrList> {
        if st_flags & IFLAG_XATTRS == 0 {
            return Ok(AttrList {
                records: Vec::new(),
            });
        }
        let (lower, upper) = attr_range(ino, generation);
        Ok(AttrList {
            records: self.ns.tree.attr_scan(&self.nodes(), &lower, &upper)?,
        })
    }

    fn attr_identity(e: &InodeEntry) -> (u32, u32, u32) {
        let st = e.state.read();
        (st.d.flags, st.d.generation, st.d.mode)
    }

    /// The key of attribute `name` of `ino`, for `caller` to read; ENODATA, without looking in
    /// the tree, when its flags say the inode has no attributes.
    fn key_to_read(&self, caller: &Caller, ino: u64, name: &[u8]) -> Result<Key> {
        self.alive()?;
        let ns = namespace(name)?;
        let e = self.inode(ino)?;
        let (flags, generation, mode) = Self::attr_identity(&e);
        check_read(caller, ns, mode)?;
        if flags & IFLAG_XATTRS == 0 {
            return Err(FsError::Errno(libc::ENODATA));
        }
        Ok(self.ns.tree.attr_key(ino, generation, name))
    }

    /// The value of attribute `name`.
    pub fn getxattr(&self, caller: &Caller, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let key = self.key_to_read(caller, ino, name)?;
        self.ns
            .tree
            .attr_read(&self.nodes(), &key)?
            .ok_or(FsError::Errno(libc::ENODATA))
    }

    /// The length of attribute `name`'s value (the size probe: no value block is read).
    pub fn getxattr_len(&self, caller: &Caller, ino: u64, name: &[u8]) -> Result<usize> {
        let key = self.key_to_read(caller, ino, name)?;
        match self.ns.tree.attr_get(&self.nodes(), &key)? {
            Some(v) => Ok(v.len()),
            None => Err(FsError::Errno(libc::ENODATA)),
        }
    }

    /// The names of the attributes the caller may see, each followed by a NUL.
    pub fn listxattr(&self, caller: &Caller, ino: u64) -> Result<Vec<u8>> {
        self.alive()?;
        let e = self.inode(ino)?;
        let (flags, generation, _) = Self::attr_identity(&e);
        let list = self.attr_list(flags, ino, generation)?;
        let mut out = Vec::new();
        let mut privileged = None;
        for (k, _) in &list.records {
            if k.name.starts_with(b"trusted.")
                && !*privileged.get_or_insert_with(|| capable(caller, CAP_SYS_ADMIN))
            {
                continue;
            }
            out.extend_from_slice(&k.name);
            out.push(0);
        }
        Ok(out)
    }

    /// Set attribute `name` to `value`. `system.posix_acl_access` also sets the mode's
    /// permission bits (and is not stored when the mode says it all); the setgid bit goes when
    /// the caller is neither in the file's group nor holds CAP_FSETID, as Linux does.
    pub fn setxattr(
        &self,
        caller: &Caller,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: XattrFlags,
    ) -> Result<()> {
        let _admitted = self.admit(Admit::Change)?;
        let ns = namespace(name)?;
        if value.len() > ATTR_VALUE_MAX {
            return Err(FsError::Errno(libc::E2BIG));
        }
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        self.check_entry(&e, super::flags::Change::Modify)?;
        let (iflags, generation, mode, gid) = {
            let st = e.state.read();
            if st.deleted {
                return Err(FsError::Errno(libc::ENOENT));
            }
            (st.d.flags, st.d.generation, st.d.mode, st.d.gid)
        };
        let mut new_mode = None;
        let mut change = Change::Set(value.to_vec());
        match ns {
            Namespace::User if !user_allowed(mode) => return Err(FsError::Errno(libc::EPERM)),
            Namespace::Trusted if !capable(caller, CAP_SYS_ADMIN) => {
                return Err(FsError::Errno(libc::EPERM))
            }
            Namespace::Acl => {
                let parsed = Acl::decode(value)?;
                if name == acl::DEFAULT {
                    if mode & libc::S_IFMT != libc::S_IFDIR {
                        return Err(FsError::Errno(libc::EACCES));
                    }
                } else {
                    let (mut m, equivalent) = parsed.equiv_mode(mode);
                    let in_group = caller.gid == gid || groups_of(caller.pid).contains(&gid);
                    if !in_group && !capable(caller, CAP_FSETID) {
                        m &= !libc::S_ISGID;
                    }
                    new_mode = Some(m);
                    if equivalent {
                        // The mode says it all: no ACL is kept (as ext4 and XFS do).
                        change = Change::Remove;
                    }
                }
            }
            _ => {}
        }
        let list = self.attr_list(iflags, ino, generation)?;
        let old = list.find(name);
        if flags.create && old.is_some() {
            return Err(FsError::Errno(libc::EEXIST));
        }
        if flags.replace && old.is_none() {
            return Err(FsError::Errno(libc::ENODATA));
        }
        if let Change::Set(v) = &change {
            let (names, all) = list.totals();
            let (old_names, old_all) =
                old.map_or((0, 0), |(k, v)| (k.name.len() + 1, k.name.len() + v.len()));
            if names - old_names + name.len() + 1 > XATTR_NAMES_TOTAL_MAX
                || all - old_all + name.len() + v.len() > XATTR_TOTAL_MAX
            {
                return Err(FsError::Errno(libc::ENOSPC));
            }
        }
        let _pre = self.preload_attr_change(&e, name, &change)?;
        let _g = self.gate_shared();
        self.apply_attr_change(&e, &list, name, &change)?;
        let mut st = e.state.write();
        if let Some(m) = new_mode {
            st.d.mode = m;
        }
        st.d.ctime = to_disk_time(Timespec::now());
        self.mark_dirty(&e, &mut st);
        let mode = st.d.mode;
        drop(st);
        drop(_g);
        self.record(crate::fs::intent::records::IntentOp::SetXattr {
            ino,
            name: name.to_vec(),
            value: value.to_vec(),
            flags,
            mode,
        });
        Ok(())
    }

    /// Remove attribute `name` (ENODATA if there is none).
    pub fn removexattr(&self, caller: &Caller, ino: u64, name: &[u8]) -> Result<()> {
        let _admitted = self.admit(Admit::Change)?;
        let ns = namespace(name)?;
        let e = self.inode(ino)?;
        let _op = e.op.lock_arc();
        self.check_entry(&e, super::flags::Change::Modify)?;
        let (iflags, generation, mode) = {
            let st = e.state.read();
            if st.deleted {
                return Err(FsError::Errno(libc::ENOENT));
            }
            (st.d.flags, st.d.generation, st.d.mode)
        };
        match ns {
            Namespace::User if !user_allowed(mode) => return Err(FsError::Errno(libc::EPERM)),
            Namespace::Trusted if !capable(caller, CAP_SYS_ADMIN) => {
                return Err(FsError::Errno(libc::EPERM))
            }
            _ => {}
        }
        let list = self.attr_list(iflags, ino, generation)?;
        if list.find(name).is_none() {
            return Err(FsError::Errno(libc::ENODATA));
        }
        let _pre = self.preload_attr_change(&e, name, &Change::Remove)?;
        let _g = self.gate_shared();
        self.apply_attr_change(&e, &list, name, &Change::Remove)?;
        let mut st = e.state.write();
        st.d.ctime = to_disk_time(Timespec::now());
        self.mark_dirty(&e, &mut st);
        let mode = st.d.mode;
        drop(st);
        drop(_g);
        self.record(crate::fs::intent::records::IntentOp::RemoveXattr {
            ino,
            name: name.to_vec(),
            mode,
        });
        Ok(())
    }

    /// Carry out `change` of attribute `name` of `e` (whose attributes are `list`) in the
    /// tree and in its flags; the caller holds `e`'s op lock and the gate, and marks `e`
    /// dirty. Removing an absent attribute does nothing.
    fn apply_attr_change(
        &self,
        e: &Arc<InodeEntry>,
        list: &AttrList,
        name: &[u8],
        change: &Change,
    ) -> Result<()> {
        let generation = e.state.read().d.generation;
        let key = self.ns.tree.attr_key(e.ino, generation, name);
        let old = list.find(name);
        let replaced = old.map(|(_, v)| v.ids().to_vec()).unwrap_or_default();
        let mut after: Vec<(Key, AttrValue)> = list
            .records
            .iter()
            .filter(|(k, _)| &*k.name != name)
            .cloned()
            .collect();
        match change {
            Change::Set(value) => {
                self.ns
                    .tree
                    .attr_set(&self.nodes(), key.clone(), e.ino, value, &replaced)?;
                after.push((key, self.stored_shape(value.len())));
            }
            Change::Remove if old.is_none() => return Ok(()),
            Change::Remove => self.ns.tree.attr_remove(&self.nodes(), key, &replaced)?,
        }
        let flags = AttrList { records: after }.flags();
        let mut st = e.state.write();
        st.d.flags = (st.d.flags & !(IFLAG_XATTRS | IFLAG_XATTR_BLOCKS)) | flags;
        Ok(())
    }

    /// The new mode and ACL attributes of a node made in directory `pe` with `mode` asked
    /// for: the directory's default ACL, if it has one, limits the mode and becomes the new
    /// node's access ACL (and a new directory's default ACL); otherwise the caller's umask
    /// applies. Symbolic links take neither.
    pub(crate) fn inherit_acl(
        &self,
        caller: &Caller,
        pe: &InodeEntry,
        mode: u32,
    ) -> Result<(u32, InheritedAcls)> {
        if mode & libc::S_IFMT == libc::S_IFLNK {
            return Ok((mode, Vec::new()));
        }
        let (flags, generation) = {
            let st = pe.state.read();
            (st.d.flags, st.d.generation)
        };
        let default = if flags & IFLAG_XATTRS != 0 {
            let key = self.ns.tree.attr_key(pe.ino, generation, acl::DEFAULT);
            self.ns.tree.attr_read(&self.nodes(), &key)?
        } else {
            None
        };
        let Some(default) = default else {
            return Ok((mode & !(caller.umask & 0o777), Vec::new()));
        };
        let parsed = Acl::decode(&default).map_err(|_| {
            FsError::corrupt(
                "ACL",
                format!("directory {}'s default ACL is invalid", pe.ino),
            )
        })?;
        let mut access = parsed.clone();
        let (mode, store) = access.create_masq(mode);
        let mut attrs: Vec<(&'static [u8], Vec<u8>)> = Vec::new();
        if store {
            attrs.push((acl::ACCESS, access.encode()));
        }
        if mode & libc::S_IFMT == libc::S_IFDIR {
            attrs.push((acl::DEFAULT, default));
        }
        Ok((mode, attrs))
    }

    /// Store the attributes a new inode inherits (under the gate, right after its entry;
    /// nothing else can know the inode yet). Returns its attribute flags.
    pub(crate) fn store_inherited(
        &self,
        ino: u64,
        generation: u32,
        attrs: &[(&'static [u8], Vec<u8>)],
    ) -> Result<u32> {
        let mut records = Vec::new();
        for (name, value) in attrs {
            let key = self.ns.tree.attr_key(ino, generation, name);
            if let Err(e) = self
                .ns
                .tree
                .attr_set(&self.nodes(), key.clone(), ino, value, &[])
            {
                // Undo what went in: a tree mutation is all or nothing, so only whole
                // records are there.
                let (lower, upper) = attr_range(ino, generation);
                let ids: Vec<u64> = self
                    .ns
                    .tree
                    .attr_scan(&self.nodes(), &lower, &upper)
                    .map(|r| r.iter().flat_map(|(_, v)| v.ids().to_vec()).collect())
                    .unwrap_or_default();
                let _ = self.ns.tree.delete_range(&self.nodes(), lower, upper, &ids);
                return Err(e);
            }
            records.push((key, self.stored_shape(value.len())));
        }
        Ok(AttrList { records }.flags())
    }

    /// chmod of an inode with an access ACL: the ACL's owner, group class and other entries
    /// follow the new mode (in the same transaction; the caller holds the op lock and the
    /// gate). Read before the gate with `acl_for_chmod`.
    pub(crate) fn acl_for_chmod(&self, e: &InodeEntry, mode: u32) -> Result<Option<Vec<u8>>> {
        let (flags, generation) = {
            let st = e.state.read();
            (st.d.flags, st.d.generation)
        };
        if flags & IFLAG_XATTRS == 0 {
            return Ok(None);
        }
        let key = self.ns.tree.attr_key(e.ino, generation, acl::ACCESS);
        let Some(value) = self.ns.tree.attr_read(&self.nodes(), &key)? else {
            return Ok(None);
        };
        let mut parsed = Acl::decode(&value).map_err(|_| {
            FsError::corrupt("ACL", format!("inode {}'s access ACL is invalid", e.ino))
        })?;
        parsed.chmod(mode);
        Ok(Some(parsed.encode()))
    }

    /// Load before the gate what `store_chmod_acl` of `value` will need.
    pub(crate) fn preload_chmod_acl(
        &self,
        e: &InodeEntry,
        value: &Option<Vec<u8>>,
    ) -> Result<Option<Preloaded<'_>>> {
        match value {
            Some(v) => Ok(Some(self.preload_attr_change(
                e,
                acl::ACCESS,
                &Change::Set(v.clone()),
            )?)),
            None => Ok(None),
        }
    }

    /// Store the access ACL `acl_for_chmod` made.
    pub(crate) fn store_chmod_acl(&self, e: &Arc<InodeEntry>, value: Vec<u8>) -> Result<()> {
        let (flags, generation) = {
            let st = e.state.read();
            (st.d.flags, st.d.generation)
        };
        let list = self.attr_list(flags, e.ino, generation)?;
        self.apply_attr_change(e, &list, acl::ACCESS, &Change::Set(value))
    }

    /// The message that drops every attribute of `e` if it is freed now (`drop_attrs`), for
    /// preloading before the gate; None if it has none.
    pub(crate) fn attrs_drop_message(&self, e: &InodeEntry) -> Option<Message> {
        let st = e.state.read();
        (st.d.flags & IFLAG_XATTRS != 0).then(|| {
            let (lower, upper) = attr_range(e.ino, st.d.generation);
            self.ns.tree.delete_range_message(lower, upper)
        })
    }

    /// Load before the gate what `apply_attr_change` of `name` of `e` will need in the tree.
    fn preload_attr_change(
        &self,
        e: &InodeEntry,
        name: &[u8],
        change: &Change,
    ) -> Result<Preloaded<'_>> {
        let generation = e.state.read().d.generation;
        let key = self.ns.tree.attr_key(e.ino, generation, name);
        let message = match change {
            Change::Set(value) => self.ns.tree.attr_set_message(key, value),
            Change::Remove => self.ns.tree.attr_remove_message(key),
        };
        self.ns.tree.preload(&self.nodes(), &[message])
    }

    /// Freeing inode `st`: what its attributes need (None without any). Called by `destroy`
    /// with the state lock held; `drop_attrs` does the rest after it is released.
    pub(crate) fn attrs_of_freed(ino: u64, st: &InodeState) -> Option<DroppedAttrs> {
        (st.d.flags & IFLAG_XATTRS != 0).then_some(DroppedAttrs {
            ino,
            generation: st.d.generation,
            blocks: st.d.flags & IFLAG_XATTR_BLOCKS != 0,
        })
    }

    /// Remove every attribute of a freed inode in one range message (in the transaction that
    /// frees it: the caller still holds the gate). Only an inode with value blocks has its
    /// attributes read, to free the blocks.
    pub(crate) fn drop_attrs(&self, dropped: Option<DroppedAttrs>) -> Result<()> {
        let Some(d) = dropped else { return Ok(()) };
        let (lower, upper) = attr_range(d.ino, d.generation);
        let ids: Vec<u64> = if d.blocks {
            self.ns
                .tree
                .attr_scan(&self.nodes(), &lower, &upper)?
                .iter()
                .flat_map(|(_, v)| v.ids().to_vec())
                .collect()
        } else {
            Vec::new()
        };
        let result = self.ns.tree.delete_range(&self.nodes(), lower, upper, &ids);
        if let Err(e) = &result {
            log::error!("inode {}: its attributes could not be removed: {e}", d.ino);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_and_name_errors() {
        assert_eq!(namespace(b"user.a").unwrap(), Namespace::User);
        assert_eq!(namespace(b"trusted.gfid").unwrap(), Namespace::Trusted);
        assert_eq!(namespace(b"security.selinux").unwrap(), Namespace::Security);
        assert_eq!(namespace(acl::ACCESS).unwrap(), Namespace::Acl);
        assert_eq!(namespace(acl::DEFAULT).unwrap(), Namespace::Acl);
        let errno = |n: &[u8]| namespace(n).unwrap_err().errno();
        assert_eq!(errno(b""), libc::ERANGE);
        assert_eq!(errno(&[b'u'; 256]), libc::ERANGE);
        assert_eq!(errno(b"user."), libc::EINVAL);
        assert_eq!(errno(b"system.nfs4_acl"), libc::EOPNOTSUPP);
        assert_eq!(errno(b"foo.bar"), libc::EOPNOTSUPP);
        assert_eq!(errno(b"user"), libc::EOPNOTSUPP);
        let mut long = b"user.".to_vec();
        long.resize(255, b'x');
        assert_eq!(namespace(&long).unwrap(), Namespace::User);
    }
}
