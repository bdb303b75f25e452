//! A POSIX ACL as the kernel passes it in system.posix_acl_*: parse and validate; what passes
//! re-encodes to itself, and the mode rules (equivalence, inheritance, chmod) keep it valid.
#![no_main]
use dualfs::fs::acl::Acl;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(acl) = Acl::decode(data) else { return };
    assert_eq!(acl.encode(), data);
    let mode = 0o100_000 | u32::from(data.len() as u16) & 0o7777;
    let _ = acl.equiv_mode(mode);
    let mut inherited = acl.clone();
    let _ = inherited.create_masq(mode);
    Acl::decode(&inherited.encode()).expect("inherited ACL stays valid");
    let mut changed = acl;
    changed.chmod(mode);
    Acl::decode(&changed.encode()).expect("chmod keeps the ACL valid");
});
