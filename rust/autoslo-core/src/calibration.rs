//! The emulator held against the real Redshift Serverless measurements, and the automated fit of
//! its interference parameters.
//!
//! **Reference.** Every real figure is computed here from the bundled copy of
//! `concurrent_latencies.csv` and the isolated-runtime catalog ([`real_reference`]), with the
//! rule of `shared/data/redshift/derive_facts.py`: slowdown = latency ÷ the mean measured isolated
//! runtime of the same (template, instance) at the same RPU, on uncensored rows whose isolated
//! runtime was measured, binned by overlapping queries. The CSV also holds the reference
//! predictor's sampled *partial-neighbour-set* observations (query ids `query_N__censor_K`: an
//! execution cut at a later arrival, a lower bound by construction). They are censored but are not
//! timeouts, and their overlap counts are truncated, so the timed-out fraction and the share of
//! queries with ≥ 64 overlaps are computed over the real executions only (every row that is not
//! partial); a censored execution is a one-hour timeout.
//!
//! **Check** ([`calibrate`], `autoslo calibrate --seed S`). The workloads behind the real data
//! (BaseWorkload at λ ∈ {0.05, 0.1, 0.2, 0.5, 1.0} and the four phased variants of §8.3.2, one-hour
//! timeout) run on one cluster of 4, 8, 16 and 32 RPU, over `seeds` seeds of stream `S` (workload
//! seed `derive_seed(S, k)`, k = 0..seeds). Goals:
//! - every overlap bin from 1 to 64+ at 8, 16 and 32 RPU with ≥ [`MIN_ROWS`] real rows: emulated
//!   median within ×[`MEDIAN_TOLERANCE`] of the real one (weaker bins are reported beside them);
//! - timed-out fraction per RPU within ±[`TIMEOUT_TOLERANCE`]; share of queries with ≥ 64
//!   overlaps within ±[`SHARE64_TOLERANCE`];
//! - isolated means within [`ISOLATED_TOLERANCE`] (every measured (template, instance, RPU)
//!   re-run alone as often as measured × `isolated_replications`);
//! - the median std of log runtime over repeated isolated runs within ×[`NOISE_TOLERANCE`] of the
//!   real one at 8, 16 and 32 RPU.
//!
//! **Fit** ([`fit`], `autoslo calibrate --fit`). Per size, the eight interference parameters are
//! searched (seeded random search, then coordinate descent) to minimise a loss over the same
//! figures ([`fit_loss`]), on the fit seed stream [`FIT_SEED`] (k = 0..fit seeds), which the check refuses.
//!
//! **Assumed run mix.** The real rows are a sample (the reference predictor's test split) of 59
//! runs, 14–15 per RPU, of about 130, 195 and 297 queries. The runs' workloads are not recorded;
//! we assume the nine workloads of §8.3.2, one run each per size, with equal weight.

use std::sync::OnceLock;

use rayon::prelude::*;

use crate::catalog::{self, QueryText};
use crate::control::{RoundRobin, StaticScaler};
use crate::emulator::{emulate, EmulatorConfig, InterferenceModel, InterferenceParams, NUM_PARAMS};
use crate::error::{AutoSloError, Result};
use crate::rng::{derive_seed, Rng};
use crate::slo::SloTable;
use crate::stats::median;
use crate::trace::Trace;
use crate::workload::{base_workload, phased_workload, Query, Workload, DEFAULT_TENANT};

const CONCURRENT_CSV: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/autoslo/data/concurrent_latencies.csv"));

/// Overlap bins (inclusive; `usize::MAX` = open) of the real-data table.
pub const BINS: [(usize, usize); 8] = [(0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63), (64, usize::MAX)];
/// The sizes the real data covers.
pub const SIZES: [u32; 4] = [4, 8, 16, 32];
/// The sizes whose slowdown bins and noise are checked (4 RPU has 8 slowdown rows in all).
pub const CHECKED_SIZES: [u32; 3] = [8, 16, 32];
/// Real rows a bin needs to be held to the tolerance.
pub const MIN_ROWS: usize = 30;
/// Allowed factor between emulated and real medians in the checked bins.
pub const MEDIAN_TOLERANCE: f64 = 1.5;
/// Allowed relative error of per-RPU isolated means.
pub const ISOLATED_TOLERANCE: f64 = 0.05;
/// Fewest emulated isolated runs per size (replications are raised to reach it).
pub const MIN_ISOLATED_DRAWS: usize = 3000;
/// Allowed difference of the timed-out fraction (absolute, 0.05 = 5 points).
pub const TIMEOUT_TOLERANCE: f64 = 0.05;
/// Allowed difference of the share of queries with ≥ 64 overlaps (absolute).
pub const SHARE64_TOLERANCE: f64 = 0.10;
/// Allowed factor between the emulated and real median std of log runtime.
pub const NOISE_TOLERANCE: f64 = 1.3;
/// The seed stream of the fit; `calibrate` refuses it so fit and check seeds stay disjoint.
pub const FIT_SEED: u64 = 0xF17_5EED;
/// The timeout of the real runs (s).
pub const TIMEOUT_S: f64 = 3600.0;

