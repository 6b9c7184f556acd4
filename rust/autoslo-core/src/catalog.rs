//! The TPC-DS isolated-runtime catalog: what each (template, instance) costs on a cluster of a
//! given size when it runs alone, as measured on Amazon Redshift Serverless (TPC-DS SF 1000).
//!
//! Measured entries come from `isolated_runtimes.csv` (bundled; derived from the paper authors'
//! `isolated_runtimes.yml`, MIT, see `LICENSE.source`). Where a (template, instance, RPU) was not
//! measured, a per-template size-scaling law fills it in:
//!
//! `ln r(t, i, s) = a(t, i) + b(t) · log2 s`
//!
//! `b(t)` is the within-template slope pooled over the template's instances measured at two or
//! more sizes, shrunk toward the fleet-wide pooled slope (a ridge prior worth one unit of log2-size
//! spread), so templates measured at a single size use the fleet law. `a(t, i)` is fitted on the
//! instance's measured sizes, or is the template mean when the instance was never measured.
//! A template never measured alone (TPC-DS query 67, which always ran long) gets the fleet slope
//! and a 16-RPU runtime of ρ × its closed-loop median latency from the SLO baseline run, where ρ
//! is the median ratio of isolated runtime to that baseline over the measured templates.
//! [`Catalog::fit_report`] gives the law's error on the measured points, in sample and
//! leave-one-size-out.

use std::collections::BTreeMap;
use std::sync::{OnceLock, RwLock};

use crate::error::{AutoSloError, Result};
use crate::stats::{quantile, q_error};

/// Number of TPC-DS query templates.
pub const NUM_TEMPLATES: u16 = 99;
/// Instances (parameter sets) per template in the measurements.
pub const NUM_INSTANCES: u16 = 3;

const ISOLATED_CSV: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/autoslo/data/isolated_runtimes.csv"));

/// Range the per-template slope is clamped to: doubling the size can at most quarter a runtime
/// (b = -2) and at most make it 1.4× slower (b = 0.5).
const SLOPE_RANGE: (f64, f64) = (-2.0, 0.5);
/// Bandwidth factor of the noise kernel (see [`Catalog::noise_ratios`]): the std of a few draws
/// is skewed low, so a kernel of exactly the missing variance leaves the median spread short.
const NOISE_BANDWIDTH: f64 = 1.25;
/// Weight of the fleet-wide slope as a prior on each template's slope (in units of Σ(x - x̄)²).
const SLOPE_PRIOR_WEIGHT: f64 = 1.0;

/// One (template, instance) pair: a query text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueryText {
    pub template: u16,
    pub instance: u16,
}

impl QueryText {
    /// This text, if it is one the TPC-DS catalog can name: a template from 1 to 99 and an
    /// instance ≥ 1 (an instance never measured runs as its template's mean).
    pub fn checked(self) -> Result<Self> {
        if !(1..=NUM_TEMPLATES).contains(&self.template) {
            return Err(AutoSloError::UnknownTemplate { template: i64::from(self.template) });
        }
        if self.instance == 0 {
            return Err(AutoSloError::out_of_range("a query's instance", "from 1 to 65535", 0));
        }
        Ok(self)
    }
}

/// The fitted size-scaling law of one template.
#[derive(Debug, Clone)]
struct TemplateLaw {
    slope: f64,
    /// Whether `slope` was fitted on this template's own sizes (false: fleet-wide law).
    own_slope: bool,
    /// Whether the template was never measured alone (its level comes from the SLO baseline run).
    from_baseline: bool,
    intercepts: BTreeMap<u16, f64>,
    mean_intercept: f64,
}

/// Error of the scaling law on the measured points.
#[derive(Debug, Clone, PartialEq)]
pub struct FitReport {
    /// Measured (template, instance, RPU) points.
    pub points: usize,
    /// Q-error of the law against the measured mean, in sample: p50, p90, max.
    pub in_sample_q: [f64; 3],
    /// Points that could be held out (their query was measured at another size too).
    pub holdout_points: usize,
    /// Q-error when the point's size is left out of the fit: p50, p90, max.
    pub holdout_q: [f64; 3],
    /// Fleet-wide slope (d ln runtime / d log2 size).
    pub fleet_slope: f64,
    /// Templates with their own fitted slope / using the fleet slope.
    pub templates_own_slope: usize,
    pub templates_fleet_slope: usize,
    /// Templates never measured alone, whose level comes from the SLO baseline run.
    pub templates_from_baseline: Vec<u16>,
}

