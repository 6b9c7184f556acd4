//! Outlier ejection: protect new work from a destination whose observed service time
//! persistently exceeds prediction. The signal is service time (queue wait excluded) relative to
//! the prediction for the same request, so an expensive but correctly predicted request is no
//! evidence. A destination is ejected only after `min_samples` observations, only while the
//! ejected fraction stays within `max_ejected_fraction`, and returns in stages: its k-th
//! consecutive ejection lasts `base_ejection_s` × 2^(k−1), and after re-entry it must gather
//! fresh evidence before it can be ejected again. Ejection does not repair a destination, and
//! it shrinks capacity: the bound keeps a shared slowdown from ejecting the whole fleet.

use crate::error::{AutoSloError, Result};

/// When to eject and for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EjectionPolicy {
    /// Observations needed (since the last ejection or re-entry) before ejecting.
    pub min_samples: usize,
    /// Eject when the running observed/predicted service ratio exceeds this.
    pub ratio: f64,
    /// Weight of a new observation in the running ratio.
    pub alpha: f64,
    /// At most this fraction of destinations ejected at once (rounded down).
    pub max_ejected_fraction: f64,
    pub base_ejection_s: f64,
}

impl Default for EjectionPolicy {
    fn default() -> Self {
        Self { min_samples: 200, ratio: 2.0, alpha: 0.02, max_ejected_fraction: 0.2, base_ejection_s: 30.0 }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Health {
    ratio: f64,
    samples: usize,
    ejected_until: Option<f64>,
    /// Consecutive ejections (reset after a healthy stretch as long as the last ejection).
    streak: u32,
    healthy_since: f64,
}

/// Per-destination outlier detection with bounded, staged ejection.
#[derive(Debug, Clone)]
pub struct OutlierEjector {
    pub policy: EjectionPolicy,
    health: Vec<Health>,
    /// (time, destination, seconds) of every ejection.
    pub ejections: Vec<(f64, usize, f64)>,
}

impl OutlierEjector {
    pub fn new(destinations: usize, policy: EjectionPolicy) -> Result<Self> {
        if !(policy.ratio > 1.0 && policy.alpha > 0.0 && policy.alpha <= 1.0 && (0.0..=1.0).contains(&policy.max_ejected_fraction) && policy.base_ejection_s > 0.0) {
            return Err(AutoSloError::InvalidConfig(format!("ejection policy out of range: {policy:?}")));
        }
        Ok(Self { policy, health: vec![Health { ratio: 1.0, ..Health::default() }; destinations], ejections: Vec::new() })
    }

    /// Whether destination `d` may receive new work at `now` (re-entering it if its ejection ended).
    pub fn eligible(&mut self, d: usize, now: f64) -> bool {
        let h = &mut self.health[d];
        match h.ejected_until {
            Some(t) if now < t => false,
            Some(_) => {
                h.ejected_until = None;
                h.samples = 0;
                h.ratio = 1.0;
                h.healthy_since = now;
                true
            }
            None => true,
        }
    }

    fn ejected_now(&self, now: f64) -> usize {
        self.health.iter().filter(|h| h.ejected_until.is_some_and(|t| now < t)).count()
    }

    /// Record one request's service time on `d` against its prediction.
    pub fn record(&mut self, d: usize, predicted_s: f64, observed_s: f64, now: f64) {
        if !(predicted_s > 0.0 && observed_s.is_finite() && observed_s >= 0.0) {
            return;
        }
        let p = self.policy;
        let allowed = (p.max_ejected_fraction * self.health.len() as f64).floor() as usize;
        let ejected = self.ejected_now(now);
        let h = &mut self.health[d];
        if h.ejected_until.is_some() {
            return; // work placed before the ejection, still finishing
        }
        h.ratio += p.alpha * (observed_s / predicted_s - h.ratio);
        h.samples += 1;
        if h.streak > 0 && now - h.healthy_since >= p.base_ejection_s * f64::from(1u32 << (h.streak - 1).min(20)) && h.ratio <= p.ratio {
            h.streak = 0;
        }
        if h.samples >= p.min_samples && h.ratio > p.ratio && ejected < allowed {
            h.streak += 1;
            let seconds = p.base_ejection_s * f64::from(1u32 << (h.streak - 1).min(20));
            h.ejected_until = Some(now + seconds);
            self.ejections.push((now, d, seconds));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_destination_is_ejected_after_enough_evidence_then_reenters_in_stages() {
        let p = EjectionPolicy { min_samples: 10, base_ejection_s: 10.0, ..Default::default() };
        let mut e = OutlierEjector::new(5, p).unwrap();
        let mut t = 0.0;
        // Destination 2 serves 3x slower than predicted; the others as predicted.
        while e.ejections.is_empty() {
            for d in 0..5 {
                if e.eligible(d, t) {
                    e.record(d, 1.0, if d == 2 { 3.0 } else { 1.0 }, t);
                }
            }
            t += 0.1;
        }
        assert_eq!(e.ejections[0].1, 2);
        assert!(!e.eligible(2, t) && e.eligible(2, t + 10.0));
        // Still slow after re-entry: the second ejection lasts twice as long.
        let mut t2 = t + 10.0;
        while e.ejections.len() < 2 {
            if e.eligible(2, t2) {
                e.record(2, 1.0, 3.0, t2);
            }
            t2 += 0.1;
        }
        assert_eq!(e.ejections[1].2, 20.0);
    }

    #[test]
    fn ejection_is_bounded_so_a_shared_slowdown_cannot_empty_the_fleet() {
        let mut e = OutlierEjector::new(5, EjectionPolicy { min_samples: 5, ..Default::default() }).unwrap();
        for i in 0..100 {
            for d in 0..5 {
                if e.eligible(d, f64::from(i)) {
                    e.record(d, 1.0, 4.0, f64::from(i));
                }
            }
        }
        assert_eq!(e.ejections.iter().filter(|x| x.0 < 30.0).count(), 1, "20 % of 5 destinations: one at a time");
        assert!(OutlierEjector::new(3, EjectionPolicy { ratio: 0.5, ..Default::default() }).is_err());
    }
}
