//! The Configuration Tuner (§7.5): searches the Autoscaler's parameters (T_idle, T_min_lifetime,
//! τ_trigger, θ, μ, w) and the initial cluster set around a configuration, keeps the top k on the
//! training workloads, and returns the best on the validation workloads by BestWithTarget.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::{AutoSloError, Result};
use crate::predictor::Predictor;
use crate::rng::Rng;
use crate::slo::{best_with_target_within, rank_with_target};
use crate::tuner::batch::{agg_perf, simulate_batch, Aggregate, BatchBackend, BatchControl, BatchSettings, SimOutcome, TargetScope};
use crate::tuner::config::{AutoscalerKnobs, ExecutionConfig};
use crate::workload::Workload;

/// The values each knob may take. An empty list leaves the knob as the base configuration has it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchSpace {
    pub t_idle_s: Vec<f64>,
    pub t_min_lifetime_s: Vec<f64>,
    pub tau_trigger: Vec<f64>,
    pub theta: Vec<usize>,
    pub mu: Vec<usize>,
    pub window_s: Vec<f64>,
    pub initial_clusters: Vec<Vec<u32>>,
    /// The autoscaler's eligible sizes (RPU).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<Vec<u32>>,
    /// The Spinup Size Selector's headroom.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub selector_headroom: Vec<f64>,
    /// The `autoslo` router's SLO headroom.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slo_headroom: Vec<f64>,
}

/// The T_idle values (s) of the product's default search space ([`SearchSpace::recommended`]).
pub const DEFAULT_T_IDLE_S: [f64; 3] = [600.0, 1200.0, 1800.0];

/// The τ_trigger values of the product's default search space ([`SearchSpace::recommended`]).
pub const DEFAULT_TAU_TRIGGER: [f64; 3] = [0.02, 0.05, 0.1];

/// The initial cluster sets of the product's default search space ([`SearchSpace::recommended`]).
pub const DEFAULT_INITIAL_CLUSTERS: [&[u32]; 6] = [&[16], &[32], &[16, 16], &[16, 8, 8], &[16, 16, 8, 8], &[16, 16, 16, 16]];

/// The knobs of a [`SearchSpace`], in the order `len_of`, `set` and `point` use.
const DIMS: usize = 10;

impl SearchSpace {
    /// The reference ranges (DESIGN.md "defaults that the reference implementation used").
    pub fn reference() -> Self {
        Self {
            t_idle_s: vec![300.0, 600.0, 1200.0],
            t_min_lifetime_s: vec![1200.0],
            tau_trigger: vec![0.05, 0.1],
            theta: vec![16, 32],
            mu: vec![16, 32],
            window_s: vec![120.0, 300.0, 600.0],
            initial_clusters: Vec::new(),
            sizes: Vec::new(),
            selector_headroom: Vec::new(),
            slo_headroom: Vec::new(),
        }
    }

    /// The product's default: the reference T_idle range moved up to {600, 1200, 1800} s (**a
    /// change**). The Workload Simulator sees the cost as flat across T_idle and, being optimistic
    /// under load, lets the shortest idle time through; in the emulator a cluster torn down after a
    /// few idle minutes is missed minutes later. Dropping 300 s was chosen on the tuning seed 100
    /// of Table 5 (mean violation rate against no past data −5.5 % with 1 day of history against
    /// +22.9 % with 300 s kept); adding 1800 s on the tuning seeds 7 and 100 with the cost
    /// tolerance (−36.1 % against −31.2 % without it, every tuned run within τ; `docs/tuner.md`).
    /// And the reference τ_trigger range {0.05, 0.1} widened to {0.02, 0.05, 0.1} (**a change**):
    /// every tuned configuration of those seeds took the lowest τ_trigger offered; with 0.02 the
    /// mean violation rate against no past data went from −41.2 % to −47.4 % on the tuning seeds 7
    /// and 100 at +2.6 % cost, every tuned run within τ (0.01 as well: −47.2 % on seed 7, not
    /// adopted; `docs/tuner.md`).
    ///
    /// And three more knobs (**changes**, to spend the SLO budget rather than money; chosen on the
    /// tuning seed 7 of Figure 6 against the best plan in hindsight, `docs/tuner.md`): the initial
    /// clusters ([`DEFAULT_INITIAL_CLUSTERS`]: idle clusters bill nothing here, and the cheapest
    /// plans in hindsight start with several small ones), the autoscaler's eligible sizes (8 RPU
    /// too) and the Spinup Size Selector's headroom (1, Algorithm 3's, or the `autoslo` policy's 2).
    pub fn recommended() -> Self {
        Self {
            t_idle_s: DEFAULT_T_IDLE_S.to_vec(),
            tau_trigger: DEFAULT_TAU_TRIGGER.to_vec(),
            initial_clusters: DEFAULT_INITIAL_CLUSTERS.iter().map(|c| c.to_vec()).collect(),
            sizes: vec![vec![16, 32], vec![8, 16, 32]],
            selector_headroom: vec![1.0, 2.0],
            ..Self::reference()
        }
    }