/// One measured entry's run-to-run noise: (template, instance), run ÷ mean ratios, bandwidth.
type NoiseEntry = ((u16, u16), Vec<f64>, f64);

/// The isolated-runtime catalog with its scaling law and run-to-run noise pools.
#[derive(Debug, Clone)]
pub struct Catalog {
    runs: BTreeMap<(u16, u16, u32), Vec<f64>>,
    laws: BTreeMap<u16, TemplateLaw>,
    fleet_slope: f64,
    /// Run-to-run noise: for every entry with ≥ 2 runs, its runs divided by its mean (so each
    /// list averages exactly 1) and its kernel bandwidth (see [`Catalog::noise_ratios`]), per RPU,
    /// in (template, instance) order.
    noise: BTreeMap<u32, Vec<NoiseEntry>>,
    /// [`Catalog::mean_runtime_at`] per size asked so far.
    mean_at: MeanMemo,
}

/// A memo of (size, mean runtime): the mean averages every text, and the emulator asks for it per
/// cluster started, Snowflake economy per routed query.
#[derive(Debug, Default)]
struct MeanMemo(RwLock<Vec<(u32, f64)>>);

impl MeanMemo {
    fn get(&self, rpu: u32) -> Option<f64> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).iter().find(|e| e.0 == rpu).map(|e| e.1)
    }
    fn put(&self, rpu: u32, mean: f64) {
        let mut v = self.0.write().unwrap_or_else(|e| e.into_inner());
        if !v.iter().any(|e| e.0 == rpu) {
            v.push((rpu, mean));
        }
    }
}

impl Clone for MeanMemo {
    fn clone(&self) -> Self {
        Self(RwLock::new(self.0.read().unwrap_or_else(|e| e.into_inner()).clone()))
    }
}

/// The bundled TPC-DS catalog (parsed once).
pub fn tpcds() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| Catalog::from_csv(ISOLATED_CSV, "bundled isolated_runtimes.csv").expect("bundled catalog parses"))
}

