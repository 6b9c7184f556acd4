//! Execution configurations (§7.3): the initial clusters, the scheduled spinups and the
//! Autoscaler's parameters: what the Policy Tuner produces and every engine consumes.
//!
//! Serialized with serde; unknown fields are rejected, so a misspelt key is an error, not a
//! silently ignored setting. The Python package reads and writes the same structure as YAML.

use serde::{Deserialize, Serialize};

use crate::autoscaler::{scaler_by_name, AutoscalerParams, ScalerOptions, SCALING_POLICIES};
use crate::cluster::{check_base_capacity, check_sizes};
use crate::control::{Action, PlannedScaler, ScheduledAction, ScheduledScaler, Scaler};
use crate::error::{AutoSloError, Result};
use crate::router::{RouterOptions, ROUTING_POLICIES};
use crate::tenancy::SloPolicy;

/// Format version written into every configuration.
pub const CONFIG_VERSION: u32 = 1;
/// How late (at most) a scheduled spinup is carried out: the schedule's tick period (s).
pub const SCHEDULE_RESOLUTION_S: f64 = 5.0;

/// One scheduled spinup: at `at_s` seconds from the start of the day, add a cluster of `size` RPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledSpinup {
    pub at_s: f64,
    pub size: u32,
}

/// The Autoscaler's settings in a configuration (the Configuration Tuner's search space).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutoscalerKnobs {
    /// A scaling policy (`autoslo` unless a baseline is wanted).
    pub policy: String,
    /// Spinup trigger for `add-best`, `horizontal`, `vertical` (`combined`, `observed`, `queue@N`).
    pub trigger: Option<String>,
    /// Target violation rate τ (the selector's τ_target; τ_trigger unless given).
    pub tau: f64,
    pub tau_trigger: Option<f64>,
    pub theta: usize,
    /// μ; unset: the policy's default (`autoscaler::DEFAULT_MU`, or `DEFAULT_AUTOSLO_MU` for
    /// `autoslo`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mu: Option<usize>,
    pub window_s: f64,
    pub t_idle_s: f64,
    pub t_min_lifetime_s: f64,
    pub sizes: Vec<u32>,
    pub min_clusters: usize,
    pub max_clusters: usize,
    pub selector_headroom: Option<f64>,
    /// Whether a spinup tied with do-nothing wins the selector's tie (a change;
    /// `AutoscalerParams::selector_spinup_on_tie`). Unset: the policy's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector_spinup_on_tie: Option<bool>,
}

impl Default for AutoscalerKnobs {
    fn default() -> Self {
        let p = AutoscalerParams::default();
        Self {
            policy: "autoslo".into(),
            trigger: None,
            tau: p.tau_target,
            tau_trigger: None,
            theta: p.theta,
            mu: p.mu,
            window_s: p.window_s,
            t_idle_s: p.t_idle_s,
            t_min_lifetime_s: p.t_min_lifetime_s,
            sizes: vec![16, 32],
            min_clusters: p.min_clusters,
            max_clusters: p.max_clusters,
            selector_headroom: None,
            selector_spinup_on_tie: None,
        }
    }
}

impl AutoscalerKnobs {
    /// The Autoscaler's parameters, with the engine's spinup delay δ.
    pub fn params(&self, spinup_s: f64) -> AutoscalerParams {
        AutoscalerParams {
            tau_target: self.tau,
            tau_trigger: self.tau_trigger.unwrap_or(self.tau),
            theta: self.theta,
            mu: self.mu,
            window_s: self.window_s,
            t_idle_s: self.t_idle_s,
            t_min_lifetime_s: self.t_min_lifetime_s,
            sizes: self.sizes.clone(),
            spinup_s,
            min_clusters: self.min_clusters,
            max_clusters: self.max_clusters,
            selector_headroom: self.selector_headroom,
            selector_spinup_on_tie: self.selector_spinup_on_tie,
            ..AutoscalerParams::default()
        }
    }
}

/// Where a configuration came from (written by the tuner; optional).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Provenance {
    /// The tool and version that wrote it.
    pub generated_by: Option<String>,
    /// The day it was tuned for (YYYY-MM-DD).
    pub day: Option<String>,
    /// Days of history the forecasts were drawn from.
    pub history_days: Option<u32>,
    /// Forecasts used for training and for validation.
    pub training_forecasts: Option<usize>,
    pub validation_forecasts: Option<usize>,
    /// The target violation rate τ it was tuned for.
    pub tau: Option<f64>,
    /// Mean violation rate and cost on the validation forecasts (simulated).
    pub validation_violation_rate: Option<f64>,
    pub validation_cost: Option<f64>,
}