/// Label of an overlap bin ("0", "2-3", "64+").
pub fn bin_label(lo: usize, hi: usize) -> String {
    if hi == usize::MAX {
        format!("{lo}+")
    } else if lo == hi {
        format!("{lo}")
    } else {
        format!("{lo}-{hi}")
    }
}

fn bin_of(n: usize) -> usize {
    BINS.iter().position(|&(lo, hi)| n >= lo && n <= hi).expect("bins cover every count")
}

/// One real observation (a row of the bundled `concurrent_latencies.csv`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RealRow {
    pub rpu: u32,
    pub text: QueryText,
    pub overlaps: usize,
    pub latency: f64,
    pub censored: bool,
    /// A sampled partial-neighbour-set observation, not an execution.
    pub partial: bool,
}

/// Real figures of one size.
#[derive(Debug, Clone, PartialEq)]
pub struct RealSize {
    pub rpu: u32,
    /// All rows, partial-neighbour-set observations included.
    pub rows: usize,
    /// Real executions (rows that are not partial).
    pub executions: usize,
    pub timed_out: f64,
    pub share64: f64,
    /// Median slowdown and row count per bin of [`BINS`].
    pub bins: Vec<(Option<f64>, usize)>,
}

/// Every real figure the calibration compares with, computed from the bundled CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct RealReference {
    pub rows: Vec<RealRow>,
    pub sizes: Vec<RealSize>,
}

impl RealReference {
    pub fn size(&self, rpu: u32) -> Option<&RealSize> {
        self.sizes.iter().find(|s| s.rpu == rpu)
    }
}

fn parse_real(text: &str) -> Result<Vec<RealRow>> {
    let parse_err = |line: usize, problem: String| AutoSloError::Parse { source_name: "bundled concurrent_latencies.csv".into(), line, problem };
    let mut lines = text.lines().enumerate();
    const HEADER: &str = "rpu,template,instance,overlaps,latency_s,censored,partial";
    if lines.next().map(|l| l.1.trim()) != Some(HEADER) {
        return Err(parse_err(1, format!("expected header {HEADER}")));
    }
    let mut rows = Vec::new();
    for (n, line) in lines.filter(|l| !l.1.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 7 {
            return Err(parse_err(n + 1, format!("expected 7 fields, got {}", f.len())));
        }
        let int = |i: usize| f[i].trim().parse::<u64>().map_err(|e| parse_err(n + 1, format!("field {}: {e}", i + 1)));
        let latency = f[4].trim().parse::<f64>().map_err(|e| parse_err(n + 1, format!("field 5: {e}")))?;
        rows.push(RealRow {
            rpu: int(0)? as u32,
            text: QueryText { template: int(1)? as u16, instance: int(2)? as u16 },
            overlaps: int(3)? as usize,
            latency,
            censored: int(5)? == 1,
            partial: int(6)? == 1,
        });
    }
    Ok(rows)
}

/// The real reference (parsed and derived once).
pub fn real_reference() -> &'static RealReference {
    static REF: OnceLock<RealReference> = OnceLock::new();
    REF.get_or_init(|| {
        let rows = parse_real(CONCURRENT_CSV).expect("bundled concurrent latencies parse");
        let cat = catalog::tpcds();
        let sizes = SIZES
            .iter()
            .map(|&rpu| {
                let of: Vec<&RealRow> = rows.iter().filter(|r| r.rpu == rpu).collect();
                let exec: Vec<&&RealRow> = of.iter().filter(|r| !r.partial).collect();
                let mut per_bin: Vec<Vec<f64>> = vec![Vec::new(); BINS.len()];
                for r in of.iter().filter(|r| !r.censored) {
                    if let Some(mean) = cat.measured_mean(r.text, rpu) {
                        per_bin[bin_of(r.overlaps)].push(r.latency / mean);
                    }
                }
                let frac = |f: &dyn Fn(&RealRow) -> bool| exec.iter().filter(|r| f(r)).count() as f64 / exec.len().max(1) as f64;
                RealSize {
                    rpu,
                    rows: of.len(),
                    executions: exec.len(),
                    timed_out: frac(&|r| r.censored),
                    share64: frac(&|r| r.overlaps >= 64),
                    bins: per_bin.iter().map(|v| (median(v), v.len())).collect(),
                }
            })
            .collect();
        RealReference { rows, sizes }
    })
}

