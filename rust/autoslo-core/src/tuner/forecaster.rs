//! The Workload Forecaster (§7.2): forecasted workloads for a day ahead, drawn from the Workload
//! Reservoir's two tables, split into training and validation forecasts.
//!
//! Per hour h of the target day, the forecaster picks the history bins (date, h) its policy
//! names, with weights:
//! - `decay` (the paper's default): same weekday, k weeks back, weight λ^(k−1);
//! - `previous-day`: the most recent day before the target, weight 1;
//! - `equal-7-day`: the 7 days before the target, weight 1 each.
//!
//! With less than a week of history, `decay` has no same-weekday bin; it then falls back to
//! `previous-day`, and says so ([`Forecasts::policy_used`]).
//!
//! A forecast's volume for hour h is the count of one of the bins, picked with probability ∝ its
//! weight (so the N forecasts span the days' volumes rather than their mean). Query texts (with
//! their tenant and class) are sampled with probability ∝ Σ weight × count. Arrival offsets come
//! from the pooled interarrival deciles of the bins' arrivals: each gap picks a decile uniformly
//! and a value uniformly within it; the offsets are then scaled to fill the hour. Bins with fewer
//! than `min_bin_arrivals` gaps fall back to uniform offsets.

use crate::catalog::QueryText;
use crate::error::{AutoSloError, Result};
use crate::rng::{derive_seed, Rng};
use crate::slo::SloTable;
use crate::workload::{Query, Workload};

/// Days since 1970-01-01 (a Thursday).
pub type Date = i32;

/// Weekday of a date: 0 = Monday … 6 = Sunday.
pub fn weekday(date: Date) -> u32 {
    (date + 3).rem_euclid(7) as u32
}

/// One row of the count table: how often a query text (with tenant and class) was issued in a
/// (date, hour) bin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CountRow {
    pub date: Date,
    pub hour: u8,
    pub text: QueryText,
    /// Index into [`History::tenants`].
    pub tenant: u32,
    /// Index into [`History::classes`].
    pub class: u32,
    pub count: u32,
}

/// One row of the arrivals table: a (sampled) arrival's second offset within its hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArrivalRow {
    pub date: Date,
    pub hour: u8,
    pub offset_s: f64,
}

/// The reservoir's tables over some days, as the forecaster reads them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// Dates covered (a covered date with no row at some hour had no query then).
    pub days: Vec<Date>,
    pub tenants: Vec<String>,
    pub classes: Vec<String>,
    pub counts: Vec<CountRow>,
    pub arrivals: Vec<ArrivalRow>,
}

/// How forecast bins are chosen and weighted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ForecastPolicy {
    /// Same weekday, k weeks back, weight λ^(k−1), λ ∈ (0, 1].
    Decay { lambda: f64 },
    PreviousDay,
    Equal7Day,
}

impl ForecastPolicy {
    pub fn name(&self) -> &'static str {
        match self {
            ForecastPolicy::Decay { .. } => "decay",
            ForecastPolicy::PreviousDay => "previous-day",
            ForecastPolicy::Equal7Day => "equal-7-day",
        }
    }
    /// By name; `decay` takes `lambda`.
    pub fn parse(name: &str, lambda: f64) -> Result<Self> {
        match name {
            "decay" => Ok(ForecastPolicy::Decay { lambda }),
            "previous-day" => Ok(ForecastPolicy::PreviousDay),
            "equal-7-day" => Ok(ForecastPolicy::Equal7Day),
            _ => Err(AutoSloError::UnknownPolicy { name: name.into(), known: "decay, previous-day, equal-7-day".into() }),
        }
    }
}

/// Forecaster settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForecastSettings {
    pub policy: ForecastPolicy,
    /// Number of forecasts N (≥ 2: at least one for training and one for validation).
    pub forecasts: usize,
    /// Share of the forecasts used for training (the rest validate), in (0, 1).
    pub training_share: f64,
    /// Pooled interarrival gaps below this fall back to uniform offsets.
    pub min_bin_arrivals: usize,
    /// How arrival offsets are drawn within an hour.
    pub arrivals: ArrivalModel,
    pub seed: u64,
}

