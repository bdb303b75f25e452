//! The disk model: how long a simulated disk takes to serve each request, given the requests
//! and their arrival times. Plain Rust with its own clock (seconds since the disk started, f64):
//! no FUSE, no real time. `live.rs` runs it against the real clock.
//!
//! # Requests and the queue
//!
//! A request reads or writes `len` bytes at byte address `pos` of the disk (a file that is a
//! partition of the disk starts at its partition's address, so partitions of one disk share its
//! head). Requests that arrive while the disk is busy wait in its queue. When the disk can start
//! a request it picks one of those that have arrived by then: an HDD by C-LOOK (the lowest
//! address at or after the head, else the lowest address: one ascending sweep, then back to
//! the start), or first come first served with `queue=fifo`; an SSD always first come first
//! served. An HDD serves one request at a time; an SSD up to `parallel` at once.
//!
//! The disk's **busy time** is the union of the intervals from each request's start to its
//! completion (for an HDD, the sum of its service times; overlapping SSD requests count once).
//! It is the "disk I/O time" of the DualFS paper: idle time, including the read-ahead an idle
//! HDD does, is not in it.
//!
//! # HDD
//!
//! Geometry. The platters turn at `rpm` (one rotation takes T = 60/rpm s). Zoned recording:
//! the media rate falls linearly with the radius, from `rate_outer_mbs` at the outermost track
//! (radius fraction r = 0, where address 0 is) to `rate_inner_mbs` at the innermost (r = 1);
//! a track holds rate(r)·T bytes. With the same number of tracks per unit of radius, the
//! address fraction x = pos/capacity of radius r is the share of the bytes outside it:
//! x(r) = (R_o·r − (R_o − R_i)·r²/2) / ((R_o + R_i)/2). The disk has
//! N = capacity / ((R_o + R_i)/2 · T) tracks, `heads` tracks a cylinder, and τ(pos) = r·N
//! tracks lie before an address (beyond the capacity, τ grows at the inner rate).
//!
//! Seek. Moving the head by Δ ≥ 1 cylinders (of C) takes
//! seek(Δ) = t_track + a·√d + b·d with d = (Δ − 1)/(C − 2): `seek_track_ms` for one cylinder,
//! `seek_full_ms` for the full stroke (a + b = t_full − t_track), the square root dominating
//! short seeks (the arm accelerates) and the linear term long ones (it coasts). a and b are set
//! at start so that the mean over pairs of addresses drawn uniformly over the disk (including
//! pairs on one cylinder, which need no seek) is `seek_avg_ms`; an average outside what the
//! curve can reach is an error. Reads and writes seek alike; a head switch within a cylinder is
//! free.
//!
//! Rotation: a position model, not an expected value. The platter's angle at time t is
//! frac(t/T) of a turn; address pos passes under the head at angle frac(τ(pos)). After the
//! seek the request waits until its first byte comes round (0 to T), then transfers at the
//! media rate: from p to q takes T·(τ(q) − τ(p)), which is (q − p)/rate(r) (track and cylinder
//! switches inside a transfer are free, as skewed tracks make them). So a request that starts
//! where the previous one ended and is already queued when it ends (the kernel submits
//! several) waits for nothing, and one that arrives a moment late waits almost a full turn.
//!
//! Cache: one segment with read-ahead, no write cache. After a read from the media the head
//! goes on reading the following addresses into the cache at the media rate while the disk is
//! idle, up to `readahead` bytes past the read (0: no read-ahead), until the next request makes
//! it stop. The segment holds the last read and what was read ahead after it. A read that lies
//! in the segment is a hit: it costs its size at `interface_mbs` and leaves the head alone. A
//! read that starts in the segment while the read-ahead still runs takes the cached part and
//! goes on streaming from the media without seek or rotation. Writes are written through (the
//! write cache off, as a journaling file system's comparisons want it): each is on the platter
//! at its completion, so a flush costs nothing; a write stops the read-ahead and drops the
//! segment if it overlaps it.
//!
//! # SSD
//!
//! A request takes a fixed latency (`read_latency_us` or `write_latency_us`), then its transfer
//! at `read_mbs` or `write_mbs`. Up to `parallel` requests are in service at once (channels):
//! their latencies overlap, their transfers share one link, one after the other.
//!
//! # Parameter sets
//!
//! `paper5400`: the class of the DualFS paper's disk, a 5,400 RPM IDE desktop disk of
//! 2000-2002, with figures typical of that class's datasheets rather than of one model (20 GB
//! on 2 platters, ATA/100): average seek 10 ms, 1.5 ms track to track, 20 ms full stroke,
//! 18 MB/s outer to 10 MB/s inner media rate, a 2 MB buffer doing 256 KiB read-ahead.
//! `hdd7200`: a current 7,200 RPM 3.5" SATA desktop disk (2 TB on 2 platters, SATA 6 Gb/s): the
//! 8.5 ms average seek of the datasheets, 1 ms track to track, 17 ms full stroke, 200 MB/s outer
//! to 100 MB/s inner, 1 MiB read-ahead. `ssd`: a SATA SSD: 70 µs read and 50 µs write latency
//! (4 KiB at queue depth 1: about 13,000 reads/s), 550 MB/s read and 500 MB/s write (the SATA
//! link's ceiling), 8 requests in service at once. Any parameter can be changed after the
//! set's name: `hdd7200,capacity=8G,readahead=0`. MB/s are 10^6 bytes a second; sizes are
//! bytes, with K, M, G or T after them for powers of 1024.

