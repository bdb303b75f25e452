//! Each kind of damage, made on a clean image, is found by the pass meant to find it.

use super::clean::workload_image;
use super::damage::*;
use super::image::{Image, Mode, ROOT, U};
use super::*;
use crate::format::bmap::UNWRITTEN;
use crate::format::checkpoint::Checkpoint;
use crate::format::inode::check_inode_block;
use crate::format::meta::{IMAP_ORPHAN, SEG_ACTIVE, SEG_DIRTY};
use crate::format::summary::Record;
use crate::format::superblock::Superblock;
use crate::format::{put_u64, NODEMAP_ID};

// ---- Superblocks ---------------------------------------------------------------------------

#[test]
fn damaged_superblock_copy() {
    let img = workload_image();
    let sb = img.superblock();
    let copy = sb.copy_segments[0] * sb.segment_blocks as u64;
    let mut b = read_block(&img, copy);
    b[104] ^= 1; // the label, under the CRC
    write_block(&img, copy, &b);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        SUPERBLOCKS,
        "is damaged: corrupt superblock: damaged DualFS superblock (checksum mismatch)",
    );
    assert_errors_only_in(&r, &[SUPERBLOCKS]);

    // A well-formed copy that says something else.
    let other = Superblock {
        label: "other".into(),
        ..sb
    };
    let mut b = other.encode();
    b.resize(4096, 0);
    write_block(&img, copy, &b);
    let r = img.check(Mode::Listed);
    assert_error(&r, SUPERBLOCKS, "differs from the primary");
    assert_errors_only_in(&r, &[SUPERBLOCKS]);
}

#[test]
fn devices_of_different_file_systems() {
    let img = workload_image();
    let other = Image::fresh();
    let mixed = Image {
        data: other.data.clone(),
        ..img.copy()
    };
    let r = mixed.check(Mode::Listed);
    assert_error(&r, SUPERBLOCKS, "the devices are not a pair: UUID");
}

#[test]
fn data_device_smaller_than_the_file_system() {
    let img = workload_image();
    let mut bytes = img.data.snapshot();
    bytes.truncate(bytes.len() / 2);
    let short = Image {
        data: std::sync::Arc::new(crate::device::MemDevice::from_bytes(bytes)),
        ..img.copy()
    };
    let r = short.check(Mode::Listed);
    assert_error(
        &r,
        SUPERBLOCKS,
        "the data device has 8388608 bytes, the file system needs 16777216",
    );
}

#[test]
fn unusable_metadata_superblock_stops_the_check() {
    let img = workload_image();
    zero_block(&img, 0);
    let r = img.check(Mode::Listed);
    assert_error(&r, SUPERBLOCKS, "metadata device superblock is unusable");
    assert_eq!(r.problems.len(), 1, "{r}");
}

// ---- Checkpoints ---------------------------------------------------------------------------

in_both_modes!(
    zeroed_newest_checkpoint_falls_back_to_the_older,
    zeroed_newest_checkpoint_falls_back_to_the_older_through_the_tree,
    |mode| {
        let img = workload_image();
        let newest = layout(&img).cp.serial;
        zero_block(&img, Checkpoint::region(newest));
        let r = img.check(mode);
        // The older checkpoint plus roll-forward of the log after it is a consistent state.
        assert!(r.is_clean(), "{r}");
        assert_warning(&r, CHECKPOINTS, "is empty, but checkpoint");
        assert_eq!(r.stats.checkpoint_serial, newest - 1);
        assert!(r.stats.transactions_rolled_forward >= 1, "{r}");
    }
);

#[test]
fn both_checkpoints_zeroed_stop_the_check() {
    let img = workload_image();
    zero_block(&img, 1);
    zero_block(&img, 2);
    let r = img.check(Mode::Listed);
    assert_error(&r, CHECKPOINTS, "no usable checkpoint");
    assert!(r.problems.iter().all(|p| p.pass == CHECKPOINTS), "{r}");
}

#[test]
fn checkpoint_in_the_wrong_region() {
    let img = workload_image();
    let newest = layout(&img).cp.serial;
    let older = Checkpoint::region(newest - 1);
    let b = read_block(&img, Checkpoint::region(newest));
    write_block(&img, older, &b);
    let r = img.check(Mode::Listed);
    assert_warning(
        &r,
        CHECKPOINTS,
        &format!("it holds checkpoint {newest}, which belongs in region"),
    );
}

