//! What a correct file system looks like to the checker: no problems at all.

use super::damage::{parts_after_checkpoint, zero_block};
use super::image::{file, quiet_mount_options, workload, Image, Mode, BS, MANY, ROOT, U};
use super::*;
use crate::format::checkpoint::CP_CLEAN;
use crate::format::summary::SS_CONT;
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
pub fn crashed_image() -> Image {
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

/// Write `len` bytes at `offset` into the existing file `ino`.
fn write_at(fs: &crate::fs::Fs, ino: u64, offset: u64, len: usize) {
    let fh = fs.open(&U, ino, libc::O_WRONLY).unwrap();
    fs.write(ino, fh, offset, &super::image::pattern(len, offset))
        .unwrap();
    fs.release(ino, fh).unwrap();
}

in_both_modes!(
    second_session_stays_clean,
    second_session_stays_clean_through_the_tree,
    |mode| {
        let img = workload_image();
        // Names are left alone (the stand-in tree forgets them at mount); files are reached
        // by number. Mount frees the orphan; indirect blocks are read back, changed, moved.
        let fs = img.mount();
        let bs = BS as usize;
        write_at(&fs, img.ino("b/double"), 700 * BS, bs); // deeper into the double tree
        write_at(&fs, img.ino("small"), 10 * BS, 20 * bs); // into the single indirect block
        super::image::truncate(&fs, img.ino("a/twelve/sparse"), 5000 * BS + 10); // drops the triple tree
        super::image::truncate(&fs, img.ino("b/sub"), 3 * BS); // a file now (exchanged)
        fs.unmount().unwrap();
        let r = img.check(mode);
        assert!(r.problems.is_empty(), "{r}");
        assert_eq!(r.stats.orphans, 0, "mount frees the orphan: {r}");
    }
);

in_both_modes!(
    log_that_wraps_around_stays_clean,
    log_that_wraps_around_stays_clean_through_the_tree,
    |mode| {
        // The smallest log mkfs allows (16 segments of 64 blocks), written around several
        // times: segments die, are cleaned at checkpoints and are written again.
        let mut img = Image::fresh_with_log(16);
        let fs = img.mount_with(quiet_mount_options());
        let before = fs.stats();
        for i in 0..1000u32 {
            file(
                &fs,
                ROOT,
                format!("f{i}").as_bytes(),
                &[(0, 2 * BS as usize)],
            );
            if i >= 4 {
                fs.unlink(&U, ROOT, format!("f{}", i - 4).as_bytes())
                    .unwrap();
            }
            fs.sync().unwrap();
        }
        // Transactions, plus at least a summary, the IFile header and a usage block per
        // checkpoint: the log went around at least three times.
        let after = fs.stats();
        let written = after.log_blocks_written - before.log_blocks_written
            + 3 * (after.checkpoints - before.checkpoints);
        assert!(written > 3 * 16 * 64, "only {written} log blocks written");
        img.listing = img.list(&fs);
        fs.unmount().unwrap();
        let r = img.check(mode);
        assert!(r.problems.is_empty(), "{r}");
        // Past the head lies what earlier passes of the log left: not damage.
        assert!(
            !r.notes.iter().any(|n| n.contains("corrupt")),
            "{:#?}",
            r.notes
        );
    }
);

/// Preallocation, punched holes and zeroed ranges (unwritten data pointers, indirect blocks
/// past the end of a file), built once; tests damage copies of it.
/// - `pre`: 40 blocks preallocated (mode 0), block 3 written;
/// - `keep`: one written block, 600 more preallocated past its end (single and double
///   indirect blocks past the end of the file);
/// - `punched`: 600 written blocks, blocks 100..500 punched;
/// - `zeroed`: 20 written blocks, blocks 5..15 zeroed.
pub fn unwritten_image() -> Image {
    static BASE: OnceLock<Image> = OnceLock::new();
    BASE.get_or_init(|| Image::after(unwritten_work)).copy()
}

pub fn unwritten_work(fs: &crate::fs::Fs) {
    let open = |name: &[u8]| {
        let (a, fh) = fs.create(&U, ROOT, name, 0o644, libc::O_RDWR).unwrap();
        (a.ino, fh)
    };
    let keep_size = libc::FALLOC_FL_KEEP_SIZE;
    let (f, fh) = open(b"pre");
    fs.fallocate(f, fh, 0, 40 * BS, 0).unwrap();
    fs.write(f, fh, 3 * BS + 5, b"written").unwrap();
    fs.release(f, fh).unwrap();
    let (f, fh) = open(b"keep");
    fs.write(f, fh, 0, &[1; 100]).unwrap();
    fs.fallocate(f, fh, BS, 600 * BS, keep_size).unwrap();
    fs.release(f, fh).unwrap();
    let (f, fh) = open(b"punched");
    fs.write(f, fh, 0, &vec![2; 600 * BS as usize]).unwrap();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | keep_size;
    fs.fallocate(f, fh, 100 * BS, 400 * BS, punch).unwrap();
    fs.release(f, fh).unwrap();
    let (f, fh) = open(b"zeroed");
    fs.write(f, fh, 0, &vec![3; 20 * BS as usize]).unwrap();
    fs.fallocate(f, fh, 5 * BS, 10 * BS, libc::FALLOC_FL_ZERO_RANGE)
        .unwrap();
    fs.release(f, fh).unwrap();
}

in_both_modes!(
    unwritten_image_is_clean,
    unwritten_image_is_clean_through_the_tree,
    |mode| {
        let r = unwritten_image().check(mode);
        assert!(r.problems.is_empty(), "{r}");
        // Unwritten blocks are allocated blocks: 40 + 601 + 200 + 20.
        assert_eq!(r.stats.data_blocks_used, 861, "{r}");
    }
);

/// `unwritten_image` with `zeroed`'s unwritten block 6 pointed at `punched`'s written block
/// 0: (punched, zeroed, that block).
pub fn unwritten_pointer_to_anothers_block() -> (Image, u64, u64, u64) {
    let img = unwritten_image();
    let (punched, zeroed) = (img.ino("punched"), img.ino("zeroed"));
    let theirs = super::damage::inode(&img, punched).direct[0];
    assert!(theirs != 0 && theirs & crate::format::bmap::UNWRITTEN == 0);
    super::damage::rewrite_inode(&img, zeroed, |d| {
        assert!(d.direct[6] & crate::format::bmap::UNWRITTEN != 0);
        d.direct[6] = crate::format::bmap::unwritten(theirs);
    });
    (img, punched, zeroed, theirs)
}

/// The verbose report's line about where roll-forward stopped.
fn roll_forward_note(r: &Report) -> &str {
    r.notes
        .iter()
        .find(|n| n.starts_with("roll-forward"))
        .unwrap_or_else(|| panic!("no roll-forward note:\n{r}\n{:#?}", r.notes))
}

#[test]
fn verbose_check_of_a_used_clean_file_system_reports_the_end_of_the_log() {
    let r = workload_image().check(Mode::Listed);
    assert!(r.problems.is_empty(), "{r}");
    let note = roll_forward_note(&r);
    assert!(
        note.starts_with("roll-forward: end of the log after 0 partial segments"),
        "{note}"
    );
    assert!(
        !r.notes.iter().any(|n| n.contains("corrupt")),
        "{:#?}",
        r.notes
    );
}

#[test]
fn torn_partial_segment_is_reported_as_corrupt_not_as_the_end_of_the_log() {
    let img = crashed_image();
    let parts = parts_after_checkpoint(&img);
    let n = parts.len();
    let r = img.check(Mode::Listed);
    let end = format!("roll-forward: end of the log after {n} partial segments");
    assert!(roll_forward_note(&r).starts_with(&end), "{r:#?}");
    let rolled = r.stats.transactions_rolled_forward;

    // The last summary torn (its CRC fails), then instead its data.
    let (addr, summary) = &parts[n - 1];
    let torn_summary = img.copy();
    let mut b = super::damage::read_block(&torn_summary, *addr);
    b[crate::format::summary::SUMMARY_HEADER] ^= 0xff;
    super::damage::write_block(&torn_summary, *addr, &b);
    let torn_data = img.copy();
    let data_addr = addr + summary.summary_blocks as u64;
    let mut b = super::damage::read_block(&torn_data, data_addr);
    b[100] ^= 0xff;
    super::damage::write_block(&torn_data, data_addr, &b);
    for (torn, what) in [
        (
            torn_summary,
            "corrupt segment summary: summary CRC mismatch",
        ),
        (
            torn_data,
            "corrupt partial segment: data CRC mismatch (torn write)",
        ),
    ] {
        let r = torn.check(Mode::Listed);
        let note = roll_forward_note(&r);
        assert_eq!(note, format!("roll-forward stopped: {what}"), "{r}");
        assert_eq!(r.stats.transactions_rolled_forward, rolled - 1, "{r}");
    }
}

#[test]
fn an_intact_summary_of_another_serial_is_the_end_of_the_log_not_damage() {
    // As an earlier pass of the log leaves them: the last part's summary, resealed with
    // another serial.
    let img = crashed_image();
    let parts = parts_after_checkpoint(&img);
    let n = parts.len();
    let rolled = img.check(Mode::Listed).stats.transactions_rolled_forward;
    let (addr, summary) = &parts[n - 1];
    let stale = crate::format::summary::Summary {
        serial: summary.serial + 1000,
        ..summary.clone()
    };
    for (i, block) in stale.encode(BS as u32).chunks(BS as usize).enumerate() {
        super::damage::write_block(&img, addr + i as u64, block);
    }
    let r = img.check(Mode::Listed);
    let note = roll_forward_note(&r);
    let end = format!(
        "roll-forward: end of the log after {} partial segments",
        n - 1
    );
    assert!(note.starts_with(&end), "{note}");
    assert!(note.contains("a stale partial segment follows"), "{note}");
    assert_eq!(r.stats.transactions_rolled_forward, rolled - 1, "{r}");
}
