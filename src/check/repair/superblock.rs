//! Superblock repairs, written straight to the devices: copies rewritten from the primary, the
//! data superblock rebuilt from the metadata one, the primary restored from a copy.

use super::fixes::RawFix;
use crate::device::BlockDevice;
use crate::format::superblock::{Role, Superblock, SB_MAGIC, SB_SIZE};
use crate::{FsError, Result};

/// Bytes read at a time while looking for a superblock copy.
const SCAN_CHUNK: usize = 4 << 20;
// `find_copy` looks at 4096-byte boundaries of each chunk: no copy may straddle two.
const _: () = assert!(SCAN_CHUNK % SB_SIZE == 0 && SB_SIZE == 4096);

pub fn apply(meta: &dyn BlockDevice, data: &dyn BlockDevice, fix: &RawFix) -> Result<()> {
    match fix {
        RawFix::RewriteCopy { segment } => {
            let sb = primary(meta)?;
            let bs = sb.block_size as u64;
            let addr = segment
                .checked_mul(sb.segment_blocks as u64)
                .and_then(|a| a.checked_mul(bs))
                .filter(|&off| off.checked_add(bs).is_some_and(|e| e <= meta.size()))
                .ok_or_else(|| FsError::corrupt("superblock", "copy outside the device"))?;
            // The copy is the primary's block, byte for byte (not re-encoded).
            let mut raw = vec![0u8; bs as usize];
            meta.read_at(&mut raw, 0)?;
            meta.write_at(&raw, addr)?;
            meta.flush()?;
            Ok(())
        }
        RawFix::RewriteDataSuperblock => {
            let sb = primary(meta)?;
            let dsb = Superblock {
                role: Role::Data,
                data_path: Vec::new(),
                ..sb.clone()
            };
            let bs = sb.block_size as u64;
            if data.size() < bs {
                return Err(FsError::corrupt("superblock", "data device too small"));
            }
            data.write_at(&block(&dsb, bs), 0)?;
            data.flush()?;
            Ok(())
        }
        RawFix::RestorePrimary => {
            if let Some(raw) = majority_copy(meta)? {
                meta.write_at(&raw, 0)?;
                meta.flush()?;
                return Ok(());
            }
            let sb = find_copy(meta)?.ok_or_else(|| {
                FsError::corrupt(
                    "superblock",
                    "no usable copy of the metadata superblock was found",
                )
            })?;
            let bs = sb.block_size as u64;
            meta.write_at(&block(&sb, bs), 0)?;
            meta.flush()?;
            Ok(())
        }
    }
}

/// When the primary decodes: the block most of the copies it lists agree on (sound metadata
/// superblocks only), if that is not the primary itself.
fn majority_copy(meta: &dyn BlockDevice) -> Result<Option<Vec<u8>>> {
    let Ok(sb) = primary(meta) else {
        return Ok(None);
    };
    let bs = sb.block_size as u64;
    let mut found: Vec<Vec<u8>> = Vec::new();
    for &seg in &sb.copy_segments {
        let Some(off) = seg
            .checked_mul(sb.segment_blocks as u64)
            .and_then(|a| a.checked_mul(bs))
            .filter(|&o| o.checked_add(bs).is_some_and(|e| e <= meta.size()))
        else {
            continue;
        };
        let mut raw = vec![0u8; bs as usize];
        meta.read_at(&mut raw, off)?;
        if Superblock::decode(&raw).is_ok_and(|c| c.role == Role::Meta) {
            found.push(raw);
        }
    }
    let mut primary_raw = vec![0u8; bs as usize];
    meta.read_at(&mut primary_raw, 0)?;
    let best = found
        .iter()
        .max_by_key(|a| found.iter().filter(|b| a == b).count())
        .cloned();
    Ok(best.filter(|b| *b != primary_raw))
}

fn block(sb: &Superblock, bs: u64) -> Vec<u8> {
    let mut b = sb.encode();
    // Padded, never cut: a block is at least as large as a superblock.
    assert!(b.len() <= bs as usize, "a superblock larger than its block");
    b.resize(bs as usize, 0);
    b
}

fn primary(meta: &dyn BlockDevice) -> Result<Superblock> {
    let mut b = vec![0u8; SB_SIZE];
    meta.read_at(&mut b, 0)?;
    Superblock::decode(&b)
}

/// The first superblock copy in the log that describes itself: a metadata superblock found at
/// the start of a segment its own copy list names, on a device large enough for it.
pub fn find_copy(meta: &dyn BlockDevice) -> Result<Option<Superblock>> {
    let size = meta.size();
    let mut buf = vec![0u8; SCAN_CHUNK];
    let mut off = 4096u64; // block 0 is the damaged primary
    while off < size {
        let n = (size - off).min(SCAN_CHUNK as u64) as usize;
        meta.read_at(&mut buf[..n], off)?;
        let mut at = 0usize;
        while at + SB_SIZE <= n {
            if &buf[at..at + SB_MAGIC.len()] == SB_MAGIC {
                if let Ok(sb) = Superblock::decode(&buf[at..at + SB_SIZE]) {
                    let here = off + at as u64;
                    let bs = sb.block_size as u64;
                    let listed = sb.copy_segments.iter().any(|&s| {
                        s.checked_mul(sb.segment_blocks as u64)
                            .and_then(|a| a.checked_mul(bs))
                            == Some(here)
                    });
                    let fits = sb.meta_blocks.checked_mul(bs).is_some_and(|b| b <= size);
                    if sb.role == Role::Meta && listed && fits {
                        return Ok(Some(sb));
                    }
                }
            }
            at += 4096;
        }
        // Copies start on 4096-byte boundaries and are 4096 bytes long, and chunks are
        // multiples of 4096: no copy straddles two chunks.
        off += n as u64;
    }
    Ok(None)
}
