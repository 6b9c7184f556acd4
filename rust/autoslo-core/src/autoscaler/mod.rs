//! The Autoscaler (§6): observation windows, the teardown trigger, the spinup trigger
//! (`MaybeSpinup`, Algorithm 2) and the Spinup Size Selector (`FindBestSpinupSize`,
//! Algorithm 3), plus the scaling policies it is compared with and the ones users run today.
//!
//! Every policy is a [`Scaler`]: the emulator and the Workload Simulator call it inside their
//! event loop at the decision time, and live mode calls it off the routing path.
//!
//! Policies by name ([`scaler_by_name`]):
//! - `autoslo` = `add-best` with the `combined` trigger (the paper's Autoscaler), with one change
//!   and one setting of its own: the selector's headroom ([`DEFAULT_SELECTOR_HEADROOM`]) and μ
//!   ([`DEFAULT_AUTOSLO_MU`]); `add-best` with `combined` is the literal form;
//! - `add-best`, `horizontal`, `vertical` with any trigger (`combined`, `observed`, `queue@N`);
//!   `horizontal` duplicates the largest ready cluster, `vertical` lets the selector pick the one
//!   cluster to have (the old ones drain once it is ready);
//! - `noop`: never changes the cluster set;
//! - `snowflake-standard`, `snowflake-economy`: Snowflake's multi-cluster warehouse scaling
//!   policies ([`snowflake`]);
//! - `rais`: a RAIS-like scaler that holds a price-performance level ([`rais`]).

pub mod rais;
pub mod selector;
pub mod snowflake;
pub mod trigger;

use std::collections::BTreeMap;

use crate::cluster::{ClusterId, ClusterInfo, ClusterState};
use crate::control::{Action, Event, Router, Scaler};
use crate::error::{AutoSloError, Result};

pub use selector::{find_best_spinup_size, Branch, Mode, SelectorParams, SpinupDecision, REPLAY_ID_BASE};
pub use trigger::{teardown_candidates, Completed, ObservationWindows, SpinupTrigger, TriggerCheck, TriggerKind};

/// Scaling policies selectable by name.
pub const SCALING_POLICIES: [&str; 8] = ["autoslo", "add-best", "horizontal", "vertical", "noop", "snowflake-standard", "snowflake-economy", "rais"];
/// Spinup triggers selectable by name (`queue@N` for any N ≥ 1).
pub const TRIGGERS: [&str; 3] = ["combined", "observed", "queue@N"];

/// How the Autoscaler changes the cluster set once triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaling {
    /// Never.
    Noop,
    /// Spin up a copy of the largest ready cluster.
    Horizontal,
    /// The selector's best single cluster replaces the current ones.
    Vertical,
    /// The selector's best cluster is added (the paper's method).
    AddBest,
}

impl Scaling {
    pub fn name(self) -> &'static str {
        match self {
            Scaling::Noop => "noop",
            Scaling::Horizontal => "horizontal",
            Scaling::Vertical => "vertical",
            Scaling::AddBest => "add-best",
        }
    }
}

