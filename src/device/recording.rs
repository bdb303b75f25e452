//! A device wrapper for crash-consistency tests: it records every write and flush, can rebuild
//! what the disk could hold after a power loss, can cut the power of a live process, and can
//! inject I/O errors.
//!
//! The record is a list of *epochs*: epoch `k` holds the writes made after flush `k` - 1 and
//! before flush `k` (epoch 0 starts when recording starts; the last epoch is still open).
//! After a power loss, a disk holds every epoch before the crash fully, and any subset of the
//! crash epoch's writes: a device may reorder and drop writes that were never flushed. Writes
//! are cut into aligned pieces of `atomic_unit` bytes (a sector), so that a crash state can
//! hold part of one large write, as a real disk can.

use super::BlockDevice;
use parking_lot::Mutex;
use std::io;
use std::ops::Range;

/// Atomic write unit of `RecordingDevice::new`: one 4 KiB sector.
pub const DEFAULT_ATOMIC_UNIT: usize = 4096;

/// One recorded write (or an aligned piece of a larger one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedWrite {
    pub offset: u64,
    pub bytes: Vec<u8>,
}

/// Which writes of the crash epoch reached the disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteSubset {
    /// The first `n` writes, in the order they were made (more than there are means all).
    Prefix(usize),
    /// Each write independently with probability one half, chosen by a seeded generator, so
    /// a failing seed can be replayed.
    Random { seed: u64 },
    /// The writes with these indexes within the epoch (applied in recorded order).
    Chosen(Vec<usize>),
}

pub struct RecordingDevice<D> {
    inner: D,
    atomic_unit: usize,
    state: Mutex<State>,
}

struct State {
    /// Never empty: the last epoch is the open one.
    epochs: Vec<Vec<RecordedWrite>>,
    power_cut: bool,
    /// Writes attempted since the device was made (counting failed ones).
    writes_attempted: u64,
    /// Fail the write whose `writes_attempted` count reaches this (1-based).
    fail_write_number: Option<u64>,
    failing_reads: Vec<Range<u64>>,
}

impl<D: BlockDevice> RecordingDevice<D> {
    /// Wrap `inner` and start recording, with 4 KiB atomic writes.
    pub fn new(inner: D) -> Self {
        Self::with_atomic_unit(inner, DEFAULT_ATOMIC_UNIT)
    }

