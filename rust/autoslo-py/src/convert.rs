//! Arrow ⇄ core conversions.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder, UInt32Builder};
use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use arrow_array::TimestampMicrosecondArray;
use autoslo_cloud::serve::{ServedQuery, ServedTotals};
use autoslo_core::autoscaler::{Branch, Decision};
use autoslo_core::catalog;
use autoslo_core::trace::Trace;
use autoslo_core::workload::{Workload, WorkloadColumns};
use pyo3::prelude::*;
use pyo3_arrow::PyTable;

use crate::AutoSloCoreError;

/// A seed argument (`from_py_with`): a whole number from 0 to 2**64 − 1. A negative or too
/// large int is a `ValueError` saying so, where pyo3's own `OverflowError` says only "can't
/// convert negative int to unsigned".
pub fn seed(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    obj.extract::<u64>().map_err(|e| if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(obj.py()) { pyo3::exceptions::PyValueError::new_err(format!("a seed is a whole number from 0 to 2**64 - 1, got {obj}")) } else { e })
}

/// Cluster sizes (`from_py_with`): a sequence of whole numbers of RPU, as the Python API's
/// `size_list` takes them. A string or a float is a `TypeError` showing the expected form; a
/// negative or too large size is the base-capacity error the core gives any other bad size, where
/// pyo3's own errors say only "Can't extract `str` to `Vec`" or "out of range integral type
/// conversion attempted".
pub fn sizes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!("clusters is a list of cluster sizes in RPU, such as [32, 16]; got {}", obj.repr()?)));
    }
    obj.extract::<Vec<u32>>().map_err(|e| {
        if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(obj.py()) {
            AutoSloCoreError::new_err(format!("every cluster size must be {}, got {obj}", autoslo_core::cluster::BASE_CAPACITIES))
        } else {
            pyo3::exceptions::PyTypeError::new_err(format!("clusters is a list of whole numbers of RPU, such as [32, 16]; got {obj} ({e})"))
        }
    })
}

/// `e`, raised extracting `obj` as `what`, with a message saying what is due: an out-of-range
/// int is an `AutoSloCoreError` ("`what` must be `range`"), a value of another type a
/// `TypeError`, where pyo3's own messages say only "out of range integral type conversion
/// attempted" or "'float' object cannot be interpreted as an integer".
fn whole_number_error(obj: &Bound<'_, PyAny>, e: PyErr, what: &str, range: &str) -> PyErr {
    let shown = obj.repr().map_or_else(|_| "?".to_string(), |r| r.to_string());
    if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(obj.py()) {
        AutoSloCoreError::new_err(format!("{what} must be {range}, got {shown}"))
    } else if e.is_instance_of::<pyo3::exceptions::PyTypeError>(obj.py()) {
        pyo3::exceptions::PyTypeError::new_err(format!("{what} must be a whole number ({range}), got {shown}"))
    } else {
        e
    }
}

/// A query id (`from_py_with`): a whole number from 0 to 2**64 − 1.
pub fn query_id(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    obj.extract::<u64>().map_err(|e| whole_number_error(obj, e, "a query id", "from 0 to 2**64 - 1"))
}

/// A TPC-DS template number (`from_py_with`); the catalog checks it is one of its templates.
pub fn template(obj: &Bound<'_, PyAny>) -> PyResult<u16> {
    obj.extract::<u16>().map_err(|e| whole_number_error(obj, e, "a query's template", "a TPC-DS template number, 1-99"))
}

/// A query's instance (`from_py_with`), as the core takes it.
pub fn instance(obj: &Bound<'_, PyAny>) -> PyResult<u16> {
    obj.extract::<u16>().map_err(|e| whole_number_error(obj, e, "a query's instance", "from 1 to 65535"))
}

/// One cluster size in RPU (`from_py_with`); the core checks it is a base capacity.
pub fn size(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    obj.extract::<u32>().map_err(|e| whole_number_error(obj, e, "a cluster size", autoslo_core::cluster::BASE_CAPACITIES))
}

