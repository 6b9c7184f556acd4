"""The Policy Tuner (§7): plan tomorrow's execution configuration from history.

- :class:`Reservoir`: the Workload Reservoir, on disk. A count table (date, hour, query text,
  tenant, class → count) and an arrivals table (date, hour, second offset within the hour, a
  bounded uniform sample per hour), one Parquet partition per day, each file written atomically.
- :func:`forecast`: the Workload Forecaster (same weekday and hour, decay λ^(k−1); or the
  previous day; or an equal 7-day window), N seeded forecasts split into training and validation.
- :func:`simulate_batch`: SimulateBatch, configurations × workloads on the Workload Simulator in
  parallel (rayon), with a progress bar.
- :func:`tune`: forecast → ScheduleSpinups (Algorithms 4–5) → Configuration Tuner, returning an
  :class:`ExecutionConfig` that ``autoslo emulate --config`` and the live control plane run.

Dates are calendar days; inside the tables they are stored as days since 1970-01-01.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from autoslo import _core, corejson
from autoslo._files import atomic, remove_unfinished
from autoslo.bundled import predictor_for
from autoslo.progress import progress_bar
from autoslo.ray_backend import RayBackend, backend_for
from autoslo.tenancy import apply_slo_policy
from autoslo.traces import trace_classes
from autoslo.workloads import epoch_seconds, slo_out_of_reach, validate_workload

EPOCH = dt.date(1970, 1, 1)
DAY_S = 86_400.0
#: A tuning whose newest history day is more days than this before the day tuned is reported as
#: stale (``autoslo tune`` warns): the plan reflects that history, not recent traffic.
STALE_HISTORY_DAYS = 28
#: Whose violation rate the target τ holds (``TunerSettings.tau_scope``): the fleet's (the paper's),
#: or the fleet's and every tenant's (a change).
TAU_SCOPES = ("fleet", "tenant")


def day_number(day: dt.date | str) -> int:
    """Days since 1970-01-01 of a date (or an ISO ``YYYY-MM-DD`` string)."""
    if isinstance(day, str):
        try:
            day = dt.date.fromisoformat(day)
        except ValueError:
            raise ValueError(f"not a date: {day!r} (use YYYY-MM-DD)") from None
    return (day - EPOCH).days


def day_of(number: int) -> dt.date:
    """The calendar date of a day number (days since 1970-01-01), the inverse of :func:`day_number`."""
    return EPOCH + dt.timedelta(days=int(number))


# ---------------------------------------------------------------------------------------------
# Execution configurations


class ExecutionConfig:
    """An execution configuration: initial clusters, scheduled spinups, the autoscaler's
    parameters and the routing policy. Validated by the core on creation (unknown keys, bad
    values and unknown policies are errors that name the field)."""

    def __init__(self, data: Mapping[str, Any] | str) -> None:
        text = data if isinstance(data, str) else corejson.dumps(dict(data), "execution configuration")
        self._data: dict[str, Any] = json.loads(_core.validate_execution_config(text))

    @classmethod
    def fixed(cls, clusters: Sequence[int], routing: str = "autoslo") -> ExecutionConfig:
        """A fixed cluster set (no autoscaler, no schedule)."""
        return cls({"initial_clusters": [int(c) for c in clusters], "autoscaler": None, "routing": routing})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ExecutionConfig:
        """Read a YAML (or JSON) configuration file."""
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise _core.AutoSloCoreError(f"{p}: not valid YAML ({e})") from None
        if not isinstance(data, dict):
            raise _core.AutoSloCoreError(f"{p}: an execution configuration is a mapping with `initial_clusters`, `scheduled_spinups`, `autoscaler`, `routing`")
        try:
            return cls(data)
        except _core.AutoSloCoreError as e:
            raise _core.AutoSloCoreError(f"{p}: {e}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write as YAML, atomically (a reader never sees half a file)."""
        text = "# AutoSLO execution configuration (autoslo emulate --config, autoslo.control_plane(config=...))\n"
        text += yaml.safe_dump(self._data, sort_keys=False)
        with atomic(Path(path)) as tmp:
            tmp.write_text(text)

    def to_json(self) -> str:
        """The configuration as JSON, every field filled in (what the core reads)."""
        return json.dumps(self._data)

    def as_dict(self) -> dict[str, Any]:
        """A copy of the configuration as plain dicts and lists (the YAML file's content)."""
        return json.loads(json.dumps(self._data))

    def from_time(self, start_s: float) -> ExecutionConfig:
        """The plan as a control plane starting ``start_s`` seconds into the day runs it (one
        started, or restarted, at 10:00 gives 36000): the clusters scheduled to spin up before
        then are initial clusters, and the other spinups come ``start_s`` earlier on its clock,
        which counts from its start. ``from_time(0)`` is the plan itself."""
        if isinstance(start_s, bool) or not isinstance(start_s, (int, float)) or not (np.isfinite(start_s) and start_s >= 0):
            raise ValueError(f"the start is a time of the day in seconds ≥ 0, got {start_s!r}")
        data = self.as_dict()
        due = [s for s in data["scheduled_spinups"] if s["at_s"] < start_s]
        data["initial_clusters"] = [*data["initial_clusters"], *(s["size"] for s in due)]
        data["scheduled_spinups"] = [{**s, "at_s": s["at_s"] - start_s} for s in data["scheduled_spinups"] if s["at_s"] >= start_s]
        return ExecutionConfig(data)

    @property
    def initial_clusters(self) -> list[int]:
        """Sizes (RPU) of the clusters the day starts with."""
        return list(self._data["initial_clusters"])

    @property
    def scheduled_spinups(self) -> list[tuple[float, int]]:
        """(time of day in seconds, size in RPU), in time order."""
        return [(s["at_s"], s["size"]) for s in self._data["scheduled_spinups"]]

    @property
    def autoscaler(self) -> dict[str, Any] | None:
        """The autoscaler's parameters (policy, τ, sizes, T_idle, …), or ``None`` for none."""
        a = self._data["autoscaler"]
        return dict(a) if a is not None else None

    @property
    def routing(self) -> str:
        """The routing policy's name (one of ``autoslo._core.ROUTING_POLICIES``)."""
        return str(self._data["routing"])

    @property
    def slo_policy(self) -> dict[str, Any] | None:
        """Deadlines per (tenant tier, class) with per-template overrides, if the configuration sets them
        (see :func:`autoslo.tenancy.apply_slo_policy`)."""
        return self._data.get("slo_policy")

    @property
    def provenance(self) -> dict[str, Any] | None:
        """Who made the configuration and from what (version, day, days of history, τ), if recorded."""
        p = self._data.get("provenance")
        return dict(p) if p else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExecutionConfig) and self._data == other._data

    def __repr__(self) -> str:
        ups = ", ".join(f"{s}@{t / 3600:.2f}h" for t, s in self.scheduled_spinups)
        a = self.autoscaler
        return f"ExecutionConfig(initial={self.initial_clusters}, spinups=[{ups}], autoscaler={a['policy'] if a else None}, routing={self.routing})"


