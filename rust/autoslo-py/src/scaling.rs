//! Scaling policies from Python: the autoscaler spec (a dict) → a core `Scaler`. Conversion only.

use autoslo_core::autoscaler::{rais, scaler_by_name, AutoscalerParams, ScalerOptions};
use autoslo_core::control::{ScheduledScaler, Scaler, StaticScaler};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{err, parse_schedule, AutoSloCoreError};

/// Keys an autoscaler spec may hold.
pub const SPEC_KEYS: [&str; 19] = [
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
];

fn get<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<T>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v.extract::<T>().map(Some).map_err(|e| {
            let e: PyErr = e.into();
            AutoSloCoreError::new_err(format!("autoscaler `{key}`: {e}"))
        }),
    }
}

/// The scaler of a run: an autoscaler spec, or a fixed schedule, or none (static clusters).
/// `spinup_s` is the engine's spinup delay, the selector's δ unless the spec gives one.
pub fn scaler(spec: Option<Bound<'_, PyDict>>, schedule: Option<Vec<(f64, String, u32)>>, spinup_s: f64) -> PyResult<Box<dyn Scaler>> {
    let schedule = schedule.filter(|s| !s.is_empty());
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
            if let Some(t) = get(&d, "tau_trigger")? {
                p.tau_trigger = t;
            }
            if let Some(v) = get(&d, "theta")? {
                p.theta = v;
            }
            if let Some(v) = get(&d, "mu")? {
                p.mu = v;
            }
            if let Some(v) = get(&d, "window_s")? {
                p.window_s = v;
            }
            if let Some(v) = get(&d, "t_idle_s")? {
                p.t_idle_s = v;
            }
            if let Some(v) = get(&d, "t_min_lifetime_s")? {
                p.t_min_lifetime_s = v;
            }
            if let Some(v) = get(&d, "sizes")? {
                p.sizes = v;
            }
            if let Some(v) = get(&d, "spinup_s")? {
                p.spinup_s = v;
            }
            if let Some(v) = get(&d, "min_clusters")? {
                p.min_clusters = v;
            }
            if let Some(v) = get(&d, "max_clusters")? {
                p.max_clusters = v;
            }
            p.force_at = get(&d, "force_at")?;
            p.selector_headroom = get(&d, "selector_headroom")?;
            if let Some(v) = get(&d, "teardown")? {
                p.teardown = v;
            }
            let mut o = ScalerOptions { warehouse_size: get(&d, "warehouse_size")?, ..Default::default() };
            if let Some(v) = get(&d, "max_concurrency")? {
                o.max_concurrency = v;
            }
            if let Some(v) = get::<String>(&d, "rais_level")? {
                o.rais_target = rais::Level::parse(&v).map_err(err)?;
            }
            let policy: String = get(&d, "policy")?.unwrap_or_else(|| "autoslo".to_string());
            let trigger: Option<String> = get(&d, "trigger")?;
            scaler_by_name(&policy, trigger.as_deref(), p, &o).map_err(err)
        }
    }
}
