//! `SimulateBatch` (§7.3): execution configurations × workloads on the Workload Simulator, the
//! primitive every phase of the Policy Tuner calls.
//!
//! The jobs run on a [`BatchBackend`]; [`RayonBackend`] spreads them over this machine's cores. A
//! distributed backend implements the same trait (one method) without touching the tuner.
//! [`BatchControl`] counts finished jobs (for a progress bar) and stops a batch cleanly: jobs not
//! yet started are skipped, and the batch returns [`AutoSloError::Interrupted`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rayon::prelude::*;

use crate::error::{AutoSloError, Result};
use crate::predictor::Predictor;
use crate::router::{router_by_name, RouterOptions};
use crate::progress::Progress;
use crate::simulator::{simulate_with_progress, SimulatorConfig};
use crate::tuner::config::ExecutionConfig;
use crate::workload::Workload;

/// One simulated query, as FindGoodSpinupTime reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoggedQuery {
    pub arrival: f64,
    /// When it left its cluster (completion or timeout).
    pub end: f64,
    pub violated: bool,
}

/// The outcome of one configuration on one workload.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOutcome {
    pub queries: usize,
    pub violations: usize,
    /// Billed cost ($).
    pub cost: f64,
    /// Clusters that existed during the run (initial + spun up).
    pub clusters: usize,
    /// Per tenant (by name, sorted): its queries and their violations.
    pub tenants: Vec<TenantOutcome>,
    /// Per-query log (workload order), when requested.
    pub log: Vec<LoggedQuery>,
}

/// One tenant's share of a [`SimOutcome`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantOutcome {
    pub tenant: String,
    pub queries: usize,
    pub violations: usize,
}

impl SimOutcome {
    pub fn violation_rate(&self) -> f64 {
        if self.queries == 0 {
            0.0
        } else {
            self.violations as f64 / self.queries as f64
        }
    }
}

/// How per-workload outcomes become one (violation rate, cost) pair (the paper's α).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// Mean violation rate and mean cost over the workloads.
    Mean,
    /// The worst workload's violation rate, and the mean cost.
    Worst,
}

impl Aggregate {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "mean" => Ok(Aggregate::Mean),
            "worst" => Ok(Aggregate::Worst),
            _ => Err(AutoSloError::UnknownPolicy { name: name.into(), known: "mean, worst".into() }),
        }
    }
}

/// Whose violation rate the target τ holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TargetScope {
    /// The fleet's, over every query (the paper's).
    #[default]
    Fleet,
    /// The fleet's and every tenant's (**a change**, for a fleet that serves several tenants):
    /// a configuration meets τ only if no tenant's violation rate exceeds it.
    EveryTenant,
}

impl TargetScope {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "fleet" => Ok(TargetScope::Fleet),
            "tenant" => Ok(TargetScope::EveryTenant),
            _ => Err(AutoSloError::UnknownPolicy { name: name.into(), known: "fleet, tenant".into() }),
        }
    }
}

/// Each tenant's violation rate over `outcomes`, by name: its violations over its queries,
/// summed across the workloads (`Mean`), or its worst workload's rate (`Worst`).
pub fn tenant_violation_rates(outcomes: &[SimOutcome], alpha: Aggregate) -> Vec<(String, f64)> {
    let mut by: std::collections::BTreeMap<&str, (usize, usize, f64)> = std::collections::BTreeMap::new();
    for t in outcomes.iter().flat_map(|o| &o.tenants) {
        let e = by.entry(t.tenant.as_str()).or_insert((0, 0, 0.0));
        e.0 += t.queries;
        e.1 += t.violations;
        if t.queries > 0 {
            e.2 = e.2.max(t.violations as f64 / t.queries as f64);
        }
    }
    by.into_iter()
        .filter(|(_, (q, _, _))| *q > 0)
        .map(|(name, (q, v, worst))| {
            let rate = match alpha {
                Aggregate::Mean => v as f64 / q as f64,
                Aggregate::Worst => worst,
            };
            (name.to_string(), rate)
        })
        .collect()
}

