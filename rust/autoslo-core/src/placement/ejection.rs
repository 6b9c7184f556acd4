//! Outlier ejection: protect new work from a destination whose observed service time
//! persistently exceeds prediction, relative to its cohort (the other destinations: a bias all
//! of them share, such as a predictor that underestimates congestion, is no evidence). The signal is service time (queue wait excluded) relative to
//! the prediction for the same request, so an expensive but correctly predicted request is no
//! evidence. A destination is ejected only after `min_samples` observations, only while the
//! ejected fraction stays within `max_ejected_fraction`, and returns in stages: its k-th
//! consecutive ejection lasts `base_ejection_s` × 2^(k−1), and after re-entry it must gather
//! fresh evidence before it can be ejected again. Ejection does not repair a destination, and
//! it shrinks capacity: the bound keeps a shared slowdown from ejecting the whole fleet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::cluster::{ClusterId, ClusterInfo};
use crate::control::{route_hiding, Event, Router};
use crate::error::{AutoSloError, Result};
use crate::router::AutoSloRouter;
use crate::workload::Query;

/// When to eject and for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EjectionPolicy {
    /// Observations needed (since the last ejection or re-entry) before ejecting.
    pub min_samples: usize,
    /// Eject when the running (geometric) observed/predicted ratio exceeds this many times the
    /// cohort's (the median of the other destinations in service).
    pub ratio: f64,
    /// Weight of a new observation in the running ratio.
    pub alpha: f64,
    /// At most this fraction of destinations ejected at once (rounded down, but one may always
    /// be ejected while another remains).
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
    /// Exponentially weighted sum of ln(observed / predicted), started at 0 (see [`Health::mean`]).
    ratio: f64,
    samples: usize,
    ejected_until: Option<f64>,
    /// Consecutive ejections (reset after a healthy stretch as long as the last ejection, with
    /// `min_samples` observations since re-entry and no outlier).
    streak: u32,
    healthy_since: f64,
}

