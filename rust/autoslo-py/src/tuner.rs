//! The Policy Tuner from Python: conversions only. Long calls run the core on a worker thread
//! while this thread reports progress and watches for Ctrl-C.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use autoslo_core::simulator::{ClassLatencyScale, LatencyNoise, SimulatorConfig};
use autoslo_core::billing::BillingPolicy;
use autoslo_core::emulator::ColdStart;
use autoslo_core::router::RouterOptions;
use autoslo_core::tuner::{self, ArrivalModel, Batch, BatchBackend, BatchControl, BatchSettings, ExecutionConfig, ForecastPolicy, ForecastSettings, LoggedQuery, RayonBackend, SimOutcome, SpinupTimeParams, TunerSpec};
use autoslo_core::workload::Workload;
use autoslo_core::{AutoSloError, Result as CoreResult};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::PyTable;

use crate::predictor::PyPredictor;
use crate::{err, slo_table, workload_in, workload_out, AutoSloCoreError};

/// Run `work` off this thread; every 100 ms call `progress(done, total)` (if given) and run the
/// signal handlers, cancelling the work when one raises (Ctrl-C) or the callback raises or returns
/// False. A cancelled run raises the exception that stopped it (`KeyboardInterrupt` for a callback
/// returning False).
pub(crate) fn with_progress<T: Send>(py: Python<'_>, progress: &Option<Py<PyAny>>, work: impl FnOnce(&BatchControl) -> CoreResult<T> + Send) -> PyResult<T> {
    let control = BatchControl::new();
    let raised = crate::Raised::default();
    let out = std::thread::scope(|s| {
        let h = s.spawn(|| work(&control));
        while !h.is_finished() {
            py.detach(|| std::thread::sleep(Duration::from_millis(100)));
            let (done, total) = control.progress();
            if raised.poll(py, progress, done, total) {
                control.cancel();
            }
        }
        h.join().map_err(|_| AutoSloCoreError::new_err("the tuner's worker thread panicked"))
    })?;
    let out = raised.or(out)?;
    if let Some(cb) = progress {
        let (done, total) = control.progress();
        cb.call1(py, (done, total))?;
    }
    Ok(out)
}

/// The Workload Simulator's changes to the paper's simulator (each `None`: the paper's).
#[derive(Default)]
struct SimChanges {
    cold_start: Option<ColdStart>,
    noise: Option<LatencyNoise>,
    class_scale: Option<ClassLatencyScale>,
}

impl SimChanges {
    fn of(sim: &SimulatorConfig) -> Self {
        Self { cold_start: sim.cold_start, noise: sim.noise, class_scale: sim.class_scale.clone() }
    }

    fn of_spec(spec: &TunerSpec) -> CoreResult<Self> {
        Ok(Self { cold_start: spec.simulator_cold_start()?, noise: spec.simulator_noise()?, class_scale: spec.simulator_class_scale()? })
    }
}

fn settings(timeout_s: Option<f64>, spinup_s: f64, teardown_s: f64, price_per_rpu_hour: f64, billing_minimum_s: f64, keep_logs: bool, changes: SimChanges) -> BatchSettings {
    let billing = BillingPolicy { price_per_rpu_hour, minimum_s: billing_minimum_s };
    let SimChanges { cold_start, noise, class_scale } = changes;
    BatchSettings { sim: SimulatorConfig { billing, spinup_s, teardown_s, timeout_s, cold_start, noise, class_scale }, router: RouterOptions { billing, ..RouterOptions::default() }, keep_logs }
}

/// The keyword arguments of [`simulate_pairs`] that rebuild `s` (what a remote worker receives).
fn settings_dict<'py>(py: Python<'py>, s: &BatchSettings) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("cold_start_factor", s.sim.cold_start.map(|c| c.factor))?;
    d.set_item("cold_start_duration_s", s.sim.cold_start.map_or(ColdStart::default().duration_s, |c| c.duration_s))?;
    d.set_item("noise_sigma", s.sim.noise.map(|n| n.sigma))?;
    d.set_item("noise_seed", s.sim.noise.map_or(0, |n| n.seed))?;
    d.set_item("class_scale", s.sim.class_scale.as_ref().map(|c| c.by_class().iter().cloned().collect::<BTreeMap<String, f64>>()))?;
    d.set_item("timeout_s", s.sim.timeout_s)?;
    d.set_item("spinup_s", s.sim.spinup_s)?;
    d.set_item("teardown_s", s.sim.teardown_s)?;
    d.set_item("price_per_rpu_hour", s.sim.billing.price_per_rpu_hour)?;
    d.set_item("billing_minimum_s", s.sim.billing.minimum_s)?;
    d.set_item("keep_logs", s.keep_logs)?;
    Ok(d)
}

