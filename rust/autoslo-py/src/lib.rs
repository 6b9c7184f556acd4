//! `autoslo._core`: thin PyO3 bindings of `autoslo-core`. Conversions and dispatch only; every
//! decision lives in the core. Tables cross the boundary as Arrow (pyo3-arrow).

mod cloud;
mod convert;
mod hindsight;
mod history;
mod live;
mod predictor;
mod scaling;
mod serve;
mod tuner;

use std::collections::BTreeMap;

use autoslo_core::billing::{self, BillingTimer};
use autoslo_core::calibration;
use autoslo_core::catalog::{self, QueryText};
use autoslo_core::control::{Action, ScheduledAction};
use autoslo_core::emulator::{self, ColdStart, EmulatorConfig, Lifecycle};
use autoslo_core::router;
use autoslo_core::slo::{ClassRule, SloTable};
use autoslo_core::placement;
use autoslo_core::tenancy;
use autoslo_core::workload::{self, RedbenchConfig, Workload};
use autoslo_core::AutoSloError;
use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::PyTable;

/// Rust allocations of the extension: small blocks (a routing decision's per-query vectors) from
/// mimalloc, large ones from the system allocator (`autoslo_core::allocator`; measured in
/// `docs/tuner.md`, Efficiency). Python's own objects are unaffected, and every result is the same.
#[global_allocator]
static GLOBAL: autoslo_core::allocator::SplitAlloc = autoslo_core::allocator::SplitAlloc;

pyo3::create_exception!(_core, AutoSloCoreError, PyValueError, "Invalid input or action reported by the AutoSLO core.");

pub(crate) fn err(e: AutoSloError) -> PyErr {
    match e {
        AutoSloError::Interrupted => PyKeyboardInterrupt::new_err("interrupted"),
        e => AutoSloCoreError::new_err(e.to_string()),
    }
}

/// Build an SLO table from the Python-side arguments.
pub(crate) fn slo_table(kappa: f64, baseline: Option<BTreeMap<u16, f64>>, class_kappa: Option<BTreeMap<String, f64>>, class_slo_s: Option<BTreeMap<String, f64>>) -> PyResult<SloTable> {
    let mut t = SloTable::paper(kappa).map_err(err)?;
    if let Some(b) = baseline {
        t = t.with_template_baselines(&b).map_err(err)?;
    }
    for (c, k) in class_kappa.unwrap_or_default() {
        t = t.with_class_rule(&c, ClassRule::Kappa(k)).map_err(err)?;
    }
    for (c, s) in class_slo_s.unwrap_or_default() {
        t = t.with_class_rule(&c, ClassRule::Seconds(s)).map_err(err)?;
    }
    Ok(t)
}

pub(crate) fn workload_out(py: Python<'_>, w: &Workload) -> PyResult<Py<PyAny>> {
    Ok(convert::workload_table(w)?.into_pyarrow(py)?.unbind())
}

/// Mean isolated runtime (s) of a TPC-DS query text on a cluster of `rpu` (measured or fitted).
#[pyfunction]
fn isolated_runtime(#[pyo3(from_py_with = crate::convert::template)] template: u16, #[pyo3(from_py_with = crate::convert::instance)] instance: u16, #[pyo3(from_py_with = crate::convert::size)] rpu: u32) -> PyResult<f64> {
    catalog::tpcds().isolated_runtime(QueryText { template, instance }, rpu).map_err(err)
}

/// The measured catalog as a table: template, instance, rpu, runs, mean_runtime_s, std_runtime_s.
#[pyfunction]
fn catalog_table(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(convert::catalog_table()?.into_pyarrow(py)?.unbind())
}

/// Whether a Redshift Serverless workgroup can have a base capacity of `rpu` (4, 8 to 512 in steps
/// of 8, or 544 to 1024 in steps of 32): the sizes the emulator, the simulator and an execution
/// configuration accept.
#[pyfunction]
fn is_base_capacity(rpu: u64) -> bool {
    u32::try_from(rpu).is_ok_and(autoslo_core::cluster::is_base_capacity)
}

/// Jain's fairness index of non-negative values (e.g. SLO attainment per tenant × class).
#[pyfunction]
fn jain_index(values: Vec<f64>) -> PyResult<f64> {
    autoslo_core::tenancy::jain_index(&values).map_err(err)
}

/// The multi-tenant case's fixture arithmetic (capacity, memory, p99s, fairness, daily cost), as
/// JSON.
#[pyfunction]
fn canopy_report() -> PyResult<String> {
    let r = autoslo_core::tenancy::canopy().map_err(err)?;
    serde_json::to_string(&r).map_err(|e| AutoSloCoreError::new_err(e.to_string()))
}

/// The load-balancing chapter's Mercury fixture under count-balanced and work-aware placement,
/// the 10 → 11 remap fractions, and a worker 3× slower for 90 s (with and without ejection), as
/// JSON.
#[pyfunction]
#[pyo3(signature = (seed=0))]
fn mercury_report(py: Python<'_>, #[pyo3(from_py_with = crate::convert::seed)] seed: u64) -> PyResult<String> {
    let r = py.detach(|| autoslo_core::placement::mercury(seed)).map_err(err)?;
    serde_json::to_string(&r).map_err(|e| AutoSloCoreError::new_err(e.to_string()))
}