/// One (RPU, overlap bin) comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct BinRow {
    pub rpu: u32,
    pub lo: usize,
    /// Upper end, inclusive (`usize::MAX`: open).
    pub hi: usize,
    /// Emulated queries in the bin.
    pub n: usize,
    pub emulated_median: Option<f64>,
    pub real_median: Option<f64>,
    /// Real rows behind the real median.
    pub real_rows: usize,
    /// Whether the bin is held to the tolerance (≥ 1 overlap, ≥ MIN_ROWS real rows, checked size).
    pub checked: bool,
    /// Within tolerance (false when a checked bin has no emulated queries).
    pub within: bool,
}

/// Timed-out fraction and share of ≥ 64 overlaps of one size, emulated beside real.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadRow {
    pub rpu: u32,
    /// Emulated queries / real executions.
    pub queries: usize,
    pub real_executions: usize,
    pub emulated_timed_out: f64,
    pub real_timed_out: f64,
    pub timed_out_within: bool,
    pub emulated_share64: f64,
    pub real_share64: f64,
    pub share64_within: bool,
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
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseRow {
    pub rpu: u32,
    /// Entries with ≥ 2 runs (real) and emulated groups compared.
    pub real_entries: usize,
    pub emulated_groups: usize,
    pub real_log_std: [f64; 2],
    pub emulated_log_std: [f64; 2],
    /// Whether the median is held to ×NOISE_TOLERANCE (8, 16 and 32 RPU).
    pub checked: bool,
    pub within: bool,
}

/// The calibration report.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationReport {
    /// The check seed stream and the number of seeds pooled.
    pub seed: u64,
    pub seeds: u64,
    pub bins: Vec<BinRow>,
    pub load: Vec<LoadRow>,
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
    /// Whether every checked figure is within tolerance.
    pub fn passed(&self) -> bool {
        self.bins.iter().all(|b| !b.checked || b.within)
            && self.load.iter().all(|r| r.timed_out_within && r.share64_within)
            && self.isolated.iter().all(|r| r.within)
            && self.noise.iter().all(|r| !r.checked || r.within)
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

/// The light runs of the first batch: (λ, queries issued), see [`calibration_workloads`].
pub const LIGHT_RUNS: [(f64, usize); 8] = [(0.05, 130), (0.1, 130), (0.05, 195), (0.1, 195), (0.05, 195), (0.1, 195), (0.05, 297), (0.1, 297)];

/// The calibration workloads of one workload seed: the 15 runs per size behind the real data, as
/// inferred from it (see the module docs): BaseWorkload at λ ∈ {0.2, 0.5, 1.0} and the four
/// phased variants of §8.3.2 (297 queries each), and eight light runs at λ ∈ {0.05, 0.1} cut to
/// 130, 195, 195 and 297 queries ([`LIGHT_RUNS`]).
pub fn calibration_workloads(seed: u64) -> Result<Vec<Workload>> {
    let slo = SloTable::paper(2.0)?;
    let mut out = Vec::new();
    for (i, rate) in [0.2, 0.5, 1.0].into_iter().enumerate() {
        out.push(base_workload(rate, derive_seed(seed, i as u64), &slo)?);
    }
    for (i, (x, high)) in [(40, 0.2), (40, 0.5), (15, 0.2), (15, 0.5)].into_iter().enumerate() {
        out.push(phased_workload(x, 0.05, high, derive_seed(seed, 50 + i as u64), &slo)?);
    }
    for (i, (rate, n)) in LIGHT_RUNS.into_iter().enumerate() {
        let w = base_workload(rate, derive_seed(seed, 100 + i as u64), &slo)?;
        out.push(Workload::new(w.queries()[..n].to_vec(), w.tenants().to_vec(), w.classes().to_vec())?);
    }
    Ok(out)
}

/// What one emulated calibration run contributes: (overlaps, latency ÷ measured isolated mean) of
/// its uncensored measured queries, and per query (overlaps, timed out).
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    pub slowdowns: Vec<(usize, f64)>,
    pub queries: Vec<(usize, bool)>,
}

