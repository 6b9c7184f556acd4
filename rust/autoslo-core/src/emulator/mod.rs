//! The warehouse emulator: a seeded discrete-event model of a multi-cluster data warehouse, the
//! ground truth every experiment is judged on. It is independent of any latency predictor.
//!
//! Each query's isolated work comes from the TPC-DS [`catalog`](crate::catalog) for the size of
//! the cluster it runs on, multiplied by run-to-run noise drawn from the measured residuals of
//! repeated runs at that size (a mean-preserving smoothed bootstrap, heavy-tailed as measured).
//! Concurrent queries interfere through compute sharing, spill when the memory demands of the
//! queries running together exceed the cluster's memory, and memory-aware admission queueing
//! ([`InterferenceModel`]): which queries co-run matters, not only how many. Clusters spun up during a run take a measured or fixed time to become
//! ready and start cold (work × `cold_start.factor`, fading linearly over `cold_start.duration_s`).
//! Queries that exceed the timeout leave with a censored latency. Billing follows §2.
//!
//! Routing and scaling come through the control-plane interface ([`Router`], [`Scaler`]), the same
//! one the Query Router and Autoscaler use. Same inputs and seed → identical trace.

mod bound;
mod interference;
mod lifecycle;

pub use bound::{Cut, CutReason, RunBound};

pub use interference::{memory_demand, super_linearity, InterferenceModel, InterferenceParams, INTERFERENCE_HEADER, NUM_PARAMS};
pub use lifecycle::{measured_cycles, Lifecycle};

use std::collections::{HashMap, VecDeque};

use crate::billing::{BillingPolicy, BillingTimer};
use crate::catalog::{self, Catalog, QueryText};
use crate::cluster::{ClusterId, ClusterInfo, ClusterState};
use crate::control::{fail_on_undecided, Action, Event, Router, Scaler};
use crate::error::{AutoSloError, Result};
use crate::rng::{derive_seed, Rng};
use crate::tenancy::{Admission, AdmissionQueue, Offer, Release};
use crate::trace::{attribute_cost_by_work, ClusterRecord, Outcome, RejectReason, Trace, TraceRow};
use crate::workload::Workload;

/// Cold start of clusters spun up during a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ColdStart {
    /// Work multiplier of a query starting the moment its cluster becomes ready (≥ 1).
    pub factor: f64,
    /// Seconds after readiness over which the multiplier fades linearly to 1.
    pub duration_s: f64,
}

impl Default for ColdStart {
    fn default() -> Self {
        ColdStart { factor: 1.5, duration_s: 300.0 }
    }
}

impl ColdStart {
    /// Checks the factor (≥ 1) and the duration (≥ 0 s).
    pub fn validated(self) -> Result<Self> {
        if !(self.factor.is_finite() && self.factor >= 1.0) {
            return Err(AutoSloError::out_of_range("cold-start factor", "≥ 1", self.factor));
        }
        if !(self.duration_s.is_finite() && self.duration_s >= 0.0) {
            return Err(AutoSloError::out_of_range("cold-start duration", "≥ 0 s", self.duration_s));
        }
        Ok(self)
    }

    /// The work multiplier of a query starting `age_s` seconds after its cluster became ready.
    pub fn multiplier(&self, age_s: f64) -> f64 {
        let fade = if self.duration_s > 0.0 { (1.0 - age_s / self.duration_s).clamp(0.0, 1.0) } else { 0.0 };
        1.0 + (self.factor - 1.0) * fade
    }
}

/// A fault: cluster `cluster` runs `factor`× slower over `[from_s, until_s)`, silently (nothing
/// in the control plane says so; only its completions show it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Degradation {
    pub cluster: ClusterId,
    pub factor: f64,
    pub from_s: f64,
    pub until_s: f64,
}

/// Emulator settings.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatorConfig {
    pub seed: u64,
    pub billing: BillingPolicy,
    pub lifecycle: Lifecycle,
    pub cold_start: ColdStart,
    /// Per-query timeout (s) from submission to a cluster (its arrival, unless it waited at the
    /// router boundary); `None` = no timeout.
    pub timeout_s: Option<f64>,
    /// Run-to-run noise on isolated work (off: every run takes the catalog mean).
    pub noise: bool,
    pub interference: InterferenceModel,
    /// Silent slowdowns of clusters (fault injection; none by default).
    pub degradations: Vec<Degradation>,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            seed: 0,
            billing: BillingPolicy::default(),
            lifecycle: Lifecycle::default(),
            cold_start: ColdStart::default(),
            timeout_s: Some(3600.0),
            noise: true,
            interference: InterferenceModel::default(),
            degradations: Vec::new(),
        }
    }
}

