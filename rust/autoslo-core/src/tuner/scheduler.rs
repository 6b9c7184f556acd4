//! The Spinup Scheduler (§7.4): `ScheduleSpinups` (Algorithm 4) greedily adds scheduled spinups
//! to execution configurations, at the promising times `FindGoodSpinupTime` (Algorithm 5) finds
//! in their simulation logs.

use crate::error::{AutoSloError, Result};
use crate::predictor::Predictor;
use crate::slo::best_with_target;
use crate::tuner::batch::{agg_perf, simulate_batch, Aggregate, BatchBackend, BatchControl, BatchSettings, LoggedQuery, SimOutcome, TargetScope};
use crate::tuner::config::ExecutionConfig;
use crate::workload::Workload;

/// Settings of FindGoodSpinupTime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpinupTimeParams {
    /// Delinquency threshold k: how many workloads must be delinquent at once.
    pub k: usize,
    /// Spinup delay δ (s): a candidate time is this much before congestion begins.
    pub spinup_s: f64,
    /// Spacing σ_min (s) between candidate times.
    pub sigma_min_s: f64,
}

/// `FindGoodSpinupTime` (Algorithm 5): promising spinup times, ascending, from the simulation
/// logs of one configuration on several workloads. One sort and one sweep with running sums:
/// O(Q log Q) for Q logged queries.
///
/// A workload is delinquent while at least `tau_target` of its running queries violate their
/// SLOs (V/N ≥ τ, with N > 0). A congestion epoch begins when `k` workloads are delinquent at
/// once; its candidate time is δ before that; it is kept if no earlier candidate lies within
/// σ_min of it.
pub fn find_good_spinup_time(logs: &[&[LoggedQuery]], tau_target: f64, p: &SpinupTimeParams) -> Vec<f64> {
    // Lines 1–2: every arrival and completion, sorted by time. Times are ≥ 0, so their IEEE bits
    // sort as the numbers do; the payload packs workload (high bits), kind and violation.
    let total: usize = logs.iter().map(|l| l.len()).sum();
    let mut events: Vec<(u64, u32)> = Vec::with_capacity(2 * total);
    for (i, log) in logs.iter().enumerate() {
        for q in log.iter() {
            let v = u32::from(q.violated);
            events.push((q.arrival.max(0.0).to_bits(), ((i as u32) << 2) | 2 | v));
            events.push((q.end.max(0.0).to_bits(), ((i as u32) << 2) | v));
        }
    }
    events.sort_unstable();
    // Lines 3–4.
    let mut v = vec![0i64; logs.len()];
    let mut n = vec![0i64; logs.len()];
    let mut d = vec![false; logs.len()];
    let (mut n_d, mut in_epoch, mut t_cand) = (0usize, false, 0.0f64);
    let mut gamma: Vec<f64> = Vec::new();
    let spaced = |gamma: &[f64], t: f64| gamma.iter().all(|&g| (g - t).abs() >= p.sigma_min_s);
    // Lines 5–21 (the last event closes nothing: it is followed by no interval).
    for j in 0..events.len().saturating_sub(1) {
        let (bits, payload) = events[j];
        let (i, start, viol) = ((payload >> 2) as usize, payload & 2 != 0, i64::from(payload & 1));
        if start {
            v[i] += viol;
            n[i] += 1;
        } else {
            v[i] -= viol;
            n[i] -= 1;
        }
        let delinquent = n[i] > 0 && v[i] as f64 >= tau_target * n[i] as f64;
        if delinquent != d[i] {
            if delinquent {
                n_d += 1;
            } else {
                n_d -= 1;
            }
            d[i] = delinquent;
        }
        if events[j + 1].0 == bits {
            continue; // zero-length interval
        }
        let time = f64::from_bits(bits);
        if n_d >= p.k && !in_epoch {
            in_epoch = true;
            t_cand = (time - p.spinup_s).max(0.0);
        } else if n_d < p.k && in_epoch {
            in_epoch = false;
            if spaced(&gamma, t_cand) {
                gamma.push(t_cand);
            }
        }
    }
    // Lines 22–23.
    if in_epoch && spaced(&gamma, t_cand) {
        gamma.push(t_cand);
    }
    gamma
}

