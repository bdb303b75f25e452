//! DualFS on two loop block devices: mkfs (library) on the block devices, mount, write and read
//! a tree, remount, compare, checker on the block devices. The loop devices are detached
//! whatever happens.

#[macro_use]
mod common;

use common::tree::{self, CompareOpts, TreeSpec};
use common::*;
use std::fs;
use std::path::PathBuf;

#[test]
fn dualfs_on_loop_devices() {
    let loops: Vec<PathBuf>;
    {
        let mut fs = TestFs::builder()
            .sizes(128 << 20, 512 << 20)
            .loop_devices(true)
            .mount();
        loops = vec![fs.meta_path().to_path_buf(), fs.data_path().to_path_buf()];
        for l in &loops {
            assert!(
                l.to_str().unwrap().starts_with("/dev/loop"),
                "{} is not a loop device",
                l.display()
            );
            let m = fs::metadata(l).unwrap();
            use std::os::unix::fs::FileTypeExt;
            assert!(m.file_type().is_block_device());
        }
        if fs.is_dualfs() {
            let ty = mount_type(fs.path()).unwrap();
            assert!(ty == "fuse" || ty.starts_with("fuse."), "mounted as {ty}");
        }
        let host = TmpfsDir::new(1 << 30);
        let src = host.path().join("src");
        fs::create_dir(&src).unwrap();
        tree::generate(
            &src,
            &TreeSpec {
                seed: 5,
                dirs: 30,
                files: 400,
                ..TreeSpec::default()
            },
        );
        fs::write(src.join("big"), content(9, 20 << 20)).unwrap();
        let dst = fs.join("t");
        fs::create_dir(&dst).unwrap();
        tree::copy_tree(&src, &dst);
        tree::compare_trees(&src, &dst, CompareOpts::default());
        fs.remount();
        tree::compare_trees(&src, &dst, CompareOpts::default());
        fs.unmount();
    }
    // Dropping the TestFs detached both loop devices.
    for l in &loops {
        let name = l.file_name().unwrap().to_str().unwrap();
        let backing = format!("/sys/block/{name}/loop/backing_file");
        assert!(
            !std::path::Path::new(&backing).exists(),
            "{} still attached ({})",
            l.display(),
            fs::read_to_string(&backing).unwrap_or_default().trim()
        );
    }
}
