//! Segment cleaning policies: which segments to clean, and when (the mechanism that moves a
//! segment's live blocks is the rest of `fs::clean`). The mount's own threshold cleaning and
//! the `dualfs-cleaner` daemon both use it.
//!
//! Cost-benefit is Sprite LFS's rank `(1 - u) * age / (1 + u)`: a segment's free space times
//! how long its data has stayed put, over the cost of reading it and writing back its live
//! part. Greedy takes the emptiest segments.
//!
//! When to clean follows lfs_cleanerd and nilfs_cleanerd: start when the clean segments fall
//! below `min_free`, stop once there are `max_free`; when the file system is idle (no write
//! for `idle_secs`) start already below `max_free` and clean bigger passes.

use crate::format::meta::{SegUsage, SEG_ACTIVE, SEG_DIRTY, SEG_RESERVED};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    Greedy,
    #[default]
    CostBenefit,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Greedy => "greedy",
            Policy::CostBenefit => "cost-benefit",
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        match s {
            "greedy" => Ok(Policy::Greedy),
            "cost-benefit" | "costbenefit" => Ok(Policy::CostBenefit),
            _ => Err(format!(
                "unknown cleaning policy {s:?} (greedy, cost-benefit)"
            )),
        }
    }
}

/// Segments fuller than this are never worth cleaning: moving 95% to gain 5%.
pub const MAX_VICTIM_UTILIZATION: f64 = 0.95;

/// Up to `max` segments worth cleaning, best first. Segments that are clean, reserved, the
/// log head or next, or nearly full of live data (cleaning would gain almost nothing) are left.
pub fn choose(
    usage: &[SegUsage],
    segment_bytes: u64,
    now: u64,
    policy: Policy,
    max: usize,
) -> Vec<u64> {
    let mut ranked: Vec<(f64, u64)> = usage
        .iter()
        .enumerate()
        .filter(|(_, u)| u.flags & SEG_DIRTY != 0 && u.flags & (SEG_ACTIVE | SEG_RESERVED) == 0)
        .filter_map(|(s, u)| {
            let util = (u.live_bytes as f64 / segment_bytes as f64).min(1.0);
            if util > MAX_VICTIM_UTILIZATION {
                return None;
            }
            let score = match policy {
                Policy::Greedy => 1.0 - util,
                Policy::CostBenefit => {
                    let age = now.saturating_sub(u.last_mod) as f64 + 1.0;
                    (1.0 - util) * age / (1.0 + util)
                }
            };
            Some((score, s as u64))
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.0.partial_cmp(&a.0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.1.cmp(&b.1))
    });
    ranked.into_iter().take(max).map(|r| r.1).collect()
}

/// Bytes of segments a background pass takes at least (each pass ends with a checkpoint).
pub const PASS_BYTES: u64 = 2 << 20;

/// When and how much to clean. Counts are in segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Start cleaning when fewer segments than this are clean.
    pub min_free: u64,
    /// Stop cleaning once this many are clean.
    pub max_free: u64,
    /// Segments per pass (one checkpoint each); twice as many when idle or below `min_free`.
    pub segments_per_pass: u64,
    /// No write for this long counts as idle: cleaning starts below `max_free`.
    pub idle_secs: u64,
    /// Policy of background cleaning (emergency cleaning in the write path is always greedy).
    pub policy: Policy,
}

impl Thresholds {
    /// Defaults for a log of `segments` segments of `segment_bytes` whose writers stop at
    /// `reserve` clean ones: nilfs_cleanerd keeps 10-20% clean, lfs_cleanerd a fixed number
    /// above its reserve; a pass takes at least 2 segments and 2 MiB (one checkpoint each).
    /// Cleaning starts at least a pass and 2 segments above the reserve: a background pass
    /// may take only a quarter of the room above it (writers go on meanwhile), and must
    /// still find room for a pass there.
    pub fn defaults(segments: u64, reserve: u64, segment_bytes: u64) -> Thresholds {
        let per_pass = (PASS_BYTES / segment_bytes.max(1)).max(2);
        let min_free = (segments / 10).max(reserve + per_pass + 2);
        Thresholds {
            min_free,
            max_free: (segments / 5).max(min_free + (segments / 10).max(2)),
            segments_per_pass: per_pass,
            idle_secs: 5,
            policy: Policy::CostBenefit,
        }
    }

    /// Should cleaning start now, with `clean` clean segments?
    pub fn should_start(&self, clean: u64, idle: bool) -> bool {
        clean < self.min_free || (idle && clean < self.max_free)
    }

    /// Segments per pass in this situation.
    pub fn pass_size(&self, clean: u64, idle: bool) -> u64 {
        let n = self.segments_per_pass.max(1);
        if idle || clean < self.min_free {
            n * 2
        } else {
            n
        }
    }
}

/// A change of thresholds: fields left `None` keep their value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThresholdUpdate {
    pub min_free: Option<u64>,
    pub max_free: Option<u64>,
    pub segments_per_pass: Option<u64>,
    pub idle_secs: Option<u64>,
    pub policy: Option<Policy>,
}

