//! The daemon writes everything and a clean checkpoint however it is stopped: umount (the
//! rest of the suite), or a signal. Afterwards the checker is clean and the data is there.

mod common;

use common::*;
use std::fs;

fn clean_flag(t: &TestFs) -> bool {
    let meta = open_device(t.meta_path(), true);
    let sb = dualfs::fs::read_superblock(&meta).unwrap();
    dualfs::log::checkpoint::read_newest(&sb, &meta)
        .unwrap()
        .is_clean()
}

fn stop_by(sig: i32) {
    let mut t = TestFs::new();
    fs::create_dir(t.join("d")).unwrap();
    for i in 0..200 {
        fs::write(t.join(format!("d/f{i}")), format!("content {i}")).unwrap();
    }
    // Nothing was fsync'd: only the shutdown path can have written it all.
    t.stop_with_signal(sig);
    assert!(
        clean_flag(&t),
        "the last checkpoint is not marked clean after signal {sig}"
    );
    t.mount();
    for i in 0..200 {
        assert_eq!(
            fs::read_to_string(t.join(format!("d/f{i}"))).unwrap(),
            format!("content {i}")
        );
    }
    t.unmount();
    assert!(clean_flag(&t));
}

#[test]
fn sigterm_unmounts_and_writes_a_clean_checkpoint() {
    stop_by(libc::SIGTERM);
}

#[test]
fn sigint_and_sighup_do_the_same() {
    stop_by(libc::SIGINT);
    stop_by(libc::SIGHUP);
}