/// The Autoscaler's parameters (the Policy Tuner's knobs are τ_trigger, θ, μ, w, T_idle and
/// T_min_lifetime).
#[derive(Debug, Clone, PartialEq)]
pub struct AutoscalerParams {
    /// Target violation rate τ_target of the selector's `BestWithTarget`.
    pub tau_target: f64,
    /// τ_trigger of Algorithm 2.
    pub tau_trigger: f64,
    /// θ: minimum observations before the trigger may fire.
    pub theta: usize,
    /// μ: completions each selector branch waits for. `None`: the policy's default
    /// ([`DEFAULT_MU`] = 16, the reference value, except [`DEFAULT_AUTOSLO_MU`] for `autoslo`).
    pub mu: Option<usize>,
    /// Observation window width w (s).
    pub window_s: f64,
    /// T_idle (s): teardown after this long without a routed query.
    pub t_idle_s: f64,
    /// T_min_lifetime (s): no teardown of a cluster younger than this.
    pub t_min_lifetime_s: f64,
    /// Eligible sizes S (RPU).
    pub sizes: Vec<u32>,
    /// Spinup delay δ the selector assumes (s).
    pub spinup_s: f64,
    /// Never tear down below this many ready clusters (≥ 1).
    pub min_clusters: usize,
    /// Never spin up beyond this many active clusters.
    pub max_clusters: usize,
    /// Force one scaling decision at the first routed query at or after this time (s), whatever
    /// the trigger says (the paper's Table 3 protocol).
    pub force_at: Option<f64>,
    /// Whether idle clusters are torn down (the teardown trigger).
    pub teardown: bool,
    /// Period of the teardown check when no query arrives (s).
    pub tick_s: f64,
    /// The selector counts a violation when latency × this factor > SLO. 1 is Algorithm 3's
    /// literal test (`add-best`, `vertical`); the `autoslo` policy uses
    /// [`DEFAULT_SELECTOR_HEADROOM`] (a change, see there): predictions err, and the cheapest
    /// branch whose predicted violation rate is just under τ selects for underestimates.
    /// `None`: the policy's default (1 for `add-best` and `vertical`,
    /// [`DEFAULT_SELECTOR_HEADROOM`] for `autoslo`).
    pub selector_headroom: Option<f64>,
    /// Whether the selector adds every outstanding query at a branch's end (Algorithm 3 line 27
    /// as listed) or only those issued after t_d + δ (as Figure 4 draws it); see
    /// [`SelectorParams::count_backlog`]. `None`: the listing. Figure 4's reading helped the
    /// forced decisions of Table 3 on seeds 10–14 but not whole runs (see `docs/autoscaler.md`), so
    /// no policy uses it by default.
    pub selector_counts_backlog: Option<bool>,
    /// Whether a spinup tied with do-nothing in the selector wins the tie (**a change**; see
    /// [`SelectorParams::spinup_on_tie`]). `None`: the listing (do-nothing wins).
    pub selector_spinup_on_tie: Option<bool>,
}

impl Default for AutoscalerParams {
    fn default() -> Self {
        Self {
            tau_target: 0.1,
            tau_trigger: 0.1,
            theta: 16,
            mu: None,
            window_s: 300.0,
            t_idle_s: 600.0,
            t_min_lifetime_s: 1200.0,
            sizes: vec![4, 8, 16, 32],
            spinup_s: 300.0,
            min_clusters: 1,
            max_clusters: 10,
            force_at: None,
            teardown: true,
            tick_s: 60.0,
            selector_headroom: None,
            selector_counts_backlog: None,
            selector_spinup_on_tie: None,
        }
    }
}

impl AutoscalerParams {
    pub fn validated(self) -> Result<Self> {
        for (what, v) in [("τ_target", self.tau_target), ("τ_trigger", self.tau_trigger)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(AutoSloError::out_of_range(what, "in [0, 1]", v));
            }
        }
        for (what, v) in [("T_idle", self.t_idle_s), ("T_min_lifetime", self.t_min_lifetime_s), ("spinup delay δ", self.spinup_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(AutoSloError::out_of_range(what, "a finite time ≥ 0 s", v));
            }
        }
        for (what, v) in [("window w", self.window_s), ("tick", self.tick_s)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(AutoSloError::out_of_range(what, "a finite time > 0 s", v));
            }
        }
        if self.min_clusters == 0 || self.max_clusters < self.min_clusters {
            return Err(AutoSloError::InvalidConfig(format!("need 1 ≤ min_clusters ≤ max_clusters, got {} and {}", self.min_clusters, self.max_clusters)));
        }
        if let Some(t) = self.force_at {
            if !(t.is_finite() && t >= 0.0) {
                return Err(AutoSloError::out_of_range("forced decision time", "a finite time ≥ 0 s", t));
            }
        }
        self.selector().validated()?;
        Ok(self)
    }

    /// The selector's share of the parameters.
    pub fn selector(&self) -> SelectorParams {
        SelectorParams { sizes: self.sizes.clone(), spinup_s: self.spinup_s, mu: self.mu.unwrap_or(DEFAULT_MU), window_s: self.window_s, tau_target: self.tau_target, slo_headroom: self.selector_headroom.unwrap_or(1.0), count_backlog: self.selector_counts_backlog.unwrap_or(true), spinup_on_tie: self.selector_spinup_on_tie.unwrap_or(false), ..SelectorParams::default() }
    }
}

/// One scaling decision, as the autoscaler logs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub time: f64,
    /// What fired: `trigger`, `forced`.
    pub cause: &'static str,
    pub check: Option<TriggerCheck>,
    /// The selector's comparison (policies that consult it).
    pub selection: Option<SpinupDecision>,
    /// The size spun up, if any.
    pub size: Option<u32>,
}

