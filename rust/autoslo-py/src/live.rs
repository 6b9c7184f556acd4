//! Bindings of the Query Router as a live object and of the Workload Simulator. Conversions only.

use std::collections::HashMap;
use std::sync::Mutex;

use autoslo_core::billing::BillingPolicy;
use autoslo_core::catalog::QueryText;
use autoslo_core::cluster::ClusterId;
use autoslo_core::control_plane::{ControlPlane, InProcessManager};
use autoslo_core::live::LiveRouter;
use autoslo_core::router;
use autoslo_core::simulator::{self, SimulatorConfig};
use autoslo_core::tenancy::NamedAdmission;
use autoslo_cloud::error::CloudError;
use pyo3::prelude::*;
use pyo3_arrow::PyTable;

use crate::cloud::cloud_err;
use crate::predictor::PyPredictor;
use crate::{convert, err, workload_in, AutoSloCoreError};

/// A Query Router used live: tell it arrivals and completions as they happen; it returns clusters.
///
/// Thread-safe (one lock inside); routing runs without the GIL.
#[pyclass(name = "Router", module = "autoslo._core", frozen)]
pub struct PyRouter {
    inner: Mutex<LiveRouter>,
    policy: String,
}

impl PyRouter {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, LiveRouter>> {
        self.inner.lock().map_err(|_| AutoSloCoreError::new_err("router lock poisoned by an earlier panic"))
    }
}

#[pymethods]
impl PyRouter {
    #[new]
    #[pyo3(signature = (policy, clusters, predictor=None, seed=0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, slo_headroom=router::DEFAULT_SLO_HEADROOM, search="auto"))]
    #[allow(clippy::too_many_arguments)]
    fn new(policy: &str, #[pyo3(from_py_with = crate::convert::sizes)] clusters: Vec<u32>, predictor: Option<Bound<'_, PyPredictor>>, #[pyo3(from_py_with = crate::convert::seed)] seed: u64, price_per_rpu_hour: f64, billing_minimum_s: f64, slo_headroom: f64, search: &str) -> PyResult<Self> {
        let billing = BillingPolicy { price_per_rpu_hour, minimum_s: billing_minimum_s };
        let opts = router::RouterOptions { billing, seed, slo_headroom, search: router::Search::from_name(search).map_err(err)? };
        let r = router::router_by_name(policy, predictor.as_ref().map(|p| &p.get().inner), opts).map_err(err)?;
        let live = LiveRouter::new(r, &clusters).map_err(err)?;
        Ok(Self { inner: Mutex::new(live), policy: policy.to_string() })
    }

    /// Route a query arriving at `arrival` (s); returns the chosen cluster id. An arrival earlier
    /// than one already seen (a race between caller threads) is taken as arriving now. `among`
    /// restricts the choice to those cluster ids.
    #[pyo3(signature = (query_id, template, instance, arrival, slo, among=None))]
    #[allow(clippy::too_many_arguments)]
    fn route(&self, py: Python<'_>, #[pyo3(from_py_with = crate::convert::query_id)] query_id: u64, #[pyo3(from_py_with = crate::convert::template)] template: u16, #[pyo3(from_py_with = crate::convert::instance)] instance: u16, arrival: f64, slo: f64, among: Option<Vec<ClusterId>>) -> PyResult<ClusterId> {
        let text = QueryText { template, instance };
        py.detach(|| match &among {
            None => self.lock()?.route(query_id, text, arrival, slo).map_err(err),
            Some(ids) => self.lock()?.route_among(query_id, text, arrival, slo, ids).map_err(err),
        })
    }

    /// A routed query finished at `now` (s).
    #[pyo3(signature = (query_id, now, timed_out=false))]
    fn complete(&self, py: Python<'_>, #[pyo3(from_py_with = crate::convert::query_id)] query_id: u64, now: f64, timed_out: bool) -> PyResult<()> {
        py.detach(|| self.lock()?.complete(query_id, now, timed_out).map(|_| ()).map_err(err))
    }

