//! The mount's cleaner thread: threshold cleaning beside operations, as lfs_cleanerd and
//! nilfs_cleanerd do it (docs/DESIGN.md, "When to clean").
//!
//! Admission wakes it when the clean segments less what is pending fall below the start
//! threshold (`Thresholds::min_free`). When the clean segments themselves are below it, it
//! writes what is pending (admission counts that by an upper bound, far above what a burst of
//! small changes writes) and cleans pass after pass until the stop threshold (`max_free`),
//! yielding between passes; when only what is pending puts them low, it writes that once
//! writers would soon have to. A background pass may
//! take only a quarter of the room above the writers' reserve (`run_pass`), so operations
//! admitted while it runs keep the other half: they clean in their own write path only when
//! the clean segments reach the reserve all the same. It also looks once a `TICK` by itself
//! (an idle file system). A round that could not gain rests a `TICK` before the next pass is
//! tried; meanwhile admission wakes it again only when the figure fell a segment further, to
//! write what is pending. While a `dualfs-cleaner` daemon is attached the thread leaves
//! threshold cleaning to it.

use super::*;
use crate::lockcheck::Condvar;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often the thread looks without being woken, and how long it rests after a round that
/// could not gain.
const TICK: Duration = Duration::from_secs(1);

/// Passes in a row that gain no clean segment before a round gives up (as the daemon).
const STALLED_PASSES: u32 = 3;

/// What wakes the cleaner thread; shared with it (the thread holds the file system weakly).
pub(crate) struct Wake {
    /// Admission found the figure low; the thread consumes it when a round begins, so a
    /// crossing after that asks again.
    asked: AtomicBool,
    /// Where the last round left the figure below the start threshold (`u64::MAX`: at or
    /// above it): admission asks again only below it, so a thread that can do nothing more
    /// now is not woken by every operation.
    left_at: AtomicU64,
    state: NoIoMutex<WakeState>,
    cv: Condvar,
}

#[derive(Default)]
struct WakeState {
    stop: bool,
    /// A round is running.
    busy: bool,
    /// Rounds are held back (tests: writers outrunning the cleaner).
    #[cfg(test)]
    held: bool,
    /// Background passes stop at `Wake::pause_point` (tests), and one is stopped there.
    #[cfg(test)]
    pause: bool,
    #[cfg(test)]
    paused: bool,
}

impl Wake {
    pub(crate) fn new() -> Wake {
        Wake {
            asked: AtomicBool::new(false),
            left_at: AtomicU64::new(u64::MAX),
            state: NoIoMutex::new("cleaner wake", WakeState::default()),
            cv: Condvar::new(),
        }
    }

    fn ask(&self) {
        if !self.asked.swap(true, Ordering::AcqRel) {
            let _st = self.state.lock();
            self.cv.notify_all();
        }
    }
}

/// How a round of background cleaning ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    /// Nothing to do, or cleaned up to the stop threshold.
    Done,
    /// Passes stopped gaining: rest a tick before trying again.
    Stuck,
    /// No pass tried: resting after a round that could not gain, or the figure low only by
    /// what is pending.
    Resting,
}

/// Clean segments, live bytes, deletes admitted: while they stay as a round that could not
/// gain saw them, another would not either.
type StuckKey = (u64, u64, u64);

impl Fs {
    /// Start the cleaner thread (a writable mount that asked for background cleaning).
    pub(crate) fn start_cleaner(self: &Arc<Fs>) -> Result<()> {
        if self.opts.read_only || !self.opts.background_cleaning {
            return Ok(());
        }
        let (fs, wake) = (Arc::downgrade(self), self.cleaner.wake.clone());
        let h = std::thread::Builder::new()
            .name("dualfs-cleaner".into())
            .spawn(move || cleaner_thread(fs, wake))?;
        *self.cleaner.thread.lock() = Some(h);
        Ok(())
    }

    /// Start the cleaner thread again after `stop_cleaner` (turned read-write again).
    pub(crate) fn restart_cleaner(self: &Arc<Fs>) -> Result<()> {
        self.cleaner.wake.state.lock().stop = false;
        self.start_cleaner()
    }

