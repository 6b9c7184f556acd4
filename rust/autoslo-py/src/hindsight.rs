//! The best plan in hindsight from Python: conversions only (`autoslo.hindsight`).

use autoslo_core::emulator::EmulatorConfig;
use autoslo_core::router::RouterOptions;
use autoslo_core::tuner::hindsight::{self as core_hindsight, HindsightParams, HindsightSpace, PlanBackend, PlanBatch, PlanEnv, PlanOutcome, RayonPlans, Target};
use autoslo_core::tuner::{ExecutionConfig, TargetScope};
use autoslo_core::{AutoSloError, Result as CoreResult};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::PyTable;

use crate::predictor::PyPredictor;
use crate::tuner::{fingerprint, with_progress};
use crate::{err, lifecycle_of, workload_in, AutoSloCoreError};

/// The emulator every plan runs in, from the keyword arguments `emulate` takes for it.
fn env(seed: u64, lifecycle: &str, spinup_s: f64, teardown_s: f64, timeout_s: Option<f64>) -> PyResult<PlanEnv> {
    let emulator = EmulatorConfig { seed, lifecycle: lifecycle_of(lifecycle, spinup_s, teardown_s)?, timeout_s, ..EmulatorConfig::default() };
    Ok(PlanEnv { router: RouterOptions { billing: emulator.billing, seed, ..RouterOptions::default() }, emulator, spinup_s })
}

fn target(tau: f64, tau_scope: &str) -> PyResult<Target> {
    Target { tau, scope: TargetScope::parse(tau_scope).map_err(err)? }.validated().map_err(err)
}

/// The plans through a Python backend (`autoslo.ray_backend.RayBackend`): `put_predictor(...)`
/// as for SimulateBatch, `get_workload`/`put_workload` for the day, then
/// `submit_plans(plans, handle, settings) -> batch` with `plans` a list of (index, JSON);
/// `batch.wait(timeout_s)` returns JSON lists of outcomes finished since the last call.
struct PyPlans {
    obj: Py<PyAny>,
    name: String,
    settings: Py<PyDict>,
}

impl PyPlans {
    fn fail(&self, problem: impl ToString) -> AutoSloError {
        AutoSloError::Backend { backend: self.name.clone(), problem: problem.to_string() }
    }

    fn submit(&self, py: Python<'_>, batch: &PlanBatch<'_>) -> PyResult<Py<PyAny>> {
        let p = batch.predictor;
        self.obj.call_method1(py, "put_predictor", (p.dir.display().to_string(), p.kernel().name(), p.arrival.is_some(), p.meta.model_sha256.clone()))?;
        let key = fingerprint(batch.workload);
        let mut handle = self.obj.call_method1(py, "get_workload", (key,))?;
        if handle.is_none(py) {
            handle = self.obj.call_method1(py, "put_workload", (key, crate::workload_out(py, batch.workload)?))?;
        }
        let plans: Vec<(usize, String)> = batch.plans.iter().map(|(i, c)| (*i, c.to_json())).collect();
        let settings = self.settings.bind(py).copy()?;
        settings.set_item("incumbent", batch.incumbent)?;
        self.obj.call_method1(py, "submit_plans", (plans, handle, settings))
    }
}

