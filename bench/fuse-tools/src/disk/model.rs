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
//! Cache: one read segment with read-ahead, and a write cache. After a read from the media
//! the head goes on reading the following addresses into the cache at the media rate while the
//! disk is idle, up to `readahead` bytes past the read (0: no read-ahead), until the next
//! request makes it stop. The segment holds the last read and what was read ahead after it. A
//! read that lies in the segment is a hit: it costs its size at `interface_mbs` and leaves the
//! head alone. A read that starts in the segment while the read-ahead still runs takes the
//! cached part and goes on streaming from the media without seek or rotation. With the write
//! cache off (the default of every set) writes are written through: each is on the platter at
//! its completion, so a flush costs nothing; a write stops the read-ahead and drops the
//! segment if it overlaps it.
//!
//! Write cache (`write_cache=SIZE`, `on` for the set's size: paper5400's whole 2 MB buffer,
//! 64 MiB for hdd7200; `off` or 0: none). The cache holds dirty extents, merged when they
//! overlap or touch. A write of at most SIZE bytes completes when it is in the cache: it
//! starts as soon as it has arrived and the interface is free (requests from or into the
//! cache take the interface one after the other, not the mechanism, so they do not wait for
//! a seek in progress) and costs its size at `interface_mbs`, if the bytes it adds fit. If they
//! fit only once the destage in progress is on the platter, it starts then; if not even then,
//! it waits for room (the full cache). A larger write is written through, as without a cache
//! (and drops the cached data it overwrites). Destaging: whenever the mechanism is free and
//! no request for it has arrived (idle), or at once while a write waits for room (full), the
//! disk writes the next dirty piece in C-LOOK order from the head (the first extent at or
//! after it, else the lowest), at most 256 KiB of it, exactly as a write of those bytes
//! (seek, rotation, media rate; it stops the read-ahead). A piece's room is freed when it is on
//! the platter. A destage once started runs to its end: a read arriving meanwhile waits for it
//! (for at most 256 KiB at the media rate). Destaging is busy time (the disk's work: the
//! paper's disk I/O time counts it), with its seeks, rotation and transfer in the figures,
//! and counted as `destages` and `destaged_bytes`. A read that lies wholly in one dirty extent
//! is served from the cache at `interface_mbs` (a cache hit); one that overlaps dirty data only
//! in part goes to the media. A flush (fsync, a loop device's FLUSH) completes when the cache
//! is empty and its last destage done (`Disk::clean_at`).
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
//! link's ceiling), 8 requests in service at once. No set has its write cache on by default:
//! the figures measured so far are without one, and a run with it is a choice to state
//! (`paper5400,write_cache=on`; the IDE disks of 2002 shipped with it on). Any parameter can
//! be changed after the set's name: `hdd7200,capacity=8G,readahead=0`. MB/s are 10^6 bytes a
//! second; sizes are bytes, with K, M, G or T after them for powers of 1024.

