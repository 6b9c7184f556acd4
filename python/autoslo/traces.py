"""Helpers over trace tables (what ``autoslo.emulate`` and live traces record), and the serving
control plane's log in trace form (:func:`from_served`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from autoslo.workloads import epoch_seconds

DAY_S = 86_400.0


def trace_classes(trace: pa.Table, r: dict) -> np.ndarray | None:
    """The workload class of each row of ``Predictor.predict_trace(trace)``'s result ``r`` (matched
    by run and query id); ``None`` when the trace has no ``class`` column."""
    if "class" not in trace.column_names:
        return None
    runs = trace["run"].to_numpy() if "run" in trace.column_names else np.zeros(trace.num_rows, dtype=np.int64)
    by_key = dict(zip(zip(runs.tolist(), trace["query_id"].to_pylist()), trace["class"].to_pylist()))
    rr = r["run"] if "run" in trace.column_names else np.zeros(len(r["query_id"]), dtype=np.int64)
    return np.array([by_key[(int(a), int(q))] for a, q in zip(rr, r["query_id"])], dtype=object)


def is_served_log(table: pa.Table) -> bool:
    """Whether ``table`` is what a serving control plane logged (``Service.take_served``,
    ``autoslo serve --log``): arrivals as timestamps beside ``arrival_s``, latencies and outcomes."""
    names = table.column_names
    return "arrival_s" in names and "latency" in names and "outcome" in names and pa.types.is_timestamp(table.schema.field("arrival").type)


def from_served(log: pa.Table, day: dt.date | None = None) -> pa.Table:
    """A serving log in the form of a trace, for what reads traces (``autoslo fidelity``,
    ``predictor.from_traces``): ``arrival`` in seconds from 00:00 UTC of ``day`` (default: the
    day of the first arrival), ``start`` = ``arrival`` (the client runs the query as soon as it
    is routed), ``end`` = ``arrival`` + ``latency``, ``censored`` for a timed-out query, rows in
    arrival order. Given ``day``, only that day's queries. ``cost`` is each query's part of its
    workgroup's bill as the service attributed it (null in a log written before the service
    priced its queries)."""
    if not is_served_log(log):
        raise ValueError(f"not a serving log (it has {', '.join(log.column_names)}): give what `Service.take_served` or `autoslo serve --log` wrote")
    epoch = epoch_seconds(log["arrival"], "serving log")
    assert epoch is not None  # timestamps, checked above
    if log.num_rows == 0:
        raise ValueError("the serving log has no queries")
    first = dt.date(1970, 1, 1) + dt.timedelta(days=int(np.floor(epoch.min() / DAY_S)))
    midnight = ((day or first) - dt.date(1970, 1, 1)).days * DAY_S
    arrival = epoch - midnight
    t = log.drop_columns([c for c in ("arrival", "arrival_s", "cost") if c in log.column_names])
    cost = log["cost"].cast(pa.float64()) if "cost" in log.column_names else pa.nulls(log.num_rows, pa.float64())
    t = t.append_column("cost", cost)
    if day is not None:
        keep = (arrival >= 0) & (arrival < DAY_S)
        if not keep.any():
            raise ValueError(f"the serving log has no query of {day}")
        t, arrival = t.filter(pa.array(keep)), arrival[keep]
    latency = t["latency"].to_numpy(zero_copy_only=False).astype(np.float64)
    placed = pc.is_valid(t["cluster_id"])
    t = t.append_column("arrival", pa.array(arrival, pa.float64()))
    t = t.append_column("start", pc.if_else(placed, t["arrival"], pa.scalar(None, pa.float64())))
    t = t.append_column("end", pa.array(arrival + latency, pa.float64()))
    t = t.append_column("censored", pc.equal(t["outcome"], "timeout"))
    return t.take(pc.sort_indices(t, [("arrival", "ascending")]))


def to_history(trace: pa.Table, sql: Mapping[int, str], day: dt.date = dt.date(2024, 5, 1)) -> pa.Table:
    """A trace (``autoslo emulate --trace``, ``autoslo live --trace``) as a ``SYS_QUERY_HISTORY``
    export, what ``autoslo predictor data --from-history`` reads: each query that ran, with
    ``start_time`` and ``end_time`` on ``day`` (its arrival and end), ``status`` ``success`` (or
    ``canceled`` for a timed-out one), its template's SQL from ``sql`` as ``query_text``,
    ``query_type`` SELECT, and its cluster as ``workgroup`` (``c<cluster_id>``) with its ``rpu``.
    A query whose template has no SQL in ``sql`` raises ``ValueError``."""
    t = trace
    if "outcome" in t.column_names:
        t = t.filter(pc.is_in(t["outcome"], pa.array(["completed", "timeout"])))
    missing = sorted(set(t["template"].to_pylist()) - set(sql))
    if missing:
        raise ValueError(f"no SQL for template(s) {', '.join(map(str, missing[:10]))}")
    origin = np.datetime64(day.isoformat(), "us")
    to_ts = lambda s: pa.array(origin + (t[s].to_numpy(zero_copy_only=False) * 1e6).astype("timedelta64[us]"))  # noqa: E731
    timeout = t["outcome"].to_numpy(zero_copy_only=False) == "timeout" if "outcome" in t.column_names else t["censored"].to_numpy(zero_copy_only=False)
    return pa.table(
        {
            "query_id": t["query_id"],
            "start_time": to_ts("arrival"),
            "end_time": to_ts("end"),
            "status": pa.array(np.where(timeout, "canceled", "success")),
            "query_type": pa.array(["SELECT"] * t.num_rows),
            "result_cache_hit": pa.array(np.zeros(t.num_rows, bool)),
            "query_text": pa.array([sql[k] for k in t["template"].to_pylist()]),
            "workgroup": pa.array([f"c{c}" for c in t["cluster_id"].to_pylist()]),
            "rpu": t["cluster_size"],
        }
    )