    /// Wrap `inner`; writes are recorded as pieces of at most `atomic_unit` bytes aligned to
    /// multiples of it (`usize::MAX`: whole writes). An `atomic_unit` of 0 is taken as 1.
    pub fn with_atomic_unit(inner: D, atomic_unit: usize) -> Self {
        RecordingDevice {
            inner,
            atomic_unit: atomic_unit.max(1),
            state: Mutex::new(State {
                epochs: vec![Vec::new()],
                power_cut: false,
                writes_attempted: 0,
                fail_write_number: None,
                failing_reads: Vec::new(),
            }),
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Forget the record so far and start again with one empty epoch. The base image for
    /// `crash_state` is then the device content at this moment.
    pub fn restart_recording(&self) {
        self.state.lock().epochs = vec![Vec::new()];
    }

    /// Number of epochs, counting the open one (flushes + 1).
    pub fn epoch_count(&self) -> usize {
        self.state.lock().epochs.len()
    }

    /// The writes of epoch `k` (empty if there is no such epoch).
    pub fn epoch(&self, k: usize) -> Vec<RecordedWrite> {
        self.state.lock().epochs.get(k).cloned().unwrap_or_default()
    }

    /// The device content after a crash during epoch `k`: `base` (the content when recording
    /// started) with epochs `0..k` applied and then `subset` of epoch `k`'s writes.
    pub fn crash_state(&self, base: &[u8], k: usize, subset: &WriteSubset) -> io::Result<Vec<u8>> {
        let state = self.state.lock();
        let Some(crash_epoch) = state.epochs.get(k) else {
            return Err(invalid_input(format!(
                "no epoch {k}: only {} recorded",
                state.epochs.len()
            )));
        };
        let chosen = choose(crash_epoch.len(), subset)?;
        let mut image = base.to_vec();
        for write in state.epochs[..k].iter().flatten() {
            apply(&mut image, write)?;
        }
        for (write, _) in crash_epoch.iter().zip(&chosen).filter(|(_, &c)| c) {
            apply(&mut image, write)?;
        }
        Ok(image)
    }

    /// Simulate a power loss in a live process: every later write and flush fails with EIO
    /// and reaches nothing. Reads still see what the inner device holds.
    pub fn cut_power(&self) {
        self.state.lock().power_cut = true;
    }

    pub fn power_is_cut(&self) -> bool {
        self.state.lock().power_cut
    }

    /// Make the `n`-th write from now fail with EIO (`n` = 1: the next one), once. The failed
    /// write reaches nothing and is not recorded. Replaces an earlier such request.
    pub fn fail_nth_write(&self, n: u64) {
        let mut state = self.state.lock();
        state.fail_write_number = Some(state.writes_attempted + n.max(1));
    }

    /// Make every read that touches `range` (byte offsets) fail with EIO until cleared.
    pub fn fail_reads_in(&self, range: Range<u64>) {
        self.state.lock().failing_reads.push(range);
    }

    /// Drop every injected error (not a power cut).
    pub fn clear_faults(&self) {
        let mut state = self.state.lock();
        state.fail_write_number = None;
        state.failing_reads.clear();
    }

    /// Writes attempted through this device so far, failed ones included.
    pub fn writes_attempted(&self) -> u64 {
        self.state.lock().writes_attempted
    }

    fn pieces<'a>(&self, buf: &'a [u8], offset: u64) -> impl Iterator<Item = (u64, &'a [u8])> {
        let unit = self.atomic_unit as u64;
        let mut done = 0usize;
        std::iter::from_fn(move || {
            if done == buf.len() {
                return None;
            }
            let at = offset + done as u64;
            let room = unit - at % unit;
            let len = room.min((buf.len() - done) as u64) as usize;
            let piece = (at, &buf[done..done + len]);
            done += len;
            Some(piece)
        })
    }
}

impl<D: BlockDevice> BlockDevice for RecordingDevice<D> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset.saturating_add(buf.len() as u64);
        let failing = self
            .state
            .lock()
            .failing_reads
            .iter()
            .any(|r| r.start < end && offset < r.end);
        if failing {
            return Err(eio());
        }
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // The lock is held across the inner write so the record has the order the inner
        // device saw.
        let mut state = self.state.lock();
        state.writes_attempted += 1;
        if state.power_cut {
            return Err(eio());
        }
        if state.fail_write_number == Some(state.writes_attempted) {
            state.fail_write_number = None;
            return Err(eio());
        }
        self.inner.write_at(buf, offset)?;
        let pieces = self
            .pieces(buf, offset)
            .map(|(offset, bytes)| RecordedWrite {
                offset,
                bytes: bytes.to_vec(),
            });
        let open_epoch = state
            .epochs
            .last_mut()
            .expect("the open epoch always exists");
        open_epoch.extend(pieces);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.power_cut {
            return Err(eio());
        }
        self.inner.flush()?;
        state.epochs.push(Vec::new());
        Ok(())
    }

    fn describe(&self) -> String {
        format!("recording {}", self.inner.describe())
    }
}

/// For each write of an epoch of `len` writes, whether the subset holds it.
fn choose(len: usize, subset: &WriteSubset) -> io::Result<Vec<bool>> {
    Ok(match subset {
        WriteSubset::Prefix(n) => (0..len).map(|i| i < *n).collect(),
        WriteSubset::Random { seed } => {
            let mut rng = SplitMix64(*seed);
            (0..len).map(|_| rng.next() & 1 == 1).collect()
        }
        WriteSubset::Chosen(indexes) => {
            let mut chosen = vec![false; len];
            for &i in indexes {
                match chosen.get_mut(i) {
                    Some(c) => *c = true,
                    None => {
                        return Err(invalid_input(format!(
                            "write {i} chosen from an epoch of {len} writes"
                        )))
                    }
                }
            }
            chosen
        }
    })
}

fn apply(image: &mut [u8], write: &RecordedWrite) -> io::Result<()> {
    let start = usize::try_from(write.offset).unwrap_or(usize::MAX);
    match start.checked_add(write.bytes.len()) {
        Some(end) if end <= image.len() => {
            image[start..end].copy_from_slice(&write.bytes);
            Ok(())
        }
        _ => Err(invalid_input(format!(
            "recorded write at {}+{} is past the end of a {}-byte base image",
            write.offset,
            write.bytes.len(),
            image.len()
        ))),
    }
}

