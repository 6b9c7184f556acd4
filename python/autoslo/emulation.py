"""Emulation: run a workload on the calibrated warehouse emulator and summarise the outcome."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from autoslo import _core
from autoslo._checks import check_number, check_whole, core_args
from autoslo.argtypes import size_list
from autoslo.autoscaler import AutoscalerConfig, as_spec
from autoslo.bundled import NEEDS_PREDICTOR, predictor_for
from autoslo.progress import progress_bar
from autoslo.tables import html_table
from autoslo.placement import Ejection
from autoslo.tenancy import AdmissionQueue, Budgets, DeadlineAdmission, Reservation
from autoslo.tuner import ExecutionConfig


@dataclass(frozen=True, repr=False)
class EmulationResult:
    """The outcome of one emulation.

    ``trace`` has one row per query (cluster, arrival, start, end, latency, SLO, met, censored,
    outcome, attributed cost); ``clusters`` one row per cluster (lifecycle times, billed seconds,
    cost, why it was spun up and torn down); ``events`` one row per spinup, readiness, teardown
    and disappearance. Attributed query costs sum to the billed cost.
    """

    trace: pa.Table
    clusters: pa.Table
    #: Every change of the cluster set: time, cluster_id, size, event (spinup, ready, teardown,
    #: gone) and reason (initial, spinup-trigger, forced, idle, replaced, snowflake-start, …).
    events: pa.Table
    #: Why the cluster set changed, or did not: every decision of the paper's Autoscaler and its
    #: baselines (``autoslo``, ``add-best``, ``horizontal``, ``vertical``), one row per option
    #: it compared. ``time``, ``cause`` (``trigger``, ``forced``), the trigger's
    #: ``trigger_running`` / ``trigger_completed`` / ``trigger_violation_rate`` when it fired,
    #: ``option_size`` (null: do nothing), the Spinup Size Selector's ``predicted_violation_rate``,
    #: ``predicted_cost`` ($, Σ ClusterCostUntilDrained) and ``observations`` for that option,
    #: ``chosen``, and ``spun_up_size`` (null: nothing). Empty for policies that decide otherwise
    #: (fixed clusters, Snowflake, RAIS-like). The emulator, the simulator and live runs all
    #: record it (live: also ``ControlPlane.decisions()`` while running).
    decisions: pa.Table

    @property
    def queries(self) -> int:
        """Number of queries emulated."""
        return self.trace.num_rows

    @property
    def violations(self) -> int:
        """Queries that missed their SLO (timed-out and rejected queries included)."""
        return self.queries - int(pc.sum(self.trace["met"]).as_py() or 0)

    @property
    def violation_rate(self) -> float:
        """Fraction of queries that missed their SLO."""
        return self.violations / self.queries if self.queries else 0.0

    @property
    def cost(self) -> float:
        """Total billed cost in dollars."""
        return float(pc.sum(self.clusters["cost"]).as_py() or 0.0)

    @property
    def timeouts(self) -> int:
        """Queries that hit the timeout (censored)."""
        return int(pc.sum(self.trace["censored"]).as_py() or 0)

    @property
    def rejected(self) -> int:
        """Queries rejected at admission (counted as violations)."""
        return self._outcome("rejected")

    @property
    def failed(self) -> int:
        """Queries whose execution failed and was not recovered (live mode; violations)."""
        return self._outcome("failed")

    @property
    def cancelled(self) -> int:
        """Queries the run was stopped before finishing (live mode, Ctrl-C; violations)."""
        return self._outcome("cancelled")

    def _outcome(self, name: str) -> int:
        return int(pc.sum(pc.equal(self.trace["outcome"], name)).as_py() or 0)

    def summary(self) -> dict[str, float | int]:
        """Fleet-wide numbers as a plain dict (what ``autoslo emulate --json`` prints)."""
        return {
            "queries": self.queries,
            "violations": self.violations,
            "violation_rate": self.violation_rate,
            "timeouts": self.timeouts,
            "rejected": self.rejected,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "cost": self.cost,
            "clusters": self.clusters.num_rows,
        }

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"{type(self).__name__}(queries={s['queries']}, violation_rate={s['violation_rate']:.4f}, cost=${s['cost']:.2f}, "
            f"clusters={s['clusters']}, timeouts={s['timeouts']}, rejected={s['rejected']}; tables: trace, clusters, events, decisions)"
        )

    def _repr_html_(self) -> str:
        """Jupyter: the summary, and violation rate and cost per tenant × class."""
        s = self.summary()
        per = self.per_tenant_class().to_pylist() if self.queries else []
        cols = ["tenant", "class", "queries", "met", "late", "rejected", "violation_rate", "latency_p50", "latency_p95", "cost"]
        return f"<b>{type(self).__name__}</b>" + html_table([s], list(s)) + (html_table(per, cols) if per else "")

    def per_tenant_class(self) -> pa.Table:
        """Per tenant × class: ``queries`` offered, ``admitted``, and by outcome ``met`` (the
        goodput: completed within the SLO), ``late`` (including timeouts), ``rejected`` at
        admission, ``failed`` and ``cancelled`` (live mode); ``violations`` (all but met),
        ``timeouts``, latency p50/p95/p99 and queue wait p95 of the queries that ran, attributed
        ``cost``, ``violation_rate`` and ``attainment`` (1 − violation rate)."""
        t = self.trace
        rejected = pc.equal(t["outcome"], "rejected")
        t = t.append_column("violated", pc.invert(t["met"])).append_column("is_rejected", rejected)
        t = t.append_column("is_failed", pc.equal(t["outcome"], "failed")).append_column("is_cancelled", pc.equal(t["outcome"], "cancelled"))
        t = t.append_column("ran_latency", pc.if_else(rejected, pa.scalar(None, pa.float64()), t["latency"]))
        # Queue wait: until execution began (or, for a query that timed out queued, until it left).
        wait = pc.subtract(pc.coalesce(t["start"], t["end"]), t["arrival"])
        t = t.append_column("queue_wait", pc.if_else(rejected, pa.scalar(None, pa.float64()), wait))
        g = t.group_by(["tenant", "class"]).aggregate(
            [
                ("query_id", "count"),
                ("met", "sum"),
                ("violated", "sum"),
                ("is_rejected", "sum"),
                ("censored", "sum"),
                ("ran_latency", "approximate_median"),
                ("ran_latency", "tdigest", pc.TDigestOptions(q=0.95)),
                ("ran_latency", "tdigest", pc.TDigestOptions(q=0.99)),
                ("queue_wait", "tdigest", pc.TDigestOptions(q=0.95)),
                ("cost", "sum"),
                ("is_failed", "sum"),
                ("is_cancelled", "sum"),
            ]
        )
        g = g.rename_columns(["tenant", "class", "queries", "met", "violations", "rejected", "timeouts", "latency_p50", "latency_p95", "latency_p99", "queue_wait_p95", "cost", "failed", "cancelled"])
        for i, name in ((8, "latency_p95"), (9, "latency_p99"), (10, "queue_wait_p95")):
            g = g.set_column(i, name, pc.list_element(g[name], 0))
        late = pc.subtract(pc.subtract(pc.subtract(g["violations"], g["rejected"]), g["failed"]), g["cancelled"])
        g = g.append_column("late", late).append_column("admitted", pc.subtract(g["queries"], g["rejected"]))
        rate = pc.divide(pc.cast(g["violations"], pa.float64()), pc.cast(g["queries"], pa.float64()))
        g = g.append_column("violation_rate", rate).append_column("attainment", pc.subtract(1.0, rate))
        return g.sort_by([("tenant", "ascending"), ("class", "ascending")])

    def violation_rates(self, by: str = "tenant") -> dict[str, float]:
        """The violation rate (all but the queries that met their SLO, over the queries offered)
        per value of the trace column ``by``: ``tenant`` (default), ``class``, or any column the
        workload carried (``tier``, ``cost_center``, …), sorted by value."""
        t = self.trace
        if by not in t.column_names:
            raise ValueError(f"the trace has no column {by!r} (it has {', '.join(t.column_names)})")
        missed = pc.cast(pc.invert(pc.fill_null(t["met"], False)), pa.int64())
        g = pa.table({"key": t[by], "missed": missed}).group_by("key").aggregate([("missed", "sum"), ("missed", "count")])
        rates = zip(g["key"].to_pylist(), g["missed_sum"].to_pylist(), g["missed_count"].to_pylist())
        return {str(k): v / n for k, v, n in sorted(rates, key=lambda r: str(r[0]))}

    def worst_tenants(self, k: int = 5) -> pa.Table:
        """The ``k`` tenant × class populations with the lowest attainment (ties: more queries
        first): who a fleet-wide figure hides."""
        return self.per_tenant_class().sort_by([("attainment", "ascending"), ("queries", "descending"), ("tenant", "ascending")]).slice(0, k)

    def fairness(self) -> dict[str, object]:
        """Jain's fairness index over SLO attainment (1 − violation rate) per tenant × class,
        with the worst population named: the index alone compresses who was harmed."""
        rows = self.per_tenant_class().to_pylist()
        attainment = [1.0 - r["violation_rate"] for r in rows]
        worst = min(range(len(rows)), key=lambda i: (attainment[i], rows[i]["tenant"], rows[i]["class"]))
        return {
            "populations": len(rows),
            "jain_attainment": _core.jain_index(attainment),
            "worst": {"tenant": rows[worst]["tenant"], "class": rows[worst]["class"], "attainment": attainment[worst], "queries": rows[worst]["queries"]},
        }

    def chargeback(self, by: Sequence[str] = ("tenant",)) -> pa.Table:
        """What each tenant (or each group of ``by``, trace columns such as ``("tenant", "class")``)
        caused: queries, isolated work (s) and attributed cost, in whole micro-dollars
        (``cost_micro_usd``) and dollars. Every cluster's bill goes to queries by the rule in
        ``docs/tenancy.md``; the micro-dollar column sums to the clusters' bills exactly."""
        unknown = [c for c in by if c not in self.trace.column_names]
        if unknown or not by:
            raise ValueError(f"chargeback groups by trace columns, e.g. ('tenant',) or ('tenant', 'class'); unknown: {unknown or 'none given'}")
        g = self.trace.group_by(list(by)).aggregate([("query_id", "count"), ("work", "sum"), ("cost_micro_usd", "sum")])
        g = g.rename_columns([*by, "queries", "work_s", "cost_micro_usd"])
        g = g.append_column("cost", pc.divide(pc.cast(g["cost_micro_usd"], pa.float64()), 1e6))
        return g.sort_by([(c, "ascending") for c in by])