/// The figures of one emulated trace on one cluster of `rpu`.
pub fn run_stats(w: &Workload, t: &Trace, rpu: u32) -> RunStats {
    let arrivals: Vec<f64> = t.rows.iter().map(|r| r.arrival).collect();
    let ends: Vec<f64> = t.rows.iter().map(|r| r.end).collect();
    let overlaps = overlap_counts(&arrivals, &ends);
    let cat = catalog::tpcds();
    let mut s = RunStats::default();
    for (r, n) in t.rows.iter().zip(overlaps) {
        s.queries.push((n, r.censored()));
        if r.censored() {
            continue;
        }
        if let Some(mean) = cat.measured_mean(w.queries()[r.query].text, rpu) {
            s.slowdowns.push((n, r.latency / mean));
        }
    }
    s
}

/// Emulate the calibration workloads of every seed of `seeds` on one cluster of `rpu` with
/// `model` (one-hour timeout) and pool their figures. Parallel (rayon).
pub fn emulate_size(cfg: &EmulatorConfig, model: &InterferenceModel, rpu: u32, seeds: &[u64]) -> Result<RunStats> {
    let mut jobs = Vec::new();
    for &seed in seeds {
        for (k, w) in calibration_workloads(seed)?.into_iter().enumerate() {
            jobs.push((derive_seed(seed, 1000 + k as u64), w));
        }
    }
    let parts: Vec<RunStats> = jobs
        .into_par_iter()
        .map(|(s, w)| {
            let c = EmulatorConfig { seed: s, timeout_s: Some(TIMEOUT_S), interference: model.clone(), ..cfg.clone() };
            let t = emulate(&w, &[rpu], &mut RoundRobin::default(), &mut StaticScaler, &c)?;
            Ok(run_stats(&w, &t, rpu))
        })
        .collect::<Result<_>>()?;
    let mut all = RunStats::default();
    for p in parts {
        all.slowdowns.extend(p.slowdowns);
        all.queries.extend(p.queries);
    }
    Ok(all)
}

/// Bins and load rows of one size from pooled emulated figures.
fn compare_size(rpu: u32, s: &RunStats) -> (Vec<BinRow>, LoadRow) {
    let real = real_reference().size(rpu).expect("a real size");
    let mut per_bin: Vec<Vec<f64>> = vec![Vec::new(); BINS.len()];
    for &(n, x) in &s.slowdowns {
        per_bin[bin_of(n)].push(x);
    }
    let bins = BINS
        .iter()
        .enumerate()
        .map(|(b, &(lo, hi))| {
            let em = median(&per_bin[b]);
            let (rm, rows) = real.bins[b];
            let checked = lo >= 1 && rows >= MIN_ROWS && CHECKED_SIZES.contains(&rpu);
            let within = match (em, rm) {
                (Some(e), Some(r)) => e / r <= MEDIAN_TOLERANCE && r / e <= MEDIAN_TOLERANCE,
                _ => !checked,
            };
            BinRow { rpu, lo, hi, n: per_bin[b].len(), emulated_median: em, real_median: rm, real_rows: rows, checked, within }
        })
        .collect();
    let q = s.queries.len().max(1) as f64;
    let timed_out = s.queries.iter().filter(|x| x.1).count() as f64 / q;
    let share64 = s.queries.iter().filter(|x| x.0 >= 64).count() as f64 / q;
    let load = LoadRow {
        rpu,
        queries: s.queries.len(),
        real_executions: real.executions,
        emulated_timed_out: timed_out,
        real_timed_out: real.timed_out,
        timed_out_within: (timed_out - real.timed_out).abs() <= TIMEOUT_TOLERANCE,
        emulated_share64: share64,
        real_share64: real.share64,
        share64_within: (share64 - real.share64).abs() <= SHARE64_TOLERANCE,
    };
    (bins, load)
}

/// The check seeds of stream `seed`: `derive_seed(seed, k)` for k < `seeds`.
pub fn check_seeds(seed: u64, seeds: u64) -> Result<Vec<u64>> {
    if seed == FIT_SEED {
        return Err(AutoSloError::InvalidConfig(format!("seed {FIT_SEED} is the fit's seed stream; check on another seed")));
    }
    if seeds == 0 {
        return Err(AutoSloError::out_of_range("calibration seeds", "≥ 1", 0));
    }
    Ok((0..seeds).map(|k| derive_seed(seed, k)).collect())
}

