//! A realistic multi-day, multi-tenant workload generator in the spirit of Redbench (Amazon's
//! Redset-derived benchmark): weekly and diurnal arrival patterns, bursts, recurring scheduled
//! jobs at fixed times, repeated query texts, several tenants and four workload classes with
//! different mixes. Seeded: the same configuration and seed give the same workload.
//!
//! Model (per tenant k, class c, minute m of day d):
//! - dashboard, ad hoc and backfill queries arrive as a Poisson process with a piecewise-constant
//!   intensity `V · share(k) · mix(k, c) / 1440 · diurnal_c(local hour) · weekly_c(weekday) ·
//!   burst(k, t) · refresh_c(minute)`, where `V` is the fleet's queries per weekday, each diurnal
//!   profile has mean 1 over the day, dashboards refresh at :00 and :30, and bursts (about two
//!   per tenant per weekday, 5–15 minutes, ×6) hit ad hoc and dashboard traffic;
//! - reports are scheduled jobs: two daily jobs on weekdays and a weekly Monday job per tenant,
//!   each a fixed list of query texts issued a few seconds apart at the same time every day;
//! - query texts repeat: dashboards cycle through a small library of short queries with
//!   Zipf-like popularity, backfills through heavy ones, ad hoc mixes a library with fresh texts.

use super::{Interner, Query, Workload, CLASSES};
use crate::catalog::{self, QueryText, NUM_INSTANCES, NUM_TEMPLATES};
use crate::error::{AutoSloError, Result};
use crate::rng::{derive_seed, Rng};
use crate::slo::SloTable;

/// Configuration of [`redbench_workload`].
#[derive(Debug, Clone, PartialEq)]
pub struct RedbenchConfig {
    /// Number of days to generate (≥ 1).
    pub days: u32,
    /// Mean number of queries on a weekday, across all tenants.
    pub queries_per_day: f64,
    /// Number of tenants (≥ 1).
    pub tenants: u32,
    /// Weekday of day 0: 0 = Monday … 6 = Sunday.
    pub start_weekday: u32,
    /// Seed of every random choice.
    pub seed: u64,
}

impl Default for RedbenchConfig {
    fn default() -> Self {
        RedbenchConfig { days: 1, queries_per_day: 20_000.0, tenants: 4, start_weekday: 0, seed: 0 }
    }
}

const DAY: f64 = 86_400.0;
const DASHBOARD: usize = 0;
const ADHOC: usize = 1;
const REPORT: usize = 2;
const BACKFILL: usize = 3;

/// Hourly intensity profiles (mean 1 after normalisation).
fn diurnal(class: usize, hour: usize) -> f64 {
    const DASH: [f64; 24] = [0.1, 0.1, 0.1, 0.1, 0.1, 0.2, 0.5, 1.2, 2.2, 2.6, 2.5, 2.3, 1.8, 2.2, 2.4, 2.3, 2.0, 1.4, 0.8, 0.5, 0.4, 0.3, 0.2, 0.1];
    const ADH: [f64; 24] = [0.05, 0.05, 0.05, 0.05, 0.05, 0.1, 0.3, 0.8, 1.8, 2.8, 3.0, 2.6, 1.5, 2.2, 2.8, 2.7, 2.2, 1.3, 0.7, 0.4, 0.3, 0.2, 0.1, 0.05];
    const BACK: [f64; 24] = [3.0, 4.0, 4.0, 4.0, 3.5, 2.0, 0.6, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 1.5, 2.5];
    let p: &[f64; 24] = match class {
        DASHBOARD => &DASH,
        ADHOC => &ADH,
        _ => &BACK,
    };
    p[hour] * 24.0 / p.iter().sum::<f64>()
}

/// Weekday multiplier (0 = Monday).
fn weekly(class: usize, weekday: u32) -> f64 {
    match (class, weekday) {
        (BACKFILL, _) => 1.0,
        (_, 5) => 0.35,
        (_, 6) => 0.3,
        (_, 0) => 1.1,
        (_, 4) => 0.9,
        _ => 1.0,
    }
}

/// Draw from a Zipf-like distribution over `n` items with exponent `s` (small n: linear scan).
fn zipf(rng: &mut Rng, n: usize, s: f64) -> usize {
    let total: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
    let mut u = rng.uniform() * total;
    for k in 1..=n {
        u -= (k as f64).powf(-s);
        if u <= 0.0 {
            return k - 1;
        }
    }
    n - 1
}

struct Tenant {
    share: f64,
    mix: [f64; 4],
    /// Hours the tenant's local day is shifted from UTC (0–3).
    offset_h: usize,
    dashboards: Vec<QueryText>,
    adhoc: Vec<QueryText>,
    backfills: Vec<QueryText>,
    /// (second of day, texts, weekly-only)
    jobs: Vec<(f64, Vec<QueryText>, bool)>,
}