/// An execution configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionConfig {
    #[serde(default = "version")]
    pub version: u32,
    /// Clusters (RPU) ready at the start of the day.
    pub initial_clusters: Vec<u32>,
    /// Spinups at fixed times of the day (the Spinup Scheduler's output).
    #[serde(default)]
    pub scheduled_spinups: Vec<ScheduledSpinup>,
    /// The Autoscaler, or `None` for a fixed cluster set plus the schedule.
    #[serde(default = "some_default_knobs")]
    pub autoscaler: Option<AutoscalerKnobs>,
    /// The routing policy.
    #[serde(default = "routing")]
    pub routing: String,
    /// The `autoslo` router's SLO headroom ([`RouterOptions::slo_headroom`]); unset: the run's
    /// (by default [`crate::router::DEFAULT_SLO_HEADROOM`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_headroom: Option<f64>,
    /// Deadlines per (tenant tier, class), overridable per template (`None`: the workload's SLOs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_policy: Option<SloPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

fn version() -> u32 {
    CONFIG_VERSION
}
fn routing() -> String {
    "autoslo".into()
}
fn some_default_knobs() -> Option<AutoscalerKnobs> {
    Some(AutoscalerKnobs::default())
}

impl ExecutionConfig {
    /// `initial` clusters, no schedule, the default `autoslo` Autoscaler.
    pub fn new(initial: Vec<u32>) -> Self {
        Self { version: CONFIG_VERSION, initial_clusters: initial, scheduled_spinups: Vec::new(), autoscaler: some_default_knobs(), routing: routing(), slo_headroom: None, slo_policy: None, provenance: None }
    }

    /// Parse and validate a configuration from JSON (the Python side converts YAML to this).
    pub fn from_json(text: &str) -> Result<Self> {
        let c: Self = serde_json::from_str(text).map_err(|e| AutoSloError::InvalidConfig(format!("execution configuration: {e}")))?;
        c.validated()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an execution configuration always serializes")
    }

    /// Check every field; errors name the field.
    pub fn validated(mut self) -> Result<Self> {
        if self.version != CONFIG_VERSION {
            return Err(AutoSloError::InvalidConfig(format!("execution configuration version {} is not supported (this AutoSLO reads version {CONFIG_VERSION})", self.version)));
        }
        check_sizes("initial_clusters", &self.initial_clusters)?;
        for (i, s) in self.scheduled_spinups.iter().enumerate() {
            if !(s.at_s.is_finite() && s.at_s >= 0.0) {
                return Err(AutoSloError::out_of_range(format!("scheduled_spinups[{i}].at_s"), "a finite time ≥ 0 s", s.at_s));
            }
            check_base_capacity(format!("scheduled_spinups[{i}].size"), s.size)?;
        }
        self.scheduled_spinups.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        if !ROUTING_POLICIES.contains(&self.routing.as_str()) {
            return Err(AutoSloError::UnknownPolicy { name: self.routing.clone(), known: ROUTING_POLICIES.join(", ") });
        }
        if let Some(h) = self.slo_headroom {
            RouterOptions { slo_headroom: h, ..RouterOptions::default() }.validated()?;
        }
        if let Some(k) = &self.autoscaler {
            if !SCALING_POLICIES.contains(&k.policy.as_str()) {
                return Err(AutoSloError::UnknownPolicy { name: k.policy.clone(), known: SCALING_POLICIES.join(", ") });
            }
            k.params(300.0).validated()?;
            // Build it once so a bad trigger name or policy combination fails on load.
            scaler_by_name(&k.policy, k.trigger.as_deref(), k.params(300.0), &ScalerOptions::default())?;
        }
        self.slo_policy = self.slo_policy.map(SloPolicy::validated).transpose()?;
        Ok(self)
    }

    /// `AddSpinup`: this configuration with one more scheduled spinup.
    pub fn with_spinup(&self, at_s: f64, size: u32) -> Self {
        let mut c = self.clone();
        c.scheduled_spinups.push(ScheduledSpinup { at_s: at_s.max(0.0), size });
        c.scheduled_spinups.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        c
    }

