"""Workload generators and Parquet I/O.

A workload is a ``pyarrow.Table`` with columns ``query_id`` (int), ``arrival`` (s, sorted),
``template`` (TPC-DS 1-99), ``instance`` (≥ 1), ``tenant``, ``class`` and ``slo`` (s). ``tenant``,
``class`` and ``query_id`` are optional on input; ``slo`` may be omitted when a ``kappa`` is given
(the paper's rule: κ × the per-template 16-RPU baseline latency).
"""

from __future__ import annotations

import re

from collections.abc import Mapping, Sequence
from typing import Any
from os import PathLike
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from autoslo import _core
from autoslo._files import atomic


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
    """Write a workload or trace table to Parquet. A local path's missing directories are created,
    and the file is written atomically (a temporary file, then a rename): an interrupted write
    leaves the file that was there before, never half a table."""
    if "://" in str(path):
        pq.write_table(table, path)
        return
    check_output(path)
    with atomic(Path(path)) as tmp:
        pq.write_table(table, tmp)


def check_output(path: str | PathLike[str] | None) -> None:
    """Refuse an output ``path`` that is an existing directory, so a command checks its outputs
    before a long run instead of failing after it (``None``: no output)."""
    if path is not None and Path(path).is_dir():
        raise IsADirectoryError(f"{path} is a directory: give a file name to write")


def read_table(path: str | PathLike[str]) -> pa.Table:
    """Read a table (a workload, a query log or a trace): CSV when the name ends ``.csv`` or
    ``.csv.gz``, Parquet otherwise. A directory reads as its ``*.parquet`` files in name order,
    one table (the parts ``autoslo serve --log`` writes, for example); hidden files, such as a
    part still being written, are left out."""
    csv = str(path).lower().endswith((".csv", ".csv.gz"))
    if "://" not in str(path):  # a local path; URIs (s3://…) go to pyarrow's filesystems as given
        p = Path(path)
        if p.is_dir():
            parts = sorted(f for f in p.glob("*.parquet") if not f.name.startswith((".", "_")))
            if not parts:
                raise FileNotFoundError(f"{p} is a directory with no Parquet file (*.parquet) in it")
            return pa.concat_tables([pq.read_table(f) for f in parts], promote_options="default")
        if not p.is_file():
            raise FileNotFoundError(f"no {'CSV' if csv else 'Parquet'} file at {p}")
    return pcsv.read_csv(path) if csv else pq.read_table(path)


def read_workload(path: str | PathLike[str], kappa: float | None = None) -> pa.Table:
    """Read and validate a workload from Parquet, or from CSV (a name ending ``.csv`` or
    ``.csv.gz``): a workload ``autoslo workload`` wrote, or a query log of your own.

    ``arrival`` is seconds from the start, or timestamps (ISO 8601 text in CSV; without ``Z`` or an
    offset read as UTC), which become seconds from midnight UTC of the first arrival's day, so the
    hours of the day keep their place. Rows are put in arrival order (a stable sort): a log need
    not be sorted. An error names rows as the file has them, counting data rows from 0; a file
    without rows is an error."""
    table = read_table(path)
    if table.num_rows == 0:
        raise _core.AutoSloCoreError(f"{path}: no queries (the file has no rows)")
    if "arrival" not in table.column_names:
        return validate_workload(table, kappa=kappa)
    epoch = epoch_seconds(table["arrival"], "workload")
    if epoch is not None and np.isfinite(epoch).any():
        origin = np.floor(np.nanmin(epoch) / 86_400.0) * 86_400.0
        mask = pc.is_null(table["arrival"])
        table = table.set_column(table.schema.get_field_index("arrival"), "arrival", pa.array(epoch - origin, pa.float64(), mask=mask.to_numpy(zero_copy_only=False)))
    order = pc.sort_indices(table, [("arrival", "ascending")])
    try:
        return validate_workload(table.take(order), kappa=kappa)
    except _core.AutoSloCoreError as e:
        # The core numbers rows after the sort; say them as the file has them.
        rows = order.to_numpy()
        raise _core.AutoSloCoreError(re.sub(r"\brow (\d+)", lambda m: f"row {rows[int(m.group(1))]}" if int(m.group(1)) < rows.size else m.group(0), str(e))) from None


def epoch_seconds(col: pa.ChunkedArray | pa.Array, what: str, column: str = "arrival") -> np.ndarray | None:
    """Seconds since 1970-01-01 UTC of a column (``arrival`` unless named) of timestamps, dates
    or ISO 8601 text (with ``Z`` or an offset, or without: then read as UTC); ``None`` when it
    holds numbers (seconds from a start). A text row neither form reads raises
    :class:`autoslo.AutoSloCoreError` naming ``what``, the row and the column."""
    arr = col
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = _parse_timestamps(arr, what, column)
    if not (pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type)):
        return None
    if pa.types.is_date(arr.type):
        arr = pc.cast(arr, pa.timestamp("s"))
    unit = arr.type.unit
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[unit]
    if getattr(arr.type, "tz", None) is not None:
        arr = pc.cast(arr, pa.timestamp(unit, tz="UTC"))
    return pc.cast(pc.cast(arr, pa.timestamp(unit)), pa.int64()).to_numpy(zero_copy_only=False) / scale