/// Error of the size-scaling law on the measured points.
#[pyfunction]
fn catalog_fit_report(py: Python<'_>) -> PyResult<Py<PyDict>> {
    let r = catalog::tpcds().fit_report();
    let d = PyDict::new(py);
    d.set_item("points", r.points)?;
    d.set_item("in_sample_q_error", (r.in_sample_q[0], r.in_sample_q[1], r.in_sample_q[2]))?;
    d.set_item("holdout_points", r.holdout_points)?;
    d.set_item("holdout_q_error", (r.holdout_q[0], r.holdout_q[1], r.holdout_q[2]))?;
    d.set_item("fleet_slope", r.fleet_slope)?;
    d.set_item("templates_own_slope", r.templates_own_slope)?;
    d.set_item("templates_fleet_slope", r.templates_fleet_slope)?;
    d.set_item("templates_from_baseline", r.templates_from_baseline)?;
    Ok(d.unbind())
}

/// The SLO (s) of a template in a class under the given rule.
#[pyfunction]
#[pyo3(signature = (template, workload_class="adhoc", kappa=2.0, baseline=None, class_kappa=None, class_slo_s=None))]
fn slo_for(#[pyo3(from_py_with = crate::convert::template)] template: u16, workload_class: &str, kappa: f64, baseline: Option<BTreeMap<u16, f64>>, class_kappa: Option<BTreeMap<String, f64>>, class_slo_s: Option<BTreeMap<String, f64>>) -> PyResult<f64> {
    slo_table(kappa, baseline, class_kappa, class_slo_s)?.slo(template, workload_class).map_err(err)
}

/// The paper's BaseWorkload(λ).
#[pyfunction]
#[pyo3(signature = (rate, seed=0, kappa=2.0, baseline=None, class_kappa=None, class_slo_s=None))]
fn base_workload(py: Python<'_>, rate: f64, #[pyo3(from_py_with = crate::convert::seed)] seed: u64, kappa: f64, baseline: Option<BTreeMap<u16, f64>>, class_kappa: Option<BTreeMap<String, f64>>, class_slo_s: Option<BTreeMap<String, f64>>) -> PyResult<Py<PyAny>> {
    let slo = slo_table(kappa, baseline, class_kappa, class_slo_s)?;
    workload_out(py, &workload::base_workload(rate, seed, &slo).map_err(err)?)
}

/// A phased BaseWorkload: x queries at rate_low alternating with 10 at rate_high.
#[pyfunction]
#[pyo3(signature = (x, rate_low, rate_high, seed=0, kappa=2.0))]
fn phased_workload(py: Python<'_>, x: usize, rate_low: f64, rate_high: f64, #[pyo3(from_py_with = crate::convert::seed)] seed: u64, kappa: f64) -> PyResult<Py<PyAny>> {
    let slo = SloTable::paper(kappa).map_err(err)?;
    workload_out(py, &workload::phased_workload(x, rate_low, rate_high, seed, &slo).map_err(err)?)
}

/// A Redbench-like multi-day, multi-tenant workload.
#[pyfunction]
#[pyo3(signature = (days=1, seed=0, queries_per_day=20000.0, tenants=4, start_weekday=0, kappa=2.0, baseline=None, class_kappa=None, class_slo_s=None))]
#[allow(clippy::too_many_arguments)]
fn redbench_workload(
    py: Python<'_>,
    days: u32,
    #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
    queries_per_day: f64,
    tenants: u32,
    start_weekday: u32,
    kappa: f64,
    baseline: Option<BTreeMap<u16, f64>>,
    class_kappa: Option<BTreeMap<String, f64>>,
    class_slo_s: Option<BTreeMap<String, f64>>,
) -> PyResult<Py<PyAny>> {
    let slo = slo_table(kappa, baseline, class_kappa, class_slo_s)?;
    let cfg = RedbenchConfig { days, queries_per_day, tenants, start_weekday, seed };
    let w = py.detach(|| workload::redbench_workload(&cfg, &slo)).map_err(err)?;
    workload_out(py, &w)
}

/// Validate a workload table (filling missing SLOs from the rule) and return it normalised.
#[pyfunction]
#[pyo3(signature = (table, kappa=None, baseline=None, class_kappa=None, class_slo_s=None))]
fn validate_workload(py: Python<'_>, table: PyTable, kappa: Option<f64>, baseline: Option<BTreeMap<u16, f64>>, class_kappa: Option<BTreeMap<String, f64>>, class_slo_s: Option<BTreeMap<String, f64>>) -> PyResult<Py<PyAny>> {
    let w = workload_in(table, kappa, baseline, class_kappa, class_slo_s)?;
    workload_out(py, &w)
}

pub(crate) fn workload_in(table: PyTable, kappa: Option<f64>, baseline: Option<BTreeMap<u16, f64>>, class_kappa: Option<BTreeMap<String, f64>>, class_slo_s: Option<BTreeMap<String, f64>>) -> PyResult<Workload> {
    let cols = convert::workload_columns(table)?;
    let slo = match kappa {
        Some(k) => Some(slo_table(k, baseline, class_kappa, class_slo_s)?),
        None => None,
    };
    Workload::from_columns(cols, slo.as_ref()).map_err(err)
}