pub const MIB: u64 = 1 << 20;

/// A read or a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

/// The order an HDD serves its queue in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueuePolicy {
    Clook,
    Fifo,
}

#[derive(Clone, Debug, PartialEq)]
pub struct HddParams {
    pub capacity: u64,
    pub rpm: f64,
    pub heads: u32,
    pub seek_track_ms: f64,
    pub seek_avg_ms: f64,
    pub seek_full_ms: f64,
    pub rate_outer_mbs: f64,
    pub rate_inner_mbs: f64,
    pub readahead: u64,
    pub interface_mbs: f64,
    pub queue: QueuePolicy,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SsdParams {
    pub capacity: u64,
    pub read_latency_us: f64,
    pub write_latency_us: f64,
    pub read_mbs: f64,
    pub write_mbs: f64,
    pub parallel: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Hdd(HddParams),
    Ssd(SsdParams),
}

/// A parameter set: the name it started from and its values (after any KEY=VALUE changes).
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub preset: String,
    pub kind: Kind,
}

pub const PRESETS: [&str; 3] = ["paper5400", "hdd7200", "ssd"];

impl Params {
    pub fn preset(name: &str) -> Option<Params> {
        let kind = match name {
            "paper5400" => Kind::Hdd(HddParams {
                capacity: 20_000_000_000,
                rpm: 5400.0,
                heads: 4,
                seek_track_ms: 1.5,
                seek_avg_ms: 10.0,
                seek_full_ms: 20.0,
                rate_outer_mbs: 18.0,
                rate_inner_mbs: 10.0,
                readahead: 256 << 10,
                interface_mbs: 100.0,
                queue: QueuePolicy::Clook,
            }),
            "hdd7200" => Kind::Hdd(HddParams {
                capacity: 2_000_000_000_000,
                rpm: 7200.0,
                heads: 4,
                seek_track_ms: 1.0,
                seek_avg_ms: 8.5,
                seek_full_ms: 17.0,
                rate_outer_mbs: 200.0,
                rate_inner_mbs: 100.0,
                readahead: MIB,
                interface_mbs: 600.0,
                queue: QueuePolicy::Clook,
            }),
            "ssd" => Kind::Ssd(SsdParams {
                capacity: 500_000_000_000,
                read_latency_us: 70.0,
                write_latency_us: 50.0,
                read_mbs: 550.0,
                write_mbs: 500.0,
                parallel: 8,
            }),
            _ => return None,
        };
        Some(Params {
            preset: name.to_string(),
            kind,
        })
    }

