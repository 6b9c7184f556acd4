//! `autoslo._core.Service`: the serving control plane over real workgroups
//! (`autoslo_cloud::serve`), converted for Python; routing and stopping release the GIL.

use std::collections::HashMap;
use std::sync::RwLock;

use autoslo_cloud::live::LiveSettings;
use autoslo_cloud::manager::RedshiftServerless;
use autoslo_cloud::serve::Service;
use autoslo_core::billing::BillingPolicy;
use autoslo_core::catalog::QueryText;
use autoslo_core::cluster::ClusterId;
use autoslo_core::router;
use autoslo_core::tenancy::NamedAdmission;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::cloud::{cloud_err, manager_options, runtime};
use crate::predictor::PyPredictor;
use crate::{convert, AutoSloCoreError};

/// A long-running control plane over Redshift Serverless workgroups (see `autoslo.live.serve`).
#[pyclass(name = "Service", module = "autoslo._core", frozen)]
pub struct PyService {
    /// Read: route, complete and look; write: stop.
    inner: RwLock<Service>,
}

impl PyService {
    fn read(&self) -> PyResult<std::sync::RwLockReadGuard<'_, Service>> {
        self.inner.read().map_err(|_| AutoSloCoreError::new_err("the service's lock is poisoned by an earlier panic"))
    }
}

