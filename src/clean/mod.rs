//! Segment cleaning policies: which segments to clean, and when (the mechanism that moves a
//! segment's live blocks is `Fs::clean_segment`).
//!
//! Cost-benefit is Sprite LFS's rank `(1 - u) * age / (1 + u)`: a segment's free space times
//! how long its data has stayed put, over the cost of reading it and writing back its live
//! part. Greedy takes the emptiest segments.

use crate::format::meta::{SegUsage, SEG_ACTIVE, SEG_DIRTY, SEG_RESERVED};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    Greedy,
    #[default]
    CostBenefit,
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
            if util > 0.95 {
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
}