    /// `MODEL[,KEY=VALUE...]`, e.g. `hdd7200,capacity=8G,readahead=0`; checked whole (a seek
    /// curve that cannot reach its average is refused here, not at the first request).
    pub fn parse(spec: &str) -> Result<Params, String> {
        let mut parts = spec.split(',');
        let name = parts.next().unwrap_or("").trim();
        let mut params = Params::preset(name).ok_or_else(|| {
            format!(
                "unknown disk model '{name}' (known: {})",
                PRESETS.join(", ")
            )
        })?;
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("'{part}': expected KEY=VALUE after the model's name"))?;
            params.set(key.trim(), value.trim())?;
        }
        Mechanism::new(&params)?;
        Ok(params)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        const HDD_KEYS: &str = "capacity, rpm, heads, seek_track_ms, seek_avg_ms, seek_full_ms, rate_outer_mbs, rate_inner_mbs, readahead, interface_mbs, queue";
        const SSD_KEYS: &str =
            "capacity, read_latency_us, write_latency_us, latency_us, read_mbs, write_mbs, parallel";
        let preset = self.preset.as_str();
        let unknown =
            |known: &str| format!("unknown parameter '{key}' for {preset} (known: {known})");
        match &mut self.kind {
            Kind::Hdd(p) => match key {
                "capacity" => p.capacity = size(key, value)?,
                "rpm" => p.rpm = number(key, value)?,
                "heads" => p.heads = count(key, value)?,
                "seek_track_ms" => p.seek_track_ms = number(key, value)?,
                "seek_avg_ms" => p.seek_avg_ms = number(key, value)?,
                "seek_full_ms" => p.seek_full_ms = number(key, value)?,
                "rate_outer_mbs" => p.rate_outer_mbs = number(key, value)?,
                "rate_inner_mbs" => p.rate_inner_mbs = number(key, value)?,
                "readahead" => p.readahead = size(key, value)?,
                "interface_mbs" => p.interface_mbs = number(key, value)?,
                "queue" => {
                    p.queue = match value {
                        "clook" => QueuePolicy::Clook,
                        "fifo" => QueuePolicy::Fifo,
                        _ => return Err(format!("queue={value}: expected clook or fifo")),
                    }
                }
                _ => return Err(unknown(HDD_KEYS)),
            },
            Kind::Ssd(p) => match key {
                "capacity" => p.capacity = size(key, value)?,
                "read_latency_us" => p.read_latency_us = number(key, value)?,
                "write_latency_us" => p.write_latency_us = number(key, value)?,
                "latency_us" => {
                    p.read_latency_us = number(key, value)?;
                    p.write_latency_us = p.read_latency_us;
                }
                "read_mbs" => p.read_mbs = number(key, value)?,
                "write_mbs" => p.write_mbs = number(key, value)?,
                "parallel" => p.parallel = count(key, value)?,
                _ => return Err(unknown(SSD_KEYS)),
            },
        }
        Ok(())
    }

    pub fn capacity(&self) -> u64 {
        match &self.kind {
            Kind::Hdd(p) => p.capacity,
            Kind::Ssd(p) => p.capacity,
        }
    }

    /// The parameters and, for an HDD, the values derived from them (cylinders, rotation,
    /// the seek curve's coefficients), as one JSON object.
    pub fn to_json(&self) -> String {
        match &self.kind {
            Kind::Hdd(p) => {
                let mut s = format!(
                    "{{\"model\": \"{}\", \"kind\": \"hdd\", \"capacity\": {}, \"rpm\": {}, \"heads\": {}, \"seek_track_ms\": {}, \"seek_avg_ms\": {}, \"seek_full_ms\": {}, \"rate_outer_mbs\": {}, \"rate_inner_mbs\": {}, \"readahead\": {}, \"interface_mbs\": {}, \"queue\": \"{}\"",
                    self.preset, p.capacity, p.rpm, p.heads, p.seek_track_ms, p.seek_avg_ms,
                    p.seek_full_ms, p.rate_outer_mbs, p.rate_inner_mbs, p.readahead,
                    p.interface_mbs,
                    if p.queue == QueuePolicy::Clook { "clook" } else { "fifo" }
                );
                if let Ok(g) = Geometry::new(p) {
                    s += &format!(
                        ", \"cylinders\": {}, \"rotation_ms\": {:.4}, \"seek_sqrt_ms\": {:.4}, \"seek_linear_ms\": {:.4}",
                        g.cylinders,
                        g.rot * 1e3,
                        g.seek_sqrt * 1e3,
                        g.seek_linear * 1e3
                    );
                }
                s + "}"
            }
            Kind::Ssd(p) => format!(
                "{{\"model\": \"{}\", \"kind\": \"ssd\", \"capacity\": {}, \"read_latency_us\": {}, \"write_latency_us\": {}, \"read_mbs\": {}, \"write_mbs\": {}, \"parallel\": {}}}",
                self.preset, p.capacity, p.read_latency_us, p.write_latency_us, p.read_mbs,
                p.write_mbs, p.parallel
            ),
        }
    }
}

fn number(key: &str, value: &str) -> Result<f64, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{key}={value}: expected a number of at least 0"))
}

fn count(key: &str, value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("{key}={value}: expected a whole number of at least 1"))
}

/// Bytes: a whole number with an optional K, M, G or T (powers of 1024).
pub fn size(key: &str, value: &str) -> Result<u64, String> {
    let (digits, unit) = match value.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&value[..i], c.to_ascii_uppercase()),
        _ => (value, 'B'),
    };
    let shift = match unit {
        'B' => 0,
        'K' => 10,
        'M' => 20,
        'G' => 30,
        'T' => 40,
        _ => 64,
    };
    digits
        .parse::<u64>()
        .ok()
        .filter(|_| shift < 64)
        .and_then(|n| n.checked_mul(1 << shift.min(63)))
        .ok_or_else(|| {
            format!("{key}={value}: expected bytes (a whole number, K, M, G or T after it)")
        })
}

/// One request to the disk: `len` bytes at byte address `pos`, arrived at `arrival` seconds.
#[derive(Clone, Debug)]
pub struct Request {
    pub id: u64,
    pub op: Op,
    pub pos: u64,
    pub len: u64,
    pub arrival: f64,
}

/// A request the disk started: when, and when it completes.
#[derive(Clone, Copy, Debug)]
pub struct Started {
    pub id: u64,
    /// (diskmodel itself only needs the completion; the tests look at starts too.)
    #[cfg_attr(not(test), allow(dead_code))]
    pub start: f64,
    pub done: f64,
}