impl Catalog {
    /// Parse a catalog from CSV text with header `rpu,template,instance,run,runtime_s`.
    pub fn from_csv(text: &str, source_name: &str) -> Result<Self> {
        let parse_err = |line: usize, problem: String| AutoSloError::Parse { source_name: source_name.into(), line, problem };
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, h)) if h.trim() == "rpu,template,instance,run,runtime_s" => {}
            _ => return Err(parse_err(1, "expected header rpu,template,instance,run,runtime_s".into())),
        }
        let mut runs: BTreeMap<(u16, u16, u32), Vec<f64>> = BTreeMap::new();
        for (n, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != 5 {
                return Err(parse_err(n + 1, format!("expected 5 fields, got {}", f.len())));
            }
            let num = |i: usize| f[i].trim().parse::<f64>().map_err(|e| parse_err(n + 1, format!("field {}: {e}", i + 1)));
            let (rpu, t, i, rt) = (num(0)?, num(1)?, num(2)?, num(4)?);
            if !(rpu >= 1.0 && (1.0..=NUM_TEMPLATES as f64).contains(&t) && i >= 1.0 && rt > 0.0 && rt.is_finite()) {
                return Err(parse_err(n + 1, "rpu, template, instance and runtime must be positive (template ≤ 99)".into()));
            }
            runs.entry((t as u16, i as u16, rpu as u32)).or_default().push(rt);
        }
        if runs.is_empty() {
            return Err(parse_err(1, "no measurements".into()));
        }
        let (mut laws, fleet_slope) = fit_laws(&runs, None);
        add_baseline_laws(&mut laws, fleet_slope);
        let mut noise: BTreeMap<u32, Vec<NoiseEntry>> = BTreeMap::new();
        for (&(t, i, rpu), rs) in &runs {
            if rs.len() >= 2 {
                let n = rs.len() as f64;
                let mean = rs.iter().sum::<f64>() / n;
                let lm = rs.iter().map(|r| r.ln()).sum::<f64>() / n;
                let log_sd = (rs.iter().map(|r| (r.ln() - lm).powi(2)).sum::<f64>() / n).sqrt();
                noise.entry(rpu).or_default().push(((t, i), rs.iter().map(|r| r / mean).collect(), NOISE_BANDWIDTH * log_sd / (n - 1.0).sqrt()));
            }
        }
        Ok(Catalog { runs, laws, fleet_slope, noise, mean_at: MeanMemo::default() })
    }

    /// Measured runs of a query text at a size (empty if not measured).
    pub fn measured_runs(&self, text: QueryText, rpu: u32) -> &[f64] {
        self.runs.get(&(text.template, text.instance, rpu)).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Mean of the measured runs of a query text at a size (`None` if not measured).
    pub fn measured_mean(&self, text: QueryText, rpu: u32) -> Option<f64> {
        self.runs.get(&(text.template, text.instance, rpu)).map(|rs| rs.iter().sum::<f64>() / rs.len() as f64)
    }

    /// Every measured (query text, RPU) with its runs.
    pub fn measured(&self) -> impl Iterator<Item = (QueryText, u32, &[f64])> {
        self.runs.iter().map(|(&(template, instance, rpu), r)| (QueryText { template, instance }, rpu, r.as_slice()))
    }

    /// Whether the template is known (1..=99 and measured at some size).
    pub fn knows_template(&self, template: u16) -> bool {
        self.laws.contains_key(&template)
    }

    /// Templates present in the catalog.
    pub fn templates(&self) -> impl Iterator<Item = u16> + '_ {
        self.laws.keys().copied()
    }

    /// Mean isolated runtime (s) of a query text on a cluster of `rpu`: the measured mean where
    /// measured, else the template's scaling law. O(log n).
    pub fn isolated_runtime(&self, text: QueryText, rpu: u32) -> Result<f64> {
        if rpu == 0 {
            return Err(AutoSloError::out_of_range("cluster size (RPU)", "positive", rpu));
        }
        if let Some(mean) = self.measured_mean(text, rpu) {
            return Ok(mean);
        }
        self.law_runtime(text, rpu)
    }

    /// The scaling law's runtime, ignoring any measurement at this size.
    pub fn law_runtime(&self, text: QueryText, rpu: u32) -> Result<f64> {
        let law = self.laws.get(&text.template).ok_or(AutoSloError::UnknownTemplate { template: text.template as i64 })?;
        if text.instance == 0 {
            return Err(AutoSloError::out_of_range("query instance", "≥ 1", 0));
        }
        let a = law.intercepts.get(&text.instance).copied().unwrap_or(law.mean_intercept);
        Ok((a + law.slope * (rpu as f64).log2()).exp())
    }

    /// Run-to-run noise of a query text at a size: a list of run ÷ mean ratios (averaging 1) and
    /// a kernel bandwidth `h` (in ln runtime). A run's noise multiplier is a ratio picked
    /// uniformly, times `exp(h·z − h²/2)` with `z` standard normal (a smoothed bootstrap: mean 1,
    /// heavy-tailed as measured, and never the same value twice). `h` is the entry's std of ln
    /// runtime ÷ √runs, so `n` draws spread like the `n` measured runs (resampling the ratios
    /// alone loses `1/n` of the variance and repeats values). Entries measured at that size use
    /// their own runs; others borrow a donor entry at the nearest size with ≥ 20 entries, picked by
    /// a hash of the text (fixed per text).
    pub fn noise_ratios(&self, text: QueryText, rpu: u32) -> (&[f64], f64) {
        // Each size's entries are in (template, instance) order, as `runs` iterates.
        if let Some(own) = self.noise.get(&rpu).and_then(|v| v.binary_search_by_key(&(text.template, text.instance), |e| e.0).ok().map(|i| &v[i])) {
            return (&own.1, own.2);
        }
        let dist = |s: u32| ((s as f64).log2() - (rpu.max(1) as f64).log2()).abs();
        let pool = self
            .noise
            .iter()
            .filter(|(_, v)| v.len() >= 20)
            .min_by(|(a, _), (b, _)| dist(**a).total_cmp(&dist(**b)))
            .or_else(|| self.noise.iter().next());
        match pool {
            Some((_, entries)) => {
                let mut h = ((text.template as u64) << 16) | text.instance as u64 | ((rpu as u64) << 32);
                let e = &entries[(crate::rng::splitmix64(&mut h) % entries.len() as u64) as usize];
                (&e.1, e.2)
            }
            None => (&[1.0], 0.0),
        }
    }

    /// The size-scaling slope `b(t)` of a template (d ln runtime / d log2 size; −ln 2 is linear
    /// speedup). Unknown templates get the fleet slope.
    pub fn size_slope(&self, template: u16) -> f64 {
        self.laws.get(&template).map_or(self.fleet_slope, |l| l.slope)
    }

    /// Mean isolated runtime at `rpu` over every known template × instances 1..=3 (the
    /// BaseWorkload texts). O(T) the first time per size, then remembered.
    pub fn mean_runtime_at(&self, rpu: u32) -> f64 {
        if let Some(m) = self.mean_at.get(rpu) {
            return m;
        }
        let xs: Vec<f64> = self
            .templates()
            .flat_map(|template| (1..=NUM_INSTANCES).map(move |instance| QueryText { template, instance }))
            .filter_map(|t| self.isolated_runtime(t, rpu).ok())
            .collect();
        let m = xs.iter().sum::<f64>() / xs.len().max(1) as f64;
        self.mean_at.put(rpu, m);
        m
    }

    /// The fleet-wide slope of ln runtime in log2 size.
    pub fn fleet_slope(&self) -> f64 {
        self.fleet_slope
    }

    /// Error of the scaling law on the measured points, in sample and leave-one-size-out.
    /// O(P · T) for P points and T templates' refits.
    pub fn fit_report(&self) -> FitReport {
        let mut in_sample = Vec::new();
        let mut holdout = Vec::new();
        for (&(t, i, rpu), rs) in &self.runs {
            let mean = rs.iter().sum::<f64>() / rs.len() as f64;
            let text = QueryText { template: t, instance: i };
            if let Ok(est) = self.law_runtime(text, rpu) {
                in_sample.push(q_error(est, mean));
            }
            let other_sizes = self.runs.keys().any(|&(t2, i2, r2)| t2 == t && i2 == i && r2 != rpu);
            if other_sizes {
                let (laws, _) = fit_laws(&self.runs, Some((t, i, rpu)));
                let law = &laws[&t];
                let a = law.intercepts.get(&i).copied().unwrap_or(law.mean_intercept);
                holdout.push(q_error((a + law.slope * (rpu as f64).log2()).exp(), mean));
            }
        }
        let q3 = |v: &[f64]| [quantile(v, 0.5).unwrap_or(f64::NAN), quantile(v, 0.9).unwrap_or(f64::NAN), quantile(v, 1.0).unwrap_or(f64::NAN)];
        let own = self.laws.values().filter(|l| l.own_slope).count();
        FitReport {
            points: in_sample.len(),
            in_sample_q: q3(&in_sample),
            holdout_points: holdout.len(),
            holdout_q: q3(&holdout),
            fleet_slope: self.fleet_slope,
            templates_own_slope: own,
            templates_fleet_slope: self.laws.len() - own,
            templates_from_baseline: self.laws.iter().filter(|l| l.1.from_baseline).map(|l| *l.0).collect(),
        }
    }
}