/// The AutoSLO Autoscaler and its trigger × scaling baselines.
#[derive(Debug, Clone)]
pub struct Autoscaler {
    scaling: Scaling,
    trigger: TriggerKind,
    params: AutoscalerParams,
    windows: ObservationWindows,
    spinup: SpinupTrigger,
    last_routed: BTreeMap<ClusterId, f64>,
    /// A vertical replacement under way: (spinup time, size, clusters to drain once it is ready).
    replace: Option<(f64, u32, Vec<ClusterId>)>,
    forced: bool,
    name: String,
    /// Every decision taken (trigger fired or forced), in time order.
    pub decisions: Vec<Decision>,
    /// Selections that failed since [`Scaler::take_failures`] was last called: (time, why).
    failures: Vec<(f64, String)>,
}

impl Autoscaler {
    pub fn new(scaling: Scaling, trigger: TriggerKind, params: AutoscalerParams) -> Result<Self> {
        let params = params.validated()?;
        let name = match (scaling, trigger) {
            (Scaling::Noop, _) => "noop".to_string(),
            (Scaling::AddBest, TriggerKind::Combined) => "autoslo".to_string(),
            (s, t) => format!("{}+{}", s.name(), t.name()),
        };
        Ok(Self {
            scaling,
            trigger,
            windows: ObservationWindows::new(params.window_s),
            params,
            spinup: SpinupTrigger::default(),
            last_routed: BTreeMap::new(),
            replace: None,
            forced: false,
            name,
            decisions: Vec::new(),
            failures: Vec::new(),
        })
    }

    pub fn params(&self) -> &AutoscalerParams {
        &self.params
    }

    /// The windows (for inspection).
    pub fn windows(&self) -> &ObservationWindows {
        &self.windows
    }

    /// `MaybeSpinup` now (exposed for benches and tests; the event loop calls it on each routed
    /// query).
    pub fn maybe_spinup(&mut self, now: f64, clusters: &[ClusterInfo], router: &dyn Router) -> TriggerCheck {
        self.spinup.maybe_spinup(self.trigger, now, clusters, router, &self.windows, self.params.theta, self.params.tau_trigger)
    }

    fn active(clusters: &[ClusterInfo]) -> usize {
        clusters.iter().filter(|c| c.accepts_queries()).count()
    }

    /// Decide what to spin up now (the trigger fired, or a forced decision).
    fn decide(&mut self, now: f64, clusters: &[ClusterInfo], router: &dyn Router, cause: &'static str, check: Option<TriggerCheck>) -> Vec<Action> {
        let mut d = Decision { time: now, cause, check, selection: None, size: None };
        let mut out = Vec::new();
        if Self::active(clusters) < self.params.max_clusters {
            match self.scaling {
                Scaling::Noop => {}
                Scaling::Horizontal => {
                    d.size = clusters.iter().filter(|c| c.state == ClusterState::Ready).map(|c| c.size).max();
                }
                Scaling::AddBest | Scaling::Vertical => {
                    let mode = if self.scaling == Scaling::Vertical { Mode::Replace } else { Mode::Add };
                    // Without the autoslo router (refused by `check` before a run) or when the
                    // simulation fails (it refuses its input), the decision is
                    // do-nothing, recorded with no selection; a failure is kept for
                    // `take_failures`: the emulator and the simulator stop on it, a live control
                    // plane logs it.
                    if let Some(autoslo) = router.as_autoslo() {
                        match find_best_spinup_size(autoslo, clusters, &self.windows.arrivals(), now, &self.params.selector(), mode) {
                            Ok(sel) => {
                                d.size = sel.size;
                                d.selection = Some(sel);
                            }
                            Err(e) => self.failures.push((now, format!("the Spinup Size Selector failed: {e}"))),
                        }
                    }
                }
            }
        }
        match d.size {
            Some(size) => {
                let reason = if cause == "forced" { "forced" } else { "spinup-trigger" };
                out.push(Action::spin_up(size, reason));
                if self.scaling == Scaling::Vertical {
                    let old = clusters.iter().filter(|c| c.accepts_queries()).map(|c| c.id).collect();
                    self.replace = Some((now, size, old));
                }
            }
            None => self.spinup.do_nothing(now, self.params.spinup_s),
        }
        self.decisions.push(d);
        out
    }

