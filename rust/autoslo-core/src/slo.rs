//! Per-query latency SLOs.
//!
//! The paper's rule (§8.1.3): the SLO of a query of template t is κ × ℓ_baseline(t), where
//! ℓ_baseline(t) is the maximum latency of t observed in a closed-loop BaseWorkload run on one
//! 16-RPU workgroup (`slo_baseline_rpu16_p100.yml`, bundled). Users can replace the baseline per
//! template and override the rule per workload class, either with another κ or with an absolute
//! latency in seconds.

use std::collections::BTreeMap;

use crate::error::{AutoSloError, Result};

const BASELINE_CSV: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../python/autoslo/data/slo_baseline_rpu16.csv"));

/// Which aggregate of the closed-loop baseline run defines ℓ_baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaselineAggregate {
    /// Maximum latency (the paper's rule).
    P100,
    Mean,
    P50,
}

/// How a class's SLO is set instead of the default rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClassRule {
    /// κ × baseline with this κ.
    Kappa(f64),
    /// A fixed latency in seconds.
    Seconds(f64),
}

/// An SLO table: a per-template baseline, a default κ, and optional per-class rules.
#[derive(Debug, Clone, PartialEq)]
pub struct SloTable {
    baseline: BTreeMap<u16, f64>,
    kappa: f64,
    class_rules: BTreeMap<String, ClassRule>,
}

fn check_positive(what: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(AutoSloError::out_of_range(what, "a positive finite number", v))
    }
}

/// The bundled per-template baseline latencies (s) from the 16-RPU closed-loop run.
pub fn paper_baseline(aggregate: BaselineAggregate) -> BTreeMap<u16, f64> {
    let col = match aggregate {
        BaselineAggregate::P100 => 1,
        BaselineAggregate::Mean => 2,
        BaselineAggregate::P50 => 3,
    };
    BASELINE_CSV
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].parse::<u16>().expect("bundled baseline"), f[col].parse::<f64>().expect("bundled baseline"))
        })
        .collect()
}

impl SloTable {
    /// The paper's rule: κ × the p100 baseline of the bundled 16-RPU run.
    pub fn paper(kappa: f64) -> Result<Self> {
        Self::new(paper_baseline(BaselineAggregate::P100), kappa)
    }

    /// κ × a user-supplied per-template baseline (seconds).
    pub fn new(baseline: BTreeMap<u16, f64>, kappa: f64) -> Result<Self> {
        check_positive("κ (SLO multiplier)", kappa)?;
        for (&t, &v) in &baseline {
            check_positive(&format!("baseline latency of template {t}"), v)?;
        }
        Ok(SloTable { baseline, kappa, class_rules: BTreeMap::new() })
    }

    /// Replace the baseline of some templates (others keep theirs).
    pub fn with_template_baselines(mut self, overrides: &BTreeMap<u16, f64>) -> Result<Self> {
        for (&t, &v) in overrides {
            self.baseline.insert(t, check_positive(&format!("baseline latency of template {t}"), v)?);
        }
        Ok(self)
    }

    /// Set the rule of a workload class.
    pub fn with_class_rule(mut self, class: &str, rule: ClassRule) -> Result<Self> {
        match rule {
            ClassRule::Kappa(k) => check_positive(&format!("κ of class `{class}`"), k)?,
            ClassRule::Seconds(s) => check_positive(&format!("SLO of class `{class}`"), s)?,
        };
        self.class_rules.insert(class.to_string(), rule);
        Ok(self)
    }

    /// The default κ.
    pub fn kappa(&self) -> f64 {
        self.kappa
    }

    /// The SLO (s) of a query of `template` in `class`.
    pub fn slo(&self, template: u16, class: &str) -> Result<f64> {
        let missing = || AutoSloError::MissingSlo { template, class: class.to_string() };
        match self.class_rules.get(class) {
            Some(ClassRule::Seconds(s)) => Ok(*s),
            Some(ClassRule::Kappa(k)) => Ok(k * self.baseline.get(&template).ok_or_else(missing)?),
            None => Ok(self.kappa * self.baseline.get(&template).ok_or_else(missing)?),
        }
    }
}

/// `BestWithTarget` (§2): the index of the lexicographic minimum of (max(0, v − τ), k) over
/// (violation rate v, cost k) pairs; the first index among exact ties. `None` when empty.
/// NaN values sort last (`total_cmp`).
pub fn best_with_target(points: &[(f64, f64)], tau: f64) -> Option<usize> {
    let key = |&(v, k): &(f64, f64)| ((v - tau).max(0.0), k);
    let mut best: Option<usize> = None;
    for (i, p) in points.iter().enumerate() {
        let better = match best {
            None => true,
            Some(b) => {
                let (x, y) = (key(p), key(&points[b]));
                x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)).is_lt()
            }
        };
        if better {
            best = Some(i);
        }
    }
    best
}