/// A table of `columns`. Every field is declared nullable, whether or not this run has a null in
/// it, so that every run's table has the same schema (tables of two runs concatenate).
fn table(columns: Vec<(&str, ArrayRef)>) -> PyResult<PyTable> {
    let fields: Vec<Field> = columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns.into_iter().map(|c| c.1).collect()).map_err(|e| AutoSloCoreError::new_err(e.to_string()))?;
    PyTable::try_new(vec![batch], schema)
}

fn f64s(v: impl IntoIterator<Item = f64>) -> ArrayRef {
    Arc::new(Float64Array::from_iter_values(v))
}
fn i64s(v: impl IntoIterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(v))
}
fn strs<'a>(v: impl IntoIterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
}

/// Workload → table (query_id, arrival, template, instance, tenant, class, slo).
pub fn workload_table(w: &Workload) -> PyResult<PyTable> {
    let q = w.queries();
    table(vec![
        ("query_id", i64s(q.iter().map(|x| x.id as i64))),
        ("arrival", f64s(q.iter().map(|x| x.arrival))),
        ("template", i64s(q.iter().map(|x| x.text.template as i64))),
        ("instance", i64s(q.iter().map(|x| x.text.instance as i64))),
        ("tenant", strs(q.iter().map(|x| w.tenant_name(x)))),
        ("class", strs(q.iter().map(|x| w.class_name(x)))),
        ("slo", f64s(q.iter().map(|x| x.slo))),
    ])
}

/// One column, all chunks concatenated and cast to `to`; `None` if absent. Nulls are an error.
pub(crate) fn column(batches: &[RecordBatch], schema: &Schema, name: &str, to: &DataType) -> PyResult<Option<ArrayRef>> {
    let Ok(idx) = schema.index_of(name) else { return Ok(None) };
    let bad = |problem: String| AutoSloCoreError::new_err(format!("column `{name}`: {problem}"));
    let parts: Vec<ArrayRef> = batches
        .iter()
        .map(|b| arrow_cast::cast(b.column(idx), to).map_err(|e| bad(format!("cannot read as {to}: {e}"))))
        .collect::<PyResult<_>>()?;
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    let all = if refs.is_empty() { arrow_array::new_empty_array(to) } else { arrow_select::concat::concat(&refs).map_err(|e| bad(e.to_string()))? };
    if all.null_count() > 0 {
        let first = (0..all.len()).find(|&i| all.is_null(i)).unwrap_or(0);
        return Err(bad(format!("row {first} has no value ({} of {} rows have none; every row needs one)", all.null_count(), all.len())));
    }
    Ok(Some(all))
}

pub(crate) fn need(v: Option<ArrayRef>, name: &str) -> PyResult<ArrayRef> {
    v.ok_or_else(|| AutoSloCoreError::new_err(format!("missing column `{name}`")))
}

/// Table → workload columns (validation happens in the core).
pub fn workload_columns(t: PyTable) -> PyResult<WorkloadColumns> {
    use arrow_array::cast::AsArray;
    let (batches, schema) = t.into_inner();
    let f = |a: ArrayRef| a.as_primitive::<arrow_array::types::Float64Type>().values().to_vec();
    let i = |a: ArrayRef| a.as_primitive::<arrow_array::types::Int64Type>().values().to_vec();
    let s = |a: ArrayRef| a.as_string::<i32>().iter().map(|x| x.unwrap_or("").to_string()).collect::<Vec<_>>();
    Ok(WorkloadColumns {
        query_id: column(&batches, &schema, "query_id", &DataType::Int64)?.map(i),
        arrival: f(need(column(&batches, &schema, "arrival", &DataType::Float64)?, "arrival")?),
        template: i(need(column(&batches, &schema, "template", &DataType::Int64)?, "template")?),
        instance: i(need(column(&batches, &schema, "instance", &DataType::Int64)?, "instance")?),
        tenant: column(&batches, &schema, "tenant", &DataType::Utf8)?.map(s),
        class: column(&batches, &schema, "class", &DataType::Utf8)?.map(s),
        slo: column(&batches, &schema, "slo", &DataType::Float64)?.map(f),
    })
}

