//! Bindings of the cloud side: the Redshift Serverless cluster manager, the local endpoint and
//! live mode. Conversions and GIL release only.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use autoslo_cloud::live::{run_live, LiveSettings};
use autoslo_cloud::local_endpoint::{EndpointOptions, LocalEndpoint};
use autoslo_cloud::manager::{Capacity, ManagerOptions, RedshiftServerless, WorkgroupInfo};
use autoslo_cloud::CloudError;
use autoslo_core::billing::BillingPolicy;
use autoslo_core::router;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::PyTable;

use crate::predictor::PyPredictor;
use crate::{convert, err, workload_in, AutoSloCoreError};

pyo3::create_exception!(_core, CloudServiceError, AutoSloCoreError, "A Redshift Serverless call failed (base of the typed cloud errors).");
pyo3::create_exception!(_core, ResourceNotFoundError, CloudServiceError, "The named namespace or workgroup does not exist.");
pyo3::create_exception!(_core, ResourceConflictError, CloudServiceError, "The resource exists with other settings, or is busy.");
pyo3::create_exception!(_core, ThrottledError, CloudServiceError, "Throttled on every attempt, after backoff.");
pyo3::create_exception!(_core, WaitTimeoutError, CloudServiceError, "A workgroup did not reach the wanted status in time.");
pyo3::create_exception!(_core, EndpointUnreachableError, CloudServiceError, "Redshift Serverless (or the local endpoint) could not be reached.");
pyo3::create_exception!(_core, QueryRejectedError, AutoSloCoreError, "A served query refused at admission, before any work; `reason` is `infeasible-deadline`, `capacity` or `budget`; `retry_after_s`, for `budget`, the seconds until the tenant's budget window ends (else None).");

pub(crate) fn cloud_err(e: CloudError) -> PyErr {
    let msg = e.to_string();
    match e {
        CloudError::NotFound { .. } => ResourceNotFoundError::new_err(msg),
        CloudError::Conflict { .. } => ResourceConflictError::new_err(msg),
        CloudError::Throttled { .. } => ThrottledError::new_err(msg),
        CloudError::WaitTimeout { .. } => WaitTimeoutError::new_err(msg),
        CloudError::Transport { .. } => EndpointUnreachableError::new_err(msg),
        CloudError::Validation { .. } | CloudError::Service { .. } => CloudServiceError::new_err(msg),
        CloudError::Interrupted => pyo3::exceptions::PyKeyboardInterrupt::new_err(msg),
        CloudError::Rejected { reason, retry_after_s, .. } => {
            let e = QueryRejectedError::new_err(msg);
            Python::attach(|py| {
                let v = e.value(py);
                v.setattr("reason", reason)?;
                v.setattr("retry_after_s", retry_after_s)
            })
            .map_or_else(|set| set, |()| e)
        }
        CloudError::Core(e) => err(e),
        _ => AutoSloCoreError::new_err(msg),
    }
}

pub(crate) fn runtime() -> PyResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| AutoSloCoreError::new_err(format!("cannot start a runtime: {e}")))
}

/// A Redshift Serverless endpoint on 127.0.0.1 backed by local PostgreSQL servers.
#[pyclass(name = "LocalEndpoint", module = "autoslo._core")]
pub struct PyLocalEndpoint {
    inner: Mutex<Option<LocalEndpoint>>,
    url: String,
}

impl PyLocalEndpoint {
    fn with<T>(&self, f: impl FnOnce(&LocalEndpoint) -> PyResult<T>) -> PyResult<T> {
        let g = self.inner.lock().map_err(|_| AutoSloCoreError::new_err("endpoint lock poisoned"))?;
        match g.as_ref() {
            Some(ep) => f(ep),
            None => Err(AutoSloCoreError::new_err("the local endpoint is closed")),
        }
    }
}