pub(crate) fn parse_schedule(schedule: Vec<(f64, String, u32)>) -> PyResult<Vec<ScheduledAction>> {
    schedule
        .into_iter()
        .map(|(at, kind, value)| {
            let action = match kind.as_str() {
                "spinup" => Action::spin_up(value, "scheduled"),
                "teardown" => Action::tear_down(value, "scheduled"),
                other => return Err(AutoSloCoreError::new_err(format!("unknown scheduled action `{other}` (use `spinup` with a size or `teardown` with a cluster id)"))),
            };
            Ok(ScheduledAction { at, action })
        })
        .collect()
}

/// Emulate a workload; returns (trace table, cluster table).
#[pyfunction]
#[pyo3(signature = (workload, clusters, seed=0, routing="round-robin", kappa=None, timeout_s=Some(3600.0), lifecycle="fixed", spinup_s=300.0, teardown_s=200.0, cold_start_factor=1.5, cold_start_duration_s=300.0, noise=true, price_per_rpu_hour=0.375, billing_minimum_s=60.0, schedule=None, progress=None, predictor=None, slo_headroom=router::DEFAULT_SLO_HEADROOM, autoscaler=None, config=None, reservation=None, admission=None, ejection=None, degradations=None, queue=None, budgets=None))]
#[allow(clippy::too_many_arguments)]
fn emulate(
    py: Python<'_>,
    workload: PyTable,
    #[pyo3(from_py_with = crate::convert::sizes)] clusters: Vec<u32>,
    #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
    routing: &str,
    kappa: Option<f64>,
    timeout_s: Option<f64>,
    lifecycle: &str,
    spinup_s: f64,
    teardown_s: f64,
    cold_start_factor: f64,
    cold_start_duration_s: f64,
    noise: bool,
    price_per_rpu_hour: f64,
    billing_minimum_s: f64,
    schedule: Option<Vec<(f64, String, u32)>>,
    progress: Option<Py<PyAny>>,
    predictor: Option<Bound<'_, predictor::PyPredictor>>,
    slo_headroom: f64,
    autoscaler: Option<Bound<'_, PyDict>>,
    config: Option<&str>,
    reservation: Option<(Vec<String>, Option<Vec<String>>, Vec<u32>, bool)>,
    admission: Option<(f64, Option<u32>)>,
    ejection: Option<EjectionArgs>,
    degradations: Option<Vec<(u32, f64, f64, f64)>>,
    queue: Option<(usize, usize, f64, f64, Option<QueueSharing>, Option<QueueDeferral>)>,
    budgets: Option<(BTreeMap<String, f64>, f64)>,
) -> PyResult<(Py<PyAny>, Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    let w = with_slo_policy(workload_in(workload, kappa, None, None, None)?, config)?;
    let lifecycle = lifecycle_of(lifecycle, spinup_s, teardown_s)?;
    let cfg = EmulatorConfig {
        seed,
        billing: billing::BillingPolicy { price_per_rpu_hour, minimum_s: billing_minimum_s },
        lifecycle,
        cold_start: ColdStart { factor: cold_start_factor, duration_s: cold_start_duration_s },
        timeout_s,
        noise,
        degradations: degradations.unwrap_or_default().into_iter().map(|(cluster, factor, from_s, until_s)| emulator::Degradation { cluster, factor, from_s, until_s }).collect(),
        ..Default::default()
    };
    let mut opts = router::RouterOptions { billing: cfg.billing, seed, slo_headroom, ..Default::default() };
    if let Some(c) = config {
        opts = autoslo_core::tuner::ExecutionConfig::from_json(c).map_err(err)?.router_options(opts);
    }
    let mut router = router::router_by_name(routing, predictor.as_ref().map(|p| &p.get().inner), opts).map_err(err)?;
    if let Some((tenants, classes, reserved, borrow_idle)) = reservation {
        router = Box::new(tenancy::ReservedRouter::new(router, reservation_of(&w, &tenants, classes.as_deref(), &reserved, clusters.len(), borrow_idle)?));
    }
    let mut ejection_log = None;
    let mut cover = None;
    if let Some((min_samples, ratio, alpha, max_ejected_fraction, base_ejection_s, with_cover)) = ejection {
        let policy = placement::EjectionPolicy { min_samples, ratio, alpha, max_ejected_fraction, base_ejection_s };
        let ejecting = placement::EjectingRouter::new(router, policy).map_err(err)?;
        ejection_log = Some(ejecting.ejection_log());
        cover = with_cover.then(|| ejecting.unhealthy_handle());
        router = Box::new(ejecting);
    }
    let mut scaler = scaling::scaler(autoscaler, schedule, config, spinup_s)?;
    if let Some(flags) = cover {
        scaler = Box::new(placement::EjectionCover::new(scaler, flags));
    }
    let mut admission: Option<Box<dyn tenancy::Admission>> = match admission {
        None => None,
        Some((margin, largest)) => {
            let p = predictor.as_ref().ok_or_else(|| AutoSloCoreError::new_err("admission needs a latency predictor (its Stage estimates)"))?;
            Some(Box::new(tenancy::DeadlineAdmission::new(p.get().inner.clone(), margin, largest).map_err(err)?))
        }
    };
    if let Some((per_tenant, window_s)) = budgets {
        let p = predictor.as_ref().ok_or_else(|| AutoSloCoreError::new_err("budgets need a latency predictor (its Stage estimates)"))?;
        let mut by_index = std::collections::HashMap::new();
        for (t, b) in per_tenant {
            let i = w.tenants().iter().position(|x| *x == t).ok_or_else(|| AutoSloCoreError::new_err(format!("budgets: tenant `{t}` is not in the workload (tenants: {})", w.tenants().join(", "))))?;
            by_index.insert(i as u32, b);
        }
        admission = Some(Box::new(tenancy::BudgetAdmission::new(p.get().inner.clone(), cfg.billing, by_index, window_s, admission).map_err(err)?));
    }
    let mut queue = match queue {
        None => None,
        Some((slots_per_cluster, max_queued, max_queued_work_s, reserve, sharing, deferral)) => {
            let p = predictor.as_ref().ok_or_else(|| AutoSloCoreError::new_err("the admission queue needs a latency predictor (its Stage estimates)"))?;
            let q = tenancy::AdmissionQueue::new(p.get().inner.clone(), tenancy::QueueSettings { slots_per_cluster, max_queued, max_queued_work_s, reserve }).map_err(err)?;
            let q = match sharing {
                None => q,
                Some(sharing) => q.with_sharing(sharing_policy(&w, sharing)?).map_err(err)?,
            };
            Some(match deferral {
                None => q,
                Some((classes, from_s, until_s, slots_per_cluster)) => {
                    let classes = classes
                        .iter()
                        .map(|c| w.classes().iter().position(|x| x == c).map(|i| i as u32).ok_or_else(|| AutoSloCoreError::new_err(format!("queue deferral: class `{c}` is not in the workload (classes: {})", w.classes().join(", ")))))
                        .collect::<PyResult<Vec<u32>>>()?;
                    q.with_deferral(tenancy::Deferral { classes, from_s, until_s, slots_per_cluster }).map_err(err)?
                }
            })
        }
    };
    let raised = Raised::default();
    let run = py.detach(|| {
        let mut report = progress_reporter(&progress, &raised);
        let admission: Option<&mut dyn tenancy::Admission> = match admission.as_mut() {
            Some(a) => Some(a.as_mut()),
            None => None,
        };
        emulator::emulate_admitted(&w, &clusters, router.as_mut(), scaler.as_mut(), admission, queue.as_mut(), &cfg, &mut report)
    });
    let trace = raised.or(run)?;
    let mut trace = trace;
    if let Some(log) = ejection_log {
        let size = |c: usize| trace.clusters.get(c).map_or(0, |r| r.size);
        let ejections = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (t, c, seconds) in ejections {
            trace.extra_events.push(autoslo_core::trace::ClusterEvent { time: t, cluster: c as u32, size: size(c), kind: "ejected", reason: "outlier" });
            trace.extra_events.push(autoslo_core::trace::ClusterEvent { time: t + seconds, cluster: c as u32, size: size(c), kind: "reentered", reason: "ejection-ended" });
        }
    }
    convert::run_out(py, &w, &trace, scaler.decisions())
}