/// Run every calibration check on `seeds` seeds of stream `seed` with `isolated_replications`
/// repetitions of the measured isolated runs. Parallel (rayon).
pub fn calibrate(cfg: &EmulatorConfig, seed: u64, seeds: u64, isolated_replications: usize) -> Result<CalibrationReport> {
    let seed_list = check_seeds(seed, seeds)?;
    let cfg = EmulatorConfig { seed: derive_seed(seed, u64::MAX), ..cfg.clone() };
    let mut bins = Vec::new();
    let mut load = Vec::new();
    for rpu in SIZES {
        let s = emulate_size(&cfg, &cfg.interference, rpu, &seed_list)?;
        let (b, l) = compare_size(rpu, &s);
        bins.extend(b);
        load.push(l);
    }
    let (isolated, noise) = isolation(&cfg, isolated_replications)?;
    Ok(CalibrationReport { seed, seeds, bins, load, isolated, noise })
}

/// The isolation and noise checks.
fn isolation(cfg: &EmulatorConfig, isolated_replications: usize) -> Result<(Vec<IsolatedRow>, Vec<NoiseRow>)> {
    let summary = isolated_summary();
    let per_size = summary
        .par_iter()
        .map(|&(rpu, real_mean)| isolated_runs(cfg, rpu, isolated_replications).map(|r| (rpu, real_mean, r)))
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
        let (r50, e50) = (q(&real, 0.5), q(&emul, 0.5));
        let checked = CHECKED_SIZES.contains(&rpu);
        noise.push(NoiseRow {
            rpu,
            real_entries: real.len(),
            emulated_groups: emul.len(),
            real_log_std: [r50, q(&real, 0.9)],
            emulated_log_std: [e50, q(&emul, 0.9)],
            checked,
            within: e50 / r50 <= NOISE_TOLERANCE && r50 / e50 <= NOISE_TOLERANCE,
        });
    }
    Ok((isolated, noise))
}

/// Measured per-RPU mean isolated runtime over every run (what `isolated_runtimes_summary.yml`
/// lists), from the catalog's measurements.
pub fn isolated_summary() -> Vec<(u32, f64)> {
    let cat = catalog::tpcds();
    SIZES
        .iter()
        .map(|&rpu| {
            let runs: Vec<f64> = cat.measured().filter(|m| m.1 == rpu).flat_map(|m| m.2.iter().copied()).collect();
            (rpu, runs.iter().sum::<f64>() / runs.len().max(1) as f64)
        })
        .collect()
}

/// Re-run every measured query at `rpu` alone, as often as it was measured, `replications` times
/// (at least [`MIN_ISOLATED_DRAWS`] runs in all).
/// Returns the emulated runtimes grouped like the measurements (one group per entry and replication).
fn isolated_runs(cfg: &EmulatorConfig, rpu: u32, replications: usize) -> Result<Vec<Vec<f64>>> {
    let cat = catalog::tpcds();
    // Enough draws for the mean of a heavy-tailed noise to settle (4 RPU has 6 measured runs).
    let measured_runs: usize = cat.measured().filter(|m| m.1 == rpu).map(|m| m.2.len()).sum();
    let reps = replications.max(1).max(MIN_ISOLATED_DRAWS.div_ceil(measured_runs.max(1)));
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

// ---------------------------------------------------------------------------------------------
// The fit.

/// Settings of [`fit`].
#[derive(Debug, Clone, PartialEq)]
pub struct FitOptions {
    /// Seeds of the fit stream pooled per evaluation.
    pub seeds: u64,
    /// Random candidates per size before coordinate descent.
    pub random_candidates: usize,
    /// Loss evaluations per size in all (random + descent).
    pub budget: usize,
    /// Seed of the search itself.
    pub search_seed: u64,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions { seeds: 30, random_candidates: 500, budget: 2000, search_seed: 1 }
    }
}

/// What the fit found for one size.
#[derive(Debug, Clone, PartialEq)]
pub struct FitSize {
    pub rpu: u32,
    pub params: InterferenceParams,
    pub loss: f64,
    pub evaluations: usize,
}

/// The fit's result: the model and per-size losses.
#[derive(Debug, Clone, PartialEq)]
pub struct FitResult {
    pub model: InterferenceModel,
    pub sizes: Vec<FitSize>,
    pub options: FitOptions,
}

/// The search space, in transformed coordinates: (lo, hi) of
/// [ln solo_share, ln memory_scale, memory_exponent, ln(1 + spill_penalty), ln admit_memory,
/// ln concurrency_limit, ln burst_at, ln burst_factor].
/// The concurrency limit stays within 8–100 (Redshift Serverless runs tens of queries at once).
/// Burst starts at 4–400 queries present and speeds up by at most 8×.
const SPACE: [(f64, f64); NUM_PARAMS] = [(-3.0, 0.0), (-9.2, 1.6), (0.0, 3.0), (0.0, 3.0), (-0.7, 3.0), (2.08, 4.6), (1.39, 6.0), (0.0, 2.08)];
/// Descents from this many of the best starting points.
const RESTARTS: usize = 3;