    /// The first dimension without a value, by name (every one needs a value where a plan is
    /// drawn from the space, as the best plan in hindsight draws).
    pub(crate) fn first_empty(&self) -> Option<&'static str> {
        const NAMES: [&str; DIMS] = ["t_idle_s", "t_min_lifetime_s", "tau_trigger", "theta", "mu", "window_s", "initial_clusters", "sizes", "selector_headroom", "slo_headroom"];
        (0..DIMS).find(|&d| self.len_of(d) == 0).map(|d| NAMES[d])
    }

    pub(crate) fn len_of(&self, d: usize) -> usize {
        match d {
            0 => self.t_idle_s.len(),
            1 => self.t_min_lifetime_s.len(),
            2 => self.tau_trigger.len(),
            3 => self.theta.len(),
            4 => self.mu.len(),
            5 => self.window_s.len(),
            6 => self.initial_clusters.len(),
            7 => self.sizes.len(),
            8 => self.selector_headroom.len(),
            _ => self.slo_headroom.len(),
        }
    }

    /// `base` with value `v` of dimension `d`.
    pub(crate) fn set(&self, base: &ExecutionConfig, d: usize, v: usize) -> ExecutionConfig {
        let mut c = base.clone();
        if d == 6 {
            c.initial_clusters = self.initial_clusters[v].clone();
            return c;
        }
        if d == 9 {
            c.slo_headroom = Some(self.slo_headroom[v]);
            return c;
        }
        let k: &mut AutoscalerKnobs = c.autoscaler.get_or_insert_with(AutoscalerKnobs::default);
        match d {
            0 => k.t_idle_s = self.t_idle_s[v],
            1 => k.t_min_lifetime_s = self.t_min_lifetime_s[v],
            2 => k.tau_trigger = Some(self.tau_trigger[v]),
            3 => k.theta = self.theta[v],
            4 => k.mu = Some(self.mu[v]),
            5 => k.window_s = self.window_s[v],
            7 => k.sizes = self.sizes[v].clone(),
            _ => k.selector_headroom = Some(self.selector_headroom[v]),
        }
        c
    }

    /// Apply a choice (one index per dimension; `None` keeps the base value).
    fn apply(&self, base: &ExecutionConfig, choice: &[Option<usize>]) -> ExecutionConfig {
        choice.iter().enumerate().fold(base.clone(), |c, (d, v)| match v {
            Some(v) => self.set(&c, d, *v),
            None => c,
        })
    }

    /// Number of points of the grid.
    pub fn grid_size(&self) -> usize {
        (0..DIMS).map(|d| self.len_of(d).max(1)).product()
    }

    /// The index of `base`'s own value in dimension `d`'s list, if it is there.
    fn index_of(&self, base: &ExecutionConfig, d: usize) -> Option<usize> {
        if d == 6 {
            return self.initial_clusters.iter().position(|c| *c == base.initial_clusters);
        }
        if d == 9 {
            return self.slo_headroom.iter().position(|&v| Some(v) == base.slo_headroom);
        }
        let k = base.autoscaler.as_ref()?;
        match d {
            0 => self.t_idle_s.iter().position(|&v| v == k.t_idle_s),
            1 => self.t_min_lifetime_s.iter().position(|&v| v == k.t_min_lifetime_s),
            2 => self.tau_trigger.iter().position(|&v| Some(v) == k.tau_trigger),
            3 => self.theta.iter().position(|&v| v == k.theta),
            4 => self.mu.iter().position(|&v| Some(v) == k.mu),
            5 => self.window_s.iter().position(|&v| v == k.window_s),
            7 => self.sizes.iter().position(|v| *v == k.sizes),
            _ => self.selector_headroom.iter().position(|&v| Some(v) == k.selector_headroom),
        }
    }

    /// The grid point nearest `base`: its own value where a dimension lists it, else the middle
    /// of the dimension's list.
    fn centre_of(&self, base: &ExecutionConfig) -> Vec<Option<usize>> {
        (0..DIMS)
            .map(|d| match self.len_of(d) {
                0 => None,
                n => Some(self.index_of(base, d).unwrap_or((n - 1) / 2)),
            })
            .collect()
    }

    /// The grid points `k` index steps from `centre` in all (the steps of every dimension summed),
    /// in index order.
    fn shell(&self, centre: &[Option<usize>], k: usize) -> Vec<Vec<Option<usize>>> {
        fn walk(space: &SearchSpace, centre: &[Option<usize>], d: usize, left: usize, point: &mut Vec<Option<usize>>, out: &mut Vec<Vec<Option<usize>>>) {
            if d == centre.len() {
                if left == 0 {
                    out.push(point.clone());
                }
                return;
            }
            let Some(c) = centre[d] else {
                point.push(None);
                walk(space, centre, d + 1, left, point, out);
                point.pop();
                return;
            };
            for v in c.saturating_sub(left)..=(c + left).min(space.len_of(d) - 1) {
                point.push(Some(v));
                walk(space, centre, d + 1, left - v.abs_diff(c), point, out);
                point.pop();
            }
        }
        let mut out = Vec::new();
        walk(self, centre, 0, k, &mut Vec::with_capacity(DIMS), &mut out);
        out
    }

    /// The most index steps any grid point lies from `centre`.
    fn farthest(&self, centre: &[Option<usize>]) -> usize {
        centre.iter().enumerate().filter_map(|(d, c)| c.map(|c| c.max(self.len_of(d) - 1 - c))).sum()
    }

    /// The grid point with mixed-radix index `idx`.
    fn point(&self, mut idx: usize) -> Vec<Option<usize>> {
        (0..DIMS)
            .map(|d| {
                let n = self.len_of(d);
                if n == 0 {
                    return None;
                }
                let v = idx % n;
                idx /= n;
                Some(v)
            })
            .collect()
    }
}

