//! The Spinup Size Selector, `FindBestSpinupSize` (Algorithm 3 of the paper).
//!
//! Copies of the arrival window are replayed through a copy of the Query Router (Iconq+
//! predictions, monotonicity guard, billing timers) on the Workload Simulator's semantics:
//! a query completes at arrival + prediction (`CollectFinishedUntil`). The preparation period
//! until the new cluster is available (t_d + δ) is simulated once and snapshotted; then one branch
//! per eligible size, plus do-nothing, continues from the snapshot until μ queries that arrived
//! after t_d + δ have completed, and adds the predicted latencies of the queries still running.
//! Each branch yields (violation rate, cost until drained); `BestWithTarget` decides, do-nothing
//! wins its ties, and among sizes tied for the best the largest is returned. The branches run in
//! parallel (rayon). A size's branch is do-nothing's until the router first sends a query to its
//! new cluster, so it forks from do-nothing there instead of repeating those routings
//! ([`shared_branches`]); the branches' outcomes are the same as when each runs on its own.
//!
//! Reading of the listing: line 4 shifts copy ⌊i/|W_a|⌋ by w·⌊i/|W_a|⌋ from i = 0, which would
//! re-issue the window's own queries at their past arrival times, although they were already
//! routed; Figure 4 replays copies *after* the window (q4–q9 after q1–q3). We follow Figure 4:
//! replay starts at i = |W_a| (the first copy, shifted by w).
//!
//! [`Mode::Replace`] is the paper's "Vertical w/ Ours": the same simulation, but once the new
//! cluster is available nothing more is routed to the existing clusters (they drain).

use rayon::prelude::*;

use crate::cluster::{ClusterId, ClusterInfo, ClusterState};
use crate::control::Router;
use crate::error::{AutoSloError, Result};
use crate::router::AutoSloRouter;
use crate::slo::best_with_target;
use crate::workload::Query;

/// Ids of replayed query copies start here (far above any workload's ids).
pub const REPLAY_ID_BASE: u64 = 1 << 62;

/// Settings of the Spinup Size Selector.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectorParams {
    /// Eligible sizes S (RPU).
    pub sizes: Vec<u32>,
    /// Spinup delay δ assumed by the simulation (s).
    pub spinup_s: f64,
    /// Minimum completions μ after the new cluster is available.
    pub mu: usize,
    /// Observation window width w (s): the shift between replayed copies.
    pub window_s: f64,
    /// Target violation rate τ_target of `BestWithTarget`.
    pub tau_target: f64,
    /// A query counts as a violation when its (predicted or simulated) latency × this factor
    /// exceeds its SLO. 1 is Algorithm 3's literal test; see [`AutoscalerParams::selector_headroom`](super::AutoscalerParams::selector_headroom).
    pub slo_headroom: f64,
    /// Which outstanding queries line 27 adds at a branch's end: every running query (`true`, the
    /// listing), or only those issued after t_d + δ (`false`, Figure 4: "the predicted latency of
    /// q7", issued after the new cluster is available). The listing's form lets a backlog that
    /// predates the decision, identical in every branch, dominate the violation rates.
    pub count_backlog: bool,
    /// Whether a spinup tied with do-nothing wins the tie (**a change**): `false` is Algorithm 3,
    /// which "only recommends a spinup if some candidate strictly improves upon this baseline".
    /// With `true` the largest size tied with do-nothing is spun up instead. A tie means the
    /// branches could not tell the options apart, typically because the router sent the new
    /// cluster nothing within μ completions; the decision was asked for because violations were
    /// seen or predicted, and a cluster the router leaves idle bills nothing.
    pub spinup_on_tie: bool,
    /// Safety bound: a branch stops after this much simulated time past t_d + δ even if fewer
    /// than μ queries completed (a pathological window, e.g. predictions of hours).
    pub max_replay_s: f64,
}

impl Default for SelectorParams {
    fn default() -> Self {
        Self { sizes: vec![4, 8, 16, 32], spinup_s: 300.0, mu: super::DEFAULT_MU, window_s: 300.0, tau_target: 0.1, slo_headroom: 1.0, count_backlog: true, spinup_on_tie: false, max_replay_s: 1800.0 }
    }
}