impl EmulatorConfig {
    fn validate(&self) -> Result<()> {
        self.billing.validated()?;
        self.lifecycle.validate()?;
        self.cold_start.validated()?;
        if let Some(t) = self.timeout_s {
            if !(t.is_finite() && t > 0.0) {
                return Err(AutoSloError::out_of_range("timeout", "> 0 s", t));
            }
        }
        for (i, d) in self.degradations.iter().enumerate() {
            if !(d.factor.is_finite() && d.factor >= 1.0) {
                return Err(AutoSloError::out_of_range(format!("degradations[{i}].factor"), "≥ 1", d.factor));
            }
            if !(d.from_s.is_finite() && d.until_s.is_finite() && 0.0 <= d.from_s && d.from_s < d.until_s) {
                return Err(AutoSloError::InvalidConfig(format!("degradations[{i}]: the window must satisfy 0 ≤ from ({}) < until ({})", d.from_s, d.until_s)));
            }
        }
        Ok(())
    }
}

/// Remaining isolated work below which a query counts as finished (s).
const DONE_EPS: f64 = 1e-6;

struct Sim {
    info: ClusterInfo,
    params: InterferenceParams,
    /// (query index, remaining work, memory demand)
    running: Vec<(usize, f64, f64)>,
    /// Total memory demand of the running queries.
    demand: f64,
    /// The largest memory demand among the running queries (0 if none), unless `max_demand_stale`:
    /// then one that left may have held it, and [`Run::fill`] takes the maximum again.
    max_demand: f64,
    max_demand_stale: bool,
    /// (query index, its text on this cluster's size), FIFO.
    queue: VecDeque<(usize, TextAt)>,
    last_update: f64,
    rate: f64,
    timer: BillingTimer,
    teardown_s: f64,
    /// Readiness time for cold start (`None`: warm initial cluster).
    cold_from: Option<f64>,
    teardown_requested_at: Option<f64>,
    gone_at: f64,
    queries: usize,
    spinup_reason: &'static str,
    teardown_reason: Option<&'static str>,
    /// This cluster's degradations: (from, until, factor).
    slow: Vec<(f64, f64, f64)>,
    /// [`Sim::next_event`] as of the cluster's last change ([`Run::refresh`]): the main loop asks
    /// every cluster at every event, and most have not changed since.
    next_at: f64,
    /// The earliest time a running query times out, as of the last change (the running set only
    /// shrinks before the next one): no timeout scan is needed before it.
    running_timeout_at: f64,
}

impl Sim {
    /// The slowdown factor in force at `t` (1: healthy).
    fn slowdown(&self, t: f64) -> f64 {
        self.slow.iter().filter(|w| w.0 <= t && t < w.1).map(|w| w.2).fold(1.0, f64::max)
    }

    fn present(&self) -> usize {
        self.running.len() + self.queue.len()
    }

    fn advance(&mut self, t: f64) {
        let dt = t - self.last_update;
        if dt > 0.0 && !self.running.is_empty() {
            let d = self.rate * dt;
            self.running.iter_mut().for_each(|r| r.1 -= d);
        }
        self.last_update = self.last_update.max(t);
    }

    /// Time of the next thing that happens inside this cluster (completion, timeout, lifecycle),
    /// and the earliest time a running query times out (infinite: none, or no timeout).
    fn next_event(&self, submitted: &[f64], timeout: Option<f64>) -> (f64, f64) {
        let mut t = f64::INFINITY;
        // One pass over the running queries for both minima (adding the timeout after taking
        // the minimum gives the same value: rounding is monotonic).
        let (min_rem, min_submitted) = self.running.iter().fold((f64::INFINITY, f64::INFINITY), |(r, s), &(q, rem, _)| (r.min(rem), s.min(submitted[q])));
        let running_timeout_at = timeout.map_or(f64::INFINITY, |to| min_submitted + to);
        match self.info.state {
            ClusterState::Starting => t = t.min(self.info.ready_at),
            ClusterState::Stopping => t = t.min(self.gone_at),
            _ => {}
        }
        if !self.running.is_empty() {
            t = t.min(self.last_update + min_rem.max(0.0) / self.rate);
            // A slowdown starting or ending changes the rate: an event of its own.
            for w in &self.slow {
                for b in [w.0, w.1] {
                    if b > self.last_update {
                        t = t.min(b);
                    }
                }
            }
        }
        if let Some(to) = timeout {
            if let Some(&(q, _)) = self.queue.front() {
                t = t.min(submitted[q] + to);
            }
        }
        (t.min(running_timeout_at), running_timeout_at)
    }
}

