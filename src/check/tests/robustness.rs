//! Damage of any kind never makes the checker panic or hang, and damage to a live block is
//! always noticed (and damage to a dead one never is).

use super::clean::workload_image;
use super::damage::{read_block, write_block};
use super::image::{Mode, BS};
use crate::check::check;
use crate::device::MemDevice;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Blocks of the device that hold anything (mkfs leaves the rest zero).
fn nonzero_blocks(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks(BS as usize)
        .enumerate()
        .filter(|(_, b)| b.iter().any(|&x| x != 0))
        .map(|(i, _)| i as u64)
        .collect()
}

#[test]
fn flipped_bits_are_noticed_exactly_in_live_blocks() {
    let img = workload_image();
    let base = img.outcome(Mode::Listed);
    assert!(base.report.problems.is_empty(), "{}", base.report);
    let live = &base.live_log_blocks();
    // Checkpoint regions have their own tests: losing either one leaves a consistent file
    // system (the other takes over), so a flip there is not an error.
    let (live_blocks, dead_blocks): (Vec<u64>, Vec<u64>) = nonzero_blocks(&img.meta.snapshot())
        .into_iter()
        .filter(|&a| a != 1 && a != 2)
        .partition(|a| live.contains(a));
    assert!(
        live_blocks.len() > 20 && dead_blocks.len() > 20,
        "{} live and {} dead written blocks",
        live_blocks.len(),
        dead_blocks.len()
    );
    let mut rng = StdRng::seed_from_u64(0x5eed);
    for round in 0..60 {
        let pool = if round % 2 == 0 {
            &live_blocks
        } else {
            &dead_blocks
        };
        let addr = pool[rng.gen_range(0..pool.len())];
        let bit = rng.gen_range(0..BS * 8);
        let damaged = img.copy();
        let mut b = read_block(&damaged, addr);
        b[(bit / 8) as usize] ^= 1 << (bit % 8);
        write_block(&damaged, addr, &b);
        let r = damaged.check(Mode::Listed);
        if live.contains(&addr) {
            assert!(
                !r.is_clean(),
                "bit {bit} of live block {addr} flipped unnoticed:\n{r}"
            );
        } else {
            assert!(
                r.is_clean(),
                "bit {bit} of dead block {addr} flipped, yet:\n{r}"
            );
        }
    }
}

/// Damage `bytes` (the metadata device) in a way chosen by `rng`; says what it did.
fn damage(rng: &mut StdRng, bytes: &mut Vec<u8>, written: &[u64]) -> String {
    let bs = BS as usize;
    let pick = |rng: &mut StdRng| written[rng.gen_range(0..written.len())] as usize;
    let flip_in_blocks = |rng: &mut StdRng, bytes: &mut Vec<u8>| {
        let mut what = Vec::new();
        for _ in 0..rng.gen_range(1..=4) {
            let block = pick(rng);
            for _ in 0..rng.gen_range(1..=16) {
                let bit = rng.gen_range(0..bs * 8);
                bytes[block * bs + bit / 8] ^= 1 << (bit % 8);
            }
            what.push(block);
        }
        format!("bits flipped in blocks {what:?}")
    };
    let copy_over = |rng: &mut StdRng, bytes: &mut Vec<u8>| {
        // A block with a valid CRC in a place it does not belong.
        let mut what = Vec::new();
        for _ in 0..rng.gen_range(1..=3) {
            let (from, to) = (pick(rng), pick(rng));
            let b = bytes[from * bs..(from + 1) * bs].to_vec();
            bytes[to * bs..(to + 1) * bs].copy_from_slice(&b);
            what.push((from, to));
        }
        format!("blocks copied over others {what:?}")
    };
    match rng.gen_range(0..6) {
        0 => flip_in_blocks(rng, bytes),
        1 => {
            let mut what = Vec::new();
            for _ in 0..rng.gen_range(1..=3) {
                let block = pick(rng);
                bytes[block * bs..(block + 1) * bs].fill(0);
                what.push(block);
            }
            format!("blocks zeroed {what:?}")
        }
        2 => {
            let mut len = rng.gen_range(0..bytes.len());
            if rng.gen_bool(0.5) {
                len -= len % bs;
            }
            bytes.truncate(len);
            format!("truncated to {len} bytes")
        }
        3 => {
            for _ in 0..rng.gen_range(1..=64) {
                let bit = rng.gen_range(0..bytes.len() * 8);
                bytes[bit / 8] ^= 1 << (bit % 8);
            }
            "bits flipped anywhere".into()
        }
        4 => copy_over(rng, bytes),
        _ => {
            let a = flip_in_blocks(rng, bytes);
            let b = copy_over(rng, bytes);
            format!("{a}, {b}")
        }
    }
}

#[test]
fn damaged_metadata_never_panics_or_hangs() {
    let img = workload_image();
    let pristine = img.meta.snapshot();
    let written = nonzero_blocks(&pristine);
    let mut slowest = (Duration::ZERO, 0);
    let mut clean = 0;
    for seed in 0..200u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut bytes = pristine.clone();
        let what = damage(&mut rng, &mut bytes, &written);
        let meta = MemDevice::from_bytes(bytes);
        let data = img.data.clone();
        let (tx, rx) = mpsc::channel();
        let started = Instant::now();
        std::thread::spawn(move || {
            let r = check(&meta, &*data).map(|r| r.is_clean());
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(is_clean)) => clean += is_clean as u32,
            // Memory devices never fail: an Err would be damage taken for a device failure.
            Ok(Err(e)) => panic!("seed {seed} ({what}): the check failed: {e}"),
            Err(RecvTimeoutError::Timeout) => panic!("seed {seed} ({what}): no answer in 60 s"),
            Err(RecvTimeoutError::Disconnected) => {
                panic!("seed {seed} ({what}): the checker panicked")
            }
        }
        slowest = slowest.max((started.elapsed(), seed));
    }
    eprintln!(
        "200 damaged images: {clean} judged clean (damage to dead blocks); slowest check {:?} (seed {})",
        slowest.0, slowest.1
    );
}