/// `AggPerf`: (violation rate, cost) of one configuration over its workloads. With
/// [`TargetScope::EveryTenant`] the violation rate is the larger of the fleet's and the worst
/// tenant's ([`tenant_violation_rates`]), so that BestWithTarget's τ holds for every tenant.
pub fn agg_perf(outcomes: &[SimOutcome], alpha: Aggregate, scope: TargetScope) -> (f64, f64) {
    if outcomes.is_empty() {
        return (0.0, 0.0);
    }
    let n = outcomes.len() as f64;
    let cost = outcomes.iter().map(|o| o.cost).sum::<f64>() / n;
    let v = match alpha {
        Aggregate::Mean => outcomes.iter().map(SimOutcome::violation_rate).sum::<f64>() / n,
        Aggregate::Worst => outcomes.iter().map(SimOutcome::violation_rate).fold(0.0, f64::max),
    };
    match scope {
        TargetScope::Fleet => (v, cost),
        TargetScope::EveryTenant => (tenant_violation_rates(outcomes, alpha).into_iter().map(|(_, r)| r).fold(v, f64::max), cost),
    }
}

/// Settings shared by every simulation of a batch.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchSettings {
    pub sim: SimulatorConfig,
    pub router: RouterOptions,
    /// Keep per-query logs (FindGoodSpinupTime needs them).
    pub keep_logs: bool,
}

/// Progress and cancellation of a running batch (shared across threads).
#[derive(Debug, Default)]
pub struct BatchControl {
    done: AtomicUsize,
    total: AtomicUsize,
    cancel: AtomicBool,
}

impl BatchControl {
    pub fn new() -> Self {
        Self::default()
    }
    /// Jobs finished, and jobs submitted, so far (over every batch run with this control).
    pub fn progress(&self) -> (usize, usize) {
        (self.done.load(Ordering::Relaxed), self.total.load(Ordering::Relaxed))
    }
    /// Count `n` more units of work to do (a live run counts its queries).
    pub fn add_total(&self, n: usize) {
        self.total.fetch_add(n, Ordering::Relaxed);
    }
    /// Count `n` more units of work done.
    pub fn add_done(&self, n: usize) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
    /// Ask every batch using this control to stop.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// One SimulateBatch call: every configuration on every workload. Job `k` is configuration
/// `k / workloads.len()` on workload `k % workloads.len()`; a backend returns the outcomes in job
/// order. Simulation is deterministic, so any backend gives the same outcomes.
pub struct Batch<'a> {
    pub predictor: &'a Predictor,
    pub configs: &'a [ExecutionConfig],
    pub workloads: &'a [Workload],
    pub settings: &'a BatchSettings,
    pub control: &'a BatchControl,
}

impl Batch<'_> {
    /// Number of jobs.
    pub fn len(&self) -> usize {
        self.configs.len() * self.workloads.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// (configuration, workload) of job `k`.
    pub fn job(&self, k: usize) -> (usize, usize) {
        let nw = self.workloads.len();
        (k / nw, k % nw)
    }
    /// Simulate job `k` here, counting it done; `Interrupted` once the batch is cancelled.
    pub fn simulate(&self, k: usize) -> Result<SimOutcome> {
        if self.control.cancelled() {
            return Err(AutoSloError::Interrupted);
        }
        let (i, j) = self.job(k);
        // A cancelled batch stops inside a long simulation too, not only between jobs.
        let out = simulate_config_with_progress(self.predictor, &self.configs[i], &self.workloads[j], self.settings, &mut |_, _| !self.control.cancelled());
        self.mark_done(1);
        out
    }
    /// Count `n` jobs finished elsewhere (a remote backend reports them as they arrive).
    pub fn mark_done(&self, n: usize) {
        self.control.done.fetch_add(n, Ordering::Relaxed);
    }
}