fn to_x(p: &InterferenceParams) -> [f64; NUM_PARAMS] {
    let v = p.to_vec();
    let x = [v[0].ln(), v[1].ln(), v[2], v[3].ln_1p(), v[4].ln(), v[5].ln(), v[6].ln(), v[7].ln()];
    std::array::from_fn(|k| x[k].clamp(SPACE[k].0, SPACE[k].1))
}

fn from_x(x: &[f64; NUM_PARAMS]) -> InterferenceParams {
    let c: [f64; NUM_PARAMS] = std::array::from_fn(|k| x[k].clamp(SPACE[k].0, SPACE[k].1));
    InterferenceParams::from_vec([c[0].exp(), c[1].exp(), c[2], c[3].exp_m1(), c[4].exp(), c[5].exp(), c[6].exp(), c[7].exp()])
}

/// The margin the fit aims for: a checked bin's emulated median within ×1.35 of the real one on
/// the fit seeds, so that it stays within ×[`MEDIAN_TOLERANCE`] on seeds the fit never saw (a
/// bin's median pooled over 10 seeds moves by ±5–10 % from one seed stream to another).
pub const FIT_MEDIAN_MARGIN: f64 = 1.35;
/// The fraction of the timed-out and ≥ 64 tolerances the fit aims for, for the same reason.
pub const FIT_LOAD_MARGIN: f64 = 0.8;

/// The fit's loss for one size from pooled emulated figures:
/// - per bin with ≥ 8 real rows, its squared log ratio weighted by its real rows (capped at 90),
///   ×3 when the bin is checked (≥ [`MIN_ROWS`] rows) and ×0.1 when it is not;
/// - per checked bin, a steep penalty (1,500 × squared excess) beyond ×[`FIT_MEDIAN_MARGIN`];
/// - the timed-out fraction and the ≥ 64 share, standardised by their tolerances (`z`):
///   `2 z²`, plus 100 × the squared excess of `|z|` beyond [`FIT_LOAD_MARGIN`];
/// - a large penalty for a bin the emulator leaves empty.
///
/// The steep terms make the fit look for parameters that pass on every seed stream first and fit
/// closely second; a loss that only weighs squared log ratios settles where one bin sits on the
/// bound on the fit seeds and beyond it elsewhere.
pub fn fit_loss(rpu: u32, s: &RunStats) -> f64 {
    let (bins, load) = compare_size(rpu, s);
    let mut loss = 0.0;
    for b in bins.iter().filter(|b| b.lo >= 1 && b.real_rows >= 8) {
        let checked = b.real_rows >= MIN_ROWS;
        let w = (b.real_rows.min(90) as f64 / MIN_ROWS as f64) * if checked { 3.0 } else { 0.1 };
        match (b.emulated_median, b.real_median) {
            (Some(e), Some(r)) => {
                let l = (e / r).ln();
                loss += w * l * l;
                if checked {
                    loss += 1500.0 * (l.abs() - FIT_MEDIAN_MARGIN.ln()).max(0.0).powi(2);
                }
            }
            _ => loss += w * 4.0,
        }
    }
    let t = (load.emulated_timed_out - load.real_timed_out) / TIMEOUT_TOLERANCE;
    let s64 = (load.emulated_share64 - load.real_share64) / SHARE64_TOLERANCE;
    let excess = |z: f64| (z.abs() - FIT_LOAD_MARGIN).max(0.0).powi(2);
    loss + 2.0 * t * t + 2.0 * s64 * s64 + 100.0 * (excess(t) + excess(s64))
}