/// A content fingerprint of a workload (the Python backend puts each distinct workload once).
pub(crate) fn fingerprint(w: &Workload) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for q in w.queries() {
        (q.id, q.arrival.to_bits(), q.text.template, q.text.instance, w.tenant_name(q), w.class_name(q), q.slo.to_bits()).hash(&mut h);
    }
    w.len().hash(&mut h);
    h.finish()
}

/// SimulateBatch through a Python backend object (`autoslo.ray_backend.RayBackend`). The
/// protocol: `put_predictor(path, kernel, arrival_correction, model_sha256)` once per batch (the
/// object keeps it); per workload, `get_workload(fingerprint)` for the handle the object already
/// holds, or else `put_workload(fingerprint, table) -> handle`; `submit(configs, handles, n_jobs,
/// settings) -> batch`, job `k` being configuration `k // len(handles)` on workload
/// `k % len(handles)`; then `batch.wait(timeout_s)` returns the outcome tables
/// (`convert::outcomes_table`) finished since the last call, and `batch.cancel()` stops it.
struct PyBackend {
    obj: Py<PyAny>,
    name: String,
}

impl PyBackend {
    fn new(py: Python<'_>, obj: Py<PyAny>) -> PyResult<Self> {
        let name = obj.bind(py).getattr("name").and_then(|n| n.extract::<String>()).unwrap_or_else(|_| "python".into());
        Ok(Self { obj, name })
    }

    fn fail(&self, problem: impl ToString) -> AutoSloError {
        AutoSloError::Backend { backend: self.name.clone(), problem: problem.to_string() }
    }