/// A tiny deterministic generator (SplitMix64): reproducible subsets without a dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Injected failures are plain EIO, as a real device reports them.
fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

fn invalid_input(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    fn recorder(size: u64) -> RecordingDevice<MemDevice> {
        RecordingDevice::new(MemDevice::new(size))
    }

    #[test]
    fn epochs_split_at_flushes() {
        let dev = recorder(16384);
        dev.write_at(&[1; 10], 0).unwrap();
        dev.write_at(&[2; 10], 100).unwrap();
        dev.flush().unwrap();
        dev.flush().unwrap();
        dev.write_at(&[3; 10], 200).unwrap();
        assert_eq!(dev.epoch_count(), 3);
        assert_eq!(dev.epoch(0).len(), 2);
        assert!(dev.epoch(1).is_empty());
        assert_eq!(
            dev.epoch(2),
            vec![RecordedWrite {
                offset: 200,
                bytes: vec![3; 10]
            }]
        );
        assert!(dev.epoch(3).is_empty());
    }

    #[test]
    fn crash_states_apply_earlier_epochs_and_a_subset_of_the_crash_epoch() {
        let base = vec![0u8; 16384];
        let dev = RecordingDevice::new(MemDevice::from_bytes(base.clone()));
        dev.write_at(&[1; 4], 0).unwrap();
        dev.flush().unwrap();
        dev.write_at(&[2; 4], 0).unwrap();
        dev.write_at(&[3; 4], 8).unwrap();
        dev.write_at(&[4; 4], 16).unwrap();

        let s = dev.crash_state(&base, 0, &WriteSubset::Prefix(0)).unwrap();
        assert_eq!(s, base);
        let s = dev.crash_state(&base, 1, &WriteSubset::Prefix(0)).unwrap();
        assert_eq!(
            &s[..20],
            &[1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let s = dev.crash_state(&base, 1, &WriteSubset::Prefix(2)).unwrap();
        assert_eq!(
            &s[..20],
            &[2, 2, 2, 2, 0, 0, 0, 0, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let s = dev
            .crash_state(&base, 1, &WriteSubset::Chosen(vec![2]))
            .unwrap();
        assert_eq!(
            &s[..20],
            &[1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4]
        );
        // Everything applied equals what the device holds.
        let s = dev
            .crash_state(&base, 1, &WriteSubset::Prefix(usize::MAX))
            .unwrap();
        assert_eq!(s, dev.inner().snapshot());
    }

    #[test]
    fn random_subsets_are_reproducible_and_vary() {
        let base = vec![0u8; 64 * 4096];
        let dev = RecordingDevice::new(MemDevice::from_bytes(base.clone()));
        for i in 0..64u64 {
            dev.write_at(&[i as u8 + 1; 8], i * 4096).unwrap();
        }
        let a = dev
            .crash_state(&base, 0, &WriteSubset::Random { seed: 7 })
            .unwrap();
        let b = dev
            .crash_state(&base, 0, &WriteSubset::Random { seed: 7 })
            .unwrap();
        let c = dev
            .crash_state(&base, 0, &WriteSubset::Random { seed: 8 })
            .unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let applied = (0..64).filter(|i| a[i * 4096] != 0).count();
        assert!((10..54).contains(&applied), "{applied} of 64 applied");
    }

    #[test]
    fn large_writes_are_recorded_as_aligned_pieces() {
        let base = vec![0u8; 5 * 4096];
        let dev = RecordingDevice::new(MemDevice::from_bytes(base.clone()));
        dev.write_at(&[9; 3 * 4096], 2048).unwrap();
        let offsets: Vec<(u64, usize)> = dev
            .epoch(0)
            .iter()
            .map(|w| (w.offset, w.bytes.len()))
            .collect();
        assert_eq!(
            offsets,
            vec![(2048, 2048), (4096, 4096), (8192, 4096), (12288, 2048)]
        );
        // A torn write: only its second piece landed.
        let s = dev
            .crash_state(&base, 0, &WriteSubset::Chosen(vec![1]))
            .unwrap();
        assert!(s[..4096].iter().all(|&b| b == 0));
        assert!(s[4096..8192].iter().all(|&b| b == 9));
        assert!(s[8192..].iter().all(|&b| b == 0));

        let whole = RecordingDevice::with_atomic_unit(MemDevice::new(5 * 4096), usize::MAX);
        whole.write_at(&[9; 3 * 4096], 2048).unwrap();
        assert_eq!(whole.epoch(0).len(), 1);
    }

    #[test]
    fn bad_crash_requests_are_errors() {
        let dev = recorder(8192);
        dev.write_at(&[1; 4], 4096).unwrap();
        assert!(dev
            .crash_state(&[0; 8192], 5, &WriteSubset::Prefix(1))
            .is_err());
        assert!(dev
            .crash_state(&[0; 8192], 0, &WriteSubset::Chosen(vec![1]))
            .is_err());
        // A base image too small for the recorded writes.
        assert!(dev
            .crash_state(&[0; 100], 0, &WriteSubset::Prefix(1))
            .is_err());
    }

    #[test]
    fn restart_recording_forgets_the_past() {
        let dev = recorder(8192);
        dev.write_at(&[1; 4], 0).unwrap();
        dev.flush().unwrap();
        let base = dev.inner().snapshot();
        dev.restart_recording();
        assert_eq!(dev.epoch_count(), 1);
        dev.write_at(&[2; 4], 4).unwrap();
        let s = dev.crash_state(&base, 0, &WriteSubset::Prefix(1)).unwrap();
        assert_eq!(&s[..8], &[1, 1, 1, 1, 2, 2, 2, 2]);
    }

    #[test]
    fn cut_power_stops_writes_and_flushes() {
        let dev = recorder(8192);
        dev.write_at(&[1; 4], 0).unwrap();
        dev.cut_power();
        assert!(dev.power_is_cut());
        let err = dev.write_at(&[2; 4], 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert!(dev.flush().is_err());
        assert_eq!(&dev.inner().snapshot()[..4], &[1; 4]);
        assert_eq!(dev.epoch_count(), 1);
        assert_eq!(dev.epoch(0).len(), 1);
        let mut buf = [0u8; 4];
        dev.read_at(&mut buf, 0).unwrap();
        assert_eq!(buf, [1; 4]);
    }

    #[test]
    fn the_nth_write_fails_once() {
        let dev = recorder(8192);
        dev.write_at(&[1; 4], 0).unwrap();
        dev.fail_nth_write(2);
        dev.write_at(&[2; 4], 0).unwrap();
        assert!(dev.write_at(&[3; 4], 0).is_err());
        dev.write_at(&[4; 4], 4).unwrap();
        assert_eq!(dev.writes_attempted(), 4);
        assert_eq!(&dev.inner().snapshot()[..8], &[2, 2, 2, 2, 4, 4, 4, 4]);
        assert_eq!(dev.epoch(0).len(), 3);

        dev.fail_nth_write(1);
        dev.clear_faults();
        dev.write_at(&[5; 4], 0).unwrap();
    }

    #[test]
    fn reads_of_a_range_fail_until_cleared() {
        let dev = recorder(16384);
        dev.fail_reads_in(4096..8192);
        let mut buf = [0u8; 4096];
        dev.read_at(&mut buf, 0).unwrap();
        dev.read_at(&mut buf, 8192).unwrap();
        assert!(dev.read_at(&mut buf, 4096).is_err());
        assert!(dev.read_at(&mut buf[..2], 4095).is_err());
        assert!(dev.read_at(&mut buf[..1], 8191).is_err());
        dev.clear_faults();
        dev.read_at(&mut buf, 4096).unwrap();
    }

    #[test]
    fn usable_from_many_threads() {
        let dev = std::sync::Arc::new(recorder(64 * 4096));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let dev = dev.clone();
                std::thread::spawn(move || {
                    for i in 0..16u64 {
                        dev.write_at(&[t as u8; 4096], (t * 16 + i) * 4096).unwrap();
                    }
                    dev.flush().unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(dev.epoch_count(), 5);
        let total: usize = (0..5).map(|k| dev.epoch(k).len()).sum();
        assert_eq!(total, 64);
        let s = dev
            .crash_state(&vec![0; 64 * 4096], 4, &WriteSubset::Prefix(0))
            .unwrap();
        assert_eq!(s, dev.inner().snapshot());
    }
}
