"""Training traces for the Latency Predictor, generated on the emulator as the paper did (§8.3.2).

Per seed and cluster size (4, 8, 16, 32 RPU): BaseWorkload at λ ∈ {0.05, 0.1, 0.2, 0.5, 1.0} and the
four phased workloads (x queries at λ = 0.05 alternating with 10 at λ_high, x ∈ {40, 15},
λ_high ∈ {0.2, 0.5}), one-hour per-query timeout. Optionally (``DataConfig.redbench``, ``autoslo
predictor data --redbench``) also Redbench-like windows on one cluster: multi-tenant traffic in which
backfills repeat heavy texts, the co-running mix the product meets and BaseWorkload lacks. Each run is one Parquet file in the emulator's
trace format plus the columns ``run``, ``workload`` and ``seed``; ``manifest.json`` lists the files
and which seeds form the train / validation / test splits.
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from autoslo.emulation import emulate
from autoslo.traces import from_served, is_served_log
from autoslo.workloads import base_workload, phased_workload, read_table, redbench_workload, window

RATES = (0.05, 0.1, 0.2, 0.5, 1.0)
PHASED = ((40, 0.2), (40, 0.5), (15, 0.2), (15, 0.5))
SIZES = (4, 8, 16, 32)
#: Redbench-like runs of ``--redbench``: (weekday queries per RPU of the cluster, first hour, hours).
#: A window of a Monday at that rate on one cluster: about 300 queries per RPU per day is near the
#: load the Policy Tuner's days put on each RPU; the morning window is moderate, the midday one
#: (report jobs at noon, the diurnal peak) congested.
REDBENCH = ((300.0, 6.0, 3.0), (300.0, 12.0, 2.0))


@dataclass(frozen=True)
class DataConfig:
    """What `generate` runs. Seeds are split by position: all but the last two train, then validation, then test."""

    seeds: tuple[int, ...] = (0, 1, 2, 3)
    sizes: tuple[int, ...] = SIZES
    rates: tuple[float, ...] = RATES
    phased: tuple[tuple[int, float], ...] = PHASED
    timeout_s: float = 3600.0
    redbench: tuple[tuple[float, float, float], ...] = ()

    def __post_init__(self) -> None:
        if len(self.seeds) < 3 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError("need at least 3 distinct seeds (train, validation, test)")
        if not self.sizes or any(s <= 0 for s in self.sizes):
            raise ValueError("cluster sizes must be positive")
        for r in self.redbench:
            if len(r) != 3 or not (r[0] > 0 and 0 <= r[1] < 24 and 0 < r[2] <= 24 - r[1]):
                raise ValueError(f"a Redbench-like run is (queries per RPU per day > 0, first hour in [0, 24), hours within the day), got {r}")

    @property
    def splits(self) -> dict[str, list[int]]:
        """Seeds per split: all but the last two train, then one validates and one tests."""
        return {"train": list(self.seeds[:-2]), "val": [self.seeds[-2]], "test": [self.seeds[-1]]}

    def runs(self) -> list[tuple[int, int, str]]:
        """(seed, size, workload name) of every run, in a fixed order."""
        names = [f"base_l{r:g}" for r in self.rates] + [f"phased_x{x}_h{h:g}" for x, h in self.phased]
        names += [f"redbench_r{v:g}_from{a:g}_for{h:g}" for v, a, h in self.redbench]
        return [(s, size, n) for s in self.seeds for size in self.sizes for n in names]


@dataclass
class TraceSet:
    """Generated traces by split (each a concatenated table) plus the manifest; for an imported
    query history, also its classes (``class_id``, ``features``, …) and plan schema (JSON)."""

    train: pa.Table
    val: pa.Table
    test: pa.Table
    manifest: dict = field(default_factory=dict)
    classes: pa.Table | None = None
    plan_schema: str | None = None

    @property
    def is_history(self) -> bool:
        """Whether its queries are a history's classes (not TPC-DS templates)."""
        return self.classes is not None


def _workload(name: str, seed: int, size: int) -> pa.Table:
    if name.startswith("redbench_r"):
        rate, rest = name[len("redbench_r") :].split("_from")
        first, hours = (float(x) for x in rest.split("_for"))
        w = redbench_workload(days=1, seed=seed, queries_per_day=float(rate) * size, tenants=4)
        return window(w, first * 3600.0, (first + hours) * 3600.0)
    if name.startswith("base_l"):
        return base_workload(float(name[len("base_l") :]), seed=seed)
    x, h = name[len("phased_x") :].split("_h")
    return phased_workload(int(x), 0.05, float(h), seed=seed)


