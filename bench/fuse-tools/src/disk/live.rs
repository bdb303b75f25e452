//! The model against the real clock: a request arrives now, waits in the disk's queue while
//! other requests are served, and returns when the simulated disk completes it.
//!
//! One mutex per disk holds its model; the clock is the time since diskmodel started. Every
//! thread that takes the mutex first advances the model to now, so a request is started at
//! the simulated moment the disk frees (the thread whose request completes does it, and a
//! waiting thread wakes itself then too, whichever comes first), with exactly the requests
//! that had arrived by then to choose from. The thread whose request was started is woken,
//! does the real I/O on the backing file while the simulated one runs, and sleeps out the
//! rest of its service time. A request whose real I/O outlasts its simulated service returns
//! late; such requests are counted (`late`, `late_s`): the backing store must be faster than
//! the simulated disk (images in the page cache or on tmpfs) for the timing to hold.

use super::model::{Disk, Op, Params, Request, Started, Stats};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

pub struct LiveDisk {
    pub name: String,
    pub params: Params,
    epoch: Instant,
    state: Mutex<State>,
}

struct State {
    disk: Disk,
    next_id: u64,
    /// Threads waiting for their request to start.
    waiting: HashMap<u64, Thread>,
    /// Start and completion times of started requests whose threads have not taken them yet.
    done: HashMap<u64, (f64, f64)>,
    started: Vec<Started>,
    late: Late,
}

/// Requests whose real I/O ended after their simulated completion, and by how much in all.
#[derive(Clone, Copy, Debug, Default)]
pub struct Late {
    pub requests: u64,
    pub seconds: f64,
}

impl State {
    fn advance(&mut self, now: f64) {
        self.disk.advance(now, &mut self.started);
        for s in self.started.drain(..) {
            self.done.insert(s.id, (s.start, s.done));
            if let Some(thread) = self.waiting.get(&s.id) {
                thread.unpark();
            }
        }
    }
}

/// Sleeps of a few tens of microseconds must not be stretched by the default 50 µs timer
/// slack (an SSD's request takes about that long).
fn tight_timers() {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    DONE.with(|done| {
        if !done.replace(true) {
            // SAFETY: sets this thread's timer slack to 1 ns; no pointers involved.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        }
    });
}

/// `DISKMODEL_TRACE=FILE` in diskmodel's environment: one line per request, in the order they
/// start, `disk op pos len arrival start done` (addresses in bytes, times in seconds since
/// diskmodel started), to see a file system's request pattern behind the totals.
fn trace(disk: &str, op: Op, pos: u64, len: u64, arrival: f64, start: f64, done: f64) {
    static TRACE: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    let file = TRACE.get_or_init(|| {
        let path = std::env::var_os("DISKMODEL_TRACE")?;
        match std::fs::File::create(&path) {
            Ok(f) => Some(Mutex::new(f)),
            Err(e) => {
                eprintln!("diskmodel: DISKMODEL_TRACE {}: {e}", path.to_string_lossy());
                None
            }
        }
    });
    if let Some(file) = file {
        let op = match op {
            Op::Read => "R",
            Op::Write => "W",
        };
        let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            f,
            "{disk} {op} {pos} {len} {arrival:.6} {start:.6} {done:.6}"
        );
    }
}

impl LiveDisk {
    pub fn new(name: &str, params: &Params, epoch: Instant) -> Result<LiveDisk, String> {
        Ok(LiveDisk {
            name: name.to_string(),
            params: params.clone(),
            epoch,
            state: Mutex::new(State {
                disk: Disk::new(params)?,
                next_id: 0,
                waiting: HashMap::new(),
                done: HashMap::new(),
                started: Vec::new(),
                late: Late::default(),
            }),
        })
    }

    /// Simulated time: seconds since diskmodel started.
    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not stop the disk: the model's state stays consistent
        // between calls.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serve one request of `len` bytes at disk address `pos`: wait for the simulated disk to
    /// start it, run `io` (the real read or write), and return when the disk completes it.
    pub fn serve<T>(&self, op: Op, pos: u64, len: u64, io: impl FnOnce() -> T) -> T {
        tight_timers();
        let (id, arrival) = {
            let mut st = self.lock();
            let id = st.next_id;
            st.next_id += 1;
            // The arrival time is taken under the lock: whoever advances the model later sees
            // every request that arrived before its own clock reading.
            let arrival = self.now();
            st.disk.submit(Request {
                id,
                op,
                pos,
                len,
                arrival,
            });
            st.waiting.insert(id, std::thread::current());
            st.advance(arrival);
            (id, arrival)
        };
        let (start, done) = loop {
            let mut st = self.lock();
            let now = self.now();
            st.advance(now);
            if let Some(times) = st.done.remove(&id) {
                st.waiting.remove(&id);
                break times;
            }
            // Until the disk frees (then this thread may start its request itself).
            let wake = st.disk.next_start().unwrap_or(now + 0.01);
            drop(st);
            std::thread::park_timeout(Duration::from_secs_f64((wake - now).clamp(1e-6, 0.01)));
        };
        trace(&self.name, op, pos, len, arrival, start, done);
        let out = io();
        let until = self.epoch + Duration::from_secs_f64(done);
        let late = match until.checked_duration_since(Instant::now()) {
            Some(left) => {
                std::thread::sleep(left);
                None
            }
            None => Some(self.now() - done),
        };
        // The disk is free now: start the next queued request.
        let mut st = self.lock();
        st.advance(self.now());
        if let Some(by) = late {
            st.late.requests += 1;
            st.late.seconds += by;
        }
        out
    }

    /// A cache flush (fsync): returns when the write cache is empty and its last destage on
    /// the platter (at once for a disk without a write cache); counted.
    pub fn flush(&self) {
        tight_timers();
        self.lock().disk.note_flush();
        loop {
            let mut st = self.lock();
            let now = self.now();
            st.advance(now);
            // Writes may keep arriving meanwhile: look again at the predicted time.
            let Some(clean) = st.disk.clean_at() else {
                return;
            };
            drop(st);
            if clean <= now {
                return;
            }
            std::thread::sleep(Duration::from_secs_f64((clean - now).clamp(1e-6, 0.01)));
        }
    }

    /// The disk's figures so far, and the requests served late.
    pub fn snapshot(&self) -> (Stats, Late) {
        let mut st = self.lock();
        st.advance(self.now());
        (st.disk.stats().clone(), st.late)
    }
}