/// Progress callback: `(arrivals processed, total)`; return `false` to interrupt the run.
pub use crate::progress::Progress;

struct Run<'a> {
    w: &'a Workload,
    cfg: &'a EmulatorConfig,
    cat: &'static Catalog,
    sims: Vec<Sim>,
    /// Indices into `sims` of the clusters not yet gone, ascending. A gone cluster has nothing
    /// left to happen in it, and the policies no longer see it: a month of autoscaling creates
    /// thousands of clusters, and every event would otherwise scan them all.
    present: Vec<usize>,
    arrival: Vec<f64>,
    /// When each query entered a cluster: its arrival, unless it waited at the router
    /// boundary (admission queue, deferral). Timeouts count from here.
    submitted: Vec<f64>,
    rows: Vec<Option<TraceRow>>,
    start: Vec<Option<f64>>,
    work: Vec<f64>,
    cycles: Vec<(u32, f64, f64)>,
    /// Events produced while processing, delivered to the policies afterwards:
    /// (query, cluster, latency, censored) or cluster ready / gone.
    pending: Vec<Pending>,
    /// [`TextAt`] per (query text, cluster size) met so far: a month repeats the same texts
    /// (297 in the bench's 1.5M arrivals).
    texts: HashMap<(QueryText, u32), TextAt>,
}

/// What the emulator needs of a query text on a cluster size, all fixed by the two: its mean
/// isolated runtime there, its memory demand ([`memory_demand`]) and its run-to-run noise pool
/// ([`Catalog::noise_ratios`]).
#[derive(Debug, Clone, Copy)]
struct TextAt {
    runtime: f64,
    demand: f64,
    ratios: &'static [f64],
    bandwidth: f64,
}

#[derive(Clone, Copy)]
enum Pending {
    Done(usize, ClusterId, f64, bool),
    Ready(ClusterId),
    Gone(ClusterId),
}

impl<'a> Run<'a> {
    /// The clusters as the control plane sees them (all but the gone ones, by id), written into
    /// `buf` (reused across events: the arrival path asks three times per query).
    fn infos_into(&self, buf: &mut Vec<ClusterInfo>) {
        buf.clear();
        buf.extend(self.present.iter().map(|&i| {
            let s = &self.sims[i];
            ClusterInfo { running: s.running.len(), queued: s.queue.len(), ..s.info }
        }));
    }

    fn add_cluster(&mut self, size: u32, now: f64, initial: bool, reason: &'static str) -> Result<ClusterId> {
        crate::cluster::check_base_capacity("cluster size", size)?;
        let id = self.sims.len() as ClusterId;
        self.present.push(self.sims.len());
        let mut rng = Rng::new(derive_seed(self.cfg.seed, (1 << 48) | id as u64));
        let (spinup, teardown) = self.cfg.lifecycle.draw(size, &mut rng, &self.cycles);
        let (state, ready_at) = if initial || spinup <= 0.0 { (ClusterState::Ready, now) } else { (ClusterState::Starting, now + spinup) };
        self.sims.push(Sim {
            info: ClusterInfo { id, size, state, requested_at: now, ready_at, running: 0, queued: 0 },
            params: self.cfg.interference.at(size),
            running: Vec::new(),
            demand: 0.0,
            max_demand: 0.0,
            max_demand_stale: false,
            queue: VecDeque::new(),
            last_update: now,
            rate: 1.0,
            timer: BillingTimer::new(self.cfg.billing.minimum_s),
            teardown_s: teardown,
            cold_from: if initial { None } else { Some(ready_at) },
            teardown_requested_at: None,
            gone_at: f64::NAN,
            queries: 0,
            spinup_reason: reason,
            teardown_reason: None,
            slow: self.cfg.degradations.iter().filter(|d| d.cluster == id).map(|d| (d.from_s, d.until_s, d.factor)).collect(),
            next_at: f64::INFINITY,
            running_timeout_at: f64::INFINITY,
        });
        self.refresh(id as usize);
        Ok(id)
    }

