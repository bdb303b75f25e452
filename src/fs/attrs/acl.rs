//! POSIX ACLs as the kernel passes them in `system.posix_acl_access` / `_default`: the xattr
//! representation (a little-endian version-2 header, then 8-byte entries), its validation,
//! and the rules that keep a file's mode and its access ACL in step — the ones Linux applies
//! in `fs/posix_acl.c` (`posix_acl_valid`, `posix_acl_equiv_mode`, `posix_acl_create_masq`,
//! `__posix_acl_chmod_masq`). With FUSE_POSIX_ACL the kernel caches and enforces ACLs but
//! leaves these to the file system.

use crate::{FsError, Result};

pub const ACCESS: &[u8] = b"system.posix_acl_access";
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const HEADER: usize = 4;
const ENTRY: usize = 8;

pub const USER_OBJ: u16 = 0x01;
pub const USER: u16 = 0x02;
pub const GROUP_OBJ: u16 = 0x04;
pub const GROUP: u16 = 0x08;
pub const MASK: u16 = 0x10;
pub const OTHER: u16 = 0x20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    pub tag: u16,
    /// rwx bits, 0..=7.
    pub perm: u16,
    /// User or group id for `USER` and `GROUP` entries.
    pub id: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    pub entries: Vec<AclEntry>,
}

fn invalid<T>() -> Result<T> {
    Err(FsError::Errno(libc::EINVAL))
}

