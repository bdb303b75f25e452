//! Changing what a file system's superblocks say about it (`dualfs tune`): its label and the
//! recorded path of its data device. Superblocks are otherwise written only by mkfs (and by
//! fsck's repairs); everything that changes while mounted lives in checkpoints.
//!
//! The primary and every copy are rewritten in an order a crash cannot break
//! (docs/DESIGN.md, "Changing the superblocks"): the copies first, made durable; then the
//! primary, made durable; then the data device's superblock (its label). Until the primary is
//! rewritten a mount sees the old superblock; after, the new one. A crash among the copies
//! leaves some old and some new, which fsck's rule (copies that agree and outnumber those equal
//! to the primary replace it; otherwise the differing ones are rewritten from the primary)
//! turns wholly into the old or wholly into the new file system. Only a device that tears the
//! primary's 4 KiB write leaves it unreadable: then every copy is new, and fsck restores the
//! primary from them.

use crate::device::BlockDevice;
use crate::format::superblock::{Role, Superblock, LABEL_LEN, MAX_DATA_PATH};
use crate::fs::check_pair;
use crate::{FsError, Result};

/// What to change; `None` keeps the field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Change {
    pub label: Option<String>,
    /// The data device's path as it is to be recorded.
    pub data_path: Option<Vec<u8>>,
}

/// The superblock `sb` with `change` made, or why it cannot be.
pub fn changed(sb: &Superblock, change: &Change) -> Result<Superblock> {
    let mut new = sb.clone();
    if let Some(label) = &change.label {
        if label.len() > LABEL_LEN {
            return Err(FsError::Refused(format!(
                "a label has at most {LABEL_LEN} bytes; {label:?} has {}",
                label.len()
            )));
        }
        if label.contains('\0') {
            return Err(FsError::Refused("a label cannot hold a NUL byte".into()));
        }
        new.label = label.clone();
    }
    if let Some(path) = &change.data_path {
        if path.is_empty() || path.len() > MAX_DATA_PATH {
            return Err(FsError::Refused(format!(
                "a data device path has 1 to {MAX_DATA_PATH} bytes; this one has {}",
                path.len()
            )));
        }
        new.data_path = path.clone();
    }
    Ok(new)
}

/// The raw block of superblock `sb` (its 4096 bytes, then zeros to the block size).
fn block_of(sb: &Superblock) -> Vec<u8> {
    let mut b = sb.encode();
    b.resize(sb.block_size as usize, 0);
    b
}

/// Byte offset of the superblock copy in segment `seg`.
fn copy_offset(sb: &Superblock, seg: u64) -> u64 {
    seg * sb.segment_blocks as u64 * sb.block_size as u64
}