def simulate(
    workload: pa.Table,
    clusters: Sequence[int] | None = None,
    *,
    routing: str = "autoslo",
    predictor: _core.Predictor | None = None,
    seed: int = 0,
    timeout_s: float | None = 3600.0,
    spinup_s: float = 300.0,
    teardown_s: float = 200.0,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    schedule: Sequence[tuple[float, str, int]] | None = None,
    slo_headroom: float = _core.DEFAULT_SLO_HEADROOM,
    autoscaler: AutoscalerConfig | str | None = None,
    config: ExecutionConfig | str | PathLike[str] | None = None,
    progress: bool = False,
) -> EmulationResult:
    """Replay ``workload`` in the Workload Simulator (§3): completions come from the predictor.

    Same inputs and result as :func:`emulate`; it is what the autoscaler and policy tuner branch.
    ``progress=True`` shows a tqdm bar; Ctrl-C stops the run cleanly (``KeyboardInterrupt``).
    """
    predictor = predictor_for(True, predictor)  # the simulator's completions come from it
    clusters, routing, cfg = _with_config(clusters, routing, config, autoscaler, schedule)
    callback, close = progress_bar(progress, "simulating", "query")
    try:
        trace, cluster_table, events, decisions = _core.simulate(
            workload,
            clusters,
            predictor,
            routing=routing,
            seed=seed,
            timeout_s=timeout_s,
            spinup_s=spinup_s,
            teardown_s=teardown_s,
            price_per_rpu_hour=price_per_rpu_hour,
            billing_minimum_s=billing_minimum_s,
            schedule=list(schedule) if schedule else None,
            slo_headroom=slo_headroom,
            autoscaler=as_spec(autoscaler),
            config=cfg,
            progress=callback,
        )
    finally:
        close()
    return EmulationResult(trace=_with_extras(trace, workload, cfg), clusters=cluster_table, events=events, decisions=decisions)