def run_trace(seed: int, size: int, name: str, run: int, timeout_s: float = 3600.0) -> pa.Table:
    """Emulate one training run and return its trace with `run`, `workload`, `seed` columns."""
    wseed = seed * 100_000 + zlib.crc32(name.encode()) % 100_000  # stable across processes (unlike hash())
    # One cluster: routing is moot, so the baseline (no predictor needed to make training data).
    t = emulate(_workload(name, wseed, size), [size], seed=wseed + size, routing="round-robin", timeout_s=timeout_s).trace
    n = t.num_rows
    return (
        t.append_column("run", pa.array([run] * n, pa.int64()))
        .append_column("workload", pa.array([name] * n))
        .append_column("seed", pa.array([seed] * n, pa.int64()))
    )


def generate(config: DataConfig = DataConfig(), out: str | Path | None = None, progress: bool = True) -> TraceSet:
    """Run every configured workload on the emulator; write Parquet files to `out` if given."""
    runs = config.runs()
    by_split: dict[str, list[pa.Table]] = {"train": [], "val": [], "test": []}
    split_of = {s: k for k, v in config.splits.items() for s in v}
    files = []
    outdir = Path(out) if out is not None else None
    if outdir is not None:
        outdir.mkdir(parents=True, exist_ok=True)
    for i, (seed, size, name) in enumerate(tqdm(runs, desc="emulating traces", unit="run", disable=not progress)):
        t = run_trace(seed, size, name, i, config.timeout_s)
        by_split[split_of[seed]].append(t)
        if outdir is not None:
            rel = f"seed{seed}/rpu{size}_{name}.parquet"
            (outdir / rel).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(t, outdir / rel)
            files.append({"path": rel, "split": split_of[seed], "seed": seed, "rpu": size, "workload": name, "run": i})
    manifest = {"format": "autoslo-traces", "version": 1, "config": asdict(config), "splits": config.splits, "files": files}
    tables = {k: pa.concat_tables(v) for k, v in by_split.items()}
    manifest["sha256"] = {k: table_sha256(v) for k, v in tables.items()}
    if outdir is not None:
        (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return TraceSet(tables["train"], tables["val"], tables["test"], manifest)


def load(directory: str | Path) -> TraceSet:
    """Read traces written by `generate` or `from_traces` (``autoslo predictor data --out DIR``)."""
    d = Path(directory)
    mpath = d / "manifest.json"
    if not mpath.is_file():
        raise FileNotFoundError(f"{mpath} not found: generate traces with `autoslo predictor data --out {d}`")
    manifest = json.loads(mpath.read_text())
    if manifest.get("format") != "autoslo-traces":
        raise ValueError(f"{mpath} is not an AutoSLO trace manifest")
    parts: dict[str, list[pa.Table]] = {"train": [], "val": [], "test": []}
    for f in manifest["files"]:
        p = d / f["path"]
        if not p.is_file():
            raise FileNotFoundError(f"{p} listed in {mpath} is missing")
        parts[f["split"]].append(pq.read_table(p))
    empty = [k for k, v in parts.items() if not v]
    if empty:
        raise ValueError(f"{mpath}: no files for split(s) {empty}")
    train, val, test = (pa.concat_tables(parts[k], promote_options="permissive") for k in ("train", "val", "test"))
    classes = schema = None
    if "classes" in manifest:
        for name in (manifest["classes"], manifest["plan_schema"]):
            if not (d / name).is_file():
                raise FileNotFoundError(f"{d / name} listed in {mpath} is missing")
        classes = pq.read_table(d / manifest["classes"])
        schema = (d / manifest["plan_schema"]).read_text()
    return TraceSet(train, val, test, manifest=manifest, classes=classes, plan_schema=schema)


def table_sha256(t: pa.Table) -> str:
    """Content hash of a trace table (columns the predictor reads, in row order)."""
    h = hashlib.sha256()
    for col in ("run", "query_id", "template", "instance", "cluster_id", "cluster_size", "arrival", "end", "censored"):
        if col in t.column_names:
            for chunk in t[col].chunks:
                for buf in chunk.buffers():
                    if buf is not None:
                        h.update(buf)
    return h.hexdigest()


def test_split(config: DataConfig = DataConfig(), progress: bool = False) -> pa.Table:
    """Regenerate only the held-out test split of `config` (deterministic; no files)."""
    seed = config.splits["test"][0]
    runs = config.runs()
    tables = [run_trace(s, size, n, i, config.timeout_s) for i, (s, size, n) in enumerate(runs) if s == seed]
    return pa.concat_tables(tables)


#: The trace columns the predictor learns from (the emulator's and live mode's trace format).
LEARNED_COLUMNS = ("query_id", "template", "instance", "cluster_id", "cluster_size", "arrival", "end", "censored")
#: Outcomes of queries that ran on a cluster: a timed-out one is kept, censored at its timeout.
RAN = ("completed", "timeout")
#: Shares of each trace's queries, in arrival order, for training and validation; the rest test.
SHARES = (0.7, 0.15)


def from_traces(traces: Sequence[pa.Table | str | Path], out: str | Path | None = None, shares: tuple[float, float] = SHARES) -> TraceSet:
    """Training traces from executions of your own: traces in the emulator's format, as
    ``autoslo emulate --trace`` or a live run (``autoslo live --trace``) write them, or serving
    logs (``autoslo serve --log``; :func:`autoslo.traces.from_served`), as tables or Parquet
    paths (a directory of parts reads as one).

    Each trace is cut by arrival into three contiguous periods: its first ``shares[0]`` of the
    queries train, the next ``shares[1]`` validate, the rest test, so a model is judged on later
    traffic than it learned from. Each period is its own run: a query running across a cut loses
    its neighbours on the other side (a few queries per cut). Queries that did not run on a
    cluster (rejected, failed, cancelled) are left out; timed-out ones stay, censored. A live
    trace's times are on the control plane's clock: replayed with ``time_scale`` ≠ 1, its
    latencies are scaled, and so would the model's predictions be. Written to ``out`` as
    :func:`generate` writes (``autoslo predictor train --traces OUT`` reads it)."""
    if not traces:
        raise ValueError("give at least one trace")
    a, b = shares
    if not (0 < a and 0 < b and a + b < 1):
        raise ValueError(f"shares are (train, validation), each > 0 and together < 1, got {shares}")
    outdir = Path(out) if out is not None else None
    by_split: dict[str, list[pa.Table]] = {"train": [], "val": [], "test": []}
    files, sources = [], []
    for i, tr in enumerate(traces):
        if isinstance(tr, pa.Table):
            t, source, name = tr, f"trace {i}", f"trace{i}"
        else:
            t, source, name = read_table(tr), str(tr), Path(tr).stem
        if is_served_log(t):  # a serving log: its queries as the clients saw them run
            t = from_served(t)
        missing = [c for c in LEARNED_COLUMNS if c not in t.column_names]
        if missing:
            raise ValueError(f"{source} lacks {', '.join(missing)}: give traces written by `autoslo emulate --trace` or `autoslo live --trace`")
        if "outcome" in t.column_names:
            t = t.filter(pc.is_in(t["outcome"], pa.array(RAN)))
        t = t.take(pc.sort_indices(t, [("arrival", "ascending")]))
        n = t.num_rows
        cuts = (0, round(n * a), round(n * (a + b)), n)
        sources.append({"trace": source, "queries": n})
        for k, split in enumerate(("train", "val", "test")):
            part = t.slice(cuts[k], cuts[k + 1] - cuts[k])
            if part.num_rows < 10:
                raise ValueError(f"{name}: {n} queries that ran leave {part.num_rows} for {split}: a trace needs at least {math.ceil(10 / min(a, b, 1 - a - b))}")
            run = 3 * i + k
            part = part.append_column("run", pa.array([run] * part.num_rows, pa.int64())).append_column("workload", pa.array([name] * part.num_rows)).append_column("seed", pa.array([i] * part.num_rows, pa.int64()))
            by_split[split].append(part)
            if outdir is not None:
                rel = f"trace{i}_{name}/{split}.parquet"
                (outdir / rel).parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(part, outdir / rel)
                files.append({"path": rel, "split": split, "seed": i, "workload": name, "run": run})
    manifest: dict = {"format": "autoslo-traces", "version": 1, "config": {"source": "traces", "traces": sources, "shares": [a, b, round(1 - a - b, 6)]}, "files": files}
    tables = {k: pa.concat_tables(v, promote_options="permissive") for k, v in by_split.items()}
    manifest["sha256"] = {k: table_sha256(v) for k, v in tables.items()}
    if outdir is not None:
        (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return TraceSet(tables["train"], tables["val"], tables["test"], manifest)