impl Acl {
    /// Parse and validate an ACL value; EINVAL for anything the kernel would refuse (wrong
    /// version or size, unknown tags or permission bits, entries out of order, a missing
    /// mask) and for an ACL without entries.
    pub fn decode(value: &[u8]) -> Result<Acl> {
        if value.len() < HEADER + ENTRY || (value.len() - HEADER) % ENTRY != 0 {
            return invalid();
        }
        if u32::from_le_bytes(value[..4].try_into().unwrap()) != VERSION {
            return invalid();
        }
        let entries = value[HEADER..]
            .chunks_exact(ENTRY)
            .map(|e| AclEntry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        let acl = Acl { entries };
        acl.validate()?;
        Ok(acl)
    }

    /// The order `posix_acl_valid` demands: the owner, named users, the owning group, named
    /// groups, the mask (required when there are named entries), others.
    fn validate(&self) -> Result<()> {
        #[derive(PartialEq)]
        enum State {
            UserObj,
            User,
            Group,
            Other,
            Done,
        }
        let mut state = State::UserObj;
        let mut needs_mask = false;
        for e in &self.entries {
            if e.perm & !7 != 0 {
                return invalid();
            }
            state = match (e.tag, state) {
                (USER_OBJ, State::UserObj) => State::User,
                (USER, State::User) => {
                    needs_mask = true;
                    State::User
                }
                (GROUP_OBJ, State::User) => State::Group,
                (GROUP, State::Group) => {
                    needs_mask = true;
                    State::Group
                }
                (MASK, State::Group) => State::Other,
                (OTHER, State::Other) => State::Done,
                (OTHER, State::Group) if !needs_mask => State::Done,
                _ => return invalid(),
            };
        }
        if state == State::Done {
            Ok(())
        } else {
            invalid()
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + ENTRY * self.entries.len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    /// The permission bits the ACL gives (the mask's for the group class when there is one)
    /// put into `mode`, and whether the mode says it all (no named entries and no mask), in
    /// which case the ACL need not be stored.
    pub fn equiv_mode(&self, mode: u32) -> (u32, bool) {
        let mut bits = 0u32;
        let mut equivalent = true;
        for e in &self.entries {
            let perm = (e.perm & 7) as u32;
            match e.tag {
                USER_OBJ => bits |= perm << 6,
                GROUP_OBJ => bits |= perm << 3,
                OTHER => bits |= perm,
                MASK => {
                    bits = (bits & !0o070) | perm << 3;
                    equivalent = false;
                }
                _ => equivalent = false,
            }
        }
        ((mode & !0o777) | bits, equivalent)
    }

    /// A new file's access ACL from its directory's default ACL: every class is limited by
    /// the mode asked for, and the mode by the ACL. Returns the mode and whether the ACL must
    /// be stored (it has named entries or a mask).
    pub fn create_masq(&mut self, mode: u32) -> (u32, bool) {
        let mut m = mode & 0o777;
        let mut not_equiv = false;
        let (mut group_obj, mut mask) = (None, None);
        for (i, e) in self.entries.iter_mut().enumerate() {
            match e.tag {
                USER_OBJ => {
                    e.perm &= ((m >> 6) & 7) as u16;
                    m &= (e.perm as u32) << 6 | !0o700;
                }
                OTHER => {
                    e.perm &= (m & 7) as u16;
                    m &= e.perm as u32 | !0o007;
                }
                GROUP_OBJ => group_obj = Some(i),
                MASK => {
                    mask = Some(i);
                    not_equiv = true;
                }
                _ => not_equiv = true,
            }
        }
        // `validate` guarantees the owning group: it is the mask's stand-in when there is none.
        if let Some(i) = mask.or(group_obj) {
            let e = &mut self.entries[i];
            e.perm &= ((m >> 3) & 7) as u16;
            m &= (e.perm as u32) << 3 | !0o070;
        }
        ((mode & !0o777) | (m & 0o777), not_equiv)
    }

    /// After chmod: the owner, group class (the mask, else the owning group) and others take
    /// the new permission bits; named entries keep theirs.
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.entries.iter().any(|e| e.tag == MASK);
        for e in &mut self.entries {
            match e.tag {
                USER_OBJ => e.perm = ((mode >> 6) & 7) as u16,
                OTHER => e.perm = (mode & 7) as u16,
                MASK => e.perm = ((mode >> 3) & 7) as u16,
                GROUP_OBJ if !has_mask => e.perm = ((mode >> 3) & 7) as u16,
                _ => {}
            }
        }
    }
}

/// Is `value` an ACL Linux would accept?
pub(crate) fn valid_acl(value: &[u8]) -> bool {
    Acl::decode(value).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl {
            entries: entries
                .iter()
                .map(|&(tag, perm, id)| AclEntry { tag, perm, id })
                .collect(),
        }
    }

    /// The id of entries that name no user or group (ACL_UNDEFINED_ID).
    const U: u32 = u32::MAX;

    #[test]
    fn round_trip_and_the_kernels_byte_layout() {
        let a = acl(&[
            (USER_OBJ, 6, U),
            (USER, 4, 1000),
            (GROUP_OBJ, 4, U),
            (MASK, 6, U),
            (OTHER, 0, U),
        ]);
        let bytes = a.encode();
        assert_eq!(bytes.len(), 4 + 5 * 8);
        assert_eq!(&bytes[..4], &[2, 0, 0, 0]);
        assert_eq!(&bytes[12..20], &[2, 0, 4, 0, 0xe8, 0x03, 0, 0]);
        assert_eq!(Acl::decode(&bytes).unwrap(), a);
    }

    #[test]
    fn invalid_acls_are_refused() {
        let bad = |a: Acl| Acl::decode(&a.encode()).is_err();
        // No mask with a named entry; entries out of order; unknown tag; perm bits; two owners.
        assert!(bad(acl(&[
            (USER_OBJ, 6, U),
            (USER, 4, 1),
            (GROUP_OBJ, 4, U),
            (OTHER, 0, U)
        ])));
        assert!(bad(acl(&[
            (GROUP_OBJ, 4, U),
            (USER_OBJ, 6, U),
            (OTHER, 0, U)
        ])));
        assert!(bad(acl(&[
            (USER_OBJ, 6, U),
            (GROUP_OBJ, 4, U),
            (0x40, 0, U),
            (OTHER, 0, U)
        ])));
        assert!(bad(acl(&[
            (USER_OBJ, 8, U),
            (GROUP_OBJ, 4, U),
            (OTHER, 0, U)
        ])));
        assert!(bad(acl(&[
            (USER_OBJ, 6, U),
            (USER_OBJ, 6, U),
            (GROUP_OBJ, 4, U),
            (OTHER, 0, U)
        ])));
        assert!(bad(acl(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U)])));
        assert!(bad(acl(&[])));
        let good = acl(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 0, U)]).encode();
        assert!(Acl::decode(&good[..good.len() - 1]).is_err());
        let mut v1 = good.clone();
        v1[0] = 1;
        assert!(Acl::decode(&v1).is_err());
        assert!(Acl::decode(&good).is_ok());
    }

    #[test]
    fn mode_follows_the_mask_and_plain_acls_are_the_mode() {
        let plain = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 1, U)]);
        assert_eq!(plain.equiv_mode(0o104_000), (0o104_751, true));
        let named = acl(&[
            (USER_OBJ, 6, U),
            (USER, 7, 1000),
            (GROUP_OBJ, 4, U),
            (MASK, 2, U),
            (OTHER, 0, U),
        ]);
        assert_eq!(named.equiv_mode(0o100_777), (0o100_620, false));
    }

    #[test]
    fn inheritance_limits_acl_and_mode_both_ways() {
        // Default: owner rwx, user 1000 rwx, group r-x, mask rwx, other r-x; asked 0666.
        let mut d = acl(&[
            (USER_OBJ, 7, U),
            (USER, 7, 1000),
            (GROUP_OBJ, 5, U),
            (MASK, 7, U),
            (OTHER, 5, U),
        ]);
        let (mode, store) = d.create_masq(0o100_666);
        assert_eq!(mode, 0o100_664);
        assert!(store);
        assert_eq!(
            d.entries.iter().map(|e| e.perm).collect::<Vec<_>>(),
            vec![6, 7, 5, 6, 4]
        );
        // Without named entries or a mask the mode says it all.
        let mut p = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 0, U)]);
        assert_eq!(p.create_masq(0o040_777), (0o040_750, false));
    }

    #[test]
    fn chmod_sets_owner_mask_and_other() {
        let mut a = acl(&[
            (USER_OBJ, 7, U),
            (USER, 7, 1000),
            (GROUP_OBJ, 5, U),
            (MASK, 7, U),
            (OTHER, 5, U),
        ]);
        a.chmod(0o640);
        assert_eq!(
            a.entries.iter().map(|e| e.perm).collect::<Vec<_>>(),
            vec![6, 7, 5, 4, 0]
        );
        let mut p = acl(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 5, U)]);
        p.chmod(0o710);
        assert_eq!(
            p.entries.iter().map(|e| e.perm).collect::<Vec<_>>(),
            vec![7, 1, 0]
        );
    }
}
