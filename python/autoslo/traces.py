"""Helpers over trace tables (what ``autoslo.emulate`` and live traces record)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def trace_classes(trace: pa.Table, r: dict) -> np.ndarray | None:
    """The workload class of each row of ``Predictor.predict_trace(trace)``'s result ``r`` (matched
    by run and query id); ``None`` when the trace has no ``class`` column."""
    if "class" not in trace.column_names:
        return None
    runs = trace["run"].to_numpy() if "run" in trace.column_names else np.zeros(trace.num_rows, dtype=np.int64)
    by_key = dict(zip(zip(runs.tolist(), trace["query_id"].to_pylist()), trace["class"].to_pylist()))
    rr = r["run"] if "run" in trace.column_names else np.zeros(len(r["query_id"]), dtype=np.int64)
    return np.array([by_key[(int(a), int(q))] for a, q in zip(rr, r["query_id"])], dtype=object)
