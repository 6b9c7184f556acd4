//! The scaling triggers (§6.2): the observation windows, the teardown trigger, and the spinup
//! trigger `MaybeSpinup` (Algorithm 2) with its baselines `observed` and `queue@N`.

use std::collections::VecDeque;

use crate::cluster::{ClusterId, ClusterInfo, ClusterState};
use crate::control::Router;
use crate::workload::Query;

/// A completed query as the completion window keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completed {
    pub arrival: f64,
    pub latency: f64,
    pub slo: f64,
    /// Timed out: a violation whatever its recorded latency.
    pub censored: bool,
}

impl Completed {
    pub fn violated(&self) -> bool {
        self.censored || self.latency > self.slo
    }
}

/// The trailing arrival window W_a and completion window W_c over the last `w` seconds (§6.1).
#[derive(Debug, Clone, Default)]
pub struct ObservationWindows {
    pub w: f64,
    arrivals: VecDeque<Query>,
    completions: VecDeque<(f64, Completed)>,
}

impl ObservationWindows {
    pub fn new(w: f64) -> Self {
        Self { w, ..Default::default() }
    }
    /// Drop what is older than `now − w`. Amortised O(1) per entry.
    pub fn truncate(&mut self, now: f64) {
        let from = now - self.w;
        while self.arrivals.front().is_some_and(|q| q.arrival < from) {
            self.arrivals.pop_front();
        }
        while self.completions.front().is_some_and(|c| c.0 < from) {
            self.completions.pop_front();
        }
    }
    pub fn on_arrival(&mut self, q: &Query) {
        self.arrivals.push_back(*q);
        self.truncate(q.arrival);
    }
    pub fn on_completion(&mut self, now: f64, c: Completed) {
        self.completions.push_back((now, c));
        self.truncate(now);
    }
    /// W_a, oldest first.
    pub fn arrivals(&self) -> Vec<Query> {
        self.arrivals.iter().copied().collect()
    }
    pub fn arrival_count(&self) -> usize {
        self.arrivals.len()
    }
    /// W_c, oldest first.
    pub fn completions(&self) -> impl Iterator<Item = &Completed> + '_ {
        self.completions.iter().map(|c| &c.1)
    }
}

/// What the spinup trigger looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerKind {
    /// Algorithm 2: predicted violations of running queries plus observed ones (`combined`).
    Combined,
    /// Algorithm 2 without R: completed queries only (`observed`).
    Observed,
    /// N or more outstanding (running + queued) queries (`queue@N`).
    Queue(usize),
    /// Never fires by itself (decisions only when forced).
    Never,
}

impl TriggerKind {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "combined" => Some(Self::Combined),
            "observed" => Some(Self::Observed),
            "never" => Some(Self::Never),
            _ => name.strip_prefix("queue@").and_then(|n| n.parse().ok()).filter(|&n| n > 0).map(Self::Queue),
        }
    }
    pub fn name(&self) -> String {
        match self {
            Self::Combined => "combined".into(),
            Self::Observed => "observed".into(),
            Self::Queue(n) => format!("queue@{n}"),
            Self::Never => "never".into(),
        }
    }
}

/// The state Algorithm 2 shares with Algorithm 3: the known active set K, the change bound
/// t_change and the in-flight flag f.
#[derive(Debug, Clone, Default)]
pub struct SpinupTrigger {
    known: Vec<ClusterId>,
    pub t_change: f64,
    pub in_flight: bool,
    /// Scratch buffer for the active set (no allocation per call once warm).
    scratch: Vec<ClusterId>,
}

/// Outcome of one `MaybeSpinup` evaluation (for inspection and tests).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TriggerCheck {
    pub fire: bool,
    /// |R| and |D| (or the outstanding count for `queue@N`).
    pub running: usize,
    pub completed: usize,
    pub violation_rate: f64,
}

impl SpinupTrigger {
    /// Lines 1–4: if the active cluster set C (the ready clusters) changed, remember it, move
    /// t_change to `now` and clear the in-flight flag.
    fn sync(&mut self, now: f64, clusters: &[ClusterInfo]) {
        self.scratch.clear();
        self.scratch.extend(clusters.iter().filter(|c| c.state == ClusterState::Ready).map(|c| c.id));
        if self.scratch != self.known {
            std::mem::swap(&mut self.known, &mut self.scratch);
            self.t_change = self.t_change.max(now);
            self.in_flight = false;
        }
    }