    /// Query text `text` on cluster `c`'s size, from the memo or computed once.
    fn text_at(&mut self, text: QueryText, c: usize) -> Result<TextAt> {
        let s = &self.sims[c];
        let size = s.info.size;
        if let Some(at) = self.texts.get(&(text, size)) {
            return Ok(*at);
        }
        let runtime = self.cat.isolated_runtime(text, size)?;
        let demand = memory_demand(self.cat, &s.params, text.template, runtime, self.cat.mean_runtime_at(size));
        let (ratios, bandwidth) = self.cat.noise_ratios(text, size);
        let at = TextAt { runtime, demand, ratios, bandwidth };
        self.texts.insert((text, size), at);
        Ok(at)
    }

    /// Noise multiplier of query `qi` whose text on the cluster's size is `at`: a smoothed
    /// bootstrap of the measured run ÷ mean ratios of its text at that size (or of a donor entry,
    /// see `Catalog::noise_ratios`), drawn from the query's own random stream so the draw does
    /// not depend on routing order. Mean 1.
    fn noise(&self, qi: usize, at: &TextAt) -> f64 {
        if !self.cfg.noise {
            return 1.0;
        }
        let q = &self.w.queries()[qi];
        let (ratios, h) = (at.ratios, at.bandwidth);
        let mut rng = Rng::new(derive_seed(self.cfg.seed, q.id));
        let r = ratios[rng.below(ratios.len())];
        if h > 0.0 {
            r * (h * rng.normal() - 0.5 * h * h).exp()
        } else {
            r
        }
    }

    fn start_query(&mut self, c: usize, qi: usize, at: &TextAt, t: f64) -> Result<()> {
        let demand = at.demand;
        let mut work = at.runtime * self.noise(qi, at);
        if let Some(ready) = self.sims[c].cold_from {
            work *= self.cfg.cold_start.multiplier(t - ready);
        }
        self.start[qi] = Some(t);
        self.work[qi] = work;
        let s = &mut self.sims[c];
        s.running.push((qi, work, demand));
        s.demand += demand;
        s.max_demand = s.max_demand.max(demand);
        Ok(())
    }

    fn finish(&mut self, c: usize, qi: usize, t: f64, outcome: Outcome, executed: f64) {
        let s = &self.sims[c];
        let arrival = self.arrival[qi];
        let latency = match outcome {
            Outcome::Completed => t - arrival,
            // The timeout, plus any wait at the boundary before it started counting.
            Outcome::TimedOut => self.cfg.timeout_s.map_or(t - arrival, |to| to + (self.submitted[qi] - arrival)),
            Outcome::Rejected(_) => 0.0,
            Outcome::Failed | Outcome::Cancelled => t - arrival,
        };
        self.rows[qi] = Some(TraceRow {
            query: qi,
            cluster: Some(s.info.id),
            cluster_size: Some(s.info.size),
            arrival,
            start: self.start[qi],
            end: t,
            latency,
            outcome,
            work: executed,
            cost: 0.0,
            cost_micro_usd: 0,
        });
        self.pending.push(Pending::Done(qi, s.info.id, latency, outcome == Outcome::TimedOut));
    }

    /// Record query `qi` as rejected at admission at `t`: no cluster, no work, no cost.
    fn reject(&mut self, qi: usize, t: f64, reason: RejectReason) {
        let arrival = self.arrival[qi];
        self.rows[qi] = Some(TraceRow { query: qi, cluster: None, cluster_size: None, arrival, start: None, end: t, latency: 0.0, outcome: Outcome::Rejected(reason), work: 0.0, cost: 0.0, cost_micro_usd: 0 });
    }