impl Health {
    /// The running mean of ln(observed / predicted), corrected for its start at 0 (divided by
    /// 1 − (1 − α)^n): without the correction a destination 3× slow looks healthy for its first
    /// few dozen samples after every (re-)entry, and is cleared on no evidence.
    fn mean(&self, alpha: f64) -> f64 {
        if self.samples == 0 {
            return 0.0;
        }
        self.ratio / (1.0 - (1.0 - alpha).powi(self.samples.min(i32::MAX as usize) as i32))
    }
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
        let checks = [
            ("ratio", "a finite factor > 1", policy.ratio.is_finite() && policy.ratio > 1.0, policy.ratio),
            ("alpha", "in (0, 1]", policy.alpha > 0.0 && policy.alpha <= 1.0, policy.alpha),
            ("max_ejected_fraction", "in [0, 1]", (0.0..=1.0).contains(&policy.max_ejected_fraction), policy.max_ejected_fraction),
            ("base_ejection_s", "a finite time > 0 s", policy.base_ejection_s.is_finite() && policy.base_ejection_s > 0.0, policy.base_ejection_s),
        ];
        if let Some((field, expected, _, got)) = checks.into_iter().find(|c| !c.2) {
            return Err(AutoSloError::out_of_range(format!("ejection policy's {field}"), expected, got));
        }
        Ok(Self { policy, health: vec![Health::default(); destinations], ejections: Vec::new() })
    }

    /// Track at least `n` destinations (new ones start healthy).
    pub fn ensure(&mut self, n: usize) {
        if self.health.len() < n {
            self.health.resize(n, Health::default());
        }
    }

    /// Whether destination `d` may receive new work at `now` (re-entering it if its ejection ended).
    pub fn eligible(&mut self, d: usize, now: f64) -> bool {
        self.ensure(d + 1);
        let h = &mut self.health[d];
        match h.ejected_until {
            Some(t) if now < t => false,
            Some(_) => {
                h.ejected_until = None;
                h.samples = 0;
                h.ratio = 0.0;
                h.healthy_since = now;
                true
            }
            None => true,
        }
    }

    /// Whether destination `d` is ejected or on probation: back in service after an ejection but
    /// not yet cleared (its streak resets only after a healthy stretch as long as its last
    /// ejection). Capacity covering for it is needed until then.
    pub fn unhealthy(&self, d: usize) -> bool {
        self.health.get(d).is_some_and(|h| h.ejected_until.is_some() || h.streak > 0)
    }

    fn ejected_now(&self, now: f64) -> usize {
        self.health.iter().filter(|h| h.ejected_until.is_some_and(|t| now < t)).count()
    }

    /// Record one request's service time on `d` against its prediction.
    pub fn record(&mut self, d: usize, predicted_s: f64, observed_s: f64, now: f64) {
        if !(predicted_s > 0.0 && observed_s.is_finite() && observed_s >= 0.0) {
            return;
        }
        self.ensure(d + 1);
        let p = self.policy;
        let n = self.health.len();
        let allowed = ((p.max_ejected_fraction * n as f64).floor() as usize).max(usize::from(p.max_ejected_fraction > 0.0)).min(n.saturating_sub(1));
        let ejected = self.ejected_now(now);
        // The cohort: the median running ratio of the other destinations in service with enough
        // samples, so a bias every destination shares is no evidence.
        let mut others: Vec<f64> = self.health.iter().enumerate().filter(|(i, o)| *i != d && o.ejected_until.is_none() && o.samples >= p.min_samples).map(|(_, o)| o.mean(p.alpha)).collect();
        others.sort_by(f64::total_cmp);
        // No cohort with evidence yet: nothing to compare with, so no ejection.
        let cohort = others.get(others.len() / 2).copied().unwrap_or(f64::INFINITY);
        let h = &mut self.health[d];
        if h.ejected_until.is_some() {
            return; // work placed before the ejection, still finishing
        }
        // Log ratios: a 3x slowdown is a shift of ln 3 whatever the query, and one wildly late
        // query cannot dominate the mean.
        h.ratio += p.alpha * ((observed_s.max(1e-9) / predicted_s).ln() - h.ratio);
        h.samples += 1;
        let outlier = h.mean(p.alpha) > p.ratio.ln() + cohort;
        // Cleared only on fresh evidence: a healthy stretch as long as the last ejection, and
        // `min_samples` observations since re-entry that are not an outlier's.
        if h.streak > 0 && h.samples >= p.min_samples && now - h.healthy_since >= p.base_ejection_s * f64::from(1u32 << (h.streak - 1).min(20)) && !outlier {
            h.streak = 0;
        }
        if h.samples >= p.min_samples && outlier && ejected < allowed {
            h.streak += 1;
            let seconds = p.base_ejection_s * f64::from(1u32 << (h.streak - 1).min(20));
            h.ejected_until = Some(now + seconds);
            self.ejections.push((now, d, seconds));
        }
    }
}

/// Outlier ejection around the AutoSLO router: each completed query's latency is compared with
/// the router's prediction for it when it was routed (later predictions are raised to the
/// elapsed time, so they would hide the very slowdown sought); an ejected cluster is hidden from routing (it
/// stays up and billed, and finishes what it runs) until it re-enters. Censored (timed-out)
/// latencies are not evidence. If every cluster that takes queries is ejected, routing ignores
/// ejection rather than fail.
pub struct EjectingRouter {
    inner: Box<dyn Router>,
    ejector: OutlierEjector,
    view: Vec<ClusterInfo>,
    name: String,
    log: Arc<Mutex<Vec<(f64, usize, f64)>>>,
    /// Per cluster: ejected or on probation ([`OutlierEjector::unhealthy`]), for a scaler that
    /// covers the lost capacity ([`EjectionCover`](super::EjectionCover)).
    unhealthy: Arc<Mutex<Vec<bool>>>,
    /// Query id → prediction (s) when it was routed.
    routed: HashMap<u64, f64>,
}

impl EjectingRouter {
    pub fn new(inner: Box<dyn Router>, policy: EjectionPolicy) -> Result<Self> {
        if inner.as_autoslo().is_none() {
            return Err(AutoSloError::InvalidConfig(format!("outlier ejection compares latencies with the router's predictions: it needs the `autoslo` router, not `{}`", inner.name())));
        }
        let name = format!("{}+ejection", inner.name());
        Ok(Self { inner, ejector: OutlierEjector::new(0, policy)?, view: Vec::new(), name, log: Arc::default(), unhealthy: Arc::default(), routed: HashMap::new() })
    }