# ---------------------------------------------------------------------------------------------
# The Workload Reservoir

COUNT_SCHEMA = pa.schema(
    [("date", pa.int64()), ("hour", pa.int64()), ("template", pa.int64()), ("instance", pa.int64()), ("tenant", pa.string()), ("class", pa.string()), ("count", pa.int64())]
)
ARRIVAL_SCHEMA = pa.schema([("date", pa.int64()), ("hour", pa.int64()), ("offset_s", pa.float64())])


def _bad(row: int, column: str, problem: str) -> _core.AutoSloCoreError:
    return _core.AutoSloCoreError(f"query log row {row}, column `{column}`: {problem}")


def _first_uncastable(col: pa.ChunkedArray, to: pa.DataType) -> int:
    """The first row of ``col`` that does not cast to ``to`` (``col`` as a whole does not), by
    bisection: O(log n) casts of O(n) rows in all."""
    lo, hi = 0, len(col)  # rows [0, lo) cast; rows [lo, hi) hold one that does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            pc.cast(col.slice(lo, mid - lo), to)
            lo = mid
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            hi = mid
    return lo


def _log_columns(log: pa.Table, start_date: dt.date | str | None, day: dt.date | str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[str]]:
    """(arrival as seconds since 1970-01-01, template, instance, …) of a query log, checked row
    by row. Arrivals in seconds count from midnight of ``start_date``, else of ``day``."""
    for c in ("arrival", "template", "instance"):
        if c not in log.column_names:
            raise _core.AutoSloCoreError(f"query log: missing column `{c}` (a query log has arrival, template, instance, and optionally tenant and class)")
    n = log.num_rows
    for c in ("arrival", "template", "instance", "tenant", "class"):
        if c in log.column_names and log[c].null_count:
            row = int(np.flatnonzero(pc.is_null(log[c]).to_numpy(zero_copy_only=False))[0])
            raise _bad(row, c, "missing value")
    arr = log["arrival"]
    epoch = epoch_seconds(arr, "query log")
    if epoch is not None:
        seconds = epoch
        if start_date is not None:
            raise _core.AutoSloCoreError("query log: `arrival` holds timestamps, so no start date is needed (give one only for arrivals in seconds)")
    else:
        if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)):
            raise _bad(0, "arrival", f"type {arr.type} is neither a timestamp nor seconds")
        start_date = start_date if start_date is not None else day
        if start_date is None:
            raise _core.AutoSloCoreError("query log: `arrival` is in seconds; give the calendar date of second 0 as the start date (start_date= or --start-date)")
        seconds = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False) + day_number(start_date) * DAY_S
        rel = seconds - day_number(start_date) * DAY_S
        bad = np.flatnonzero(~np.isfinite(rel) | (rel < 0))
        if bad.size:
            raise _bad(int(bad[0]), "arrival", f"{rel[bad[0]]} is not a time ≥ 0 s")
    ints = {}
    for c, lo, hi in (("template", 1, 99), ("instance", 1, 65535)):
        col = log[c]
        if not pa.types.is_integer(col.type):
            try:
                col = pc.cast(col, pa.int64())
            except pa.ArrowNotImplementedError:
                raise _bad(0, c, f"type {col.type} is not an integer") from None
            except pa.ArrowInvalid:
                row = _first_uncastable(col, pa.int64())
                raise _bad(row, c, f"{col[row].as_py()!r} is not a whole number") from None
        v = col.to_numpy(zero_copy_only=False).astype(np.int64)
        bad = np.flatnonzero((v < lo) | (v > hi))
        if bad.size:
            raise _bad(int(bad[0]), c, f"{v[bad[0]]} is outside {lo}–{hi}")
        ints[c] = v
    tenant = log["tenant"].to_pylist() if "tenant" in log.column_names else ["default"] * n
    klass = log["class"].to_pylist() if "class" in log.column_names else ["adhoc"] * n
    for c, values in (("tenant", tenant), ("class", klass)):
        for row, v in enumerate(values):
            if not isinstance(v, str) or not v:
                raise _bad(row, c, f"{v!r} is not a non-empty name")
    return seconds, ints["template"], ints["instance"], tenant, klass