impl ForecastSettings {
    /// The settings, or an error naming the one out of range: N ≥ 2, a training share in (0, 1),
    /// a decay λ in (0, 1].
    pub fn validated(self) -> Result<Self> {
        if self.forecasts < 2 {
            return Err(AutoSloError::out_of_range("forecasts", "≥ 2 (training and validation)", self.forecasts));
        }
        if !(self.training_share > 0.0 && self.training_share < 1.0) {
            return Err(AutoSloError::out_of_range("training_share", "in (0, 1)", self.training_share));
        }
        if let ForecastPolicy::Decay { lambda } = self.policy {
            if !(lambda > 0.0 && lambda <= 1.0) {
                return Err(AutoSloError::out_of_range("forecaster decay λ", "in (0, 1]", lambda));
            }
        }
        Ok(self)
    }
}

/// How a forecast places its arrivals within an hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrivalModel {
    /// The paper's: gaps drawn from the pooled interarrival deciles (uniform within a decile).
    Deciles,
    /// A change: the arrival pattern of the history hour whose volume was drawn, subsampled (or
    /// resampled with jitter) to the forecast's count. It keeps when within the hour the queries
    /// came, so a burst stays a burst instead of being spread over the hour.
    Pattern,
}

impl ArrivalModel {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "deciles" => Ok(ArrivalModel::Deciles),
            "pattern" => Ok(ArrivalModel::Pattern),
            _ => Err(AutoSloError::UnknownPolicy { name: name.into(), known: "deciles, pattern".into() }),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ArrivalModel::Deciles => "deciles",
            ArrivalModel::Pattern => "pattern",
        }
    }
}

impl Default for ForecastSettings {
    fn default() -> Self {
        Self { policy: ForecastPolicy::Decay { lambda: 0.5 }, forecasts: 20, training_share: 0.6, min_bin_arrivals: 20, arrivals: ArrivalModel::Deciles, seed: 0 }
    }
}

/// Forecasted workloads, split.
#[derive(Debug, Clone)]
pub struct Forecasts {
    pub training: Vec<Workload>,
    pub validation: Vec<Workload>,
    /// The policy that produced them (`decay` falls back to `previous-day` without a same-weekday day).
    pub policy_used: &'static str,
    /// The history days the bins came from.
    pub days_used: Vec<Date>,
}

/// Bins of one hour: (date, weight).
fn bins(policy: ForecastPolicy, days: &[Date], target: Date) -> (Vec<(Date, f64)>, &'static str) {
    let before: Vec<Date> = days.iter().copied().filter(|&d| d < target).collect();
    let previous = || before.iter().max().map(|&d| vec![(d, 1.0)]).unwrap_or_default();
    match policy {
        ForecastPolicy::Decay { lambda } => {
            let same: Vec<(Date, f64)> = before.iter().filter(|&&d| (target - d) % 7 == 0).map(|&d| (d, lambda.powi((target - d) / 7 - 1))).collect();
            if same.is_empty() {
                (previous(), "previous-day")
            } else {
                (same, "decay")
            }
        }
        ForecastPolicy::PreviousDay => (previous(), "previous-day"),
        ForecastPolicy::Equal7Day => (before.iter().filter(|&&d| target - d <= 7).map(|&d| (d, 1.0)).collect(), "equal-7-day"),
    }
}

/// Index drawn with probability ∝ `cum` increments (cumulative weights, last > 0).
fn draw(rng: &mut Rng, cum: &[f64]) -> usize {
    let u = rng.uniform() * cum[cum.len() - 1];
    cum.partition_point(|&c| c <= u).min(cum.len() - 1)
}