    /// Bring cluster `c` to time `t`, handling everything that happens inside it at `t`.
    fn process(&mut self, c: usize, t: f64) -> Result<()> {
        self.sims[c].advance(t);
        let mut left = false;
        match self.sims[c].info.state {
            ClusterState::Starting if t >= self.sims[c].info.ready_at => {
                self.sims[c].info.state = ClusterState::Ready;
                if !self.sims[c].queue.is_empty() {
                    self.sims[c].timer.on_arrival(t)?;
                }
                self.pending.push(Pending::Ready(c as ClusterId));
            }
            ClusterState::Stopping if t >= self.sims[c].gone_at => {
                self.sims[c].info.state = ClusterState::Gone;
                self.present.retain(|&i| i != c);
                self.pending.push(Pending::Gone(c as ClusterId));
            }
            _ => {}
        }
        // Completions.
        let mut i = 0;
        while i < self.sims[c].running.len() {
            let (qi, rem, d) = self.sims[c].running[i];
            if rem <= DONE_EPS {
                self.sims[c].running.swap_remove(i);
                self.sims[c].demand -= d;
                self.sims[c].max_demand_stale |= d >= self.sims[c].max_demand;
                let work = self.work[qi];
                self.finish(c, qi, t, Outcome::Completed, work);
                left = true;
            } else {
                i += 1;
            }
        }
        // Timeouts.
        if let Some(to) = self.cfg.timeout_s {
            let mut i = if self.sims[c].running_timeout_at <= t { 0 } else { self.sims[c].running.len() };
            while i < self.sims[c].running.len() {
                let (qi, rem, d) = self.sims[c].running[i];
                if self.submitted[qi] + to <= t {
                    self.sims[c].running.swap_remove(i);
                    self.sims[c].demand -= d;
                    self.sims[c].max_demand_stale |= d >= self.sims[c].max_demand;
                    let executed = (self.work[qi] - rem).max(0.0);
                    self.finish(c, qi, t, Outcome::TimedOut, executed);
                    left = true;
                } else {
                    i += 1;
                }
            }
            while let Some(&(qi, _)) = self.sims[c].queue.front() {
                if self.submitted[qi] + to > t {
                    break;
                }
                self.sims[c].queue.pop_front();
                self.finish(c, qi, t, Outcome::TimedOut, 0.0);
                left = true;
            }
        }
        self.fill(c, t)?;
        let s = &mut self.sims[c];
        if left && s.present() == 0 {
            s.timer.on_idle(t)?;
            if s.info.state == ClusterState::Draining {
                s.info.state = ClusterState::Stopping;
                s.gone_at = t + s.teardown_s;
            }
        }
        self.refresh(c);
        Ok(())
    }

    /// Record cluster `c`'s next event after a change to it.
    fn refresh(&mut self, c: usize) {
        (self.sims[c].next_at, self.sims[c].running_timeout_at) = self.sims[c].next_event(&self.submitted, self.cfg.timeout_s);
    }

    /// Start queued queries, in FIFO order, while the head is admitted (ready or draining
    /// clusters); then set the cluster's progress rate.
    fn fill(&mut self, c: usize, t: f64) -> Result<()> {
        if matches!(self.sims[c].info.state, ClusterState::Ready | ClusterState::Draining) {
            while let Some(&(qi, at)) = self.sims[c].queue.front() {
                let s = &self.sims[c];
                if !s.params.admits(s.running.len(), s.demand, at.demand) {
                    break;
                }
                self.sims[c].queue.pop_front();
                self.start_query(c, qi, &at, t)?;
            }
        }
        let s = &mut self.sims[c];
        if s.running.is_empty() {
            s.demand = 0.0; // no drift from repeated additions and removals
        }
        if s.max_demand_stale {
            s.max_demand = s.running.iter().map(|r| r.2).fold(0.0, f64::max);
            s.max_demand_stale = false;
        }
        s.rate = s.params.rate(s.running.len(), s.queue.len(), s.demand, s.max_demand) / s.slowdown(t);
        Ok(())
    }

    fn admit(&mut self, c: ClusterId, qi: usize, t: f64) -> Result<()> {
        self.submitted[qi] = t;
        let Some(s) = self.sims.get_mut(c as usize) else {
            return Err(AutoSloError::InvalidAction(format!("query {} routed to cluster {c}, which does not exist", self.w.queries()[qi].id)));
        };
        if !s.info.accepts_queries() {
            return Err(AutoSloError::InvalidAction(format!(
                "query {} routed to cluster {c}, which is {} and takes no queries",
                self.w.queries()[qi].id,
                s.info.state.name()
            )));
        }
        s.advance(t);
        s.queries += 1;
        if s.info.state == ClusterState::Ready {
            s.timer.on_arrival(t)?;
        }
        let at = self.text_at(self.w.queries()[qi].text, c as usize)?;
        self.sims[c as usize].queue.push_back((qi, at));
        self.fill(c as usize, t)?;
        self.refresh(c as usize);
        Ok(())
    }