#[pymethods]
impl PyLocalEndpoint {
    #[new]
    #[pyo3(signature = (port=0, time_factor=0.01, template=None, root=None, seed=0))]
    fn new(py: Python<'_>, port: u16, time_factor: f64, template: Option<PathBuf>, root: Option<PathBuf>, #[pyo3(from_py_with = crate::convert::seed)] seed: u64) -> PyResult<Self> {
        let opts = EndpointOptions { port, time_factor, template, root, seed, ..Default::default() };
        let ep = py.detach(|| LocalEndpoint::start(opts)).map_err(cloud_err)?;
        Ok(Self { url: ep.url(), inner: Mutex::new(Some(ep)) })
    }
    /// `http://127.0.0.1:<port>`.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }
    /// Answer the next `n` requests with ThrottlingException.
    fn throttle_next(&self, n: u32) -> PyResult<()> {
        self.with(|e| {
            e.throttle_next(n);
            Ok(())
        })
    }
    /// Workgroups whose name contains `pattern` stay CREATING forever.
    fn never_available(&self, pattern: &str) -> PyResult<()> {
        self.with(|e| {
            e.never_available(pattern);
            Ok(())
        })
    }
    /// SIGKILL the PostgreSQL server behind a workgroup.
    fn kill_server(&self, workgroup: &str) -> PyResult<()> {
        self.with(|e| e.kill_server(workgroup).map_err(cloud_err))
    }
    /// Delay every chunk of a workgroup's replies by `seconds` (0: back to normal).
    fn slow_down(&self, workgroup: &str, seconds: f64) -> PyResult<()> {
        self.with(|e| e.slow_down(workgroup, seconds).map_err(cloud_err))
    }
    /// Requests served so far.
    fn requests(&self) -> PyResult<u32> {
        self.with(|e| Ok(e.requests()))
    }
    /// (name, status, base capacity, server port) of every workgroup.
    fn workgroups(&self) -> PyResult<Vec<(String, String, u32, Option<u16>)>> {
        self.with(|e| Ok(e.workgroups()))
    }
    /// Stop serving and stop every server (also on garbage collection).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let ep = self.inner.lock().map_err(|_| AutoSloCoreError::new_err("endpoint lock poisoned"))?.take();
        py.detach(move || drop(ep));
        Ok(())
    }
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    fn __exit__(&self, py: Python<'_>, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

fn info_dict<'py>(py: Python<'py>, w: &WorkgroupInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &w.name)?;
    d.set_item("namespace", &w.namespace)?;
    d.set_item("status", &w.status)?;
    d.set_item("base_capacity", w.base_capacity)?;
    d.set_item("address", &w.address)?;
    d.set_item("port", w.port)?;
    Ok(d)
}

pub(crate) fn manager_options(endpoint: Option<String>, region: Option<String>, max_attempts: u32) -> ManagerOptions {
    ManagerOptions { endpoint, region, max_attempts, ..Default::default() }
}

/// The Redshift Serverless cluster manager (one cluster = a workgroup in its own namespace).
#[pyclass(name = "ClusterManager", module = "autoslo._core", frozen)]
pub struct PyClusterManager {
    inner: RedshiftServerless,
    rt: tokio::runtime::Runtime,
}

impl PyClusterManager {
    fn block<T: Send>(&self, py: Python<'_>, f: impl std::future::Future<Output = autoslo_cloud::Result<T>> + Send) -> PyResult<T> {
        py.detach(|| self.rt.block_on(f)).map_err(cloud_err)
    }
}