/// Where a request's time went.
#[derive(Clone, Copy, Debug, Default)]
struct Service {
    done: f64,
    seek_cylinders: u64,
    seek_s: f64,
    rotation_s: f64,
    transfer_s: f64,
    cache_hit: bool,
}

/// An HDD's derived geometry and seek curve (times in seconds, rates in bytes per second).
#[derive(Clone, Debug)]
struct Geometry {
    capacity: f64,
    rot: f64,
    rate_outer: f64,
    rate_inner: f64,
    tracks: f64,
    heads: f64,
    cylinders: u64,
    seek_track: f64,
    seek_sqrt: f64,
    seek_linear: f64,
}

impl Geometry {
    fn new(p: &HddParams) -> Result<Geometry, String> {
        if p.capacity < MIB {
            return Err(format!("capacity={}: at least 1 MiB", p.capacity));
        }
        if p.rpm <= 0.0 || p.interface_mbs <= 0.0 || p.rate_inner_mbs <= 0.0 {
            return Err("rpm, interface_mbs and rate_inner_mbs must be above 0".into());
        }
        if p.rate_outer_mbs < p.rate_inner_mbs {
            return Err(format!(
                "rate_outer_mbs={} is below rate_inner_mbs={}: outer tracks are the faster",
                p.rate_outer_mbs, p.rate_inner_mbs
            ));
        }
        if !(p.seek_track_ms <= p.seek_avg_ms && p.seek_avg_ms <= p.seek_full_ms) {
            return Err(format!(
                "seek times must grow: seek_track_ms={} <= seek_avg_ms={} <= seek_full_ms={}",
                p.seek_track_ms, p.seek_avg_ms, p.seek_full_ms
            ));
        }
        let rot = 60.0 / p.rpm;
        let (rate_outer, rate_inner) = (p.rate_outer_mbs * 1e6, p.rate_inner_mbs * 1e6);
        let capacity = p.capacity as f64;
        let tracks = capacity / ((rate_outer + rate_inner) / 2.0 * rot);
        let heads = p.heads as f64;
        if tracks / heads < 2.0 {
            return Err(format!(
                "capacity={} holds less than 2 cylinders of {} heads at these rates and rpm",
                p.capacity, p.heads
            ));
        }
        let mut g = Geometry {
            capacity,
            rot,
            rate_outer,
            rate_inner,
            tracks,
            heads,
            cylinders: (tracks / heads).ceil() as u64,
            seek_track: p.seek_track_ms / 1e3,
            seek_sqrt: 0.0,
            seek_linear: 0.0,
        };
        g.calibrate_seeks(p.seek_avg_ms / 1e3, p.seek_full_ms / 1e3)?;
        Ok(g)
    }

    /// Sets a and b of seek(Δ) = t_track + a·√d + b·d so that the full stroke takes `full`
    /// and the mean over uniformly drawn pairs of addresses is `avg`: both are linear in a and
    /// b, with the means of √d and d over the pairs taken on a grid of addresses.
    fn calibrate_seeks(&mut self, avg: f64, full: f64) -> Result<(), String> {
        const GRID: usize = 512;
        let cylinders: Vec<u64> = (0..GRID)
            .map(|i| self.cylinder((i as f64 + 0.5) / GRID as f64 * self.capacity))
            .collect();
        let (mut moved, mut mean_sqrt, mut mean_lin) = (0.0, 0.0, 0.0);
        for &a in &cylinders {
            for &b in &cylinders {
                if a != b {
                    let d = self.seek_fraction(a.abs_diff(b));
                    moved += 1.0;
                    mean_sqrt += d.sqrt();
                    mean_lin += d;
                }
            }
        }
        let pairs = (GRID * GRID) as f64;
        let (moved, mean_sqrt, mean_lin) = (moved / pairs, mean_sqrt / pairs, mean_lin / pairs);
        let span = full - self.seek_track;
        let base = moved * self.seek_track;
        let (lowest, highest) = (base + span * mean_lin, base + span * mean_sqrt);
        if avg < lowest - 1e-9 || avg > highest + 1e-9 {
            return Err(format!(
                "seek_avg_ms={}: with these track-to-track and full-stroke times the average seek lies between {:.2} and {:.2} ms",
                avg * 1e3,
                lowest * 1e3,
                highest * 1e3
            ));
        }
        self.seek_sqrt = if mean_sqrt - mean_lin > 1e-12 {
            ((avg - base - span * mean_lin) / (mean_sqrt - mean_lin)).clamp(0.0, span)
        } else {
            span
        };
        self.seek_linear = span - self.seek_sqrt;
        Ok(())
    }

    /// d of the seek curve: 0 for one cylinder, 1 for the full stroke (C − 1 cylinders).
    fn seek_fraction(&self, distance: u64) -> f64 {
        let longest = self.cylinders.saturating_sub(2).max(1);
        (distance.saturating_sub(1) as f64 / longest as f64).min(1.0)
    }