/// The admission queue's sharing as Python passes it: shares `(tenant, reservation, weight)`,
/// the default `(reservation, weight)`, the aging bound (s) and whether weights divide only the
/// excess.
type QueueSharing = (Vec<(String, f64, f64)>, (f64, f64), f64, bool);

fn sharing_policy(w: &Workload, (shares, (reservation, weight), max_wait_s, excess_only): QueueSharing) -> PyResult<tenancy::SharingPolicy> {
    let mut by_index = std::collections::HashMap::new();
    for (t, reservation, weight) in shares {
        let i = w.tenants().iter().position(|x| *x == t).ok_or_else(|| AutoSloCoreError::new_err(format!("queue shares: tenant `{t}` is not in the workload (tenants: {})", w.tenants().join(", "))))?;
        by_index.insert(i as u32, tenancy::Share { reservation, weight });
    }
    Ok(tenancy::SharingPolicy { shares: by_index, default: tenancy::Share { reservation, weight }, max_wait_s, excess_only })
}

/// Outlier ejection as Python passes it: minimum samples, ratio, α, largest ejected fraction,
/// base ejection (s), and whether to cover an ejected cluster's capacity.
type EjectionArgs = (usize, f64, f64, f64, f64, bool);

/// Check outlier-ejection settings (as `emulate(ejection=...)` takes them) by the core's rules,
/// before any run.
#[pyfunction]
fn validate_ejection(ejection: EjectionArgs) -> PyResult<()> {
    let (min_samples, ratio, alpha, max_ejected_fraction, base_ejection_s, _) = ejection;
    placement::OutlierEjector::new(0, placement::EjectionPolicy { min_samples, ratio, alpha, max_ejected_fraction, base_ejection_s }).map(drop).map_err(err)
}