    fn apply(&mut self, actions: Vec<Action>, t: f64) -> Result<()> {
        for a in actions {
            match a {
                Action::SpinUp { size, reason } => {
                    self.add_cluster(size, t, false, reason)?;
                }
                Action::TearDown { cluster, reason } => {
                    let Some(s) = self.sims.get_mut(cluster as usize) else {
                        return Err(AutoSloError::InvalidAction(format!("teardown of cluster {cluster}, which does not exist")));
                    };
                    if !s.info.accepts_queries() {
                        return Err(AutoSloError::InvalidAction(format!("teardown of cluster {cluster}, which is already {}", s.info.state.name())));
                    }
                    if s.info.state == ClusterState::Starting && !s.queue.is_empty() {
                        return Err(AutoSloError::InvalidAction(format!(
                            "teardown of cluster {cluster}, which is still starting with {} queries waiting for it; tear it down once it is ready",
                            s.queue.len()
                        )));
                    }
                    s.teardown_requested_at = Some(t);
                    s.teardown_reason = Some(reason);
                    if s.present() == 0 {
                        s.info.state = ClusterState::Stopping;
                        s.gone_at = t + s.teardown_s;
                    } else {
                        s.info.state = ClusterState::Draining;
                    }
                    self.refresh(cluster as usize);
                }
            }
        }
        Ok(())
    }

    /// Deliver pending events to the policies and apply the scaler's answers.
    fn dispatch(&mut self, t: f64, router: &mut dyn Router, scaler: &mut dyn Scaler, infos: &mut Vec<ClusterInfo>) -> Result<()> {
        let mut stale = true;
        while !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            for p in pending {
                let qs = self.w.queries();
                let ev = match p {
                    Pending::Done(qi, cluster, latency, censored) => Event::Completion { query: &qs[qi], cluster, latency, censored },
                    Pending::Ready(cluster) => Event::ClusterReady { cluster },
                    Pending::Gone(cluster) => Event::ClusterGone { cluster },
                };
                router.observe(t, &ev);
                // The clusters change between these events only by the scaler's actions.
                if stale {
                    self.infos_into(infos);
                    stale = false;
                }
                let actions = scaler.on_event(t, &ev, infos, &*router);
                if !actions.is_empty() {
                    self.apply(actions, t)?;
                    stale = true;
                }
            }
        }
        Ok(())
    }
}

/// Emulate `workload` on a warehouse that starts with `initial_clusters` (sizes in RPU, ready and
/// warm at t = 0), routing with `router` and scaling with `scaler`. Returns the execution trace.
///
/// Cost: O((Q + E) · C · k) for Q queries, E other events, C clusters and k running queries per
/// cluster (k is bounded by the concurrency limit).
pub fn emulate(workload: &Workload, initial_clusters: &[u32], router: &mut dyn Router, scaler: &mut dyn Scaler, cfg: &EmulatorConfig) -> Result<Trace> {
    emulate_with_progress(workload, initial_clusters, router, scaler, cfg, &mut |_, _| true)
}

/// [`emulate`] with a progress callback, called as [`Ticker`](crate::progress::Ticker) says (every
/// 4096 arrivals, and every 100 ms of a slow run) and at the end; returning `false` stops the run
/// with [`AutoSloError::Interrupted`].
pub fn emulate_with_progress(
    workload: &Workload,
    initial_clusters: &[u32],
    router: &mut dyn Router,
    scaler: &mut dyn Scaler,
    cfg: &EmulatorConfig,
    progress: Progress<'_>,
) -> Result<Trace> {
    emulate_admitted(workload, initial_clusters, router, scaler, None, None, cfg, progress)
}

/// [`emulate_with_progress`] with admission at the router boundary: each arrival is first put
/// to `admission`; a rejected query gets its outcome row (never met, no cluster, no cost) and is
/// not routed.
pub fn emulate_admitted(
    workload: &Workload,
    initial_clusters: &[u32],
    router: &mut dyn Router,
    scaler: &mut dyn Scaler,
    admission: Option<&mut dyn Admission>,
    queue: Option<&mut AdmissionQueue>,
    cfg: &EmulatorConfig,
    progress: Progress<'_>,
) -> Result<Trace> {
    match run(workload, initial_clusters, router, scaler, admission, queue, cfg, None, progress)? {
        Bounded::Finished(trace) => Ok(trace),
        Bounded::Cut(_) => unreachable!("a run without a bound is never cut"),
    }
}

/// The end of a run under a [`RunBound`].
#[derive(Debug)]
pub enum Bounded {
    /// It ran to the end.
    Finished(Trace),
    /// The bound stopped it.
    Cut(Cut),
}