/// How candidates are generated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Strategy {
    /// Every point of the grid.
    Grid,
    /// `budget` distinct grid points drawn at random.
    Random { budget: usize, seed: u64 },
    /// Per-dimension sweeps from the base: each dimension's values with the others held at the
    /// best so far (by BestWithTarget on training), `sweeps` times over all dimensions.
    CoordinateDescent { sweeps: usize },
    /// Progressive widening with early stopping (the paper names `adaptive_batch` and no more;
    /// this is our reading). Batches of grid points around a centre, each one SimulateBatch: the
    /// points one index step from the centre (one knob moved to a neighbouring value; the centre
    /// is the grid point nearest the base), then, while the best on training (BestWithTarget)
    /// stays the same, those two, three, … steps away (steps summed over the knobs); when a batch
    /// changes the best, the search re-centres on it and narrows to one step again. It stops after `patience` + 1 batches in a row that do not change the
    /// best, when the widening has covered the grid, or at `max_candidates` points.
    AdaptiveBatch { patience: usize },
}

impl Strategy {
    pub fn parse(name: &str, budget: usize, seed: u64) -> Result<Self> {
        match name {
            "grid" => Ok(Strategy::Grid),
            "random" => Ok(Strategy::Random { budget, seed }),
            "coordinate-descent" => Ok(Strategy::CoordinateDescent { sweeps: budget.max(1) }),
            "adaptive-batch" => Ok(Strategy::AdaptiveBatch { patience: budget }),
            _ => Err(AutoSloError::UnknownPolicy { name: name.into(), known: "grid, random, coordinate-descent, adaptive-batch".into() }),
        }
    }
}

/// Configuration Tuner settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigTunerParams {
    pub strategy: Strategy,
    /// Candidates carried from training to validation.
    pub top_k: usize,
    pub alpha: Aggregate,
    /// Whose violation rate τ holds (the fleet's, as listed, or every tenant's too).
    pub scope: TargetScope,
    /// Target violation rate τ of BestWithTarget.
    pub tau: f64,
    /// Refuse grids larger than this (simulations = points × training workloads).
    pub max_candidates: usize,
    /// 0: BestWithTarget as in §7.5. Above 0, **a change**: among configurations that meet τ
    /// within this fraction of the cheapest one's cost, the fewest violations win
    /// ([`best_with_target_within`]), in the coordinate descent, the top k and on validation.
    pub cost_tolerance: f64,
}

impl Default for ConfigTunerParams {
    fn default() -> Self {
        Self { strategy: Strategy::CoordinateDescent { sweeps: 1 }, top_k: 3, alpha: Aggregate::Mean, scope: TargetScope::Fleet, tau: 0.1, max_candidates: 512, cost_tolerance: 0.0 }
    }
}

