"""How faithfully the Workload Simulator reproduces a day the warehouse ran.

The Policy Tuner judges every candidate configuration on the Workload Simulator, so its choices
are as good as the simulator's fidelity on the warehouse at hand (``docs/tuner.md``).
:func:`simulator_fidelity` replays the queries of a day a configuration ran (a trace from
``autoslo emulate --trace`` or a live run) in the simulator under the same configuration, and
sets what the simulator predicts beside what the warehouse did: violation rate, cost and latency,
overall and per workload class. ``autoslo fidelity`` prints it.
"""

from __future__ import annotations

from os import PathLike
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from autoslo import _core
from autoslo.bundled import predictor_for
from autoslo.emulation import simulate
from autoslo.traces import from_served, is_served_log
from autoslo.tuner import ExecutionConfig, class_latency_scale

#: The trace columns the replay needs (what every AutoSLO trace records).
TRACE_COLUMNS = ("query_id", "arrival", "template", "instance", "tenant", "class", "slo", "latency", "met", "cost")


def _figures(t: pa.Table) -> dict[str, Any]:
    met = t["met"].to_numpy(zero_copy_only=False).astype(bool)
    lat = t["latency"].to_numpy(zero_copy_only=False).astype(np.float64)
    return {
        "queries": int(t.num_rows),
        "violation_rate": float(1.0 - met.mean()) if t.num_rows else float("nan"),
        "latency_p50": float(np.percentile(lat, 50)) if t.num_rows else float("nan"),
        "latency_p95": float(np.percentile(lat, 95)) if t.num_rows else float("nan"),
        # None where the queries carry no cost (a serving log written before queries were priced).
        "cost": None if t.num_rows and t["cost"].null_count == t.num_rows else float(pc.sum(t["cost"]).as_py() or 0.0),
    }


def simulator_fidelity(
    trace: pa.Table,
    config: ExecutionConfig | str | PathLike[str],
    *,
    predictor: _core.Predictor | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Replay ``trace``'s queries (same arrivals, texts, tenants, classes and SLOs) in the
    Workload Simulator under ``config``, the configuration that ran them, and compare.

    Returns ``overall``, ``per_class`` and ``per_tenant`` rows, each with the observed and the simulated
    ``violation_rate``, ``cost`` and latency p50/p95, and per class the
    ``latency_scale`` :func:`autoslo.tuner.class_latency_scale` measures (how much slower than
    the predictor the warehouse ran that class; absent for a class with too few scored queries).
    ``violation_rate_gap`` is simulated − observed, in points of violation rate: below zero the
    simulator is optimistic, and a configuration the tuner finds "within τ" may not be.

    A serving log (``Service.take_served``, ``autoslo serve --log``) is taken as a trace
    (:func:`autoslo.traces.from_served`): the day the service served, its queries' latencies as
    the clients saw them, and the costs of its workgroups' bills attributed to them (``None``
    for a log written before the service priced its queries).
    """
    if is_served_log(trace):
        trace = from_served(trace)
    missing = [c for c in TRACE_COLUMNS if c not in trace.column_names]
    if missing:
        raise ValueError(f"the trace lacks {', '.join(missing)}: give a trace written by `autoslo emulate --trace` or a live run (columns {', '.join(TRACE_COLUMNS)})")
    if trace.num_rows == 0:
        raise ValueError("the trace has no queries")
    if "outcome" in trace.column_names:
        # Queries the warehouse never ran (refused at admission, failed, cancelled) are not
        # replayed: the simulator has no such outcomes.
        trace = trace.filter(pc.is_in(trace["outcome"], pa.array(["completed", "timeout"])))
    if not isinstance(config, ExecutionConfig):
        config = ExecutionConfig.load(config)
    predictor = predictor_for(True, predictor)
    order = pc.sort_indices(trace, [("arrival", "ascending")])
    observed = trace.take(order)
    workload = observed.select(["query_id", "arrival", "template", "instance", "tenant", "class", "slo"])
    simulated = simulate(workload, config=config, predictor=predictor, seed=seed).trace
    scale = class_latency_scale(observed, predictor)

    def row(key: str, name: str, o: pa.Table, s: pa.Table) -> dict[str, Any]:
        fo, fs = _figures(o), _figures(s)
        r: dict[str, Any] = {key: name, "queries": fo["queries"]}
        for k in ("violation_rate", "cost", "latency_p50", "latency_p95"):
            r[f"observed_{k}"], r[f"simulated_{k}"] = fo[k], fs[k]
        r["violation_rate_gap"] = fs["violation_rate"] - fo["violation_rate"]
        return r

    def per(key: str) -> list[dict[str, Any]]:
        names = sorted(set(observed[key].to_pylist()))
        return [row(key, n, observed.filter(pc.equal(observed[key], n)), simulated.filter(pc.equal(simulated[key], n))) for n in names]

    per_class = [{**r, "latency_scale": scale.get(r["class"])} for r in per("class")]
    per_tenant = per("tenant")
    return {"overall": row("class", "all", observed, simulated), "per_class": per_class, "per_tenant": per_tenant, "latency_scale": scale}