/// Where a batch's simulations run: this machine's cores ([`RayonBackend`]) or a cluster (the
/// Python package's Ray backend, through the bindings).
pub trait BatchBackend: Sync {
    /// Run every job of `batch` and return the outcomes in job order.
    fn run(&self, batch: &Batch<'_>) -> Result<Vec<SimOutcome>>;
    fn name(&self) -> &str;
}

/// The jobs on rayon's thread pool (this machine's cores).
#[derive(Debug, Clone, Copy, Default)]
pub struct RayonBackend;

impl BatchBackend for RayonBackend {
    fn run(&self, batch: &Batch<'_>) -> Result<Vec<SimOutcome>> {
        (0..batch.len()).into_par_iter().map(|k| batch.simulate(k)).collect()
    }
    fn name(&self) -> &str {
        "rayon"
    }
}

/// Simulate one configuration on one workload.
pub fn simulate_config(predictor: &Predictor, config: &ExecutionConfig, workload: &Workload, settings: &BatchSettings) -> Result<SimOutcome> {
    simulate_config_with_progress(predictor, config, workload, settings, &mut |_, _| true)
}

/// [`simulate_config`] with a progress callback (see [`simulate_with_progress`]).
/// A configuration with an SLO policy holds the workload to its deadlines, as the emulator, the
/// simulator and live runs of that configuration do.
pub fn simulate_config_with_progress(predictor: &Predictor, config: &ExecutionConfig, workload: &Workload, settings: &BatchSettings, progress: Progress<'_>) -> Result<SimOutcome> {
    let held;
    let workload = match &config.slo_policy {
        Some(policy) => {
            held = policy.apply(workload)?;
            &held
        }
        None => workload,
    };
    let mut router = router_by_name(&config.routing, Some(predictor), config.router_options(settings.router))?;
    let mut scaler = config.scaler(settings.sim.spinup_s)?;
    let trace = simulate_with_progress(predictor, workload, &config.initial_clusters, router.as_mut(), scaler.as_mut(), settings.sim.clone(), progress)?;
    let qs = workload.queries();
    let mut violations = 0;
    let mut per_tenant = vec![(0usize, 0usize); workload.tenants().len()];
    let mut log = Vec::with_capacity(if settings.keep_logs { trace.rows.len() } else { 0 });
    for r in &trace.rows {
        let q = &qs[r.query];
        let violated = !r.met(q.slo);
        violations += usize::from(violated);
        if let Some(t) = per_tenant.get_mut(q.tenant as usize) {
            t.0 += 1;
            t.1 += usize::from(violated);
        }
        if settings.keep_logs {
            log.push(LoggedQuery { arrival: r.arrival, end: r.end, violated });
        }
    }
    let mut tenants: Vec<TenantOutcome> =
        workload.tenants().iter().zip(per_tenant).filter(|(_, (q, _))| *q > 0).map(|(name, (queries, violations))| TenantOutcome { tenant: name.clone(), queries, violations }).collect();
    tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    Ok(SimOutcome { queries: trace.rows.len(), violations, cost: trace.total_cost(), clusters: trace.clusters.len(), tenants, log })
}

/// `SimulateBatch`: the result matrix R[i][j] of configuration i on workload j.
pub fn simulate_batch(predictor: &Predictor, configs: &[ExecutionConfig], workloads: &[Workload], settings: &BatchSettings, backend: &dyn BatchBackend, control: &BatchControl) -> Result<Vec<Vec<SimOutcome>>> {
    let nw = workloads.len();
    control.total.fetch_add(configs.len() * nw, Ordering::Relaxed);
    let flat = backend.run(&Batch { predictor, configs, workloads, settings, control })?;
    if flat.len() != configs.len() * nw {
        return Err(AutoSloError::Backend { backend: backend.name().into(), problem: format!("returned {} outcomes for {} jobs", flat.len(), configs.len() * nw) });
    }
    let mut it = flat.into_iter();
    Ok(configs.iter().map(|_| it.by_ref().take(nw).collect()).collect())
}

/// Simulate the (configuration, workload) `pairs`, in order, on `threads` threads of a pool of
/// their own (`None`: rayon's global pool). A distributed backend's worker runs its share of a
/// batch through this.
pub fn simulate_pairs(predictor: &Predictor, configs: &[ExecutionConfig], workloads: &[Workload], pairs: &[(usize, usize)], settings: &BatchSettings, threads: Option<usize>) -> Result<Vec<SimOutcome>> {
    if let Some(&(i, j)) = pairs.iter().find(|&&(i, j)| i >= configs.len() || j >= workloads.len()) {
        return Err(AutoSloError::InvalidConfig(format!("pair ({i}, {j}) is out of range: {} configurations × {} workloads", configs.len(), workloads.len())));
    }
    on_threads(threads, || pairs.par_iter().map(|&(i, j)| simulate_config(predictor, &configs[i], &workloads[j], settings)).collect())
}

/// Run `work` on `threads` threads of a pool of its own (`None`: the current rayon pool): how a
/// distributed backend's worker runs its share.
pub fn on_threads<T: Send>(threads: Option<usize>, work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    match threads {
        None => work(),
        Some(0) => Err(AutoSloError::out_of_range("threads", "≥ 1", 0)),
        Some(n) => rayon::ThreadPoolBuilder::new().num_threads(n).build().map_err(|e| AutoSloError::InvalidConfig(format!("thread pool: {e}")))?.install(work),
    }
}