    fn seek_time(&self, distance: u64) -> f64 {
        if distance == 0 {
            return 0.0;
        }
        let d = self.seek_fraction(distance);
        self.seek_track + self.seek_sqrt * d.sqrt() + self.seek_linear * d
    }

    /// τ(pos): the tracks before an address (fractional; frac(τ) is its angle on the platter).
    fn tracks_at(&self, pos: f64) -> f64 {
        if pos >= self.capacity {
            return self.tracks + (pos - self.capacity) / (self.rate_inner * self.rot);
        }
        let x = pos.max(0.0) / self.capacity;
        let (ro, ri) = (self.rate_outer, self.rate_inner);
        // The root of x(r) = x, written without a cancelling difference.
        let r = x * (ro + ri) / (ro + (ro * ro - (ro - ri) * x * (ro + ri)).max(0.0).sqrt());
        r * self.tracks
    }

    /// The address τ tracks in: the inverse of `tracks_at`.
    fn pos_at_tracks(&self, tau: f64) -> f64 {
        if tau >= self.tracks {
            return self.capacity + (tau - self.tracks) * self.rate_inner * self.rot;
        }
        let r = tau.max(0.0) / self.tracks;
        let (ro, ri) = (self.rate_outer, self.rate_inner);
        (ro * r - (ro - ri) * r * r / 2.0) / ((ro + ri) / 2.0) * self.capacity
    }

    fn cylinder(&self, pos: f64) -> u64 {
        ((self.tracks_at(pos) / self.heads) as u64).min(self.cylinders - 1)
    }

    /// Time to read or write from address p to q at the media rate.
    fn transfer_time(&self, p: u64, q: u64) -> f64 {
        self.rot * (self.tracks_at(q as f64) - self.tracks_at(p as f64))
    }

    #[cfg(test)]
    fn rate_at(&self, pos: f64) -> f64 {
        let r = self.tracks_at(pos) / self.tracks;
        self.rate_outer - (self.rate_outer - self.rate_inner) * r
    }
}

/// Read-ahead in progress: the head reads on from `from` since `since`, up to `limit`.
#[derive(Clone, Copy, Debug)]
struct Stream {
    from: u64,
    since: f64,
    limit: u64,
}

/// The cache segment: [start, end), or up to where the read-ahead has got.
#[derive(Clone, Copy, Debug)]
struct Segment {
    start: u64,
    end: u64,
    stream: Option<Stream>,
}

/// A waiting time of (almost) a full turn is a request that continues exactly where the last
/// one ended; it only comes out so through rounding.
const FULL_TURN: f64 = 1.0 - 1e-6;

#[derive(Clone, Debug)]
struct Hdd {
    g: Geometry,
    readahead: u64,
    interface: f64,
    queue: QueuePolicy,
    /// Where the last media access left the head (the end of its transfer).
    head: u64,
    segment: Option<Segment>,
}

impl Hdd {
    /// Where the read-ahead has got at time t (at most its limit).
    fn stream_pos(&self, s: &Stream, t: f64) -> u64 {
        let tau = self.g.tracks_at(s.from as f64) + (t - s.since).max(0.0) / self.g.rot;
        (self.g.pos_at_tracks(tau) as u64).clamp(s.from, s.limit)
    }

    /// Whether the read-ahead is still reading at time t (it stops at its limit).
    fn streaming(&self, s: &Stream, t: f64) -> bool {
        t <= s.since + self.g.transfer_time(s.from, s.limit) + 1e-9
    }

    fn segment_end(&self, seg: &Segment, t: f64) -> u64 {
        seg.stream.map_or(seg.end, |s| self.stream_pos(&s, t))
    }

    /// The head's address at time t: where the read-ahead has got, or where it was left.
    fn head_at(&self, t: f64) -> u64 {
        match &self.segment {
            Some(
                seg @ Segment {
                    stream: Some(_), ..
                },
            ) => self.segment_end(seg, t),
            _ => self.head,
        }
    }

    /// Seek from the head's address to p, wait for p to come round, transfer p..q.
    fn access(&self, head: u64, p: u64, q: u64, t: f64) -> Service {
        let distance = self
            .g
            .cylinder(head as f64)
            .abs_diff(self.g.cylinder(p as f64));
        let seek_s = self.g.seek_time(distance);
        let there = t + seek_s;
        let mut turn = (self.g.tracks_at(p as f64) - there / self.g.rot).rem_euclid(1.0);
        if turn >= FULL_TURN {
            turn = 0.0;
        }
        let rotation_s = turn * self.g.rot;
        let transfer_s = self.g.transfer_time(p, q);
        Service {
            done: there + rotation_s + transfer_s,
            seek_cylinders: distance,
            seek_s,
            rotation_s,
            transfer_s,
            cache_hit: false,
        }
    }