/// Trace → (query table, cluster table).
pub fn trace_tables(w: &Workload, t: &Trace) -> PyResult<(PyTable, PyTable)> {
    let qs = w.queries();
    let rows = &t.rows;
    let mut start = Float64Builder::with_capacity(rows.len());
    rows.iter().for_each(|r| start.append_option(r.start));
    let mut met = BooleanBuilder::with_capacity(rows.len());
    rows.iter().for_each(|r| met.append_value(r.met(qs[r.query].slo)));
    let mut censored = BooleanBuilder::with_capacity(rows.len());
    rows.iter().for_each(|r| censored.append_value(r.censored()));
    let mut size = UInt32Builder::with_capacity(rows.len());
    rows.iter().for_each(|r| size.append_option(r.cluster_size));
    let mut cluster = Int64Builder::with_capacity(rows.len());
    rows.iter().for_each(|r| cluster.append_option(r.cluster.map(i64::from)));
    let mut reason = StringBuilder::new();
    rows.iter().for_each(|r| match r.outcome {
        autoslo_core::trace::Outcome::Rejected(why) => reason.append_value(why.name()),
        _ => reason.append_null(),
    });
    let q = |r: &autoslo_core::trace::TraceRow| &qs[r.query];
    let trace = table(vec![
        ("query_id", i64s(rows.iter().map(|r| q(r).id as i64))),
        ("template", i64s(rows.iter().map(|r| q(r).text.template as i64))),
        ("instance", i64s(rows.iter().map(|r| q(r).text.instance as i64))),
        ("tenant", strs(rows.iter().map(|r| w.tenant_name(q(r))))),
        ("class", strs(rows.iter().map(|r| w.class_name(q(r))))),
        ("cluster_id", Arc::new(cluster.finish())),
        ("cluster_size", Arc::new(size.finish())),
        ("arrival", f64s(rows.iter().map(|r| r.arrival))),
        ("start", Arc::new(start.finish())),
        ("end", f64s(rows.iter().map(|r| r.end))),
        ("latency", f64s(rows.iter().map(|r| r.latency))),
        ("slo", f64s(rows.iter().map(|r| q(r).slo))),
        ("met", Arc::new(met.finish())),
        ("censored", Arc::new(censored.finish())),
        ("outcome", strs(rows.iter().map(|r| r.outcome.name()))),
        ("reject_reason", Arc::new(reason.finish())),
        ("work", f64s(rows.iter().map(|r| r.work))),
        ("cost", f64s(rows.iter().map(|r| r.cost))),
        ("cost_micro_usd", i64s(rows.iter().map(|r| r.cost_micro_usd))),
    ])?;
    let c = &t.clusters;
    let mut td = Float64Builder::new();
    c.iter().for_each(|x| td.append_option(x.teardown_requested_at));
    let mut gone = Float64Builder::new();
    c.iter().for_each(|x| gone.append_option(x.gone_at));
    let clusters = table(vec![
        ("cluster_id", i64s(c.iter().map(|x| x.id as i64))),
        ("size", i64s(c.iter().map(|x| x.size as i64))),
        ("requested_at", f64s(c.iter().map(|x| x.requested_at))),
        ("ready_at", f64s(c.iter().map(|x| x.ready_at))),
        ("teardown_requested_at", Arc::new(td.finish())),
        ("gone_at", Arc::new(gone.finish())),
        ("billed_seconds", f64s(c.iter().map(|x| x.billed_seconds))),
        ("cost", f64s(c.iter().map(|x| x.cost))),
        ("cost_micro_usd", i64s(c.iter().map(|x| x.cost_micro_usd()))),
        ("queries", i64s(c.iter().map(|x| x.queries as i64))),
        ("spinup_reason", strs(c.iter().map(|x| x.spinup_reason))),
        ("teardown_reason", strs(c.iter().map(|x| x.teardown_reason.unwrap_or("")))),
    ])?;
    Ok((trace, clusters))
}

