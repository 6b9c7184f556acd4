//! The control-plane interface shared by every engine (emulator, Workload Simulator, live).
//!
//! The control plane never knows where latencies come from: it sees [`Event`]s and answers with a
//! routing decision (a [`Router`]) and scaling [`Action`]s (a [`Scaler`]). This module also holds
//! the fixed policies the foundation needs: [`RoundRobin`] routing, a [`StaticScaler`] (no-op) and
//! a [`ScheduledScaler`] that spins clusters up and down at fixed times.

use crate::autoscaler::Decision;
use crate::cluster::{ClusterId, ClusterInfo, ClusterState};
use crate::error::{AutoSloError, Result};
use crate::router::AutoSloRouter;
use crate::workload::Query;

/// Something that happened in the warehouse.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event<'a> {
    /// A query arrived (before it is routed).
    Arrival { query: &'a Query },
    /// A query left a cluster: completed, or timed out (`censored`).
    Completion { query: &'a Query, cluster: ClusterId, latency: f64, censored: bool },
    /// A cluster finished spinning up.
    ClusterReady { cluster: ClusterId },
    /// A cluster finished tearing down.
    ClusterGone { cluster: ClusterId },
    /// A query was routed to `cluster` (delivered to the scaler right after routing).
    Routed { query: &'a Query, cluster: ClusterId },
    /// A periodic tick (see [`Scaler::tick_interval`]).
    Tick,
}

/// A scaling action.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Spin up a new cluster of `size` RPU; `reason` is recorded in the trace's cluster events.
    SpinUp { size: u32, reason: &'static str },
    /// Stop routing to `cluster`, let its queries finish, then tear it down.
    TearDown { cluster: ClusterId, reason: &'static str },
}

impl Action {
    /// A spinup of `size` RPU for `reason`.
    pub fn spin_up(size: u32, reason: &'static str) -> Self {
        Action::SpinUp { size, reason }
    }
    /// A teardown of `cluster` for `reason`.
    pub fn tear_down(cluster: ClusterId, reason: &'static str) -> Self {
        Action::TearDown { cluster, reason }
    }
}

/// Chooses the cluster of each arriving query.
pub trait Router: Send {
    /// Pick a cluster for `query` among `clusters` (all clusters ever created, with their state).
    /// Must return a cluster that accepts queries.
    fn route(&mut self, now: f64, query: &Query, clusters: &[ClusterInfo]) -> Result<ClusterId>;
    /// Observe an event (completions, cluster changes). Default: ignore.
    fn observe(&mut self, _now: f64, _event: &Event<'_>) {}
    /// The policy's name.
    fn name(&self) -> &str;
    /// The AutoSLO router's state (running queries with their predictions), for the autoscaler's
    /// spinup trigger and Spinup Size Selector. `None` for routers that keep no predictions.
    fn as_autoslo(&self) -> Option<&AutoSloRouter> {
        None
    }
}

/// Decides spinups and teardowns.
pub trait Scaler: Send {
    /// React to an event with actions. `router` is the router in use (read only: the autoscaler
    /// reads the running queries' predictions from it and branches copies of it).
    fn on_event(&mut self, now: f64, event: &Event<'_>, clusters: &[ClusterInfo], router: &dyn Router) -> Vec<Action>;
    /// Check before a run that the scaler can work with `router` (default: any router).
    fn check(&self, _router: &dyn Router) -> Result<()> {
        Ok(())
    }
    /// Period of [`Event::Tick`], if the scaler wants ticks.
    fn tick_interval(&self) -> Option<f64> {
        None
    }
    /// Decisions that could not be taken since the last call, as (time, why), for the caller to
    /// log (default: none). A scaler whose decision fails does nothing instead; this is how
    /// that becomes visible.
    fn take_failures(&mut self) -> Vec<(f64, String)> {
        Vec::new()
    }
    /// Every decision the scaler took so far, in time order, with the options it compared (the
    /// Spinup Size Selector's branches), for the caller to report (default: none recorded).
    fn decisions(&self) -> &[Decision] {
        &[]
    }
    /// The policy's name.
    fn name(&self) -> &str;
}

/// Fail if `scaler` could not take a decision since the last call: the engines (emulator,
/// simulator) stop with the reason instead of measuring a run whose autoscaler silently did
/// nothing. (The live control plane logs such failures and keeps routing.)
pub fn fail_on_undecided(scaler: &mut dyn Scaler) -> Result<()> {
    let failures = scaler.take_failures();
    match failures.first() {
        None => Ok(()),
        Some((t, why)) => Err(AutoSloError::InvalidAction(format!("the `{}` scaler could not decide at {t:.1} s: {why}", scaler.name()))),
    }
}

/// Round robin over the clusters that are ready (or, if none is ready, starting). O(C).
#[derive(Debug, Clone, Default)]
pub struct RoundRobin {
    next: usize,
}

/// Route `query` with `inner` over `clusters` minus those `hide` selects, which the policy sees
/// as draining (`view` is a reusable buffer). If that leaves no cluster that takes queries, route
/// over all of them: hiding never makes a query unroutable. The routers that wrap a policy
/// (reservations, ejection) share this.
pub fn route_hiding(inner: &mut dyn Router, now: f64, query: &Query, clusters: &[ClusterInfo], view: &mut Vec<ClusterInfo>, mut hide: impl FnMut(&ClusterInfo) -> bool) -> Result<ClusterId> {
    view.clear();
    view.extend_from_slice(clusters);
    for c in view.iter_mut() {
        if c.accepts_queries() && hide(c) {
            c.state = ClusterState::Draining;
        }
    }
    if view.iter().any(ClusterInfo::accepts_queries) {
        inner.route(now, query, view)
    } else {
        inner.route(now, query, clusters)
    }
}

/// Clusters a query may go to: the ready ones, or if none is ready the starting ones.
pub fn candidates(query: &Query, clusters: &[ClusterInfo]) -> Result<Vec<ClusterInfo>> {
    let pick = |s: ClusterState| clusters.iter().filter(|c| c.state == s).copied().collect::<Vec<_>>();
    let mut c = pick(ClusterState::Ready);
    if c.is_empty() {
        c = pick(ClusterState::Starting);
    }
    if c.is_empty() {
        return Err(AutoSloError::InvalidAction(format!("no cluster can take query {}: none is ready or starting", query.id)));
    }
    Ok(c)
}

impl Router for RoundRobin {
    fn route(&mut self, _now: f64, query: &Query, clusters: &[ClusterInfo]) -> Result<ClusterId> {
        let eligible = candidates(query, clusters)?;
        let c = eligible[self.next % eligible.len()].id;
        self.next = self.next.wrapping_add(1);
        Ok(c)
    }
    fn name(&self) -> &str {
        "round-robin"
    }
}

/// Never scales: the cluster set stays as configured.
#[derive(Debug, Clone, Default)]
pub struct StaticScaler;

impl Scaler for StaticScaler {
    fn on_event(&mut self, _now: f64, _event: &Event<'_>, _clusters: &[ClusterInfo], _router: &dyn Router) -> Vec<Action> {
        Vec::new()
    }
    fn name(&self) -> &str {
        "static"
    }
}

/// A scheduled scaling step: at `at` seconds, spin up `size` RPU, or tear down `cluster`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduledAction {
    pub at: f64,
    pub action: Action,
}

/// Carries out a fixed schedule of actions on ticks (resolution: `resolution_s`).
#[derive(Debug, Clone)]
pub struct ScheduledScaler {
    schedule: Vec<ScheduledAction>,
    next: usize,
    resolution_s: f64,
}

impl ScheduledScaler {
    /// A schedule (sorted by time here). `resolution_s` is the tick period (> 0).
    pub fn new(mut schedule: Vec<ScheduledAction>, resolution_s: f64) -> Result<Self> {
        if !(resolution_s.is_finite() && resolution_s > 0.0) {
            return Err(AutoSloError::out_of_range("schedule resolution", "> 0 s", resolution_s));
        }
        if let Some(a) = schedule.iter().find(|a| !(a.at.is_finite() && a.at >= 0.0)) {
            return Err(AutoSloError::out_of_range("scheduled action time", "≥ 0 s", a.at));
        }
        schedule.sort_by(|a, b| a.at.total_cmp(&b.at));
        Ok(ScheduledScaler { schedule, next: 0, resolution_s })
    }
}

impl Scaler for ScheduledScaler {
    fn on_event(&mut self, now: f64, event: &Event<'_>, _clusters: &[ClusterInfo], _router: &dyn Router) -> Vec<Action> {
        let mut out = Vec::new();
        if matches!(event, Event::Tick) {
            while self.next < self.schedule.len() && self.schedule[self.next].at <= now {
                out.push(self.schedule[self.next].action);
                self.next += 1;
            }
        }
        out
    }
    fn tick_interval(&self) -> Option<f64> {
        (self.next < self.schedule.len()).then_some(self.resolution_s)
    }
    fn name(&self) -> &str {
        "scheduled"
    }
}

/// A fixed schedule of spinups carried out beside another scaler (an execution configuration's
/// scheduled spinups plus its autoscaler). Both see every event; ticks come at the finer of the
/// two periods while scheduled actions remain, then at the inner scaler's.
pub struct PlannedScaler {
    schedule: ScheduledScaler,
    inner: Box<dyn Scaler>,
    name: String,
}

impl PlannedScaler {
    pub fn new(schedule: ScheduledScaler, inner: Box<dyn Scaler>) -> Self {
        let name = format!("{}+schedule", inner.name());
        Self { schedule, inner, name }
    }
}

impl Scaler for PlannedScaler {
    fn on_event(&mut self, now: f64, event: &Event<'_>, clusters: &[ClusterInfo], router: &dyn Router) -> Vec<Action> {
        let mut out = self.schedule.on_event(now, event, clusters, router);
        out.extend(self.inner.on_event(now, event, clusters, router));
        out
    }
    fn check(&self, router: &dyn Router) -> Result<()> {
        self.inner.check(router)
    }
    fn take_failures(&mut self) -> Vec<(f64, String)> {
        self.inner.take_failures()
    }
    fn decisions(&self) -> &[Decision] {
        self.inner.decisions()
    }
    fn tick_interval(&self) -> Option<f64> {
        match (self.schedule.tick_interval(), self.inner.tick_interval()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    fn name(&self) -> &str {
        &self.name
    }
}
