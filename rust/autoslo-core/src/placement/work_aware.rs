//! Work-aware placement: balance estimated remaining work, not request counts.
//!
//! Each destination has a measured capacity (work per second it sustains) and an estimate of
//! the work already committed to it. A request's cost is estimated from its class (features
//! known before expensive work), corrected online from observed service, and bounded. Two
//! eligible destinations are sampled (the request's home, if it has an eligible one, is always
//! one of them) and the request goes to the lower predicted pressure
//! P = (remaining + estimate) / capacity, the home's estimate reduced by the locality credit.
//! Eligibility (hard constraints, ejection) is decided before scoring, never inside the score.
//! When some eligible destination has no telemetry, placement falls back to weighted random by
//! capacity.

use crate::error::{AutoSloError, Result};
use crate::rng::Rng;

/// What the placer knows about one destination.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Destination {
    /// Sustainable work per second (e.g. CPU ms per s).
    pub capacity: f64,
    /// Estimated work committed and not yet done (`None`: telemetry missing).
    pub remaining: Option<f64>,
    /// Hard constraints and ejection: an ineligible destination is never chosen.
    pub eligible: bool,
}

/// How a request was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Two eligible candidates were compared; `chosen` had the lower pressure.
    TwoChoices { chosen: usize, other: usize },
    /// Only one destination was eligible.
    Only(usize),
    /// Telemetry was missing: weighted random by capacity.
    WeightedRandom(usize),
}

impl Placement {
    pub fn destination(self) -> usize {
        match self {
            Placement::TwoChoices { chosen, .. } | Placement::Only(chosen) | Placement::WeightedRandom(chosen) => chosen,
        }
    }
}

/// Work-aware power-of-two-choices placement with per-class cost estimates.
#[derive(Debug, Clone)]
pub struct WorkAwarePlacer {
    rng: Rng,
    class_mean: Vec<f64>,
    /// Weight of a new observation in a class's running mean.
    pub alpha: f64,
    /// Upper bound on any single estimate (a missing or wild prediction cannot claim more).
    pub max_estimate: f64,
    /// Fraction of the estimate credited when the home destination is chosen (work it avoids).
    pub locality_credit: f64,
}

impl WorkAwarePlacer {
    /// `class_seed`: the measured mean service demand of each class, before any observation.
    pub fn new(class_seed: Vec<f64>, max_estimate: f64, locality_credit: f64, seed: u64) -> Result<Self> {
        if class_seed.is_empty() || class_seed.iter().any(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(AutoSloError::InvalidConfig("every class needs a positive finite seed cost".into()));
        }
        if !max_estimate.is_finite() || max_estimate <= 0.0 || !(0.0..1.0).contains(&locality_credit) {
            return Err(AutoSloError::InvalidConfig(format!("max_estimate must be > 0 and locality_credit in [0, 1) (got {max_estimate}, {locality_credit})")));
        }
        Ok(Self { rng: Rng::new(seed), class_mean: class_seed, alpha: 0.01, max_estimate, locality_credit })
    }

    /// The bounded cost estimate of a request of `class` (a per-request `predicted` cost, if
    /// any, else the class's running mean; an unknown class gets the bound).
    pub fn estimate(&self, class: usize, predicted: Option<f64>) -> f64 {
        predicted.filter(|p| p.is_finite() && *p >= 0.0).or_else(|| self.class_mean.get(class).copied()).unwrap_or(self.max_estimate).min(self.max_estimate)
    }

    /// Correct `class`'s running mean with an observed service demand.
    pub fn observe(&mut self, class: usize, cost: f64) {
        if let Some(m) = self.class_mean.get_mut(class) {
            if cost.is_finite() && cost >= 0.0 {
                *m += self.alpha * (cost - *m);
            }
        }
    }

    pub fn class_means(&self) -> &[f64] {
        &self.class_mean
    }

    /// Place a request of estimated cost `estimate` whose home destination is `home`.
    pub fn place(&mut self, dests: &[Destination], estimate: f64, home: Option<usize>) -> Result<Placement> {
        let eligible: Vec<usize> = (0..dests.len()).filter(|&i| dests[i].eligible && dests[i].capacity > 0.0).collect();
        match eligible.len() {
            0 => return Err(AutoSloError::InvalidAction("no eligible destination: admission must refuse or defer the request".into())),
            1 => return Ok(Placement::Only(eligible[0])),
            _ => {}
        }
        if eligible.iter().any(|&i| dests[i].remaining.is_none()) {
            let total: f64 = eligible.iter().map(|&i| dests[i].capacity).sum();
            let mut x = self.rng.uniform() * total;
            for &i in &eligible {
                x -= dests[i].capacity;
                if x < 0.0 {
                    return Ok(Placement::WeightedRandom(i));
                }
            }
            return Ok(Placement::WeightedRandom(eligible[eligible.len() - 1]));
        }
        let first = match home.filter(|h| eligible.contains(h)) {
            Some(h) => h,
            None => eligible[self.rng.below(eligible.len())],
        };
        let mut second = eligible[self.rng.below(eligible.len() - 1)];
        if second == first {
            second = eligible[eligible.len() - 1];
        }
        let pressure = |i: usize| {
            let est = if Some(i) == home { estimate * (1.0 - self.locality_credit) } else { estimate };
            (dests[i].remaining.unwrap_or(0.0) + est) / dests[i].capacity
        };
        let (chosen, other) = if pressure(second) < pressure(first) { (second, first) } else { (first, second) };
        Ok(Placement::TwoChoices { chosen, other })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(capacity: f64, remaining: Option<f64>, eligible: bool) -> Destination {
        Destination { capacity, remaining, eligible }
    }

    #[test]
    fn the_lower_pressure_wins_and_ineligible_destinations_never_do() {
        let mut p = WorkAwarePlacer::new(vec![1.0, 10.0], 50.0, 0.0, 7).unwrap();
        // Capacity normalises: 100 remaining on capacity 1000 beats 20 on capacity 100.
        let dests = [d(1000.0, Some(100.0), true), d(100.0, Some(20.0), true), d(1000.0, Some(0.0), false)];
        for _ in 0..50 {
            let pl = p.place(&dests, 5.0, None).unwrap();
            assert_eq!(pl.destination(), 0, "{pl:?}");
        }
        assert_eq!(p.place(&[d(1.0, Some(0.0), false), d(1.0, Some(9.0), true)], 1.0, Some(0)).unwrap(), Placement::Only(1));
        assert!(p.place(&[d(1.0, Some(0.0), false)], 1.0, None).unwrap_err().to_string().contains("no eligible destination"));
    }

    #[test]
    fn missing_telemetry_falls_back_to_weighted_random_and_estimates_are_bounded() {
        let mut p = WorkAwarePlacer::new(vec![2.0], 10.0, 0.1, 1).unwrap();
        let dests = [d(300.0, None, true), d(100.0, Some(0.0), true)];
        let n0 = (0..4000).filter(|_| matches!(p.place(&dests, 1.0, None).unwrap(), Placement::WeightedRandom(0))).count();
        assert!((n0 as f64 / 4000.0 - 0.75).abs() < 0.03, "{n0}");
        assert_eq!(p.estimate(0, Some(1e9)), 10.0);
        assert_eq!(p.estimate(0, None), 2.0);
        assert_eq!(p.estimate(7, None), 10.0);
        p.observe(0, 12.0);
        assert!(p.estimate(0, None) > 2.0);
        assert!(WorkAwarePlacer::new(vec![0.0], 1.0, 0.0, 0).is_err());
    }
}