# The counts file's metadata key listing the fingerprints of the logs a day was built from.
_LOGS_KEY = b"autoslo.logs"


def _fingerprint(seconds: np.ndarray, template: np.ndarray, instance: np.ndarray, tenant: list[str], klass: list[str], sel: np.ndarray) -> str:
    """A digest of one day's rows of a query log, independent of their order."""
    idx = np.flatnonzero(sel)
    names = np.array([f"{tenant[i]}\0{klass[i]}" for i in idx], dtype=object)
    order = np.lexsort((names, instance[idx], template[idx], seconds[idx]))
    h = hashlib.sha256()
    for a in (seconds[idx][order].astype(np.float64), template[idx][order].astype(np.int64), instance[idx][order].astype(np.int64)):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update("\n".join(names[order]).encode())
    return h.hexdigest()


class Reservoir:
    """The Workload Reservoir: every query that reached AutoSLO, as counts and sampled arrivals.

    ``path`` is a directory; each calendar day is a partition ``day=YYYY-MM-DD`` with
    ``counts.parquet`` and ``arrivals.parquet``. Each file is replaced atomically (written beside,
    then renamed), so a crash mid-append leaves every stored day readable. The arrivals table keeps
    at most ``max_arrivals_per_hour`` offsets per (date, hour), a uniform sample of all arrivals
    (weighted reservoir sampling across appends, seeded); the count table is exact. The directory
    is created unless ``create=False``, which opens an existing reservoir only (a mistyped path
    then raises ``FileNotFoundError`` instead of reading as an empty reservoir).
    """

    def __init__(self, path: str | os.PathLike[str], max_arrivals_per_hour: int = 2000, seed: int = 0, *, create: bool = True) -> None:
        if max_arrivals_per_hour < 2:
            raise ValueError("max_arrivals_per_hour must be ≥ 2 (interarrival gaps need two arrivals)")
        self.path = Path(path)
        self.max_arrivals_per_hour = max_arrivals_per_hour
        self.seed = seed
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(f"a Workload Reservoir is a directory, and {self.path} is a file")
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
        elif not self.path.is_dir():
            raise FileNotFoundError(f"no Workload Reservoir at {self.path}: add a query log first (autoslo reservoir add --reservoir {self.path} --log FILE)")

    def _dir(self, date: int) -> Path:
        return self.path / f"day={day_of(date).isoformat()}"

    def days(self) -> list[dt.date]:
        """Stored days, in order."""
        out = []
        for d in self.path.glob("day=*"):
            if (d / "counts.parquet").exists():
                out.append(dt.date.fromisoformat(d.name[4:]))
        return sorted(out)

    def append(self, log: pa.Table, start_date: dt.date | str | None = None, replace: bool = False, day: dt.date | str | None = None) -> list[dt.date]:
        """Add a query log: columns ``arrival`` (timestamps or ISO 8601 text, read as UTC: days and hours are UTC; or
        seconds from midnight of ``start_date``, by default of ``day``),
        ``template``, ``instance``, optional ``tenant`` and ``class``. A malformed row raises
        :class:`autoslo.AutoSloCoreError` naming the row and the column. With ``replace=True`` the
        days in ``log`` replace what is stored for them (re-ingesting a day is idempotent);
        otherwise they are added to it, and a day's rows added before (the same log again, in any
        row order) raise :class:`ValueError` before anything is written: counts would double. With
        ``day``, only that calendar day's rows are stored (a daily ingest; rows of other days are
        left out). Returns the days written."""
        seconds, template, instance, tenant, klass = _log_columns(log, start_date, day)
        if log.num_rows == 0:
            return []
        date = np.floor(seconds / DAY_S).astype(np.int64)
        if day is not None:
            keep = date == day_number(day)
            seconds, template, instance, date = seconds[keep], template[keep], instance[keep], date[keep]
            tenant, klass = [t for t, k in zip(tenant, keep) if k], [c for c, k in zip(klass, keep) if k]
            if date.size == 0:
                return []
        within = seconds - date * DAY_S
        hour = np.minimum((within // 3600).astype(np.int64), 23)
        offset = np.minimum(within - hour * 3600.0, np.nextafter(3600.0, 0))
        rows = pa.table({"date": date, "hour": hour, "template": template, "instance": instance, "tenant": tenant, "class": klass})
        days = np.unique(date)
        prints = {int(d): _fingerprint(seconds, template, instance, tenant, klass, date == d) for d in days}
        # One writer at a time: two appends that read a day before either wrote it would each write
        # the old rows plus their own, and the first one's rows would be lost.
        with self._writer():
            return self._write(rows, date, hour, offset, days, prints, replace)

    @contextmanager
    def _writer(self) -> Iterator[None]:
        """Hold the reservoir's writer lock (an exclusive ``flock`` of ``.lock``, released if the
        process dies)."""
        with open(self.path / ".lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                # An append killed mid-write left its temporary file beside a day's partition.
                for part in self.path.glob("day=*"):
                    remove_unfinished(part)
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _write(self, rows: pa.Table, date: np.ndarray, hour: np.ndarray, offset: np.ndarray, days: np.ndarray, prints: dict[int, str], replace: bool) -> list[dt.date]:
        if not replace:
            again = [day_of(d).isoformat() for d, fp in prints.items() if fp in self._fingerprints(d)]
            if again:
                raise ValueError(
                    f"the Workload Reservoir at {self.path} already holds these rows for {', '.join(again)}: adding them again would "
                    "double their counts (re-ingest a day with replace=True, or --replace); nothing was written"
                )
        written = []
        for d in days:
            sel = date == d
            new_counts = rows.filter(pa.array(sel)).group_by(["date", "hour", "template", "instance", "tenant", "class"]).aggregate([("date", "count")]).rename_columns(
                ["date", "hour", "template", "instance", "tenant", "class", "count"]
            )
            new_counts = new_counts.select(COUNT_SCHEMA.names).cast(COUNT_SCHEMA)
            new_arr = pa.table({"date": date[sel], "hour": hour[sel], "offset_s": offset[sel]}, schema=ARRIVAL_SCHEMA)
            self._merge_day(int(d), new_counts, new_arr, replace, prints[int(d)])
            written.append(day_of(int(d)))
        return written

    def _fingerprints(self, date: int) -> list[str]:
        """The fingerprints of the logs that made up a stored day (in its counts file's metadata)."""
        path = self._dir(date) / "counts.parquet"
        if not path.exists():
            return []
        meta = pq.read_schema(path).metadata or {}
        return list(json.loads(meta.get(_LOGS_KEY, b"[]")))

    def _merge_day(self, date: int, counts: pa.Table, arrivals: pa.Table, replace: bool, fingerprint: str) -> None:
        part = self._dir(date)
        old_n: dict[int, int] = {}
        logs = [fingerprint] if replace else [*self._fingerprints(date), fingerprint]
        if not replace and (part / "counts.parquet").exists():
            old_counts = pq.read_table(part / "counts.parquet", schema=COUNT_SCHEMA)
            old_arr = pq.read_table(part / "arrivals.parquet", schema=ARRIVAL_SCHEMA) if (part / "arrivals.parquet").exists() else ARRIVAL_SCHEMA.empty_table()
            for h, n in zip(*[c.to_pylist() for c in old_counts.group_by("hour").aggregate([("count", "sum")]).columns]):
                old_n[h] = n
            counts = pa.concat_tables([old_counts, counts]).group_by(["date", "hour", "template", "instance", "tenant", "class"]).aggregate([("count", "sum")])
            counts = counts.rename_columns([*COUNT_SCHEMA.names[:-1], "count"]).select(COUNT_SCHEMA.names).cast(COUNT_SCHEMA)
        else:
            old_arr = ARRIVAL_SCHEMA.empty_table()
        arrivals = self._sample(date, old_arr, old_n, arrivals)
        counts = counts.sort_by([("hour", "ascending"), ("template", "ascending"), ("instance", "ascending"), ("tenant", "ascending"), ("class", "ascending")])
        part.mkdir(parents=True, exist_ok=True)
        # Arrivals first: a crash between the two renames leaves the day's old counts (the day's
        # presence is its counts file) with a newer arrival sample, never a broken file.
        with atomic(part / "arrivals.parquet") as tmp:
            pq.write_table(arrivals, tmp)
        with atomic(part / "counts.parquet") as tmp:
            pq.write_table(counts.replace_schema_metadata({_LOGS_KEY: json.dumps(logs)}), tmp)

    def _sample(self, date: int, old: pa.Table, old_n: dict[int, int], new: pa.Table) -> pa.Table:
        """Per hour, at most ``max_arrivals_per_hour`` offsets: a uniform sample of old and new
        arrivals, each kept old offset standing for (old arrivals) / (kept) of them."""
        rng = np.random.default_rng([self.seed, date & 0xFFFFFFFF, old.num_rows, new.num_rows])
        oh, oo = old["hour"].to_numpy(), old["offset_s"].to_numpy()
        nh, no = new["hour"].to_numpy(), new["offset_s"].to_numpy()
        hours, offs = [], []
        for h in range(24):
            a, b = oo[oh == h], no[nh == h]
            w = np.concatenate([np.full(a.size, old_n.get(h, a.size) / max(a.size, 1)), np.ones(b.size)])
            v = np.concatenate([a, b])
            if v.size > self.max_arrivals_per_hour:
                # Efraimidis–Spirakis: the k largest u^(1/w) are a weighted sample without replacement.
                keys = rng.random(v.size) ** (1.0 / w)
                v = v[np.argpartition(-keys, self.max_arrivals_per_hour)[: self.max_arrivals_per_hour]]
            v.sort()
            hours.append(np.full(v.size, h, dtype=np.int64))
            offs.append(v)
        hour = np.concatenate(hours)
        return pa.table({"date": np.full(hour.size, date, dtype=np.int64), "hour": hour, "offset_s": np.concatenate(offs)}, schema=ARRIVAL_SCHEMA)

    def tables(self, days: Sequence[dt.date] | None = None) -> tuple[pa.Table, pa.Table]:
        """(counts, arrivals) of ``days`` (default: all stored), dates as days since 1970-01-01."""
        days = self.days() if days is None else list(days)
        counts, arrivals = [], []
        for d in days:
            part = self._dir(day_number(d))
            if not (part / "counts.parquet").exists():
                raise _core.AutoSloCoreError(f"the reservoir at {self.path} holds no day {d}")
            counts.append(pq.read_table(part / "counts.parquet", schema=COUNT_SCHEMA))
            if (part / "arrivals.parquet").exists():
                arrivals.append(pq.read_table(part / "arrivals.parquet", schema=ARRIVAL_SCHEMA))
        c = pa.concat_tables(counts) if counts else COUNT_SCHEMA.empty_table()
        a = pa.concat_tables(arrivals) if arrivals else ARRIVAL_SCHEMA.empty_table()
        return c, a

    def history(self, before: dt.date | str, days: int | None = None) -> list[dt.date]:
        """The stored days before ``before``: all, or the last ``days`` calendar days (0: none)."""
        if days is not None and days < 0:
            raise ValueError(f"days of history must be ≥ 0 (or None for all), got {days}")
        b = day_number(before)
        return [d for d in self.days() if day_number(d) < b and (days is None or b - day_number(d) <= days)]

    def queries(self, days: Sequence[dt.date] | None = None) -> int:
        """Queries counted over ``days`` (default: all)."""
        c, _ = self.tables(days)
        return int(pc.sum(c["count"]).as_py() or 0)


# ---------------------------------------------------------------------------------------------
# Forecasts, SimulateBatch, tuning


@dataclass
class Forecasts:
    """Forecasted workloads for one day."""

    training: list[pa.Table]
    validation: list[pa.Table]
    #: The policy that produced them (``decay`` falls back to ``previous-day`` without a same-weekday day).
    policy: str
    days_used: list[dt.date]

    def __repr__(self) -> str:
        sizes = [t.num_rows for t in self.training + self.validation]
        mean = sum(sizes) / len(sizes) if sizes else 0.0
        days = ", ".join(str(d) for d in self.days_used)
        return f"Forecasts(policy={self.policy!r}, training={len(self.training)}, validation={len(self.validation)}, mean {mean:.0f} queries each, from [{days}])"


def forecast(
    reservoir: Reservoir,
    day: dt.date | str,
    *,
    history_days: int | None = None,
    kappa: float = 2.0,
    policy: str = "decay",
    decay: float = 0.5,
    forecasts: int = 20,
    training_share: float = 0.6,
    seed: int = 0,
) -> Forecasts:
    """Forecast ``day``'s workload from the reservoir's days before it (the last ``history_days``
    calendar days, or all). SLOs are ``kappa`` × the per-template baseline."""
    days = reservoir.history(day, history_days)
    if not days:
        raise _core.AutoSloCoreError(f"the reservoir holds no day before {day}: nothing to forecast from")
    counts, arrivals = reservoir.tables(days)
    tr, va, used, days_used = _core.forecast(
        counts, arrivals, [day_number(d) for d in days], day_number(day), kappa=kappa, policy=policy, decay=decay, forecasts=forecasts, training_share=training_share, seed=seed
    )
    return Forecasts(training=tr, validation=va, policy=used, days_used=[day_of(d) for d in days_used])


def simulate_batch(
    configs: Sequence[ExecutionConfig],
    workloads: Sequence[pa.Table],
    *,
    predictor: _core.Predictor | None = None,
    keep_logs: bool = False,
    spinup_s: float = 300.0,
    progress: bool = False,
    backend: str | RayBackend | None = None,
) -> list[list[dict[str, Any]]]:
    """SimulateBatch: ``R[i][j]`` is configuration ``i`` on workload ``j`` in the Workload
    Simulator (violation rate, cost, clusters; per-query ``arrival``/``end``/``violated`` with
    ``keep_logs``). Runs on this machine's cores (``backend="rayon"``, the default) or on a Ray
    cluster (``"ray"`` or a :class:`~autoslo.ray_backend.RayBackend`); the results are the same.
    Ctrl-C stops it cleanly (``KeyboardInterrupt``)."""
    update, close = progress_bar(progress, "SimulateBatch", "sim")
    try:
        return _core.simulate_batch(
            [c.to_json() for c in configs], list(workloads), predictor_for(True, predictor), keep_logs=keep_logs, spinup_s=spinup_s, progress=update, backend=backend_for(backend)
        )
    finally:
        close()


@dataclass
class TunerSettings:
    """The Policy Tuner's settings (defaults: the reference implementation's values). Every value
    is checked at construction: a bad one raises ``ValueError`` (or :class:`AutoSloCoreError`, a
    ``ValueError``) naming it, before any history is read.

    ``initial_clusters``: the initial cluster sets whose configurations ScheduleSpinups evolves;
    ``autoscaler``: the autoscaler of every candidate (a dict of ``AutoscalerKnobs`` fields, or
    ``None`` for scheduled spinups only); ``forecasts`` × ``training_share`` forecasts train, the
    rest validate; ``eta`` (η) spinups at most, ``phi`` (φ) attempts per round, ``spinup_sizes``
    (S); ``delinquent_k`` (k) and ``sigma_min_s`` (σ_min) of FindGoodSpinupTime; the
    Configuration Tuner's ``strategy`` (``grid``; ``random``, ``budget`` points;
    ``coordinate-descent``, ``budget`` sweeps; ``adaptive-batch``, widening batches around the best
    so far that stop after ``budget`` + 1 batches in a row without a better one) and ``top_k`` over ``space`` (knob → values; ``{}`` for the default ranges, the reference ones
    with T_idle over ``_core.DEFAULT_T_IDLE_S`` (600, 1200, 1800 s) and τ_trigger over ``_core.DEFAULT_TAU_TRIGGER`` (0.02, 0.05, 0.1),
    and the initial clusters, the autoscaler's eligible sizes and the selector's headroom searched too (:func:`default_space`),
    changes measured in ``docs/tuner.md``; ``None`` to skip the
    Configuration Tuner). ``simulator_cold_start_factor`` (≥ 1; ``None``, the paper's simulator,
    by default) makes the Workload Simulator slow queries on clusters spun up during a simulation
    as the emulator does, fading over ``simulator_cold_start_s``: a change, measured in
    ``docs/tuner.md``. ``simulator_noise_sigma`` (σ in [0, 3]; ``None``, the paper's simulator, by
    default) scatters each simulated latency around its prediction by ``exp(σ·z)``, ``z`` a
    standard normal drawn per query from ``seed``, the same draw in every configuration: a change,
    measured in ``docs/tuner.md`` (not adopted). ``cost_tolerance`` (a fraction ≥ 0; default
    ``_core.DEFAULT_COST_TOLERANCE``, 0, the listing's BestWithTarget): among configurations that meet the simulated target
    within this fraction of the cheapest one's cost, the Configuration Tuner takes the one with the
    fewest simulated violations, a change measured in ``docs/tuner.md``; 0 is BestWithTarget as
    listed. ``simulator_class_scale`` (class name → multiplier in [0.05, 20]; ``None``, the paper's
    simulator, by default) makes the Workload Simulator take each query of a listed class as its
    prediction times that class's multiplier, as :func:`class_latency_scale` measures it on the
    warehouse's own past executions: a change, measured in ``docs/tuner.md``. ``slo_policy`` (an
    execution configuration's ``slo_policy``: deadlines per tenant tier and workload class, see
    :func:`autoslo.tenancy.apply_slo_policy`; ``None``, κ × baseline, by default) holds every
    simulated forecast to your deadlines, and the configuration produced carries the policy, so
    the emulator, the simulator and live runs hold the day to the same ones. ``tau_scope``
    (``"fleet"``, the paper's, by default) is whose violation rate τ holds: ``"tenant"`` (a change)
    holds the fleet's and every tenant's, so a configuration whose fleet meets τ while one tenant
    runs late is not taken (the validation report gives each tenant's rate either way).
    ``estimate_gap`` (how much later the warehouse ran a past day's plan than the tuner
    estimated: the violation rate observed that day minus the plan's validation violation rate,
    :func:`estimate_gap`; ``None``, the listing, by default) holds simulations to τ minus that
    gap unless ``tau_simulated`` is given (:func:`learned_tau_simulated`): the tuner learns from
    yesterday how optimistic its estimate was (forecasts and simulator together), a change measured in
    ``docs/tuner.md``."""

    tau: float = 0.1
    tau_scope: str = "fleet"
    tau_simulated: float | None = None
    estimate_gap: float | None = None
    cost_tolerance: float = _core.DEFAULT_COST_TOLERANCE
    simulator_cold_start_factor: float | None = None
    simulator_cold_start_s: float = 300.0
    simulator_noise_sigma: float | None = None
    simulator_class_scale: dict[str, float] | None = None
    initial_clusters: list[list[int]] = field(default_factory=lambda: [[16], [32]])
    autoscaler: dict[str, Any] | None = field(default_factory=dict)
    routing: str = "autoslo"
    forecast_policy: str = "decay"
    decay: float = 0.5
    arrivals: str = "deciles"
    forecasts: int = 20
    training_share: float = 0.6
    seed: int = 0
    eta: int = 5
    phi: int = 3
    spinup_sizes: list[int] = field(default_factory=lambda: [16, 32])
    delinquent_k: int | None = None
    sigma_min_s: float = 1800.0
    alpha: str = "mean"
    strategy: str = "coordinate-descent"
    budget: int = 1
    top_k: int = 3
    space: dict[str, list[Any]] | None = field(default_factory=dict)
    slo_policy: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # Counts: named here, so a bad one is reported by name (the core checks every other range).
        for name in ("forecasts", "seed", "eta", "phi", "budget", "top_k", "delinquent_k"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"tuner setting `{name}` must be a whole number ≥ 0, got {v!r}")
        scale = self.simulator_class_scale
        if scale is not None:
            if not isinstance(scale, Mapping) or not all(isinstance(c, str) for c in scale):
                raise ValueError(f"tuner setting `simulator_class_scale` must map workload class names to multipliers, got {scale!r}")
            for c, v in scale.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                    raise ValueError(f"tuner setting `simulator_class_scale`: the multiplier of class {c!r} must be a finite number, got {v!r}")
        if self.tau_scope not in TAU_SCOPES:
            raise ValueError(f"tuner setting `tau_scope` must be one of {', '.join(TAU_SCOPES)}, got {self.tau_scope!r}")
        # Every other number goes to the core as JSON, which has no NaN or infinity: refused now, by name.
        corejson.check_finite(self.__dict__, "tuner settings")
        # The core checks every other value (ranges, policy names, sizes, the autoscaler) as
        # `tune` would take them: a bad one is refused here, where it is written.
        self.to_json()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "tuner settings") -> TunerSettings:
        """Settings from a mapping of field → value (a YAML file's, a DAG's ``params``). A key
        that is not a field is refused by name, with the known ones, instead of Python's
        "unexpected keyword argument"; ``source`` names where the mapping came from in errors."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: tuner settings are a mapping of setting → value, got {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ValueError(f"{source}: unknown tuner settings {unknown} (known: {sorted(known)})")
        try:
            return cls(**{str(k): v for k, v in data.items()})
        except ValueError as e:
            raise type(e)(f"{source}: {e}") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TunerSettings:
        """Settings from a YAML (or JSON) file of field → value; an empty file is the defaults.
        A file that is not YAML, not a mapping, or names an unknown setting raises ``ValueError``
        naming the file."""
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text())
        except yaml.YAMLError as e:
            raise ValueError(f"{p}: not valid YAML ({e})") from None
        return cls.from_mapping({} if data is None else data, str(p))

    def eligible_sizes(self) -> list[int]:
        """Every cluster size (RPU) a configuration tuned with these settings may run: the initial
        sets (``initial_clusters`` and any the Configuration Tuner's ``space`` offers), the
        scheduled spinups' (``spinup_sizes``) and the autoscaler's (its ``sizes``, the default ones
        unless given)."""
        cfg = json.loads(_core.untuned_config(self.to_json()))
        initial = [*self.initial_clusters, *(self.space or {}).get("initial_clusters", [])]
        sizes = {s for c in initial for s in c} | set(self.spinup_sizes)
        if cfg.get("autoscaler"):
            sizes |= set(cfg["autoscaler"]["sizes"])
            sizes |= {s for c in (self.space or {}).get("sizes", []) for s in c}
        return sorted(sizes)

    def to_json(self) -> str:
        """The settings as the core's JSON (``None`` fields left to the core's defaults)."""
        d: dict[str, Any] = {k: v for k, v in self.__dict__.items() if v is not None and k not in ("space", "autoscaler")}
        d["autoscaler"] = self.autoscaler
        if self.space is None:
            d["space"] = {}
        elif self.space:
            d["space"] = self.space
        return _core.tuner_settings(corejson.dumps(d, "tuner settings"))


@dataclass
class TuneResult:
    """What :func:`tune` produced: the configuration and how it was chosen. The report says,
    among others, ``history_days`` (days of history), ``days_used`` (the days the forecasts drew
    from) and ``history_age_days`` (days from the newest of them to the day tuned; above
    :data:`STALE_HISTORY_DAYS`, the plan reflects old traffic, and ``autoslo tune`` warns)."""

    config: ExecutionConfig
    report: dict[str, Any]

    def __repr__(self) -> str:
        r = self.report
        if not r.get("tuned", True):
            return f"TuneResult({self.config!r}, untuned: no history)"
        return (
            f"TuneResult({self.config!r}, validation_violation_rate={self.validation_violation_rate:.4f}, "
            f"validation_cost=${self.validation_cost:.2f}, simulations={r.get('simulations')})"
        )

    @property
    def validation_violation_rate(self) -> float:
        """The chosen configuration's simulated violation rate on the validation forecasts."""
        return float(self.report["validation_violation_rate"])

    @property
    def validation_cost(self) -> float:
        """The chosen configuration's simulated cost ($) on the validation forecasts (aggregated by α)."""
        return float(self.report["validation_cost"])


def tune(
    reservoir: Reservoir,
    day: dt.date | str,
    *,
    settings: TunerSettings | None = None,
    history_days: int | None = None,
    kappa: float = 2.0,
    predictor: _core.Predictor | None = None,
    spinup_s: float = 300.0,
    progress: bool = False,
    backend: str | RayBackend | None = None,
) -> TuneResult:
    """Tune ``day``'s execution configuration from the reservoir's history (the last
    ``history_days`` days before it, or all): forecast, ScheduleSpinups, Configuration Tuner.
    SimulateBatch runs on ``backend`` (see :func:`simulate_batch`; the result does not depend on
    it). With no history it returns the first initial configuration untuned (the "no past data"
    baseline), and says so in the report."""
    settings = settings or TunerSettings()
    spec = settings.to_json()
    days = reservoir.history(day, history_days)
    if not days:
        cfg = json.loads(_core.untuned_config(spec))
        cfg["provenance"] = {"generated_by": f"autoslo {_core.__version__}", "day": str(day), "history_days": 0, "tau": settings.tau}
        return TuneResult(ExecutionConfig(cfg), {"history_days": 0, "tuned": False, "simulations": 0})
    counts, arrivals = reservoir.tables(days)
    update, close = progress_bar(progress, "tuning", "sim")
    try:
        r = _core.tune(
            counts, arrivals, [day_number(d) for d in days], day_number(day), predictor_for(True, predictor), spec=spec, kappa=kappa, spinup_s=spinup_s, progress=update, backend=backend_for(backend)
        )
    finally:
        close()
    r["history_days"] = len(days)
    r["tuned"] = True
    used = [day_of(d) for d in r["days_used"]]
    r["days_used"] = [d.isoformat() for d in used]
    # How old the newest history the forecast drew from is (see STALE_HISTORY_DAYS).
    r["history_age_days"] = day_number(day) - day_number(max(used)) if used else None
    r["slo_out_of_reach"] = history_out_of_reach(counts, settings.eligible_sizes(), kappa, settings.slo_policy)
    return TuneResult(ExecutionConfig(r.pop("config")), r)


def history_out_of_reach(counts: pa.Table, sizes: Sequence[int], kappa: float, slo_policy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The share of the history's queries (a reservoir's count table) whose SLO, κ × their
    template's baseline as the tuner judges them (or the deadline ``slo_policy`` sets, where one
    of its rules covers the query), is below their runtime alone on every one of
    ``sizes`` (:func:`autoslo.workloads.slo_out_of_reach`): overall and per tenant. Those queries
    are late however the tuned configuration scales on those sizes; a larger size or a looser SLO
    reaches them. ``with_larger``: the same shares were each of the next two doublings of the
    largest size (while a base capacity) eligible too, so a user sees what allowing it would
    reach."""
    n = counts.num_rows
    texts = validate_workload(
        pa.table({"arrival": pa.array([0.0] * n), "template": counts["template"], "instance": counts["instance"], "tenant": counts["tenant"], "class": counts["class"]}),
        kappa=kappa,
    )
    if slo_policy:
        texts = apply_slo_policy(texts, slo_policy)
    weight = counts["count"].to_pylist()
    out = {"sizes": list(sizes), "kappa": kappa, **slo_out_of_reach(texts, sizes, weight), "with_larger": []}
    if out["share"] > 0:
        for size in (2 * max(sizes), 4 * max(sizes)):
            if _core.is_base_capacity(size):
                out["with_larger"].append({"size": size, **slo_out_of_reach(texts, [*sizes, size], weight)})
    return out


def default_space() -> dict[str, list[Any]]:
    """The Configuration Tuner's default search space (knob → values), as ``space={}`` gets it."""
    return {k: v for k, v in json.loads(_core.tuner_settings("{}"))["space"].items() if v}


def learned_tau_simulated(tau: float, estimate_gap: float) -> float:
    """The simulated target a tuning holds with ``estimate_gap`` (observed − estimated violation
    rate of a past day's plan): ``tau − gap``, kept within 0.1 τ and 2 τ (the core's rule)."""
    return float(_core.learned_tau_simulated(tau, estimate_gap))


def estimate_gap(plan: ExecutionConfig, observed_violation_rate: float) -> float:
    """How much later the warehouse ran ``plan`` than the tuner estimated: the violation rate
    observed on its day minus the plan's violation rate on its validation forecasts (its
    provenance, which ``autoslo tune`` writes). Raises ``ValueError`` for a plan without one."""
    v = (plan.as_dict().get("provenance") or {}).get("validation_violation_rate")
    if v is None:
        raise ValueError("the plan carries no estimate (provenance.validation_violation_rate): give one `autoslo tune` wrote")
    return float(observed_violation_rate) - float(v)


def class_latency_scale(trace: pa.Table, predictor: _core.Predictor | None = None, *, min_queries: int = 30) -> dict[str, float]:
    """How much slower than ``predictor`` (default: the bundled Iconq+) the warehouse ran each
    workload class in ``trace``, its past executions (an ``autoslo emulate`` or live trace, with a
    ``class`` column): for each class with at least ``min_queries`` completed queries the predictor
    scores from their full neighbour sets, ``exp`` of the mean of ln latency − ln prediction (the
    geometric mean of latency / prediction). Classes with fewer are left out (the simulator takes
    their predictions as they are). The result is ``TunerSettings.simulator_class_scale``: the
    Workload Simulator then runs each class as the warehouse did, relative to the predictor (a
    change to the paper's simulator, measured in ``docs/tuner.md``)."""
    if isinstance(min_queries, bool) or not isinstance(min_queries, int) or min_queries < 1:
        raise ValueError(f"min_queries must be a whole number ≥ 1, got {min_queries!r}")
    p = predictor_for(True, predictor)
    r = p.predict_trace(trace)
    classes = trace_classes(trace, r)
    if classes is None:
        raise ValueError(f"the trace has no `class` column (it has {', '.join(trace.column_names)}): the latency scale is per workload class")
    keep = ~np.asarray(r["censored"], dtype=bool)
    residual = np.asarray(r["ln_label"])[keep] - np.asarray(r["ln_pred"])[keep]
    classes = classes[keep]
    out: dict[str, float] = {}
    for c in sorted(set(classes.tolist())):
        m = classes == c
        if int(m.sum()) >= min_queries:
            out[str(c)] = float(np.exp(residual[m].mean()))
    return out


def find_good_spinup_time(
    logs: Sequence[Mapping[str, Sequence[Any]]], tau_target: float = 0.1, k: int = 1, spinup_s: float = 300.0, sigma_min_s: float = 1800.0
) -> list[float]:
    """FindGoodSpinupTime (Algorithm 5) over per-workload logs (dicts with ``arrival``, ``end``,
    ``violated``, as :func:`simulate_batch` returns with ``keep_logs=True``)."""
    return _core.find_good_spinup_time(
        [(list(map(float, g["arrival"])), list(map(float, g["end"])), [bool(v) for v in g["violated"]]) for g in logs], tau_target=tau_target, k=k, spinup_s=spinup_s, sigma_min_s=sigma_min_s
    )
