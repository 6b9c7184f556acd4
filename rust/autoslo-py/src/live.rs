//! Bindings of the Query Router as a live object and of the Workload Simulator. Conversions only.

use std::collections::HashMap;
use std::sync::Mutex;

use autoslo_core::billing::BillingPolicy;
use autoslo_core::catalog::QueryText;
use autoslo_core::cluster::{ClusterId, ClusterInfo, ClusterState};
use autoslo_core::control::{Event, Router, Scaler, ScheduledScaler, StaticScaler};
use autoslo_core::router;
use autoslo_core::simulator::{self, SimulatorConfig};
use autoslo_core::workload::Query;
use pyo3::prelude::*;
use pyo3_arrow::PyTable;

use crate::predictor::PyPredictor;
use crate::{convert, err, parse_schedule, workload_in, AutoSloCoreError};

struct Live {
    router: Box<dyn Router>,
    clusters: Vec<ClusterInfo>,
    running: HashMap<u64, (ClusterId, Query)>,
    now: f64,
}

impl Live {
    /// Move the router's clock to `now`. Live callers on several threads may report times slightly
    /// out of order; an earlier time is taken as the router's current time. Returns the time used.
    fn advance(&mut self, now: f64) -> PyResult<f64> {
        if !now.is_finite() {
            return Err(AutoSloCoreError::new_err(format!("time must be finite, got {now}")));
        }
        self.now = self.now.max(now);
        for c in &mut self.clusters {
            if c.state == ClusterState::Starting && c.ready_at <= self.now {
                c.state = ClusterState::Ready;
            }
        }
        Ok(self.now)
    }
}

/// A Query Router used live: tell it arrivals and completions as they happen; it returns clusters.
///
/// Thread-safe (one lock inside); routing runs without the GIL.
#[pyclass(name = "Router", module = "autoslo._core", frozen)]
pub struct PyRouter {
    inner: Mutex<Live>,
    policy: String,
}

#[pymethods]
impl PyRouter {
    #[new]
    #[pyo3(signature = (policy, clusters, predictor=None, seed=0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, slo_headroom=router::DEFAULT_SLO_HEADROOM))]
    fn new(policy: &str, clusters: Vec<u32>, predictor: Option<Bound<'_, PyPredictor>>, seed: u64, price_per_rpu_hour: f64, billing_minimum_s: f64, slo_headroom: f64) -> PyResult<Self> {
        if clusters.is_empty() {
            return Err(AutoSloCoreError::new_err("a router needs at least one cluster"));
        }
        if let Some(&s) = clusters.iter().find(|&&s| s == 0) {
            return Err(AutoSloCoreError::new_err(format!("cluster size must be ≥ 1 RPU, got {s}")));
        }
        let billing = BillingPolicy { price_per_rpu_hour, minimum_s: billing_minimum_s };
        let opts = router::RouterOptions { billing, seed, slo_headroom };
        let r = router::router_by_name(policy, predictor.as_ref().map(|p| &p.get().inner), opts).map_err(err)?;
        let infos = clusters
            .iter()
            .enumerate()
            .map(|(i, &size)| ClusterInfo { id: i as ClusterId, size, state: ClusterState::Ready, requested_at: 0.0, ready_at: 0.0, running: 0, queued: 0 })
            .collect();
        Ok(Self { inner: Mutex::new(Live { router: r, clusters: infos, running: HashMap::new(), now: 0.0 }), policy: policy.to_string() })
    }

    /// Route a query arriving at `arrival` (s); returns the chosen cluster id. An arrival earlier
    /// than one already seen (a race between caller threads) is taken as arriving now.
    #[pyo3(signature = (query_id, template, instance, arrival, slo))]
    fn route(&self, py: Python<'_>, query_id: u64, template: u16, instance: u16, arrival: f64, slo: f64) -> PyResult<ClusterId> {
        if !(slo > 0.0 && slo.is_finite()) {
            return Err(AutoSloCoreError::new_err(format!("SLO must be a positive number of seconds, got {slo}")));
        }
        py.detach(|| {
            let mut g = self.inner.lock().map_err(|_| AutoSloCoreError::new_err("router lock poisoned by an earlier panic"))?;
            if g.running.contains_key(&query_id) {
                return Err(AutoSloCoreError::new_err(format!("query {query_id} is already running")));
            }
            let arrival = g.advance(arrival)?;
            let q = Query { id: query_id, arrival, text: QueryText { template, instance }, tenant: 0, class: 0, slo };
            g.router.observe(arrival, &Event::Arrival { query: &q });
            let infos = g.clusters.clone();
            let c = g.router.route(arrival, &q, &infos).map_err(err)?;
            if let Some(ci) = g.clusters.iter_mut().find(|x| x.id == c) {
                ci.running += 1;
            }
            g.running.insert(query_id, (c, q));
            Ok(c)
        })
    }