/// Fit the per-template laws, optionally leaving one measured point out. Returns the laws and the
/// fleet-wide slope.
fn fit_laws(runs: &BTreeMap<(u16, u16, u32), Vec<f64>>, exclude: Option<(u16, u16, u32)>) -> (BTreeMap<u16, TemplateLaw>, f64) {
    // Group mean log runtimes by (template, instance): points (x = log2 rpu, y = mean ln runtime).
    let mut groups: BTreeMap<(u16, u16), Vec<(f64, f64)>> = BTreeMap::new();
    for (&(t, i, rpu), rs) in runs {
        if Some((t, i, rpu)) == exclude {
            continue;
        }
        let y = rs.iter().map(|r| r.ln()).sum::<f64>() / rs.len() as f64;
        groups.entry((t, i)).or_default().push(((rpu as f64).log2(), y));
    }
    // Within-group sums per template and fleet-wide.
    let mut sums: BTreeMap<u16, (f64, f64)> = BTreeMap::new();
    let (mut fxy, mut fxx) = (0.0, 0.0);
    for (&(t, _), pts) in &groups {
        let n = pts.len() as f64;
        let xm = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let ym = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let sxy: f64 = pts.iter().map(|p| (p.0 - xm) * (p.1 - ym)).sum();
        let sxx: f64 = pts.iter().map(|p| (p.0 - xm) * (p.0 - xm)).sum();
        let e = sums.entry(t).or_insert((0.0, 0.0));
        e.0 += sxy;
        e.1 += sxx;
        fxy += sxy;
        fxx += sxx;
    }
    let fleet = if fxx > 0.0 { (fxy / fxx).clamp(SLOPE_RANGE.0, SLOPE_RANGE.1) } else { -1.0 };
    let mut laws = BTreeMap::new();
    for (t, (sxy, sxx)) in sums {
        let own_slope = sxx > 0.0;
        let slope = ((sxy + SLOPE_PRIOR_WEIGHT * fleet) / (sxx + SLOPE_PRIOR_WEIGHT)).clamp(SLOPE_RANGE.0, SLOPE_RANGE.1);
        let mut intercepts = BTreeMap::new();
        for (&(t2, i), pts) in groups.range((t, 0)..=(t, u16::MAX)) {
            debug_assert_eq!(t2, t);
            let a = pts.iter().map(|p| p.1 - slope * p.0).sum::<f64>() / pts.len() as f64;
            intercepts.insert(i, a);
        }
        let mean_intercept = intercepts.values().sum::<f64>() / intercepts.len() as f64;
        laws.insert(t, TemplateLaw { slope, own_slope, from_baseline: false, intercepts, mean_intercept });
    }
    (laws, fleet)
}

