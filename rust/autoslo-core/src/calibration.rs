//! The emulator held against the real Redshift Serverless measurements.
//!
//! Two checks, both reproducible with `autoslo calibrate`:
//! 1. **Concurrency**: the workloads behind the real data (BaseWorkload at λ ∈ {0.05, 0.1, 0.2,
//!    0.5, 1.0} and the four phased variants, one-hour timeout) are emulated on one cluster of
//!    8, 16 and 32 RPU. For every uncensored query whose isolated runtime was measured, latency ÷
//!    measured isolated mean is binned by the number of queries overlapping it (arrival to end);
//!    each bin's median is compared with the real median from `concurrent_latencies.csv`
//!    ([`REAL_MEDIANS`]). Target: within ×1.5 for every bin from 1 to 15 overlapping queries.
//! 2. **Isolation**: every measured (template, instance, RPU) is re-run alone as often as it was
//!    measured (× `isolated_replications`); the mean over all runs per RPU must be within 5 % of
//!    the measured per-RPU mean (`isolated_runtimes_summary.yml`).

use rayon::prelude::*;

use crate::catalog::{self, QueryText};
use crate::control::{RoundRobin, StaticScaler};
use crate::emulator::{emulate, EmulatorConfig};
use crate::error::Result;
use crate::slo::SloTable;
use crate::stats::median;
use crate::trace::Trace;
use crate::workload::{base_workload, phased_workload, Query, Workload, DEFAULT_TENANT};

/// Overlap bins (inclusive) of the real-data table.
pub const BINS: [(usize, usize); 7] = [(0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63)];

/// Real medians of latency ÷ isolated runtime per bin (`shared/data/redshift/README.md`).
pub const REAL_MEDIANS: [(u32, [Option<f64>; 7]); 3] = [
    (8, [Some(1.00), Some(1.04), Some(1.42), Some(4.37), Some(7.83), Some(17.4), Some(23.4)]),
    (16, [Some(0.99), Some(1.37), Some(1.99), Some(3.17), Some(6.40), Some(17.9), Some(28.5)]),
    (32, [Some(0.95), Some(1.12), Some(1.64), Some(1.82), Some(4.42), None, Some(29.8)]),
];

/// Measured per-RPU mean isolated runtime (`isolated_runtimes_summary.yml`).
pub const REAL_ISOLATED_MEANS: [(u32, f64); 4] = [(4, 21.436470945676167), (8, 7.304338711171062), (16, 4.69129893152041), (32, 2.706868862311958)];

/// Allowed factor between emulated and real medians in the checked bins.
pub const MEDIAN_TOLERANCE: f64 = 1.5;
/// Allowed relative error of per-RPU isolated means.
pub const ISOLATED_TOLERANCE: f64 = 0.05;

/// One (RPU, overlap bin) comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct BinRow {
    pub rpu: u32,
    pub lo: usize,
    pub hi: usize,
    /// Emulated queries in the bin.
    pub n: usize,
    pub emulated_median: Option<f64>,
    pub real_median: Option<f64>,
    /// Whether the bin is held to the tolerance (1 to 15 overlapping queries).
    pub checked: bool,
    /// Within tolerance (false when a checked bin has no emulated queries).
    pub within: bool,
}

/// One per-RPU isolated-mean comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct IsolatedRow {
    pub rpu: u32,
    pub runs: usize,
    pub emulated_mean: f64,
    pub real_mean: f64,
    pub relative_error: f64,
    pub within: bool,
}

/// Run-to-run noise at one size: the standard deviation of log runtime over the repeated runs of
/// each measured (template, instance), median and p90 across entries, emulated beside real.
/// Reported, not held to a tolerance (the real figures rest on 2–10 runs per entry).
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseRow {
    pub rpu: u32,
    /// Entries with ≥ 2 runs (real) and emulated groups compared.
    pub real_entries: usize,
    pub emulated_groups: usize,
    pub real_log_std: [f64; 2],
    pub emulated_log_std: [f64; 2],
}

/// The calibration report.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationReport {
    pub bins: Vec<BinRow>,
    pub isolated: Vec<IsolatedRow>,
    pub noise: Vec<NoiseRow>,
}

/// Population standard deviation of the logs of `xs`.
fn log_std(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let m = xs.iter().map(|x| x.ln()).sum::<f64>() / n;
    (xs.iter().map(|x| (x.ln() - m).powi(2)).sum::<f64>() / n).sqrt()
}

impl CalibrationReport {
    /// Whether every checked bin and every isolated mean is within tolerance.
    pub fn passed(&self) -> bool {
        self.bins.iter().all(|b| !b.checked || b.within) && self.isolated.iter().all(|r| r.within)
    }
}

