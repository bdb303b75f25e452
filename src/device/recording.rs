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
//!
//! Several recorders can share one [`SeqClock`]: every write and every completed flush then
//! carries a stamp from that clock, which puts the records of two devices (the metadata and
//! the data device of one file system) on one timeline. A crash *at moment `t`* is then the
//! same instant on both: on each device, every epoch whose flush completed before `t`, plus a
//! subset of the open epoch's writes issued before `t` ([`RecordingDevice::crash_state_at`]).

use super::BlockDevice;
use parking_lot::Mutex;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A sequence clock shared by several recorders: each event takes the next number. A moment
/// `t` is the instant when exactly the events stamped `0..t` have happened, so `now()` is the
/// present moment.
#[derive(Debug, Default)]
pub struct SeqClock(AtomicU64);

impl SeqClock {
    pub fn new() -> Arc<SeqClock> {
        Arc::new(SeqClock::default())
    }

    /// The present moment: the stamp the next event will get.
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst)
    }
}

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
    clock: Arc<SeqClock>,
    state: Mutex<State>,
}

struct State {
    /// Never empty: the last epoch is the open one.
    epochs: Vec<Vec<RecordedWrite>>,
    /// Clock stamp of each recorded write, parallel to `epochs` (the pieces of one write share
    /// the stamp of the write).
    stamps: Vec<Vec<u64>>,
    /// Clock stamp of the flush that closed each epoch (one fewer than `epochs`).
    flush_stamps: Vec<u64>,
    power_cut: bool,
    /// Writes attempted since the device was made (counting failed ones).
    writes_attempted: u64,
    /// Fail the write whose `writes_attempted` count reaches this (1-based).
    fail_write_number: Option<u64>,
    failing_reads: Vec<Range<u64>>,
}

impl State {
    /// The record's shape: an open epoch, stamps parallel to the epochs, one flush stamp per
    /// closed epoch.
    fn check_shape(&self) {
        assert!(!self.epochs.is_empty(), "no open epoch");
        assert_eq!(self.stamps.len(), self.epochs.len(), "stamps out of step");
        assert_eq!(
            self.flush_stamps.len() + 1,
            self.epochs.len(),
            "flush stamps out of step"
        );
    }

    /// The stamp of this device's latest recorded event (write or flush), if any.
    fn last_stamp(&self) -> Option<u64> {
        let last_write = self.stamps.last().and_then(|s| s.last()).copied();
        last_write.or_else(|| self.flush_stamps.last().copied())
    }
}

impl<D: BlockDevice> RecordingDevice<D> {
    /// Wrap `inner` and start recording, with 4 KiB atomic writes.
    pub fn new(inner: D) -> Self {
        Self::with_atomic_unit(inner, DEFAULT_ATOMIC_UNIT)
    }

    /// Wrap `inner`; writes are recorded as pieces of at most `atomic_unit` bytes aligned to
    /// multiples of it (`usize::MAX`: whole writes). An `atomic_unit` of 0 is taken as 1.
    pub fn with_atomic_unit(inner: D, atomic_unit: usize) -> Self {
        Self::with_clock(inner, atomic_unit, SeqClock::new())
    }

