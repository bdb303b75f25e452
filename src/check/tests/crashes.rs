//! Power cuts: the metadata device as it could be after a crash at any moment of the workload
//! (every flush boundary, with none, some or all of the writes since the last flush) must be
//! consistent once the log is rolled forward.

use super::image::{quiet_mount_options, workload, Image, Mode};
use super::*;
use crate::device::{MemDevice, RecordedWrite, RecordingDevice};
use crate::fs::Fs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

pub(super) fn apply(image: &mut [u8], w: &RecordedWrite) {
    image[w.offset as usize..w.offset as usize + w.bytes.len()].copy_from_slice(&w.bytes);
}

/// Which of an epoch's `n` writes reached the device in the crash states tried for it: none,
/// the first half, a random half, all (writes between two flushes may land in any order).
pub(super) fn crash_subsets(n: usize, rng: &mut StdRng) -> Vec<Vec<bool>> {
    vec![
        vec![false; n],
        (0..n).map(|i| i < n / 2).collect(),
        (0..n).map(|_| rng.gen_bool(0.5)).collect(),
        vec![true; n],
    ]
}

fn every_crash_state_recovers_consistently(mode: Mode) {
    let img = Image::fresh_with_log(32);
    let base = img.meta.snapshot();
    let recorder = Arc::new(RecordingDevice::new(MemDevice::from_bytes(base.clone())));
    let fs = Fs::mount(recorder.clone(), img.data.clone(), quiet_mount_options()).unwrap();
    workload(&fs);
    fs.unmount().unwrap();

    let mut rng = StdRng::seed_from_u64(42);
    let mut durable = base; // every epoch before the crash epoch
    let (mut states, mut rolled, mut discarded, mut other_lost) = (0, 0, 0, 0);
    for k in 0..recorder.epoch_count() {
        let writes = recorder.epoch(k);
        let n = writes.len();
        for chosen in crash_subsets(n, &mut rng) {
            let mut image = durable.clone();
            for (w, _) in writes.iter().zip(&chosen).filter(|(_, &c)| c) {
                apply(&mut image, w);
            }
            let meta = MemDevice::from_bytes(image);
            let r = crate::check::check(&meta, &*img.data).unwrap();
            states += 1;
            rolled += (r.stats.transactions_rolled_forward > 0) as u32;
            discarded += (r.stats.partial_segments_discarded > 0) as u32;
            other_lost += r.warnings().any(|p| p.message.contains("is lost")) as u32;
            let which = format!("crash in epoch {k} of {}", recorder.epoch_count());
            match mode {
                // Entries of a crash state are only known to a tree that persists them.
                Mode::Listed => {
                    if let Some(p) = r.errors().find(|p| p.pass != NAMESPACE) {
                        panic!("{which}: unexpected error [{}] {}\n{r}", p.pass, p.message);
                    }
                }
                Mode::Tree => assert!(r.is_clean(), "{which}:\n{r}"),
            }
        }
        for w in &writes {
            apply(&mut durable, w);
        }
    }
    assert!(states > 200, "only {states} crash states");
    // The states cover recovery: some roll transactions forward.
    assert!(rolled > 50, "{rolled} of {states} states roll forward");
    eprintln!(
        "{states} crash states: {rolled} roll forward, {discarded} discard a torn chain, \
         {other_lost} lost the other checkpoint"
    );
}

in_both_modes!(
    every_crash_state_of_the_workload_recovers_consistently,
    every_crash_state_of_the_workload_recovers_consistently_through_the_tree,
    every_crash_state_recovers_consistently
);