/// A deferral as Python passes it: class names, window start and end (s into the day), slots.
type QueueDeferral = (Vec<String>, f64, f64, usize);

/// Check an admission queue's settings (as `emulate(queue=...)` takes them, without the
/// deferral) by the core's own rules, before any run; tenant names are checked against a
/// workload only when one runs.
#[pyfunction]
fn validate_queue(slots_per_cluster: usize, max_queued: usize, max_queued_work_s: f64, reserve: f64, sharing: Option<QueueSharing>) -> PyResult<()> {
    tenancy::QueueSettings { slots_per_cluster, max_queued, max_queued_work_s, reserve }.validate().map_err(err)?;
    if let Some((shares, (reservation, weight), max_wait_s, excess_only)) = sharing {
        let shares = shares.into_iter().enumerate().map(|(i, (_, reservation, weight))| (i as u32, tenancy::Share { reservation, weight })).collect();
        tenancy::SharingPolicy { shares, default: tenancy::Share { reservation, weight }, max_wait_s, excess_only }.validate().map_err(err)?;
    }
    Ok(())
}

/// Check a deferral (as `emulate(queue=(..., deferral))` takes it) by the core's own rules,
/// before any run; class names are checked against a workload only when one runs.
#[pyfunction]
fn validate_deferral(deferral: QueueDeferral) -> PyResult<()> {
    let (classes, from_s, until_s, slots_per_cluster) = deferral;
    tenancy::Deferral { classes: (0..classes.len() as u32).collect(), from_s, until_s, slots_per_cluster }.validate().map_err(err)
}

/// The SLO policy of execution configuration `config` (JSON), if it has one.
pub(crate) fn slo_policy_of(config: Option<&str>) -> PyResult<Option<tenancy::SloPolicy>> {
    Ok(config.map(autoslo_core::tuner::ExecutionConfig::from_json).transpose().map_err(err)?.and_then(|c| c.slo_policy))
}

/// `w` with the SLO policy of execution configuration `config` (JSON), if it has one.
pub(crate) fn with_slo_policy(w: Workload, config: Option<&str>) -> PyResult<Workload> {
    match slo_policy_of(config)? {
        Some(p) => p.apply(&w).map_err(err),
        None => Ok(w),
    }
}

fn slo_policy_in(policy: &str) -> PyResult<tenancy::SloPolicy> {
    let p: tenancy::SloPolicy = serde_json::from_str(policy).map_err(|e| AutoSloCoreError::new_err(format!("slo_policy: {e}")))?;
    p.validated().map_err(err)
}

/// The tier an SLO policy (JSON) puts each of `tenants` in.
#[pyfunction]
fn slo_policy_tiers(policy: &str, tenants: Vec<String>) -> PyResult<Vec<String>> {
    let p = slo_policy_in(policy)?;
    Ok(tenants.iter().map(|t| p.tier_of(t).to_string()).collect())
}

/// A workload with each query's SLO set by an SLO policy (JSON, as in an execution
/// configuration's `slo_policy`); returns (workload table, tier of each query).
#[pyfunction]
fn apply_slo_policy(py: Python<'_>, workload: PyTable, policy: &str) -> PyResult<(Py<PyAny>, Vec<String>)> {
    let p = slo_policy_in(policy)?;
    let w = p.apply(&workload_in(workload, None, None, None, None)?).map_err(err)?;
    let tiers = w.queries().iter().map(|q| p.tier_of(w.tenant_name(q)).to_string()).collect();
    Ok((workload_out(py, &w)?, tiers))
}

/// A reservation by tenant names and initial-cluster indices, checked against the run.
fn reservation_of(w: &Workload, tenants: &[String], classes: Option<&[String]>, reserved: &[u32], initial: usize, borrow_idle: bool) -> PyResult<tenancy::Reservation> {
    let index = |names: &[String], known: &[String], what: &str| {
        names
            .iter()
            .map(|t| known.iter().position(|x| x == t).map(|i| i as u32).ok_or_else(|| AutoSloCoreError::new_err(format!("reservation: {what} `{t}` is not in the workload ({what}s: {})", known.join(", ")))))
            .collect::<PyResult<Vec<_>>>()
    };
    let premium_tenants = index(tenants, w.tenants(), "tenant")?;
    let premium_classes = classes.map(|c| index(c, w.classes(), "class")).transpose()?;
    if let Some(c) = reserved.iter().find(|&&c| c as usize >= initial) {
        return Err(AutoSloCoreError::new_err(format!("reservation: cluster {c} is not one of the {initial} initial clusters (0-based)")));
    }
    if premium_tenants.is_empty() || reserved.is_empty() {
        return Err(AutoSloCoreError::new_err("reservation: name at least one premium tenant and one reserved cluster"));
    }
    Ok(tenancy::Reservation { premium_tenants, premium_classes, reserved_clusters: reserved.to_vec(), borrow_idle })
}

/// The lifecycle model by name.
pub(crate) fn lifecycle_of(name: &str, spinup_s: f64, teardown_s: f64) -> PyResult<Lifecycle> {
    match name {
        "fixed" => Ok(Lifecycle::Fixed { spinup_s, teardown_s }),
        "measured" => Ok(Lifecycle::Measured),
        other => Err(AutoSloCoreError::new_err(format!("unknown lifecycle `{other}` (use `fixed` or `measured`)"))),
    }
}

