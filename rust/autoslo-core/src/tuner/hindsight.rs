//! The best plan in hindsight: for a day that has run, the cheapest plan AutoSLO could have run
//! that meets τ, found by emulating candidate plans on that very day (perfect knowledge of its
//! arrivals). It is the yardstick of the Policy Tuner: a tuned plan's **regret** is its cost over
//! this plan's, minus one.
//!
//! The candidates are the Configuration Tuner's whole space and more ([`HindsightSpace`]): initial
//! clusters, scheduled spinups, T_idle, T_min_lifetime, τ_trigger, θ, μ, w, the router's and the
//! selector's headroom and the eligible sizes; and every fixed fleet of one to four clusters. The
//! search draws `plans` of them, seeded: the plans it is given (the tuned one) first, then every
//! fixed fleet, then random points of the space, and finally (a share `refine`) neighbours of the
//! cheapest plans so far that meet τ, one knob moved.
//!
//! Each plan is emulated under a [`RunBound`]: a run stops once more queries are late than τ
//! allows, or once it has been billed more than the cheapest plan known to meet τ. Both cuts are
//! exact, so the best plan is the one a search running every plan to the end would return, on
//! any backend and in any order; which plans are cut, and when, depends on the order they finish.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::emulator::{emulate_bounded, Bounded, EmulatorConfig, RunBound};
use crate::error::{AutoSloError, Result};
use crate::predictor::Predictor;
use crate::rng::{derive_seed, Rng};
use crate::router::{router_by_name, RouterOptions};
use crate::trace::Trace;
use crate::tuner::batch::{on_threads, BatchControl, TargetScope};
use crate::tuner::config::{AutoscalerKnobs, ExecutionConfig, ScheduledSpinup};
use crate::tuner::config_tuner::SearchSpace;
use crate::workload::Workload;

/// Plans a search emulates unless told otherwise.
pub const DEFAULT_HINDSIGHT_PLANS: usize = 500;
/// The share of the plans spent on neighbours of the best ones found first.
pub const DEFAULT_REFINE_SHARE: f64 = 0.3;

/// The plans a hindsight search draws from. Every list must be non-empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HindsightSpace {
    /// Sizes of the fixed fleets (RPU); every multiset of 1..=`max_fleet_clusters` of them is a plan.
    pub fleet_sizes: Vec<u32>,
    pub max_fleet_clusters: usize,
    /// The autoscaled plans' knobs: the Configuration Tuner's dimensions, with wider values.
    pub autoscaled: SearchSpace,
    /// At most this many scheduled spinups, each a little before one of the day's busiest
    /// half-hours (the search knows the day), of an eligible size.
    pub max_scheduled_spinups: usize,
}

impl Default for HindsightSpace {
    fn default() -> Self {
        Self {
            fleet_sizes: vec![8, 16, 32, 64],
            max_fleet_clusters: 4,
            autoscaled: SearchSpace {
                initial_clusters: vec![vec![8], vec![16], vec![32], vec![8, 8], vec![16, 16], vec![32, 16], vec![16, 8, 8], vec![16, 16, 8, 8], vec![16, 16, 16, 16], vec![8, 8, 8, 8]],
                sizes: vec![vec![16, 32], vec![8, 16, 32], vec![8, 16], vec![16, 32, 64], vec![32, 64]],
                t_idle_s: vec![120.0, 300.0, 600.0, 1200.0, 1800.0],
                t_min_lifetime_s: vec![300.0, 600.0, 1200.0],
                tau_trigger: vec![0.02, 0.05, 0.1, 0.15, 0.2],
                theta: vec![8, 16, 32],
                mu: vec![16, 32],
                window_s: vec![120.0, 300.0, 600.0],
                slo_headroom: vec![1.0, 1.25, 1.5, 2.0],
                selector_headroom: vec![1.0, 1.5, 2.0, 3.0],
            },
            max_scheduled_spinups: 2,
        }
    }
}

/// Number of knobs [`HindsightSpace::neighbour`] may move.
const KNOBS: usize = 12;

