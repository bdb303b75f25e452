//! What a correct file system looks like to the checker: no problems at all.

use super::damage::{layout, read_block, zero_block};
use super::image::{file, quiet_mount_options, workload, Image, Mode, BS, MANY, ROOT, U};
use super::*;
use crate::format::checkpoint::CP_CLEAN;
use crate::format::summary::{Summary, SS_CONT};
use std::sync::OnceLock;

/// The workload image, built once; tests damage copies of it.
pub fn workload_image() -> Image {
    static BASE: OnceLock<Image> = OnceLock::new();
    BASE.get_or_init(|| Image::after(workload)).copy()
}

in_both_modes!(
    fresh_image_is_clean,
    fresh_image_is_clean_through_the_tree,
    |mode| {
        let r = Image::fresh().check(mode);
        assert!(r.problems.is_empty(), "{r}");
        let s = &r.stats;
        assert_eq!((s.inodes, s.directories, s.entries), (2, 2, 1), "{r}");
        assert_eq!(s.checkpoint_serial, 1);
        assert!(s.checkpoint_clean);
        assert_eq!(s.transactions_rolled_forward, 0);
        assert_eq!(s.data_blocks_used, 0);
        assert!(s.log_blocks_live > 0);
    }
);

in_both_modes!(
    workload_image_is_clean,
    workload_image_is_clean_through_the_tree,
    |mode| {
        let img = workload_image();
        let r = img.check(mode);
        assert!(r.problems.is_empty(), "{r}");
        let s = &r.stats;
        assert_eq!(s.orphans, 1, "the file left open after unlink: {r}");
        assert_eq!((s.symlinks, s.special_files), (3, 2), "{r}");
        assert_eq!(s.directories, 6, "root, lost+found, many, a, b, sub: {r}");
        assert_eq!(s.entries, 17 + MANY / 2, "{r}");
        assert_eq!(
            s.inodes,
            s.directories + s.files + s.symlinks + s.special_files
        );
        assert!(s.checkpoint_clean);
        assert_eq!(s.data_blocks_used, 567 + MANY / 2, "{r}");
    }
);

/// A crash after fsync: the newest checkpoint is followed by transactions that roll-forward
/// applies. The state after roll-forward is as consistent as after an unmount.
fn crashed_image() -> Image {
    let img = Image::fresh();
    let fs = img.mount_with(quiet_mount_options());
    workload(&fs);
    let f = file(&fs, ROOT, b"after-the-checkpoint", &[(0, 3 * BS as usize)]);
    fs.fsync(f, false).unwrap();
    let crashed = Image {
        listing: img.list(&fs),
        ..img.copy()
    };
    fs.unmount().unwrap();
    crashed
}

in_both_modes!(
    crash_image_rolls_forward_cleanly,
    crash_image_rolls_forward_cleanly_through_the_tree,
    |mode| {
        let img = crashed_image();
        let before = img.meta.snapshot();
        let r = img.check(mode);
        assert!(
            img.meta.snapshot() == before,
            "the check wrote to the device"
        );
        assert!(r.is_clean(), "{r}");
        assert!(!r.stats.checkpoint_clean);
        assert!(r.stats.transactions_rolled_forward >= 1, "{r}");
        assert_warning(&r, CHECKPOINTS, "not cleanly unmounted");
    }
);

#[test]
fn log_after_a_clean_checkpoint_is_a_warning() {
    let img = crashed_image();
    let cp = super::damage::layout(&img).cp;
    super::damage::rewrite_checkpoint(
        &img,
        crate::format::checkpoint::Checkpoint::region(cp.serial),
        |c| c.flags |= CP_CLEAN,
    );
    let r = img.check(Mode::Listed);
    assert!(r.is_clean(), "{r}");
    assert_warning(&r, CHECKPOINTS, "the log continues after clean checkpoint");
}

#[test]
fn report_lists_problems_and_sums_up() {
    let img = workload_image();
    let r = img.check(Mode::Listed);
    let text = r.to_string();
    assert!(text.ends_with("0 errors, 0 warnings"), "{text}");
    assert!(text.contains("(clean)"), "{text}");

    let ino = img.ino("b/double");
    super::damage::rewrite_inode(&img, ino, |d| d.nlink = 7);
    let r = img.check(Mode::Listed);
    let text = r.to_string();
    assert!(
        text.contains(&format!(
            "error [namespace] inode {ino} has 7 links but 1 entries name it"
        )),
        "{text}"
    );
    assert!(text.ends_with("1 error, 0 warnings"), "{text}");
    assert!(!r.is_clean());
}