#[test]
fn failing_roll_forward_is_an_error_and_the_checkpoint_state_is_checked() {
    let img = super::clean::crashed_image();
    let (addr, mut summary) = parts_after_checkpoint(&img).pop().unwrap();
    // A record that cannot apply: allocating a block that is allocated already.
    let taken = inode(&img, img.ino("b/double")).direct[0];
    summary.records.push(Record::DAlloc {
        start: taken,
        count: 1,
    });
    let bytes = summary.encode(4096);
    for (i, block) in bytes.chunks(4096).enumerate() {
        write_block(&img, addr + i as u64, block);
    }
    let r = img.check(Mode::Listed);
    assert_error(&r, CHECKPOINTS, "roll-forward from checkpoint");
    assert_error(&r, CHECKPOINTS, "allocating allocated blocks");
    // The later passes ran, on the state of the checkpoint.
    assert_eq!(r.stats.transactions_rolled_forward, 0);
    assert!(r.stats.inodes > 0 && r.stats.log_blocks_live > 0, "{r}");
    assert_errors_only_in(&r, &[CHECKPOINTS, NAMESPACE]);
}

// ---- Inodes --------------------------------------------------------------------------------

#[test]
fn inode_map_entry_pointing_at_the_wrong_slot() {
    let img = workload_image();
    let l = layout(&img);
    // An inode in slot 1 of a block that holds at least two.
    let (ino, addr) = l
        .tables
        .ifile
        .imap
        .iter()
        .enumerate()
        .filter(|(_, e)| e.allocated() && e.slot == 1)
        .find(|(_, e)| check_inode_block(&read_block(&img, e.addr)).unwrap() >= 2)
        .map(|(i, e)| (i as u64, e.addr))
        .unwrap();
    rewrite_imap(&img, ino, |e| e.slot = 2);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        INODES,
        &format!("inode map entry {ino} points at log block {addr}, slot 2, which holds inode"),
    );
}

#[test]
fn wrong_generation_in_the_inode_map() {
    let img = workload_image();
    let ino = img.ino("b/double");
    rewrite_imap(&img, ino, |e| e.generation += 1);
    let r = img.check(Mode::Listed);
    assert_error(&r, INODES, &format!("inode {ino}: generation"));
}

#[test]
fn broken_free_list_link() {
    let img = workload_image();
    let l = layout(&img);
    let free: Vec<u64> = l.tables.ifile.free.iter().copied().take(2).collect();
    assert_eq!(raw_imap(&img, free[0]).addr, free[1]);
    rewrite_imap(&img, free[0], |e| e.addr = free[1] + 1);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        INODES,
        &format!(
            "free inode map entry {} links to {}; the ascending free list needs {}",
            free[0],
            free[1] + 1,
            free[1]
        ),
    );
    assert_errors_only_in(&r, &[INODES]);
}

#[test]
fn ifile_header_counts_wrong() {
    let img = workload_image();
    rewrite_ifile_header(&img, |h| {
        h.live_inodes += 1;
        h.free_head += 1;
    });
    let r = img.check(Mode::Listed);
    assert_error(&r, INODES, "IFile header: free list head is");
    assert_error(&r, INODES, "live inodes, the inode map has");
    assert_errors_only_in(&r, &[INODES]);
}

#[test]
fn unlinked_inode_not_flagged_orphan() {
    let img = workload_image();
    let orphan = orphan_of(&img);
    rewrite_imap(&img, orphan, |e| e.flags &= !IMAP_ORPHAN);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        INODES,
        &format!("inode {orphan} has no links but is not flagged orphan"),
    );
    // Without the flag it is just an inode nobody can reach.
    assert_error(&r, NAMESPACE, &format!("inode {orphan} (regular, 0 links)"));
    assert_errors_only_in(&r, &[INODES, NAMESPACE]);
}

#[test]
fn orphan_flag_on_a_linked_inode() {
    let img = workload_image();
    let ino = img.ino("b/double");
    rewrite_imap(&img, ino, |e| e.flags |= IMAP_ORPHAN);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        INODES,
        &format!("inode {ino} is flagged orphan but has 1 links"),
    );
    assert_errors_only_in(&r, &[INODES]);
}

// ---- Block maps ----------------------------------------------------------------------------