impl HindsightSpace {
    /// Check the space and its plans' values (a plan built from it must validate).
    pub fn validated(self) -> Result<Self> {
        if self.fleet_sizes.is_empty() {
            return Err(AutoSloError::InvalidConfig("hindsight space: `fleet_sizes` needs at least one value".into()));
        }
        if let Some(name) = self.autoscaled.first_empty() {
            return Err(AutoSloError::InvalidConfig(format!("hindsight space: `autoscaled.{name}` needs at least one value")));
        }
        if self.max_fleet_clusters == 0 {
            return Err(AutoSloError::out_of_range("hindsight space: max_fleet_clusters", "≥ 1", 0));
        }
        // Every value must make a valid plan: build the extreme ones.
        let mut rng = Rng::new(0);
        for _ in 0..64 {
            self.random_plan(&mut rng, &[3600.0]).validated().map_err(|e| AutoSloError::InvalidConfig(format!("hindsight space: {e}")))?;
        }
        for f in self.fixed_fleets() {
            f.validated().map_err(|e| AutoSloError::InvalidConfig(format!("hindsight space: {e}")))?;
        }
        Ok(self)
    }

    /// Every fixed fleet: each multiset of 1..=`max_fleet_clusters` sizes, smallest first,
    /// routed by `autoslo`.
    pub fn fixed_fleets(&self) -> Vec<ExecutionConfig> {
        let mut sizes = self.fleet_sizes.clone();
        sizes.sort_unstable();
        sizes.dedup();
        let mut out = Vec::new();
        fn grow(sizes: &[u32], from: usize, left: usize, fleet: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
            if !fleet.is_empty() {
                out.push(fleet.iter().rev().copied().collect());
            }
            if left == 0 {
                return;
            }
            for i in from..sizes.len() {
                fleet.push(sizes[i]);
                grow(sizes, i, left - 1, fleet, out);
                fleet.pop();
            }
        }
        grow(&sizes, 0, self.max_fleet_clusters, &mut Vec::new(), &mut out);
        out.sort_by_key(|f| (f.iter().sum::<u32>(), f.len()));
        for f in out.iter_mut() {
            f.sort_unstable_by(|a, b| b.cmp(a));
        }
        out.into_iter().map(|f| ExecutionConfig { autoscaler: None, ..ExecutionConfig::new(f) }).collect()
    }

    /// One random autoscaled plan; `spinup_times` are where scheduled spinups may go.
    pub fn random_plan(&self, rng: &mut Rng, spinup_times: &[f64]) -> ExecutionConfig {
        let mut c = ExecutionConfig::new(pick(rng, &self.autoscaled.initial_clusters).clone());
        for knob in 0..KNOBS {
            self.set(&mut c, knob, rng, spinup_times);
        }
        c
    }

    /// `plan` with one knob moved to another value of the space (an autoscaled plan; a fixed
    /// fleet gets a cluster more or less, or one resized, or becomes the initial clusters of a
    /// random autoscaled plan).
    pub fn neighbour(&self, plan: &ExecutionConfig, rng: &mut Rng, spinup_times: &[f64]) -> ExecutionConfig {
        let mut c = plan.clone();
        if c.autoscaler.is_none() {
            let sizes = &self.fleet_sizes;
            let n = c.initial_clusters.len();
            match rng.below(4) {
                // The fleet as the start of an autoscaled plan.
                3 => {
                    let mut a = self.random_plan(rng, spinup_times);
                    a.initial_clusters = c.initial_clusters.clone();
                    return a;
                }
                0 if n < self.max_fleet_clusters => c.initial_clusters.push(*pick(rng, sizes)),
                1 if n > 1 => {
                    c.initial_clusters.remove(rng.below(n));
                }
                _ => {
                    let i = rng.below(n);
                    c.initial_clusters[i] = *pick(rng, sizes);
                }
            }
            c.initial_clusters.sort_unstable_by(|a, b| b.cmp(a));
            return c;
        }
        let knob = rng.below(KNOBS);
        self.set(&mut c, knob, rng, spinup_times);
        c
    }