/// Deciles (11 cut points) of a non-empty sample.
fn deciles(mut v: Vec<f64>) -> [f64; 11] {
    v.sort_by(|a, b| a.total_cmp(b));
    let mut q = [0.0; 11];
    for (j, x) in q.iter_mut().enumerate() {
        let pos = j as f64 / 10.0 * (v.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        *x = v[lo] + (v[hi] - v[lo]) * (pos - lo as f64);
    }
    q
}

/// What one hour of every forecast draws from.
struct HourModel {
    /// (date, weight, queries that hour)
    volumes: Vec<(Date, f64, u64)>,
    volume_cum: Vec<f64>,
    /// (text, tenant, class) and cumulative weights.
    texts: Vec<(QueryText, u32, u32)>,
    text_cum: Vec<f64>,
    gaps: Option<[f64; 11]>,
    /// Each chosen bin's sorted offsets (the `pattern` model), in `volumes` order.
    patterns: Vec<Vec<f64>>,
}

/// The arrivals table grouped by (date, hour), offsets sorted.
type ArrivalIndex = std::collections::HashMap<(Date, u8), Vec<f64>>;

fn hour_model(history: &History, counts: &[usize], arrivals: &ArrivalIndex, chosen: &[(Date, f64)], hour: u8, min_gaps: usize) -> HourModel {
    let weight_of = |d: Date| chosen.iter().find(|c| c.0 == d).map(|c| c.1);
    let mut volumes: Vec<(Date, f64, u64)> = chosen.iter().map(|&(d, w)| (d, w, 0)).collect();
    let mut agg: std::collections::BTreeMap<(u16, u16, u32, u32), f64> = std::collections::BTreeMap::new();
    for r in counts.iter().map(|&i| &history.counts[i]) {
        if let Some(w) = weight_of(r.date) {
            if let Some(v) = volumes.iter_mut().find(|v| v.0 == r.date) {
                v.2 += r.count as u64;
            }
            *agg.entry((r.text.template, r.text.instance, r.tenant, r.class)).or_default() += w * r.count as f64;
        }
    }
    let mut volume_cum = Vec::with_capacity(volumes.len());
    let mut acc = 0.0;
    for v in &volumes {
        acc += v.1;
        volume_cum.push(acc);
    }
    let (mut texts, mut text_cum, mut acc) = (Vec::with_capacity(agg.len()), Vec::with_capacity(agg.len()), 0.0);
    for ((t, i, k, c), w) in agg {
        acc += w;
        texts.push((QueryText { template: t, instance: i }, k, c));
        text_cum.push(acc);
    }
    let mut gaps = Vec::new();
    let mut patterns = Vec::with_capacity(chosen.len());
    for &(d, _) in chosen {
        let offs = arrivals.get(&(d, hour)).cloned().unwrap_or_default();
        gaps.extend(offs.windows(2).map(|w| w[1] - w[0]));
        patterns.push(offs);
    }
    let gaps = (gaps.len() >= min_gaps.max(1)).then(|| deciles(gaps));
    HourModel { volumes, volume_cum, texts, text_cum, gaps, patterns }
}

/// Offsets (s, sorted, in [0, 3600)) of `n` arrivals in one hour.
fn offsets(rng: &mut Rng, n: usize, gaps: Option<&[f64; 11]>) -> Vec<f64> {
    match gaps {
        None => {
            let mut v: Vec<f64> = (0..n).map(|_| rng.uniform() * 3600.0).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            v
        }
        Some(q) => {
            // n + 1 gaps: before the first arrival, between arrivals, after the last; scaled to the hour.
            let gap = |rng: &mut Rng| {
                let j = rng.below(10);
                q[j] + (q[j + 1] - q[j]) * rng.uniform()
            };
            let mut cum = Vec::with_capacity(n);
            let mut t = gap(rng) * rng.uniform();
            for _ in 0..n {
                cum.push(t);
                t += gap(rng);
            }
            let scale = if t > 0.0 { 3600.0 / t } else { 0.0 };
            cum.iter().map(|x| (x * scale).min(3600.0 - 1e-6)).collect()
        }
    }
}

/// Offsets of `n` arrivals following one history hour's (sorted) pattern: a uniform subsample
/// when it has at least `n` offsets; otherwise all of them plus resampled ones, each jittered
/// within half the gaps around it. Too few offsets (< 2) fall back to uniform.
fn pattern_offsets(rng: &mut Rng, n: usize, pattern: &[f64]) -> Vec<f64> {
    let m = pattern.len();
    if m < 2 {
        return offsets(rng, n, None);
    }
    let mut out: Vec<f64> = if n <= m {
        let mut idx: Vec<usize> = (0..m).collect();
        rng.shuffle(&mut idx);
        idx.truncate(n);
        idx.into_iter().map(|i| pattern[i]).collect()
    } else {
        let mut v = pattern.to_vec();
        for _ in 0..n - m {
            let i = rng.below(m);
            let lo = if i > 0 { (pattern[i - 1] + pattern[i]) / 2.0 } else { pattern[i] };
            let hi = if i + 1 < m { (pattern[i] + pattern[i + 1]) / 2.0 } else { pattern[i] };
            v.push(lo + (hi - lo) * rng.uniform());
        }
        v
    };
    out.sort_by(|a, b| a.total_cmp(b));
    out
}

/// Draw `settings.forecasts` forecasts of `target`'s workload from `history`. SLOs come from
/// `slo` by template and class name. O(N · (queries + history rows of the chosen bins)).
pub fn forecast(history: &History, target: Date, slo: &SloTable, settings: &ForecastSettings) -> Result<Forecasts> {
    settings.validated()?;
    for (row, r) in history.counts.iter().enumerate() {
        if r.hour > 23 || r.tenant as usize >= history.tenants.len() || r.class as usize >= history.classes.len() {
            return Err(AutoSloError::InvalidConfig(format!("count table row {row}: hour, tenant or class out of range")));
        }
    }
    let (chosen, used) = bins(settings.policy, &history.days, target);
    if chosen.is_empty() {
        return Err(AutoSloError::InvalidConfig(format!("no history before the target day for the `{}` forecast policy", settings.policy.name())));
    }
    let mut by_hour: Vec<Vec<usize>> = vec![Vec::new(); 24];
    for (i, r) in history.counts.iter().enumerate() {
        by_hour[r.hour as usize].push(i);
    }
    let mut arrivals = ArrivalIndex::new();
    for a in history.arrivals.iter().filter(|a| chosen.iter().any(|c| c.0 == a.date)) {
        if !(a.hour < 24 && a.offset_s.is_finite() && (0.0..3600.0).contains(&a.offset_s)) {
            return Err(AutoSloError::InvalidConfig(format!("arrivals table: an offset of {} s in hour {} (offsets lie in [0, 3600) s, hours in 0–23)", a.offset_s, a.hour)));
        }
        arrivals.entry((a.date, a.hour)).or_default().push(a.offset_s);
    }
    arrivals.values_mut().for_each(|v| v.sort_by(|a, b| a.total_cmp(b)));
    let models: Vec<HourModel> = (0..24u8).map(|h| hour_model(history, &by_hour[h as usize], &arrivals, &chosen, h, settings.min_bin_arrivals)).collect();
    let n_train = ((settings.forecasts as f64 * settings.training_share).round() as usize).clamp(1, settings.forecasts - 1);
    let mut all = Vec::with_capacity(settings.forecasts);
    for f in 0..settings.forecasts {
        let mut rng = Rng::new(derive_seed(settings.seed, 0xF0CA_0000 + f as u64));
        let mut rows: Vec<(f64, QueryText, u32, u32)> = Vec::new();
        for (h, m) in models.iter().enumerate() {
            if m.texts.is_empty() || m.volume_cum.last().is_none_or(|&w| w <= 0.0) {
                continue;
            }
            let bin = draw(&mut rng, &m.volume_cum);
            let n = m.volumes[bin].2 as usize;
            let offs = match settings.arrivals {
                ArrivalModel::Deciles => offsets(&mut rng, n, m.gaps.as_ref()),
                ArrivalModel::Pattern => pattern_offsets(&mut rng, n, &m.patterns[bin]),
            };
            for o in offs {
                let (text, tenant, class) = m.texts[draw(&mut rng, &m.text_cum)];
                rows.push((h as f64 * 3600.0 + o, text, tenant, class));
            }
        }
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        let queries = rows
            .into_iter()
            .enumerate()
            .map(|(i, (arrival, text, tenant, class))| Ok(Query { id: i as u64, arrival, text, tenant, class, slo: slo.slo(text.template, &history.classes[class as usize])? }))
            .collect::<Result<Vec<_>>>()?;
        all.push(Workload::new(queries, history.tenants.clone(), history.classes.clone())?);
    }
    let validation = all.split_off(n_train);
    Ok(Forecasts { training: all, validation, policy_used: used, days_used: chosen.iter().map(|c| c.0).collect() })
}