#[test]
fn two_files_share_a_data_block() {
    let img = workload_image();
    let (double, five) = (img.ino("b/double"), img.ino("b/five-moved"));
    let shared = inode(&img, double).direct[0];
    rewrite_inode(&img, five, |d| d.direct[0] = shared);
    let r = img.check(Mode::Listed);
    // Five's own first block is now leaked.
    assert_shared_and_leaked(&r, shared, (double.min(five), 0), (double.max(five), 0));
}

/// Data block `block` is reported used by `first` and `second` (inode, file block), and some
/// block leaked.
#[track_caller]
fn assert_shared_and_leaked(r: &Report, block: u64, first: (u64, u64), second: (u64, u64)) {
    assert_error(
        r,
        BLOCK_MAPS,
        &format!(
            "data block {block} is used 2 times: by inode {} (file block {}), inode {} (file \
             block {})",
            first.0, first.1, second.0, second.1
        ),
    );
    assert_error(r, DATA_BITMAPS, "leaked");
}

#[test]
fn indirect_pointer_to_another_files_block() {
    let img = workload_image();
    let (double, sparse) = (img.ino("b/double"), img.ino("a/twelve/sparse"));
    let theirs = inode(&img, sparse).indirect[1];
    rewrite_inode(&img, double, |d| d.indirect[1] = theirs);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!("inode {double}: level-2 indirect block for file block 520 at {theirs}"),
    );
}

#[test]
fn block_count_wrong() {
    let img = workload_image();
    let ino = img.ino("b/double");
    rewrite_inode(&img, ino, |d| d.blocks += 1);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!("inode {ino}: i_blocks is 532, its block map holds 531"),
    );
    assert_errors_only_in(&r, &[BLOCK_MAPS]);
}

#[test]
fn block_mapped_past_the_end_of_the_file() {
    let img = workload_image();
    let ino = img.ino("b/five-moved");
    rewrite_inode(&img, ino, |d| d.size = 4096);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!("inode {ino}: file block 1 is mapped"),
    );
    assert_errors_only_in(&r, &[BLOCK_MAPS]);
}

#[test]
fn indirect_blocks_past_the_end_of_the_file() {
    let img = workload_image();
    let ino = img.ino("b/double");
    rewrite_inode(&img, ino, |d| d.size = 12 * 4096);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!("inode {ino}: level-1 indirect block for file block 12 (at"),
    );
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!("inode {ino}: level-2 indirect block for file block 520 (at"),
    );
    assert_errors_only_in(&r, &[BLOCK_MAPS]);
}

#[test]
fn data_pointer_past_the_end_of_the_data_device() {
    let img = workload_image();
    let ino = img.ino("b/five-moved");
    let end = img.superblock().data_blocks;
    let old = inode(&img, ino).direct[2];
    rewrite_inode(&img, ino, |d| d.direct[2] = end + 5);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!(
            "inode {ino}: file block 2 points at data block {}, past the end",
            end + 5
        ),
    );
    assert_error(
        &r,
        DATA_BITMAPS,
        &format!("data block {old} is allocated in the bitmap, but no file uses it"),
    );
}

#[test]
fn long_symlink_block_missing() {
    let img = workload_image();
    let ino = img.ino("longest");
    rewrite_inode(&img, ino, |d| d.direct[1] = 0);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!("inode {ino}: symlink block 1 is missing"),
    );
    // The block is still counted live in its segment but nothing names it.
    assert_error(&r, SEGMENT_USAGE, "its live blocks add up to");
}

// ---- Data bitmaps --------------------------------------------------------------------------

#[test]
fn data_block_free_in_the_bitmap_but_used() {
    let img = workload_image();
    let block = inode(&img, img.ino("b/double")).direct[0];
    set_data_block(&img, block, false);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        DATA_BITMAPS,
        &format!("data block {block} is used by files but free in the bitmap"),
    );
    assert_errors_only_in(&r, &[DATA_BITMAPS]);
}

#[test]
fn leaked_data_block() {
    let img = workload_image();
    let last = img.superblock().data_blocks - 1;
    set_data_block(&img, last, true);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        DATA_BITMAPS,
        &format!("data block {last} is allocated in the bitmap, but no file uses it (leaked)"),
    );
    assert_errors_only_in(&r, &[DATA_BITMAPS]);
}

// ---- Segment usage -------------------------------------------------------------------------