/// Fit the interference parameters of every size in [`SIZES`] on the fit seed stream, starting
/// from `start` (default: the centre of the search space, so the fit is reproducible from
/// nothing but its options). `progress(evaluations done, total)` may return `false` to interrupt.
pub fn fit(cfg: &EmulatorConfig, start: Option<&InterferenceModel>, opts: &FitOptions, progress: &mut dyn FnMut(usize, usize) -> bool) -> Result<FitResult> {
    if opts.seeds == 0 || opts.budget == 0 {
        return Err(AutoSloError::InvalidConfig("fit needs at least one seed and one evaluation".into()));
    }
    let seeds: Vec<u64> = (0..opts.seeds).map(|k| derive_seed(FIT_SEED, k)).collect();
    let cfg = EmulatorConfig { seed: derive_seed(FIT_SEED, u64::MAX), ..cfg.clone() };
    let total = opts.budget * SIZES.len();
    let mut done = 0usize;
    let mut points = Vec::new();
    let mut sizes = Vec::new();
    for rpu in SIZES {
        let mut rng = Rng::new(derive_seed(opts.search_seed, rpu as u64));
        let evals = std::cell::Cell::new(0usize);
        let mut eval = |x: &[f64; NUM_PARAMS], done: &mut usize| -> Result<f64> {
            let p = from_x(x);
            let model = InterferenceModel::new(vec![(rpu, p)])?;
            let s = emulate_size(&cfg, &model, rpu, &seeds)?;
            evals.set(evals.get() + 1);
            *done += 1;
            if !progress(*done, total) {
                return Err(AutoSloError::Interrupted);
            }
            Ok(fit_loss(rpu, &s))
        };
        // Starting points: the given model, the previous size's fit, and random candidates.
        let mut cands: Vec<(f64, [f64; NUM_PARAMS])> = Vec::new();
        let x0: [f64; NUM_PARAMS] = match start {
            Some(m) => to_x(&m.at(rpu)),
            None => std::array::from_fn(|k| 0.5 * (SPACE[k].0 + SPACE[k].1)),
        };
        cands.push((eval(&x0, &mut done)?, x0));
        if let Some(&(_, prev)) = points.last() {
            let x = to_x(&prev);
            cands.push((eval(&x, &mut done)?, x));
        }
        for _ in 0..opts.random_candidates.min(opts.budget.saturating_sub(cands.len())) {
            let x: [f64; NUM_PARAMS] = std::array::from_fn(|k| SPACE[k].0 + rng.uniform() * (SPACE[k].1 - SPACE[k].0));
            cands.push((eval(&x, &mut done)?, x));
        }
        cands.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Coordinate descent from the best RESTARTS starting points, then from perturbations of
        // the best point found (iterated local search) until the budget is spent.
        let (mut best, mut best_x) = cands[0];
        let mut starts: Vec<(f64, [f64; NUM_PARAMS])> = cands.iter().take(RESTARTS).rev().copied().collect();
        while evals.get() < opts.budget {
            let (mut l0, mut x0) = match starts.pop() {
                Some(s) => s,
                None => {
                    let x: [f64; NUM_PARAMS] = std::array::from_fn(|k| (best_x[k] + (rng.uniform() - 0.5) * (SPACE[k].1 - SPACE[k].0) / 4.0).clamp(SPACE[k].0, SPACE[k].1));
                    (eval(&x, &mut done)?, x)
                }
            };
            let mut step: [f64; NUM_PARAMS] = std::array::from_fn(|k| (SPACE[k].1 - SPACE[k].0) / 8.0);
            'descent: while evals.get() < opts.budget {
                let mut improved = false;
                for k in 0..NUM_PARAMS {
                    for dir in [1.0, -1.0] {
                        if evals.get() >= opts.budget {
                            break 'descent;
                        }
                        let mut x = x0;
                        x[k] = (x[k] + dir * step[k]).clamp(SPACE[k].0, SPACE[k].1);
                        if x[k] == x0[k] {
                            continue;
                        }
                        let l = eval(&x, &mut done)?;
                        if l < l0 {
                            (l0, x0) = (l, x);
                            improved = true;
                            break;
                        }
                    }
                }
                if !improved {
                    step.iter_mut().for_each(|s| *s *= 0.5);
                    if step.iter().zip(SPACE).all(|(s, r)| *s < (r.1 - r.0) / 128.0) {
                        break;
                    }
                }
            }
            if l0 < best {
                (best, best_x) = (l0, x0);
            }
        }
        let evals = evals.get();
        done += opts.budget - evals.min(opts.budget);
        let params = from_x(&best_x);
        points.push((rpu, params));
        sizes.push(FitSize { rpu, params, loss: best, evaluations: evals });
    }
    progress(total, total);
    Ok(FitResult { model: InterferenceModel::new(points)?, sizes, options: opts.clone() })
}