impl SelectorParams {
    pub fn validated(self) -> Result<Self> {
        crate::cluster::check_sizes("eligible sizes", &self.sizes)?;
        for (what, v) in [("spinup delay δ", self.spinup_s), ("window w", self.window_s), ("max replay", self.max_replay_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(AutoSloError::out_of_range(what, "a finite time ≥ 0 s", v));
            }
        }
        if self.window_s <= 0.0 {
            return Err(AutoSloError::out_of_range("window w", "> 0 s", self.window_s));
        }
        if self.mu == 0 {
            return Err(AutoSloError::out_of_range("μ (minimum completions)", "≥ 1", 0));
        }
        if !(self.slo_headroom.is_finite() && self.slo_headroom >= 1.0) {
            return Err(AutoSloError::out_of_range("selector SLO headroom", "a finite factor ≥ 1", self.slo_headroom));
        }
        if !(0.0..=1.0).contains(&self.tau_target) {
            return Err(AutoSloError::out_of_range("τ_target", "in [0, 1]", self.tau_target));
        }
        Ok(self)
    }
}

/// Add the new cluster beside the existing ones, or let it replace them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Add Cluster w/ Ours (the paper's method).
    Add,
    /// Vertical w/ Ours: the new cluster replaces the existing ones once available.
    Replace,
}

/// One branch's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    /// The size spun up in this branch (`None` = do nothing).
    pub size: Option<u32>,
    pub violation_rate: f64,
    /// Σ ClusterCostUntilDrained at the branch's end ($).
    pub cost: f64,
    /// |D|: completions after t_d + δ plus queries outstanding at the end.
    pub observations: usize,
    /// Replayed arrivals routed in the branch (after the snapshot).
    pub arrivals: usize,
}

/// What the selector decided, with every branch it compared.
#[derive(Debug, Clone, PartialEq)]
pub struct SpinupDecision {
    /// The size to spin up, or `None` (do nothing).
    pub size: Option<u32>,
    pub branches: Vec<Branch>,
    /// Replayed arrivals in the preparation period.
    pub prep_arrivals: usize,
}

/// The window's queries, replayed: copy k ≥ 1 shifted by k·w, with fresh ids.
struct Replay<'a> {
    window: &'a [Query],
    w: f64,
}

impl Replay<'_> {
    fn at(&self, i: usize) -> Query {
        let n = self.window.len();
        let mut q = self.window[i % n];
        q.arrival += self.w * (i / n) as f64;
        q.id = REPLAY_ID_BASE + i as u64;
        q
    }
}

/// The clusters as they are at `t`: starting ones whose ready time has come are ready.
fn at_time(clusters: &mut [ClusterInfo], t: f64) {
    for c in clusters {
        if c.state == ClusterState::Starting && c.ready_at <= t {
            c.state = ClusterState::Ready;
        }
    }
}

/// What every branch's steps share: the replayed arrivals and the settings of lines 19–28.
struct Steps<'a> {
    replay: Replay<'a>,
    t_available: f64,
    horizon: f64,
    h: f64,
    mu: usize,
    count_backlog: bool,
}

/// A branch's simulation: its copy of the router, the clusters it routes over, the next replayed
/// arrival, the time, and the counts of line 23.
#[derive(Clone)]
struct BranchRun {
    r: AutoSloRouter,
    infos: Vec<ClusterInfo>,
    i: usize,
    t: f64,
    observed: usize,
    violated: usize,
    arrivals: usize,
}

impl BranchRun {
    /// Lines 20–23 up to the routing: the next replayed arrival, the queries finished by then
    /// (counted when they arrived after t_d + δ), the clusters as they are then. `None` past the
    /// safety horizon.
    fn advance(&mut self, s: &Steps<'_>) -> Result<Option<Query>> {
        let q = s.replay.at(self.i);
        if q.arrival > s.horizon {
            return Ok(None);
        }
        self.t = q.arrival;
        for p in self.r.collect_finished_until(self.t)? {
            if p.arrival >= s.t_available {
                self.observed += 1;
                self.violated += usize::from(p.prediction * s.h > p.slo);
            }
        }
        at_time(&mut self.infos, self.t);
        Ok(Some(q))
    }

    /// Lines 24–26 for `q`, the arrival [`BranchRun::advance`] returned.
    fn route(&mut self, q: &Query) -> Result<()> {
        self.r.route(self.t, q, &self.infos)?;
        self.routed();
        Ok(())
    }

    fn routed(&mut self) {
        self.arrivals += 1;
        self.i += 1;
    }

    /// Lines 19–26: step until μ queries that arrived after t_d + δ have completed.
    fn run(mut self, s: &Steps<'_>) -> Result<Self> {
        while self.observed < s.mu {
            let Some(q) = self.advance(s)? else { break };
            self.route(&q)?;
        }
        Ok(self)
    }