/// One evaluated candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    pub config: ExecutionConfig,
    pub training: (f64, f64),
    /// Set for the top k.
    pub validation: Option<(f64, f64)>,
}

/// The Configuration Tuner's result.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigTuneResult {
    pub best: ExecutionConfig,
    /// Every candidate, in evaluation order (the base first).
    pub evaluated: Vec<Evaluated>,
    /// `best`'s outcomes on the validation workloads (without per-query logs).
    pub validation_outcomes: Vec<SimOutcome>,
    pub simulations: usize,
}

/// Tune `base`'s Autoscaler parameters and initial clusters over `space`.
#[allow(clippy::too_many_arguments)]
pub fn tune_config(
    predictor: &Predictor,
    base: &ExecutionConfig,
    space: &SearchSpace,
    training: &[Workload],
    validation: &[Workload],
    params: &ConfigTunerParams,
    settings: &BatchSettings,
    backend: &dyn BatchBackend,
    control: &BatchControl,
) -> Result<ConfigTuneResult> {
    if training.is_empty() || validation.is_empty() {
        return Err(AutoSloError::InvalidConfig("the Configuration Tuner needs training and validation workloads".into()));
    }
    if params.top_k == 0 {
        return Err(AutoSloError::out_of_range("top_k", "≥ 1", 0));
    }
    if space.initial_clusters.iter().any(|c| c.is_empty() || c.contains(&0)) {
        return Err(AutoSloError::InvalidConfig("every candidate initial cluster set must list positive sizes".into()));
    }
    let settings = BatchSettings { keep_logs: false, ..settings.clone() };
    let mut sims = 0;
    let mut evaluated: Vec<Evaluated> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    // Evaluate the configurations not seen yet, as one batch.
    let mut eval = |cands: Vec<ExecutionConfig>, evaluated: &mut Vec<Evaluated>| -> Result<()> {
        let fresh: Vec<ExecutionConfig> = cands.into_iter().filter(|c| seen.insert(c.to_json())).collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let r = simulate_batch(predictor, &fresh, training, &settings, backend, control)?;
        sims += fresh.len() * training.len();
        evaluated.extend(fresh.into_iter().zip(&r).map(|(config, o)| Evaluated { config, training: agg_perf(o, params.alpha, params.scope), validation: None }));
        Ok(())
    };
    eval(vec![base.clone()], &mut evaluated)?;
    match params.strategy {
        Strategy::Grid => {
            let n = space.grid_size();
            if n > params.max_candidates {
                return Err(AutoSloError::InvalidConfig(format!("the grid has {n} points, more than max_candidates = {}: narrow it or use `random`", params.max_candidates)));
            }
            eval((0..n).map(|i| space.apply(base, &space.point(i))).collect(), &mut evaluated)?;
        }
        Strategy::Random { budget, seed } => {
            let n = space.grid_size();
            let mut rng = Rng::new(seed);
            let mut picks: Vec<usize> = (0..n).collect();
            rng.shuffle(&mut picks);
            picks.truncate(budget.min(params.max_candidates));
            eval(picks.into_iter().map(|i| space.apply(base, &space.point(i))).collect(), &mut evaluated)?;
        }
        Strategy::AdaptiveBatch { patience } => {
            let best_of = |evaluated: &[Evaluated]| {
                let pts: Vec<(f64, f64)> = evaluated.iter().map(|e| e.training).collect();
                best_with_target_within(&pts, params.tau, params.cost_tolerance)
            };
            let mut centre = space.centre_of(base);
            if centre.iter().any(Option::is_some) {
                // The grid point of each evaluated grid candidate, by its configuration.
                let mut at: Vec<(ExecutionConfig, Vec<Option<usize>>)> = Vec::new();
                let (mut radius, mut stalls, mut points) = (1, 0, 0);
                // The centre itself first (nothing new if it is the base).
                let c = space.apply(base, &centre);
                at.push((c.clone(), centre.clone()));
                let before = evaluated.len();
                eval(vec![c], &mut evaluated)?;
                points += evaluated.len() - before;
                let mut best = best_of(&evaluated);
                loop {
                    let whole = radius >= space.farthest(&centre);
                    let room = params.max_candidates.saturating_sub(points);
                    let batch: Vec<(ExecutionConfig, Vec<Option<usize>>)> = (0..=radius)
                        .flat_map(|k| space.shell(&centre, k))
                        .map(|p| (space.apply(base, &p), p))
                        .filter(|(c, _)| !evaluated.iter().any(|e| e.config == *c))
                        .take(room)
                        .collect();
                    if batch.is_empty() {
                        if whole || room == 0 {
                            break;
                        }
                        radius += 1;
                        continue;
                    }
                    at.extend(batch.iter().cloned());
                    let before = evaluated.len();
                    eval(batch.into_iter().map(|(c, _)| c).collect(), &mut evaluated)?;
                    points += evaluated.len() - before;
                    let now = best_of(&evaluated);
                    if now != best {
                        best = now;
                        if let Some(p) = now.and_then(|b| at.iter().find(|(c, _)| *c == evaluated[b].config)) {
                            centre = p.1.clone();
                        }
                        (radius, stalls) = (1, 0);
                    } else {
                        stalls += 1;
                        if stalls > patience {
                            break;
                        }
                        radius += 1;
                    }
                }
            }
        }
        Strategy::CoordinateDescent { sweeps } => {
            let mut current = base.clone();
            for _ in 0..sweeps {
                for d in 0..DIMS {
                    let n = space.len_of(d);
                    if n == 0 {
                        continue;
                    }
                    eval((0..n).map(|v| space.set(&current, d, v)).collect(), &mut evaluated)?;
                    let pts: Vec<(f64, f64)> = evaluated.iter().map(|e| e.training).collect();
                    if let Some(b) = best_with_target_within(&pts, params.tau, params.cost_tolerance) {
                        current = evaluated[b].config.clone();
                    }
                }
            }
        }
    }
    // Top k on training (the base always among the compared), then validation.
    let training: Vec<(f64, f64)> = evaluated.iter().map(|e| e.training).collect();
    let mut order = rank_with_target(&training, params.tau, params.cost_tolerance);
    order.truncate(params.top_k);
    let top: Vec<ExecutionConfig> = order.iter().map(|&i| evaluated[i].config.clone()).collect();
    let mut val = simulate_batch(predictor, &top, validation, &settings, backend, control)?;
    sims += top.len() * validation.len();
    let points: Vec<(f64, f64)> = val.iter().map(|r| agg_perf(r, params.alpha, params.scope)).collect();
    for (&i, &p) in order.iter().zip(&points) {
        evaluated[i].validation = Some(p);
    }
    let chosen = best_with_target_within(&points, params.tau, params.cost_tolerance).unwrap_or(0);
    Ok(ConfigTuneResult { best: top[chosen].clone(), evaluated, validation_outcomes: std::mem::take(&mut val[chosen]), simulations: sims })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_batch_starts_at_the_base_and_widens_to_the_whole_grid() {
        let space = SearchSpace { t_idle_s: vec![300.0, 600.0, 1200.0, 1800.0], theta: vec![16, 32], ..Default::default() };
        let mut base = ExecutionConfig::new(vec![16]);
        base.autoscaler.as_mut().unwrap().t_idle_s = 1200.0;
        base.autoscaler.as_mut().unwrap().theta = 99;
        // T_idle is the base's own (index 2); θ = 99 is not listed, so the middle of [16, 32].
        let centre = space.centre_of(&base);
        assert_eq!(centre, vec![Some(2), None, None, Some(0), None, None, None, None, None, None]);
        assert_eq!(space.shell(&centre, 0), vec![centre.clone()]);
        // One step: T_idle to a neighbour, or θ to its other value.
        let at = |t: usize, th: usize| vec![Some(t), None, None, Some(th), None, None, None, None, None, None];
        assert_eq!(space.shell(&centre, 1), vec![at(1, 0), at(2, 1), at(3, 0)]);
        assert_eq!(space.shell(&centre, 2), vec![at(0, 0), at(1, 1), at(3, 1)]);
        assert_eq!(space.shell(&centre, 3), vec![at(0, 1)]);
        assert_eq!(space.farthest(&centre), 3);
        assert!(space.shell(&centre, 4).is_empty());
        // Every knob of a point lands in the configuration.
        let c = space.apply(&base, &at(0, 1));
        let k = c.autoscaler.unwrap();
        assert!(space.t_idle_s.contains(&k.t_idle_s) && space.theta.contains(&k.theta));
        assert_eq!(Strategy::parse("adaptive-batch", 2, 0).unwrap(), Strategy::AdaptiveBatch { patience: 2 });
        assert!(Strategy::parse("adaptive", 1, 0).unwrap_err().to_string().contains("adaptive-batch"));
    }
}