    fn serve(&mut self, req: &Request, t: f64) -> Service {
        let (a, b) = (req.pos, req.pos.saturating_add(req.len));
        let head = self.head_at(t);
        if req.op == Op::Write {
            // The head leaves: the read-ahead stops where it got, and data written over is
            // no longer in the cache.
            if let Some(seg) = self.segment.take() {
                let end = self.segment_end(&seg, t);
                if b <= seg.start || a >= end {
                    self.segment = Some(Segment {
                        start: seg.start,
                        end,
                        stream: None,
                    });
                }
            }
            self.head = b;
            return self.access(head, a, b, t);
        }
        let leave = t + req.len as f64 / self.interface;
        let mut svc = match self.segment {
            Some(seg) if seg.start <= a && a <= self.segment_end(&seg, t) => {
                let cached_to = self.segment_end(&seg, t);
                if b <= cached_to {
                    return Service {
                        done: leave,
                        transfer_s: leave - t,
                        cache_hit: true,
                        ..Service::default()
                    };
                }
                match seg.stream.filter(|s| self.streaming(s, t)) {
                    // The read-ahead is reading the request's bytes already: keep streaming.
                    Some(s) => {
                        let done = s.since + self.g.transfer_time(s.from, b);
                        Service {
                            done,
                            transfer_s: done - t,
                            ..Service::default()
                        }
                    }
                    None => self.access(head, cached_to, b, t),
                }
            }
            _ => self.access(head, a, b, t),
        };
        if svc.done < leave {
            svc.transfer_s += leave - svc.done;
            svc.done = leave;
        }
        self.head = b;
        let limit = if b < self.g.capacity as u64 {
            b.saturating_add(self.readahead).min(self.g.capacity as u64)
        } else {
            b
        };
        self.segment = Some(Segment {
            start: a,
            end: b,
            stream: Some(Stream {
                from: b,
                since: svc.done,
                limit,
            }),
        });
        svc
    }
}

#[derive(Clone, Debug)]
struct Ssd {
    p: SsdParams,
    /// When the link is free for the next transfer.
    link_free: f64,
}

impl Ssd {
    fn serve(&mut self, req: &Request, t: f64) -> Service {
        let (latency_us, rate_mbs) = match req.op {
            Op::Read => (self.p.read_latency_us, self.p.read_mbs),
            Op::Write => (self.p.write_latency_us, self.p.write_mbs),
        };
        let ready = t + latency_us / 1e6;
        let begin = ready.max(self.link_free);
        let transfer_s = req.len as f64 / (rate_mbs * 1e6);
        self.link_free = begin + transfer_s;
        Service {
            done: self.link_free,
            transfer_s,
            ..Service::default()
        }
    }
}

#[derive(Clone, Debug)]
enum Mechanism {
    Hdd(Hdd),
    Ssd(Ssd),
}

impl Mechanism {
    fn new(params: &Params) -> Result<Mechanism, String> {
        Ok(match &params.kind {
            Kind::Hdd(p) => Mechanism::Hdd(Hdd {
                g: Geometry::new(p)?,
                readahead: p.readahead,
                interface: p.interface_mbs * 1e6,
                queue: p.queue,
                head: 0,
                segment: None,
            }),
            Kind::Ssd(p) => {
                if p.capacity < MIB {
                    return Err(format!("capacity={}: at least 1 MiB", p.capacity));
                }
                if p.read_mbs <= 0.0 || p.write_mbs <= 0.0 {
                    return Err("read_mbs and write_mbs must be above 0".into());
                }
                Mechanism::Ssd(Ssd {
                    p: p.clone(),
                    link_free: 0.0,
                })
            }
        })
    }

    fn parallel(&self) -> usize {
        match self {
            Mechanism::Hdd(_) => 1,
            Mechanism::Ssd(s) => s.p.parallel as usize,
        }
    }

    fn queue(&self) -> QueuePolicy {
        match self {
            Mechanism::Hdd(h) => h.queue,
            Mechanism::Ssd(_) => QueuePolicy::Fifo,
        }
    }

    fn head_at(&self, t: f64) -> u64 {
        match self {
            Mechanism::Hdd(h) => h.head_at(t),
            Mechanism::Ssd(_) => 0,
        }
    }

    fn serve(&mut self, req: &Request, t: f64) -> Service {
        match self {
            Mechanism::Hdd(h) => h.serve(req, t),
            Mechanism::Ssd(s) => s.serve(req, t),
        }
    }
}

/// What a disk did. Busy time counts a request's whole service once it has started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub busy_s: f64,
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub flushes: u64,
    pub seeks: u64,
    pub seek_cylinders: u64,
    pub seek_s: f64,
    pub rotation_s: f64,
    pub transfer_s: f64,
    pub cache_hits: u64,
    pub queue_wait_s: f64,
    pub max_queue: u64,
}