    /// Add a cluster of `size` RPU that takes queries from `ready_at` (default: now); returns its id.
    #[pyo3(signature = (size, ready_at=None))]
    fn add_cluster(&self, size: u32, ready_at: Option<f64>) -> PyResult<ClusterId> {
        self.lock()?.add_cluster(size, ready_at).map_err(err)
    }

    /// Stop routing to a cluster (its running queries still report completions).
    fn remove_cluster(&self, cluster: ClusterId) -> PyResult<()> {
        self.lock()?.remove_cluster(cluster).map_err(err)
    }

    /// (id, size, running queries) of the clusters the router may use.
    fn clusters(&self) -> PyResult<Vec<(ClusterId, u32, usize)>> {
        Ok(self.lock()?.clusters())
    }

    #[getter]
    fn policy(&self) -> &str {
        &self.policy
    }
}

/// Simulate a workload with the predictor as the warehouse (the Workload Simulator).
#[pyfunction]
#[pyo3(signature = (workload, clusters, predictor, routing="autoslo", seed=0, timeout_s=Some(3600.0), spinup_s=300.0, teardown_s=200.0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, schedule=None, slo_headroom=router::DEFAULT_SLO_HEADROOM, autoscaler=None, config=None, progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn simulate(
    py: Python<'_>,
    workload: PyTable,
    #[pyo3(from_py_with = crate::convert::sizes)] clusters: Vec<u32>,
    predictor: Bound<'_, PyPredictor>,
    routing: &str,
    #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
    timeout_s: Option<f64>,
    spinup_s: f64,
    teardown_s: f64,
    price_per_rpu_hour: f64,
    billing_minimum_s: f64,
    schedule: Option<Vec<(f64, String, u32)>>,
    slo_headroom: f64,
    autoscaler: Option<Bound<'_, pyo3::types::PyDict>>,
    config: Option<&str>,
    progress: Option<Py<PyAny>>,
) -> PyResult<(Py<PyAny>, Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    let w = crate::with_slo_policy(workload_in(workload, None, None, None, None)?, config)?;
    let p = &predictor.get().inner;
    let cfg = SimulatorConfig { billing: BillingPolicy { price_per_rpu_hour, minimum_s: billing_minimum_s }, spinup_s, teardown_s, timeout_s, ..SimulatorConfig::default() };
    let mut r = router::router_by_name(routing, Some(p), router::RouterOptions { billing: cfg.billing, seed, slo_headroom, ..Default::default() }).map_err(err)?;
    let mut scaler = crate::scaling::scaler(autoscaler, schedule, config, spinup_s)?;
    // `progress(done, total)` is called now and then; Ctrl-C, or a callback returning False, stops
    // the run (KeyboardInterrupt; an exception a signal handler or the callback raised, that one).
    let raised = crate::Raised::default();
    let run = py.detach(|| simulator::simulate_with_progress(p, &w, &clusters, r.as_mut(), scaler.as_mut(), cfg, &mut crate::progress_reporter(&progress, &raised)));
    let trace = raised.or(run)?;
    convert::run_out(py, &w, &trace, scaler.decisions())
}

/// The live control plane: the Query Router on the request path, the autoscaler (an
/// `autoslo.AutoscalerConfig`, a policy name, or a dict of `AUTOSCALER_SETTINGS`) on a background
/// thread over an in-process cluster manager with the real lifecycle timings. Thread-safe;
/// `route` and `complete` run without the GIL and never wait for a scaling decision.
#[pyclass(name = "ControlPlane", module = "autoslo._core", frozen)]
pub struct PyControlPlane {
    inner: ControlPlane,
    /// The selector's δ a plan handed over plans with.
    spinup_s: f64,
}

