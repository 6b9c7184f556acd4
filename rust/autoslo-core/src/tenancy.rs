//! Tenancy: fairness across tenant × class populations, admission with typed rejections
//! ([`admission`]), an admission queue with a bounded wait ([`queue`]), reservations for premium tenants ([`reservation`]), a resource rate card for chargeback, and the multi-tenant analytics case's
//! fixture (002_… in `shared/seeds`, "Canopy").
//!
//! Cost attribution of a run's bill to its queries is [`crate::trace::attribute_cost_by_work`];
//! per-tenant sums are [`crate::trace::Trace::chargeback`].

pub mod admission;
pub mod queue;
pub mod reservation;
pub mod sharing;
pub mod slo_policy;

pub use admission::{Admission, AdmissionDecision, BudgetAdmission, BudgetStatus, DeadlineAdmission, NamedAdmission};
pub use queue::{AdmissionQueue, Deferral, Offer, QueueSettings, Release};
pub use reservation::{Reservation, ReservedRouter};
pub use sharing::{Share, Sharing, SharingPolicy};
pub use slo_policy::{DeadlineRule, SloPolicy, TemplateRule};

use serde::Serialize;

use crate::error::{AutoSloError, Result};

/// Jain's fairness index of non-negative values: (Σx)² / (n Σx²), in [1/n, 1]; 1 when all are
/// equal. It compresses disparity into one number, so reports show it beside the per-population
/// values, never instead of them.
pub fn jain_index(values: &[f64]) -> Result<f64> {
    if values.is_empty() {
        return Err(AutoSloError::InvalidConfig("Jain's index needs at least one value".into()));
    }
    if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v >= 0.0)) {
        return Err(AutoSloError::out_of_range(format!("value {i} of Jain's index"), "finite and ≥ 0", v));
    }
    let sum: f64 = values.iter().sum();
    let sq: f64 = values.iter().map(|v| v * v).sum();
    Ok(if sq == 0.0 { 1.0 } else { sum * sum / (values.len() as f64 * sq) })
}

/// One query's physical demand at named boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Demand {
    pub cpu_core_s: f64,
    pub scan_gib: f64,
    pub shuffle_gib: f64,
    pub spill_gib: f64,
    /// Peak memory × duration.
    pub memory_gib_s: f64,
}

/// A versioned resource rate card: dollars per unit of each demand, plus a fixed overhead per
/// admitted query.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateCard {
    pub cpu_core_s: f64,
    pub scan_gib: f64,
    pub shuffle_gib: f64,
    pub spill_gib: f64,
    pub memory_gib_s: f64,
    pub admitted_query: f64,
}

impl RateCard {
    /// The case's teaching rates (not market prices).
    pub const CANOPY: RateCard = RateCard { cpu_core_s: 0.000012, scan_gib: 0.000020, shuffle_gib: 0.000030, spill_gib: 0.000025, memory_gib_s: 0.0000003, admitted_query: 0.0000008 };

    /// Dollars for one admitted query of demand `d`.
    pub fn query_cost(&self, d: &Demand) -> f64 {
        d.cpu_core_s * self.cpu_core_s + d.scan_gib * self.scan_gib + d.shuffle_gib * self.shuffle_gib + d.spill_gib * self.spill_gib + d.memory_gib_s * self.memory_gib_s + self.admitted_query
    }
}

/// One workload class of the case.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClassSpec {
    pub class: &'static str,
    pub rate_per_s: f64,
    pub cpu_core_s: f64,
    pub scan_gib: f64,
    /// Mean duration (s) and peak memory per query (GiB).
    pub duration_s: f64,
    pub peak_memory_gib: f64,
    pub shuffle_gib: f64,
    pub spill_gib: f64,
}

impl ClassSpec {
    pub fn demand(&self) -> Demand {
        Demand { cpu_core_s: self.cpu_core_s, scan_gib: self.scan_gib, shuffle_gib: self.shuffle_gib, spill_gib: self.spill_gib, memory_gib_s: self.peak_memory_gib * self.duration_s }
    }
}