/// Settings of ScheduleSpinups.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerParams {
    /// Maximum scheduled spinups η (rounds).
    pub eta: usize,
    /// Aggregation α of per-workload outcomes.
    pub alpha: Aggregate,
    /// Whose violation rate τ holds (the fleet's, as listed, or every tenant's too).
    pub scope: TargetScope,
    /// Eligible sizes S of scheduled spinups.
    pub sizes: Vec<u32>,
    /// Maximum attempts per round φ.
    pub phi: usize,
    /// τ_target used in training (line 17) and by FindGoodSpinupTime.
    pub tau_target: f64,
    /// τ of the final choice on validation (line 28).
    pub tau: f64,
    pub spinup_time: SpinupTimeParams,
}

impl Default for SchedulerParams {
    fn default() -> Self {
        Self { eta: 5, alpha: Aggregate::Mean, scope: TargetScope::Fleet, sizes: vec![16, 32], phi: 3, tau_target: 0.1, tau: 0.1, spinup_time: SpinupTimeParams { k: 1, spinup_s: 300.0, sigma_min_s: 1800.0 } }
    }
}

impl SchedulerParams {
    pub fn validated(self) -> Result<Self> {
        crate::cluster::check_sizes("spinup_sizes", &self.sizes)?;
        if self.phi == 0 {
            return Err(AutoSloError::out_of_range("attempts per round φ", "≥ 1", 0));
        }
        if self.spinup_time.k == 0 {
            return Err(AutoSloError::out_of_range("delinquency threshold k", "≥ 1", 0));
        }
        for (what, t) in [("τ_target", self.tau_target), ("τ", self.tau)] {
            if !(0.0..=1.0).contains(&t) {
                return Err(AutoSloError::out_of_range(what, "in [0, 1]", t));
            }
        }
        if !(self.spinup_time.sigma_min_s >= 0.0 && self.spinup_time.spinup_s >= 0.0) {
            return Err(AutoSloError::InvalidConfig("σ_min and δ must be ≥ 0 s".into()));
        }
        Ok(self)
    }
}

/// One initial configuration's fate.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateReport {
    pub initial: ExecutionConfig,
    pub best: ExecutionConfig,
    /// (violation rate, cost) of `best` on the training and validation workloads.
    pub training: (f64, f64),
    pub validation: (f64, f64),
}

/// ScheduleSpinups' result.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleResult {
    /// E★: the chosen configuration.
    pub best: ExecutionConfig,
    /// Index of E★ in `candidates`.
    pub chosen: usize,
    pub candidates: Vec<CandidateReport>,
    /// E★'s outcomes on the validation workloads (without per-query logs).
    pub validation_outcomes: Vec<SimOutcome>,
    /// Simulations run.
    pub simulations: usize,
}