    /// This plan taken over during the run of a control plane where clusters of the `standing`
    /// sizes stand, its day begun at `day_start` and the hand-over at `now` (the control plane's
    /// clock): the configuration whose schedule carries it out from there, and the sizes spun up
    /// for it. Each cluster the plan wants up at `now` (its initial clusters, and its spinups
    /// scheduled at or before `now`: the plan placed in its day) that no standing cluster of that
    /// size stands for is scheduled at max(`day_start`, `now`); its later spinups at `day_start`
    /// + their time. Standing clusters beyond the plan's are left to its autoscaler.
    pub fn taken_over(&self, day_start: f64, now: f64, standing: &[u32]) -> (Self, Vec<u32>) {
        let (due, later): (Vec<&ScheduledSpinup>, Vec<&ScheduledSpinup>) = self.scheduled_spinups.iter().partition(|s| day_start + s.at_s <= now);
        let mut have = standing.to_vec();
        let mut missing = Vec::new();
        for size in self.initial_clusters.iter().copied().chain(due.iter().map(|s| s.size)) {
            match have.iter().position(|&h| h == size) {
                Some(i) => {
                    have.swap_remove(i);
                }
                None => missing.push(size),
            }
        }
        let at = day_start.max(now);
        let mut placed = self.clone();
        placed.scheduled_spinups = missing.iter().map(|&size| ScheduledSpinup { at_s: at, size }).chain(later.iter().map(|s| ScheduledSpinup { at_s: day_start + s.at_s, size: s.size })).collect();
        placed.scheduled_spinups.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        (placed, missing)
    }

    /// The router options of a run of this configuration: `run`'s, with the configuration's SLO
    /// headroom if it sets one.
    pub fn router_options(&self, run: RouterOptions) -> RouterOptions {
        RouterOptions { slo_headroom: self.slo_headroom.unwrap_or(run.slo_headroom), ..run }
    }

    /// The scaler that carries the configuration out: the Autoscaler (if any) beside the schedule.
    /// `spinup_s` is the engine's spinup delay (the selector's δ).
    pub fn scaler(&self, spinup_s: f64) -> Result<Box<dyn Scaler>> {
        let inner: Box<dyn Scaler> = match &self.autoscaler {
            Some(k) => scaler_by_name(&k.policy, k.trigger.as_deref(), k.params(spinup_s), &ScalerOptions::default())?,
            None => Box::new(crate::control::StaticScaler),
        };
        if self.scheduled_spinups.is_empty() {
            return Ok(inner);
        }
        let actions = self.scheduled_spinups.iter().map(|s| ScheduledAction { at: s.at_s, action: Action::spin_up(s.size, "scheduled") }).collect();
        Ok(Box::new(PlannedScaler::new(ScheduledScaler::new(actions, SCHEDULE_RESOLUTION_S)?, inner)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> ExecutionConfig {
        ExecutionConfig::from_json(r#"{"version": 1, "initial_clusters": [8, 16], "scheduled_spinups": [{"at_s": 100, "size": 8}, {"at_s": 5000, "size": 32}], "autoscaler": null, "routing": "round-robin"}"#).unwrap()
    }

    fn schedule(c: &ExecutionConfig) -> Vec<(f64, u32)> {
        c.scheduled_spinups.iter().map(|s| (s.at_s, s.size)).collect()
    }

    #[test]
    fn a_plan_taken_over_spins_up_only_what_no_standing_cluster_stands_for() {
        // At its day's start, with an 8 standing: the 16 now, the schedule at its times.
        let (placed, missing) = plan().taken_over(1000.0, 1000.0, &[8]);
        assert_eq!(missing, vec![16]);
        assert_eq!(schedule(&placed), vec![(1000.0, 16), (1100.0, 8), (6000.0, 32)]);
        // Taken over later in its day: the 8 scheduled at 100 s is due, as if initial.
        let (placed, missing) = plan().taken_over(0.0, 200.0, &[16]);
        assert_eq!(missing, vec![8, 8]);
        assert_eq!(schedule(&placed), vec![(200.0, 8), (200.0, 8), (5000.0, 32)]);
        // Everything it wants now stands already (a size counts once per standing cluster).
        let (placed, missing) = plan().taken_over(0.0, 200.0, &[8, 16, 8, 32]);
        assert!(missing.is_empty());
        assert_eq!(schedule(&placed), vec![(5000.0, 32)]);
        // Its day not begun yet: what it wants is scheduled at its start.
        let (placed, missing) = plan().taken_over(500.0, 200.0, &[]);
        assert_eq!(missing, vec![8, 16]);
        assert_eq!(schedule(&placed), vec![(500.0, 8), (500.0, 16), (600.0, 8), (5500.0, 32)]);
        assert_eq!(placed.initial_clusters, vec![8, 16], "the rest of the plan as it is");
    }
}