/// [`emulate_with_progress`] under `bound`: the run stops as soon as it cannot meet the bound's
/// violation limits or is dearer than its cost (checked at every arrival).
pub fn emulate_bounded(workload: &Workload, initial_clusters: &[u32], router: &mut dyn Router, scaler: &mut dyn Scaler, cfg: &EmulatorConfig, bound: &RunBound<'_>, progress: Progress<'_>) -> Result<Bounded> {
    run(workload, initial_clusters, router, scaler, None, None, cfg, Some(bound), progress)
}

#[allow(clippy::too_many_arguments)]
fn run(
    workload: &Workload,
    initial_clusters: &[u32],
    router: &mut dyn Router,
    scaler: &mut dyn Scaler,
    mut admission: Option<&mut dyn Admission>,
    mut queue: Option<&mut AdmissionQueue>,
    cfg: &EmulatorConfig,
    bound: Option<&RunBound<'_>>,
    progress: Progress<'_>,
) -> Result<Bounded> {
    cfg.validate()?;
    scaler.check(&*router)?;
    if initial_clusters.is_empty() && scaler.tick_interval().is_none() {
        return Err(AutoSloError::InvalidConfig("no clusters: give at least one initial cluster size".into()));
    }
    let n = workload.len();
    let mut ticker = crate::progress::Ticker::new();
    let mut run = Run {
        w: workload,
        cfg,
        cat: catalog::tpcds(),
        sims: Vec::new(),
        present: Vec::new(),
        arrival: workload.queries().iter().map(|q| q.arrival).collect(),
        submitted: workload.queries().iter().map(|q| q.arrival).collect(),
        rows: vec![None; n],
        start: vec![None; n],
        work: vec![0.0; n],
        cycles: measured_cycles(),
        pending: Vec::new(),
        texts: HashMap::new(),
    };
    for &size in initial_clusters {
        run.add_cluster(size, 0.0, true, "initial")?;
    }
    let mut next_q = 0usize;
    let mut infos: Vec<ClusterInfo> = Vec::new();
    let mut next_tick = scaler.tick_interval().map(|d| d.max(1e-3));
    let mut now = 0.0f64;
    let mut tracker = bound.map(|b| bound::BoundTracker::new(b, workload));
    loop {
        let t_arrival = run.arrival.get(next_q).copied().unwrap_or(f64::INFINITY);
        let (c_min, t_cluster) = run
            .present
            .iter()
            .map(|&i| (i, run.sims[i].next_at))
            .fold((usize::MAX, f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a });
        let waiting = queue.as_ref().is_some_and(|q| !q.is_empty());
        let busy = next_q < n || waiting || run.present.iter().any(|&i| run.sims[i].present() > 0);
        if !busy {
            break;
        }
        let t_tick = next_tick.unwrap_or(f64::INFINITY);
        // A waiting query's latest start is an event: it expires then, as a typed outcome.
        let t_expiry = queue.as_ref().map_or(f64::INFINITY, |q| q.next_expiry());
        if t_expiry.is_finite() && t_expiry < t_arrival.min(t_cluster).min(t_tick) {
            // Strictly after the latest start, so the query is due; the clock moves there, since
            // a deferred query released now is routed at that time.
            now = f64::from_bits(now.max(t_expiry).to_bits() + 1);
            if let Some(q) = queue.as_mut() {
                release_waiting(&mut run, q, now, router, scaler, &mut infos)?;
            }
            continue;
        }
        let t = t_arrival.min(t_cluster).min(t_tick);
        if !t.is_finite() {
            return Err(AutoSloError::InvalidAction("queries are waiting on clusters that will never run them".into()));
        }
        now = now.max(t);
        if t_cluster <= t_arrival && t_cluster <= t_tick {
            // Between arrivals (a backlog draining), the bound is checked every minute or so.
            if let Some(tr) = tracker.as_mut().filter(|tr| tr.due(now)) {
                if let Some(cut) = tr.check(now, workload, &run.rows, run.sims.iter().map(|s| (s.info.size, &s.timer)), &cfg.billing, next_q) {
                    return Ok(Bounded::Cut(cut));
                }
            }
            run.process(c_min, now)?;
            run.dispatch(now, router, scaler, &mut infos)?;
            if let Some(q) = queue.as_mut() {
                release_waiting(&mut run, q, now, router, scaler, &mut infos)?;
            }
        } else if t_tick <= t_arrival {
            run.infos_into(&mut infos);
            let actions = scaler.on_event(now, &Event::Tick, &infos, &*router);
            run.apply(actions, now)?;
            next_tick = scaler.tick_interval().map(|d| now + d.max(1e-3));
            if let Some(q) = queue.as_mut() {
                release_waiting(&mut run, q, now, router, scaler, &mut infos)?;
            }
        } else {
            let qi = next_q;
            next_q += 1;
            if let Some(tr) = tracker.as_mut() {
                let bills = run.sims.iter().map(|s| (s.info.size, &s.timer));
                if let Some(cut) = tr.check(now, workload, &run.rows, bills, &cfg.billing, qi) {
                    return Ok(Bounded::Cut(cut));
                }
                tr.arrived(workload, qi);
            }
            let q = &workload.queries()[qi];
            let ev = Event::Arrival { query: q };
            router.observe(now, &ev);
            run.infos_into(&mut infos);
            let actions = scaler.on_event(now, &ev, &infos, &*router);
            if !actions.is_empty() {
                run.apply(actions, now)?;
                run.infos_into(&mut infos);
            }
            if let Some(reason) = admission.as_mut().and_then(|a| a.decide(now, q, &infos)) {
                run.reject(qi, now, reason);
            } else {
                match queue.as_mut().map_or(Offer::Admit, |aq| aq.offer(now, qi, q, &infos)) {
                    Offer::Admit => {
                        let slots = queue.as_ref().map(|aq| aq.settings().slots_per_cluster);
                        route_now(&mut run, qi, now, router, scaler, &mut infos, slots)?
                    }
                    Offer::Held | Offer::Deferred { .. } => {}
                    Offer::Reject(reason) => run.reject(qi, now, reason),
                }
            }
            if ticker.due(next_q) && !progress(next_q, n) {
                return Err(AutoSloError::Interrupted);
            }
        }
    }
    if !progress(n, n) {
        return Err(AutoSloError::Interrupted);
    }
    finish_trace(run, now).map(Bounded::Finished)
}