/// The case's four classes. Rates, CPU, scan, dashboards' duration (0.84 s) and every class's
/// live-query count are stated in the case; peak memory is its live memory over its live
/// queries; shuffle and spill are inferred from the stated per-query costs (the round-number
/// solution; only their priced sum is determined).
pub const CANOPY_CLASSES: [ClassSpec; 4] = [
    ClassSpec { class: "dashboard", rate_per_s: 420.0, cpu_core_s: 0.38, scan_gib: 0.18, duration_s: 0.84, peak_memory_gib: 0.25, shuffle_gib: 0.04, spill_gib: 0.0 },
    ClassSpec { class: "adhoc", rate_per_s: 24.0, cpu_core_s: 5.5, scan_gib: 7.0, duration_s: 12.0, peak_memory_gib: 4.0, shuffle_gib: 2.0, spill_gib: 1.0 },
    ClassSpec { class: "report", rate_per_s: 1.2, cpu_core_s: 55.0, scan_gib: 40.0, duration_s: 120.0, peak_memory_gib: 8.0, shuffle_gib: 12.0, spill_gib: 8.0 },
    ClassSpec { class: "backfill", rate_per_s: 0.08, cpu_core_s: 800.0, scan_gib: 500.0, duration_s: 900.0, peak_memory_gib: 16.0, shuffle_gib: 120.0, spill_gib: 80.0 },
];

/// A latency histogram as (upper bound of a bucket in s, queries in it), buckets ascending.
pub type Buckets<'a> = &'a [(f64, u64)];

/// The bucket bound holding quantile `q` of a bucketed population (rank ⌈q n⌉, nearest rank).
pub fn bucket_quantile(buckets: Buckets<'_>, q: f64) -> Result<f64> {
    let n: u64 = buckets.iter().map(|b| b.1).sum();
    if n == 0 || !(0.0..=1.0).contains(&q) {
        return Err(AutoSloError::InvalidConfig(format!("a quantile needs a non-empty population and q in [0, 1] (got {n} queries, q = {q})")));
    }
    let rank = ((q * n as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for &(bound, count) in buckets {
        seen += count;
        if seen >= rank {
            return Ok(bound);
        }
    }
    Ok(buckets[buckets.len() - 1].0)
}

/// Per-class lines of the case's capacity arithmetic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CanopyClassLine {
    pub class: &'static str,
    pub rate_per_s: f64,
    pub cpu_cores: f64,
    pub scan_gib_per_s: f64,
    pub live_queries: f64,
    pub live_memory_gib: f64,
    pub cost_per_query: f64,
    pub cost_per_day: f64,
}

/// The case's fixture arithmetic, recomputed from its inputs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CanopyReport {
    pub classes: Vec<CanopyClassLine>,
    pub queries_per_s: f64,
    pub cpu_cores: f64,
    /// CPU demand over the safe envelope (70 % of 800 cores).
    pub cpu_share_of_safe: f64,
    pub scan_gib_per_s: f64,
    /// Scan demand over the safe envelope (70 % of 2,000 GiB/s).
    pub scan_share_of_safe: f64,
    pub unconstrained_memory_gib: f64,
    pub safe_memory_gib: f64,
    pub global_dashboard_p99_s: f64,
    pub aster_dashboard_p99_s: f64,
    pub jain_baseline: f64,
    pub jain_selected: f64,
    pub cost_per_day: f64,
    pub rate_card: RateCard,
}