def emulate(
    workload: pa.Table,
    clusters: Sequence[int] | None = None,
    *,
    seed: int = 0,
    routing: str = "autoslo",
    kappa: float | None = None,
    timeout_s: float | None = 3600.0,
    lifecycle: str = "fixed",
    spinup_s: float = 300.0,
    teardown_s: float = 200.0,
    cold_start_factor: float = 1.5,
    cold_start_duration_s: float = 300.0,
    noise: bool = True,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    schedule: Sequence[tuple[float, str, int]] | None = None,
    progress: bool = False,
    predictor: _core.Predictor | None = None,
    slo_headroom: float = _core.DEFAULT_SLO_HEADROOM,
    autoscaler: AutoscalerConfig | str | None = None,
    config: ExecutionConfig | str | PathLike[str] | None = None,
    reservation: Reservation | None = None,
    admission: DeadlineAdmission | None = None,
    ejection: Ejection | None = None,
    degradations: Sequence[tuple[int, float, float, float]] | None = None,
    queue: AdmissionQueue | None = None,
    budgets: Budgets | None = None,
) -> EmulationResult:
    """Emulate ``workload`` on clusters of the given sizes (RPU; each a Redshift Serverless base
    capacity, :func:`autoslo.is_base_capacity`), ready at t = 0.

    ``routing`` is one of ``autoslo._core.ROUTING_POLICIES``: ``autoslo`` (the default, the product's
    router) or a baseline by name; ``autoslo``, ``autoslo-latency``, ``stage-cost`` and
    ``least-work`` use ``predictor`` (default: the bundled Iconq+ model). ``slo_headroom`` (≥ 1):
    the ``autoslo`` router counts a query as a predicted violator when its predicted latency times
    this factor exceeds its SLO (1 is Algorithm 1's literal test). ``schedule`` lists
    ``(time_s, "spinup", size)`` and ``(time_s, "teardown", cluster_id)`` actions carried out
    through the control-plane interface. ``autoscaler`` (an :class:`AutoscalerConfig` or a policy
    name) changes the cluster set during the run instead; its spinups and teardowns are in
    ``result.events``. ``config`` (an :class:`autoslo.tuner.ExecutionConfig` or a YAML file, as
    ``autoslo tune`` writes) runs an execution configuration instead: its initial clusters, routing,
    scheduled spinups and autoscaler (then give neither ``clusters``, ``autoscaler`` nor
    ``schedule``). ``reservation`` (an :class:`autoslo.tenancy.Reservation`) holds clusters for
    premium tenants around the routing policy. ``admission`` (an
    :class:`autoslo.tenancy.DeadlineAdmission`) rejects infeasible queries before any work, as
    outcomes of their own. ``ejection`` (an :class:`autoslo.placement.Ejection`) hides a cluster
    whose completions persistently exceed the router's predictions. ``queue`` (an
    :class:`autoslo.tenancy.AdmissionQueue`) holds arrivals at the router boundary while every
    cluster is full, within a bounded wait. ``budgets`` (an :class:`autoslo.tenancy.Budgets`)
    refuses a tenant's queries once its estimated spend would pass its budget. ``degradations`` injects
    silent slowdowns: ``(cluster, factor, from_s, until_s)``. ``progress=True`` shows a tqdm bar;
    Ctrl-C stops the run cleanly (``KeyboardInterrupt``).
    """
    settings = {
        "reservation": core_args(reservation, Reservation, "reservation"),
        "admission": core_args(admission, DeadlineAdmission, "admission"),
        "ejection": core_args(ejection, Ejection, "ejection"),
        "queue": core_args(queue, AdmissionQueue, "queue"),
        "budgets": core_args(budgets, Budgets, "budgets"),
        "degradations": _degradations(degradations),
    }
    clusters, routing, cfg = _with_config(clusters, routing, config, autoscaler, schedule)
    predictor = predictor_for(routing in NEEDS_PREDICTOR or cfg is not None or admission is not None or queue is not None or budgets is not None, predictor)
    spec = as_spec(autoscaler)
    callback, close = progress_bar(progress, "emulating", "query")
    try:
        trace, cluster_table, events, decisions = _core.emulate(
            workload,
            clusters,
            seed=seed,
            routing=routing,
            kappa=kappa,
            timeout_s=timeout_s,
            lifecycle=lifecycle,
            spinup_s=spinup_s,
            teardown_s=teardown_s,
            cold_start_factor=cold_start_factor,
            cold_start_duration_s=cold_start_duration_s,
            noise=noise,
            price_per_rpu_hour=price_per_rpu_hour,
            billing_minimum_s=billing_minimum_s,
            schedule=list(schedule) if schedule else None,
            progress=callback,
            predictor=predictor,
            slo_headroom=slo_headroom,
            autoscaler=spec,
            config=cfg,
            **settings,
        )
    finally:
        close()
    return EmulationResult(trace=_with_extras(trace, workload, cfg), clusters=cluster_table, events=events, decisions=decisions)