impl PlanBackend for PyPlans {
    fn evaluate(&self, batch: &PlanBatch<'_>) -> CoreResult<Vec<PlanOutcome>> {
        if batch.plans.is_empty() {
            return Ok(Vec::new());
        }
        let handle = Python::attach(|py| self.submit(py, batch)).map_err(|e| self.fail(e))?;
        let mut out = Vec::new();
        while out.len() < batch.plans.len() {
            if batch.control.cancelled() {
                let _ = Python::attach(|py| handle.call_method0(py, "cancel"));
                return Err(AutoSloError::Interrupted);
            }
            let parts = Python::attach(|py| handle.call_method1(py, "wait", (0.1,))?.extract::<Vec<String>>(py)).map_err(|e| self.fail(e))?;
            for part in parts {
                let got: Vec<PlanOutcome> = serde_json::from_str(&part).map_err(|e| self.fail(format!("a task's outcomes: {e}")))?;
                batch.control.add_done(got.len());
                out.extend(got);
            }
        }
        Ok(out)
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// Search the best plan in hindsight for the day `workload`; returns the result as JSON
/// (`HindsightResult`).
#[pyfunction]
#[pyo3(signature = (workload, predictor, given=Vec::new(), tau=0.1, tau_scope="fleet", plans=core_hindsight::DEFAULT_HINDSIGHT_PLANS, refine=core_hindsight::DEFAULT_REFINE_SHARE, search_seed=0, space=None, seed=0, lifecycle="fixed", spinup_s=300.0, teardown_s=200.0, timeout_s=Some(3600.0), backend=None, progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn hindsight(
    py: Python<'_>,
    workload: PyTable,
    predictor: Bound<'_, PyPredictor>,
    given: Vec<String>,
    tau: f64,
    tau_scope: &str,
    plans: usize,
    refine: f64,
    #[pyo3(from_py_with = crate::convert::seed)] search_seed: u64,
    space: Option<&str>,
    #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
    lifecycle: &str,
    spinup_s: f64,
    teardown_s: f64,
    timeout_s: Option<f64>,
    backend: Option<Py<PyAny>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    let w = workload_in(workload, None, None, None, None)?;
    let given = given.iter().map(|c| ExecutionConfig::from_json(c)).collect::<CoreResult<Vec<_>>>().map_err(err)?;
    let space: HindsightSpace = match space {
        None => HindsightSpace::default(),
        Some(s) => serde_json::from_str(s).map_err(|e| AutoSloCoreError::new_err(format!("hindsight space: {e}")))?,
    };
    let params = HindsightParams { target: target(tau, tau_scope)?, plans, refine, seed: search_seed, space };
    let env = env(seed, lifecycle, spinup_s, teardown_s, timeout_s)?;
    let backend: Box<dyn PlanBackend> = match backend {
        None => Box::new(RayonPlans),
        Some(obj) => {
            let name = obj.bind(py).getattr("name").and_then(|n| n.extract::<String>()).unwrap_or_else(|_| "python".into());
            let settings = PyDict::new(py);
            for (k, v) in [("tau", tau), ("spinup_s", spinup_s), ("teardown_s", teardown_s)] {
                settings.set_item(k, v)?;
            }
            settings.set_item("tau_scope", tau_scope)?;
            settings.set_item("seed", seed)?;
            settings.set_item("lifecycle", lifecycle)?;
            settings.set_item("timeout_s", timeout_s)?;
            Box::new(PyPlans { obj, name, settings: settings.unbind() })
        }
    };
    let p = &predictor.get().inner;
    let r = with_progress(py, &progress, |c| core_hindsight::hindsight(&w, &given, p, &env, &params, backend.as_ref(), c))?;
    Ok(serde_json::to_string(&r).expect("a hindsight result serializes"))
}

/// Emulate `plans` ((index, JSON) pairs) on the day `workload` under the search's bound, on
/// `threads` threads: a remote worker's share of a hindsight search. Returns the outcomes (JSON).
#[pyfunction]
#[pyo3(signature = (workload, plans, predictor, tau, tau_scope="fleet", incumbent=f64::INFINITY, seed=0, lifecycle="fixed", spinup_s=300.0, teardown_s=200.0, timeout_s=Some(3600.0), threads=None))]
#[allow(clippy::too_many_arguments)]
pub fn evaluate_plans(
    py: Python<'_>,
    workload: PyTable,
    plans: Vec<(usize, String)>,
    predictor: Bound<'_, PyPredictor>,
    tau: f64,
    tau_scope: &str,
    incumbent: f64,
    #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
    lifecycle: &str,
    spinup_s: f64,
    teardown_s: f64,
    timeout_s: Option<f64>,
    threads: Option<usize>,
) -> PyResult<String> {
    let w = workload_in(workload, None, None, None, None)?;
    let plans = plans.into_iter().map(|(i, c)| ExecutionConfig::from_json(&c).map(|c| (i, c))).collect::<CoreResult<Vec<_>>>().map_err(err)?;
    let env = env(seed, lifecycle, spinup_s, teardown_s, timeout_s)?;
    let target = target(tau, tau_scope)?;
    let p = &predictor.get().inner;
    let control = autoslo_core::tuner::BatchControl::new();
    let out = py.detach(|| core_hindsight::evaluate_plans(&PlanBatch { workload: &w, plans: &plans, predictor: p, env: &env, target, incumbent, control: &control }, threads)).map_err(err)?;
    Ok(serde_json::to_string(&out).expect("outcomes serialize"))
}

/// The default hindsight space (JSON), every knob's values.
#[pyfunction]
pub fn hindsight_space() -> String {
    serde_json::to_string(&HindsightSpace::default()).expect("the space serializes")
}
