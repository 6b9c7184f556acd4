//! Concurrency interference: how queries sharing a cluster slow each other down, and which
//! queries they are matters.
//!
//! Every query running on a cluster of size `s` holds a **memory demand** `d`, a fraction of the
//! cluster's memory:
//!
//! `d = memory_scale(s) · (w / w̄(s))^memory_exponent(s) · 2^σ(t)`
//!
//! where `w` is the query's mean isolated runtime at `s`, `w̄(s)` the catalog's mean isolated
//! runtime at `s` (so the demand grows with the query's size) and `σ(t) ≥ 0` the template's
//! super-linearity: how much more than linearly doubling the size speeds it up
//! (`σ = max(0, −b(t)/ln 2 − 1)` for the template's size-scaling slope `b(t)`, see
//! [`Catalog::size_slope`](crate::catalog::Catalog::size_slope)). A template that more than halves
//! its runtime when the size doubles spills at the smaller size: it is memory-bound, and its
//! demand is larger. Three mechanisms then act, each with parameters per calibrated size
//! (interpolated in log2 size between calibrated sizes, held constant outside them):
//!
//! - **resource sharing**: a query running alone uses a fraction `solo_share` of the cluster's
//!   compute, so up to `1 / solo_share` queries run at full speed; beyond that compute is shared
//!   equally (generalised processor sharing);
//! - **spill**: when the running queries' total demand `D` exceeds the memory (`max(1, d_max)`,
//!   so a query alone never spills beyond what its isolated runtime already includes), every
//!   running query slows by `1 / (1 + spill_penalty · (D − max(1, d_max)))` (spilled working
//!   sets share the disks);
//! - **admission**: queries wait in a FIFO queue; the head starts when fewer than
//!   `concurrency_limit` run and its demand fits, `D + d ≤ admit_memory` (or nothing runs). A
//!   memory-heavy query at the head holds back everything behind it;
//! - **burst capacity**: Redshift Serverless adds compute beyond the base capacity when work
//!   piles up; while at least `burst_at` queries are present (running or queued), every running
//!   query progresses `burst_factor` × faster. Billing stays the paper's (§2: base size × active
//!   time).
//!
//! Each of `k` running queries with total demand `D` progresses at
//! `b · min(1, 1/(k · solo_share)) / (1 + spill_penalty · max(0, D − max(1, d_max)))` seconds of
//! isolated work per second, `b` the burst multiplier.
//!
//! The shipped parameters (`python/autoslo/data/interference.csv`) are fitted by
//! `autoslo calibrate --fit` ([`crate::calibration::fit`]) against the real Redshift Serverless
//! measurements, on seeds disjoint from the ones `autoslo calibrate` checks.

use std::sync::OnceLock;

use crate::catalog::Catalog;
use crate::error::{AutoSloError, Result};

const INTERFERENCE_CSV: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/autoslo/data/interference.csv"));

/// Header of the interference parameter file.
pub const INTERFERENCE_HEADER: &str = "rpu,solo_share,memory_scale,memory_exponent,spill_penalty,admit_memory,concurrency_limit,burst_at,burst_factor";
/// Number of parameters per size.
pub const NUM_PARAMS: usize = 8;

/// Interference parameters of one cluster size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InterferenceParams {
    /// Fraction of the cluster's compute one query uses alone (0, 1].
    pub solo_share: f64,
    /// Memory demand of a query of the size's mean isolated runtime, as a fraction of memory (> 0).
    pub memory_scale: f64,
    /// How demand grows with the query's isolated runtime (≥ 0).
    pub memory_exponent: f64,
    /// Slowdown per unit of over-committed memory (≥ 0).
    pub spill_penalty: f64,
    /// Total demand admission lets run at once, × memory (> 0): a head query that does not fit
    /// waits, but a query always starts on an empty cluster.
    pub admit_memory: f64,
    /// Most queries running at once (≥ 1).
    pub concurrency_limit: usize,
    /// Queries present (running or queued) from which burst capacity applies (≥ 1).
    pub burst_at: f64,
    /// Speed-up of burst capacity (≥ 1; 1 = none).
    pub burst_factor: f64,
}

impl InterferenceParams {
    /// Progress rate (isolated-work seconds per second) of each of `k` running queries whose
    /// demands sum to `demand`, the largest being `max_demand`, with `queued` more waiting.
    pub fn rate(&self, k: usize, queued: usize, demand: f64, max_demand: f64) -> f64 {
        if k == 0 {
            return 1.0;
        }
        let share = (1.0 / (k as f64 * self.solo_share)).min(1.0);
        let over = (demand - max_demand.max(1.0)).max(0.0);
        let burst = if (k + queued) as f64 >= self.burst_at { self.burst_factor } else { 1.0 };
        burst * share / (1.0 + self.spill_penalty * over)
    }