impl Stats {
    /// The figures as JSON members (no braces), for a report to put in its object.
    pub fn json_members(&self) -> String {
        format!(
            "\"busy_s\": {:.6}, \"reads\": {}, \"writes\": {}, \"bytes_read\": {}, \"bytes_written\": {}, \"flushes\": {}, \"seeks\": {}, \"seek_cylinders\": {}, \"seek_s\": {:.6}, \"rotation_s\": {:.6}, \"transfer_s\": {:.6}, \"cache_hits\": {}, \"queue_wait_s\": {:.6}, \"max_queue\": {}",
            self.busy_s, self.reads, self.writes, self.bytes_read, self.bytes_written,
            self.flushes, self.seeks, self.seek_cylinders, self.seek_s, self.rotation_s,
            self.transfer_s, self.cache_hits, self.queue_wait_s, self.max_queue
        )
    }
}

/// One simulated disk: its mechanism, its queue and its clock.
#[derive(Clone, Debug)]
pub struct Disk {
    mech: Mechanism,
    pending: Vec<Request>,
    /// Completion times of the requests started and not yet seen to end.
    in_service: Vec<f64>,
    /// The time of the last start: starts never go back in time.
    clock: f64,
    busy_end: f64,
    stats: Stats,
}

impl Disk {
    pub fn new(params: &Params) -> Result<Disk, String> {
        Ok(Disk {
            mech: Mechanism::new(params)?,
            pending: Vec::new(),
            in_service: Vec::new(),
            clock: 0.0,
            busy_end: 0.0,
            stats: Stats::default(),
        })
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn note_flush(&mut self) {
        self.stats.flushes += 1;
    }

    /// Queue a request. It is started by a later `advance` to a time at or after its arrival.
    pub fn submit(&mut self, req: Request) {
        let busy = self.in_service.iter().filter(|&&d| d > req.arrival).count();
        self.stats.max_queue = self
            .stats
            .max_queue
            .max((self.pending.len() + 1 + busy) as u64);
        self.pending.push(req);
    }

    /// When the next queued request can start (None: nothing is queued).
    pub fn next_start(&self) -> Option<f64> {
        let earliest = self.pending.iter().map(|r| r.arrival).reduce(f64::min)?;
        let slot_free = if self.in_service.len() < self.mech.parallel() {
            f64::NEG_INFINITY
        } else {
            self.in_service
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
        };
        Some(self.clock.max(slot_free).max(earliest))
    }

    /// Start every queued request that can start by `now`, in the queue's order; appends what
    /// was started (with its completion time) to `started`. Call it with every arrival and
    /// completion as `now` advances (or once with infinity when all arrivals are known).
    pub fn advance(&mut self, now: f64, started: &mut Vec<Started>) {
        while let Some(t) = self.next_start().filter(|&t| t <= now) {
            self.clock = t;
            self.in_service.retain(|&d| d > t);
            let i = self.choose(t);
            let req = self.pending.swap_remove(i);
            let svc = self.mech.serve(&req, t);
            self.account(&req, t, &svc);
            self.in_service.push(svc.done);
            started.push(Started {
                id: req.id,
                start: t,
                done: svc.done,
            });
        }
    }

    /// The queued request to start at t, among those arrived by then.
    fn choose(&self, t: f64) -> usize {
        let arrived = self
            .pending
            .iter()
            .enumerate()
            .filter(|(_, r)| r.arrival <= t);
        let first_come = |(_, r): &(usize, &Request)| (r.arrival, r.id);
        let chosen = match self.mech.queue() {
            QueuePolicy::Fifo => {
                arrived.min_by(|x, y| first_come(x).partial_cmp(&first_come(y)).unwrap())
            }
            QueuePolicy::Clook => {
                let head = self.mech.head_at(t);
                // Ahead of the head first (lowest address), then from the lowest again.
                arrived.min_by(|x, y| {
                    let key = |(_, r): &(usize, &Request)| (r.pos < head, r.pos);
                    key(x)
                        .cmp(&key(y))
                        .then(first_come(x).partial_cmp(&first_come(y)).unwrap())
                })
            }
        };
        chosen.map_or(0, |(i, _)| i)
    }

    fn account(&mut self, req: &Request, start: f64, svc: &Service) {
        let s = &mut self.stats;
        match req.op {
            Op::Read => {
                s.reads += 1;
                s.bytes_read += req.len;
            }
            Op::Write => {
                s.writes += 1;
                s.bytes_written += req.len;
            }
        }
        s.seeks += u64::from(svc.seek_cylinders > 0);
        s.seek_cylinders += svc.seek_cylinders;
        s.seek_s += svc.seek_s;
        s.rotation_s += svc.rotation_s;
        s.transfer_s += svc.transfer_s;
        s.cache_hits += u64::from(svc.cache_hit);
        s.queue_wait_s += start - req.arrival;
        // The union of service intervals: starts come in time order.
        s.busy_s += (svc.done - start.max(self.busy_end)).max(0.0);
        self.busy_end = self.busy_end.max(svc.done);
    }
}

/// A file placed on a disk: its byte `offset` is the disk's address `start + offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    pub start: u64,
    pub length: u64,
}

