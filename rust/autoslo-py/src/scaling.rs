//! Scaling policies from Python: the autoscaler spec (a dict) → a core `Scaler`. Conversion only.

use autoslo_core::autoscaler::{rais, scaler_by_name, AutoscalerParams, ScalerOptions};
use autoslo_core::control::{ScheduledScaler, Scaler, StaticScaler};
use autoslo_core::tuner::ExecutionConfig;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{err, parse_schedule, AutoSloCoreError};

/// Keys an autoscaler spec may hold.
pub const SPEC_KEYS: [&str; 21] = [
    "policy",
    "trigger",
    "tau",
    "tau_trigger",
    "theta",
    "mu",
    "window_s",
    "t_idle_s",
    "t_min_lifetime_s",
    "sizes",
    "spinup_s",
    "min_clusters",
    "max_clusters",
    "force_at",
    "teardown",
    "warehouse_size",
    "max_concurrency",
    "rais_level",
    "selector_headroom",
    "selector_counts_backlog",
    "selector_spinup_on_tie",
];

fn get<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<T>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v.extract::<T>().map(Some).map_err(|e| {
            let e: PyErr = e.into();
            let got = v.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into());
            AutoSloCoreError::new_err(format!("autoscaler `{key}` = {got}: {e}"))
        }),
    }
}

/// The scaler of a run: an execution configuration (JSON), or an autoscaler spec, or a fixed
/// schedule, or none (static clusters). `spinup_s` is the engine's spinup delay, the selector's δ
/// unless the spec gives one.
pub fn scaler(spec: Option<Bound<'_, PyDict>>, schedule: Option<Vec<(f64, String, u32)>>, config: Option<&str>, spinup_s: f64) -> PyResult<Box<dyn Scaler>> {
    let schedule = schedule.filter(|s| !s.is_empty());
    if let Some(c) = config {
        if spec.is_some() || schedule.is_some() {
            return Err(AutoSloCoreError::new_err("an execution configuration carries its own autoscaler and schedule: give it alone"));
        }
        return ExecutionConfig::from_json(c).and_then(|c| c.scaler(spinup_s)).map_err(err);
    }
    match (spec, schedule) {
        (Some(_), Some(_)) => Err(AutoSloCoreError::new_err("give an autoscaler or a schedule, not both")),
        (None, Some(s)) => Ok(Box::new(ScheduledScaler::new(parse_schedule(s)?, 1.0).map_err(err)?)),
        (None, None) => Ok(Box::new(StaticScaler)),
        (Some(d), None) => {
            for k in d.keys() {
                let k: String = k.extract()?;
                if !SPEC_KEYS.contains(&k.as_str()) {
                    return Err(AutoSloCoreError::new_err(format!("unknown autoscaler setting `{k}` (known: {})", SPEC_KEYS.join(", "))));
                }
            }
            let mut p = AutoscalerParams { spinup_s, ..Default::default() };
            let tau: Option<f64> = get(&d, "tau")?;
            if let Some(t) = tau {
                p.tau_target = t;
                p.tau_trigger = t;
            }
            // Each key present overrides its default.
            macro_rules! set {
                ($($key:literal => $field:expr),* $(,)?) => {$(
                    if let Some(v) = get(&d, $key)? {
                        $field = v;
                    }
                )*};
            }
            set!(
                "tau_trigger" => p.tau_trigger,
                "theta" => p.theta,
                "window_s" => p.window_s,
                "t_idle_s" => p.t_idle_s,
                "t_min_lifetime_s" => p.t_min_lifetime_s,
                "sizes" => p.sizes,
                "spinup_s" => p.spinup_s,
                "min_clusters" => p.min_clusters,
                "max_clusters" => p.max_clusters,
                "teardown" => p.teardown,
            );
            p.mu = get(&d, "mu")?;
            p.force_at = get(&d, "force_at")?;
            p.selector_headroom = get(&d, "selector_headroom")?;
            p.selector_counts_backlog = get(&d, "selector_counts_backlog")?;
            p.selector_spinup_on_tie = get(&d, "selector_spinup_on_tie")?;
            let mut o = ScalerOptions { warehouse_size: get(&d, "warehouse_size")?, ..Default::default() };
            set!("max_concurrency" => o.max_concurrency);
            if let Some(v) = get::<String>(&d, "rais_level")? {
                o.rais_target = rais::Level::parse(&v).map_err(err)?;
            }
            let policy: String = get(&d, "policy")?.unwrap_or_else(|| "autoslo".to_string());
            let trigger: Option<String> = get(&d, "trigger")?;
            scaler_by_name(&policy, trigger.as_deref(), p, &o).map_err(err)
        }
    }
}

/// Check an autoscaler spec (a dict of [`SPEC_KEYS`]) by building its scaler as a run would,
/// and drop it: a bad setting is refused where it is written, not when a run starts. The
/// spinup delay δ, which a run takes from its engine unless the spec gives one, is the
/// default's here.
#[pyfunction]
pub fn validate_autoscaler(spec: Bound<'_, PyDict>) -> PyResult<()> {
    scaler(Some(spec), None, None, AutoscalerParams::default().spinup_s).map(drop)
}

/// The router of a live run or service: `routing` by name over `predictor`, billing with
/// `billing`, `slo_headroom` for the `autoslo` policies.
pub fn live_router(routing: &str, predictor: Option<&Bound<'_, crate::predictor::PyPredictor>>, billing: autoslo_core::billing::BillingPolicy, seed: u64, slo_headroom: f64) -> PyResult<Box<dyn autoslo_core::control::Router>> {
    autoslo_core::router::router_by_name(routing, predictor.map(|p| &p.get().inner), autoslo_core::router::RouterOptions { billing, seed, slo_headroom, ..Default::default() }).map_err(err)
}

/// A plan handed over to a running control plane or service: `config`, an `ExecutionConfig` or
/// its JSON text.
pub fn handed_over_plan(config: &Bound<'_, pyo3::PyAny>) -> PyResult<ExecutionConfig> {
    let json: String = match config.extract::<String>() {
        Ok(s) => s,
        Err(_) => config.call_method0("to_json").and_then(|j| j.extract()).map_err(|_| pyo3::exceptions::PyTypeError::new_err("config must be an ExecutionConfig or its JSON text"))?,
    };
    ExecutionConfig::from_json(&json).map_err(err)
}