    /// Set knob `knob` of `c` (autoscaled) to a random value of the space.
    fn set(&self, c: &mut ExecutionConfig, knob: usize, rng: &mut Rng, spinup_times: &[f64]) {
        match knob {
            2 => {
                let k = rng.below(self.max_scheduled_spinups + 1);
                let sizes = c.autoscaler.as_ref().map_or_else(|| vec![16], |a| a.sizes.clone());
                c.scheduled_spinups = (0..k).filter(|_| !spinup_times.is_empty()).map(|_| ScheduledSpinup { at_s: *pick(rng, spinup_times), size: *pick(rng, &sizes) }).collect();
                c.scheduled_spinups.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
            }
            11 => {
                // Scheduled spinups keep to the eligible sizes.
                let sizes = c.autoscaler.get_or_insert_with(AutoscalerKnobs::default).sizes.clone();
                for s in c.scheduled_spinups.iter_mut() {
                    if !sizes.contains(&s.size) {
                        s.size = *pick(rng, &sizes);
                    }
                }
            }
            k => {
                let d = SEARCH_DIM[k];
                *c = self.autoscaled.set(c, d, rng.below(self.autoscaled.len_of(d)));
            }
        }
    }
}

/// The Configuration Tuner's dimension ([`SearchSpace`]) of each knob [`HindsightSpace::set`]
/// draws through it: initial clusters, the router's headroom, (scheduled spinups), eligible
/// sizes, T_idle, T_min_lifetime, τ_trigger, θ, μ, w, the selector's headroom.
const SEARCH_DIM: [usize; 11] = [6, 9, usize::MAX, 7, 0, 1, 2, 3, 4, 5, 8];

fn pick<'a, T>(rng: &mut Rng, xs: &'a [T]) -> &'a T {
    &xs[rng.below(xs.len())]
}

/// Where scheduled spinups may go on `w`'s day: `spinup_s` before the starts of its six busiest
/// half-hours (by arrivals), at 0 at the earliest.
pub fn busiest_spinup_times(w: &Workload, spinup_s: f64) -> Vec<f64> {
    const BIN_S: f64 = 1800.0;
    let mut counts: std::collections::BTreeMap<i64, usize> = std::collections::BTreeMap::new();
    for q in w.queries() {
        *counts.entry((q.arrival / BIN_S).floor() as i64).or_default() += 1;
    }
    let mut bins: Vec<(i64, usize)> = counts.into_iter().collect();
    bins.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut times: Vec<f64> = bins.iter().take(6).map(|&(b, _)| (b as f64 * BIN_S - spinup_s).max(0.0)).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    times
}

/// The environment every plan runs in: the emulator's settings and the router's defaults.
#[derive(Debug, Clone)]
pub struct PlanEnv {
    pub emulator: EmulatorConfig,
    /// The routers' options where a plan sets none (billing, seed and headroom).
    pub router: RouterOptions,
    /// The engine's spinup delay: the selector's δ.
    pub spinup_s: f64,
}

/// Emulate `plan` on `w` as a run of that configuration does, under `bound`.
pub fn emulate_plan(w: &Workload, plan: &ExecutionConfig, predictor: &Predictor, env: &PlanEnv, bound: &RunBound<'_>) -> Result<Bounded> {
    let held;
    let w = match &plan.slo_policy {
        Some(policy) => {
            held = policy.apply(w)?;
            &held
        }
        None => w,
    };
    let mut router = router_by_name(&plan.routing, Some(predictor), plan.router_options(env.router))?;
    let mut scaler = plan.scaler(env.spinup_s)?;
    emulate_bounded(w, &plan.initial_clusters, router.as_mut(), scaler.as_mut(), &env.emulator, bound, &mut |_, _| true)
}

/// What a plan reached on the day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanOutcome {
    /// The plan's index in the search.
    pub index: usize,
    /// `finished`, or why it was cut: `violations`, `tenant-violations`, `cost`.
    pub status: String,
    pub queries: usize,
    /// Late queries (finished), or those known late when it was cut (a lower bound).
    pub violations: usize,
    /// Billed cost ($; when cut, a lower bound).
    pub cost: f64,
    /// Clusters that existed (finished runs).
    pub clusters: usize,
    /// When it was cut (s into the day).
    pub cut_at: Option<f64>,
    /// Each tenant's (name, queries, late queries) (finished runs).
    pub tenants: Vec<(String, usize, usize)>,
    /// Seconds this machine spent on it.
    pub seconds: f64,
}