/// Every change of the cluster set: time, cluster, size, event (`spinup`, `ready`, `teardown`,
/// `gone`) and reason.
pub fn events_table(t: &Trace) -> PyResult<PyTable> {
    let ev = t.cluster_events();
    table(vec![
        ("time", f64s(ev.iter().map(|e| e.time))),
        ("cluster_id", i64s(ev.iter().map(|e| e.cluster as i64))),
        ("size", i64s(ev.iter().map(|e| e.size as i64))),
        ("event", strs(ev.iter().map(|e| e.kind))),
        ("reason", strs(ev.iter().map(|e| e.reason))),
    ])
}

/// The scaler's decisions, one row per option it compared (the Spinup Size Selector's branches,
/// `option_size` null for do-nothing), or one row for a decision that compared none (`horizontal`,
/// or no room under `max_clusters`): time, cause (`trigger`, `forced`), the trigger's counts and
/// violation rate when it fired, the option's predicted violation rate, cost (Σ
/// ClusterCostUntilDrained, $) and observations, whether it was chosen, and the size spun up.
pub fn decisions_table(decisions: &[Decision]) -> PyResult<PyTable> {
    let (mut time, mut cause, mut running, mut completed, mut trig_vr) = (Float64Builder::new(), StringBuilder::new(), Int64Builder::new(), Int64Builder::new(), Float64Builder::new());
    let (mut option, mut vr, mut cost, mut obs, mut chosen, mut size) = (Int64Builder::new(), Float64Builder::new(), Float64Builder::new(), Int64Builder::new(), BooleanBuilder::new(), Int64Builder::new());
    for d in decisions {
        let branches = d.selection.as_ref().map_or(&[][..], |s| &s.branches[..]);
        let rows: Vec<Option<&Branch>> = if branches.is_empty() { vec![None] } else { branches.iter().map(Some).collect() };
        for b in rows {
            time.append_value(d.time);
            cause.append_value(d.cause);
            running.append_option(d.check.map(|c| c.running as i64));
            completed.append_option(d.check.map(|c| c.completed as i64));
            trig_vr.append_option(d.check.map(|c| c.violation_rate));
            option.append_option(b.map_or(d.size, |b| b.size).map(i64::from));
            vr.append_option(b.map(|b| b.violation_rate));
            cost.append_option(b.map(|b| b.cost));
            obs.append_option(b.map(|b| b.observations as i64));
            chosen.append_value(b.is_none_or(|b| b.size == d.size));
            size.append_option(d.size.map(i64::from));
        }
    }
    table(vec![
        ("time", Arc::new(time.finish())),
        ("cause", Arc::new(cause.finish())),
        ("trigger_running", Arc::new(running.finish())),
        ("trigger_completed", Arc::new(completed.finish())),
        ("trigger_violation_rate", Arc::new(trig_vr.finish())),
        ("option_size", Arc::new(option.finish())),
        ("predicted_violation_rate", Arc::new(vr.finish())),
        ("predicted_cost", Arc::new(cost.finish())),
        ("observations", Arc::new(obs.finish())),
        ("chosen", Arc::new(chosen.finish())),
        ("spun_up_size", Arc::new(size.finish())),
    ])
}

/// A run's tables with the scaler's decisions: (query table, cluster table, cluster-events table,
/// decisions table).
pub fn run_out(py: Python<'_>, w: &Workload, t: &Trace, decisions: &[Decision]) -> PyResult<(Py<PyAny>, Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    let (rows, clusters, events) = trace_out(py, w, t)?;
    Ok((rows, clusters, events, decisions_table(decisions)?.into_pyarrow(py)?.unbind()))
}

/// A trace as Python objects: (query table, cluster table, cluster-events table).
pub fn trace_out(py: Python<'_>, w: &Workload, t: &Trace) -> PyResult<(Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
    let (rows, cl) = trace_tables(w, t)?;
    Ok((rows.into_pyarrow(py)?.unbind(), cl.into_pyarrow(py)?.unbind(), events_table(t)?.into_pyarrow(py)?.unbind()))
}