def _parse_timestamps(col: pa.ChunkedArray | pa.Array, what: str, column: str = "arrival") -> pa.ChunkedArray | pa.Array:
    """ISO 8601 text as UTC timestamps, row by row when the rows mix the forms; the first row
    neither form reads is an error naming it."""

    def read(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray | None:
        for form in (pa.timestamp("us"), pa.timestamp("us", tz="UTC")):
            try:
                return pc.cast(pc.cast(values, form), pa.timestamp("us"))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
        return None

    whole = read(col)
    if whole is not None:
        return whole
    texts = col.to_pylist()
    out = []
    for row, text in enumerate(texts):
        one = read(pa.array([text], pa.string()))
        if one is None:
            if _is_number(text):
                # Seconds with a typo somewhere make the CSV reader keep the column as text: name
                # the row that is not a number, not the first row that is one.
                bad = next((r for r, t in enumerate(texts) if t is not None and not _is_number(t)), None)
                if bad is None:
                    raise _core.AutoSloCoreError(f"{what}, column `{column}`: seconds stored as text; store them as numbers")
                raise _core.AutoSloCoreError(f"{what} row {bad}, column `{column}`: {texts[bad]!r} is not a number of seconds (row {row} is one)")
            raise _core.AutoSloCoreError(
                f"{what} row {row}, column `{column}`: {text!r} is not an ISO 8601 time (such as 2024-04-01T10:00:00, with Z or an offset, or without: UTC)"
            )
        out.append(one[0].as_py())
    return pa.chunked_array([pa.array(out, pa.timestamp("us"))])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def slo_feasibility(workload: pa.Table, sizes: Sequence[int]) -> pa.Table:
    """Which SLOs no cluster of ``sizes`` (RPU) can meet, even with the query alone on it.

    Returns ``workload`` with three columns added: ``fastest_rpu`` (the size among ``sizes`` on
    which the query's text runs fastest alone), ``fastest_s`` (that mean isolated runtime, from the
    bundled TPC-DS catalog, :func:`autoslo.isolated_runtime`) and ``feasible`` (``slo`` ≥
    ``fastest_s``). A query that is not feasible misses its SLO on every cluster of those sizes,
    however many there are and however the router places it: scaling cannot fix it; a larger size
    or a looser SLO can. The runtime is the catalog's mean, so a feasible query with little slack
    can still miss (queueing, interference, a cold cluster, the emulator's noise).

    Group the result by ``tenant`` and ``class`` to see whose SLOs are out of reach::

        f = slo_feasibility(workload, [16, 32])
        f.group_by(["tenant", "class"]).aggregate([("feasible", "mean")])
    """
    missing = [c for c in ("template", "instance", "slo") if c not in workload.column_names]
    if missing:
        raise ValueError(f"slo_feasibility needs the workload columns {missing} (see autoslo.workloads)")
    sizes = list(sizes)
    if not sizes:
        raise ValueError("slo_feasibility needs at least one cluster size (RPU)")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, int) or not _core.is_base_capacity(s):
            raise ValueError(f"cluster sizes are {_core.BASE_CAPACITIES}, got {s!r}")
    best: dict[tuple[int, int], tuple[float, int]] = {}
    templates, instances = workload["template"].to_pylist(), workload["instance"].to_pylist()
    for i, key in enumerate(zip(templates, instances)):
        if key in best:
            continue
        if key[0] is None or key[1] is None:
            raise ValueError(f"row {i}: template and instance must not be null")
        best[key] = min((_core.isolated_runtime(key[0], key[1], s), s) for s in sizes)
    fastest = [best[k] for k in zip(templates, instances)]
    fastest_s = pa.array([f[0] for f in fastest], pa.float64())
    t = workload.append_column("fastest_rpu", pa.array([f[1] for f in fastest], pa.int64())).append_column("fastest_s", fastest_s)
    return t.append_column("feasible", pc.fill_null(pc.greater_equal(workload["slo"], fastest_s), False))


def slo_out_of_reach(workload: pa.Table, sizes: Sequence[int], weight: Sequence[int] | None = None) -> dict[str, Any]:
    """The share of ``workload``'s queries whose SLO no cluster of ``sizes`` can meet
    (:func:`slo_feasibility`), overall (``share``) and per tenant (``per_tenant``; empty without a
    ``tenant`` column). ``weight``: how many queries each row stands for (default one each)."""
    late = [not ok for ok in slo_feasibility(workload, sizes)["feasible"].to_pylist()]
    weights = [1] * len(late) if weight is None else list(weight)
    tenants = workload["tenant"].to_pylist() if "tenant" in workload.column_names else [None] * len(late)
    total: dict[str | None, list[int]] = {}
    for tenant, out, w in zip(tenants, late, weights):
        t = total.setdefault(tenant, [0, 0])
        t[0] += w
        t[1] += w if out else 0
    queries, missed = sum(t[0] for t in total.values()), sum(t[1] for t in total.values())
    per_tenant = {k: v[1] / v[0] for k, v in sorted(total.items()) if k is not None and v[0]}
    return {"share": missed / queries if queries else 0.0, "per_tenant": per_tenant}