impl FitResult {
    /// The parameter file to ship (`python/autoslo/data/interference.csv`), naming the fit seeds.
    pub fn to_csv(&self) -> String {
        let o = &self.options;
        let mut comment = vec![
            "Interference parameters of the warehouse emulator, written by `autoslo calibrate --fit`.".to_string(),
            format!(
                "Fit seeds: stream {FIT_SEED} (derive_seed({FIT_SEED}, k), k = 0..{}); search seed {}; {} random candidates, {} evaluations per size.",
                o.seeds, o.search_seed, o.random_candidates, o.budget
            ),
            "Check seeds: `autoslo calibrate --seed S` pools derive_seed(S, k), k = 0..seeds; it refuses the fit stream.".to_string(),
        ];
        for s in &self.sizes {
            comment.push(format!("{} RPU: loss {:.3} after {} evaluations", s.rpu, s.loss, s.evaluations));
        }
        self.model.to_csv(&comment)
    }
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
    fn real_reference_matches_derive_facts() {
        // The figures `shared/data/redshift/derive_facts.py` prints, recomputed from the bundled CSV.
        let r = real_reference();
        assert_eq!(r.rows.len(), 3537);
        let s8 = r.size(8).unwrap();
        assert_eq!(s8.rows, 854);
        assert_eq!(s8.bins[7].1, 80);
        assert!((s8.bins[7].0.unwrap() - 280.86).abs() < 0.01, "{:?}", s8.bins[7]);
        assert_eq!(s8.bins[4].1, 24);
        assert!((s8.bins[4].0.unwrap() - 6.26).abs() < 0.01);
        let s16 = r.size(16).unwrap();
        assert_eq!((s16.bins[1].1, s16.bins[7].1), (77, 95));
        assert!((s16.bins[7].0.unwrap() - 201.11).abs() < 0.01);
        let s32 = r.size(32).unwrap();
        assert!((s32.bins[7].0.unwrap() - 73.00).abs() < 0.01);
        assert_eq!(s32.bins[5].1, 0);
        // Partial-neighbour-set rows are censored but are not executions.
        let (p4, p8, p16, p32) = (r.size(4).unwrap(), s8, s16, s32);
        assert_eq!([p4.executions, p8.executions, p16.executions, p32.executions], [707, 675, 759, 746]);
        assert!((p4.timed_out - 192.0 / 707.0).abs() < 1e-12);
        assert!((p8.timed_out - 15.0 / 675.0).abs() < 1e-12);
        assert_eq!((p16.timed_out, p32.timed_out), (0.0, 0.0));
        assert!(r.rows.iter().filter(|x| x.censored && !x.partial).all(|x| x.latency >= 3599.0), "every censored execution is a 1 h timeout");
        let summary = isolated_summary();
        for (rpu, want) in [(4, 21.436470945676167), (8, 7.304338711171062), (16, 4.69129893152041), (32, 2.706868862311958)] {
            let got = summary.iter().find(|s| s.0 == rpu).unwrap().1;
            assert!((got - want).abs() < 1e-9, "{rpu}: {got} vs {want}");
        }
    }

    #[test]
    fn fit_and_check_seeds_are_disjoint() {
        assert!(check_seeds(FIT_SEED, 10).is_err());
        assert!(check_seeds(3, 0).is_err());
        let fit: Vec<u64> = (0..64).map(|k| derive_seed(FIT_SEED, k)).collect();
        for s in 0..32 {
            for c in check_seeds(s, 10).unwrap() {
                assert!(!fit.contains(&c));
            }
        }
    }

    #[test]
    fn fit_lowers_the_loss_from_a_bad_start() {
        // A tiny fit (one seed, a few evaluations) from a deliberately bad start must improve on it.
        let bad = InterferenceParams::from_vec([1.0, 0.01, 0.0, 0.0, 20.0, 100.0, 400.0, 1.0]);
        let start = InterferenceModel::new(SIZES.iter().map(|&s| (s, bad)).collect()).unwrap();
        let opts = FitOptions { seeds: 1, random_candidates: 8, budget: 16, search_seed: 7 };
        let r = fit(&EmulatorConfig::default(), Some(&start), &opts, &mut |_, _| true).unwrap();
        let seeds = [derive_seed(FIT_SEED, 0)];
        let cfg = EmulatorConfig { seed: derive_seed(FIT_SEED, u64::MAX), ..Default::default() };
        for s in &r.sizes {
            let start_loss = fit_loss(s.rpu, &emulate_size(&cfg, &start, s.rpu, &seeds).unwrap());
            assert!(s.loss < 0.9 * start_loss, "{} RPU: {} not below {start_loss}", s.rpu, s.loss);
            assert_eq!(s.evaluations, 16);
        }
        let text = r.to_csv();
        assert!(text.contains(&FIT_SEED.to_string()));
        assert_eq!(InterferenceModel::from_csv(&text, "fit").unwrap().points().len(), 4);
        let mut calls = 0;
        let e = fit(&EmulatorConfig::default(), Some(&start), &opts, &mut |_, _| {
            calls += 1;
            calls < 3
        });
        assert!(matches!(e, Err(AutoSloError::Interrupted)));
    }
}