    fn teardowns(&self, now: f64, clusters: &[ClusterInfo]) -> Vec<Action> {
        if !self.params.teardown || self.scaling == Scaling::Noop {
            return Vec::new();
        }
        let last = |c: &ClusterInfo| self.last_routed.get(&c.id).copied().unwrap_or(c.ready_at);
        teardown_candidates(now, clusters, last, self.params.t_idle_s, self.params.t_min_lifetime_s, self.params.min_clusters).into_iter().map(|c| Action::tear_down(c, "idle")).collect()
    }
}

impl Scaler for Autoscaler {
    fn on_event(&mut self, now: f64, event: &Event<'_>, clusters: &[ClusterInfo], router: &dyn Router) -> Vec<Action> {
        match *event {
            Event::Arrival { query } => {
                self.windows.on_arrival(query);
                Vec::new()
            }
            Event::Completion { query, latency, censored, .. } => {
                self.windows.on_completion(now, Completed { arrival: query.arrival, latency, slo: query.slo, censored });
                Vec::new()
            }
            Event::Routed { cluster, .. } => {
                self.last_routed.insert(cluster, now);
                self.windows.truncate(now);
                let mut out = self.teardowns(now, clusters);
                if self.scaling == Scaling::Noop {
                    return out;
                }
                if let Some(at) = self.params.force_at {
                    if !self.forced && now >= at {
                        self.forced = true;
                        out.extend(self.decide(now, clusters, router, "forced", None));
                        return out;
                    }
                }
                let check = self.maybe_spinup(now, clusters, router);
                if check.fire {
                    out.extend(self.decide(now, clusters, router, "trigger", Some(check)));
                }
                out
            }
            Event::ClusterReady { cluster } => {
                let mut out = Vec::new();
                if let Some((at, size, old)) = self.replace.take() {
                    let new = clusters.iter().find(|c| c.id == cluster);
                    if new.is_some_and(|c| c.requested_at == at && c.size == size && !old.contains(&c.id)) {
                        let live = |id: &ClusterId| clusters.iter().any(|c| c.id == *id && c.accepts_queries() && c.state == ClusterState::Ready);
                        out.extend(old.iter().filter(|id| live(id)).map(|&id| Action::tear_down(id, "replaced")));
                    } else {
                        self.replace = Some((at, size, old));
                    }
                }
                out
            }
            Event::Tick => {
                self.windows.truncate(now);
                self.teardowns(now, clusters)
            }
            Event::ClusterGone { cluster } => {
                self.last_routed.remove(&cluster);
                Vec::new()
            }
        }
    }
    fn take_failures(&mut self) -> Vec<(f64, String)> {
        std::mem::take(&mut self.failures)
    }
    fn decisions(&self) -> &[Decision] {
        &self.decisions
    }
    fn check(&self, router: &dyn Router) -> Result<()> {
        if matches!(self.scaling, Scaling::AddBest | Scaling::Vertical) && router.as_autoslo().is_none() {
            return Err(AutoSloError::InvalidConfig(format!(
                "the `{}` autoscaler simulates with the Query Router's predictions: route with `autoslo` or `autoslo-latency`, not `{}`",
                self.name,
                router.name()
            )));
        }
        if self.trigger == TriggerKind::Combined && self.scaling != Scaling::Noop && router.as_autoslo().is_none() {
            return Err(AutoSloError::InvalidConfig(format!("the `combined` trigger reads the running queries' predictions: route with `autoslo` or `autoslo-latency`, not `{}`", router.name())));
        }
        Ok(())
    }
    fn tick_interval(&self) -> Option<f64> {
        (self.params.teardown && self.scaling != Scaling::Noop).then_some(self.params.tick_s)
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// The `autoslo` policy's selector headroom: the Spinup Size Selector counts a violation when
/// the predicted latency × 2 exceeds the SLO. **A change** to Algorithm 3 (literal: 1), chosen on
/// seeds disjoint from those reported: over μ ∈ {16, 32, 64, 128} × headroom ∈ {1.25 (the Query
/// Router's at the time), 1.5, 2}, the cheapest on Redbench-like days (seeds 100 and 7, 2024-05-01 and
/// 2024-06-05, κ 4 and 2, the untuned configuration) among those that cut Table 3's violations by
/// ≥ 90 % against `noop` on seeds 10–14 and keep every one of those days within τ (see
/// `docs/autoscaler.md`). The short branches of the selector judge a new cluster while it is still
/// empty, so they favour sizes too small for the load that follows; the headroom corrects for it.
/// Kept when the router's headroom became 1.5, which did not make those tuning seeds worse.
pub const DEFAULT_SELECTOR_HEADROOM: f64 = 2.0;

/// μ, the completions each Spinup Size Selector branch waits for, unless a policy says otherwise:
/// the reference value, which the literal `add-best`, `vertical` and `horizontal` keep.
pub const DEFAULT_MU: usize = 16;

/// The `autoslo` policy's μ: **a setting chosen with the selector headroom**, by the same rule and
/// on the same seeds (Table 3 on seeds 10–14, the 8 tuning days of seeds 100 and 7). When that
/// grid was re-run after the 2026-12-03 refit, μ = 32 with headroom 2 became the cheapest setting
/// that meets both conditions of the rule (`scripts/selector_grid.py`, `docs/autoscaler.md`).
pub const DEFAULT_AUTOSLO_MU: usize = 32;

/// The `autoslo` policy's parameters: `params` with its selector headroom and μ where unset.
pub(crate) fn autoslo_params(params: AutoscalerParams) -> AutoscalerParams {
    AutoscalerParams { selector_headroom: params.selector_headroom.or(Some(DEFAULT_SELECTOR_HEADROOM)), mu: params.mu.or(Some(DEFAULT_AUTOSLO_MU)), ..params }
}

/// A scaling policy by name (see the module docs). `trigger` applies to `add-best`, `horizontal`
/// and `vertical` (default `combined`); `options` carries the Snowflake and RAIS settings.
pub fn scaler_by_name(name: &str, trigger: Option<&str>, params: AutoscalerParams, options: &ScalerOptions) -> Result<Box<dyn Scaler>> {
    if let (Some(t), "snowflake-standard" | "snowflake-economy" | "rais") = (trigger, name) {
        return Err(AutoSloError::InvalidConfig(format!("`{name}` starts clusters by its own rule and takes no trigger (got `{t}`); a trigger applies to add-best, horizontal and vertical")));
    }
    let trig = match trigger {
        None => TriggerKind::Combined,
        Some(t) => match TriggerKind::parse(t) {
            Some(k) => k,
            None if t.starts_with("queue@") => {
                return Err(AutoSloError::InvalidConfig(format!("the trigger queue@N needs a whole number N ≥ 1 of outstanding queries, got `{t}`")));
            }
            None => return Err(AutoSloError::UnknownPolicy { name: t.into(), known: TRIGGERS.join(", ") }),
        },
    };
    let scaling = |s| Autoscaler::new(s, trig, params.clone()).map(|a| Box::new(a) as Box<dyn Scaler>);
    match name {
        "autoslo" => {
            if trigger.is_some_and(|t| t != "combined") {
                return Err(AutoSloError::InvalidConfig("`autoslo` is add-best with the combined trigger; name `add-best` to pick another trigger".into()));
            }
            Autoscaler::new(Scaling::AddBest, TriggerKind::Combined, autoslo_params(params)).map(|a| Box::new(a) as Box<dyn Scaler>)
        }
        "add-best" => scaling(Scaling::AddBest),
        "horizontal" => scaling(Scaling::Horizontal),
        "vertical" => scaling(Scaling::Vertical),
        "noop" => scaling(Scaling::Noop),
        "snowflake-standard" | "snowflake-economy" => {
            let policy = if name == "snowflake-standard" { snowflake::Policy::Standard } else { snowflake::Policy::Economy };
            Ok(Box::new(snowflake::SnowflakeScaler::new(policy, options.warehouse_size, params.min_clusters, params.max_clusters, options.max_concurrency)?))
        }
        "rais" => Ok(Box::new(rais::RaisScaler::new(options.rais_target, params.sizes.clone(), params.min_clusters, params.max_clusters)?)),
        _ => Err(AutoSloError::UnknownPolicy { name: name.into(), known: SCALING_POLICIES.join(", ") }),
    }
}

/// Settings of the policies users run today.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalerOptions {
    /// Snowflake: the size of every cluster of the warehouse (RPU); `None` = the largest initial cluster.
    pub warehouse_size: Option<u32>,
    /// Snowflake: queries one cluster runs at once (`MAX_CONCURRENCY_LEVEL`, default 8).
    pub max_concurrency: usize,
    /// RAIS-like: the price-performance level.
    pub rais_target: rais::Level,
}

impl Default for ScalerOptions {
    fn default() -> Self {
        Self { warehouse_size: None, max_concurrency: 8, rais_target: rais::Level::Balanced }
    }
}

#[cfg(all(test, feature = "torch"))]
mod tests;