/// The measured catalog as a table.
pub fn catalog_table() -> PyResult<PyTable> {
    let m: Vec<_> = catalog::tpcds().measured().collect();
    let mut runs = Int64Builder::new();
    let mut mean = Float64Builder::new();
    let mut std = Float64Builder::new();
    let mut names = StringBuilder::new();
    for (t, _, r) in &m {
        let n = r.len() as f64;
        let mu = r.iter().sum::<f64>() / n;
        runs.append_value(r.len() as i64);
        mean.append_value(mu);
        std.append_value((r.iter().map(|x| (x - mu) * (x - mu)).sum::<f64>() / n).sqrt());
        names.append_value(format!("ext_tpcds1000#{:03}#{:03}", t.template, t.instance));
    }
    table(vec![
        ("query_text_id", Arc::new(names.finish())),
        ("template", i64s(m.iter().map(|x| x.0.template as i64))),
        ("instance", i64s(m.iter().map(|x| x.0.instance as i64))),
        ("rpu", i64s(m.iter().map(|x| x.1 as i64))),
        ("runs", Arc::new(runs.finish())),
        ("mean_runtime_s", Arc::new(mean.finish())),
        ("std_runtime_s", Arc::new(std.finish())),
    ])
}

/// The reservoir's tables → the forecaster's history. `counts`: date (days since 1970-01-01),
/// hour, template, instance, tenant, class, count; `arrivals`: date, hour, offset_s. Names are
/// interned; ranges are checked by the core.
pub fn history_in(counts: PyTable, arrivals: PyTable, days: Vec<i32>) -> PyResult<autoslo_core::tuner::History> {
    use arrow_array::cast::AsArray;
    use autoslo_core::catalog::QueryText;
    use autoslo_core::tuner::{ArrivalRow, CountRow, History};
    let i = |a: ArrayRef| a.as_primitive::<arrow_array::types::Int64Type>().values().to_vec();
    let f = |a: ArrayRef| a.as_primitive::<arrow_array::types::Float64Type>().values().to_vec();
    let (batches, schema) = counts.into_inner();
    let col = |name: &str, t: &DataType| need(column(&batches, &schema, name, t)?, name);
    let (date, hour, template, instance, count) = (i(col("date", &DataType::Int64)?), i(col("hour", &DataType::Int64)?), i(col("template", &DataType::Int64)?), i(col("instance", &DataType::Int64)?), i(col("count", &DataType::Int64)?));
    let tenant = col("tenant", &DataType::Utf8)?;
    let class = col("class", &DataType::Utf8)?;
    let (tenant, class) = (tenant.as_string::<i32>(), class.as_string::<i32>());
    let mut h = History { days, ..Default::default() };
    let mut names = (std::collections::HashMap::<String, u32>::new(), std::collections::HashMap::<String, u32>::new());
    let bad = |row: usize, col: &str, v: i64| AutoSloCoreError::new_err(format!("count table row {row}: column `{col}` is {v}, out of range"));
    for r in 0..date.len() {
        let intern = |map: &mut std::collections::HashMap<String, u32>, list: &mut Vec<String>, s: &str| {
            *map.entry(s.to_string()).or_insert_with(|| {
                list.push(s.to_string());
                (list.len() - 1) as u32
            })
        };
        let t = intern(&mut names.0, &mut h.tenants, tenant.value(r));
        let c = intern(&mut names.1, &mut h.classes, class.value(r));
        let in_range = |v: i64, lo: i64, hi: i64, name: &str| if (lo..=hi).contains(&v) { Ok(v) } else { Err(bad(r, name, v)) };
        h.counts.push(CountRow {
            date: in_range(date[r], i32::MIN as i64, i32::MAX as i64, "date")? as i32,
            hour: in_range(hour[r], 0, 23, "hour")? as u8,
            text: QueryText { template: in_range(template[r], 1, catalog::NUM_TEMPLATES as i64, "template")? as u16, instance: in_range(instance[r], 1, u16::MAX as i64, "instance")? as u16 },
            tenant: t,
            class: c,
            count: in_range(count[r], 0, u32::MAX as i64, "count")? as u32,
        });
    }
    let (batches, schema) = arrivals.into_inner();
    let col = |name: &str, t: &DataType| need(column(&batches, &schema, name, t)?, name);
    let (date, hour, offset) = (i(col("date", &DataType::Int64)?), i(col("hour", &DataType::Int64)?), f(col("offset_s", &DataType::Float64)?));
    for r in 0..date.len() {
        if !(0..24).contains(&hour[r]) {
            return Err(AutoSloCoreError::new_err(format!("arrivals table row {r}: column `hour` is {}, out of range", hour[r])));
        }
        h.arrivals.push(ArrivalRow { date: date[r] as i32, hour: hour[r] as u8, offset_s: offset[r] });
    }
    Ok(h)
}

