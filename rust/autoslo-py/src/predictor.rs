//! Bindings of the Latency Predictor: model loading, incremental per-cluster state, and the
//! dataset builder that training in PyTorch consumes. Conversions only.

use std::path::PathBuf;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, UInt64Type};
use arrow_schema::DataType;
use autoslo_core::catalog::QueryText;
use autoslo_core::predictor::{self, Backend, ClassFeatures, ClusterState, Counterfactual, Dataset, DatasetOptions, FeatureOptions, Featurizer, Predictor, QueryRef, Stage, TraceQuery};
use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::PyTable;

use crate::convert::{column, need};
use crate::{err, AutoSloCoreError};

fn text(template: u16, instance: u16) -> QueryText {
    QueryText { template, instance }
}

/// Trace table → rows (columns as written by `emulate`; `run` optional, default 0). A trace of a
/// history's queries names each by `class_id` (uint64) instead of `template` and `instance`.
fn trace_rows(t: PyTable) -> PyResult<Vec<TraceQuery>> {
    let (batches, schema) = t.into_inner();
    let i = |name: &str| -> PyResult<Vec<i64>> { Ok(need(column(&batches, &schema, name, &DataType::Int64)?, name)?.as_primitive::<Int64Type>().values().to_vec()) };
    let f = |name: &str| -> PyResult<Vec<f64>> { Ok(need(column(&batches, &schema, name, &DataType::Float64)?, name)?.as_primitive::<Float64Type>().values().to_vec()) };
    let (qid, cl, size) = (i("query_id")?, i("cluster_id")?, i("cluster_size")?);
    let classes: Option<Vec<u64>> = match (schema.index_of("template"), column(&batches, &schema, "class_id", &DataType::UInt64)?) {
        (Err(_), Some(c)) => Some(c.as_primitive::<UInt64Type>().values().to_vec()),
        _ => None,
    };
    let (tpl, inst) = match classes {
        Some(_) => (Vec::new(), Vec::new()),
        None => (i("template")?, i("instance")?),
    };
    let (arr, end) = (f("arrival")?, f("end")?);
    let cens: Vec<bool> = need(column(&batches, &schema, "censored", &DataType::Boolean)?, "censored")?.as_boolean().iter().map(|b| b.unwrap_or(false)).collect();
    let run = match column(&batches, &schema, "run", &DataType::Int64)? {
        Some(a) => a.as_primitive::<Int64Type>().values().to_vec(),
        None => vec![0; qid.len()],
    };
    let mut rows = Vec::with_capacity(qid.len());
    for k in 0..qid.len() {
        let bad = |c: &str, v: i64| AutoSloCoreError::new_err(format!("row {k}: column `{c}` value {v} is out of range"));
        let query = match &classes {
            Some(c) => QueryRef::Class(c[k]),
            None => QueryRef::Tpcds(text(u16::try_from(tpl[k]).map_err(|_| bad("template", tpl[k]))?, u16::try_from(inst[k]).map_err(|_| bad("instance", inst[k]))?)),
        };
        rows.push(TraceQuery {
            run: u32::try_from(run[k]).map_err(|_| bad("run", run[k]))?,
            query_id: u64::try_from(qid[k]).map_err(|_| bad("query_id", qid[k]))?,
            query,
            cluster: cl[k],
            cluster_size: u32::try_from(size[k]).map_err(|_| bad("cluster_size", size[k]))?,
            arrival: arr[k],
            end: end[k],
            censored: cens[k],
        });
    }
    Ok(rows)
}