def _degradations(values: Sequence[tuple[int, float, float, float]] | None) -> list[tuple[int, float, float, float]] | None:
    """Injected slowdowns as the core takes them; a malformed entry is refused naming its index
    (the core checks the ranges: a known cluster, a factor ≥ 1, a window)."""
    if not values:
        return None
    out = []
    for i, d in enumerate(values):
        if isinstance(d, (str, bytes)) or not isinstance(d, Sequence) or len(d) != 4:
            raise TypeError(f"degradations[{i}] must be (cluster, factor, from_s, until_s), got {d!r}")
        check_whole(d[0], f"degradations[{i}]'s cluster", 0, 2**32)
        for j, what in ((1, "factor"), (2, "from_s"), (3, "until_s")):
            check_number(d[j], f"degradations[{i}]'s {what}")
        out.append((int(d[0]), float(d[1]), float(d[2]), float(d[3])))
    return out


def _with_config(
    clusters: Sequence[int] | None, routing: str, config: ExecutionConfig | str | PathLike[str] | None, autoscaler: object, schedule: object
) -> tuple[list[int], str, str | None]:
    """(clusters, routing, configuration JSON) of a run given by clusters or by a configuration."""
    if config is None:
        if clusters is None:
            raise ValueError("give the initial clusters (sizes in RPU) or an execution configuration (config=)")
        return size_list(clusters), routing, None
    if clusters is not None or autoscaler is not None or schedule:
        raise ValueError("an execution configuration sets the clusters, the autoscaler and the schedule: give config= alone")
    cfg = config if isinstance(config, ExecutionConfig) else ExecutionConfig.load(config)
    return cfg.initial_clusters, cfg.routing, cfg.to_json()