/// SimulateBatch outcomes → table: `job`, `queries`, `violations`, `cost`, `clusters`, the
/// per-tenant lists `tenant`, `tenant_queries`, `tenant_violations`, and with logs the per-query
/// lists `arrival`, `end`, `violated`.
pub fn outcomes_table(jobs: &[u64], outs: &[autoslo_core::tuner::SimOutcome], keep_logs: bool) -> PyResult<PyTable> {
    let mut cols = vec![
        ("job", i64s(jobs.iter().map(|&j| j as i64))),
        ("queries", i64s(outs.iter().map(|o| o.queries as i64))),
        ("violations", i64s(outs.iter().map(|o| o.violations as i64))),
        ("cost", f64s(outs.iter().map(|o| o.cost))),
        ("clusters", i64s(outs.iter().map(|o| o.clusters as i64))),
    ];
    let [tn, tq, tv] = list_columns(outs, |o| &o.tenants, (StringBuilder::new(), Int64Builder::new(), Int64Builder::new()), |(n, q, v), t| {
        n.append_value(&t.tenant);
        q.append_value(t.queries as i64);
        v.append_value(t.violations as i64);
    });
    cols.extend([("tenant", tn), ("tenant_queries", tq), ("tenant_violations", tv)]);
    if keep_logs {
        let [a, e, v] = list_columns(outs, |o| &o.log, (Float64Builder::new(), Float64Builder::new(), BooleanBuilder::new()), |(a, e, v), q| {
            a.append_value(q.arrival);
            e.append_value(q.end);
            v.append_value(q.violated);
        });
        cols.extend([("arrival", a), ("end", e), ("violated", v)]);
    }
    table(cols)
}

/// Three list columns with one list per outcome: `push` appends each item of `items(outcome)` to
/// the three value builders.
fn list_columns<T, A, B, C>(
    outs: &[autoslo_core::tuner::SimOutcome],
    items: impl Fn(&autoslo_core::tuner::SimOutcome) -> &[T],
    (a, b, c): (A, B, C),
    mut push: impl FnMut((&mut A, &mut B, &mut C), &T),
) -> [ArrayRef; 3]
where
    A: arrow_array::builder::ArrayBuilder,
    B: arrow_array::builder::ArrayBuilder,
    C: arrow_array::builder::ArrayBuilder,
{
    use arrow_array::builder::ListBuilder;
    let (mut la, mut lb, mut lc) = (ListBuilder::new(a), ListBuilder::new(b), ListBuilder::new(c));
    for o in outs {
        for item in items(o) {
            push((la.values(), lb.values(), lc.values()), item);
        }
        la.append(true);
        lb.append(true);
        lc.append(true);
    }
    [Arc::new(la.finish()), Arc::new(lb.finish()), Arc::new(lc.finish())]
}

