//! A warehouse's own history from Python: conversions only (`autoslo.predictor.history`).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use autoslo_core::history::{self, ClassInput, ClassSource, PlanInput};
use autoslo_core::plan::{from_explain_rows, ExplainRow, PlanSchema};
use autoslo_core::sql::Dialect;
use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_arrow::{PyArray, PyTable};

use crate::{err, AutoSloCoreError};

fn bad(problem: impl ToString) -> PyErr {
    AutoSloCoreError::new_err(problem.to_string())
}

/// Each text's class (all cores): a table of `class_id` (uint64), `raw` (the tokenizer could not
/// read it) and `select` per text, in order, and one of `class_id`, `text` per distinct class.
/// A null text is an empty one. `hashes` (optional, nulls allowed): each statement's `generic_query_hash`, which then names
/// its class.
#[pyfunction]
#[pyo3(signature = (texts, dialect = "redshift", hashes = None))]
fn classify_sql(py: Python<'_>, texts: PyArray, dialect: &str, hashes: Option<PyArray>) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let dialect = Dialect::parse(dialect).map_err(err)?;
    // Text of either offset width as it is (no copy), anything else cast; a null is an empty text.
    let cast;
    let arr = texts.array();
    let refs: Vec<&str> = match arr.data_type() {
        DataType::Utf8 => arr.as_string::<i32>().iter().map(|s| s.unwrap_or("")).collect(),
        DataType::LargeUtf8 => arr.as_string::<i64>().iter().map(|s| s.unwrap_or("")).collect(),
        _ => {
            cast = arrow_cast::cast(arr, &DataType::LargeUtf8).map_err(|e| bad(format!("texts: {e}")))?;
            cast.as_string::<i64>().iter().map(|s| s.unwrap_or("")).collect()
        }
    };
    let h = match &hashes {
        Some(h) => Some(arrow_cast::cast(h.array(), &DataType::LargeUtf8).map_err(|e| bad(format!("hashes: {e}")))?),
        None => None,
    };
    let hrefs: Option<Vec<Option<&str>>> = h.as_ref().map(|h| h.as_string::<i64>().iter().collect());
    if hrefs.as_ref().is_some_and(|h| h.len() != refs.len()) {
        return Err(bad("texts and hashes must have one entry per statement"));
    }
    let out = py.detach(|| history::classify(&refs, hrefs.as_deref(), dialect));
    let ids: ArrayRef = Arc::new(UInt64Array::from_iter_values(out.rows.iter().map(|c| c.id)));
    let raw: ArrayRef = Arc::new(BooleanArray::from_iter(out.rows.iter().map(|c| Some(c.source == ClassSource::Raw))));
    let select: ArrayRef = Arc::new(BooleanArray::from_iter(out.rows.iter().map(|c| Some(c.select))));
    let classes: BTreeMap<u64, &str> = out.texts.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let per_row = table(vec![("class_id", ids), ("raw", raw), ("select", select)])?;
    let cids: ArrayRef = Arc::new(UInt64Array::from_iter_values(classes.keys().copied()));
    let ctexts: ArrayRef = Arc::new(StringArray::from_iter_values(classes.values().copied()));
    let distinct = table(vec![("class_id", cids), ("text", ctexts)])?;
    Ok((per_row.into_pyarrow(py)?.unbind(), distinct.into_pyarrow(py)?.unbind()))
}

fn table(columns: Vec<(&str, ArrayRef)>) -> PyResult<PyTable> {
    let fields: Vec<Field> = columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), false)).collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns.into_iter().map(|c| c.1).collect()).map_err(bad)?;
    PyTable::try_new(vec![batch], schema)
}