/// A dict from `key => value` pairs (values converted by `IntoPyObject`).
macro_rules! pydict {
    ($py:expr; $($k:literal => $v:expr),* $(,)?) => {{
        let d = PyDict::new($py);
        $(d.set_item($k, $v)?;)*
        Ok::<_, PyErr>(d)
    }};
}

/// The exception that stopped a run from Python: raised by a signal handler (Ctrl-C's
/// `KeyboardInterrupt`, or a supervisor's own, such as Airflow's on SIGTERM) or by the progress
/// callback. It is what the caller sees, rather than the core's plain `Interrupted`.
#[derive(Default)]
pub(crate) struct Raised(std::sync::Mutex<Option<PyErr>>);

impl Raised {
    /// Keep the first exception.
    pub(crate) fn keep(&self, e: PyErr) {
        if let Ok(mut first) = self.0.lock() {
            first.get_or_insert(e);
        }
    }

    /// The exception kept, if any.
    pub(crate) fn take(self) -> Option<PyErr> {
        self.0.into_inner().ok().flatten()
    }

    /// The run's result, or the exception kept: a run stopped by an exception raises it (a
    /// callback returning False stops it with `KeyboardInterrupt`).
    pub(crate) fn or<T>(self, r: autoslo_core::error::Result<T>) -> PyResult<T> {
        match self.take() {
            Some(e) => Err(e),
            None => r.map_err(err),
        }
    }

    /// Between two waits for a run: run the signal handlers and the progress callback; whether to
    /// stop (a handler or the callback raised, or the callback returned False).
    pub(crate) fn poll(&self, py: Python<'_>, progress: &Option<Py<PyAny>>, done: usize, total: usize) -> bool {
        if let Err(e) = py.check_signals() {
            self.keep(e);
            return true;
        }
        match progress {
            Some(cb) => match cb.call1(py, (done, total)) {
                Ok(r) => matches!(r.bind(py).extract::<bool>(), Ok(false)),
                Err(e) => {
                    self.keep(e);
                    true
                }
            },
            None => false,
        }
    }
}

/// A progress callback for the Rust core: calls `progress(done, total)` with the GIL, and stops
/// the run (returns false) on Ctrl-C or another signal handler's exception, when the callback
/// returns False, or when it raises; an exception is kept in `raised` for [`Raised::or`].
pub(crate) fn progress_reporter<'a>(progress: &'a Option<Py<PyAny>>, raised: &'a Raised) -> impl FnMut(usize, usize) -> bool + 'a {
    move |done, total| Python::attach(|py| !raised.poll(py, progress, done, total))
}

/// Hold the emulator against the real measurements; returns a dict with `bins`, `load`,
/// `isolated`, `noise`, the tolerances and `passed`.
#[pyfunction]
#[pyo3(signature = (seed=0, seeds=10, isolated_replications=20))]
fn calibrate(py: Python<'_>, #[pyo3(from_py_with = crate::convert::seed)] seed: u64, seeds: u64, isolated_replications: usize) -> PyResult<Py<PyDict>> {
    let cfg = EmulatorConfig::default();
    let r = py.detach(|| calibration::calibrate(&cfg, seed, seeds, isolated_replications)).map_err(err)?;
    let d = PyDict::new(py);
    let bins = r
        .bins
        .iter()
        .map(|x| {
            let hi = (x.hi != usize::MAX).then_some(x.hi);
            pydict!(py; "rpu" => x.rpu, "overlap_lo" => x.lo, "overlap_hi" => hi, "overlapping" => calibration::bin_label(x.lo, x.hi), "n" => x.n,
                "emulated_median" => x.emulated_median, "real_median" => x.real_median, "real_rows" => x.real_rows, "checked" => x.checked, "within" => x.within)
        })
        .collect::<PyResult<Vec<_>>>()?;
    let load = r
        .load
        .iter()
        .map(|x| {
            pydict!(py; "rpu" => x.rpu, "queries" => x.queries, "real_executions" => x.real_executions, "emulated_timed_out" => x.emulated_timed_out,
                "real_timed_out" => x.real_timed_out, "timed_out_within" => x.timed_out_within, "emulated_share64" => x.emulated_share64,
                "real_share64" => x.real_share64, "share64_within" => x.share64_within)
        })
        .collect::<PyResult<Vec<_>>>()?;
    let iso = r
        .isolated
        .iter()
        .map(|x| pydict!(py; "rpu" => x.rpu, "runs" => x.runs, "emulated_mean" => x.emulated_mean, "real_mean" => x.real_mean, "relative_error" => x.relative_error, "within" => x.within))
        .collect::<PyResult<Vec<_>>>()?;
    let noise = r
        .noise
        .iter()
        .map(|x| {
            pydict!(py; "rpu" => x.rpu, "real_entries" => x.real_entries, "emulated_groups" => x.emulated_groups, "real_log_std_p50" => x.real_log_std[0],
                "emulated_log_std_p50" => x.emulated_log_std[0], "real_log_std_p90" => x.real_log_std[1], "emulated_log_std_p90" => x.emulated_log_std[1],
                "checked" => x.checked, "within" => x.within)
        })
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("seed", r.seed)?;
    d.set_item("seeds", r.seeds)?;
    d.set_item("fit_seed", calibration::FIT_SEED)?;
    d.set_item("bins", bins)?;
    d.set_item("load", load)?;
    d.set_item("isolated", iso)?;
    d.set_item("noise", noise)?;
    d.set_item("min_rows", calibration::MIN_ROWS)?;
    d.set_item("median_tolerance", calibration::MEDIAN_TOLERANCE)?;
    d.set_item("timeout_tolerance", calibration::TIMEOUT_TOLERANCE)?;
    d.set_item("share64_tolerance", calibration::SHARE64_TOLERANCE)?;
    d.set_item("isolated_tolerance", calibration::ISOLATED_TOLERANCE)?;
    d.set_item("noise_tolerance", calibration::NOISE_TOLERANCE)?;
    d.set_item("passed", r.passed())?;
    Ok(d.unbind())
}