    /// A routed query finished at `now` (s).
    #[pyo3(signature = (query_id, now, timed_out=false))]
    fn complete(&self, py: Python<'_>, query_id: u64, now: f64, timed_out: bool) -> PyResult<()> {
        py.detach(|| {
            let mut g = self.inner.lock().map_err(|_| AutoSloCoreError::new_err("router lock poisoned by an earlier panic"))?;
            let (c, q) = g.running.remove(&query_id).ok_or_else(|| AutoSloCoreError::new_err(format!("query {query_id} is not running")))?;
            g.advance(now)?;
            if let Some(ci) = g.clusters.iter_mut().find(|x| x.id == c) {
                ci.running = ci.running.saturating_sub(1);
            }
            let ev = Event::Completion { query: &q, cluster: c, latency: now - q.arrival, censored: timed_out };
            g.router.observe(now, &ev);
            Ok(())
        })
    }

    /// Add a cluster of `size` RPU that takes queries from `ready_at` (default: now); returns its id.
    #[pyo3(signature = (size, ready_at=None))]
    fn add_cluster(&self, size: u32, ready_at: Option<f64>) -> PyResult<ClusterId> {
        if size == 0 {
            return Err(AutoSloCoreError::new_err("cluster size must be ≥ 1 RPU"));
        }
        let mut g = self.inner.lock().map_err(|_| AutoSloCoreError::new_err("router lock poisoned"))?;
        let now = g.now;
        let id = g.clusters.iter().map(|c| c.id + 1).max().unwrap_or(0);
        let ready = ready_at.unwrap_or(now).max(now);
        let state = if ready <= now { ClusterState::Ready } else { ClusterState::Starting };
        g.clusters.push(ClusterInfo { id, size, state, requested_at: now, ready_at: ready, running: 0, queued: 0 });
        Ok(id)
    }

    /// Stop routing to a cluster (its running queries still report completions).
    fn remove_cluster(&self, cluster: ClusterId) -> PyResult<()> {
        let mut g = self.inner.lock().map_err(|_| AutoSloCoreError::new_err("router lock poisoned"))?;
        let pos = g.clusters.iter().position(|c| c.id == cluster).ok_or_else(|| AutoSloCoreError::new_err(format!("no cluster {cluster}")))?;
        if g.clusters.len() == 1 {
            return Err(AutoSloCoreError::new_err("cannot remove the last cluster"));
        }
        g.clusters.remove(pos);
        Ok(())
    }

    /// (id, size, running queries) of the clusters the router may use.
    fn clusters(&self) -> PyResult<Vec<(ClusterId, u32, usize)>> {
        let g = self.inner.lock().map_err(|_| AutoSloCoreError::new_err("router lock poisoned"))?;
        Ok(g.clusters.iter().map(|c| (c.id, c.size, c.running)).collect())
    }

    #[getter]
    fn policy(&self) -> &str {
        &self.policy
    }
}

/// Simulate a workload with the predictor as the warehouse (the Workload Simulator).
#[pyfunction]
#[pyo3(signature = (workload, clusters, predictor, routing="autoslo", seed=0, timeout_s=Some(3600.0), spinup_s=300.0, teardown_s=200.0, price_per_rpu_hour=0.375, billing_minimum_s=60.0, schedule=None, slo_headroom=router::DEFAULT_SLO_HEADROOM))]
#[allow(clippy::too_many_arguments)]
pub fn simulate(
    py: Python<'_>,
    workload: PyTable,
    clusters: Vec<u32>,
    predictor: Bound<'_, PyPredictor>,
    routing: &str,
    seed: u64,
    timeout_s: Option<f64>,
    spinup_s: f64,
    teardown_s: f64,
    price_per_rpu_hour: f64,
    billing_minimum_s: f64,
    schedule: Option<Vec<(f64, String, u32)>>,
    slo_headroom: f64,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let w = workload_in(workload, None, None, None, None)?;
    let p = &predictor.get().inner;
    let cfg = SimulatorConfig { billing: BillingPolicy { price_per_rpu_hour, minimum_s: billing_minimum_s }, spinup_s, teardown_s, timeout_s };
    let mut r = router::router_by_name(routing, Some(p), router::RouterOptions { billing: cfg.billing, seed, slo_headroom }).map_err(err)?;
    let mut scaler: Box<dyn Scaler> = match schedule {
        Some(s) if !s.is_empty() => Box::new(ScheduledScaler::new(parse_schedule(s)?, 1.0).map_err(err)?),
        _ => Box::new(StaticScaler),
    };
    let trace = py.detach(|| simulator::simulate(p, &w, &clusters, r.as_mut(), scaler.as_mut(), cfg)).map_err(err)?;
    let (rows, cl) = convert::trace_tables(&w, &trace)?;
    Ok((rows.into_pyarrow(py)?.unbind(), cl.into_pyarrow(py)?.unbind()))
}