#[test]
fn segment_usage_off_by_one_inode() {
    let img = workload_image();
    let l = layout(&img);
    let seg = l.tables.ifile.entry(img.ino("b/double")).unwrap().addr / l.sb.segment_blocks as u64;
    let before = l.tables.ifile.usage[seg as usize].live_bytes;
    rewrite_usage(&img, seg, |u| u.live_bytes += 256);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        SEGMENT_USAGE,
        &format!(
            "segment {seg}: the usage table says {} live bytes, its live blocks add up to {before}",
            before + 256
        ),
    );
    assert_errors_only_in(&r, &[SEGMENT_USAGE]);
}

#[test]
fn live_segment_marked_clean() {
    let img = workload_image();
    let l = layout(&img);
    // A segment with live blocks away from the log head (roll-forward re-marks those active).
    let head_seg = l.sb.segment_of(l.cp.log_head);
    let seg = (1..l.sb.segments)
        .find(|&s| {
            l.tables.ifile.usage[s as usize].live_bytes > 0
                && s != head_seg
                && s != l.cp.next_segment
        })
        .unwrap();
    rewrite_usage(&img, seg, |u| u.flags &= !(SEG_DIRTY | SEG_ACTIVE));
    let r = img.check(Mode::Listed);
    assert_error(&r, SEGMENT_USAGE, &format!("segment {seg} holds"));
    assert_error(&r, SEGMENT_USAGE, "is marked clean");
}

// ---- Directory tree and node map -----------------------------------------------------------

in_both_modes!(
    node_map_entry_for_a_node_the_tree_does_not_reach,
    node_map_entry_for_a_node_the_tree_does_not_reach_through_the_tree,
    |mode| {
        let img = workload_image();
        let l = layout(&img);
        let id = l.cp.next_node_id + 3;
        // Some block in the log that nothing uses.
        let spare = l.sb.segment_start(l.sb.segments - 1);
        rewrite_meta_block(&img, NODEMAP_ID, 0, |body| {
            put_u64(body, 8 * id as usize, spare)
        });
        let r = img.check(mode);
        assert_error(
            &r,
            TREE,
            &format!("node map entry {id} names log block {spare}, but ids from"),
        );
        assert_error(&r, TREE, "(leaked)");
    }
);

// ---- Namespace -----------------------------------------------------------------------------

in_both_modes!(
    wrong_link_count,
    wrong_link_count_through_the_tree,
    |mode| {
        let img = workload_image();
        let ino = img.ino("b/double");
        rewrite_inode(&img, ino, |d| d.nlink = 2);
        let r = img.check(mode);
        assert_error(
            &r,
            NAMESPACE,
            &format!("inode {ino} has 2 links but 1 entries name it"),
        );
        assert_errors_only_in(&r, &[NAMESPACE]);
    }
);

in_both_modes!(
    wrong_directory_link_count,
    wrong_directory_link_count_through_the_tree,
    |mode| {
        let img = workload_image();
        let ino = img.ino("a");
        rewrite_inode(&img, ino, |d| d.nlink += 1);
        let r = img.check(mode);
        assert_error(
            &r,
            NAMESPACE,
            &format!("directory {ino} has 4 links; 2 plus 1 subdirectories make 3"),
        );
        assert_errors_only_in(&r, &[NAMESPACE]);
    }
);

in_both_modes!(
    wrong_directory_entry_count,
    wrong_directory_entry_count_through_the_tree,
    |mode| {
        let img = workload_image();
        let ino = img.ino("a");
        rewrite_inode(&img, ino, |d| d.size += 1);
        let r = img.check(mode);
        assert_error(
            &r,
            NAMESPACE,
            &format!("directory {ino} holds 3 entries but its size says 4"),
        );
        assert_errors_only_in(&r, &[NAMESPACE]);
    }
);

in_both_modes!(
    wrong_dotdot_of_a_moved_directory,
    wrong_dotdot_of_a_moved_directory_through_the_tree,
    |mode| {
        let img = workload_image();
        let (a, b, sub) = (img.ino("a"), img.ino("b"), img.ino("a/twelve"));
        rewrite_inode(&img, sub, |d| d.parent = b);
        let r = img.check(mode);
        assert_error(
            &r,
            NAMESPACE,
            &format!("directory {sub}: '..' is {b} but its name is in directory {a}"),
        );
        assert_errors_only_in(&r, &[NAMESPACE]);
    }
);