fn random_text(rng: &mut Rng, templates: &[u16]) -> QueryText {
    QueryText { template: templates[rng.below(templates.len())], instance: 1 + rng.below(NUM_INSTANCES as usize) as u16 }
}

/// Generate a multi-day multi-tenant workload. O(days · tenants · 1440 + queries).
pub fn redbench_workload(cfg: &RedbenchConfig, slo: &SloTable) -> Result<Workload> {
    if cfg.days == 0 {
        return Err(AutoSloError::out_of_range("days", "≥ 1", 0));
    }
    if cfg.tenants == 0 {
        return Err(AutoSloError::out_of_range("tenants", "≥ 1", 0));
    }
    if !(cfg.queries_per_day.is_finite() && cfg.queries_per_day > 0.0) {
        return Err(AutoSloError::out_of_range("queries_per_day", "positive", cfg.queries_per_day));
    }
    if cfg.start_weekday > 6 {
        return Err(AutoSloError::out_of_range("start_weekday", "0 (Monday) … 6 (Sunday)", cfg.start_weekday));
    }
    // Short and heavy templates by their 16-RPU isolated runtime.
    let cat = catalog::tpcds();
    let mut by_cost: Vec<(f64, u16)> = (1..=NUM_TEMPLATES)
        .map(|t| (cat.isolated_runtime(QueryText { template: t, instance: 1 }, 16).unwrap_or(f64::MAX), t))
        .collect();
    by_cost.sort_by(|a, b| a.0.total_cmp(&b.0));
    let all: Vec<u16> = (1..=NUM_TEMPLATES).collect();
    let short: Vec<u16> = by_cost[..40].iter().map(|p| p.1).collect();
    let heavy: Vec<u16> = by_cost[60..].iter().map(|p| p.1).collect();

    let mut setup = Rng::new(derive_seed(cfg.seed, 0xB0B));
    let raw_shares: Vec<f64> = (0..cfg.tenants).map(|k| (k as f64 + 1.0).powf(-0.8)).collect();
    let share_sum: f64 = raw_shares.iter().sum();
    let tenants: Vec<Tenant> = raw_shares
        .iter()
        .map(|s| {
            let base = [0.40, 0.30, 0.15, 0.15];
            let mut mix = base.map(|b| b * (0.5 + setup.uniform()));
            let total: f64 = mix.iter().sum();
            mix.iter_mut().for_each(|m| *m /= total);
            let dashboards = (0..8).map(|_| random_text(&mut setup, &short)).collect();
            let adhoc = (0..40).map(|_| random_text(&mut setup, &all)).collect();
            let backfills = (0..10).map(|_| random_text(&mut setup, &heavy)).collect();
            let mut jobs = Vec::new();
            for (hour, weekly_only) in [(6.0, false), (12.0, false), (7.0, true)] {
                let len = 10 + setup.below(16);
                let texts = (0..len).map(|_| random_text(&mut setup, &all)).collect();
                let minute = setup.below(4) as f64 * 15.0;
                jobs.push((hour * 3600.0 + minute * 60.0, texts, weekly_only));
            }
            Tenant { share: s / share_sum, mix, offset_h: setup.below(4), dashboards, adhoc, backfills, jobs }
        })
        .collect();

    let mut names = Interner::default();
    let tenant_names: Vec<u32> = (0..cfg.tenants).map(|k| names.get(&format!("tenant-{}", k + 1))).collect();
    let mut class_names = Interner::default();
    let class_idx: Vec<u32> = CLASSES.iter().map(|c| class_names.get(c)).collect();

    // (arrival, tenant, class, text)
    let mut rows: Vec<(f64, u32, usize, QueryText)> = Vec::new();
    for day in 0..cfg.days {
        let weekday = (cfg.start_weekday + day) % 7;
        let day0 = day as f64 * DAY;
        for (k, ten) in tenants.iter().enumerate() {
            let mut rng = Rng::new(derive_seed(cfg.seed, ((day as u64) << 32) | k as u64));
            // Bursts: about two per weekday in business hours (local), 5–15 min, ×6.
            let n_bursts = rng.poisson(2.0 * weekly(ADHOC, weekday));
            let bursts: Vec<(f64, f64)> = (0..n_bursts)
                .map(|_| {
                    let start = (9.0 + 8.0 * rng.uniform()) * 3600.0;
                    (start, start + (300.0 + 600.0 * rng.uniform()))
                })
                .collect();
            for class in [DASHBOARD, ADHOC, BACKFILL] {
                let per_minute = cfg.queries_per_day * ten.share * ten.mix[class] / 1440.0 * weekly(class, weekday);
                for minute in 0..1440usize {
                    let local_hour = (minute / 60 + 24 - ten.offset_h) % 24;
                    let sec = minute as f64 * 60.0;
                    let mut mu = per_minute * diurnal(class, local_hour);
                    if class == DASHBOARD {
                        mu *= if matches!(minute % 60, 0 | 1 | 30 | 31) { 4.0 } else { 44.0 / 56.0 };
                    }
                    if class != BACKFILL {
                        let local_sec = ((minute + 1440 - ten.offset_h * 60) % 1440) as f64 * 60.0;
                        if bursts.iter().any(|&(a, b)| local_sec >= a && local_sec < b) {
                            mu *= 6.0;
                        }
                    }
                    for _ in 0..rng.poisson(mu) {
                        let text = match class {
                            DASHBOARD => ten.dashboards[zipf(&mut rng, ten.dashboards.len(), 1.2)],
                            BACKFILL => ten.backfills[zipf(&mut rng, ten.backfills.len(), 0.8)],
                            _ if rng.uniform() < 0.7 => ten.adhoc[zipf(&mut rng, ten.adhoc.len(), 0.8)],
                            _ => random_text(&mut rng, &all),
                        };
                        rows.push((day0 + sec + 60.0 * rng.uniform(), k as u32, class, text));
                    }
                }
            }
            // Scheduled report jobs: same texts at the same local time, weekdays (weekly: Mondays).
            let job_queries: f64 = ten.jobs.iter().map(|j| j.1.len() as f64).sum();
            let repeats = (cfg.queries_per_day * ten.share * ten.mix[REPORT] / job_queries).max(1.0).round() as usize;
            for (at, texts, weekly_only) in &ten.jobs {
                if weekday >= 5 || (*weekly_only && weekday != 0) {
                    continue;
                }
                let mut t = day0 + ((*at + ten.offset_h as f64 * 3600.0) % DAY);
                for _ in 0..repeats {
                    for &text in texts {
                        rows.push((t, k as u32, REPORT, text));
                        t += 2.0 + rng.exponential(1.0 / 3.0);
                    }
                }
            }
        }
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let queries = rows
        .into_iter()
        .enumerate()
        .map(|(i, (arrival, k, class, text))| {
            Ok(Query { id: i as u64, arrival, text, tenant: tenant_names[k as usize], class: class_idx[class], slo: slo.slo(text.template, CLASSES[class])? })
        })
        .collect::<Result<Vec<_>>>()?;
    Workload::new(queries, names.names, class_names.names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redbench_has_the_promised_structure() {
        let slo = SloTable::paper(4.0).unwrap();
        let cfg = RedbenchConfig { days: 7, queries_per_day: 5000.0, tenants: 3, start_weekday: 0, seed: 9 };
        let w = redbench_workload(&cfg, &slo).unwrap();
        let q = w.queries();
        assert_eq!(w, redbench_workload(&cfg, &slo).unwrap(), "seeded");
        // Volume near the target on weekdays, lower at the weekend.
        let per_day: Vec<usize> = (0..7).map(|d| q.iter().filter(|x| (x.arrival / DAY) as u32 == d).count()).collect();
        for d in 0..5 {
            assert!((per_day[d] as f64 - 5000.0).abs() < 1500.0, "{per_day:?}");
        }
        assert!(per_day[5] < per_day[2] && per_day[6] < per_day[2], "{per_day:?}");
        // Diurnal: the busiest hour has several times the traffic of the quietest.
        let mut hours = [0usize; 24];
        q.iter().filter(|x| x.arrival < DAY).for_each(|x| hours[(x.arrival / 3600.0) as usize] += 1);
        assert!(*hours.iter().max().unwrap() > 4 * *hours.iter().min().unwrap(), "{hours:?}");
        // All tenants and classes present; texts repeat.
        assert_eq!(w.tenants().len(), 3);
        assert_eq!(w.classes().len(), 4);
        let distinct: std::collections::HashSet<_> = q.iter().map(|x| x.text).collect();
        assert!(distinct.len() < q.len() / 20);
        // Reports recur at the same second of day on consecutive weekdays.
        let report = w.classes().iter().position(|c| c == "report").unwrap() as u32;
        let first = |d: u32| q.iter().find(|x| x.class == report && x.tenant == 0 && (x.arrival / DAY) as u32 == d && (x.arrival % DAY) < 10.0 * 3600.0).map(|x| x.arrival % DAY);
        assert_eq!(first(1), first(2));
        assert!(redbench_workload(&RedbenchConfig { days: 0, ..cfg.clone() }, &slo).is_err());
    }
}