fn dataset_dict<'py>(py: Python<'py>, ds: Dataset) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let nq = ds.queries.len();
    let qf: Vec<f32> = ds.queries.iter().flat_map(|q| q.f).collect();
    d.set_item("query_features", qf.into_pyarray(py).reshape([nq, predictor::features::QUERY_DIM])?)?;
    d.set_item("query_id", ds.rows.iter().map(|r| r.query_id as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("run", ds.rows.iter().map(|r| r.run as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("cluster_size", ds.rows.iter().map(|r| r.cluster_size as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("stage_s", ds.queries.iter().map(|q| q.stage_s).collect::<Vec<_>>().into_pyarray(py))?;
    let np = ds.pair_target.len();
    d.set_item("pair_target", ds.pair_target.iter().map(|&x| x as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("pair_neighbour", ds.pair_neighbour.iter().map(|&x| x as i64).collect::<Vec<_>>().into_pyarray(py))?;
    let extra: Vec<f32> = ds.pair_extra.iter().flatten().copied().collect();
    d.set_item("pair_extra", extra.into_pyarray(py).reshape([np, predictor::dataset::EXTRA_DIM])?)?;
    let s = &ds.samples;
    d.set_item("target", s.iter().map(|x| x.target as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("before_off", s.iter().map(|x| x.before.0 as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("before_len", s.iter().map(|x| x.before.1 as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("after_off", s.iter().map(|x| x.after.0 as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("after_len", s.iter().map(|x| x.after.1 as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("ln_label", s.iter().map(|x| x.ln_label).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("censored", s.iter().map(|x| x.censored).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("partial", s.iter().map(|x| x.partial).collect::<Vec<_>>().into_pyarray(py))?;
    Ok(d)
}

/// Build Iconq+ samples from a trace table (see `autoslo.predictor.dataset`); `classes_path`: the
/// `classes.json` of a history's classes, for a trace of them.
#[pyfunction]
#[pyo3(signature = (trace, stage_path, size_features=true, after_chronological=true, censored_prob=0.0, seed=0, keep_timeouts=true, classes_path=None))]
#[allow(clippy::too_many_arguments)]
pub fn predictor_dataset<'py>(
    py: Python<'py>,
    trace: PyTable,
    stage_path: PathBuf,
    size_features: bool,
    after_chronological: bool,
    censored_prob: f64,
    #[pyo3(from_py_with = crate::convert::seed)] seed: u64,
    keep_timeouts: bool,
    classes_path: Option<PathBuf>,
) -> PyResult<Bound<'py, PyDict>> {
    let rows = trace_rows(trace)?;
    let stage = Stage::load(&stage_path).map_err(err)?;
    let classes = classes_path.map(|p| ClassFeatures::load(&p)).transpose().map_err(err)?;
    let opts = DatasetOptions { features: FeatureOptions { size_features }, after_chronological, censored_prob, seed, keep_timeouts };
    let ds = py.detach(|| Dataset::build(&rows, &Featurizer { stage: &stage, classes: classes.as_ref() }, opts)).map_err(err)?;
    dataset_dict(py, ds)
}

/// Stage estimates (s) for arrays of (template, instance, rpu) from a `stage.json`.
#[pyfunction]
#[pyo3(signature = (stage_path, template, instance, rpu, use_cache=true))]
pub fn stage_estimates(stage_path: PathBuf, template: Vec<u16>, instance: Vec<u16>, rpu: Vec<u32>, use_cache: bool) -> PyResult<Vec<f64>> {
    if template.len() != instance.len() || template.len() != rpu.len() {
        return Err(AutoSloCoreError::new_err("template, instance and rpu must have the same length"));
    }
    let stage = Stage::load(&stage_path).map_err(err)?;
    (0..template.len())
        .map(|k| {
            let t = text(template[k], instance[k]);
            if use_cache { stage.estimate(t, rpu[k]) } else { stage.model_estimate(t, rpu[k]) }
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)
}

/// Stage estimates (s) of a history's classes: `plans` holds each row's 34 plan features.
#[pyfunction]
#[pyo3(signature = (stage_path, class_id, plans, rpu, use_cache=true))]
pub fn stage_class_estimates(stage_path: PathBuf, class_id: Vec<u64>, plans: Vec<Vec<f32>>, rpu: Vec<u32>, use_cache: bool) -> PyResult<Vec<f64>> {
    if class_id.len() != plans.len() || class_id.len() != rpu.len() {
        return Err(AutoSloCoreError::new_err("class_id, plans and rpu must have the same length"));
    }
    let stage = Stage::load(&stage_path).map_err(err)?;
    (0..class_id.len())
        .map(|k| {
            let plan: &[f32; predictor::features::PLAN_DIM] = plans[k].as_slice().try_into().map_err(|_| AutoSloCoreError::new_err(format!("row {k}: {} plan features, expected {}", plans[k].len(), predictor::features::PLAN_DIM)))?;
            if use_cache { stage.estimate_class(class_id[k], plan, rpu[k]) } else { stage.model_estimate_plan(plan, rpu[k]) }.map_err(err)
        })
        .collect()
}

/// Which path each (class, size) takes in a history model's Stage: `measured`, `size_law` or
/// `features`.
#[pyfunction]
pub fn stage_class_paths(stage_path: PathBuf, class_id: Vec<u64>, rpu: Vec<u32>) -> PyResult<Vec<&'static str>> {
    if class_id.len() != rpu.len() {
        return Err(AutoSloCoreError::new_err("class_id and rpu must have the same length"));
    }
    let stage = Stage::load(&stage_path).map_err(err)?;
    let plan = [0f32; predictor::features::PLAN_DIM];
    class_id.iter().zip(&rpu).map(|(&c, &r)| Ok(stage.estimate_class_path(c, &plan, r).map_err(err)?.1.name())).collect()
}

/// Names of the interaction-feature vector's components.
#[pyfunction]
pub fn interaction_feature_names() -> Vec<String> {
    predictor::features::interaction_feature_names()
}

/// A loaded Latency Predictor (Stage + Iconq+), verified against libtorch on load.
#[pyclass(name = "Predictor", module = "autoslo._core", frozen)]
pub struct PyPredictor {
    pub(crate) inner: Predictor,
}

#[pymethods]
impl PyPredictor {
    #[new]
    #[pyo3(signature = (path, backend="native"))]
    fn new(py: Python<'_>, path: PathBuf, backend: &str) -> PyResult<Self> {
        let b = Backend::parse(backend).map_err(err)?;
        let inner = py.detach(|| Predictor::load(&path, b)).map_err(err)?;
        Ok(Self { inner })
    }

    /// The model's metadata (meta.json) as a dict.
    #[getter]
    fn meta<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = &self.inner.meta;
        let d = PyDict::new(py);
        d.set_item("variant", &m.variant)?;
        d.set_item("size_features", m.size_features)?;
        d.set_item("after_chronological", m.after_chronological)?;
        d.set_item("censored_prob", m.censored_prob)?;
        d.set_item("embedding", m.embedding)?;
        d.set_item("hidden", m.hidden)?;
        d.set_item("feature_version", m.feature_version)?;
        d.set_item("model_sha256", &m.model_sha256)?;
        d.set_item("training_data_sha256", &m.training_data_sha256)?;
        d.set_item("arrival_sha256", &m.arrival_sha256)?;
        d.set_item("path", self.inner.dir.display().to_string())?;
        Ok(d)
    }

    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.kernel().name()
    }

    /// Largest |native − libtorch| (ln s) seen when the model was verified on load.
    #[getter]
    fn verified_max_abs_diff(&self) -> f32 {
        self.inner.verified_max_abs_diff
    }

    /// Re-verify native against libtorch on `n` probe samples; returns the largest |difference|.
    #[pyo3(signature = (n=64, seed=1))]
    fn verify(&self, py: Python<'_>, n: usize, #[pyo3(from_py_with = crate::convert::seed)] seed: u64) -> PyResult<f32> {
        py.detach(|| self.inner.verify(n, seed)).map_err(err)
    }

    /// This predictor serving through another backend ("native" or "tch").
    fn with_backend(&self, backend: &str) -> PyResult<Self> {
        Ok(Self { inner: self.inner.with_backend(Backend::parse(backend).map_err(err)?) })
    }

    /// Whether at-arrival predictions go through a fitted correction (`arrival.json`).
    #[getter]
    fn has_arrival_correction(&self) -> bool {
        self.inner.arrival.is_some()
    }

    /// This predictor without its at-arrival correction (raw Iconq+ at arrival; for ablations).
    fn without_arrival_correction(&self) -> Self {
        Self { inner: self.inner.without_arrival_correction() }
    }

    /// The prediction (s) the router uses for a query arriving with Iconq+ prediction
    /// ``prediction`` and Stage estimate ``stage`` on a cluster of ``size`` RPU running ``running``
    /// queries: ``prediction`` through the at-arrival correction, if any.
    fn at_arrival(&self, prediction: f64, stage: f64, size: u32, running: usize) -> PyResult<f64> {
        if !(prediction > 0.0 && prediction.is_finite() && stage > 0.0 && stage.is_finite()) || size == 0 {
            return Err(AutoSloCoreError::new_err(format!("at_arrival needs positive finite prediction and stage and size ≥ 1 (got {prediction}, {stage}, {size})")));
        }
        Ok(self.inner.at_arrival(prediction, stage, size, running))
    }

    /// Replay each (run, cluster) of a trace through the incremental predictor and return, per
    /// query, what the router would know at its arrival: ``inputs`` (n × 5, see
    /// ``ARRIVAL_FEATURES``), ``ln_prediction`` (raw Iconq+), ``ln_latency`` (observed; a lower
    /// bound where ``censored``), ``cluster_size``, ``stage_s`` and ``running``.
    fn arrival_samples<'py>(&self, py: Python<'py>, trace: PyTable) -> PyResult<Bound<'py, PyDict>> {
        let rows = trace_rows(trace)?;
        let s = py.detach(|| predictor::arrival::arrival_samples(&self.inner, &rows)).map_err(err)?;
        let d = PyDict::new(py);
        let x: Vec<f32> = s.iter().flat_map(|a| a.inputs).collect();
        d.set_item("inputs", x.into_pyarray(py).reshape([s.len(), predictor::arrival::ARRIVAL_DIM])?)?;
        d.set_item("ln_prediction", s.iter().map(|a| a.ln_prediction).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("ln_latency", s.iter().map(|a| a.ln_latency).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("censored", s.iter().map(|a| a.censored).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("cluster_size", s.iter().map(|a| a.size as i64).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("stage_s", s.iter().map(|a| a.stage_s).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("running", s.iter().map(|a| a.running as i64).collect::<Vec<_>>().into_pyarray(py))?;
        Ok(d)
    }

    /// Stage's isolated-runtime estimate (s).
    fn stage_estimate(&self, #[pyo3(from_py_with = crate::convert::template)] template: u16, #[pyo3(from_py_with = crate::convert::instance)] instance: u16, #[pyo3(from_py_with = crate::convert::size)] rpu: u32) -> PyResult<f64> {
        self.inner.stage.estimate(text(template, instance), rpu).map_err(err)
    }

    /// Incremental predictor state of an idle cluster of `size` RPU.
    fn cluster(&self, size: u32) -> PyResult<PyClusterPredictor> {
        Ok(PyClusterPredictor { model: self.inner.clone(), state: self.inner.cluster(size).map_err(err)? })
    }

    /// Predict every query of a trace from its full neighbour sets (offline evaluation).
    /// Returns a dict with `query_id`, `run`, `cluster_size`, `ln_pred`, `ln_label`, `censored`, `stage_s`.
    fn predict_trace<'py>(&self, py: Python<'py>, trace: PyTable) -> PyResult<Bound<'py, PyDict>> {
        let rows = trace_rows(trace)?;
        let (ds, pred) = py
            .detach(|| -> autoslo_core::Result<_> {
                let ds = Dataset::build(&rows, &self.inner.featurizer(), self.inner.eval_options())?;
                let p = ds.predict(self.inner.kernel())?;
                Ok((ds, p))
            })
            .map_err(err)?;
        let d = PyDict::new(py);
        let s = &ds.samples;
        let row = |x: &predictor::dataset::Sample| &ds.rows[x.target as usize];
        d.set_item("query_id", s.iter().map(|x| row(x).query_id as i64).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("run", s.iter().map(|x| row(x).run as i64).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("cluster_size", s.iter().map(|x| row(x).cluster_size as i64).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("stage_s", s.iter().map(|x| ds.queries[x.target as usize].stage_s).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("ln_pred", pred.into_pyarray(py))?;
        d.set_item("ln_label", s.iter().map(|x| x.ln_label).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("censored", s.iter().map(|x| x.censored).collect::<Vec<_>>().into_pyarray(py))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("Predictor(variant={:?}, backend={:?}, path={:?})", self.inner.meta.variant, self.inner.kernel().name(), self.inner.dir.display().to_string())
    }
}

/// A counterfactual arrival on one cluster (not committed).
#[pyclass(name = "Counterfactual", module = "autoslo._core", frozen)]
pub struct PyCounterfactual {
    inner: Counterfactual,
    ids: Vec<u64>,
}

#[pymethods]
impl PyCounterfactual {
    /// Predicted latency (s) of the added query.
    #[getter]
    fn prediction(&self) -> f64 {
        self.inner.prediction()
    }
    /// (query id, updated prediction s) of the running queries.
    #[getter]
    fn updated(&self) -> Vec<(u64, f64)> {
        self.ids.iter().copied().zip(self.inner.updated_predictions()).collect()
    }
}

/// Incremental Iconq+ state of one cluster: add arrivals, ask counterfactuals, commit, complete.
#[pyclass(name = "ClusterPredictor", module = "autoslo._core")]
pub struct PyClusterPredictor {
    model: Predictor,
    state: ClusterState,
}

impl PyClusterPredictor {
    fn features(&self, query_id: u64, template: u16, instance: u16, arrival: f64) -> PyResult<predictor::QueryFeatures> {
        self.model.query(query_id, text(template, instance), arrival, self.state.size()).map_err(err)
    }
}

#[pymethods]
impl PyClusterPredictor {
    /// Add an arrival; returns (its predicted latency s, [(id, updated prediction s) of the running queries]).
    fn add_arrival(&mut self, py: Python<'_>, #[pyo3(from_py_with = crate::convert::query_id)] query_id: u64, #[pyo3(from_py_with = crate::convert::template)] template: u16, #[pyo3(from_py_with = crate::convert::instance)] instance: u16, arrival: f64) -> PyResult<(f64, Vec<(u64, f64)>)> {
        let q = self.features(query_id, template, instance, arrival)?;
        let (model, state) = (&self.model, &mut self.state);
        let u = py.detach(|| state.add_arrival(model.kernel(), q)).map_err(err)?;
        Ok((u.prediction, u.updated))
    }

    /// The effect of adding a query, without committing it.
    fn counterfactual(&self, py: Python<'_>, #[pyo3(from_py_with = crate::convert::query_id)] query_id: u64, #[pyo3(from_py_with = crate::convert::template)] template: u16, #[pyo3(from_py_with = crate::convert::instance)] instance: u16, arrival: f64) -> PyResult<PyCounterfactual> {
        let q = self.features(query_id, template, instance, arrival)?;
        let cf = py.detach(|| self.state.counterfactual(self.model.kernel(), q)).map_err(err)?;
        Ok(PyCounterfactual { inner: cf, ids: self.state.running().iter().map(|r| r.query.id).collect() })
    }

    /// Commit a counterfactual computed from this exact state.
    fn commit(&mut self, cf: &PyCounterfactual) -> PyResult<()> {
        self.state.commit(cf.inner.clone()).map_err(err)
    }

    /// A running query completed.
    fn complete(&mut self, #[pyo3(from_py_with = crate::convert::query_id)] query_id: u64) -> PyResult<()> {
        self.state.complete(query_id).map(|_| ()).map_err(err)
    }

    /// (id, predicted latency s) of every running query.
    fn predictions(&self) -> Vec<(u64, f64)> {
        self.state.predictions().collect()
    }

    /// An independent copy (for simulation branches).
    fn copy(&self) -> Self {
        Self { model: self.model.clone(), state: self.state.clone() }
    }

    #[getter]
    fn size(&self) -> u32 {
        self.state.size()
    }

    fn __len__(&self) -> usize {
        self.state.len()
    }
}