/// Where each partial segment after the newest checkpoint starts, and its summary, as far as
/// roll-forward would follow them.
fn parts_after_checkpoint(img: &Image) -> Vec<(u64, Summary)> {
    let l = layout(img);
    let (sb, tag) = (&l.sb, l.sb.uuid_tag());
    let (mut addr, mut serial) = (l.cp.log_head, l.cp.next_serial);
    let mut parts = Vec::new();
    while let Ok(n) = Summary::peek_len(&read_block(img, addr), tag) {
        let raw: Vec<u8> = (0..n as u64)
            .flat_map(|i| read_block(img, addr + i))
            .collect();
        let Ok(s) = Summary::decode(&raw, tag) else {
            break;
        };
        if s.serial != serial || s.ckpt_serial != l.cp.serial {
            break;
        }
        let start = addr;
        addr += s.total_blocks();
        if sb.segment_end(sb.segment_of(start)) - addr < 2 {
            addr = sb.segment_start(s.next_segment);
        }
        serial += 1;
        parts.push((start, s));
    }
    parts
}

in_both_modes!(
    torn_transaction_at_the_end_of_the_log_is_discarded,
    torn_transaction_at_the_end_of_the_log_is_discarded_through_the_tree,
    |mode| {
        let img = Image::fresh();
        let fs = img.mount_with(quiet_mount_options());
        workload(&fs);
        fs.fsync(ROOT, false).unwrap();
        let listing = img.list(&fs);
        // One transaction larger than a segment (1000 inodes: 67 inode blocks), so it is
        // written as a chain of partial segments.
        let dir = fs.mkdir(&U, ROOT, b"torn", 0o755).unwrap().ino;
        for i in 0..1000 {
            file(&fs, dir, format!("t{i}").as_bytes(), &[]);
        }
        fs.fsync(dir, false).unwrap();
        let crashed = Image {
            listing,
            ..img.copy()
        };
        fs.unmount().unwrap();

        let parts = parts_after_checkpoint(&crashed);
        let n = parts.len();
        assert!(n >= 3, "{n} partial segments after the checkpoint");
        assert_eq!(parts[n - 1].1.flags & SS_CONT, 0);
        assert_ne!(
            parts[n - 2].1.flags & SS_CONT,
            0,
            "the big transaction is in one part"
        );
        // The last part never made it: the chain before it is incomplete.
        zero_block(&crashed, parts[n - 1].0);
        let r = crashed.check(mode);
        assert!(r.is_clean(), "{r}");
        assert!(r.stats.partial_segments_discarded >= 1, "{r}");
        assert!(r.stats.transactions_rolled_forward >= 1, "{r}");
        assert_warning(&r, CHECKPOINTS, "not cleanly unmounted");
    }
);

#[test]
fn each_pass_lists_a_bounded_number_of_problems_unless_verbose() {
    let mut img = workload_image();
    // 300 entries naming inodes that do not exist.
    for i in 0..300u64 {
        let e = img.entry(
            ROOT,
            format!("ghost{i}").as_bytes(),
            5000 + i,
            crate::fs::FileKind::Regular,
        );
        img.listing.push(e);
    }
    img.listing.sort();
    let quiet = crate::check::run(
        &*img.meta,
        &*img.data,
        &Default::default(),
        Some(img.listing.clone()),
    )
    .unwrap()
    .report;
    let verbose = img.check(Mode::Listed);
    let listed = |r: &crate::check::Report| r.problems_in(NAMESPACE).count();
    assert!(
        listed(&verbose) > crate::check::context::PROBLEMS_PER_PASS,
        "{verbose}"
    );
    assert_eq!(listed(&quiet), crate::check::context::PROBLEMS_PER_PASS + 1);
    let last = quiet.problems_in(NAMESPACE).last().unwrap();
    assert_eq!(last.severity, crate::check::Severity::Error);
    assert!(last.message.contains("more errors"), "{quiet}");
    assert!(quiet.notes.is_empty() && !verbose.notes.is_empty());
}