in_both_modes!(
    tree_entry_naming_a_free_inode,
    tree_entry_naming_a_free_inode_through_the_tree,
    |mode| {
        let mut img = workload_image();
        let free = *layout(&img).tables.ifile.free.iter().next().unwrap();
        let b = img.ino("b");
        match mode {
            Mode::Listed => {
                let e = img
                    .listing
                    .iter_mut()
                    .find(|e| e.dir == b && e.name == b"double")
                    .unwrap();
                e.ino = free;
            }
            Mode::Tree => rewrite_entry_in_root_leaf(&img, b, b"double", free),
        }
        let r = img.check(mode);
        assert_error(
            &r,
            NAMESPACE,
            &format!("entry 'double' in directory {b} names inode {free}, which is not allocated"),
        );
    }
);

in_both_modes!(
    entry_of_the_wrong_type,
    entry_of_the_wrong_type_through_the_tree,
    |mode| {
        let img = workload_image();
        let fifo = img.ino("fifo");
        rewrite_inode(&img, fifo, |d| {
            d.mode = libc::S_IFSOCK | 0o644;
        });
        let r = img.check(mode);
        assert_error(
            &r,
            NAMESPACE,
            &format!(
                "entry 'fifo' in directory {ROOT} says inode {fifo} is a fifo, but it is a socket"
            ),
        );
        assert_errors_only_in(&r, &[NAMESPACE]);
    }
);

in_both_modes!(
    unreachable_allocated_inode,
    unreachable_allocated_inode_through_the_tree,
    |mode| {
        let img = workload_image();
        // The file left open after its unlink: no name, no links, flagged orphan. Make it
        // look like an ordinary file that lost its name.
        let orphan = orphan_of(&img);
        rewrite_imap(&img, orphan, |e| e.flags &= !IMAP_ORPHAN);
        rewrite_inode(&img, orphan, |d| d.nlink = 1);
        let r = img.check(mode);
        assert_error(
            &r,
            NAMESPACE,
            &format!("inode {orphan} (regular, 1 links) is not reachable from the root: no entry names it"),
        );
        assert_errors_only_in(&r, &[NAMESPACE]);
    }
);

#[test]
fn directory_loop_cut_off_from_the_root() {
    let mut img = workload_image();
    // Detach a/twelve (a directory) from a and hang it below itself: a loop of one.
    let (a, sub) = (img.ino("a"), img.ino("a/twelve"));
    let hash = img.hash(b"twelve");
    let e = img
        .listing
        .iter_mut()
        .find(|e| e.dir == a && e.name == b"twelve")
        .unwrap();
    e.dir = sub;
    e.hash = hash;
    img.listing.sort();
    rewrite_inode(&img, sub, |d| {
        d.parent = sub;
        d.size += 1;
        d.nlink += 1;
    });
    rewrite_inode(&img, a, |d| {
        d.size -= 1;
        d.nlink -= 1;
    });
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        NAMESPACE,
        &format!("the '..' links of directories {sub} -> {sub} form a loop"),
    );
    assert_error(&r, NAMESPACE, &format!("inode {sub} (directory"));
    assert_errors_only_in(&r, &[NAMESPACE]);
}

#[test]
fn illegal_name_and_wrong_hash() {
    let mut img = workload_image();
    let b = img.ino("b");
    let e = img
        .listing
        .iter_mut()
        .find(|e| e.dir == b && e.name == b"double")
        .unwrap();
    e.name = b"dou/ble".to_vec();
    img.listing.sort();
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        NAMESPACE,
        &format!("entry 'dou/ble' in directory {b}: illegal name"),
    );
    assert_error(
        &r,
        NAMESPACE,
        &format!("entry 'dou/ble' in directory {b}: stored hash"),
    );
}

/// The core bug this checker found: removing a long symlink gives its log blocks back as if
/// they were data blocks (`Fs::destroy` runs `bmap::free_from`, which takes `i_direct` as data
/// addresses, before it looks for symlink blocks in the now-cleared `i_direct`).
#[test]
fn removing_a_long_symlink_leaves_a_clean_image() {
    let img = Image::fresh();
    let fs = img.mount();
    // Data blocks with low numbers in use, so the wrongly freed "data blocks" are allocated.
    super::image::file(&fs, ROOT, b"big", &[(0, 3000 * 4096)]);
    fs.symlink(&U, ROOT, b"long", &[b'z'; 300]).unwrap();
    fs.sync().unwrap();
    fs.unlink(&U, ROOT, b"long").unwrap();
    let listing = img.list(&fs);
    fs.unmount().expect("unmount after removing a long symlink");
    let img = Image { listing, ..img };
    let r = img.check(Mode::Listed);
    assert!(r.problems.is_empty(), "{r}");
}