/// Route query `qi` now, and tell the scaler. With an admission queue (`slots`), only among the
/// clusters with room.
fn route_now(run: &mut Run<'_>, qi: usize, now: f64, router: &mut dyn Router, scaler: &mut dyn Scaler, infos: &mut Vec<ClusterInfo>, slots: Option<usize>) -> Result<()> {
    let q = &run.w.queries()[qi];
    run.infos_into(infos);
    if let Some(slots) = slots {
        if infos.iter().any(|c| c.accepts_queries() && c.running + c.queued < slots) {
            infos.retain(|c| c.accepts_queries() && c.running + c.queued < slots);
        }
    }
    let c = router.route(now, q, infos)?;
    run.admit(c, qi, now)?;
    let routed = Event::Routed { query: q, cluster: c };
    run.infos_into(infos);
    let actions = scaler.on_event(now, &routed, infos, &*router);
    fail_on_undecided(scaler)?;
    run.apply(actions, now)
}

/// Settle the admission queue at `now`: expired queries get their outcome, the others are
/// routed while a cluster has room.
fn release_waiting(run: &mut Run<'_>, queue: &mut AdmissionQueue, now: f64, router: &mut dyn Router, scaler: &mut dyn Scaler, infos: &mut Vec<ClusterInfo>) -> Result<()> {
    loop {
        run.infos_into(infos);
        match queue.release(now, infos) {
            Some(Release::Refuse { query, reason }) => run.reject(query, now, reason),
            Some(Release::Route { query, slots }) => route_now(run, query, now, router, scaler, infos, Some(slots))?,
            None => return Ok(()),
        }
    }
}

/// Close every bill and attribute each cluster's cost to its queries by executed work.
fn finish_trace(run: Run<'_>, end: f64) -> Result<Trace> {
    let mut rows: Vec<TraceRow> = run.rows.into_iter().map(|r| r.expect("every query finished")).collect();
    let clusters: Vec<ClusterRecord> =
        run.sims.iter().map(|s| ClusterRecord::close(&s.info, &s.timer, &run.cfg.billing, end, s.teardown_requested_at, s.gone_at.is_finite().then_some(s.gone_at), s.queries).with_reasons(s.spinup_reason, s.teardown_reason)).collect();
    attribute_cost_by_work(&mut rows, &clusters);
    Ok(Trace { rows, clusters, extra_events: Vec::new() })
}

#[cfg(test)]
mod tests;