impl PlanOutcome {
    pub fn finished(&self) -> bool {
        self.status == "finished"
    }
    pub fn violation_rate(&self) -> f64 {
        if self.queries == 0 {
            0.0
        } else {
            self.violations as f64 / self.queries as f64
        }
    }
    /// Whether a finished run meets `tau` within `scope`.
    pub fn meets(&self, tau: f64, scope: TargetScope) -> bool {
        self.finished()
            && self.violation_rate() <= tau
            && match scope {
                TargetScope::Fleet => true,
                TargetScope::EveryTenant => self.tenants.iter().all(|(_, q, v)| *q == 0 || *v as f64 / *q as f64 <= tau),
            }
    }
}

/// The target: τ and whose violation rate it holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub tau: f64,
    pub scope: TargetScope,
}

impl Target {
    pub fn validated(self) -> Result<Self> {
        if !(self.tau.is_finite() && (0.0..=1.0).contains(&self.tau)) {
            return Err(AutoSloError::out_of_range("tau", "a violation rate in [0, 1]", self.tau));
        }
        Ok(self)
    }

    /// Most late queries out of `n` that still meet τ.
    fn allowed(&self, n: usize) -> usize {
        (self.tau * n as f64 + 1e-9).floor() as usize
    }

    fn bound<'a>(&self, w: &Workload, incumbent: &'a AtomicU64) -> RunBound<'a> {
        let tenant_violations = (self.scope == TargetScope::EveryTenant).then(|| {
            let mut n = vec![0usize; w.tenants().len()];
            for q in w.queries() {
                n[q.tenant as usize] += 1;
            }
            n.into_iter().map(|n| self.allowed(n)).collect()
        });
        RunBound { violations: Some(self.allowed(w.len())), tenant_violations, cost: Some(incumbent) }
    }
}

fn outcome_of(index: usize, w: &Workload, run: Bounded, seconds: f64) -> PlanOutcome {
    match run {
        Bounded::Finished(trace) => finished(index, w, &trace, seconds),
        Bounded::Cut(cut) => PlanOutcome { index, status: cut.reason.name().into(), queries: w.len(), violations: cut.violations, cost: cut.cost, clusters: 0, cut_at: Some(cut.at), tenants: Vec::new(), seconds },
    }
}

fn finished(index: usize, w: &Workload, trace: &Trace, seconds: f64) -> PlanOutcome {
    let qs = w.queries();
    let mut tenants: Vec<(String, usize, usize)> = w.tenants().iter().map(|t| (t.clone(), 0, 0)).collect();
    let mut violations = 0;
    for r in &trace.rows {
        let q = &qs[r.query];
        let late = !r.met(q.slo);
        violations += usize::from(late);
        let t = &mut tenants[q.tenant as usize];
        t.1 += 1;
        t.2 += usize::from(late);
    }
    tenants.retain(|t| t.1 > 0);
    tenants.sort();
    PlanOutcome {
        index,
        status: "finished".into(),
        queries: trace.rows.len(),
        violations,
        cost: trace.clusters.iter().map(|c| c.cost).sum(),
        clusters: trace.clusters.len(),
        cut_at: None,
        tenants,
        seconds,
    }
}

/// One batch of plans to emulate on one day. `incumbent` is the cost ($) of the cheapest plan
/// known to meet the target (infinite: none yet): a run dearer than that is cut.
pub struct PlanBatch<'a> {
    pub workload: &'a Workload,
    pub plans: &'a [(usize, ExecutionConfig)],
    pub predictor: &'a Predictor,
    pub env: &'a PlanEnv,
    pub target: Target,
    pub incumbent: f64,
    pub control: &'a BatchControl,
}