#[pymethods]
impl PyClusterManager {
    #[new]
    #[pyo3(signature = (endpoint=None, region=None, max_attempts=6))]
    fn new(py: Python<'_>, endpoint: Option<String>, region: Option<String>, max_attempts: u32) -> PyResult<Self> {
        let rt = runtime()?;
        let opts = manager_options(endpoint, region, max_attempts);
        let inner = py.detach(|| rt.block_on(RedshiftServerless::connect(&opts))).map_err(cloud_err)?;
        Ok(Self { inner, rt })
    }
    /// Create namespace `<name>-ns` and workgroup `<name>` (idempotent) and wait until AVAILABLE.
    /// Give `rpu` (base capacity) or `price_performance` (1-100, AI-driven scaling).
    #[pyo3(signature = (name, rpu=None, price_performance=None, timeout_s=900.0))]
    fn create_cluster<'py>(&self, py: Python<'py>, name: &str, rpu: Option<u32>, price_performance: Option<i32>, timeout_s: f64) -> PyResult<Bound<'py, PyDict>> {
        let cap = match (rpu, price_performance) {
            (Some(r), None) => Capacity::Base(r),
            (None, Some(l)) => Capacity::PricePerformance(l),
            _ => return Err(AutoSloCoreError::new_err("give rpu= or price_performance=, one of them")),
        };
        let t = duration(timeout_s)?;
        let w = self.block(py, self.inner.create_cluster(name, cap, t))?;
        info_dict(py, &w)
    }
    fn get_workgroup<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
        let w = self.block(py, self.inner.get_workgroup(name))?;
        info_dict(py, &w)
    }
    fn list_workgroups<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let all = self.block(py, self.inner.list_workgroups())?;
        all.iter().map(|w| info_dict(py, w)).collect()
    }
    /// Change the base capacity; with `wait`, until AVAILABLE again.
    #[pyo3(signature = (name, rpu, wait=true, timeout_s=900.0))]
    fn update_capacity<'py>(&self, py: Python<'py>, name: &str, rpu: u32, wait: bool, timeout_s: f64) -> PyResult<Bound<'py, PyDict>> {
        let t = duration(timeout_s)?;
        let w = self.block(py, async {
            let w = self.inner.update_capacity(name, rpu).await?;
            if wait {
                self.inner.wait_available(name, t).await
            } else {
                Ok(w)
            }
        })?;
        info_dict(py, &w)
    }
    /// Delete workgroup `<name>` and namespace `<name>-ns` (missing ones are fine).
    #[pyo3(signature = (name, timeout_s=900.0))]
    fn delete_cluster(&self, py: Python<'_>, name: &str, timeout_s: f64) -> PyResult<()> {
        let t = duration(timeout_s)?;
        self.block(py, self.inner.delete_cluster(name, t))
    }
}

fn duration(s: f64) -> PyResult<Duration> {
    if s.is_finite() && s >= 0.0 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(AutoSloCoreError::new_err(format!("timeout must be ≥ 0 s, got {s}")))
    }
}

/// Replay a workload live (see `autoslo.live.live`): returns (trace, clusters, events, extras).
#[pyfunction]
#[pyo3(signature = (workload, sql, clusters, predictor=None, routing="autoslo", autoscaler=None, config=None, endpoint=None, region=None, time_scale=1.0, timeout_s=Some(3600.0), pool_size=8, create_timeout_s=900.0, initial_timeout_s=None, delete_timeout_s=900.0, name_prefix="autoslo", tick_s=10.0, spinup_s=300.0, max_attempts=2, keep_clusters=false, keep_leftovers=false, db_user="autoslo", db_name="postgres", db_password=None, seed=0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, slo_headroom=router::DEFAULT_SLO_HEADROOM, progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn live(
    py: Python<'_>,
    workload: PyTable,
    sql: HashMap<u16, String>,
    #[pyo3(from_py_with = crate::convert::sizes)] clusters: Vec<u32>,
    predictor: Option<Bound<'_, PyPredictor>>,
    routing: &str,
    autoscaler: Option<Bound<'_, PyDict>>,
    config: Option<&str>,
    endpoint: Option<String>,
    region: Option<String>,
    time_scale: f64,
    timeout_s: Option<f64>,
    pool_size: usize,
    create_timeout_s: f64,
    initial_timeout_s: Option<f64>,
    delete_timeout_s: f64,
    name_prefix: &str,
    tick_s: f64,
    spinup_s: f64,
    max_attempts: u32,
    keep_clusters: bool,
    keep_leftovers: bool,
    db_user: &str,
    db_name: &str,
    db_password: Option<String>,
    #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
    price_per_rpu_hour: f64,
    billing_minimum_s: f64,
    slo_headroom: f64,
    progress: Option<Py<PyAny>>,
) -> PyResult<(Py<PyAny>, Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    let w = crate::with_slo_policy(workload_in(workload, None, None, None, None)?, config)?;
    let billing = BillingPolicy { price_per_rpu_hour, minimum_s: billing_minimum_s };
    let r = crate::scaling::live_router(routing, predictor.as_ref(), billing, seed, slo_headroom)?;
    let scaler = crate::scaling::scaler(autoscaler, None, config, spinup_s)?;
    let settings = LiveSettings { time_scale, timeout_s, pool_size, create_timeout_s, initial_timeout_s, delete_timeout_s, name_prefix: name_prefix.to_string(), tick_s, expected_spinup_s: spinup_s, billing, max_attempts, keep_clusters, keep_leftovers, db_user: db_user.into(), db_name: db_name.into(), db_password };
    let rt = runtime()?;
    let opts = manager_options(endpoint, region, 6);
    let rs = py.detach(|| rt.block_on(RedshiftServerless::connect(&opts))).map_err(cloud_err)?;
    drop(rt);
    // The run goes on another thread; this one shows progress and turns Ctrl-C (or a progress
    // callback returning False) into a cancellation: the queries left end `cancelled`.
    let control = Arc::new(autoslo_core::tuner::BatchControl::new());
    let mut interrupted = false;
    let raised = crate::Raised::default();
    let result = std::thread::scope(|s| {
        let c2 = Arc::clone(&control);
        let (w, sql, clusters) = (&w, &sql, &clusters);
        let h = s.spawn(move || run_live(rs, w, sql, r, scaler, clusters, settings, c2));
        while !h.is_finished() {
            py.detach(|| std::thread::sleep(Duration::from_millis(100)));
            let (done, total) = control.progress();
            if raised.poll(py, &progress, done, total) && !control.cancelled() {
                interrupted = true;
                control.cancel();
            }
        }
        h.join()
    });
    // Ctrl-C (or a callback returning False) returns what ran, the rest `cancelled`; any other
    // exception (a supervisor's on SIGTERM, a failing callback) is raised once the run has
    // cleaned up after itself (its workgroups deleted).
    if let Some(e) = raised.take() {
        if !e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
            return Err(e);
        }
    }
    if let Some(cb) = &progress {
        let (done, total) = control.progress();
        cb.call1(py, (done, total))?;
    }
    let run = match result {
        Ok(r) => r.map_err(cloud_err)?,
        Err(_) => return Err(AutoSloCoreError::new_err("the live run panicked")),
    };
    let (trace, clusters, events) = convert::trace_out(py, &w, &run.trace)?;
    let extras = PyDict::new(py);
    extras.set_item("attempts", run.attempts)?;
    extras.set_item("client_s", run.client_s)?;
    extras.set_item("errors", run.errors)?;
    extras.set_item("workgroups", run.workgroups)?;
    let log: Vec<(f64, Option<u32>, u32, &str, String)> = run.events.iter().map(|e| (e.time, e.cluster, e.size, e.kind, e.reason.clone())).collect();
    extras.set_item("control_log", log)?;
    extras.set_item("decisions", convert::decisions_table(&run.decisions)?.into_pyarrow(py)?)?;
    extras.set_item("interrupted", interrupted)?;
    Ok((trace, clusters, events, extras.into_any().unbind()))
}