/// BestWithTarget with a cost tolerance (**a change**, used by the Configuration Tuner when
/// `cost_tolerance` > 0): among the points that meet τ, those within `cost_tolerance` (a
/// fraction) of the cheapest of them are near-equal in cost, and the one with the fewest
/// violations wins (then the cheaper, then the first). Without a point that meets τ, or with a
/// tolerance of 0, it is [`best_with_target`]. The Workload Simulator is optimistic about
/// violations and its cost figures differ from the warehouse's by more than a few per cent
/// (`docs/tuner.md`), so a cheaper configuration that "also meets τ" is often not the better one.
pub fn best_with_target_within(points: &[(f64, f64)], tau: f64, cost_tolerance: f64) -> Option<usize> {
    let cheapest = points.iter().filter(|p| p.0 <= tau).map(|p| p.1).min_by(f64::total_cmp);
    let (Some(cheapest), true) = (cheapest, cost_tolerance > 0.0) else { return best_with_target(points, tau) };
    let limit = cheapest + cost_tolerance * cheapest.abs();
    (0..points.len()).filter(|&i| points[i].0 <= tau && points[i].1 <= limit).min_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(points[a].1.total_cmp(&points[b].1)).then(a.cmp(&b)))
}

/// Every index in BestWithTarget order (lexicographic in (max(0, v − τ), k), then index), with
/// [`best_with_target_within`]'s choice moved to the front: the Configuration Tuner's top k on
/// training. With a tolerance of 0 it is the BestWithTarget order itself.
pub fn rank_with_target(points: &[(f64, f64)], tau: f64, cost_tolerance: f64) -> Vec<usize> {
    let key = |&(v, k): &(f64, f64)| ((v - tau).max(0.0), k);
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (key(&points[a]), key(&points[b]));
        x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)).then(a.cmp(&b))
    });
    if let Some(lead) = best_with_target_within(points, tau, cost_tolerance) {
        order.retain(|&i| i != lead);
        order.insert(0, lead);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_tolerance_prefers_fewer_violations_among_near_equal_costs() {
        let pts = [(0.08, 100.0), (0.02, 102.0), (0.01, 110.0), (0.2, 50.0)];
        // Literal: the cheapest that meets τ.
        assert_eq!(best_with_target_within(&pts, 0.1, 0.0), Some(0));
        assert_eq!(best_with_target_within(&pts, 0.1, 0.0), best_with_target(&pts, 0.1));
        // 3 %: 102 is within it, 110 is not.
        assert_eq!(best_with_target_within(&pts, 0.1, 0.03), Some(1));
        assert_eq!(best_with_target_within(&pts, 0.1, 0.1), Some(2));
        // Nothing meets τ: the literal rule (the smallest excess).
        assert_eq!(best_with_target_within(&[(0.3, 1.0), (0.2, 9.0)], 0.1, 0.05), Some(1));
        // Equal violations within the tolerance: the cheaper, then the first.
        assert_eq!(best_with_target_within(&[(0.05, 101.0), (0.05, 100.0), (0.05, 100.0)], 0.1, 0.05), Some(1));
        assert_eq!(best_with_target_within(&[], 0.1, 0.05), None);
        // The ranking: the tolerant choice, then the rest in BestWithTarget order.
        assert_eq!(rank_with_target(&pts, 0.1, 0.1), vec![2, 0, 1, 3]);
        assert_eq!(rank_with_target(&pts, 0.1, 0.0), vec![0, 1, 2, 3]);
        // With no tolerance, the head of the ranking is BestWithTarget's choice.
        let mixed = [(0.3, 5.0), (0.05, 9.0), (0.0, 9.0), (0.12, 1.0), (0.05, 8.0)];
        assert_eq!(rank_with_target(&mixed, 0.1, 0.0), vec![4, 1, 2, 3, 0]);
        assert_eq!(Some(4), best_with_target(&mixed, 0.1));
    }

    #[test]
    fn best_with_target_meets_the_target_first_then_cost() {
        // Both under τ = 0.1: the cheaper wins even with more violations.
        assert_eq!(best_with_target(&[(0.05, 10.0), (0.0, 12.0)], 0.1), Some(0));
        // Over τ: the smaller excess wins whatever the cost.
        assert_eq!(best_with_target(&[(0.5, 1.0), (0.2, 50.0), (0.3, 2.0)], 0.1), Some(1));
        // Exact ties: the first.
        assert_eq!(best_with_target(&[(0.0, 3.0), (0.05, 3.0)], 0.1), Some(0));
        assert_eq!(best_with_target(&[], 0.1), None);
    }

    #[test]
    fn paper_rule_and_overrides() {
        let t = SloTable::paper(2.0).unwrap();
        assert!((t.slo(1, "adhoc").unwrap() - 2.0 * 3.204).abs() < 1e-12);
        assert_eq!(paper_baseline(BaselineAggregate::P100).len(), 99);
        let t = t.with_class_rule("dashboard", ClassRule::Seconds(5.0)).unwrap().with_class_rule("backfill", ClassRule::Kappa(10.0)).unwrap();
        assert_eq!(t.slo(4, "dashboard").unwrap(), 5.0);
        assert!((t.slo(1, "backfill").unwrap() - 32.04).abs() < 1e-9);
        assert!(matches!(t.slo(100, "adhoc"), Err(AutoSloError::MissingSlo { template: 100, .. })));
        assert!(SloTable::paper(0.0).is_err());
        assert!(SloTable::paper(2.0).unwrap().with_class_rule("x", ClassRule::Seconds(f64::NAN)).is_err());
    }
}