/// Table (as [`outcomes_table`] writes it) → (job, outcome) pairs.
pub fn outcomes_in(t: PyTable) -> PyResult<Vec<(usize, autoslo_core::tuner::SimOutcome)>> {
    use arrow_array::cast::AsArray;
    use autoslo_core::tuner::{LoggedQuery, SimOutcome, TenantOutcome};
    let (batches, schema) = t.into_inner();
    let i = |name: &str| -> PyResult<Vec<i64>> { Ok(need(column(&batches, &schema, name, &DataType::Int64)?, name)?.as_primitive::<arrow_array::types::Int64Type>().values().to_vec()) };
    let (job, queries, violations, clusters) = (i("job")?, i("queries")?, i("violations")?, i("clusters")?);
    let cost = need(column(&batches, &schema, "cost", &DataType::Float64)?, "cost")?.as_primitive::<arrow_array::types::Float64Type>().values().to_vec();
    let list = |name: &str, item: DataType| column(&batches, &schema, name, &DataType::List(Arc::new(Field::new_list_field(item, true))));
    let logs = match (list("arrival", DataType::Float64)?, list("end", DataType::Float64)?, list("violated", DataType::Boolean)?) {
        (Some(a), Some(e), Some(v)) => Some((a, e, v)),
        _ => None,
    };
    let nonneg = |v: i64, name: &str, row: usize| usize::try_from(v).map_err(|_| AutoSloCoreError::new_err(format!("outcome row {row}: column `{name}` is {v}, below 0")));
    let (tn, tq, tv) = (need(list("tenant", DataType::Utf8)?, "tenant")?, need(list("tenant_queries", DataType::Int64)?, "tenant_queries")?, need(list("tenant_violations", DataType::Int64)?, "tenant_violations")?);
    (0..job.len())
        .map(|r| {
            let (n, q, v) = (tn.as_list::<i32>().value(r), tq.as_list::<i32>().value(r), tv.as_list::<i32>().value(r));
            let (n, q, v) = (n.as_string::<i32>(), q.as_primitive::<arrow_array::types::Int64Type>(), v.as_primitive::<arrow_array::types::Int64Type>());
            if n.len() != q.len() || n.len() != v.len() {
                return Err(AutoSloCoreError::new_err(format!("outcome row {r}: tenant, tenant_queries and tenant_violations have different lengths")));
            }
            let tenants = (0..n.len())
                .map(|k| Ok(TenantOutcome { tenant: n.value(k).to_string(), queries: nonneg(q.value(k), "tenant_queries", r)?, violations: nonneg(v.value(k), "tenant_violations", r)? }))
                .collect::<PyResult<Vec<_>>>()?;
            let log = match &logs {
                None => Vec::new(),
                Some((a, e, v)) => {
                    let (a, e, v) = (a.as_list::<i32>().value(r), e.as_list::<i32>().value(r), v.as_list::<i32>().value(r));
                    let (a, e, v) = (a.as_primitive::<arrow_array::types::Float64Type>(), e.as_primitive::<arrow_array::types::Float64Type>(), v.as_boolean());
                    if a.len() != e.len() || a.len() != v.len() {
                        return Err(AutoSloCoreError::new_err(format!("outcome row {r}: arrival, end and violated have different lengths")));
                    }
                    (0..a.len()).map(|k| LoggedQuery { arrival: a.value(k), end: e.value(k), violated: v.value(k) }).collect()
                }
            };
            let o = SimOutcome { queries: nonneg(queries[r], "queries", r)?, violations: nonneg(violations[r], "violations", r)?, cost: cost[r], clusters: nonneg(clusters[r], "clusters", r)?, tenants, log };
            Ok((nonneg(job[r], "job", r)?, o))
        })
        .collect()
}