    fn submit(&self, py: Python<'_>, batch: &Batch<'_>) -> PyResult<Py<PyAny>> {
        let p = batch.predictor;
        let sha = p.meta.model_sha256.clone();
        self.obj.call_method1(py, "put_predictor", (p.dir.display().to_string(), p.kernel().name(), p.arrival.is_some(), sha))?;
        let handles = batch
            .workloads
            .iter()
            .map(|w| {
                let key = fingerprint(w);
                let held = self.obj.call_method1(py, "get_workload", (key,))?;
                if !held.is_none(py) {
                    return Ok(held);
                }
                self.obj.call_method1(py, "put_workload", (key, crate::workload_out(py, w)?))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let configs: Vec<String> = batch.configs.iter().map(ExecutionConfig::to_json).collect();
        self.obj.call_method1(py, "submit", (configs, handles, batch.len(), settings_dict(py, batch.settings)?))
    }
}

impl BatchBackend for PyBackend {
    fn run(&self, batch: &Batch<'_>) -> CoreResult<Vec<SimOutcome>> {
        let (timeout_s, spinup_s, teardown_s) = (batch.settings.sim.timeout_s, batch.settings.sim.spinup_s, batch.settings.sim.teardown_s);
        let b = batch.settings.sim.billing;
        if settings(timeout_s, spinup_s, teardown_s, b.price_per_rpu_hour, b.minimum_s, batch.settings.keep_logs, SimChanges::of(&batch.settings.sim)) != *batch.settings {
            return Err(self.fail("these batch settings cannot be sent to remote workers (only timeout, spinup, teardown, billing, the simulator's cold start, latency noise and class latency scale, and keep_logs travel)"));
        }
        let n = batch.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let handle = Python::attach(|py| self.submit(py, batch)).map_err(|e| self.fail(e))?;
        let mut out: Vec<Option<SimOutcome>> = vec![None; n];
        let mut got = 0;
        while got < n {
            if batch.control.cancelled() {
                // Best effort: the batch is abandoned either way.
                let _ = Python::attach(|py| handle.call_method0(py, "cancel"));
                return Err(AutoSloError::Interrupted);
            }
            let tables = Python::attach(|py| handle.call_method1(py, "wait", (0.1,))?.extract::<Vec<PyTable>>(py)).map_err(|e| self.fail(e))?;
            for t in tables {
                for (k, o) in crate::convert::outcomes_in(t).map_err(|e| self.fail(e))? {
                    let slot = out.get_mut(k).ok_or_else(|| self.fail(format!("returned job {k} of a batch of {n}")))?;
                    if slot.is_none() {
                        got += 1;
                        batch.mark_done(1);
                    }
                    *slot = Some(o);
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// Configurations (JSON) and workloads (tables) of a batch, parsed and validated.
fn batch_inputs(configs: &[String], workloads: Vec<PyTable>) -> PyResult<(Vec<ExecutionConfig>, Vec<Workload>)> {
    let configs = configs.iter().map(|c| ExecutionConfig::from_json(c)).collect::<CoreResult<Vec<_>>>().map_err(err)?;
    let ws = workloads.into_iter().map(|t| workload_in(t, None, None, None, None)).collect::<PyResult<Vec<_>>>()?;
    Ok((configs, ws))
}

/// The backend a call runs on: rayon, or the given Python backend object.
fn backend_of(py: Python<'_>, backend: Option<Py<PyAny>>) -> PyResult<Box<dyn BatchBackend>> {
    Ok(match backend {
        None => Box::new(RayonBackend),
        Some(obj) => Box::new(PyBackend::new(py, obj)?),
    })
}

/// Simulate (configuration, workload) `pairs` (indices into `configs` and `workloads`) on
/// `threads` threads: a remote worker's share of a batch. Returns the outcome table, its `job`
/// column taken from `jobs`.
#[pyfunction]
#[pyo3(signature = (configs, workloads, pairs, jobs, predictor, threads=None, keep_logs=false, timeout_s=Some(3600.0), spinup_s=300.0, teardown_s=200.0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, cold_start_factor=None, cold_start_duration_s=300.0, noise_sigma=None, noise_seed=0, class_scale=None))]
#[allow(clippy::too_many_arguments)]
pub fn simulate_pairs(
    py: Python<'_>,
    configs: Vec<String>,
    workloads: Vec<PyTable>,
    pairs: Vec<(usize, usize)>,
    jobs: Vec<u64>,
    predictor: Bound<'_, PyPredictor>,
    threads: Option<usize>,
    keep_logs: bool,
    timeout_s: Option<f64>,
    spinup_s: f64,
    teardown_s: f64,
    price_per_rpu_hour: f64,
    billing_minimum_s: f64,
    cold_start_factor: Option<f64>,
    cold_start_duration_s: f64,
    noise_sigma: Option<f64>,
    #[pyo3(from_py_with = crate::convert::seed)] noise_seed: u64,
    class_scale: Option<BTreeMap<String, f64>>,
) -> PyResult<Py<PyAny>> {
    if jobs.len() != pairs.len() {
        return Err(AutoSloCoreError::new_err(format!("{} pairs but {} job ids", pairs.len(), jobs.len())));
    }
    let (configs, ws) = batch_inputs(&configs, workloads)?;
    let p = &predictor.get().inner;
    let cold_start = cold_start_factor.map(|factor| ColdStart { factor, duration_s: cold_start_duration_s }.validated()).transpose().map_err(err)?;
    let noise = noise_sigma.map(|sigma| LatencyNoise { sigma, seed: noise_seed }.validated()).transpose().map_err(err)?;
    let class_scale = class_scale.map(ClassLatencyScale::new).transpose().map_err(err)?;
    let s = settings(timeout_s, spinup_s, teardown_s, price_per_rpu_hour, billing_minimum_s, keep_logs, SimChanges { cold_start, noise, class_scale });
    let outs = py.detach(|| tuner::simulate_pairs(p, &configs, &ws, &pairs, &s, threads)).map_err(err)?;
    Ok(crate::convert::outcomes_table(&jobs, &outs, keep_logs)?.into_pyarrow(py)?.unbind())
}

/// Parse and validate an execution configuration (JSON); returns it normalised (JSON).
#[pyfunction]
pub fn validate_execution_config(text: &str) -> PyResult<String> {
    Ok(ExecutionConfig::from_json(text).map_err(err)?.to_json())
}

/// The simulated target that lands a day near `tau` when the warehouse runs a plan `gap` later
/// than the tuner estimates (`tuner::learned_tau_simulated`).
#[pyfunction]
pub fn learned_tau_simulated(tau: f64, gap: f64) -> PyResult<f64> {
    tuner::learned_tau_simulated(tau, gap).map_err(err)
}

/// Validate tuner settings (JSON) and return them with every default filled in (JSON).
#[pyfunction]
pub fn tuner_settings(text: &str) -> PyResult<String> {
    let s = TunerSpec::from_json(text).map_err(err)?;
    s.params(300.0).map_err(err)?;
    Ok(serde_json::to_string(&s).expect("settings serialize"))
}

/// The first initial configuration of tuner settings (JSON), untuned: what a day with no history
/// runs.
#[pyfunction]
pub fn untuned_config(spec: &str) -> PyResult<String> {
    let p = TunerSpec::from_json(spec).and_then(|s| s.params(300.0)).map_err(err)?;
    Ok(p.initial[0].to_json())
}

/// Forecast day `target` (days since 1970-01-01) from the reservoir's tables.
/// Returns (training workloads, validation workloads, policy used, days used).
#[pyfunction]
#[pyo3(signature = (counts, arrivals, days, target, kappa=2.0, policy="decay", decay=0.5, forecasts=20, training_share=0.6, seed=0, arrival_model="deciles"))]
#[allow(clippy::too_many_arguments)]
pub fn forecast(
    py: Python<'_>,
    counts: PyTable,
    arrivals: PyTable,
    days: Vec<i32>,
    target: i32,
    kappa: f64,
    policy: &str,
    decay: f64,
    forecasts: usize,
    training_share: f64,
    #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
    arrival_model: &str,
) -> PyResult<(Vec<Py<PyAny>>, Vec<Py<PyAny>>, String, Vec<i32>)> {
    let h = crate::convert::history_in(counts, arrivals, days)?;
    let slo = slo_table(kappa, None, None, None)?;
    let s = ForecastSettings { policy: ForecastPolicy::parse(policy, decay).map_err(err)?, forecasts, training_share, seed, arrivals: ArrivalModel::parse(arrival_model).map_err(err)?, ..ForecastSettings::default() };
    let f = py.detach(|| tuner::forecast(&h, target, &slo, &s)).map_err(err)?;
    let out = |ws: &[autoslo_core::workload::Workload]| ws.iter().map(|w| workload_out(py, w)).collect::<PyResult<Vec<_>>>();
    Ok((out(&f.training)?, out(&f.validation)?, f.policy_used.to_string(), f.days_used))
}

fn outcome_dict<'py>(py: Python<'py>, o: &tuner::SimOutcome) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("queries", o.queries)?;
    d.set_item("violations", o.violations)?;
    d.set_item("violation_rate", o.violation_rate())?;
    d.set_item("cost", o.cost)?;
    d.set_item("clusters", o.clusters)?;
    let tenants = PyDict::new(py);
    for t in &o.tenants {
        tenants.set_item(&t.tenant, (t.queries, t.violations))?;
    }
    d.set_item("tenants", tenants)?;
    if !o.log.is_empty() {
        d.set_item("arrival", o.log.iter().map(|q| q.arrival).collect::<Vec<_>>())?;
        d.set_item("end", o.log.iter().map(|q| q.end).collect::<Vec<_>>())?;
        d.set_item("violated", o.log.iter().map(|q| q.violated).collect::<Vec<_>>())?;
    }
    Ok(d)
}

/// SimulateBatch: configurations (JSON) × workloads on the Workload Simulator, in parallel.
/// Returns R[i][j] as dicts (violation_rate, cost, …, and per-query logs with `keep_logs`).
#[pyfunction]
#[pyo3(signature = (configs, workloads, predictor, keep_logs=false, timeout_s=Some(3600.0), spinup_s=300.0, teardown_s=200.0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, progress=None, backend=None))]
#[allow(clippy::too_many_arguments)]
pub fn simulate_batch(
    py: Python<'_>,
    configs: Vec<String>,
    workloads: Vec<PyTable>,
    predictor: Bound<'_, PyPredictor>,
    keep_logs: bool,
    timeout_s: Option<f64>,
    spinup_s: f64,
    teardown_s: f64,
    price_per_rpu_hour: f64,
    billing_minimum_s: f64,
    progress: Option<Py<PyAny>>,
    backend: Option<Py<PyAny>>,
) -> PyResult<Vec<Vec<Py<PyDict>>>> {
    let (configs, ws) = batch_inputs(&configs, workloads)?;
    let p = &predictor.get().inner;
    let s = settings(timeout_s, spinup_s, teardown_s, price_per_rpu_hour, billing_minimum_s, keep_logs, SimChanges::default());
    let backend = backend_of(py, backend)?;
    let m = with_progress(py, &progress, |c| tuner::simulate_batch(p, &configs, &ws, &s, backend.as_ref(), c))?;
    m.iter().map(|row| row.iter().map(|o| outcome_dict(py, o).map(Bound::unbind)).collect()).collect()
}

/// FindGoodSpinupTime over per-workload logs given as (arrival, end, violated) sequences.
#[pyfunction]
#[pyo3(signature = (logs, tau_target=0.1, k=1, spinup_s=300.0, sigma_min_s=1800.0))]
pub fn find_good_spinup_time(logs: Vec<(Vec<f64>, Vec<f64>, Vec<bool>)>, tau_target: f64, k: usize, spinup_s: f64, sigma_min_s: f64) -> PyResult<Vec<f64>> {
    let logs = logs
        .into_iter()
        .enumerate()
        .map(|(i, (a, e, v))| {
            if a.len() != e.len() || a.len() != v.len() {
                return Err(AutoSloCoreError::new_err(format!("log {i}: arrival, end and violated have different lengths")));
            }
            Ok(a.into_iter().zip(e).zip(v).map(|((arrival, end), violated)| LoggedQuery { arrival, end, violated }).collect::<Vec<_>>())
        })
        .collect::<PyResult<Vec<_>>>()?;
    let refs: Vec<&[LoggedQuery]> = logs.iter().map(|l| l.as_slice()).collect();
    Ok(tuner::find_good_spinup_time(&refs, tau_target, &SpinupTimeParams { k, spinup_s, sigma_min_s }))
}

/// The Policy Tuner end to end: forecast `target` from the reservoir's tables, ScheduleSpinups,
/// Configuration Tuner. `spec` is the tuner settings (JSON). Returns a dict with `config` (JSON)
/// and the report.
#[pyfunction]
#[pyo3(signature = (counts, arrivals, days, target, predictor, spec="{}", kappa=2.0, timeout_s=Some(3600.0), spinup_s=300.0, teardown_s=200.0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, progress=None, backend=None))]
#[allow(clippy::too_many_arguments)]
pub fn tune(
    py: Python<'_>,
    counts: PyTable,
    arrivals: PyTable,
    days: Vec<i32>,
    target: i32,
    predictor: Bound<'_, PyPredictor>,
    spec: &str,
    kappa: f64,
    timeout_s: Option<f64>,
    spinup_s: f64,
    teardown_s: f64,
    price_per_rpu_hour: f64,
    billing_minimum_s: f64,
    progress: Option<Py<PyAny>>,
    backend: Option<Py<PyAny>>,
) -> PyResult<Py<PyDict>> {
    let h = crate::convert::history_in(counts, arrivals, days)?;
    let slo = slo_table(kappa, None, None, None)?;
    let spec = TunerSpec::from_json(spec).map_err(err)?;
    let params = spec.params(spinup_s).map_err(err)?;
    let p = &predictor.get().inner;
    let s = settings(timeout_s, spinup_s, teardown_s, price_per_rpu_hour, billing_minimum_s, false, SimChanges::of_spec(&spec).map_err(err)?);
    let backend = backend_of(py, backend)?;
    let r = with_progress(py, &progress, |c| tuner::tune(p, &h, target, &slo, &params, &s, backend.as_ref(), c))?;
    let d = PyDict::new(py);
    d.set_item("backend", backend.name())?;
    d.set_item("config", r.config.to_json())?;
    d.set_item("forecast_policy", r.forecast_policy)?;
    d.set_item("days_used", r.days_used.clone())?;
    d.set_item("training_forecasts", r.training_forecasts)?;
    d.set_item("validation_forecasts", r.validation_forecasts)?;
    d.set_item("forecast_queries", r.forecast_queries)?;
    d.set_item("validation_violation_rate", r.validation.0)?;
    d.set_item("validation_cost", r.validation.1)?;
    d.set_item("validation_tenants", r.validation_tenants.iter().cloned().collect::<std::collections::BTreeMap<String, f64>>())?;
    d.set_item("simulations", r.simulations)?;
    let cands = r
        .schedule
        .candidates
        .iter()
        .map(|c| {
            let x = PyDict::new(py);
            x.set_item("initial_clusters", c.initial.initial_clusters.clone())?;
            x.set_item("scheduled_spinups", c.best.scheduled_spinups.iter().map(|s| (s.at_s, s.size)).collect::<Vec<_>>())?;
            x.set_item("training", c.training)?;
            x.set_item("validation", c.validation)?;
            Ok(x.unbind())
        })
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("schedule_candidates", cands)?;
    d.set_item("schedule_chosen", r.schedule.chosen)?;
    if let Some(t) = &r.tuning {
        let ev = t
            .evaluated
            .iter()
            .map(|e| {
                let x = PyDict::new(py);
                x.set_item("config", e.config.to_json())?;
                x.set_item("training", e.training)?;
                x.set_item("validation", e.validation)?;
                Ok(x.unbind())
            })
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("tuning_candidates", ev)?;
    }
    Ok(d.unbind())
}