/// Where a search's batches run: rayon here, or a distributed backend (Ray, from Python).
pub trait PlanBackend: Sync {
    /// Emulate every plan of `batch`; outcomes in any order.
    fn evaluate(&self, batch: &PlanBatch<'_>) -> Result<Vec<PlanOutcome>>;
    fn name(&self) -> &str;
}

/// The plans on this machine's cores, taken in order by whichever thread is free, sharing the
/// incumbent: a plan that meets the target lowers it for every run still going.
#[derive(Debug, Clone, Copy, Default)]
pub struct RayonPlans;

impl PlanBackend for RayonPlans {
    fn evaluate(&self, batch: &PlanBatch<'_>) -> Result<Vec<PlanOutcome>> {
        evaluate_plans(batch, None)
    }
    fn name(&self) -> &str {
        "rayon"
    }
}

/// Emulate `batch`'s plans on rayon (`threads` of them, or the current pool's).
pub fn evaluate_plans(batch: &PlanBatch<'_>, threads: Option<usize>) -> Result<Vec<PlanOutcome>> {
    let incumbent = AtomicU64::new(batch.incumbent.to_bits());
    let bound = batch.target.bound(batch.workload, &incumbent);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Result<Vec<PlanOutcome>> {
        let n = rayon::current_num_threads().max(1);
        let per: Vec<Result<Vec<PlanOutcome>>> = (0..n)
            .into_par_iter()
            .map(|_| {
                let mut out = Vec::new();
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some((index, plan)) = batch.plans.get(k) else { break };
                    if batch.control.cancelled() {
                        return Err(AutoSloError::Interrupted);
                    }
                    let start = Instant::now();
                    let run = emulate_plan(batch.workload, plan, batch.predictor, batch.env, &bound)?;
                    let o = outcome_of(*index, batch.workload, run, start.elapsed().as_secs_f64());
                    if o.meets(batch.target.tau, batch.target.scope) {
                        incumbent.fetch_min_f64(o.cost);
                    }
                    batch.control.add_done(1);
                    out.push(o);
                }
                Ok(out)
            })
            .collect();
        Ok(per.into_iter().collect::<Result<Vec<_>>>()?.into_iter().flatten().collect())
    };
    on_threads(threads, work)
}

trait FetchMinF64 {
    fn fetch_min_f64(&self, v: f64);
}

impl FetchMinF64 for AtomicU64 {
    /// Lower the stored `f64` (its bits) to `v` if `v` is smaller. Costs are ≥ 0, whose bits
    /// order as their values, so the integer minimum is the float minimum.
    fn fetch_min_f64(&self, v: f64) {
        if v >= 0.0 {
            self.fetch_min(v.to_bits(), Ordering::Relaxed);
        }
    }
}

/// A hindsight search's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct HindsightParams {
    pub target: Target,
    /// Plans to emulate in all (the given ones and the fixed fleets included).
    pub plans: usize,
    /// The share of `plans` spent on neighbours of the best plans found first.
    pub refine: f64,
    pub seed: u64,
    pub space: HindsightSpace,
}

impl Default for HindsightParams {
    fn default() -> Self {
        Self { target: Target { tau: 0.1, scope: TargetScope::Fleet }, plans: DEFAULT_HINDSIGHT_PLANS, refine: DEFAULT_REFINE_SHARE, seed: 0, space: HindsightSpace::default() }
    }
}

/// A search's outcome: every plan it emulated with what it reached, and the best.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HindsightResult {
    pub plans: Vec<ExecutionConfig>,
    /// One per plan, by `index`.
    pub outcomes: Vec<PlanOutcome>,
    /// The cheapest plan that meets the target (ties: the first), if any does.
    pub best: Option<usize>,
    /// Where each plan came from: `given`, `fleet`, `random`, `refine`.
    pub origin: Vec<String>,
}

impl HindsightResult {
    pub fn best_outcome(&self) -> Option<&PlanOutcome> {
        self.best.map(|b| &self.outcomes[b])
    }
}