    /// Wrap `inner`, stamping writes and flushes from `clock` (shared with other recorders to
    /// put their records on one timeline).
    pub fn with_clock(inner: D, atomic_unit: usize, clock: Arc<SeqClock>) -> Self {
        RecordingDevice {
            inner,
            atomic_unit: atomic_unit.max(1),
            clock,
            state: Mutex::new(State {
                epochs: vec![Vec::new()],
                stamps: vec![Vec::new()],
                flush_stamps: Vec::new(),
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
        let mut state = self.state.lock();
        state.epochs = vec![Vec::new()];
        state.stamps = vec![Vec::new()];
        state.flush_stamps.clear();
    }

    /// The clock that stamps this device's writes and flushes.
    pub fn clock(&self) -> &Arc<SeqClock> {
        &self.clock
    }

    /// Clock stamps of the writes of epoch `k`, one per recorded write (empty if no such epoch).
    pub fn stamps(&self, k: usize) -> Vec<u64> {
        self.state.lock().stamps.get(k).cloned().unwrap_or_default()
    }

    /// Clock stamp of the flush that closed epoch `k` (None for the open epoch).
    pub fn flush_stamp(&self, k: usize) -> Option<u64> {
        self.state.lock().flush_stamps.get(k).copied()
    }

    /// The epoch open at moment `t`: the first whose closing flush is not stamped before `t`.
    pub fn epoch_at(&self, t: u64) -> usize {
        let state = self.state.lock();
        state.flush_stamps.partition_point(|&f| f < t)
    }

    /// Writes of the epoch open at moment `t` that were issued before `t`: a crash at `t`
    /// keeps any subset of them (`crash_state_at`'s `subset` indexes this many writes).
    pub fn pending_at(&self, t: u64) -> usize {
        let state = self.state.lock();
        let k = state.flush_stamps.partition_point(|&f| f < t);
        state.stamps[k].partition_point(|&s| s < t)
    }

    /// The device content after a crash at moment `t` of the shared clock: `base` with every
    /// epoch closed before `t` applied, then `subset` of the writes of the epoch open at `t`
    /// that were issued before `t` (see `pending_at`). Writes issued at or after `t` never
    /// reach the image.
    pub fn crash_state_at(&self, base: &[u8], t: u64, subset: &WriteSubset) -> io::Result<Vec<u8>> {
        let state = self.state.lock();
        let k = state.flush_stamps.partition_point(|&f| f < t);
        let n = state.stamps[k].partition_point(|&s| s < t);
        let chosen = choose(n, subset)?;
        let mut image = base.to_vec();
        for write in state.epochs[..k].iter().flatten() {
            apply(&mut image, write)?;
        }
        for (write, _) in state.epochs[k][..n].iter().zip(&chosen).filter(|(_, &c)| c) {
            apply(&mut image, write)?;
        }
        Ok(image)
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
        let stamp = self.clock.tick();
        state.check_shape();
        // Every event of this device is stamped under its lock: its stamps only grow, which
        // `epoch_at`, `pending_at` and `crash_state_at` rely on.
        assert!(
            state.last_stamp().is_none_or(|s| s < stamp),
            "a write stamped before this device's last event"
        );
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
        let before = open_epoch.len();
        open_epoch.extend(pieces);
        assert_eq!(
            open_epoch[before..]
                .iter()
                .map(|w| w.bytes.len())
                .sum::<usize>(),
            buf.len(),
            "the pieces of a write cover it exactly"
        );
        let added = open_epoch.len() - before;
        let open_stamps = state.stamps.last_mut().expect("parallel to epochs");
        open_stamps.extend(std::iter::repeat_n(stamp, added));
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.power_cut {
            return Err(eio());
        }
        self.inner.flush()?;
        let stamp = self.clock.tick();
        state.check_shape();
        assert!(
            state.last_stamp().is_none_or(|s| s < stamp),
            "a flush stamped before the writes it closes"
        );
        state.epochs.push(Vec::new());
        state.stamps.push(Vec::new());
        state.flush_stamps.push(stamp);
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
    fn a_shared_clock_puts_two_devices_on_one_timeline() {
        let clock = SeqClock::new();
        let a = RecordingDevice::with_clock(MemDevice::new(16384), 4096, clock.clone());
        let b = RecordingDevice::with_clock(MemDevice::new(16384), 4096, clock.clone());
        a.write_at(&[1; 4], 0).unwrap(); // 0
        b.write_at(&[2; 4096], 4094).unwrap(); // 1 (two pieces)
        b.flush().unwrap(); // 2
        a.write_at(&[3; 4], 4).unwrap(); // 3
        a.flush().unwrap(); // 4
        a.write_at(&[4; 4], 8).unwrap(); // 5
        assert_eq!(clock.now(), 6);
        assert_eq!(a.stamps(0), vec![0, 3]);
        assert_eq!(b.stamps(0), vec![1, 1]);
        assert_eq!(a.stamps(1), vec![5]);
        assert_eq!((a.flush_stamp(0), a.flush_stamp(1)), (Some(4), None));
        assert_eq!(b.flush_stamp(0), Some(2));
        // Moment 2: b's flush has not completed yet, a has one write issued.
        assert_eq!((a.epoch_at(2), a.pending_at(2)), (0, 1));
        assert_eq!((b.epoch_at(2), b.pending_at(2)), (0, 2));
        assert_eq!((b.epoch_at(3), b.pending_at(3)), (1, 0));
        assert_eq!((a.epoch_at(5), a.pending_at(5)), (1, 0));
        assert_eq!((a.epoch_at(6), a.pending_at(6)), (1, 1));
        let base = vec![0u8; 16384];
        let s = a
            .crash_state_at(&base, 4, &WriteSubset::Chosen(vec![1]))
            .unwrap();
        assert_eq!(&s[..12], &[0, 0, 0, 0, 3, 3, 3, 3, 0, 0, 0, 0]);
        let s = a.crash_state_at(&base, 5, &WriteSubset::Prefix(0)).unwrap();
        assert_eq!(&s[..12], &[1, 1, 1, 1, 3, 3, 3, 3, 0, 0, 0, 0]);
        // Writes issued at or after the moment never land, whatever the subset says.
        let s = a.crash_state_at(&base, 5, &WriteSubset::Prefix(9)).unwrap();
        assert_eq!(&s[8..12], &[0; 4]);
        assert!(a
            .crash_state_at(&base, 5, &WriteSubset::Chosen(vec![0]))
            .is_err());
        // A torn write on b: only its second piece.
        let s = b
            .crash_state_at(&base, 2, &WriteSubset::Chosen(vec![1]))
            .unwrap();
        assert_eq!(&s[4094..4098], &[0, 0, 2, 2]);
        let s = b.crash_state_at(&base, 6, &WriteSubset::Prefix(0)).unwrap();
        assert_eq!(s, b.inner().snapshot());
        a.restart_recording();
        assert!(a.stamps(0).is_empty());
        assert_eq!(a.flush_stamp(0), None);
        assert_eq!(a.pending_at(100), 0);
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