    /// Whether a query of demand `d` may start beside `k` running queries of total demand `demand`.
    pub fn admits(&self, k: usize, demand: f64, d: f64) -> bool {
        k == 0 || (k < self.concurrency_limit && demand + d <= self.admit_memory)
    }

    /// The parameters as a vector (for fitting), in [`INTERFERENCE_HEADER`] order after `rpu`.
    pub fn to_vec(&self) -> [f64; NUM_PARAMS] {
        [self.solo_share, self.memory_scale, self.memory_exponent, self.spill_penalty, self.admit_memory, self.concurrency_limit as f64, self.burst_at, self.burst_factor]
    }

    /// The inverse of [`Self::to_vec`] (the concurrency limit is rounded).
    pub fn from_vec(v: [f64; NUM_PARAMS]) -> Self {
        InterferenceParams {
            solo_share: v[0],
            memory_scale: v[1],
            memory_exponent: v[2],
            spill_penalty: v[3],
            admit_memory: v[4],
            concurrency_limit: v[5].round().max(1.0) as usize,
            burst_at: v[6],
            burst_factor: v[7],
        }
    }

    pub(crate) fn validate(&self, size: u32) -> Result<()> {
        let finite = self.to_vec().iter().all(|x| x.is_finite());
        let ok = finite
            && self.solo_share > 0.0
            && self.solo_share <= 1.0
            && self.memory_scale > 0.0
            && self.memory_exponent >= 0.0
            && self.spill_penalty >= 0.0
            && self.admit_memory > 0.0
            && self.concurrency_limit >= 1
            && self.burst_at >= 1.0
            && self.burst_factor >= 1.0;
        if ok {
            Ok(())
        } else {
            Err(AutoSloError::InvalidConfig(format!(
                "interference at {size} RPU: need 0 < solo_share ≤ 1, memory_scale > 0, memory_exponent ≥ 0, spill_penalty ≥ 0, admit_memory > 0, concurrency_limit ≥ 1, burst_at ≥ 1, burst_factor ≥ 1; got {self:?}"
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
    /// The shipped, fitted parameters.
    fn default() -> Self {
        static SHIPPED: OnceLock<InterferenceModel> = OnceLock::new();
        SHIPPED.get_or_init(|| InterferenceModel::from_csv(INTERFERENCE_CSV, "bundled interference.csv").expect("bundled interference parameters parse")).clone()
    }
}

impl InterferenceModel {
    /// A model from per-size parameters (at least one size, sizes distinct).
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
        if let Some(w) = points.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(AutoSloError::InvalidConfig(format!("interference parameters given twice for {} RPU", w[0].0)));
        }
        Ok(InterferenceModel { points })
    }

    /// Parse a model from CSV text with header [`INTERFERENCE_HEADER`]; lines starting with `#`
    /// are comments.
    pub fn from_csv(text: &str, source_name: &str) -> Result<Self> {
        let parse_err = |line: usize, problem: String| AutoSloError::Parse { source_name: source_name.into(), line, problem };
        let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        match lines.next() {
            Some((_, h)) if h.trim() == INTERFERENCE_HEADER => {}
            Some((n, _)) => return Err(parse_err(n + 1, format!("expected header {INTERFERENCE_HEADER}"))),
            None => return Err(parse_err(1, "empty file".into())),
        }
        let mut points = Vec::new();
        for (n, line) in lines {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.len() != NUM_PARAMS + 1 {
                return Err(parse_err(n + 1, format!("expected {} fields, got {}", NUM_PARAMS + 1, f.len())));
            }
            let num = |i: usize| f[i].parse::<f64>().map_err(|e| parse_err(n + 1, format!("field {} ({}): {e}", i + 1, INTERFERENCE_HEADER.split(',').nth(i).unwrap_or("?"))));
            let rpu = num(0)?;
            if !(rpu >= 1.0 && rpu.fract() == 0.0) {
                return Err(parse_err(n + 1, format!("rpu must be a positive integer, got {}", f[0])));
            }
            let limit = num(6)?;
            if !(limit >= 1.0 && limit.fract() == 0.0) {
                return Err(parse_err(n + 1, format!("concurrency_limit must be a positive integer, got {}", f[6])));
            }
            points.push((rpu as u32, InterferenceParams::from_vec([num(1)?, num(2)?, num(3)?, num(4)?, num(5)?, limit, num(7)?, num(8)?])));
        }
        Self::new(points)
    }

    /// The model as CSV text (what [`Self::from_csv`] reads), after `comment` lines.
    pub fn to_csv(&self, comment: &[String]) -> String {
        let mut s = String::new();
        for c in comment {
            s.push_str("# ");
            s.push_str(c);
            s.push('\n');
        }
        s.push_str(INTERFERENCE_HEADER);
        s.push('\n');
        for (rpu, p) in &self.points {
            let v = p.to_vec();
            s.push_str(&format!("{rpu},{:.6},{:.6},{:.6},{:.6},{:.6},{},{:.6},{:.6}\n", v[0], v[1], v[2], v[3], v[4], p.concurrency_limit, v[6], v[7]));
        }
        s
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
        let (a, b) = (a.to_vec(), b.to_vec());
        InterferenceParams::from_vec(std::array::from_fn(|k| a[k] + (b[k] - a[k]) * w))
    }
}

/// Super-linearity of a template: `max(0, −b/ln 2 − 1)` for its size-scaling slope `b`.
pub fn super_linearity(cat: &Catalog, template: u16) -> f64 {
    (-cat.size_slope(template) / std::f64::consts::LN_2 - 1.0).max(0.0)
}

/// Memory demand (see the module docs) of a query of `template` whose mean isolated runtime on
/// this cluster is `w`, given the cluster size's mean isolated runtime `mean_w`
/// ([`Catalog::mean_runtime_at`], computed once per cluster).
pub fn memory_demand(cat: &Catalog, p: &InterferenceParams, template: u16, w: f64, mean_w: f64) -> f64 {
    p.memory_scale * (w / mean_w).powf(p.memory_exponent) * super_linearity(cat, template).exp2()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn rates_fall_with_concurrency_and_demand_and_interpolate() {
        let m = InterferenceModel::default();
        for size in [4, 8, 12, 16, 24, 32, 64] {
            let p = m.at(size);
            assert_eq!(p.rate(1, 0, 3.0, 3.0), 1.0, "a query alone never spills beyond its isolated run");
            let mut prev = 1.0;
            for k in 1..(p.burst_at as usize).min(100) {
                let r = p.rate(k, 0, 0.3 * k as f64, 0.3);
                assert!(r <= prev + 1e-12 && r > 0.0, "size {size} k {k}");
                prev = r;
            }
            // Which queries co-run matters: the same count with heavier demands is slower (or equal
            // when there is no spill penalty).
            assert!(p.rate(8, 0, 6.0, 2.0) <= p.rate(8, 0, 2.0, 0.5));
            // Burst capacity never slows anything down.
            assert!(p.rate(4, 1000, 1.0, 0.5) >= p.rate(4, 0, 1.0, 0.5));
            assert!(p.admits(0, 0.0, 100.0), "an empty cluster always admits");
        }
        let first = m.points()[0];
        assert_eq!(m.at(first.0.saturating_sub(1).max(1)), first.1);
        assert!(InterferenceModel::new(vec![]).is_err());
        let bad = InterferenceParams::from_vec([0.0, 1.0, 0.5, 0.0, 2.0, 1.0, 10.0, 1.0]);
        assert!(InterferenceModel::new(vec![(8, bad)]).is_err());
        let good = InterferenceParams::from_vec([0.5, 1.0, 0.5, 0.0, 2.0, 4.0, 10.0, 1.0]);
        assert!(InterferenceModel::new(vec![(8, good), (8, good)]).is_err());
    }

    #[test]
    fn csv_round_trips_and_rejects_bad_files() {
        let m = InterferenceModel::default();
        let text = m.to_csv(&["a comment".into()]);
        let back = InterferenceModel::from_csv(&text, "t").unwrap();
        for ((s0, a), (s1, b)) in m.points().iter().zip(back.points()) {
            assert_eq!(s0, s1);
            for (x, y) in a.to_vec().iter().zip(b.to_vec()) {
                assert!((x - y).abs() <= 1e-6 * x.abs().max(1.0));
            }
        }
        assert!(InterferenceModel::from_csv("nope\n", "t").is_err());
        let e = InterferenceModel::from_csv(&format!("{INTERFERENCE_HEADER}\n8,0.5,1,0.5,0,2,x,10,1\n"), "t").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("concurrency_limit"), "{e}");
        assert!(InterferenceModel::from_csv(&format!("{INTERFERENCE_HEADER}\n8,0.5,1,0.5,0,2\n"), "t").is_err());
    }

    #[test]
    fn memory_bound_templates_demand_more() {
        let cat = catalog::tpcds();
        let p = InterferenceModel::default().at(16);
        let mut with: Vec<(f64, f64)> = Vec::new();
        for t in cat.templates() {
            let text = crate::catalog::QueryText { template: t, instance: 1 };
            let d = memory_demand(cat, &p, t, cat.isolated_runtime(text, 16).unwrap(), cat.mean_runtime_at(16));
            assert!(d.is_finite() && d > 0.0);
            with.push((super_linearity(cat, t), d / (cat.isolated_runtime(text, 16).unwrap() / cat.mean_runtime_at(16)).powf(p.memory_exponent)));
        }
        // At equal runtime, demand rises with super-linearity.
        with.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(with.last().unwrap().1 >= with[0].1);
        assert!(with.iter().any(|w| w.0 > 0.0), "some templates scale super-linearly");
    }
}