    /// Lines 27–29: add the outstanding queries with their predicted latencies, and price the
    /// branch. `unused` is the router that evaluated a new cluster this branch never chose (see
    /// [`shared_branches`]): its book's cost follows the others'.
    fn finish(&self, size: Option<u32>, s: &Steps<'_>, unused: Option<&AutoSloRouter>) -> Result<Branch> {
        let (mut observed, mut violated) = (self.observed, self.violated);
        for (_, p) in self.r.running().filter(|(_, p)| s.count_backlog || p.arrival >= s.t_available) {
            observed += 1;
            violated += usize::from(p.prediction * s.h > p.slo);
        }
        let violation_rate = if observed > 0 { violated as f64 / observed as f64 } else { 0.0 };
        let mut cost = self.r.cost_until_drained(self.t)?;
        if let Some(u) = unused {
            cost += u.cost_until_drained(self.t)?;
        }
        Ok(Branch { size, violation_rate, cost, observations: observed, arrivals: self.arrivals })
    }
}

/// The branches of [`Mode::Add`]: do-nothing, then one per size in `sizes`, as if each ran from
/// the snapshot `start` on its own.
///
/// A size's branch makes the same decisions as do-nothing until the router first chooses the new
/// cluster: till then the new cluster holds nothing, so every other cluster's state, every
/// completion and every count is do-nothing's. So do-nothing runs, and at each arrival the new
/// cluster of each size not yet chosen is weighed alone, on a router that keeps books for it only
/// (`probe`): the branch lists it after the other clusters, so Algorithm 1's scan reaches it last
/// and it is chosen exactly when it beats do-nothing's best candidate
/// ([`AutoSloRouter::rival_wins`]; mostly settled by a bound on its cost, without a prediction),
/// or when no other cluster is ready. There that branch forks
/// from do-nothing, just before the routing, and runs on its own (on the pool, while do-nothing
/// goes on). A branch that never forks ends with do-nothing: the same counts, and the cost with
/// its new cluster's (the book its branch would have kept; its id is the largest, so it comes last
/// in the sum of [`AutoSloRouter::cost_until_drained`] too). The result equals running every branch from the
/// snapshot (checked against that in the tests) without repeating do-nothing's routings.
fn shared_branches(start: BranchRun, sizes: &[u32], new_cluster: impl Fn(u32) -> ClusterInfo + Sync, s: &Steps<'_>) -> Result<Vec<Branch>> {
    let forks: std::sync::Mutex<Vec<(u32, Result<Branch>)>> = std::sync::Mutex::new(Vec::new());
    let (noop, attached) = rayon::scope(|scope| -> Result<(BranchRun, Vec<(u32, AutoSloRouter)>)> {
        let mut noop = start;
        let mut attached: Vec<(u32, AutoSloRouter)> = sizes.iter().map(|&size| (size, noop.r.without_books())).collect();
        while noop.observed < s.mu {
            let Some(q) = noop.advance(s)? else { break };
            if attached.is_empty() {
                noop.route(&q)?;
                continue;
            }
            let cands = noop.r.evaluate(noop.t, &q, &noop.infos)?;
            let others_ready = noop.infos.iter().any(|c| c.state == ClusterState::Ready);
            let mut k = 0;
            while k < attached.len() {
                let (size, probe) = &mut attached[k];
                let new = new_cluster(*size);
                let chosen = !others_ready || probe.rival_wins(noop.t, &q, &new, &cands)?;
                if !chosen {
                    k += 1;
                    continue;
                }
                let size = attached.remove(k).0;
                let mut fork = noop.clone();
                fork.infos.push(new);
                let forks = &forks;
                scope.spawn(move |_| {
                    let out = fork.route(&q).and_then(|()| fork.run(s)).and_then(|b| b.finish(Some(size), s, None));
                    forks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((size, out));
                });
            }
            noop.r.commit_best(noop.t, &q, cands)?;
            noop.routed();
        }
        Ok((noop, attached))
    })?;
    let mut forks = forks.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = vec![noop.finish(None, s, None)?];
    for &size in sizes {
        let b = match attached.iter().find(|(s2, _)| *s2 == size) {
            Some((_, probe)) => noop.finish(Some(size), s, Some(probe))?,
            None => {
                let k = forks.iter().position(|(s2, _)| *s2 == size).expect("a size not attached forked");
                forks.swap_remove(k).1?
            }
        };
        out.push(b);
    }
    Ok(out)
}

