"""Workload generators and Parquet I/O.

A workload is a ``pyarrow.Table`` with columns ``query_id`` (int), ``arrival`` (s, sorted),
``template`` (TPC-DS 1-99), ``instance`` (≥ 1), ``tenant``, ``class`` and ``slo`` (s). ``tenant``,
``class`` and ``query_id`` are optional on input; ``slo`` may be omitted when a ``kappa`` is given
(the paper's rule: κ × the per-template 16-RPU baseline latency).
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from autoslo import _core


def base_workload(rate: float, seed: int = 0, kappa: float = 2.0, baseline: Mapping[int, float] | None = None) -> pa.Table:
    """The paper's ``BaseWorkload(λ)``: 3 copies of each of the 99 TPC-DS templates (its three
    parameter instances), shuffled, with Poisson arrivals at ``rate`` queries/s.

    SLO = ``kappa`` × the template's baseline latency: the bundled 16-RPU p100 baseline, with
    ``baseline`` ({template: seconds}) replacing it for the templates it names."""
    return _core.base_workload(rate, seed=seed, kappa=kappa, baseline=dict(baseline) if baseline else None)


def phased_workload(x: int, rate_low: float, rate_high: float, seed: int = 0, kappa: float = 2.0) -> pa.Table:
    """The paper's phased BaseWorkload: ``x`` queries at ``rate_low`` alternating with 10 at ``rate_high``."""
    return _core.phased_workload(x, rate_low, rate_high, seed=seed, kappa=kappa)


def redbench_workload(
    days: int = 1,
    seed: int = 0,
    queries_per_day: float = 20_000.0,
    tenants: int = 4,
    start_weekday: int = 0,
    kappa: float = 2.0,
    class_kappa: Mapping[str, float] | None = None,
    class_slo_s: Mapping[str, float] | None = None,
    baseline: Mapping[int, float] | None = None,
) -> pa.Table:
    """A realistic multi-day workload: tenants, classes (dashboard, adhoc, report, backfill),
    diurnal and weekly patterns, bursts, scheduled report jobs and repeated query texts.

    ``class_kappa`` / ``class_slo_s`` override the SLO rule per class (another κ, or seconds);
    ``baseline`` ({template: seconds}) replaces the per-template baseline latency."""
    return _core.redbench_workload(
        days=days,
        seed=seed,
        queries_per_day=queries_per_day,
        tenants=tenants,
        start_weekday=start_weekday,
        kappa=kappa,
        class_kappa=dict(class_kappa) if class_kappa else None,
        class_slo_s=dict(class_slo_s) if class_slo_s else None,
        baseline=dict(baseline) if baseline else None,
    )


def window(workload: pa.Table, start_s: float, end_s: float) -> pa.Table:
    """The queries arriving in ``[start_s, end_s)``, their arrivals shifted to start at 0 s (a day of
    a multi-day workload, an hour of a day)."""
    w = workload.filter(pc.and_(pc.greater_equal(workload["arrival"], start_s), pc.less(workload["arrival"], end_s)))
    return w.set_column(w.schema.get_field_index("arrival"), "arrival", pc.subtract(w["arrival"], start_s))


def validate_workload(table: pa.Table, kappa: float | None = None) -> pa.Table:
    """Check a workload table and return it normalised. Raises :class:`autoslo.AutoSloCoreError`
    naming the problem (missing column, negative or unsorted arrival, unknown template, …)."""
    return _core.validate_workload(table, kappa=kappa)


def write_table(table: pa.Table, path: str | PathLike[str]) -> None:
    """Write a workload or trace table to Parquet."""
    pq.write_table(table, path)


def read_table(path: str | PathLike[str]) -> pa.Table:
    """Read a Parquet table (a workload or a trace)."""
    return pq.read_table(path)


def read_workload(path: str | PathLike[str], kappa: float | None = None) -> pa.Table:
    """Read and validate a workload from Parquet."""
    return validate_workload(read_table(path), kappa=kappa)
