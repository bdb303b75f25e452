//! What is already on a device, and whether something is using it: mkfs refuses to format
//! over a file system or partition table unless forced, and never formats a device in use.
//!
//! Signatures are checked conservatively: a false alarm costs the user a `--force`, a miss
//! costs their data.

use super::BlockDevice;
use crate::format::superblock::{self as sb, LABEL_LEN, SB_MAGIC};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Bytes read from the start of the device: enough for every signature below (btrfs's is the
/// farthest, at 65600).
const HEAD_BYTES: u64 = 68 * 1024;

/// Describe what the device already holds ("an ext4 file system (label \"home\")"), or None
/// when no known signature is found. A device that cannot be read is reported too, since
/// nothing can be said about it.
pub fn probe_existing(dev: &dyn BlockDevice) -> Option<String> {
    let len = dev.size().min(HEAD_BYTES) as usize;
    let mut head = vec![0u8; len];
    if let Err(e) = dev.read_at(&mut head, 0) {
        return Some(format!("unreadable content ({e})"));
    }
    identify(&head)
}

/// The first match among the known signatures in the first bytes of a device.
fn identify(head: &[u8]) -> Option<String> {
    let at = |offset: usize, magic: &[u8]| {
        head.get(offset..offset + magic.len())
            .is_some_and(|bytes| bytes == magic)
    };
    let boot_signature = at(510, &[0x55, 0xAA]);

    if at(sb::at::MAGIC, SB_MAGIC) {
        return Some(dualfs(head));
    }
    if at(0, b"LUKS\xba\xbe") {
        return Some("a LUKS encrypted volume".into());
    }
    if at(0, b"XFSB") {
        return Some("an XFS file system".into());
    }
    if at(0, b"hsqs") {
        return Some("a SquashFS file system".into());
    }
    if at(1080, &0xEF53u16.to_le_bytes()) {
        return Some(ext(head));
    }
    if at(1024, &0xF2F5_2010u32.to_le_bytes()) {
        return Some("an F2FS file system".into());
    }
    if at(65600, b"_BHRfS_M") {
        return Some("a btrfs file system".into());
    }
    // LVM's label may sit in any of the first four sectors.
    if (0..4).any(|sector| at(sector * 512, b"LABELONE") && at(sector * 512 + 24, b"LVM2 001")) {
        return Some("an LVM2 physical volume".into());
    }
    // md superblocks of versions 1.1 (at 0) and 1.2 (at 4 KiB).
    if at(0, &0xA92B_4EFCu32.to_le_bytes()) || at(4096, &0xA92B_4EFCu32.to_le_bytes()) {
        return Some("a Linux RAID (md) member".into());
    }
    // The swap signature ends the first page, whose size depends on the machine that made it.
    let swap_at_page_end =
        |page: usize| at(page - 10, b"SWAPSPACE2") || at(page - 10, b"SWAP-SPACE");
    if [4096, 8192, 16384, 65536].into_iter().any(swap_at_page_end) {
        return Some("swap space".into());
    }
    if at(32769, b"CD001") {
        return Some("an ISO 9660 (CD/DVD) file system".into());
    }
    if at(3, b"NTFS    ") {
        return Some("an NTFS file system".into());
    }
    if at(3, b"EXFAT   ") {
        return Some("an exFAT file system".into());
    }
    let fat_label = at(54, b"FAT12") || at(54, b"FAT16") || at(82, b"FAT32");
    if boot_signature && fat_label {
        return Some("a FAT (vfat) file system".into());
    }
    // GPT's header is in the second logical block, which is at 4 KiB on 4Kn disks.
    if at(512, b"EFI PART") || at(4096, b"EFI PART") {
        return Some("a GPT partition table".into());
    }
    if boot_signature {
        // Entries of 16 bytes from 446; an entry is in use when its type (byte 4) is set.
        let used = (0..4).filter(|i| head[446 + i * 16 + 4] != 0).count();
        if used > 0 {
            return Some(format!("an MBR partition table ({used} partitions)"));
        }
    }
    None
}

fn dualfs(head: &[u8]) -> String {
    let role = match head.get(sb::at::ROLE..sb::at::ROLE + 4) {
        Some(&[1, 0, 0, 0]) => "metadata device",
        Some(&[2, 0, 0, 0]) => "data device",
        _ => "device (unknown role)",
    };
    let mut description = format!("a DualFS {role}");
    if let Some(uuid) = head
        .get(sb::at::UUID..sb::at::UUID + 16)
        .and_then(|b| uuid::Uuid::from_slice(b).ok())
    {
        description += &format!(" (UUID {uuid}");
        let label = label_at(head, sb::at::LABEL, LABEL_LEN);
        if !label.is_empty() {
            description += &format!(", label \"{label}\"");
        }
        description += ")";
    }
    description
}

/// ext2, ext3 or ext4, told apart by the feature flags of the superblock at 1024.
fn ext(head: &[u8]) -> String {
    let flags = |offset: usize| {
        head.get(1024 + offset..1024 + offset + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    let (compat, incompat, ro_compat) = (flags(0x5C), flags(0x60), flags(0x64));
    const HAS_JOURNAL: u32 = 0x4;
    // Any incompat feature beyond filetype/recover/journal_dev/meta_bg, or ro_compat beyond
    // sparse_super/large_file/btree_dir, is ext4's.
    const EXT3_INCOMPAT: u32 = 0x2 | 0x4 | 0x8 | 0x10;
    const EXT3_RO_COMPAT: u32 = 0x1 | 0x2 | 0x4;
    let kind = if incompat & !EXT3_INCOMPAT != 0 || ro_compat & !EXT3_RO_COMPAT != 0 {
        "ext4"
    } else if compat & HAS_JOURNAL != 0 {
        "ext3"
    } else {
        "ext2"
    };
    let label = label_at(head, 1024 + 0x78, 16);
    if label.is_empty() {
        format!("an {kind} file system")
    } else {
        format!("an {kind} file system (label \"{label}\")")
    }
}

/// A NUL-padded text field, printable characters only.
fn label_at(head: &[u8], offset: usize, len: usize) -> String {
    let Some(bytes) = head.get(offset..offset + len) else {
        return String::new();
    };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(len);
    String::from_utf8_lossy(&bytes[..end])
        .chars()
        .filter(|c| !c.is_control())
        .collect()
}

/// Whether `path` (a block device or an image file) is in use, and how: mounted, active swap,
/// attached to a loop device, claimed exclusively (block devices) or flocked (image files,
/// as a running DualFS holds them). None when it looks free or does not exist.
pub fn is_mounted(path: &Path) -> Option<String> {
    let target = std::fs::metadata(path).ok()?;
    let is_block = target.file_type().is_block_device();
    let same_storage = |other: &Path| {
        std::fs::metadata(other).is_ok_and(|m| {
            if is_block {
                m.file_type().is_block_device() && m.rdev() == target.rdev()
            } else {
                m.dev() == target.dev() && m.ino() == target.ino()
            }
        })
    };

    if let Ok(table) = crate::mountinfo::read() {
        for mount in table {
            let device_matches = is_block && mount.device() == target.rdev();
            if device_matches
                || (mount.source.starts_with('/') && same_storage(Path::new(&mount.source)))
            {
                return Some(format!("mounted on {}", mount.mount_point.display()));
            }
        }
    }
    if let Ok(swaps) = std::fs::read_to_string("/proc/swaps") {
        let mut names = swaps
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next());
        let unescaped =
            |name: &str| OsString::from_vec(crate::mountinfo::unescape(name.as_bytes()));
        if names.any(|name| same_storage(Path::new(&unescaped(name)))) {
            return Some("in use as swap space".into());
        }
    }
    if is_block {
        return claimed_exclusively(path).then(|| {
            "in use by the kernel or another program (mounted, a RAID or LVM member, or opened \
             exclusively)"
                .into()
        });
    }
    if let Some(loop_device) = loop_device_backed_by(&same_storage) {
        return Some(format!("attached to loop device {loop_device}"));
    }
    flocked(path).then(|| "locked by another process (mounted by DualFS?)".into())
}

/// The loop device (`/dev/loopN`) whose backing file passes `same_storage`, if any.
fn loop_device_backed_by(same_storage: &dyn Fn(&Path) -> bool) -> Option<String> {
    let entries = std::fs::read_dir("/sys/block").ok()?;
    entries.flatten().find_map(|entry| {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            return None;
        }
        let backing = std::fs::read_to_string(entry.path().join("loop/backing_file")).ok()?;
        same_storage(Path::new(backing.trim_end_matches('\n'))).then(|| format!("/dev/{name}"))
    })
}

/// Would an exclusive open of this block device fail with EBUSY? The test open is read-only
/// and closed at once.
fn claimed_exclusively(path: &Path) -> bool {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(path);
    matches!(opened, Err(e) if e.raw_os_error() == Some(libc::EBUSY))
}

/// Does another open file hold a flock on this image? The test lock is dropped by closing.
fn flocked(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::file::{FileDevice, OpenMode};
    use crate::device::MemDevice;
    use dualfs_testkit::LoopDevice;

    /// A zeroed image of `len` bytes with `magic` written at `offset`.
    fn image_with(len: usize, writes: &[(usize, &[u8])]) -> MemDevice {
        let mut bytes = vec![0u8; len];
        for (offset, magic) in writes {
            bytes[*offset..offset + magic.len()].copy_from_slice(magic);
        }
        MemDevice::from_bytes(bytes)
    }

    fn probe(len: usize, writes: &[(usize, &[u8])]) -> String {
        probe_existing(&image_with(len, writes)).unwrap_or_else(|| "nothing".into())
    }

    /// Whether `ready` becomes true within a second. A descriptor released by one test can
    /// live on for a moment in a child that another test is spawning (fork copies every
    /// descriptor until exec closes it), so "free again" is checked with some patience.
    fn eventually(ready: impl Fn() -> bool) -> bool {
        (0..100).any(|_| {
            ready() || {
                std::thread::sleep(std::time::Duration::from_millis(10));
                false
            }
        })
    }

    const MB: usize = 1 << 20;

    #[test]
    fn empty_and_tiny_devices_hold_nothing() {
        assert_eq!(probe(MB, &[]), "nothing");
        assert_eq!(probe(0, &[]), "nothing");
        assert_eq!(probe(3, &[(0, b"XFS")]), "nothing");
        // Random-looking bytes that match no signature.
        let noise: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        assert_eq!(probe_existing(&MemDevice::from_bytes(noise)), None);
    }

    #[test]
    fn dualfs_devices_with_role_uuid_and_label() {
        let uuid = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let meta = probe(
            8192,
            &[
                (0, b"DUALFSSB"),
                (16, uuid.as_bytes()),
                (32, &1u32.to_le_bytes()),
                (104, b"scratch"),
            ],
        );
        assert_eq!(
            meta,
            format!("a DualFS metadata device (UUID {uuid}, label \"scratch\")")
        );
        let data = probe(8192, &[(0, b"DUALFSSB"), (32, &2u32.to_le_bytes())]);
        assert!(data.starts_with("a DualFS data device"), "{data}");
        let odd = probe(8192, &[(0, b"DUALFSSB"), (32, &9u32.to_le_bytes())]);
        assert!(odd.starts_with("a DualFS device (unknown role)"), "{odd}");
    }

    #[test]
    fn ext_versions_by_features() {
        let magic = 0xEF53u16.to_le_bytes();
        let ext2 = probe(MB, &[(1080, &magic)]);
        assert_eq!(ext2, "an ext2 file system");
        let ext3 = probe(MB, &[(1080, &magic), (1024 + 0x5C, &4u32.to_le_bytes())]);
        assert_eq!(ext3, "an ext3 file system");
        let ext4 = probe(
            MB,
            &[
                (1080, &magic),
                (1024 + 0x5C, &4u32.to_le_bytes()),
                (1024 + 0x60, &0x2C2u32.to_le_bytes()),
                (1024 + 0x78, b"home"),
            ],
        );
        assert_eq!(ext4, "an ext4 file system (label \"home\")");
    }

    #[test]
    fn file_systems_with_a_magic_at_a_fixed_offset() {
        let cases: &[(usize, &[u8], &str)] = &[
            (0, b"XFSB", "XFS"),
            (0, b"LUKS\xba\xbe", "LUKS"),
            (0, b"hsqs", "SquashFS"),
            (65600, b"_BHRfS_M", "btrfs"),
            (1024, &0xF2F5_2010u32.to_le_bytes(), "F2FS"),
            (4086, b"SWAPSPACE2", "swap"),
            (4086, b"SWAP-SPACE", "swap"),
            (65526, b"SWAPSPACE2", "swap"),
            (32769, b"CD001", "ISO 9660"),
            (3, b"NTFS    ", "NTFS"),
            (3, b"EXFAT   ", "exFAT"),
            (4096, &0xA92B_4EFCu32.to_le_bytes(), "RAID"),
        ];
        for (offset, magic, name) in cases {
            let found = probe(MB, &[(*offset, magic)]);
            assert!(found.contains(name), "{name} at {offset}: found {found}");
        }
        // btrfs's magic lies past the end of a small device: not an error, just absent.
        assert_eq!(probe(65000, &[]), "nothing");
    }

    #[test]
    fn lvm_label_in_any_of_the_first_sectors() {
        let found = probe(MB, &[(1024, b"LABELONE"), (1024 + 24, b"LVM2 001")]);
        assert_eq!(found, "an LVM2 physical volume");
        assert_eq!(probe(MB, &[(1024, b"LABELONE")]), "nothing");
    }

    #[test]
    fn fat_needs_its_label_and_the_boot_signature() {
        let boot = [0x55, 0xAA];
        assert!(probe(MB, &[(54, b"FAT16   "), (510, &boot)]).contains("FAT"));
        assert!(probe(MB, &[(82, b"FAT32   "), (510, &boot)]).contains("FAT"));
        assert!(probe(MB, &[(54, b"FAT12   "), (510, &boot)]).contains("FAT"));
        assert_eq!(probe(MB, &[(54, b"FAT16   ")]), "nothing");
    }

    #[test]
    fn partition_tables() {
        let boot = [0x55, 0xAA];
        let gpt = probe(MB, &[(510, &boot), (446 + 4, &[0xEE]), (512, b"EFI PART")]);
        assert_eq!(gpt, "a GPT partition table");
        assert_eq!(probe(MB, &[(4096, b"EFI PART")]), "a GPT partition table");
        let mbr = probe(MB, &[(510, &boot), (446 + 4, &[0x83]), (462 + 4, &[0x82])]);
        assert_eq!(mbr, "an MBR partition table (2 partitions)");
        // A boot signature with no partition in use is not a table.
        assert_eq!(probe(MB, &[(510, &boot)]), "nothing");
    }

    #[test]
    fn unreadable_devices_are_reported() {
        let failing = crate::device::recording::RecordingDevice::new(MemDevice::new(MB as u64));
        failing.fail_reads_in(0..1);
        let found = probe_existing(&failing).unwrap();
        assert!(found.starts_with("unreadable"), "{found}");
    }

    #[test]
    fn real_ext4_image_is_recognised() {
        let img = tempfile::NamedTempFile::new().unwrap();
        img.as_file().set_len(8 << 20).unwrap();
        let made = std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "probe-me"])
            .arg(img.path())
            .status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipping: mkfs.ext4 is not available");
            return;
        }
        let dev = FileDevice::open(img.path(), OpenMode::default()).unwrap();
        assert_eq!(
            probe_existing(&dev).as_deref(),
            Some("an ext4 file system (label \"probe-me\")")
        );
    }

    #[test]
    fn free_and_missing_files_are_not_in_use() {
        let img = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(is_mounted(img.path()), None);
        assert_eq!(is_mounted(Path::new("/nonexistent/dualfs.img")), None);
    }

    #[test]
    fn an_open_dualfs_image_is_in_use() {
        let img = tempfile::NamedTempFile::new().unwrap();
        img.as_file().set_len(4096).unwrap();
        let mode = OpenMode {
            read_only: false,
            exclusive: true,
            ..OpenMode::default()
        };
        let dev = FileDevice::open(img.path(), mode).unwrap();
        let found = is_mounted(img.path()).unwrap();
        assert!(found.contains("locked"), "{found}");
        drop(dev);
        assert!(eventually(|| is_mounted(img.path()).is_none()));
    }

    #[test]
    fn loop_attached_images_and_claimed_block_devices_are_in_use() {
        let Some(lo) = LoopDevice::new(4 << 20) else {
            return;
        };
        let found = is_mounted(lo.image_path()).unwrap();
        assert_eq!(
            found,
            format!("attached to loop device {}", lo.path().display())
        );

        assert_eq!(is_mounted(lo.path()), None);
        let mode = OpenMode {
            read_only: false,
            exclusive: true,
            ..OpenMode::default()
        };
        let dev = FileDevice::open(lo.path(), mode).unwrap();
        let found = is_mounted(lo.path()).unwrap();
        assert!(found.contains("in use"), "{found}");
        drop(dev);
        assert!(eventually(|| is_mounted(lo.path()).is_none()));
    }

    #[test]
    fn mounted_block_devices_are_in_use() {
        let Some(mut lo) = LoopDevice::new(8 << 20) else {
            return;
        };
        let Some(mount) = lo.mount_ext4() else {
            return;
        };
        let found = is_mounted(lo.path()).unwrap();
        assert_eq!(found, format!("mounted on {}", mount.display()));
    }
}