/// Give templates that were never measured alone a law from the SLO baseline run (see module doc).
fn add_baseline_laws(laws: &mut BTreeMap<u16, TemplateLaw>, fleet_slope: f64) {
    let baseline = crate::slo::paper_baseline(crate::slo::BaselineAggregate::P50);
    let x16 = 16f64.log2();
    let mut log_ratios: Vec<f64> = laws
        .iter()
        .filter_map(|(t, law)| baseline.get(t).map(|b| law.mean_intercept + law.slope * x16 - b.ln()))
        .collect();
    log_ratios.sort_by(f64::total_cmp);
    let Some(&rho) = log_ratios.get(log_ratios.len() / 2) else { return };
    for (&t, &b) in &baseline {
        if laws.contains_key(&t) || !(1..=NUM_TEMPLATES).contains(&t) {
            continue;
        }
        let a = b.ln() + rho - fleet_slope * x16;
        laws.insert(t, TemplateLaw { slope: fleet_slope, own_slope: false, from_baseline: true, intercepts: BTreeMap::new(), mean_intercept: a });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_catalog_matches_the_measurements() {
        let c = tpcds();
        assert_eq!(c.measured().count(), 617);
        assert_eq!(c.measured().map(|(_, _, r)| r.len()).sum::<usize>(), 2758);
        // Per-RPU mean of all runs, as in isolated_runtimes_summary.yml.
        for (rpu, want) in [(4, 21.436470945676167), (8, 7.304338711171062), (16, 4.69129893152041), (32, 2.706868862311958)] {
            let runs: Vec<f64> = c.measured().filter(|m| m.1 == rpu).flat_map(|m| m.2.iter().copied()).collect();
            let mean = runs.iter().sum::<f64>() / runs.len() as f64;
            assert!((mean - want).abs() < 1e-9, "rpu {rpu}: {mean} vs {want}");
        }
        assert!((1..=99).all(|t| c.knows_template(t)));
    }

    #[test]
    fn measured_points_use_measurements_and_law_fills_the_rest() {
        let c = tpcds();
        let text = QueryText { template: 15, instance: 2 };
        let m = c.isolated_runtime(text, 4).unwrap();
        assert!((m - 7.658700108528137).abs() < 1e-9);
        // Larger clusters are faster under the law for a typical template, and every size resolves.
        for t in 1..=99 {
            for i in 1..=3 {
                for rpu in [4, 8, 16, 32, 64, 128] {
                    let r = c.isolated_runtime(QueryText { template: t, instance: i }, rpu).unwrap();
                    assert!(r.is_finite() && r > 0.0);
                }
            }
        }
        assert!(c.fleet_slope() < -0.3 && c.fleet_slope() > -1.5, "fleet slope {}", c.fleet_slope());
    }

    #[test]
    fn fit_report_is_honest_and_reasonable() {
        let r = tpcds().fit_report();
        assert_eq!(r.points, 617);
        assert!(r.holdout_points > 200);
        assert!(r.in_sample_q[0] >= 1.0 && r.in_sample_q[0] < 1.3, "{r:?}");
        assert!(r.holdout_q[0] >= r.in_sample_q[0], "{r:?}");
        assert!(r.holdout_q[0] < 2.0, "{r:?}");
        assert_eq!(r.templates_from_baseline, vec![67]);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        assert!(matches!(tpcds().isolated_runtime(QueryText { template: 100, instance: 1 }, 16), Err(AutoSloError::UnknownTemplate { template: 100 })));
        assert!(tpcds().isolated_runtime(QueryText { template: 1, instance: 1 }, 0).is_err());
        assert!(Catalog::from_csv("nope", "x").is_err());
        let e = Catalog::from_csv("rpu,template,instance,run,runtime_s\n8,1,1,0,-3\n", "x").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }
}