/// Number of other queries overlapping each query's [arrival, end] interval. O(n log n).
pub fn overlap_counts(arrivals: &[f64], ends: &[f64]) -> Vec<usize> {
    let mut a = arrivals.to_vec();
    let mut e = ends.to_vec();
    a.sort_by(f64::total_cmp);
    e.sort_by(f64::total_cmp);
    arrivals
        .iter()
        .zip(ends)
        .map(|(&ai, &ei)| {
            let started_before_i_ends = a.partition_point(|&x| x < ei);
            let ended_before_i_starts = e.partition_point(|&x| x <= ai);
            started_before_i_ends.saturating_sub(ended_before_i_starts + 1)
        })
        .collect()
}

/// The calibration workloads of one seed: BaseWorkload at 5 rates and 4 phased variants.
pub fn calibration_workloads(seed: u64) -> Result<Vec<Workload>> {
    let slo = SloTable::paper(2.0)?;
    let mut out = Vec::new();
    for (i, rate) in [0.05, 0.1, 0.2, 0.5, 1.0].into_iter().enumerate() {
        out.push(base_workload(rate, seed * 100 + i as u64, &slo)?);
    }
    for (i, (x, high)) in [(40, 0.2), (40, 0.5), (15, 0.2), (15, 0.5)].into_iter().enumerate() {
        out.push(phased_workload(x, 0.05, high, seed * 100 + 50 + i as u64, &slo)?);
    }
    Ok(out)
}

/// (overlaps, latency ÷ measured isolated mean) of the uncensored, measured queries of a trace.
pub fn slowdowns(w: &Workload, t: &Trace, rpu: u32) -> Vec<(usize, f64)> {
    let arrivals: Vec<f64> = t.rows.iter().map(|r| r.arrival).collect();
    let ends: Vec<f64> = t.rows.iter().map(|r| r.end).collect();
    let overlaps = overlap_counts(&arrivals, &ends);
    let cat = catalog::tpcds();
    t.rows
        .iter()
        .zip(overlaps)
        .filter(|(r, _)| !r.censored())
        .filter_map(|(r, n)| {
            let runs = cat.measured_runs(w.queries()[r.query].text, rpu);
            (!runs.is_empty()).then(|| (n, r.latency / (runs.iter().sum::<f64>() / runs.len() as f64)))
        })
        .collect()
}

/// Run both calibration checks with `seeds` seeds of the concurrency workloads and
/// `isolated_replications` repetitions of the measured isolated runs. Parallel (rayon).
pub fn calibrate(cfg: &EmulatorConfig, seeds: u64, isolated_replications: usize) -> Result<CalibrationReport> {
    let cfg = EmulatorConfig { timeout_s: Some(3600.0), ..cfg.clone() };
    let sizes: Vec<u32> = REAL_MEDIANS.iter().map(|r| r.0).collect();
    let bins = concurrency_bins(&cfg, seeds, &sizes)?;
    let per_size = REAL_ISOLATED_MEANS
        .par_iter()
        .map(|&(rpu, real_mean)| isolated_runs(&cfg, rpu, isolated_replications).map(|r| (rpu, real_mean, r)))
        .collect::<Result<Vec<_>>>()?;
    let cat = catalog::tpcds();
    let mut isolated = Vec::new();
    let mut noise = Vec::new();
    for (rpu, real_mean, groups) in per_size {
        let all: Vec<f64> = groups.iter().flatten().copied().collect();
        let m = all.iter().sum::<f64>() / all.len() as f64;
        let rel = (m - real_mean) / real_mean;
        isolated.push(IsolatedRow { rpu, runs: all.len(), emulated_mean: m, real_mean, relative_error: rel, within: rel.abs() <= ISOLATED_TOLERANCE });
        let real: Vec<f64> = cat.measured().filter(|e| e.1 == rpu && e.2.len() >= 2).map(|e| log_std(e.2)).collect();
        let emul: Vec<f64> = groups.iter().filter(|g| g.len() >= 2).map(|g| log_std(g)).collect();
        let q = |v: &[f64], p: f64| crate::stats::quantile(v, p).unwrap_or(f64::NAN);
        noise.push(NoiseRow {
            rpu,
            real_entries: real.len(),
            emulated_groups: emul.len(),
            real_log_std: [q(&real, 0.5), q(&real, 0.9)],
            emulated_log_std: [q(&emul, 0.5), q(&emul, 0.9)],
        });
    }
    Ok(CalibrationReport { bins, isolated, noise })
}