use std::collections::BTreeMap;

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
    /// The write cache's size in bytes; 0: no write cache (writes go through to the platter).
    pub write_cache: u64,
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
                write_cache: 0,
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
                write_cache: 0,
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
        const HDD_KEYS: &str = "capacity, rpm, heads, seek_track_ms, seek_avg_ms, seek_full_ms, rate_outer_mbs, rate_inner_mbs, readahead, interface_mbs, queue, write_cache";
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
                "write_cache" => {
                    p.write_cache = match value {
                        "off" => 0,
                        "on" => write_cache_when_on(preset),
                        _ => size(key, value)?,
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
                    "{{\"model\": \"{}\", \"kind\": \"hdd\", \"capacity\": {}, \"rpm\": {}, \"heads\": {}, \"seek_track_ms\": {}, \"seek_avg_ms\": {}, \"seek_full_ms\": {}, \"rate_outer_mbs\": {}, \"rate_inner_mbs\": {}, \"readahead\": {}, \"interface_mbs\": {}, \"queue\": \"{}\", \"write_cache\": {}",
                    self.preset, p.capacity, p.rpm, p.heads, p.seek_track_ms, p.seek_avg_ms,
                    p.seek_full_ms, p.rate_outer_mbs, p.rate_inner_mbs, p.readahead,
                    p.interface_mbs,
                    if p.queue == QueuePolicy::Clook { "clook" } else { "fifo" },
                    p.write_cache
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

/// `write_cache=on`: the set's whole buffer (paper5400's 2 MB), or a current desktop disk's
/// 64 MiB of cache.
fn write_cache_when_on(preset: &str) -> u64 {
    match preset {
        "paper5400" => 2 * MIB,
        _ => 64 * MIB,
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

    /// Data written into the write cache over [a, b): the read segment no longer holds it.
    /// The head stays where it is (the mechanism was not used).
    fn written_over(&mut self, a: u64, b: u64, t: f64) {
        if let Some(seg) = self.segment {
            if a < self.segment_end(&seg, t) && seg.start < b {
                self.segment = None;
            }
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

    fn written_over(&mut self, a: u64, b: u64, t: f64) {
        if let Mechanism::Hdd(h) = self {
            h.written_over(a, b, t);
        }
    }
}

/// The longest piece of a dirty extent one destage writes: a read arriving meanwhile waits
/// for at most this much transfer (about 15 ms on paper5400's outer tracks).
const DESTAGE_MAX: u64 = 256 << 10;

/// An HDD's write cache: the dirty extents [start, end) (disjoint, never adjacent: adjacent
/// data is one extent, destaged in one go) and the piece being destaged, which keeps its
/// room until it is on the platter.
#[derive(Clone, Debug, Default)]
struct WriteCache {
    size: u64,
    dirty: BTreeMap<u64, u64>,
    bytes: u64,
    /// The destage in progress: when it completes, and the room it frees then.
    destaging: Option<(f64, u64)>,
}

impl WriteCache {
    /// Whether [a, b) is all dirty in the cache (a read of it is served from there).
    fn holds(&self, a: u64, b: u64) -> bool {
        self.dirty
            .range(..=a)
            .next_back()
            .is_some_and(|(_, &end)| end >= b)
    }

    /// The dirty extents overlapping [a, b).
    fn overlapping(&self, a: u64, b: u64) -> Vec<(u64, u64)> {
        self.dirty
            .range(..b)
            .rev()
            .take_while(|(_, &end)| end > a)
            .map(|(&s, &e)| (s, e))
            .collect()
    }

    /// The bytes of [a, b) not in the cache yet: what a write of it adds.
    fn new_bytes(&self, a: u64, b: u64) -> u64 {
        let held: u64 = self
            .overlapping(a, b)
            .iter()
            .map(|&(s, e)| e.min(b) - s.max(a))
            .sum();
        (b - a) - held
    }

    /// The room taken at time t: the dirty data, and the piece being destaged until it is.
    fn taken(&self, t: f64) -> u64 {
        self.bytes
            + self
                .destaging
                .filter(|&(done, _)| done > t)
                .map_or(0, |(_, len)| len)
    }

    /// Drop [a, b) from the dirty data (written through, or being destaged).
    fn remove(&mut self, a: u64, b: u64) {
        for (s, e) in self.overlapping(a, b) {
            self.dirty.remove(&s);
            self.bytes -= e - s;
            if s < a {
                self.dirty.insert(s, a);
                self.bytes += a - s;
            }
            if e > b {
                self.dirty.insert(b, e);
                self.bytes += e - b;
            }
        }
    }

    /// Add [a, b) to the dirty data, merged with what it overlaps or touches.
    fn insert(&mut self, a: u64, b: u64) {
        self.remove(a, b);
        let (mut start, mut end) = (a, b);
        if let Some((&s, &e)) = self.dirty.range(..a).next_back() {
            if e == a {
                self.dirty.remove(&s);
                self.bytes -= e - s;
                start = s;
            }
        }
        if let Some(e) = self.dirty.remove(&b) {
            self.bytes -= e - b;
            end = e;
        }
        self.dirty.insert(start, end);
        self.bytes += end - start;
    }

    /// The next piece to destage by C-LOOK from the head: the first extent at or after it,
    /// else the lowest; at most DESTAGE_MAX bytes from the extent's start.
    fn next_piece(&self, head: u64) -> Option<(u64, u64)> {
        let (&s, &e) = self
            .dirty
            .range(head..)
            .next()
            .or_else(|| self.dirty.iter().next())?;
        Some((s, e.min(s.saturating_add(DESTAGE_MAX))))
    }
}

/// How a queued request can be served at the moment.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Route {
    /// By the mechanism (a read not all in the write cache, a write through).
    Media,
    /// From or into the write cache, not before the given time (the room a destage in
    /// progress frees when it completes).
    Cache(f64),
    /// A write waiting for room in the full write cache.
    Blocked,
}

/// What the disk does next.
#[derive(Clone, Copy, Debug)]
enum Next {
    Cache(usize),
    Media,
    Destage,
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
    /// Write cache: pieces written from it to the platter, their bytes, and the bytes in it
    /// not on the platter yet.
    pub destages: u64,
    pub destaged_bytes: u64,
    pub dirty_bytes: u64,
}

impl Stats {
    /// The figures as JSON members (no braces), for a report to put in its object.
    pub fn json_members(&self) -> String {
        format!(
            "\"busy_s\": {:.6}, \"reads\": {}, \"writes\": {}, \"bytes_read\": {}, \"bytes_written\": {}, \"flushes\": {}, \"seeks\": {}, \"seek_cylinders\": {}, \"seek_s\": {:.6}, \"rotation_s\": {:.6}, \"transfer_s\": {:.6}, \"cache_hits\": {}, \"queue_wait_s\": {:.6}, \"max_queue\": {}, \"destages\": {}, \"destaged_bytes\": {}, \"dirty_bytes\": {}",
            self.busy_s, self.reads, self.writes, self.bytes_read, self.bytes_written,
            self.flushes, self.seeks, self.seek_cylinders, self.seek_s, self.rotation_s,
            self.transfer_s, self.cache_hits, self.queue_wait_s, self.max_queue, self.destages,
            self.destaged_bytes, self.dirty_bytes
        )
    }
}

/// One simulated disk: its mechanism, its queue, its write cache and its clock.
#[derive(Clone, Debug)]
pub struct Disk {
    mech: Mechanism,
    pending: Vec<Request>,
    /// Completion times of the mechanism's requests started and not yet seen to end.
    in_service: Vec<f64>,
    /// The time of the last start: starts never go back in time.
    clock: f64,
    busy_end: f64,
    /// An HDD's write cache (None: writes go through).
    cache: Option<WriteCache>,
    /// The interface's rate (bytes/s) and when it is free: requests served from or into the
    /// write cache take it one after the other.
    interface: f64,
    interface_free: f64,
    stats: Stats,
}

impl Disk {
    pub fn new(params: &Params) -> Result<Disk, String> {
        let (cache, interface) = match &params.kind {
            Kind::Hdd(p) => (
                (p.write_cache > 0).then(|| WriteCache {
                    size: p.write_cache,
                    ..WriteCache::default()
                }),
                p.interface_mbs * 1e6,
            ),
            Kind::Ssd(p) => (None, p.write_mbs * 1e6),
        };
        Ok(Disk {
            mech: Mechanism::new(params)?,
            pending: Vec::new(),
            in_service: Vec::new(),
            clock: 0.0,
            busy_end: 0.0,
            cache,
            interface,
            interface_free: 0.0,
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

    /// How a queued request can be served now (see `Route`).
    fn route(&self, req: &Request) -> Route {
        let Some(cache) = &self.cache else {
            return Route::Media;
        };
        let (a, b) = (req.pos, req.pos.saturating_add(req.len));
        match req.op {
            Op::Read if cache.holds(a, b) => Route::Cache(f64::NEG_INFINITY),
            Op::Read => Route::Media,
            // Larger than the whole cache: written through.
            Op::Write if req.len > cache.size => Route::Media,
            Op::Write => {
                let adds = cache.new_bytes(a, b);
                if cache.taken(self.clock) + adds <= cache.size {
                    Route::Cache(f64::NEG_INFINITY)
                } else if cache.bytes + adds <= cache.size {
                    Route::Cache(cache.destaging.map_or(self.clock, |(done, _)| done))
                } else {
                    Route::Blocked
                }
            }
        }
    }

    /// What the disk does next and when, if nothing else arrives: a request from or into the
    /// write cache as soon as it has arrived and the interface is free; a request for the
    /// mechanism (chosen by the queue's order) once the mechanism is free; a destage when the
    /// mechanism is free and no request for it has arrived, or first of all while a write
    /// waits for room.
    fn next_event(&self) -> Option<(f64, Next)> {
        let mechanism_free = if self.in_service.len() < self.mech.parallel() {
            f64::NEG_INFINITY
        } else {
            self.in_service
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
        };
        let (mut cached, mut media_arrival, mut blocked) = (None::<(f64, u64, usize)>, None, false);
        for (i, r) in self.pending.iter().enumerate() {
            match self.route(r) {
                Route::Cache(not_before) => {
                    let t = self
                        .clock
                        .max(self.interface_free)
                        .max(r.arrival)
                        .max(not_before);
                    if cached.is_none_or(|(ct, cid, _)| (t, r.id) < (ct, cid)) {
                        cached = Some((t, r.id, i));
                    }
                }
                Route::Media => {
                    media_arrival = Some(r.arrival.min(media_arrival.unwrap_or(f64::INFINITY)))
                }
                Route::Blocked => blocked = true,
            }
        }
        let mut next = cached.map(|(t, _, i)| (t, Next::Cache(i)));
        let mut consider = |candidate: Option<(f64, Next)>| {
            if let Some((t, what)) = candidate {
                if next.is_none_or(|(nt, _)| t < nt) {
                    next = Some((t, what));
                }
            }
        };
        let media = media_arrival.map(|a| (self.clock.max(mechanism_free).max(a), Next::Media));
        let destage = self
            .cache
            .as_ref()
            .filter(|c| !c.dirty.is_empty())
            // The mechanism writes from the buffer while the interface fills it (data comes in
            // at the interface rate, faster than the media's).
            .map(|_| (self.clock.max(mechanism_free), Next::Destage))
            .filter(|&(t, _)| blocked || media_arrival.is_none_or(|a| a > t));
        if blocked {
            consider(destage);
            consider(media);
        } else {
            consider(media);
            consider(destage);
        }
        next
    }

    /// When the disk can do something next (start a queued request or destage), if nothing
    /// else arrives (None: nothing to do).
    pub fn next_start(&self) -> Option<f64> {
        self.next_event().map(|(t, _)| t)
    }

    /// The bytes in the write cache not yet on the platter.
    pub fn dirty_bytes(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.bytes)
    }

    /// When the write cache will be empty and its last destage complete, if nothing else
    /// arrives (None: it is empty now). A flush waits until then.
    pub fn clean_at(&self) -> Option<f64> {
        let cache = self.cache.as_ref()?;
        let in_progress = cache.destaging.filter(|&(done, _)| done > self.clock);
        if cache.bytes == 0 {
            return in_progress.map(|(done, _)| done);
        }
        let mut ahead = self.clone();
        ahead.advance(f64::INFINITY, &mut Vec::new());
        Some(ahead.busy_end.max(ahead.clock))
    }

    /// Start every queued request that can start by `now`, in the queue's order, and destage
    /// the write cache while the mechanism is otherwise idle; appends the requests started
    /// (with their completion times) to `started`. Call it with every arrival and completion
    /// as `now` advances (or once with infinity when all arrivals are known).
    pub fn advance(&mut self, now: f64, started: &mut Vec<Started>) {
        while let Some((t, next)) = self.next_event().filter(|&(t, _)| t <= now) {
            self.clock = t;
            self.in_service.retain(|&d| d > t);
            match next {
                Next::Cache(i) => {
                    let req = self.pending.swap_remove(i);
                    let svc = self.serve_from_cache(&req, t);
                    self.account(&req, t, &svc);
                    started.push(Started {
                        id: req.id,
                        start: t,
                        done: svc.done,
                    });
                }
                Next::Media => {
                    let i = self.choose(t);
                    let req = self.pending.swap_remove(i);
                    if let (Op::Write, Some(cache)) = (req.op, &mut self.cache) {
                        // Written through: older cached data there must not be destaged over it.
                        cache.remove(req.pos, req.pos.saturating_add(req.len));
                    }
                    let svc = self.mech.serve(&req, t);
                    self.account(&req, t, &svc);
                    self.in_service.push(svc.done);
                    started.push(Started {
                        id: req.id,
                        start: t,
                        done: svc.done,
                    });
                }
                Next::Destage => self.destage(t),
            }
            self.stats.dirty_bytes = self.dirty_bytes();
        }
    }

    /// A read of dirty cached data, or a write into the cache: the transfer at the interface
    /// rate; the mechanism is not used.
    fn serve_from_cache(&mut self, req: &Request, t: f64) -> Service {
        let done = t + req.len as f64 / self.interface;
        self.interface_free = done;
        let (a, b) = (req.pos, req.pos.saturating_add(req.len));
        if req.op == Op::Write {
            self.mech.written_over(a, b, t);
            if let Some(cache) = &mut self.cache {
                cache.insert(a, b);
            }
        }
        Service {
            done,
            transfer_s: done - t,
            cache_hit: req.op == Op::Read,
            ..Service::default()
        }
    }

    /// Write the next dirty piece (C-LOOK from the head) to the platter, as a write of it.
    fn destage(&mut self, t: f64) {
        let head = self.mech.head_at(t);
        let Some((a, b)) = self.cache.as_ref().and_then(|c| c.next_piece(head)) else {
            return;
        };
        let req = Request {
            id: u64::MAX,
            op: Op::Write,
            pos: a,
            len: b - a,
            arrival: t,
        };
        let svc = self.mech.serve(&req, t);
        if let Some(cache) = &mut self.cache {
            cache.remove(a, b);
            cache.destaging = Some((svc.done, b - a));
        }
        self.in_service.push(svc.done);
        self.stats.destages += 1;
        self.stats.destaged_bytes += b - a;
        self.account_service(t, &svc);
    }

    /// The queued request for the mechanism to start at t, among those arrived by then.
    fn choose(&self, t: f64) -> usize {
        let arrived = self
            .pending
            .iter()
            .enumerate()
            .filter(|(_, r)| r.arrival <= t && self.route(r) == Route::Media);
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
        s.cache_hits += u64::from(svc.cache_hit);
        s.queue_wait_s += start - req.arrival;
        self.account_service(start, svc);
    }

    /// The time a service took (a request's or a destage's): busy time and where it went.
    fn account_service(&mut self, start: f64, svc: &Service) {
        let s = &mut self.stats;
        s.seeks += u64::from(svc.seek_cylinders > 0);
        s.seek_cylinders += svc.seek_cylinders;
        s.seek_s += svc.seek_s;
        s.rotation_s += svc.rotation_s;
        s.transfer_s += svc.transfer_s;
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
        if in_flight.is_empty() {
            // A write waits for room in the write cache: on to the destage that makes it.
            if let Some(t) = disk.next_start().filter(|&t| t > now) {
                now = t;
                continue;
            }
        }
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
