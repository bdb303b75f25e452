//! End to end through the kernel: a tree copied onto a FUSE-mounted DualFS, damaged on the
//! devices after unmount, repaired by fsck-dualfs, mounted again through FUSE: everything
//! that was there is there, byte for byte, and the checker finds the file system clean.

#[path = "../../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;
mod support;

use common::tree::{compare_trees, copy_tree, generate, CompareOpts, TreeSpec};
use common::TestFs;
use support::{fsck, ino_of, inode_at, rewrite_inode_at};

#[test]
fn repaired_file_system_mounts_through_fuse_with_everything_in_place() {
    let src = tempfile::tempdir().unwrap();
    generate(
        src.path(),
        &TreeSpec {
            seed: 4,
            dirs: 20,
            files: 200,
            max_file: 256 << 10,
            ..TreeSpec::default()
        },
    );
    let mut fs = TestFs::builder().sizes(64 << 20, 512 << 20).mount();
    assert!(fs.is_dualfs(), "this test is about DualFS");
    std::fs::create_dir(fs.join("tree")).unwrap();
    copy_tree(src.path(), &fs.join("tree"));
    std::fs::write(fs.join("victim"), vec![9u8; 50_000]).unwrap();
    fs.unmount(); // and the checker finds it clean

    let (meta, data) = (fs.meta_path().to_path_buf(), fs.data_path().to_path_buf());
    // Damage only the checker's cross-checks find: a wrong link count, a directory size, and
    // a file whose only name is gone (its inode reachable from nowhere).
    let victim = ino_of(&meta, &data, "victim");
    let tree = ino_of(&meta, &data, "tree");
    rewrite_inode_at(&meta, victim, |d| d.nlink = 3);
    rewrite_inode_at(&meta, tree, |d| d.size += 5);
    let before = (std::fs::read(&meta).unwrap(), std::fs::read(&data).unwrap());
    let (code, out) = fsck(&[&"-f", &"-n", &meta, &data]);
    assert_eq!(code, 4, "{out}");
    assert!(before == (std::fs::read(&meta).unwrap(), std::fs::read(&data).unwrap()));
    let (code, out) = fsck(&[&"-f", &"-y", &meta, &data]);
    assert_eq!(code, 1, "-y repairs:\n{out}");
    let (code, out) = fsck(&[&"-f", &"-n", &meta, &data]);
    assert_eq!(code, 0, "a second run is clean:\n{out}");
    assert_eq!(inode_at(&meta, victim).nlink, 1);

    // Through FUSE again: the tree is whole, the victim reads back.
    fs.mount();
    compare_trees(src.path(), &fs.join("tree"), CompareOpts::default());
    assert_eq!(std::fs::read(fs.join("victim")).unwrap(), vec![9u8; 50_000]);
    std::fs::write(fs.join("after-repair"), b"new work").unwrap();
    fs.unmount(); // checker clean again
}