/// `ScheduleSpinups` (Algorithm 4), as listed: up to η rounds; in each, every live candidate
/// tries sizes S at its promising times Γ_i in order (at most φ attempts) and accepts the first
/// spinup that BestWithTarget prefers to its current configuration; candidates that find none
/// drop out. The best configuration of each candidate is then simulated on the validation
/// workloads and E★ chosen by BestWithTarget. The trials of a wave run as one SimulateBatch.
#[allow(clippy::too_many_arguments)]
pub fn schedule_spinups(
    predictor: &Predictor,
    initial: &[ExecutionConfig],
    training: &[Workload],
    validation: &[Workload],
    params: &SchedulerParams,
    settings: &BatchSettings,
    backend: &dyn BatchBackend,
    control: &BatchControl,
) -> Result<ScheduleResult> {
    let params = params.clone().validated()?;
    if initial.is_empty() || training.is_empty() || validation.is_empty() {
        return Err(AutoSloError::InvalidConfig("ScheduleSpinups needs at least one initial configuration, one training and one validation workload".into()));
    }
    let with_logs = BatchSettings { keep_logs: true, ..settings.clone() };
    let no_logs = BatchSettings { keep_logs: false, ..settings.clone() };
    let mut sims = 0;
    let mut best: Vec<ExecutionConfig> = initial.to_vec(); // line 1
    let mut base: Vec<(f64, f64)> = vec![(0.0, 0.0); initial.len()];
    let mut alive_at_all: Vec<usize> = (0..initial.len()).collect(); // line 2
    for _round in 0..params.eta {
        if alive_at_all.is_empty() {
            break;
        }
        // Line 4.
        let cfgs: Vec<ExecutionConfig> = alive_at_all.iter().map(|&i| best[i].clone()).collect();
        let lambda = simulate_batch(predictor, &cfgs, training, &with_logs, backend, control)?;
        sims += cfgs.len() * training.len();
        // Lines 5–8.
        let mut gamma: Vec<Vec<f64>> = vec![Vec::new(); initial.len()];
        for (pos, &i) in alive_at_all.iter().enumerate() {
            base[i] = agg_perf(&lambda[pos], params.alpha, params.scope);
            let logs: Vec<&[LoggedQuery]> = lambda[pos].iter().map(|o| o.log.as_slice()).collect();
            gamma[i] = find_good_spinup_time(&logs, params.tau_target, &params.spinup_time);
        }
        alive_at_all.retain(|&i| !gamma[i].is_empty());
        // Lines 9–10.
        let mut attempt = vec![0usize; initial.len()];
        let mut alive_this_round = alive_at_all.clone();
        // Lines 11–25.
        while !alive_this_round.is_empty() {
            let mut trials = Vec::with_capacity(alive_this_round.len() * params.sizes.len());
            for &i in &alive_this_round {
                for &s in &params.sizes {
                    trials.push(best[i].with_spinup(gamma[i][attempt[i]], s));
                }
            }
            let results = simulate_batch(predictor, &trials, training, &no_logs, backend, control)?;
            sims += trials.len() * training.len();
            let ns = params.sizes.len();
            let mut leave_round = Vec::new();
            for (pos, &i) in alive_this_round.iter().enumerate() {
                // The current configuration first, so that an exact tie keeps it (only an
                // improvement is accepted).
                let mut points = vec![base[i]];
                points.extend(results[pos * ns..(pos + 1) * ns].iter().map(|r: &Vec<SimOutcome>| agg_perf(r, params.alpha, params.scope)));
                let b = best_with_target(&points, params.tau_target).unwrap_or(0);
                if b != 0 {
                    best[i] = trials[pos * ns + b - 1].clone();
                    base[i] = points[b];
                    leave_round.push(i);
                } else if attempt[i] + 1 < gamma[i].len().min(params.phi) {
                    attempt[i] += 1;
                } else {
                    leave_round.push(i);
                    alive_at_all.retain(|&x| x != i);
                }
            }
            alive_this_round.retain(|i| !leave_round.contains(i));
        }
    }
    // Lines 26–28.
    let mut val = simulate_batch(predictor, &best, validation, &no_logs, backend, control)?;
    sims += best.len() * validation.len();
    let points: Vec<(f64, f64)> = val.iter().map(|r| agg_perf(r, params.alpha, params.scope)).collect();
    let chosen = best_with_target(&points, params.tau).unwrap_or(0);
    // `base` holds each final configuration's training figures (set when it was last simulated
    // or accepted); with η = 0 nothing was simulated on the training workloads yet.
    if params.eta == 0 {
        let tr = simulate_batch(predictor, &best, training, &no_logs, backend, control)?;
        sims += best.len() * training.len();
        base = tr.iter().map(|r| agg_perf(r, params.alpha, params.scope)).collect();
    }
    let candidates = (0..initial.len()).map(|i| CandidateReport { initial: initial[i].clone(), best: best[i].clone(), training: base[i], validation: points[i] }).collect();
    Ok(ScheduleResult { best: best[chosen].clone(), chosen, candidates, validation_outcomes: std::mem::take(&mut val[chosen]), simulations: sims })
}