#: Workload columns the engines read; any other column (``tier``, ``cost_center``, …) rides along.
_CORE_COLUMNS = ("query_id", "arrival", "template", "instance", "tenant", "class", "slo")


def _with_extras(trace: pa.Table, workload: pa.Table, config_json: str | None) -> pa.Table:
    """The trace with the workload's other columns (rows are in workload order), and the tier of
    each query when the configuration's SLO policy names tiers and the workload has none."""
    for c in workload.column_names:
        if c not in _CORE_COLUMNS and c not in trace.column_names:
            trace = trace.append_column(c, workload[c])
    policy = json.loads(config_json).get("slo_policy") if config_json else None
    if policy and "tier" not in trace.column_names:
        trace = trace.append_column("tier", pa.array(_core.slo_policy_tiers(json.dumps(policy), trace["tenant"].to_pylist()), pa.string()))
    return trace


def calibrate(seed: int = 0, seeds: int = 10, isolated_replications: int = 20) -> dict[str, Any]:
    """Hold the emulator against the real Redshift measurements (see ``autoslo calibrate``).

    ``seed`` names the check seed stream (``seeds`` seeds are pooled per emulated median); it must
    differ from the fit's stream (``report["fit_seed"]``)."""
    return _core.calibrate(seed=seed, seeds=seeds, isolated_replications=isolated_replications)
