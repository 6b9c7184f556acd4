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
use crate::simulator::{simulate, SimulatorConfig};
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
    /// Per-query log (workload order), when requested.
    pub log: Vec<LoggedQuery>,
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

/// `AggPerf`: (violation rate, cost) of one configuration over its workloads.
pub fn agg_perf(outcomes: &[SimOutcome], alpha: Aggregate) -> (f64, f64) {
    if outcomes.is_empty() {
        return (0.0, 0.0);
    }
    let n = outcomes.len() as f64;
    let cost = outcomes.iter().map(|o| o.cost).sum::<f64>() / n;
    let v = match alpha {
        Aggregate::Mean => outcomes.iter().map(SimOutcome::violation_rate).sum::<f64>() / n,
        Aggregate::Worst => outcomes.iter().map(SimOutcome::violation_rate).fold(0.0, f64::max),
    };
    (v, cost)
}

/// Settings shared by every simulation of a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchSettings {
    pub sim: SimulatorConfig,
    pub router: RouterOptions,
    /// Keep per-query logs (FindGoodSpinupTime needs them).
    pub keep_logs: bool,
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self { sim: SimulatorConfig::default(), router: RouterOptions::default(), keep_logs: false }
    }
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
    /// Ask every batch using this control to stop.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// A job of a batch: simulate job `i`.
pub type Job<'a> = dyn Fn(usize) -> Result<SimOutcome> + Sync + 'a;

/// Where a batch's simulations run.
pub trait BatchBackend: Sync {
    /// Run jobs `0..n` and return their outcomes in job order.
    fn map(&self, n: usize, job: &Job<'_>) -> Result<Vec<SimOutcome>>;
    fn name(&self) -> &str;
}

/// The jobs on rayon's thread pool (this machine's cores).
#[derive(Debug, Clone, Copy, Default)]
pub struct RayonBackend;

impl BatchBackend for RayonBackend {
    fn map(&self, n: usize, job: &Job<'_>) -> Result<Vec<SimOutcome>> {
        (0..n).into_par_iter().map(job).collect()
    }
    fn name(&self) -> &str {
        "rayon"
    }
}

/// Simulate one configuration on one workload.
pub fn simulate_config(predictor: &Predictor, config: &ExecutionConfig, workload: &Workload, settings: &BatchSettings) -> Result<SimOutcome> {
    let mut router = router_by_name(&config.routing, Some(predictor), settings.router)?;
    let mut scaler = config.scaler(settings.sim.spinup_s)?;
    let trace = simulate(predictor, workload, &config.initial_clusters, router.as_mut(), scaler.as_mut(), settings.sim)?;
    let qs = workload.queries();
    let mut violations = 0;
    let mut log = Vec::with_capacity(if settings.keep_logs { trace.rows.len() } else { 0 });
    for r in &trace.rows {
        let violated = !r.met(qs[r.query].slo);
        violations += usize::from(violated);
        if settings.keep_logs {
            log.push(LoggedQuery { arrival: r.arrival, end: r.end, violated });
        }
    }
    Ok(SimOutcome { queries: trace.rows.len(), violations, cost: trace.total_cost(), clusters: trace.clusters.len(), log })
}

/// `SimulateBatch`: the result matrix R[i][j] of configuration i on workload j.
pub fn simulate_batch(predictor: &Predictor, configs: &[ExecutionConfig], workloads: &[Workload], settings: &BatchSettings, backend: &dyn BatchBackend, control: &BatchControl) -> Result<Vec<Vec<SimOutcome>>> {
    let (nc, nw) = (configs.len(), workloads.len());
    control.total.fetch_add(nc * nw, Ordering::Relaxed);
    let job = |k: usize| -> Result<SimOutcome> {
        if control.cancelled() {
            return Err(AutoSloError::Interrupted);
        }
        let out = simulate_config(predictor, &configs[k / nw], &workloads[k % nw], settings);
        control.done.fetch_add(1, Ordering::Relaxed);
        out
    };
    let flat = backend.map(nc * nw, &job)?;
    let mut it = flat.into_iter();
    Ok((0..nc).map(|_| it.by_ref().take(nw).collect()).collect())
}