    /// `MaybeSpinup` (Algorithm 2) at query arrival time `now`, with θ and τ_trigger; for the
    /// `observed` baseline R is empty, for `queue@N` the count of outstanding queries decides.
    /// Violations are literal: predicted or observed latency > SLO. O(|C| + N + |W_c|).
    pub fn maybe_spinup(&mut self, kind: TriggerKind, now: f64, clusters: &[ClusterInfo], router: &dyn Router, windows: &ObservationWindows, theta: usize, tau_trigger: f64) -> TriggerCheck {
        self.sync(now, clusters);
        let mut check = TriggerCheck { fire: false, running: 0, completed: 0, violation_rate: 0.0 };
        if self.in_flight {
            return check;
        }
        let t_change = self.t_change;
        match kind {
            TriggerKind::Never => {}
            TriggerKind::Queue(n) => {
                let outstanding: usize = clusters.iter().filter(|c| c.state != ClusterState::Gone).map(|c| c.running + c.queued).sum();
                check.running = outstanding;
                // A do-nothing decision moved t_change ahead: no re-firing before it.
                if now >= t_change && outstanding >= n {
                    check.fire = true;
                }
            }
            TriggerKind::Combined | TriggerKind::Observed => {
                let (mut r, mut d, mut v) = (0usize, 0usize, 0usize);
                if kind == TriggerKind::Combined {
                    if let Some(a) = router.as_autoslo() {
                        for (_, p) in a.running() {
                            if p.arrival >= t_change {
                                r += 1;
                                v += usize::from(p.prediction > p.slo);
                            }
                        }
                    }
                }
                for c in windows.completions() {
                    if c.arrival >= t_change {
                        d += 1;
                        v += usize::from(c.violated());
                    }
                }
                check.running = r;
                check.completed = d;
                if r + d >= theta.max(1) {
                    check.violation_rate = v as f64 / (r + d) as f64;
                    check.fire = check.violation_rate > tau_trigger;
                }
            }
        }
        if check.fire {
            self.in_flight = true;
        }
        check
    }

    /// Lines 31–34 of Algorithm 3: the selector chose to do nothing at `now`; suppress
    /// re-firing until now + δ.
    pub fn do_nothing(&mut self, now: f64, delta: f64) {
        self.t_change = now + delta;
        self.in_flight = false;
    }
}

/// The teardown trigger (§6.2.1): ready clusters with no running or queued query, nothing routed
/// for `t_idle` seconds and spun up at least `t_min_lifetime` seconds ago. At most as many as
/// keep `min_clusters` ready clusters; ids in ascending order. `last_routed(c)` gives the last
/// routing time to `c` (or its ready time).
pub fn teardown_candidates(now: f64, clusters: &[ClusterInfo], last_routed: impl Fn(&ClusterInfo) -> f64, t_idle: f64, t_min_lifetime: f64, min_clusters: usize) -> Vec<ClusterId> {
    let ready = clusters.iter().filter(|c| c.state == ClusterState::Ready).count();
    let mut spare = ready.saturating_sub(min_clusters);
    let mut out = Vec::new();
    for c in clusters.iter().filter(|c| c.state == ClusterState::Ready) {
        if spare == 0 {
            break;
        }
        if c.running == 0 && c.queued == 0 && now - last_routed(c) >= t_idle && now - c.requested_at >= t_min_lifetime {
            out.push(c.id);
            spare -= 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u32, running: usize, requested_at: f64) -> ClusterInfo {
        ClusterInfo { id, size: 16, state: ClusterState::Ready, requested_at, ready_at: requested_at, running, queued: 0 }
    }

    #[test]
    fn teardown_needs_idle_quiet_and_old_and_keeps_the_minimum() {
        let last = |x: &ClusterInfo| if x.id == 2 { 900.0 } else { 0.0 };
        // 0: busy; 1: idle, quiet, old; 2: routed to 100 s ago; 3: too young.
        let cs = [c(0, 3, 0.0), c(1, 0, 0.0), c(2, 0, 0.0), c(3, 0, 500.0)];
        assert_eq!(teardown_candidates(1000.0, &cs, last, 300.0, 600.0, 1), vec![1]);
        // Never below the minimum number of ready clusters.
        let idle = [c(0, 0, 0.0), c(1, 0, 0.0)];
        assert_eq!(teardown_candidates(5000.0, &idle, |_| 0.0, 300.0, 600.0, 1), vec![0]);
        assert!(teardown_candidates(5000.0, &idle, |_| 0.0, 300.0, 600.0, 2).is_empty());
    }

    #[test]
    fn windows_keep_the_last_w_seconds_and_names_parse() {
        let mut w = ObservationWindows::new(100.0);
        let q = |t: f64| Query { id: t as u64, arrival: t, text: crate::catalog::QueryText { template: 1, instance: 1 }, tenant: 0, class: 0, slo: 10.0 };
        for t in [0.0, 50.0, 120.0, 160.0] {
            w.on_arrival(&q(t));
        }
        assert_eq!(w.arrivals().iter().map(|q| q.arrival).collect::<Vec<_>>(), vec![120.0, 160.0]);
        w.on_completion(170.0, Completed { arrival: 120.0, latency: 50.0, slo: 10.0, censored: false });
        w.truncate(400.0);
        assert_eq!((w.arrival_count(), w.completions().count()), (0, 0));
        assert_eq!(TriggerKind::parse("queue@32"), Some(TriggerKind::Queue(32)));
        assert_eq!(TriggerKind::parse("queue@0"), None);
        assert_eq!(TriggerKind::parse("combined").map(|t| t.name()), Some("combined".into()));
        assert!(TriggerKind::parse("eager").is_none());
    }
}