/// Recompute the case's fixture: capacity, memory, the global-versus-tenant p99, fairness and
/// the daily cost from the rate card.
pub fn canopy() -> Result<CanopyReport> {
    const DAY_S: f64 = 86_400.0;
    let card = RateCard::CANOPY;
    let classes: Vec<CanopyClassLine> = CANOPY_CLASSES
        .iter()
        .map(|c| {
            let cost = card.query_cost(&c.demand());
            CanopyClassLine {
                class: c.class,
                rate_per_s: c.rate_per_s,
                cpu_cores: c.rate_per_s * c.cpu_core_s,
                scan_gib_per_s: c.rate_per_s * c.scan_gib,
                live_queries: c.rate_per_s * c.duration_s,
                live_memory_gib: c.rate_per_s * c.duration_s * c.peak_memory_gib,
                cost_per_query: cost,
                cost_per_day: cost * c.rate_per_s * DAY_S,
            }
        })
        .collect();
    let sum = |f: fn(&CanopyClassLine) -> f64| classes.iter().map(f).sum::<f64>();
    let (cpu, scan) = (sum(|c| c.cpu_cores), sum(|c| c.scan_gib_per_s));
    // One million dashboard queries: 970,000 by 0.8 s, 22,000 more by 1.1 s, 8,000 by 8.4 s;
    // Aster's 8,000 of them: 6,000 by 0.8 s and 2,000 by 8.4 s.
    let global = [(0.8, 970_000), (1.1, 22_000), (8.4, 8_000)];
    let aster = [(0.8, 6_000), (1.1, 0), (8.4, 2_000)];
    Ok(CanopyReport {
        queries_per_s: sum(|c| c.rate_per_s),
        cpu_cores: cpu,
        cpu_share_of_safe: cpu / (0.70 * 800.0),
        scan_gib_per_s: scan,
        scan_share_of_safe: scan / 1_400.0,
        unconstrained_memory_gib: sum(|c| c.live_memory_gib),
        safe_memory_gib: 0.75 * 3_200.0,
        global_dashboard_p99_s: bucket_quantile(&global, 0.99)?,
        aster_dashboard_p99_s: bucket_quantile(&aster, 0.99)?,
        jain_baseline: jain_index(&[0.91, 0.98, 0.99, 0.72])?,
        jain_selected: jain_index(&[0.993, 0.988, 0.991, 0.982])?,
        cost_per_day: sum(|c| c.cost_per_day),
        rate_card: card,
        classes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_bounds_and_errors() {
        assert_eq!(jain_index(&[0.5, 0.5, 0.5]).unwrap(), 1.0);
        assert!((jain_index(&[1.0, 0.0, 0.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(jain_index(&[0.0, 0.0]).unwrap(), 1.0);
        assert!(jain_index(&[]).is_err());
        assert!(jain_index(&[0.5, -0.1]).unwrap_err().to_string().contains("value 1"));
        assert!(jain_index(&[f64::NAN]).is_err());
    }

    #[test]
    fn the_case_fixture_reproduces() {
        let r = canopy().unwrap();
        let close = |a: f64, b: f64, tol: f64| (a - b).abs() <= tol;
        assert!(close(r.queries_per_s, 445.28, 1e-9), "{}", r.queries_per_s);
        assert!(close(r.cpu_cores, 421.6, 1e-9) && close(r.scan_gib_per_s, 331.6, 1e-9));
        assert!(close(r.cpu_share_of_safe, 0.753, 5e-4) && close(r.scan_share_of_safe, 0.237, 5e-4));
        assert!(close(r.unconstrained_memory_gib, 3_544.2, 1e-9));
        assert_eq!((r.global_dashboard_p99_s, r.aster_dashboard_p99_s), (1.1, 8.4));
        assert!(close(r.jain_baseline, 0.9857, 5e-5) && close(r.jain_selected, 0.99998, 5e-6));
        let per_query: Vec<f64> = r.classes.iter().map(|c| c.cost_per_query).collect();
        for (got, want) in per_query.iter().zip([0.000010223, 0.0003062, 0.0023088, 0.0295208]) {
            assert!(close(*got, want, 1e-12), "{got} vs {want}");
        }
        assert!(close(r.cost_per_day, 1_449.33, 0.005), "{}", r.cost_per_day);
        let live: Vec<f64> = r.classes.iter().map(|c| c.live_queries).collect();
        assert!(live.iter().zip([352.8, 288.0, 144.0, 72.0]).all(|(a, b)| close(*a, b, 1e-9)));
    }

    #[test]
    fn bucket_quantiles_take_the_nearest_rank() {
        assert_eq!(bucket_quantile(&[(1.0, 99), (2.0, 1)], 0.99).unwrap(), 1.0);
        assert_eq!(bucket_quantile(&[(1.0, 98), (2.0, 2)], 0.99).unwrap(), 2.0);
        assert!(bucket_quantile(&[(1.0, 0)], 0.5).is_err());
        assert!(bucket_quantile(&[(1.0, 3)], 1.5).is_err());
    }
}