    /// Stop the cleaner thread and wait for it (it ends the pass it is in).
    pub(crate) fn stop_cleaner(&self) {
        {
            let mut st = self.cleaner.wake.state.lock();
            st.stop = true;
            self.cleaner.wake.cv.notify_all();
        }
        // Joined with no lock held: the thread may be writing the log.
        let h = self.cleaner.thread.lock().take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    /// Clean segments once what is pending is written, as admission and the thresholds count
    /// them.
    pub(super) fn free_segments(sp: &Space) -> u64 {
        (sp.clean * sp.seg_eff).saturating_sub(sp.pending) / sp.seg_eff
    }

    /// Admission's part: wake the cleaner thread when the figure fell below the start
    /// threshold, or a segment below where the thread last left it (atomics only, and a lock
    /// only to wake it).
    pub(super) fn wake_cleaner_if_low(&self, sp: &Space) {
        let c = &self.cleaner;
        if c.wake.asked.load(Ordering::Acquire) || c.daemons.load(Ordering::Acquire) > 0 {
            return;
        }
        let free = Fs::free_segments(sp);
        if free < self.start_threshold(sp.reserve) && free < c.wake.left_at.load(Ordering::Acquire)
        {
            c.wake.ask();
        }
    }

    /// `Thresholds::min_free` from the atomics admission reads (no lock).
    fn start_threshold(&self, reserve: u64) -> u64 {
        match self.cleaner.custom_min_free.load(Ordering::Acquire) {
            u64::MAX => {
                Thresholds::defaults(self.sb.segments - 1, reserve, self.segment_bytes()).min_free
            }
            set => set,
        }
    }

    pub(super) fn segment_bytes(&self) -> u64 {
        self.sb.segment_blocks as u64 * self.sb.block_size as u64
    }

    /// One round of threshold cleaning: below `min_free` (below `max_free` when idle) write
    /// what is pending, then clean until `max_free`, a pass at a time, yielding between
    /// passes; no pass unless `may_pass`, nor while things are as `stuck` (what the last
    /// round that could not gain saw). Returns how it ended and where it left the figure
    /// below the start threshold (`u64::MAX`: not below).
    fn background_round(
        &self,
        wake: &Wake,
        may_pass: bool,
        stuck: Option<StuckKey>,
    ) -> (Round, u64) {
        let t = self.thresholds();
        let figure = || Fs::free_segments(&self.space());
        let go = |cleaning: bool, free: u64| {
            let idle = self.idle_secs() >= t.idle_secs;
            let go = if cleaning {
                free < t.max_free
            } else {
                t.should_start(free, idle)
            };
            go.then(|| t.pass_size(free, idle) as usize)
        };
        let low = |free: u64| if free < t.min_free { free } else { u64::MAX };
        let mut cleaning = false;
        let mut stalled = 0;
        loop {
            if self.cleaner.daemons.load(Ordering::Acquire) > 0
                || wake.state.lock().stop
                || self.is_shut_down()
                || go(cleaning, figure()).is_none()
            {
                return (Round::Done, u64::MAX);
            }
            let clean = self.cleaner.counts.clean.load(Ordering::Acquire);
            if !cleaning && go(false, clean).is_none() {
                // Only what is pending puts the figure low: nothing to clean. Written early,
                // creates and unlinks no longer cancel out within a flush interval (the log
                // took 2.8 times as much under the latency benchmark's churn when this
                // thread wrote it at every crossing), so only once writers would soon have
                // to write it themselves: half-way down to their reserve.
                let reserve = self.space().reserve;
                if figure() <= reserve + t.min_free.saturating_sub(reserve) / 2 {
                    if let Err(e) = self.sync_log() {
                        log::warn!("background cleaning: {e}");
                    }
                }
                return (Round::Resting, low(figure()));
            }
            if let Err(e) = self.sync_log() {
                log::warn!("background cleaning: {e}");
                return (Round::Stuck, low(figure()));
            }
            let free = figure();
            let Some(size) = go(cleaning, free) else {
                return (Round::Done, u64::MAX);
            };
            if !may_pass {
                return (Round::Resting, low(free));
            }
            if !cleaning && stuck == Some(self.stuck_key()) {
                return (Round::Stuck, low(free));
            }
            cleaning = true;
            // Below the start threshold, what the write path would run soon: greedy, a pass
            // that frees more blocks than it writes. Above it, by the thresholds' policy, only
            // a pass that gives a whole segment back (cleaning early moves data that would
            // have died).
            let (policy, gain) = if free < t.min_free {
                (Policy::Greedy, Gain::Blocks)
            } else {
                (t.policy, Gain::Segment)
            };
            match self.background_pass(policy, size, gain) {
                Ok(r) if r.cleaned.is_empty() => {
                    log::debug!(
                        "background cleaning: nothing to gain at {free} free segments{}",
                        r.refused
                            .first()
                            .map(|(s, why)| format!(" (segment {s}: {why})"))
                            .unwrap_or_default()
                    );
                    return (Round::Stuck, low(figure()));
                }
                Ok(r) => {
                    // Writers may take segments while it runs: a pass that gains no clean
                    // segment is no failure by itself, a run of them is.
                    stalled = if r.clean_after > r.clean_before {
                        0
                    } else {
                        stalled + 1
                    };
                    if stalled >= STALLED_PASSES {
                        return (Round::Stuck, low(figure()));
                    }
                }
                Err(e) => {
                    log::warn!("background cleaning: {e}");
                    return (Round::Stuck, low(figure()));
                }
            }
            std::thread::yield_now();
        }
    }

    /// A pass by the thresholds' policy, and a greedy one if that gains nothing: the old,
    /// fuller segments cost-benefit ranks first may not gain within the room a background
    /// pass may claim, where the emptiest ones do (the write path cleans greedily too).
    fn background_pass(&self, policy: Policy, size: usize, gain: Gain) -> Result<PassReport> {
        let r = self.clean_pass_for(policy, size, gain, PassOrigin::Background)?;
        if r.cleaned.is_empty() && policy != Policy::Greedy {
            return self.clean_pass_for(Policy::Greedy, size, gain, PassOrigin::Background);
        }
        Ok(r)
    }

    fn stuck_key(&self) -> StuckKey {
        (
            self.cleaner.counts.clean.load(Ordering::Acquire),
            self.live_bytes_total(),
            self.cleaner.deletes.load(Ordering::Acquire),
        )
    }
}

fn cleaner_thread(fs: Weak<Fs>, wake: Arc<Wake>) {
    // After a round that could not gain: what it saw, and until when no pass is tried.
    let mut stuck: Option<StuckKey> = None;
    let mut rest_until: Option<Instant> = None;
    loop {
        {
            let mut st = wake.state.lock();
            st.busy = false;
            wake.cv.notify_all();
            if !st.stop && !wake.asked.load(Ordering::Acquire) {
                let wait = rest_until.map_or(TICK, |u| u.saturating_duration_since(Instant::now()));
                wake.cv.wait_for(&mut st, wait.min(TICK));
            }
            #[cfg(test)]
            while st.held && !st.stop {
                wake.cv.wait_for(&mut st, TICK);
            }
            if st.stop {
                return;
            }
            st.busy = true;
        }
        wake.asked.store(false, Ordering::Release);
        let Some(fs) = fs.upgrade() else { return };
        if fs.is_shut_down() {
            return;
        }
        let may_pass = rest_until.is_none_or(|u| Instant::now() >= u);
        let (round, left_at) = fs.background_round(&wake, may_pass, stuck);
        wake.left_at.store(left_at, Ordering::Release);
        match round {
            Round::Done => (stuck, rest_until) = (None, None),
            Round::Stuck => {
                (stuck, rest_until) = (Some(fs.stuck_key()), Some(Instant::now() + TICK))
            }
            Round::Resting => {}
        }
    }
}

#[cfg(test)]
impl Wake {
    /// A background pass stops here while tests ask it to.
    pub(super) fn pause_point(&self) {
        let mut st = self.state.lock();
        if !st.pause {
            return;
        }
        st.paused = true;
        self.cv.notify_all();
        while st.pause && !st.stop {
            self.cv.wait_for(&mut st, TICK);
        }
        st.paused = false;
    }
}

#[cfg(test)]
impl Fs {
    /// Make background passes stop where admission counts them most (`pause_point`), or let
    /// them go on.
    pub(crate) fn pause_cleaner_passes(&self, pause: bool) {
        let mut st = self.cleaner.wake.state.lock();
        st.pause = pause;
        self.cleaner.wake.cv.notify_all();
    }

    /// Is a background pass stopped at its pause point? Waits up to `wait` for one.
    pub(crate) fn cleaner_pass_paused(&self, wait: Duration) -> bool {
        let mut st = self.cleaner.wake.state.lock();
        if !st.paused {
            self.cleaner.wake.cv.wait_for(&mut st, wait);
        }
        st.paused
    }

    /// Hold the cleaner thread back (no round starts) or let it go again.
    pub(crate) fn hold_cleaner(&self, held: bool) {
        let mut st = self.cleaner.wake.state.lock();
        st.held = held;
        self.cleaner.wake.cv.notify_all();
    }

    /// Wait until the cleaner thread (if it runs) has nothing left to do: no round running
    /// and none asked for. Panics after a minute.
    pub(crate) fn cleaner_settled(&self) {
        if self.cleaner.thread.lock().is_none() {
            return;
        }
        let w = &self.cleaner.wake;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut st = w.state.lock();
        while st.busy || w.asked.load(Ordering::Acquire) {
            assert!(
                std::time::Instant::now() < deadline,
                "the cleaner thread did not settle"
            );
            w.cv.wait_for(&mut st, Duration::from_millis(50));
        }
    }
}