/// A control plane's log as dicts (time, cluster_id, size, event, reason).
pub(crate) fn event_dicts(py: Python<'_>, events: Vec<autoslo_core::control_plane::LiveEvent>) -> PyResult<Vec<Bound<'_, pyo3::types::PyDict>>> {
    events
        .into_iter()
        .map(|e| {
            let d = pyo3::types::PyDict::new(py);
            d.set_item("time", e.time)?;
            d.set_item("cluster_id", e.cluster)?;
            d.set_item("size", e.size)?;
            d.set_item("event", e.kind)?;
            d.set_item("reason", e.reason)?;
            Ok(d)
        })
        .collect()
}

/// Budget standings as dicts (tenant, budget, spent, window_start).
pub(crate) fn budget_dicts(py: Python<'_>, budgets: Vec<autoslo_core::tenancy::BudgetStatus>) -> PyResult<Vec<Bound<'_, pyo3::types::PyDict>>> {
    budgets
        .into_iter()
        .map(|b| {
            let d = pyo3::types::PyDict::new(py);
            d.set_item("tenant", b.tenant)?;
            d.set_item("budget", b.budget)?;
            d.set_item("spent", b.spent)?;
            d.set_item("window_start", b.window_start)?;
            Ok(d)
        })
        .collect()
}

/// A serving log → table: query_id, arrival (UTC timestamp: the service's start plus its clock),
/// arrival_s (the service's clock), template, instance, tenant, class, slo, cluster_id and cluster_size
/// (null: never placed), latency, outcome, met, cost (dollars of its cluster's bill attributed to
/// it; 0 when never placed; null unless `priced`: not final yet), reject_reason (null unless refused at admission), charged (estimated dollars admission charged to its
/// tenant's budget; 0 without one). Its columns are those a query log has, so the
/// Workload Reservoir and `read_workload` take it as it is.
pub fn served_table(log: &[ServedQuery], started_unix: f64, priced: bool) -> PyResult<PyTable> {
    let micros = |t: f64| ((started_unix + t) * 1e6).round() as i64;
    let arrival = TimestampMicrosecondArray::from_iter_values(log.iter().map(|q| micros(q.arrival))).with_timezone("UTC");
    table(vec![
        ("query_id", i64s(log.iter().map(|q| q.query_id as i64))),
        ("arrival", Arc::new(arrival)),
        ("arrival_s", f64s(log.iter().map(|q| q.arrival))),
        ("template", i64s(log.iter().map(|q| i64::from(q.text.template)))),
        ("instance", i64s(log.iter().map(|q| i64::from(q.text.instance)))),
        ("tenant", strs(log.iter().map(|q| q.tenant.as_str()))),
        ("class", strs(log.iter().map(|q| q.class.as_str()))),
        ("slo", f64s(log.iter().map(|q| q.slo))),
        ("cluster_id", Arc::new(Int64Array::from_iter(log.iter().map(|q| q.cluster.map(|c| i64::from(c.0)))))),
        ("cluster_size", Arc::new(Int64Array::from_iter(log.iter().map(|q| q.cluster.map(|c| i64::from(c.1)))))),
        ("latency", f64s(log.iter().map(ServedQuery::latency))),
        ("outcome", strs(log.iter().map(|q| q.outcome.name()))),
        ("met", Arc::new(arrow_array::BooleanArray::from_iter(log.iter().map(|q| Some(q.met()))))),
        ("cost", Arc::new(Float64Array::from_iter(log.iter().map(|q| priced.then_some(q.cost))))),
        ("reject_reason", Arc::new(arrow_array::StringArray::from_iter(log.iter().map(|q| match q.outcome {
            autoslo_core::trace::Outcome::Rejected(r) => Some(r.name()),
            _ => None,
        })))),
        ("charged", f64s(log.iter().map(|q| q.charged))),
    ])
}

/// Serving totals → table: tenant, class, routed, running, met, late, timed_out, failed,
/// cancelled, rejected, violation_rate (of the queries that ended or were rejected; null before
/// any did), latency_mean
/// (of the completed ones), cost (dollars attributed to its ended queries whose cost is final).
pub fn totals_table(totals: &[ServedTotals]) -> PyResult<PyTable> {
    let u = |f: fn(&ServedTotals) -> u64| i64s(totals.iter().map(move |t| f(t) as i64));
    let done = |t: &ServedTotals| t.met + t.late;
    table(vec![
        ("tenant", strs(totals.iter().map(|t| t.tenant.as_str()))),
        ("class", strs(totals.iter().map(|t| t.class.as_str()))),
        ("routed", u(|t| t.routed)),
        ("running", u(ServedTotals::running)),
        ("met", u(|t| t.met)),
        ("late", u(|t| t.late)),
        ("timed_out", u(|t| t.timed_out)),
        ("failed", u(|t| t.failed)),
        ("cancelled", u(|t| t.cancelled)),
        ("rejected", u(|t| t.rejected)),
        ("violation_rate", Arc::new(Float64Array::from_iter(totals.iter().map(ServedTotals::violation_rate)))),
        ("latency_mean", Arc::new(Float64Array::from_iter(totals.iter().map(|t| (done(t) > 0).then(|| t.completed_latency_s / done(t) as f64))))),
        ("cost", f64s(totals.iter().map(|t| t.cost))),
    ])
}