/// The best plan in hindsight for the day `w` (see the module docs). `given` are plans to
/// include first (the one being judged): the search returns none dearer than the cheapest of
/// them that meets the target.
pub fn hindsight(w: &Workload, given: &[ExecutionConfig], predictor: &Predictor, env: &PlanEnv, params: &HindsightParams, backend: &dyn PlanBackend, control: &BatchControl) -> Result<HindsightResult> {
    let target = params.target.validated()?;
    let space = params.space.clone().validated()?;
    if !(params.refine.is_finite() && (0.0..1.0).contains(&params.refine)) {
        return Err(AutoSloError::out_of_range("refine", "a share in [0, 1)", params.refine));
    }
    if w.is_empty() {
        return Err(AutoSloError::InvalidConfig("the day has no queries".into()));
    }
    let mut plans: Vec<ExecutionConfig> = Vec::new();
    let mut origin: Vec<String> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut add = |c: ExecutionConfig, from: &str, plans: &mut Vec<ExecutionConfig>, origin: &mut Vec<String>| -> Result<bool> {
        let c = c.validated()?;
        let key = ExecutionConfig { provenance: None, ..c.clone() }.to_json();
        if !seen.insert(key) {
            return Ok(false);
        }
        plans.push(ExecutionConfig { provenance: None, ..c });
        origin.push(from.into());
        Ok(true)
    };
    for g in given {
        add(g.clone(), "given", &mut plans, &mut origin)?;
    }
    let first = params.plans.max(plans.len());
    let explore = plans.len().max(((first as f64) * (1.0 - params.refine)).round() as usize);
    for f in space.fixed_fleets() {
        if plans.len() >= explore {
            break;
        }
        add(f, "fleet", &mut plans, &mut origin)?;
    }
    let times = busiest_spinup_times(w, env.spinup_s);
    let mut rng = Rng::new(derive_seed(params.seed, 0x4d1d));
    let mut misses = 0;
    while plans.len() < explore && misses < 10_000 {
        if !add(space.random_plan(&mut rng, &times), "random", &mut plans, &mut origin)? {
            misses += 1;
        }
    }
    control.add_total(first);
    let mut outcomes: Vec<Option<PlanOutcome>> = vec![None; plans.len()];
    let mut incumbent = f64::INFINITY;
    let run = |range: std::ops::Range<usize>, plans: &[ExecutionConfig], origin: &[String], incumbent: &mut f64, outcomes: &mut Vec<Option<PlanOutcome>>| -> Result<()> {
        outcomes.resize(plans.len(), None);
        // The given plans alone first: the one judged bounds the rest from the start.
        let cut = range.start + origin[range.clone()].iter().take_while(|o| *o == "given").count();
        for part in [range.start..cut, cut..range.end] {
            if part.is_empty() {
                continue;
            }
            let batch: Vec<(usize, ExecutionConfig)> = part.map(|i| (i, plans[i].clone())).collect();
            let got = backend.evaluate(&PlanBatch { workload: w, plans: &batch, predictor, env, target, incumbent: *incumbent, control })?;
            for o in got {
                let i = o.index;
                if i >= plans.len() {
                    return Err(AutoSloError::Backend { backend: backend.name().into(), problem: format!("returned plan {i} of {}", plans.len()) });
                }
                if o.meets(target.tau, target.scope) {
                    *incumbent = incumbent.min(o.cost);
                }
                outcomes[i] = Some(o);
            }
        }
        Ok(())
    };
    let best_of = |outcomes: &[Option<PlanOutcome>]| outcomes.iter().flatten().filter(|o| o.meets(target.tau, target.scope)).min_by(|a, b| a.cost.total_cmp(&b.cost).then(a.index.cmp(&b.index))).map(|o| o.index);
    run(0..plans.len(), &plans, &origin, &mut incumbent, &mut outcomes)?;
    // Refine: neighbours of the best plan so far (the same plan whatever was cut), in rounds,
    // up to the budget.
    let mut rounds = 0;
    while plans.len() < first && rounds < 8 {
        rounds += 1;
        let Some(parent) = best_of(&outcomes) else { break };
        let from = plans.len();
        let want = (first - from).div_ceil(9 - rounds);
        let mut misses = 0;
        while plans.len() < from + want && misses < 200 {
            let child = space.neighbour(&plans[parent], &mut rng, &times);
            if !add(child, "refine", &mut plans, &mut origin)? {
                misses += 1;
            }
        }
        if plans.len() == from {
            break;
        }
        let to = plans.len();
        run(from..to, &plans, &origin, &mut incumbent, &mut outcomes)?;
    }
    let outcomes: Vec<PlanOutcome> = outcomes.into_iter().enumerate().map(|(i, o)| o.ok_or_else(|| AutoSloError::Backend { backend: backend.name().into(), problem: format!("no outcome for plan {i}") })).collect::<Result<_>>()?;
    let best = best_of(&outcomes.iter().cloned().map(Some).collect::<Vec<_>>());
    Ok(HindsightResult { plans, outcomes, best, origin })
}

#[cfg(all(test, feature = "torch"))]
#[path = "hindsight_tests.rs"]
mod tests;