/// `ControlPlane`'s `autoscaler`: a dict of settings, a policy name, or what `spec()` returns for
/// an object that has it (`autoslo.AutoscalerConfig`, as `autoslo.emulate` takes).
fn autoscaler_spec(a: Option<Bound<'_, PyAny>>) -> PyResult<Option<Bound<'_, pyo3::types::PyDict>>> {
    let Some(a) = a else { return Ok(None) };
    if let Ok(d) = a.cast::<pyo3::types::PyDict>() {
        return Ok(Some(d.clone()));
    }
    if let Ok(policy) = a.extract::<String>() {
        let d = pyo3::types::PyDict::new(a.py());
        d.set_item("policy", policy)?;
        return Ok(Some(d));
    }
    if a.hasattr("spec")? {
        if let Ok(d) = a.call_method0("spec")?.cast_into::<pyo3::types::PyDict>() {
            return Ok(Some(d));
        }
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!("autoscaler: expected an autoslo.AutoscalerConfig, a policy name or a dict of AUTOSCALER_SETTINGS, got {}", a.get_type().name()?)))
}

#[pymethods]
impl PyControlPlane {
    #[new]
    #[pyo3(signature = (clusters, predictor=None, routing="autoslo", autoscaler=None, lifecycle="fixed", spinup_s=300.0, teardown_s=200.0, time_scale=1.0, tick_s=10.0, seed=0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, slo_headroom=router::DEFAULT_SLO_HEADROOM, config=None, admission=None, budgets=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        #[pyo3(from_py_with = crate::convert::sizes)] clusters: Vec<u32>,
        predictor: Option<Bound<'_, PyPredictor>>,
        routing: &str,
        autoscaler: Option<Bound<'_, PyAny>>,
        lifecycle: &str,
        spinup_s: f64,
        teardown_s: f64,
        time_scale: f64,
        tick_s: f64,
        #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
        price_per_rpu_hour: f64,
        billing_minimum_s: f64,
        slo_headroom: f64,
        config: Option<&str>,
        admission: Option<(f64, Option<u32>)>,
        budgets: Option<(HashMap<String, f64>, f64)>,
    ) -> PyResult<Self> {
        let billing = BillingPolicy { price_per_rpu_hour, minimum_s: billing_minimum_s };
        let admission = match (&predictor, admission.is_some() || budgets.is_some()) {
            (_, false) => None,
            (None, true) => return Err(AutoSloCoreError::new_err("admission and budgets need a latency predictor (its Stage estimates)")),
            (Some(p), true) => NamedAdmission::new(&p.get().inner, billing, admission, budgets).map_err(err)?,
        };
        let r = crate::scaling::live_router(routing, predictor.as_ref(), billing, seed, slo_headroom)?;
        let lifecycle = crate::lifecycle_of(lifecycle, spinup_s, teardown_s)?;
        // The selector's δ: the fixed delay, or the given one for measured timings.
        let scaler = crate::scaling::scaler(autoscaler_spec(autoscaler)?, None, config, spinup_s)?;
        let manager = Box::new(InProcessManager::new(lifecycle, seed).map_err(err)?);
        let policy = crate::slo_policy_of(config)?;
        let inner = ControlPlane::start(r, &clusters, scaler, manager, tick_s, time_scale).and_then(|cp| cp.with_slo_policy(policy)).and_then(|cp| cp.with_billing(billing)).map_err(err)?;
        inner.set_admission(admission).map_err(err)?;
        Ok(Self { inner, spinup_s })
    }

    /// Route a query arriving now; returns its cluster id. Its SLO is the deadline the
    /// configuration's `slo_policy` sets for it (by `tenant`, `workload_class` and template),
    /// else `slo`. Refused at admission: `QueryRejectedError` (its `reason`), and not routed.
    #[pyo3(signature = (query_id, template, instance, slo=None, *, tenant=None, workload_class=None))]
    #[allow(clippy::too_many_arguments)]
    fn route(&self, py: Python<'_>, #[pyo3(from_py_with = crate::convert::query_id)] query_id: u64, #[pyo3(from_py_with = crate::convert::template)] template: u16, #[pyo3(from_py_with = crate::convert::instance)] instance: u16, slo: Option<f64>, tenant: Option<&str>, workload_class: Option<&str>) -> PyResult<ClusterId> {
        let text = QueryText { template, instance };
        let (tenant, class) = (tenant.unwrap_or(""), workload_class.unwrap_or(""));
        let routed = py.detach(|| self.inner.route_logged(query_id, text, tenant, class, slo)).map_err(err)?;
        routed.map_err(|rejection| cloud_err(CloudError::rejected(query_id, rejection)))
    }

    /// Each budgeted tenant's standing in the current window, as dicts (tenant, budget, spent:
    /// the estimated dollars admission charged, window_start: Unix time); empty without budgets.
    fn budgets<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        convert::budget_dicts(py, self.inner.budgets(self.inner.unix_clock()).map_err(err)?)
    }

    /// Charge `dollars` to `tenant`'s current budget window, as if its queries had been
    /// admitted (a restarted control plane restores what its tenants spent). Nothing without
    /// budgets.
    fn charge_budget(&self, tenant: &str, dollars: f64) -> PyResult<()> {
        self.inner.charge_budget(tenant, self.inner.unix_clock(), dollars).map_err(err)
    }

    /// A routed query finished (or timed out) now.
    #[pyo3(signature = (query_id, timed_out=false))]
    fn complete(&self, py: Python<'_>, #[pyo3(from_py_with = crate::convert::query_id)] query_id: u64, timed_out: bool) -> PyResult<()> {
        py.detach(|| self.inner.complete_logged(query_id, timed_out)).map_err(err)
    }

    /// Dollars billed so far for the queries routed: each cluster billed while it ran them,
    /// each busy period at least the billing minimum.
    fn cost(&self) -> f64 {
        self.inner.served_cost()
    }

    /// The queries so far per tenant × class (a pyarrow.Table, the columns of
    /// `Service.totals`).
    fn totals(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(convert::totals_table(&self.inner.served_totals())?.into_pyarrow(py)?.unbind())
    }

    /// Take the queries that ended since the last take, once their cost is final (a
    /// pyarrow.Table, the columns of `Service.take_served`): a query log for the reservoir.
    fn take_served(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(convert::served_table(&self.inner.take_served(), self.inner.started_unix(), true)?.into_pyarrow(py)?.unbind())
    }

    /// Ended queries dropped from a full log (more than 262,144 not taken).
    fn log_dropped(&self) -> u64 {
        self.inner.log_dropped()
    }

    /// The SLO `route` gives a query: the deadline the configuration's `slo_policy` sets for
    /// it, else `slo`; neither is an error.
    #[pyo3(signature = (template, slo=None, *, tenant=None, workload_class=None))]
    fn slo_of(&self, #[pyo3(from_py_with = crate::convert::template)] template: u16, slo: Option<f64>, tenant: Option<&str>, workload_class: Option<&str>) -> PyResult<f64> {
        self.inner.slo_of(tenant.unwrap_or(""), workload_class.unwrap_or(""), QueryText { template, instance: 1 }, slo).map_err(err)
    }

    /// Hand the control plane over to `config` (an `ExecutionConfig`, or its JSON), a new day's
    /// plan whose second 0 is `day_start` on its clock (default: now), keeping every cluster.
    /// Returns the sizes spun up for the clusters it wants now.
    #[pyo3(signature = (config, day_start=None))]
    fn load_plan(&self, py: Python<'_>, config: &Bound<'_, PyAny>, day_start: Option<f64>) -> PyResult<Vec<u32>> {
        let plan = crate::scaling::handed_over_plan(config)?;
        py.detach(|| self.inner.load_plan(plan, day_start.unwrap_or_else(|| self.inner.now()), self.spinup_s)).map_err(err)
    }

    /// (id, size, running queries, ready) of the clusters queries may go to.
    fn clusters(&self) -> PyResult<Vec<(ClusterId, u32, usize, bool)>> {
        self.inner.clusters().map_err(err)
    }

    /// The scaler's decisions so far, one row per option compared (the table
    /// `EmulationResult.decisions` describes); as of the autoscaler thread's last pass.
    fn decisions(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(convert::decisions_table(&self.inner.decisions())?.into_pyarrow(py)?.unbind())
    }

    /// Every change of the cluster set so far (spinup, teardown, failed, skipped): dicts with
    /// time, cluster_id, size, event and reason.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        convert::event_dicts(py, self.inner.events())
    }

    /// The control plane's clock (s since start × time_scale).
    fn now(&self) -> f64 {
        self.inner.now()
    }
}
