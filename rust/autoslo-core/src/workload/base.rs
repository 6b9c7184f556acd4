//! The paper's `BaseWorkload(λ)` (§8.1.2) and the "phased" variants used for training (§8.3.2).

use super::{Query, Workload, DEFAULT_TENANT};
use crate::catalog::{QueryText, NUM_INSTANCES, NUM_TEMPLATES};
use crate::error::{AutoSloError, Result};
use crate::rng::Rng;
use crate::slo::SloTable;

/// Copies per template in BaseWorkload.
pub const BASE_COPIES: u16 = 3;

/// The 297 query texts of BaseWorkload, shuffled. The paper says "3 copies of one query per
/// template"; the real runs behind `concurrent_latencies.csv` show every run issuing parameter
/// instances 001, 002 and 003 of each template in equal numbers, so the three copies are the
/// template's three measured instances.
fn shuffled_texts(rng: &mut Rng) -> Vec<QueryText> {
    let mut texts: Vec<QueryText> =
        (1..=NUM_TEMPLATES).flat_map(|template| (1..=BASE_COPIES.min(NUM_INSTANCES)).map(move |instance| QueryText { template, instance })).collect();
    rng.shuffle(&mut texts);
    texts
}

fn check_rate(what: &str, rate: f64) -> Result<()> {
    if rate.is_finite() && rate > 0.0 {
        Ok(())
    } else {
        Err(AutoSloError::out_of_range(what, "a positive rate in queries/s", rate))
    }
}

fn build(texts: Vec<QueryText>, arrivals: Vec<f64>, slo: &SloTable) -> Result<Workload> {
    let queries = texts
        .into_iter()
        .zip(arrivals)
        .enumerate()
        .map(|(i, (text, arrival))| Ok(Query { id: i as u64, arrival, text, tenant: 0, class: 0, slo: slo.slo(text.template, "adhoc")? }))
        .collect::<Result<Vec<_>>>()?;
    Workload::new(queries, vec![DEFAULT_TENANT.into()], vec!["adhoc".into()])
}

/// `BaseWorkload(λ)`: 3 copies of one query per template (297), shuffled, issued by a Poisson
/// process of rate `rate` queries/s starting at t = 0. Seeded. O(n).
pub fn base_workload(rate: f64, seed: u64, slo: &SloTable) -> Result<Workload> {
    check_rate("BaseWorkload rate λ", rate)?;
    let mut rng = Rng::new(seed);
    let texts = shuffled_texts(&mut rng);
    let mut t = 0.0;
    let arrivals = (0..texts.len())
        .map(|i| {
            if i > 0 {
                t += rng.exponential(rate);
            }
            t
        })
        .collect();
    build(texts, arrivals, slo)
}

/// A phased BaseWorkload (§8.3.2): the same 297 shuffled queries, alternating between `x`
/// queries at λ = `rate_low` and 10 queries at λ = `rate_high`.
pub fn phased_workload(x: usize, rate_low: f64, rate_high: f64, seed: u64, slo: &SloTable) -> Result<Workload> {
    check_rate("phased low rate", rate_low)?;
    check_rate("phased high rate", rate_high)?;
    if x == 0 {
        return Err(AutoSloError::out_of_range("phased low-phase length x", "≥ 1", 0));
    }
    const HIGH_LEN: usize = 10;
    let mut rng = Rng::new(seed);
    let texts = shuffled_texts(&mut rng);
    let mut t = 0.0;
    let arrivals = (0..texts.len())
        .map(|i| {
            let rate = if i % (x + HIGH_LEN) < x { rate_low } else { rate_high };
            if i > 0 {
                t += rng.exponential(rate);
            }
            t
        })
        .collect();
    build(texts, arrivals, slo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_workload_is_the_papers() {
        let slo = SloTable::paper(4.0).unwrap();
        let w = base_workload(0.1, 3, &slo).unwrap();
        assert_eq!(w.len(), 297);
        for t in 1..=99u16 {
            let mut inst: Vec<u16> = w.queries().iter().filter(|q| q.text.template == t).map(|q| q.text.instance).collect();
            inst.sort();
            assert_eq!(inst, vec![1, 2, 3]);
        }
        // Mean interarrival ≈ 1/λ = 10 s.
        let mean_gap = w.horizon() / 296.0;
        assert!((mean_gap - 10.0).abs() < 2.0, "{mean_gap}");
        assert_eq!(w, base_workload(0.1, 3, &slo).unwrap());
        assert_ne!(w, base_workload(0.1, 4, &slo).unwrap());
        assert!(base_workload(0.0, 1, &slo).is_err());
        assert!(base_workload(f64::NAN, 1, &slo).is_err());
    }

    #[test]
    fn phased_alternates_rates() {
        let slo = SloTable::paper(2.0).unwrap();
        let w = phased_workload(40, 0.05, 0.5, 1, &slo).unwrap();
        let q = w.queries();
        let gap = |range: std::ops::Range<usize>| range.clone().map(|i| q[i].arrival - q[i - 1].arrival).sum::<f64>() / range.len() as f64;
        let low: f64 = (0..5).map(|k| gap(k * 50 + 1..k * 50 + 40)).sum::<f64>() / 5.0;
        let high: f64 = (0..5).map(|k| gap(k * 50 + 40..k * 50 + 50)).sum::<f64>() / 5.0;
        assert!(low > 5.0 * high, "low {low} high {high}");
    }
}