/// `FindBestSpinupSize` at decision time `now` over `router` (a copy is simulated; the router is
/// not changed), the active `clusters` and the arrival window `window` (queries of the last w
/// seconds, oldest first). Returns `None` as size when the window is empty (nothing to replay).
///
/// Cost: O((|W_a|·δ/w + F_max) · R_max) per branch, as in the paper, branches in parallel. A size's
/// branch shares do-nothing's routings until the router first chooses its new cluster
/// ([`shared_branches`]); the decision is the same.
pub fn find_best_spinup_size(router: &AutoSloRouter, clusters: &[ClusterInfo], window: &[Query], now: f64, params: &SelectorParams, mode: Mode) -> Result<SpinupDecision> {
    decide(router, clusters, window, now, params, mode, true)
}

/// [`find_best_spinup_size`]; with `shared` false every branch runs from the snapshot on its own
/// (the listing's form, which [`shared_branches`] equals; the tests compare the two).
pub(crate) fn decide(router: &AutoSloRouter, clusters: &[ClusterInfo], window: &[Query], now: f64, params: &SelectorParams, mode: Mode, shared: bool) -> Result<SpinupDecision> {
    let params = params.clone().validated()?;
    if window.is_empty() {
        return Ok(SpinupDecision { size: None, branches: Vec::new(), prep_arrivals: 0 });
    }
    let replay = Replay { window, w: params.window_s };
    let mut base: Vec<ClusterInfo> = clusters.iter().filter(|c| c.accepts_queries()).copied().collect();
    if base.is_empty() {
        return Err(AutoSloError::InvalidConfig("the Spinup Size Selector needs at least one active cluster".into()));
    }
    let t_available = now + params.spinup_s;
    let h = params.slo_headroom;
    let horizon = t_available + params.max_replay_s;
    // Preparation period (lines 1–11), once.
    let mut snap = router.clone();
    let n = window.len();
    let mut i = n;
    while replay.at(i).arrival < t_available {
        let q = replay.at(i);
        // A copy of a query that arrived exactly w before `now` can round to an ulp before it.
        let t = q.arrival.max(now);
        snap.collect_finished_until(t)?;
        at_time(&mut base, t);
        snap.route(t, &q, &base)?;
        i += 1;
    }
    let i_snap = i;
    at_time(&mut base, t_available);
    let new_id: ClusterId = clusters.iter().map(|c| c.id).chain(router.cluster_ids()).max().map_or(0, |m| m + 1);
    let new_cluster = |s: u32| ClusterInfo { id: new_id, size: s, state: ClusterState::Ready, requested_at: now, ready_at: t_available, running: 0, queued: 0 };
    let ctx = Steps { replay, t_available, horizon, h, mu: params.mu, count_backlog: params.count_backlog };
    let start = BranchRun { r: snap, infos: base, i: i_snap, t: t_available, observed: 0, violated: 0, arrivals: 0 };
    // One branch per eligible size and for do-nothing (lines 12–29).
    let branches = match (mode, shared) {
        (Mode::Add, true) => shared_branches(start, &params.sizes, new_cluster, &ctx)?,
        _ => {
            let options: Vec<Option<u32>> = std::iter::once(None).chain(params.sizes.iter().copied().map(Some)).collect();
            let branch = |size: Option<u32>| -> Result<Branch> {
                let mut b = start.clone();
                if let Some(s) = size {
                    if mode == Mode::Replace {
                        b.infos.iter_mut().for_each(|c| c.state = ClusterState::Draining);
                    }
                    b.infos.push(new_cluster(s));
                }
                b.run(&ctx)?.finish(size, &ctx, None)
            };
            options.par_iter().map(|&s| branch(s)).collect::<Result<_>>()?
        }
    };
    let points: Vec<(f64, f64)> = branches.iter().map(|b| (b.violation_rate, b.cost)).collect();
    let best = points[best_with_target(&points, params.tau_target).expect("at least the do-nothing branch")];
    // Lines 31–35: do-nothing wins its ties (unless `spinup_on_tie`, a change); otherwise the
    // largest size tied for the best.
    let largest_tied = branches.iter().filter(|b| (b.violation_rate, b.cost) == best).filter_map(|b| b.size).max();
    let size = if points[0] == best && !params.spinup_on_tie { None } else { largest_tied };
    Ok(SpinupDecision { size, branches, prep_arrivals: i_snap - n })
}