/// Fit the emulator's interference parameters on the fit seed stream; returns the parameter file
/// text (what `python/autoslo/data/interference.csv` ships) and per-size losses.
#[pyfunction]
#[pyo3(signature = (seeds=30, random_candidates=500, budget=2000, search_seed=1, progress=None))]
fn calibrate_fit(py: Python<'_>, seeds: u64, random_candidates: usize, budget: usize, #[pyo3(from_py_with = crate::convert::seed)] search_seed: u64, progress: Option<Py<PyAny>>) -> PyResult<(String, Vec<(u32, f64, usize)>)> {
    let cfg = EmulatorConfig::default();
    let opts = calibration::FitOptions { seeds, random_candidates, budget, search_seed };
    let raised = Raised::default();
    let fit = py.detach(|| {
        let mut report = progress_reporter(&progress, &raised);
        calibration::fit(&cfg, None, &opts, &mut report)
    });
    let r = raised.or(fit)?;
    Ok((r.to_csv(), r.sizes.iter().map(|s| (s.rpu, s.loss, s.evaluations)).collect()))
}

/// Batch billing: billed seconds of busy intervals under the §2 timer.
#[pyfunction]
#[pyo3(signature = (intervals, minimum_s=60.0))]
fn billed_seconds(intervals: Vec<(f64, f64)>, minimum_s: f64) -> PyResult<f64> {
    billing::billed_seconds(&intervals, minimum_s).map_err(err)
}

/// The incremental billing timer of one cluster (§2).
#[pyclass(name = "BillingTimer", module = "autoslo._core")]
#[derive(Clone)]
struct PyBillingTimer {
    inner: BillingTimer,
}