/// Change the superblocks of the file system on `meta` and `data` (a pair, not mounted: the
/// caller holds both devices exclusively). Refused when a copy differs from the primary
/// (fsck first: the crash argument needs them equal). Returns the new metadata superblock.
pub fn tune(meta: &dyn BlockDevice, data: &dyn BlockDevice, change: &Change) -> Result<Superblock> {
    let sb = check_pair(meta, data)?;
    let bs = sb.block_size as usize;
    let mut primary = vec![0u8; bs];
    meta.read_at(&mut primary, 0)?;
    for &seg in &sb.copy_segments {
        let mut copy = vec![0u8; bs];
        meta.read_at(&mut copy, copy_offset(&sb, seg))?;
        if copy != primary {
            return Err(FsError::Refused(format!(
                "{}: the superblock copy in segment {seg} differs from the primary; run \
                 fsck-dualfs first",
                meta.describe()
            )));
        }
    }
    let new = changed(&sb, change)?;
    if new == sb {
        return Ok(sb);
    }
    let raw = block_of(&new);
    // 1. The copies, made durable before the primary changes.
    for &seg in &new.copy_segments {
        meta.write_at(&raw, copy_offset(&new, seg))?;
    }
    meta.flush()?;
    // 2. The primary: from here on a mount sees the new superblock.
    meta.write_at(&raw, 0)?;
    meta.flush()?;
    // 3. The data device's, which holds the label too (mount's pairing test ignores it).
    let dsb = Superblock {
        role: Role::Data,
        data_path: Vec::new(),
        ..new.clone()
    };
    data.write_at(&block_of(&dsb), 0)?;
    data.flush()?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::repair::{repair, Policy, RepairOptions};
    use crate::device::{MemDevice, RecordingDevice, WriteSubset};
    use crate::fs::{Fs, MountOptions};
    use crate::mkfs::{mkfs, MkfsParams};
    use std::sync::Arc;

    fn pair() -> (Arc<MemDevice>, Arc<MemDevice>) {
        let meta = Arc::new(MemDevice::new(16 << 20));
        let data = Arc::new(MemDevice::new(8 << 20));
        mkfs(
            meta.clone(),
            data.clone(),
            &MkfsParams {
                segment_blocks: 64,
                label: "old".into(),
                ..MkfsParams::default()
            },
        )
        .unwrap();
        (meta, data)
    }

    fn read_only() -> MountOptions {
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        }
    }

    #[test]
    fn label_and_path_reach_the_primary_the_copies_and_the_data_device() {
        let (meta, data) = pair();
        let change = Change {
            label: Some("new label".into()),
            data_path: Some(b"/srv/data.img".to_vec()),
        };
        let new = tune(&*meta, &*data, &change).unwrap();
        assert_eq!(new.label, "new label");
        let r = crate::check::check(&*meta, &*data).unwrap();
        assert!(r.is_clean(), "{r}");
        let fs = Fs::mount(meta.clone(), data.clone(), read_only()).unwrap();
        assert_eq!(fs.superblock().label, "new label");
        assert_eq!(fs.superblock().data_path, b"/srv/data.img");
        fs.unmount().unwrap();
        let dsb = crate::fs::read_superblock(&*data).unwrap();
        assert_eq!((dsb.label.as_str(), dsb.role), ("new label", Role::Data));
    }

    #[test]
    fn bad_changes_and_differing_copies_are_refused_and_write_nothing() {
        let (meta, data) = pair();
        let before = meta.snapshot();
        for change in [
            Change {
                label: Some("x".repeat(LABEL_LEN + 1)),
                ..Change::default()
            },
            Change {
                data_path: Some(Vec::new()),
                ..Change::default()
            },
        ] {
            assert!(tune(&*meta, &*data, &change).is_err(), "{change:?}");
        }
        assert!(meta.snapshot() == before);
        // A copy that differs: fsck first.
        let sb = crate::fs::read_superblock(&*meta).unwrap();
        let off = copy_offset(&sb, sb.copy_segments[0]);
        meta.write_at(&[0xff; 16], off + 200).unwrap();
        let e = tune(
            &*meta,
            &*data,
            &Change {
                label: Some("y".into()),
                ..Change::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("fsck"), "{e}");
    }

    /// Every state a power cut during a tune can leave, with 512-byte sectors written in any
    /// order within each flush epoch (the new data path is long enough for the superblock's
    /// changes to span two sectors, so a write can tear): while the primary is readable a
    /// mount sees the old or the new superblock, whole; fsck -y then leaves a clean file system
    /// that is wholly the old or the new one; where the primary itself was torn, fsck restores
    /// it — to the new one, as every copy is new by then — and the file system mounts.
    #[test]
    fn a_crash_during_a_tune_leaves_the_old_or_the_new_file_system() {
        let (meta, data) = pair();
        let base = meta.snapshot();
        let data_before = data.snapshot();
        let rec = Arc::new(RecordingDevice::with_atomic_unit(
            MemDevice::from_bytes(base.clone()),
            512,
        ));
        let path = format!("/elsewhere/{}.img", "d".repeat(600)).into_bytes();
        let change = Change {
            label: Some("tuned".into()),
            data_path: Some(path.clone()),
        };
        tune(&*rec, &*data, &change).unwrap();
        let data_after = data.snapshot();
        let last = rec.epoch_count() - 1;
        // Old or new, whole: (label, data path).
        let which = |fs: &Fs, when: &str| -> bool {
            let sb = fs.superblock();
            match sb.label.as_str() {
                "old" => {
                    assert!(sb.data_path.is_empty(), "{when}: old label, new path");
                    false
                }
                "tuned" => {
                    assert_eq!(sb.data_path, path, "{when}: new label, old path");
                    true
                }
                other => panic!("{when}: label {other:?}"),
            }
        };
        let (mut states, mut old, mut new, mut restored) = (0, 0, 0, 0);
        for k in 0..rec.epoch_count() {
            let n = rec.epoch(k).len();
            let mut subsets: Vec<WriteSubset> = (0..=n).map(WriteSubset::Prefix).collect();
            subsets.extend((0..8).map(|seed| WriteSubset::Random {
                seed: seed + 100 * k as u64,
            }));
            // The data device is written after the metadata device's last flush.
            let datas: &[&Vec<u8>] = if k == last {
                &[&data_before, &data_after]
            } else {
                &[&data_before]
            };
            for (subset, d) in subsets
                .iter()
                .flat_map(|s| datas.iter().map(move |d| (s.clone(), *d)))
            {
                let when = format!("epoch {k} {subset:?}");
                let image = rec.crash_state(&base, k, &subset).unwrap();
                let m: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(image));
                let d: Arc<dyn BlockDevice> = Arc::new(MemDevice::from_bytes(d.clone()));
                states += 1;
                let torn = crate::fs::read_superblock(&*m).is_err();
                if !torn {
                    let fs = Fs::mount(m.clone(), d.clone(), read_only())
                        .unwrap_or_else(|e| panic!("{when}: {e}"));
                    which(&fs, &when);
                    fs.unmount().unwrap();
                }
                let opts = RepairOptions {
                    policy: Policy::all(),
                    ..RepairOptions::default()
                };
                let out = repair(&m, &d, &opts, &mut |_| false).unwrap();
                assert!(out.last.is_clean(), "{when}: {}", out.last);
                let fs = Fs::mount(m.clone(), d.clone(), read_only())
                    .unwrap_or_else(|e| panic!("{when}, after fsck: {e}"));
                if which(&fs, &when) {
                    new += 1;
                    restored += torn as u32;
                } else {
                    assert!(
                        !torn,
                        "{when}: a torn primary restored to the old superblock"
                    );
                    old += 1;
                }
                fs.unmount().unwrap();
            }
        }
        assert!(
            states > 50 && old > 0 && new > 0 && restored > 0,
            "{states} states: {old} old, {new} new, {restored} restored"
        );
    }
}
