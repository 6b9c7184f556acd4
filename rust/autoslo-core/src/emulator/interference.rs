//! Concurrency interference: how queries sharing a cluster slow each other down.
//!
//! Three mechanisms, each with a parameter per calibrated size (interpolated in log2 size between
//! calibrated sizes, held constant outside them):
//! - **resource sharing**: a query running alone uses a fraction `solo_share` of the cluster, so up
//!   to `1 / solo_share` queries run at full speed; beyond that the cluster is shared equally
//!   (generalised processor sharing): each of `k` running queries progresses at
//!   `min(1, 1 / (k · solo_share))` seconds of isolated work per second;
//! - **memory pressure / spill**: above `memory_slots` concurrently running queries, working sets
//!   spill and every query slows further by `1 / (1 + spill_penalty · (k − memory_slots) / memory_slots)`;
//! - **admission**: at most `concurrency_limit` queries run at once; the rest wait in a FIFO queue.
//!
//! Defaults were calibrated with `autoslo calibrate` against the medians of latency ÷ isolated
//! runtime binned by overlapping queries in `concurrent_latencies.csv` (see `calibration`).

use crate::error::{AutoSloError, Result};

/// Interference parameters of one cluster size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InterferenceParams {
    pub solo_share: f64,
    pub memory_slots: f64,
    pub spill_penalty: f64,
    pub concurrency_limit: usize,
}

impl InterferenceParams {
    /// Progress rate (isolated-work seconds per second) of each of `k` running queries.
    pub fn rate(&self, k: usize) -> f64 {
        if k == 0 {
            return 1.0;
        }
        let k = k as f64;
        let share = (1.0 / (k * self.solo_share)).min(1.0);
        let spill = if k > self.memory_slots { 1.0 / (1.0 + self.spill_penalty * (k - self.memory_slots) / self.memory_slots) } else { 1.0 };
        share * spill
    }

    fn validate(&self, size: u32) -> Result<()> {
        let ok = self.solo_share > 0.0 && self.solo_share <= 1.0 && self.memory_slots >= 1.0 && self.spill_penalty >= 0.0 && self.concurrency_limit >= 1;
        if ok && self.solo_share.is_finite() && self.memory_slots.is_finite() && self.spill_penalty.is_finite() {
            Ok(())
        } else {
            Err(AutoSloError::InvalidConfig(format!(
                "interference at {size} RPU: need 0 < solo_share ≤ 1, memory_slots ≥ 1, spill_penalty ≥ 0, concurrency_limit ≥ 1; got {self:?}"
            )))
        }
    }
}

/// Interference parameters by cluster size.
#[derive(Debug, Clone, PartialEq)]
pub struct InterferenceModel {
    /// (size in RPU, parameters), sorted by size.
    points: Vec<(u32, InterferenceParams)>,
}

impl Default for InterferenceModel {
    fn default() -> Self {
        let p = |solo_share, memory_slots, spill_penalty, concurrency_limit| InterferenceParams { solo_share, memory_slots, spill_penalty, concurrency_limit };
        InterferenceModel { points: vec![(8, p(0.6, 2.5, 1.0, 12)), (16, p(0.85, 5.0, 0.5, 16)), (32, p(0.6, 6.0, 0.5, 16))] }
    }
}

impl InterferenceModel {
    /// A model from per-size parameters (at least one size).
    pub fn new(mut points: Vec<(u32, InterferenceParams)>) -> Result<Self> {
        if points.is_empty() {
            return Err(AutoSloError::InvalidConfig("interference model needs at least one size".into()));
        }
        for (s, p) in &points {
            if *s == 0 {
                return Err(AutoSloError::out_of_range("interference size", "> 0 RPU", 0));
            }
            p.validate(*s)?;
        }
        points.sort_by_key(|p| p.0);
        Ok(InterferenceModel { points })
    }

    /// The calibrated sizes and their parameters.
    pub fn points(&self) -> &[(u32, InterferenceParams)] {
        &self.points
    }

    /// Parameters at a size: interpolated linearly in log2 size between calibrated sizes
    /// (concurrency limit rounded), constant beyond the ends.
    pub fn at(&self, size: u32) -> InterferenceParams {
        let first = self.points[0];
        let last = self.points[self.points.len() - 1];
        if size <= first.0 {
            return first.1;
        }
        if size >= last.0 {
            return last.1;
        }
        let i = self.points.iter().position(|p| p.0 >= size).unwrap_or(self.points.len() - 1);
        let (s0, a) = self.points[i - 1];
        let (s1, b) = self.points[i];
        let w = ((size as f64).log2() - (s0 as f64).log2()) / ((s1 as f64).log2() - (s0 as f64).log2());
        let lerp = |x: f64, y: f64| x + (y - x) * w;
        InterferenceParams {
            solo_share: lerp(a.solo_share, b.solo_share),
            memory_slots: lerp(a.memory_slots, b.memory_slots),
            spill_penalty: lerp(a.spill_penalty, b.spill_penalty),
            concurrency_limit: lerp(a.concurrency_limit as f64, b.concurrency_limit as f64).round() as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_fall_with_concurrency_and_interpolate() {
        let m = InterferenceModel::default();
        for size in [4, 8, 12, 16, 24, 32, 64] {
            let p = m.at(size);
            assert_eq!(p.rate(1), 1.0);
            let mut prev = 1.0;
            for k in 1..100 {
                let r = p.rate(k);
                assert!(r <= prev + 1e-12 && r > 0.0, "size {size} k {k}");
                prev = r;
            }
        }
        assert_eq!(m.at(4), m.at(8));
        let mid = m.at(16);
        assert_eq!(mid, m.points()[1].1);
        assert!(InterferenceModel::new(vec![]).is_err());
        let bad = InterferenceParams { solo_share: 0.0, memory_slots: 1.0, spill_penalty: 0.0, concurrency_limit: 1 };
        assert!(InterferenceModel::new(vec![(8, bad)]).is_err());
    }
}