// ---- Unwritten data pointers ---------------------------------------------------------------

/// A written block marked unwritten is a sound state (its bytes read as zeros); the checker
/// takes it as it is.
#[test]
fn unwritten_flag_on_a_written_block_is_sound() {
    let img = super::clean::unwritten_image();
    let ino = img.ino("zeroed");
    rewrite_inode(&img, ino, |d| d.direct[0] |= UNWRITTEN);
    let r = img.check(Mode::Listed);
    assert!(r.is_clean(), "{r}");
    let fs = img.mount();
    let fh = fs.open(&U, ino, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(ino, fh, 0, 4096).unwrap(), vec![0u8; 4096]);
    fs.release(ino, fh).unwrap();
    fs.unmount().unwrap();
}

#[test]
fn unwritten_pointers_that_name_no_block() {
    let img = super::clean::unwritten_image();
    let ino = img.ino("pre");
    let end = img.superblock().data_blocks;
    let (old0, old1, old2) = {
        let d = inode(&img, ino);
        (d.direct[0], d.direct[1], d.direct[2])
    };
    rewrite_inode(&img, ino, |d| {
        d.direct[0] = UNWRITTEN;
        d.direct[1] = UNWRITTEN | (end + 5);
        d.direct[2] |= 1 << 50;
    });
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!(
            "inode {ino}: file block 0 is preallocated (unwritten) at data block 0, the data \
             superblock"
        ),
    );
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!(
            "inode {ino}: file block 1 is preallocated (unwritten) at data block {}, past the \
             end of the data device",
            end + 5
        ),
    );
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!(
            "inode {ino}: file block 2 is preallocated (unwritten) at data block {}, past the \
             end",
            (old2 & !UNWRITTEN) | 1 << 50
        ),
    );
    // They were blocks 1..=3 (preallocation is contiguous).
    assert_eq!(
        (old0 & !UNWRITTEN, old1 & !UNWRITTEN, old2 & !UNWRITTEN),
        (1, 2, 3)
    );
    assert_error(
        &r,
        DATA_BITMAPS,
        "data blocks 1..=3 (3 blocks) are allocated in the bitmap, but no file uses them",
    );
}

/// The flag belongs to data pointers only: on an indirect pointer it is a bad log address.
#[test]
fn unwritten_flag_on_an_indirect_pointer() {
    let img = super::clean::unwritten_image();
    let ino = img.ino("keep");
    rewrite_inode(&img, ino, |d| d.indirect[1] |= UNWRITTEN);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!("inode {ino}: level-2 indirect block for file block 520:"),
    );
}

/// Past the end of a file unwritten blocks may lie, written ones may not.
#[test]
fn written_blocks_past_the_end_of_the_file() {
    let img = super::clean::unwritten_image();
    let ino = img.ino("keep");
    rewrite_inode(&img, ino, |d| d.direct[5] &= !UNWRITTEN);
    let r = img.check(Mode::Listed);
    assert_error(
        &r,
        BLOCK_MAPS,
        &format!("inode {ino}: file block 5 is mapped (data block"),
    );
    assert_errors_only_in(&r, &[BLOCK_MAPS]);
}

/// An unwritten pointer owns its block like a written one: naming another file's block is a
/// shared block (and the block it named is leaked); reading it shows zeros, not their bytes.
#[test]
fn unwritten_pointer_to_another_files_block() {
    let (img, punched, zeroed, theirs) = super::clean::unwritten_pointer_to_anothers_block();
    let r = img.check(Mode::Listed);
    assert_shared_and_leaked(&r, theirs, (punched, 0), (zeroed, 6));
    assert_errors_only_in(&r, &[BLOCK_MAPS, DATA_BITMAPS]);
    let fs = img.mount();
    let fh = fs.open(&U, zeroed, libc::O_RDONLY).unwrap();
    assert_eq!(
        fs.read(zeroed, fh, 6 * 4096, 4096).unwrap(),
        vec![0u8; 4096]
    );
    fs.release(zeroed, fh).unwrap();
    fs.unmount().unwrap();
}