/// Make the local workgroups' template data directory (see `autoslo.live.prepare_tpcds`):
/// returns, per query template, (ran, seconds or None, error or None).
#[pyfunction]
#[pyo3(signature = (dest, ddl, tables, queries, query_timeout_s=20.0))]
pub fn prepare_local_template(py: Python<'_>, dest: PathBuf, ddl: &str, tables: Vec<(String, PathBuf)>, queries: Vec<(u16, String)>, query_timeout_s: f64) -> PyResult<Vec<(u16, bool, Option<f64>, Option<String>)>> {
    let t = duration(query_timeout_s)?;
    let checks = py.detach(|| autoslo_cloud::local_data::prepare_template(&dest, ddl, &tables, &queries, t)).map_err(cloud_err)?;
    Ok(checks
        .into_iter()
        .map(|(q, c)| match c {
            autoslo_cloud::local_data::QueryCheck::Ran(s) => (q, true, Some(s), None),
            autoslo_cloud::local_data::QueryCheck::Failed(e) => (q, false, None, Some(e)),
        })
        .collect())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CloudServiceError", py.get_type::<CloudServiceError>())?;
    m.add("ResourceNotFoundError", py.get_type::<ResourceNotFoundError>())?;
    m.add("ResourceConflictError", py.get_type::<ResourceConflictError>())?;
    m.add("ThrottledError", py.get_type::<ThrottledError>())?;
    m.add("WaitTimeoutError", py.get_type::<WaitTimeoutError>())?;
    m.add("EndpointUnreachableError", py.get_type::<EndpointUnreachableError>())?;
    m.add("QueryRejectedError", py.get_type::<QueryRejectedError>())?;
    m.add_class::<PyLocalEndpoint>()?;
    m.add_class::<PyClusterManager>()?;
    m.add_class::<crate::serve::PyService>()?;
    m.add_function(wrap_pyfunction!(live, m)?)?;
    m.add_function(wrap_pyfunction!(prepare_local_template, m)?)?;
    Ok(())
}