    /// (time, cluster, seconds) of every ejection so far.
    pub fn ejections(&self) -> &[(f64, usize, f64)] {
        &self.ejector.ejections
    }

    /// A handle on the ejections that outlives the router (it is boxed into an engine's run).
    pub fn ejection_log(&self) -> Arc<Mutex<Vec<(f64, usize, f64)>>> {
        self.log.clone()
    }

    /// A handle on which clusters are ejected or on probation, updated at every completion.
    pub fn unhealthy_handle(&self) -> Arc<Mutex<Vec<bool>>> {
        self.unhealthy.clone()
    }
}

impl Router for EjectingRouter {
    fn route(&mut self, now: f64, query: &Query, clusters: &[ClusterInfo]) -> Result<ClusterId> {
        let ejector = &mut self.ejector;
        let c = route_hiding(self.inner.as_mut(), now, query, clusters, &mut self.view, |c| !ejector.eligible(c.id as usize, now))?;
        if let Some(p) = self.inner.as_autoslo().and_then(|r| r.running().find(|(k, p)| *k == c && p.id == query.id).map(|(_, p)| p.prediction)) {
            self.routed.insert(query.id, p);
        }
        Ok(c)
    }
    fn observe(&mut self, now: f64, event: &Event<'_>) {
        if let Event::Completion { query, cluster, latency, censored } = *event {
            let predicted = self.routed.remove(&query.id).filter(|_| !censored);
            if let Some(p) = predicted {
                let before = self.ejector.ejections.len();
                self.ejector.record(cluster as usize, p, latency, now);
                if self.ejector.ejections.len() > before {
                    self.log.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&self.ejector.ejections[before..]);
                }
                let mut u = self.unhealthy.lock().unwrap_or_else(|e| e.into_inner());
                u.resize(self.ejector.health.len(), false);
                for (d, flag) in u.iter_mut().enumerate() {
                    *flag = self.ejector.unhealthy(d);
                }
            }
        }
        self.inner.observe(now, event);
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn as_autoslo(&self) -> Option<&AutoSloRouter> {
        self.inner.as_autoslo()
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
    fn a_shared_slowdown_is_no_evidence_and_ejection_is_bounded() {
        let run = |slow: &[usize]| {
            let mut e = OutlierEjector::new(5, EjectionPolicy { min_samples: 5, ..Default::default() }).unwrap();
            for i in 0..100 {
                for d in 0..5 {
                    if e.eligible(d, f64::from(i)) {
                        e.record(d, 1.0, if slow.contains(&d) { 4.0 } else { 1.0 }, f64::from(i));
                    }
                }
            }
            e.ejections
        };
        assert!(run(&[0, 1, 2, 3, 4]).is_empty(), "all five slow: the cohort is slow too");
        let two = run(&[1, 3]);
        assert!(!two.is_empty() && two.iter().all(|x| x.1 == 1 || x.1 == 3));
        // 20 % of 5 destinations: never both at once.
        assert!(two.windows(2).all(|w| w[1].0 >= w[0].0 + w[0].2 || w[0].1 == w[1].1), "{two:?}");
        assert!(OutlierEjector::new(3, EjectionPolicy { ratio: 0.5, ..Default::default() }).is_err());
        // A bad field is named, NaN included (NaN compares false, so it must not slip through).
        let named = |p: EjectionPolicy| OutlierEjector::new(3, p).unwrap_err().to_string();
        assert_eq!(named(EjectionPolicy { ratio: f64::NAN, ..Default::default() }), "ejection policy's ratio must be a finite factor > 1, got NaN");
        assert!(named(EjectionPolicy { ratio: f64::INFINITY, ..Default::default() }).starts_with("ejection policy's ratio"));
        assert!(named(EjectionPolicy { alpha: 2.0, ..Default::default() }).starts_with("ejection policy's alpha must be in (0, 1]"));
        assert!(named(EjectionPolicy { max_ejected_fraction: f64::NAN, ..Default::default() }).starts_with("ejection policy's max_ejected_fraction"));
        assert!(named(EjectionPolicy { base_ejection_s: f64::INFINITY, ..Default::default() }).starts_with("ejection policy's base_ejection_s"));
    }
}