#[pymethods]
impl PyBillingTimer {
    #[new]
    #[pyo3(signature = (minimum_s=60.0))]
    fn new(minimum_s: f64) -> PyResult<Self> {
        if !(minimum_s.is_finite() && minimum_s >= 0.0) {
            return Err(AutoSloCoreError::new_err(format!("billing minimum must be ≥ 0 s, got {minimum_s}")));
        }
        Ok(Self { inner: BillingTimer::new(minimum_s) })
    }
    /// A query arrived at the cluster at `now`.
    fn on_arrival(&mut self, now: f64) -> PyResult<()> {
        self.inner.on_arrival(now).map_err(err)
    }
    /// The cluster's last query left at `now`.
    fn on_idle(&mut self, now: f64) -> PyResult<()> {
        self.inner.on_idle(now).map_err(err)
    }
    /// Billed seconds up to `now`.
    fn billed_seconds_at(&self, now: f64) -> f64 {
        self.inner.billed_seconds_at(now)
    }
    /// Billed seconds once the timer pauses if the cluster drains at `drain_at`.
    fn billed_seconds_until_drained(&self, drain_at: f64) -> f64 {
        self.inner.billed_seconds_until_drained(drain_at)
    }
    /// ClusterCostUntilDrained in dollars for a cluster of `rpu`, optionally adding a query at `arrival_at` first.
    #[pyo3(signature = (rpu, drain_at, arrival_at=None, price_per_rpu_hour=0.375))]
    fn cost_until_drained(&self, rpu: u32, drain_at: f64, arrival_at: Option<f64>, price_per_rpu_hour: f64) -> PyResult<f64> {
        let policy = billing::BillingPolicy { price_per_rpu_hour, minimum_s: 0.0 }.validated().map_err(err)?;
        billing::cluster_cost_until_drained(&self.inner, &policy, rpu, arrival_at, drain_at).map_err(err)
    }
    fn copy(&self) -> Self {
        self.clone()
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("AutoSloCoreError", m.py().get_type::<AutoSloCoreError>())?;
    m.add("ROUTING_POLICIES", router::ROUTING_POLICIES.to_vec())?;
    m.add("ROUTER_SEARCHES", router::Search::NAMES.to_vec())?;
    m.add("ARRIVAL_FEATURES", autoslo_core::predictor::arrival::ARRIVAL_FEATURES.to_vec())?;
    m.add("DEFAULT_SLO_HEADROOM", router::DEFAULT_SLO_HEADROOM)?;
    m.add("DEFAULT_SELECTOR_HEADROOM", autoslo_core::autoscaler::DEFAULT_SELECTOR_HEADROOM)?;
    m.add("DEFAULT_MU", autoslo_core::autoscaler::DEFAULT_MU)?;
    m.add("DEFAULT_AUTOSLO_MU", autoslo_core::autoscaler::DEFAULT_AUTOSLO_MU)?;
    m.add("DEFAULT_COST_TOLERANCE", autoslo_core::tuner::DEFAULT_COST_TOLERANCE)?;
    m.add("DEFAULT_T_IDLE_S", autoslo_core::tuner::DEFAULT_T_IDLE_S.to_vec())?;
    m.add("DEFAULT_TAU_TRIGGER", autoslo_core::tuner::DEFAULT_TAU_TRIGGER.to_vec())?;
    m.add("SCALING_POLICIES", autoslo_core::autoscaler::SCALING_POLICIES.to_vec())?;
    m.add("TRIGGERS", autoslo_core::autoscaler::TRIGGERS.to_vec())?;
    m.add("AUTOSCALER_SETTINGS", scaling::SPEC_KEYS.to_vec())?;
    m.add("SQL_DIALECTS", autoslo_core::sql::Dialect::NAMES.to_vec())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(isolated_runtime, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_table, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_fit_report, m)?)?;
    m.add_function(wrap_pyfunction!(is_base_capacity, m)?)?;
    m.add("BASE_CAPACITIES", autoslo_core::cluster::BASE_CAPACITIES)?;
    m.add_function(wrap_pyfunction!(jain_index, m)?)?;
    m.add_function(wrap_pyfunction!(canopy_report, m)?)?;
    m.add_function(wrap_pyfunction!(mercury_report, m)?)?;
    m.add_function(wrap_pyfunction!(apply_slo_policy, m)?)?;
    m.add_function(wrap_pyfunction!(slo_policy_tiers, m)?)?;
    m.add_function(wrap_pyfunction!(slo_for, m)?)?;
    m.add_function(wrap_pyfunction!(base_workload, m)?)?;
    m.add_function(wrap_pyfunction!(phased_workload, m)?)?;
    m.add_function(wrap_pyfunction!(redbench_workload, m)?)?;
    m.add_function(wrap_pyfunction!(validate_workload, m)?)?;
    m.add_function(wrap_pyfunction!(emulate, m)?)?;
    m.add_function(wrap_pyfunction!(calibrate, m)?)?;
    m.add_function(wrap_pyfunction!(calibrate_fit, m)?)?;
    m.add_function(wrap_pyfunction!(billed_seconds, m)?)?;
    m.add_class::<PyBillingTimer>()?;
    m.add_function(wrap_pyfunction!(predictor::predictor_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(predictor::stage_estimates, m)?)?;
    m.add_function(wrap_pyfunction!(predictor::stage_class_estimates, m)?)?;
    m.add_function(wrap_pyfunction!(predictor::stage_class_paths, m)?)?;
    m.add_function(wrap_pyfunction!(predictor::interaction_feature_names, m)?)?;
    m.add_class::<predictor::PyPredictor>()?;
    m.add_class::<predictor::PyClusterPredictor>()?;
    m.add_class::<predictor::PyCounterfactual>()?;
    m.add_function(wrap_pyfunction!(live::simulate, m)?)?;
    m.add_class::<live::PyRouter>()?;
    m.add_class::<live::PyControlPlane>()?;
    m.add_function(wrap_pyfunction!(tuner::validate_execution_config, m)?)?;
    m.add_function(wrap_pyfunction!(scaling::validate_autoscaler, m)?)?;
    m.add_function(wrap_pyfunction!(validate_queue, m)?)?;
    m.add_function(wrap_pyfunction!(validate_deferral, m)?)?;
    m.add_function(wrap_pyfunction!(validate_ejection, m)?)?;
    m.add_function(wrap_pyfunction!(tuner::tuner_settings, m)?)?;
    m.add_function(wrap_pyfunction!(tuner::learned_tau_simulated, m)?)?;
    m.add_function(wrap_pyfunction!(tuner::untuned_config, m)?)?;
    m.add_function(wrap_pyfunction!(tuner::forecast, m)?)?;
    m.add_function(wrap_pyfunction!(tuner::simulate_batch, m)?)?;
    m.add_function(wrap_pyfunction!(tuner::simulate_pairs, m)?)?;
    m.add_function(wrap_pyfunction!(tuner::find_good_spinup_time, m)?)?;
    m.add_function(wrap_pyfunction!(tuner::tune, m)?)?;
    m.add_function(wrap_pyfunction!(hindsight::hindsight, m)?)?;
    m.add_function(wrap_pyfunction!(hindsight::evaluate_plans, m)?)?;
    m.add_function(wrap_pyfunction!(hindsight::hindsight_space, m)?)?;
    m.add("DEFAULT_HINDSIGHT_PLANS", autoslo_core::tuner::DEFAULT_HINDSIGHT_PLANS)?;
    cloud::register(m)?;
    history::register(m)?;
    Ok(())
}