/// `SYS_QUERY_EXPLAIN` rows (query_id, child_query_sequence, plan_node_id, plan_parent_id,
/// plan_node) as core rows.
fn explain_rows(t: PyTable) -> PyResult<Vec<ExplainRow>> {
    let (batches, schema) = t.into_inner();
    let mut rows = Vec::new();
    for b in batches {
        let col = |name: &str| -> PyResult<ArrayRef> {
            let i = schema.index_of(name).map_err(|_| bad(format!("plan rows lack the column `{name}`")))?;
            Ok(b.column(i).clone())
        };
        let ints = |name: &str| -> PyResult<Vec<i64>> {
            let a = arrow_cast::cast(&col(name)?, &DataType::Int64).map_err(|e| bad(format!("plan rows, `{name}`: {e}")))?;
            let a = a.as_primitive::<arrow_array::types::Int64Type>();
            if a.null_count() > 0 {
                return Err(bad(format!("plan rows, `{name}`: {} nulls", a.null_count())));
            }
            Ok(a.values().to_vec())
        };
        let (q, s, n, p) = (ints("query_id")?, ints("child_query_sequence")?, ints("plan_node_id")?, ints("plan_parent_id")?);
        let text = arrow_cast::cast(&col("plan_node")?, &DataType::LargeUtf8).map_err(|e| bad(format!("plan rows, `plan_node`: {e}")))?;
        let text = text.as_string::<i64>();
        for i in 0..b.num_rows() {
            rows.push(ExplainRow { query_id: q[i], child_query_sequence: s[i], plan_node_id: n[i], plan_parent_id: p[i], plan_node: text.value(i).to_string() });
        }
    }
    Ok(rows)
}

/// Plan features of every class. Per class: one statement's SQL (or None), its plan (`formats[i]`
/// `text` or `json` with `plans[i]` the EXPLAIN output; `rows` with `plan_queries[i]` the query id
/// whose `SYS_QUERY_EXPLAIN` rows in `explain` are its plan; `none`) and its executions. Returns
/// a dict: `features` (float32, classes × 34), `sources` and `problems` (lists), `schema` (JSON)
/// and `names` (the 34 feature names).
#[pyfunction]
#[pyo3(signature = (sql, plans, formats, executions, plan_queries = None, explain = None, dialect = "redshift"))]
#[allow(clippy::too_many_arguments)]
fn featurize_classes<'py>(
    py: Python<'py>,
    sql: Vec<Option<String>>,
    plans: Vec<Option<String>>,
    formats: Vec<String>,
    executions: Vec<f64>,
    plan_queries: Option<Vec<Option<i64>>>,
    explain: Option<PyTable>,
    dialect: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let dialect = Dialect::parse(dialect).map_err(err)?;
    let n = sql.len();
    if plans.len() != n || formats.len() != n || executions.len() != n || plan_queries.as_ref().is_some_and(|p| p.len() != n) {
        return Err(bad("sql, plans, formats, executions (and plan_queries) must have one entry per class"));
    }
    let mut by_query = match explain {
        Some(t) => from_explain_rows(&explain_rows(t)?).map_err(err)?,
        None => BTreeMap::new(),
    };
    let mut inputs = Vec::with_capacity(n);
    for (i, ((s, p), f)) in sql.into_iter().zip(plans).zip(&formats).enumerate() {
        let plan = match (f.as_str(), p) {
            ("none", _) => PlanInput::None,
            ("text", Some(t)) => PlanInput::Text(t),
            ("json", Some(j)) => PlanInput::Json(j),
            ("rows", _) => {
                let q = plan_queries.as_ref().and_then(|p| p[i]).ok_or_else(|| bad(format!("class {i}: format `rows` needs its plan_queries entry")))?;
                match by_query.remove(&q) {
                    Some(s) => PlanInput::Summary(s),
                    None => PlanInput::None,
                }
            }
            ("text" | "json", None) => return Err(bad(format!("class {i}: format `{f}` without a plan"))),
            (other, _) => return Err(bad(format!("class {i}: unknown plan format `{other}` (known: text, json, rows, none)"))),
        };
        inputs.push(ClassInput { sql: s, plan, executions: executions[i] });
    }
    let f = py.detach(|| history::featurize(&inputs, dialect));
    let d = PyDict::new(py);
    let flat: Vec<f32> = f.vectors.iter().flatten().copied().collect();
    d.set_item("features", flat.into_pyarray(py).reshape([n, autoslo_core::predictor::features::PLAN_DIM])?)?;
    d.set_item("sources", f.sources.iter().map(|s| s.name()).collect::<Vec<_>>())?;
    d.set_item("problems", f.problems)?;
    d.set_item("names", f.schema.names())?;
    d.set_item("schema", f.schema.to_json())?;
    Ok(d)
}

/// Check a plan schema's JSON and return its 34 feature names.
#[pyfunction]
fn plan_schema_names(schema: &str) -> PyResult<Vec<String>> {
    Ok(PlanSchema::from_json(schema).map_err(err)?.names())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(classify_sql, m)?)?;
    m.add_function(wrap_pyfunction!(featurize_classes, m)?)?;
    m.add_function(wrap_pyfunction!(plan_schema_names, m)?)?;
    Ok(())
}