impl Partition {
    pub fn address(&self, offset: u64) -> u64 {
        self.start.saturating_add(offset)
    }

    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.length)
    }

    pub fn overlaps(&self, other: &Partition) -> bool {
        self.start < other.end() && other.start < self.end()
    }
}

/// Where the next partition goes by default: after the last one, on a MiB boundary.
pub fn next_partition_start(partitions: &[Partition]) -> u64 {
    let end = partitions.iter().map(Partition::end).max().unwrap_or(0);
    end.div_ceil(MIB).saturating_mul(MIB)
}

/// A small fixed-seed generator (xorshift64*), so that expectations and tests repeat.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// The outcome of a simulated run: when its last request completed, and the disk's figures.
pub struct Run {
    pub elapsed_s: f64,
    pub stats: Stats,
}

/// `count` requests made by `next`, `depth` of them outstanding at any time from time 0: each
/// completion issues the next request at once, as `depth` benchmark threads would.
pub fn closed_loop(
    params: &Params,
    depth: usize,
    count: usize,
    mut next: impl FnMut() -> (Op, u64, u64),
) -> Result<Run, String> {
    let mut disk = Disk::new(params)?;
    let mut issued = 0;
    let mut issue = |disk: &mut Disk, id: usize, at: f64| {
        let (op, pos, len) = next();
        disk.submit(Request {
            id: id as u64,
            op,
            pos,
            len,
            arrival: at,
        });
    };
    while issued < depth.max(1).min(count) {
        issue(&mut disk, issued, 0.0);
        issued += 1;
    }
    let (mut now, mut completed, mut in_flight, mut started) = (0.0, 0, Vec::new(), Vec::new());
    while completed < count {
        disk.advance(now, &mut started);
        in_flight.extend(started.drain(..).map(|s| s.done));
        let Some(i) = (0..in_flight.len()).min_by(|&x, &y| in_flight[x].total_cmp(&in_flight[y]))
        else {
            return Err("the disk stopped serving (a bug in the model)".into());
        };
        now = in_flight.swap_remove(i);
        completed += 1;
        if issued < count {
            issue(&mut disk, issued, now);
            issued += 1;
        }
    }
    Ok(Run {
        elapsed_s: now,
        stats: disk.stats().clone(),
    })
}

/// What the model predicts for a disk used whole, as JSON: sequential reads and writes of
/// `seq_bytes` from address 0 in 1 MiB requests at queue depth 1; random 4 KiB reads over the
/// whole capacity at queue depths 1 and 8; and, for random reads, the datasheet sum (average
/// seek + half a turn + the transfer, or the SSD's latency + transfer) beside the simulation.
pub fn expectations(params: &Params, seq_bytes: u64) -> Result<String, String> {
    let requests = seq_bytes.div_ceil(MIB).max(1) as usize;
    let sequential = |op| {
        let mut pos = 0;
        closed_loop(params, 1, requests, || {
            pos += MIB;
            (op, pos - MIB, MIB)
        })
    };
    let (seq_read, seq_write) = (sequential(Op::Read)?, sequential(Op::Write)?);
    let blocks = (params.capacity() / 4096).max(1);
    let random = |depth, count| {
        let mut rng = Rng::new(0x5eed);
        closed_loop(params, depth, count, || {
            (Op::Read, rng.below(blocks) * 4096, 4096)
        })
    };
    let count = match params.kind {
        Kind::Hdd(_) => 2000,
        Kind::Ssd(_) => 20000,
    };
    let (qd1, qd8) = (random(1, count)?, random(8, count)?);
    let formula_ms = match &params.kind {
        Kind::Hdd(p) => {
            let mean_rate = (p.rate_outer_mbs + p.rate_inner_mbs) / 2.0 * 1e6;
            p.seek_avg_ms + 30e3 / p.rpm + 4096.0 / mean_rate * 1e3
        }
        Kind::Ssd(p) => p.read_latency_us / 1e3 + 4096.0 / (p.read_mbs * 1e6) * 1e3,
    };
    let mbs = |r: &Run| (requests as u64 * MIB) as f64 / r.elapsed_s / 1e6;
    Ok(format!(
        "{{\"seq_bytes\": {}, \"seq_read_mbs\": {:.2}, \"seq_write_mbs\": {:.2}, \"random_read_4k_ms\": {:.4}, \"random_read_4k_iops\": {:.1}, \"random_read_4k_qd8_iops\": {:.1}, \"random_read_4k_datasheet_ms\": {:.4}}}",
        requests as u64 * MIB,
        mbs(&seq_read),
        mbs(&seq_write),
        qd1.stats.busy_s / count as f64 * 1e3,
        count as f64 / qd1.elapsed_s,
        count as f64 / qd8.elapsed_s,
        formula_ms
    ))
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