impl ThresholdUpdate {
    /// `t` with the update applied; `Err` when the result makes no sense.
    pub fn apply(&self, t: Thresholds) -> Result<Thresholds, String> {
        let n = Thresholds {
            min_free: self.min_free.unwrap_or(t.min_free),
            max_free: self.max_free.unwrap_or(t.max_free),
            segments_per_pass: self.segments_per_pass.unwrap_or(t.segments_per_pass),
            idle_secs: self.idle_secs.unwrap_or(t.idle_secs),
            policy: self.policy.unwrap_or(t.policy),
        };
        if n.max_free < n.min_free {
            return Err(format!(
                "max-free ({}) is below min-free ({})",
                n.max_free, n.min_free
            ));
        }
        if n.segments_per_pass == 0 {
            return Err("segments per pass must be at least 1".into());
        }
        Ok(n)
    }
}

/// What cleaning has done since mount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanerCounters {
    /// Passes that cleaned at least one segment.
    pub passes: u64,
    /// Of those, passes an operation ran in its write path because clean segments ran short
    /// (it waited for them).
    #[serde(alias = "emergency_passes")]
    pub write_path_passes: u64,
    /// Passes the mount's own background thread ran (threshold cleaning).
    #[serde(default)]
    pub background_passes: u64,
    /// Passes asked for over the control socket (`dualfs-cleaner`'s daemon or `--once`).
    #[serde(default)]
    pub requested_passes: u64,
    /// Segments that became clean through a pass.
    pub segments_cleaned: u64,
    /// Live blocks moved (inodes count one each).
    pub live_moved: u64,
    /// Log bytes written by cleaning passes: live bytes moved, the indirect blocks, inodes
    /// and symlink blocks that moved with them, their checkpoints.
    pub bytes_written: u64,
    /// Bytes reclaimed: the dead part of every cleaned segment.
    pub bytes_freed: u64,
    /// Writers refused with ENOSPC because the log had no room.
    pub enospc: u64,
    /// Operations admission found short of room: they waited while it was made (what was
    /// pending written, a checkpoint, write-path passes or a pass beside them ending).
    #[serde(default)]
    pub room_waits: u64,
}

impl CleanerCounters {
    /// Bytes written by cleaning per byte it freed (0 before anything was freed).
    pub fn write_cost(&self) -> f64 {
        if self.bytes_freed == 0 {
            0.0
        } else {
            self.bytes_written as f64 / self.bytes_freed as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks() {
        let seg = |live: u32, flags: u32, last_mod: u64| SegUsage {
            live_bytes: live,
            flags,
            last_mod,
        };
        let usage = vec![
            seg(0, SEG_RESERVED, 0),
            seg(100, SEG_DIRTY, 90),            // 1: nearly empty, young
            seg(500, SEG_DIRTY, 0),             // 2: half full, old
            seg(1000, SEG_DIRTY, 0),            // 3: full
            seg(0, 0, 0),                       // 4: clean
            seg(10, SEG_DIRTY | SEG_ACTIVE, 0), // 5: the head
        ];
        assert_eq!(choose(&usage, 1000, 100, Policy::Greedy, 10), vec![1, 2]);
        assert_eq!(
            choose(&usage, 1000, 100, Policy::CostBenefit, 10),
            vec![2, 1]
        );
        assert_eq!(choose(&usage, 1000, 100, Policy::Greedy, 1), vec![1]);
    }

    #[test]
    fn thresholds() {
        let t = Thresholds::defaults(200, 8, 1 << 20);
        assert_eq!((t.min_free, t.max_free), (20, 40));
        let small = Thresholds::defaults(30, 8, 256 << 10);
        // A pass (8 segments of 256 KiB) and 2 above the reserve of 8 (was the reserve and
        // 2: the cleaner started where writers were about to stop).
        assert_eq!((small.min_free, small.max_free), (18, 21));
        assert_eq!(small.segments_per_pass, 8);
        assert!(t.should_start(19, false));
        assert!(!t.should_start(20, false));
        assert!(t.should_start(39, true));
        assert!(!t.should_start(40, true));
        assert_eq!(t.pass_size(30, false), 2);
        assert_eq!(t.pass_size(30, true), 4);
        let u = ThresholdUpdate {
            min_free: Some(50),
            ..Default::default()
        };
        assert!(u.apply(t).is_err());
        let u = ThresholdUpdate {
            min_free: Some(30),
            policy: Some(Policy::Greedy),
            ..Default::default()
        };
        let n = u.apply(t).unwrap();
        assert_eq!((n.min_free, n.max_free, n.policy), (30, 40, Policy::Greedy));
    }

    #[test]
    fn policy_names_round_trip() {
        for p in [Policy::Greedy, Policy::CostBenefit] {
            assert_eq!(p.name().parse::<Policy>().unwrap(), p);
            let j = serde_json::to_string(&p).unwrap();
            assert_eq!(j, format!("\"{}\"", p.name()));
        }
    }
}