/// The concurrency check alone, for the given calibrated sizes (a subset of 8, 16, 32).
pub fn concurrency_bins(cfg: &EmulatorConfig, seeds: u64, sizes: &[u32]) -> Result<Vec<BinRow>> {
    let cfg = EmulatorConfig { timeout_s: Some(3600.0), ..cfg.clone() };
    let mut jobs = Vec::new();
    for &(rpu, _) in REAL_MEDIANS.iter().filter(|r| sizes.contains(&r.0)) {
        for seed in 0..seeds {
            for (k, w) in calibration_workloads(seed)?.into_iter().enumerate() {
                jobs.push((rpu, seed * 1000 + k as u64, w));
            }
        }
    }
    let samples: Vec<(u32, Vec<(usize, f64)>)> = jobs
        .into_par_iter()
        .map(|(rpu, s, w)| {
            let c = EmulatorConfig { seed: cfg.seed ^ s.wrapping_mul(0x9E37_79B9), ..cfg.clone() };
            let t = emulate(&w, &[rpu], &mut RoundRobin::default(), &mut StaticScaler, &c)?;
            Ok((rpu, slowdowns(&w, &t, rpu)))
        })
        .collect::<Result<_>>()?;
    let mut bins = Vec::new();
    for &(rpu, real) in REAL_MEDIANS.iter().filter(|r| sizes.contains(&r.0)) {
        for (b, &(lo, hi)) in BINS.iter().enumerate() {
            let xs: Vec<f64> = samples.iter().filter(|s| s.0 == rpu).flat_map(|s| s.1.iter()).filter(|(n, _)| (lo..=hi).contains(n)).map(|p| p.1).collect();
            let em = median(&xs);
            let checked = lo >= 1 && hi <= 15;
            let within = match (em, real[b]) {
                (Some(e), Some(r)) => e / r <= MEDIAN_TOLERANCE && r / e <= MEDIAN_TOLERANCE,
                _ => !checked,
            };
            bins.push(BinRow { rpu, lo, hi, n: xs.len(), emulated_median: em, real_median: real[b], checked, within });
        }
    }
    Ok(bins)
}

/// Re-run every measured query at `rpu` alone, as often as it was measured, `replications` times.
/// Returns the emulated runtimes grouped like the measurements (one group per entry and replication).
fn isolated_runs(cfg: &EmulatorConfig, rpu: u32, replications: usize) -> Result<Vec<Vec<f64>>> {
    let cat = catalog::tpcds();
    let reps = replications.max(1);
    let mut texts: Vec<QueryText> = Vec::new();
    let mut group_sizes = Vec::new();
    for (t, _, runs) in cat.measured().filter(|m| m.1 == rpu) {
        for _ in 0..reps {
            texts.extend(std::iter::repeat_n(t, runs.len()));
            group_sizes.push(runs.len());
        }
    }
    let spacing = 10.0 * cat.measured().flat_map(|m| m.2.iter().copied()).fold(0.0, f64::max);
    let queries: Vec<Query> = texts
        .iter()
        .enumerate()
        .map(|(i, &text)| Query { id: i as u64, arrival: i as f64 * spacing, text, tenant: 0, class: 0, slo: 1.0 })
        .collect();
    let w = Workload::new(queries, vec![DEFAULT_TENANT.into()], vec!["adhoc".into()])?;
    let c = EmulatorConfig { timeout_s: None, seed: cfg.seed ^ (rpu as u64) << 20, ..cfg.clone() };
    let t = emulate(&w, &[rpu], &mut RoundRobin::default(), &mut StaticScaler, &c)?;
    let mut latencies = t.rows.iter().map(|r| r.latency);
    Ok(group_sizes.iter().map(|&n| latencies.by_ref().take(n).collect()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_counts_by_brute_force() {
        let a = [0.0, 1.0, 2.0, 10.0, 10.5];
        let e = [3.0, 1.5, 4.0, 11.0, 12.0];
        let brute: Vec<usize> = (0..5).map(|i| (0..5).filter(|&j| j != i && a[j] < e[i] && e[j] > a[i]).count()).collect();
        assert_eq!(overlap_counts(&a, &e), brute);
    }

    #[test]
    fn default_emulator_is_calibrated_to_the_real_measurements() {
        let r = calibrate(&EmulatorConfig::default(), 3, 5).unwrap();
        for b in &r.bins {
            println!("{:>2} RPU {:>2}-{:<2} n={:<5} emulated {:>6.2?} real {:>6.2?}", b.rpu, b.lo, b.hi, b.n, b.emulated_median, b.real_median);
        }
        for i in &r.isolated {
            println!("{i:?}");
        }
        for b in &r.bins {
            assert!(!b.checked || b.within, "{b:?}");
        }
        for i in &r.isolated {
            assert!(i.within, "{i:?}");
        }
        for n in &r.noise {
            println!("{n:?}");
            // Noise comes from the measured ratios: its spread is the real one, up to sampling.
            if n.real_entries >= 50 {
                assert!((n.emulated_log_std[0] / n.real_log_std[0] - 1.0).abs() < 0.5, "{n:?}");
            }
        }
        assert!(r.passed());
    }
}