#[pymethods]
impl PyService {
    #[new]
    #[pyo3(signature = (clusters, predictor=None, routing="autoslo", autoscaler=None, config=None, endpoint=None, region=None, time_scale=1.0, timeout_s=Some(3600.0), create_timeout_s=900.0, initial_timeout_s=None, delete_timeout_s=900.0, name_prefix="autoslo", tick_s=10.0, spinup_s=300.0, keep_clusters=false, keep_leftovers=false, seed=0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, slo_headroom=router::DEFAULT_SLO_HEADROOM, admission=None, budgets=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = crate::convert::sizes)] clusters: Vec<u32>,
        predictor: Option<Bound<'_, PyPredictor>>,
        routing: &str,
        autoscaler: Option<Bound<'_, PyDict>>,
        config: Option<&str>,
        endpoint: Option<String>,
        region: Option<String>,
        time_scale: f64,
        timeout_s: Option<f64>,
        create_timeout_s: f64,
        initial_timeout_s: Option<f64>,
        delete_timeout_s: f64,
        name_prefix: &str,
        tick_s: f64,
        spinup_s: f64,
        keep_clusters: bool,
        keep_leftovers: bool,
        #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
        price_per_rpu_hour: f64,
        billing_minimum_s: f64,
        slo_headroom: f64,
        admission: Option<(f64, Option<u32>)>,
        budgets: Option<(HashMap<String, f64>, f64)>,
    ) -> PyResult<Self> {
        let billing = BillingPolicy { price_per_rpu_hour, minimum_s: billing_minimum_s };
        // Checked before any workgroup is made.
        let admission = match (&predictor, admission.is_some() || budgets.is_some()) {
            (_, false) => None,
            (None, true) => return Err(AutoSloCoreError::new_err("admission and budgets need a latency predictor (its Stage estimates)")),
            (Some(p), true) => NamedAdmission::new(&p.get().inner, billing, admission, budgets).map_err(crate::err)?,
        };
        let r = crate::scaling::live_router(routing, predictor.as_ref(), billing, seed, slo_headroom)?;
        let scaler = crate::scaling::scaler(autoscaler, None, config, spinup_s)?;
        let policy = crate::slo_policy_of(config)?;
        let settings = LiveSettings { time_scale, timeout_s, create_timeout_s, initial_timeout_s, delete_timeout_s, name_prefix: name_prefix.to_string(), tick_s, expected_spinup_s: spinup_s, billing, keep_clusters, keep_leftovers, ..Default::default() };
        let opts = manager_options(endpoint, region, 6);
        let rt = runtime()?;
        let svc = py.detach(|| {
            let rs = rt.block_on(RedshiftServerless::connect(&opts))?;
            drop(rt);
            let svc = Service::start(rs, r, scaler, &clusters, settings, policy)?;
            svc.set_admission(admission)?;
            Ok(svc)
        });
        Ok(Self { inner: RwLock::new(svc.map_err(cloud_err)?) })
    }

    /// Route a query arriving now. Its SLO is the deadline the configuration's `slo_policy`
    /// sets for it (by `tenant`, `workload_class` and template), else `slo`. Returns where to
    /// run it: a dict with cluster_id, size, workgroup, address and port.
    #[pyo3(signature = (query_id, template, instance, slo=None, *, tenant=None, workload_class=None))]
    #[allow(clippy::too_many_arguments)]
    fn route<'py>(&self, py: Python<'py>, #[pyo3(from_py_with = crate::convert::query_id)] query_id: u64, #[pyo3(from_py_with = crate::convert::template)] template: u16, #[pyo3(from_py_with = crate::convert::instance)] instance: u16, slo: Option<f64>, tenant: Option<&str>, workload_class: Option<&str>) -> PyResult<Bound<'py, PyDict>> {
        let text = QueryText { template, instance };
        let (tenant, class) = (tenant.unwrap_or(""), workload_class.unwrap_or(""));
        let r = py.detach(|| self.read().and_then(|s| s.route(query_id, text, tenant, class, slo).map_err(cloud_err)))?;
        let d = PyDict::new(py);
        d.set_item("cluster_id", r.cluster)?;
        d.set_item("size", r.size)?;
        d.set_item("workgroup", r.workgroup)?;
        d.set_item("address", r.address)?;
        d.set_item("port", r.port)?;
        Ok(d)
    }

    /// A routed query finished now (`timed_out`: stopped or failed without an answer).
    #[pyo3(signature = (query_id, timed_out=false))]
    fn complete(&self, py: Python<'_>, #[pyo3(from_py_with = crate::convert::query_id)] query_id: u64, timed_out: bool) -> PyResult<()> {
        py.detach(|| self.read().and_then(|s| s.complete(query_id, timed_out).map_err(cloud_err)))
    }

    /// The client found a cluster dead: it leaves the router and its workgroup is deleted.
    fn lost(&self, cluster_id: ClusterId, why: &str) -> PyResult<()> {
        self.read()?.lost(cluster_id, why).map_err(cloud_err)
    }

    /// Every cluster the service has had: dicts with cluster_id, size, workgroup, state
    /// (creating, available, lost, deleted), running, address, port, and its bill so far
    /// (billed_s, cost).
    fn clusters<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.read()?
            .clusters()
            .into_iter()
            .map(|c| {
                let d = PyDict::new(py);
                d.set_item("cluster_id", c.cluster)?;
                d.set_item("size", c.size)?;
                d.set_item("workgroup", c.workgroup)?;
                d.set_item("state", c.state)?;
                d.set_item("running", c.running)?;
                d.set_item("address", c.endpoint.as_ref().map(|e| e.0.clone()))?;
                d.set_item("port", c.endpoint.map(|e| e.1))?;
                d.set_item("billed_s", c.billed_s)?;
                d.set_item("cost", c.cost)?;
                Ok(d)
            })
            .collect()
    }

    /// Hand the service over to `config` (an `ExecutionConfig`, or its JSON), a new day's plan
    /// whose second 0 is `day_start` on the service's clock (default: now), keeping every
    /// workgroup. Returns the sizes spun up to stand for its initial clusters.
    #[pyo3(signature = (config, day_start=None))]
    fn load_plan(&self, py: Python<'_>, config: &Bound<'_, PyAny>, day_start: Option<f64>) -> PyResult<Vec<u32>> {
        let plan = crate::scaling::handed_over_plan(config)?;
        py.detach(|| self.read().and_then(|s| s.load_plan(plan, day_start.unwrap_or_else(|| s.now())).map_err(cloud_err)))
    }

    /// Dollars billed so far over every cluster.
    fn cost(&self) -> PyResult<f64> {
        Ok(self.read()?.cost())
    }

    /// The queries so far per tenant × class (a pyarrow.Table: tenant, class, routed, running,
    /// met, late, timed_out, failed, cancelled, violation_rate of those that ended,
    /// latency_mean of those completed, cost: dollars attributed to its ended queries whose cost
    /// is final).
    fn totals(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(convert::totals_table(&self.read()?.totals())?.into_pyarrow(py)?.unbind())
    }

    /// Take the queries that ended since the last take (a pyarrow.Table in the order their
    /// costs became final: query_id, arrival as a UTC timestamp, arrival_s on the service's
    /// clock, template, instance, tenant, class, slo, cluster_id, cluster_size, latency, outcome,
    /// met, cost in dollars). A query ending within its cluster's first billing minute of a busy
    /// period is taken once that minute is over. A query log: `Reservoir.append` and
    /// `read_workload` take it as it is.
    fn take_served(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let s = self.read()?;
        Ok(convert::served_table(&s.take_served(), s.started_unix(), true)?.into_pyarrow(py)?.unbind())
    }

    /// The ended queries whose cost is not final yet (their cluster's billing minimum still
    /// runs), as `take_served`'s table with `cost` null; nothing is taken. `take_served` returns
    /// them once their cost is final. `autoslo.serving.ServedLog` journals them, so that a crash
    /// before then loses no query.
    fn pending_served(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let s = self.read()?;
        Ok(convert::served_table(&s.pending_served(), s.started_unix(), false)?.into_pyarrow(py)?.unbind())
    }

    /// Keep the log of ended queries (on from the start) or not; the totals count either way.
    fn keep_log(&self, on: bool) -> PyResult<()> {
        self.read()?.keep_log(on);
        Ok(())
    }

    /// Each budgeted tenant's standing in the current window, as dicts (tenant, budget, spent:
    /// the estimated dollars admission charged, window_start: Unix time); empty without budgets.
    fn budgets<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        convert::budget_dicts(py, self.read()?.budgets().map_err(cloud_err)?)
    }

    /// Charge `dollars` to `tenant`'s current budget window, as if its queries had been
    /// admitted: a restarted service restores what its log's `charged` column says the tenant
    /// spent in this window (`autoslo.serving.ServedLog.charged`). Nothing without budgets.
    fn charge_budget(&self, tenant: &str, dollars: f64) -> PyResult<()> {
        self.read()?.charge_budget(tenant, dollars).map_err(cloud_err)
    }

    /// Ended queries dropped from a full log (more than 262,144 ended and not taken).
    fn log_dropped(&self) -> PyResult<u64> {
        Ok(self.read()?.log_dropped())
    }

    /// Every change of the cluster set so far, as dicts (time, cluster_id, size, event, reason).
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        convert::event_dicts(py, self.read()?.events())
    }

    /// The scaler's decisions so far (the table `EmulationResult.decisions` describes).
    fn decisions(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(convert::decisions_table(&self.read()?.decisions())?.into_pyarrow(py)?.unbind())
    }

    /// The control plane's clock (s since the start × time_scale).
    fn now(&self) -> PyResult<f64> {
        Ok(self.read()?.now())
    }

    /// Stop: the autoscaler stops and every workgroup is deleted (unless `keep_clusters`)
    /// once its routed queries complete or `delete_timeout_s` has passed. Idempotent.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| match self.inner.write() {
            Ok(mut s) => {
                s.stop();
                Ok(())
            }
            Err(_) => Err(AutoSloCoreError::new_err("the service's lock is poisoned by an earlier panic")),
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.stop(py)?;
        Ok(false)
    }
}
