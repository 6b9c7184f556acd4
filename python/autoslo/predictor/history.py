"""Training traces from a warehouse's own query history (``autoslo predictor data --from-history``).

A history is an export of Redshift's ``SYS_QUERY_HISTORY`` (CSV or Parquet), one row per
statement, with at least ``query_id``, ``start_time``, ``end_time`` and ``status``; where present,
``query_text`` (truncated at 4,000 characters by Redshift), ``query_type``, ``result_cache_hit``,
``generic_query_hash``, ``workgroup`` and ``rpu`` are used too. ``SYS_QUERY_TEXT`` rows
(``query_id``, ``sequence``, ``text``) give the full texts, ``SYS_QUERY_EXPLAIN`` rows
(``query_id``, ``child_query_sequence``, ``plan_node_id``, ``plan_parent_id``, ``plan_node``) or a
table of EXPLAIN outputs (``query_id``, ``plan``: Redshift or PostgreSQL text, or PostgreSQL JSON)
give plans. An AutoSLO trace (``autoslo emulate --trace``, ``autoslo live --trace``) or serving
log (``autoslo serve --log``) reads as a history too: its TPC-DS templates' texts are DuckDB's
(the ``live`` extra), each of its clusters a workgroup.

What is kept: completed reads (``SELECT`` by ``query_type``, or by the text where there is no such
column) that did not hit the result cache; canceled and timed-out ones are kept censored (they ran
at least that long). Set aside, counted by reason: other statements, result-cache hits,
unfinished ones (running, queued), rows with neither text nor hash. Failed statements are dropped,
counted. Every statement's class is its normalised text (:func:`autoslo._core.classify_sql`) or its
``generic_query_hash``; every class's plan features come from its first plan, else its SQL, under
a schema fitted on the training part (:func:`autoslo._core.featurize_classes`). The kept rows are
cut by arrival into train / validation / test (70 / 15 / 15 %), as :func:`from_traces` cuts a
trace; each part is one run whose clusters are the workgroups, so the concurrency the predictor
learns from is each workgroup's own, rebuilt from start and end times.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from autoslo import _core
from autoslo.predictor.data import SHARES, TraceSet, table_sha256
from autoslo.traces import from_served, is_served_log, to_history
from autoslo.workloads import epoch_seconds, read_table

#: Columns every history file must have.
REQUIRED = ("query_id", "start_time", "end_time", "status")
#: Statuses, lower-cased, by what becomes of the row.
COMPLETED = frozenset({"success", "succeeded", "completed", "finished"})
CENSORED = frozenset({"canceled", "cancelled", "timeout", "timed_out", "aborted"})
FAILED = frozenset({"failed", "error"})
UNFINISHED = frozenset({"running", "queued", "planning", "returning", "started"})
#: A workgroup's name where the history has no ``workgroup`` column.
DEFAULT_WORKGROUP = "default"
#: Rows of each part at the least.
MIN_PART = 10


@dataclass
class ImportReport:
    """What an import kept and set aside, with counts (nothing leaves uncounted)."""

    files: list[str]
    rows: int
    kept: int
    censored: int
    set_aside: dict[str, int]
    dropped: dict[str, int]
    classes: int
    unreadable_texts: int
    feature_sources: dict[str, int]
    feature_problems: dict[str, int]
    workgroups: dict[str, dict[str, int]]
    parts: dict[str, int]
    schema: dict[str, Any] = field(default_factory=dict)
    split: str = "time"

    def lines(self) -> list[str]:
        """The report as lines of text."""
        n = lambda d: "; ".join(f"{k} {v:,}" for k, v in sorted(d.items())) or "none"  # noqa: E731
        wg = ", ".join(f"{w} {v['rpu']} RPU ({v['kept']:,} kept)" for w, v in sorted(self.workgroups.items()))
        return [
            f"read {self.rows:,} rows from {len(self.files)} file(s)",
            f"kept {self.kept:,} ({self.censored:,} of them censored: canceled or timed out)",
            f"set aside: {n(self.set_aside)}",
            f"dropped: {n(self.dropped)}",
            f"classes: {self.classes:,} ({n(self.feature_sources)} by where their features came from; "
            f"{self.unreadable_texts:,} texts the tokenizer could not read, each its own class)",
            *([f"feature fallbacks: {n(self.feature_problems)}"] if self.feature_problems else []),
            f"workgroups: {wg}",
            f"split by {self.split}: train {self.parts['train']:,} / val {self.parts['val']:,} / test {self.parts['test']:,}",
            f"plan schema: operators {', '.join(self.schema.get('operators', [])) or '-'}; tables {', '.join(self.schema.get('tables', [])) or '-'}",
        ]


@dataclass
class HistoryImport:
    """An imported history: the traces by part (with each class's features and the plan
    schema) and the report."""

    traces: TraceSet
    report: ImportReport

    @property
    def classes(self) -> pa.Table:
        """Each class: id, normalised text, an example, executions, where its features came from."""
        assert self.traces.classes is not None
        return self.traces.classes

    @property
    def schema(self) -> str:
        """The plan-feature schema fitted on the training part (JSON)."""
        return self.traces.plan_schema or ""


class HistoryError(_core.AutoSloCoreError):
    """A history that cannot be imported: the message names the file, row and column."""


def _where(files: Sequence[str], f: int, row: int, column: str) -> str:
    return f"{files[f]} row {row}, column `{column}`"


def _read(source: pa.Table | str | Path, what: str) -> tuple[pa.Table, str]:
    if isinstance(source, pa.Table):
        return source, what
    return read_table(source), str(source)


def _lower(col: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.utf8_lower(pc.utf8_trim_whitespace(pc.cast(col, pa.string())))


def _bools(t: pa.Table, name: str, where: str) -> np.ndarray:
    """A boolean column (true/false, t/f, 1/0, yes/no as text); null reads as false."""
    col = t[name]
    if pa.types.is_boolean(col.type):
        return pc.fill_null(col, False).to_numpy(zero_copy_only=False)
    if pa.types.is_integer(col.type):
        return pc.fill_null(pc.not_equal(col, 0), False).to_numpy(zero_copy_only=False)
    s = _lower(col)
    yes = pc.is_in(s, pa.array(["true", "t", "1", "yes", "y"]))
    no = pc.or_(pc.is_in(s, pa.array(["false", "f", "0", "no", "n", ""])), pc.is_null(s))
    bad = pc.invert(pc.or_(yes, no)).to_numpy(zero_copy_only=False)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise HistoryError(f"{where} row {r}, column `{name}`: {col[r].as_py()!r} is not true or false")
    return pc.fill_null(yes, False).to_numpy(zero_copy_only=False)


def _full_texts(texts: pa.Table, where: str) -> dict[int, str]:
    """SYS_QUERY_TEXT rows → the full text of each query id (its chunks in sequence order)."""
    missing = [c for c in ("query_id", "sequence", "text") if c not in texts.column_names]
    if missing:
        raise HistoryError(f"{where}: query texts lack the column(s) {', '.join(missing)} (SYS_QUERY_TEXT: query_id, sequence, text)")
    t = texts.select(["query_id", "sequence", "text"]).sort_by([("query_id", "ascending"), ("sequence", "ascending")])
    out: dict[int, list[str]] = {}
    for q, s in zip(t["query_id"].to_pylist(), t["text"].to_pylist()):
        out.setdefault(int(q), []).append(s or "")
    return {q: "".join(parts) for q, parts in out.items()}


def _plans(plans: pa.Table, where: str) -> dict[int, tuple[str, str]]:
    """A table of EXPLAIN outputs (query_id, plan) → (format, text) per query id."""
    missing = [c for c in ("query_id", "plan") if c not in plans.column_names]
    if missing:
        raise HistoryError(f"{where}: plans lack the column(s) {', '.join(missing)} (query_id, plan: EXPLAIN text or JSON)")
    out: dict[int, tuple[str, str]] = {}
    for q, p in zip(plans["query_id"].to_pylist(), plans["plan"].to_pylist()):
        if p is None or q is None:
            continue
        text = p if isinstance(p, str) else json.dumps(p)
        out.setdefault(int(q), ("json" if text.lstrip()[:1] in ("[", "{") else "text", text))
    return out


#: Statements read at a time: a history's texts are most of its bytes, and only each class's
#: first text is kept.
BATCH = 65_536
#: Columns read from CSV as text whatever they hold (parsed here, each error naming its row).
_CSV_TEXT = ("start_time", "end_time", "status", "query_text", "query_type", "workgroup", "generic_query_hash", "result_cache_hit")


def _is_trace(names: Sequence[str]) -> bool:
    """Whether a table with these columns is an AutoSLO trace (``autoslo emulate --trace``,
    ``autoslo live --trace``) or serving log (``autoslo serve --log``) rather than a warehouse's
    export."""
    trace = {"template", "instance", "arrival", "end", "cluster_id"} <= set(names)
    served = {"template", "instance", "arrival_s", "latency", "outcome"} <= set(names)
    return "start_time" not in names and (trace or served)


def _trace_as_history(t: pa.Table, name: str, unrun: Counter[str]) -> pa.Table:
    """An AutoSLO trace or serving log as a history export: each query that ran with its TPC-DS
    template's text (DuckDB's), each of its clusters a workgroup of its own (``name:c<id>``). The
    queries that never ran (rejected, failed, cancelled) are counted into ``unrun``."""
    if is_served_log(t):
        t = from_served(t)
    if "outcome" in t.column_names:
        for o, k in Counter(t["outcome"].to_pylist()).items():
            if o not in ("completed", "timeout"):
                unrun[f"did not run ({o}, in an AutoSLO trace)"] += k
    try:
        from autoslo.live import tpcds_queries

        sql = tpcds_queries()
    except ImportError as e:
        raise HistoryError(f"{name} is an AutoSLO trace: its queries are TPC-DS templates, whose SQL comes with the live extra (pip install 'autoslo[live]'; {e})") from None
    h = to_history(t, sql)
    return h.set_column(h.schema.get_field_index("workgroup"), "workgroup", pa.array([f"{name}:{w}" for w in h["workgroup"].to_pylist()]))


def _batches(source: pa.Table | str | Path, name: str, unrun: Counter[str]) -> Iterator[pa.RecordBatch]:
    """A history file's rows, a batch at a time (CSV and Parquet stream; a directory of Parquet
    parts or a table is read whole). An AutoSLO trace or serving log reads as a history
    (:func:`_trace_as_history`)."""
    if isinstance(source, pa.Table):
        t = _trace_as_history(source, name, unrun) if _is_trace(source.column_names) else source
        yield from t.to_batches(max_chunksize=BATCH)
        return
    p = Path(source)
    if str(p).lower().endswith((".csv", ".csv.gz")):
        if not p.is_file():
            raise FileNotFoundError(f"no CSV file at {p}")
        header = pcsv.open_csv(p, read_options=pcsv.ReadOptions(block_size=1 << 16)).schema.names
        if _is_trace(header):
            yield from _trace_as_history(read_table(p), name, unrun).to_batches(max_chunksize=BATCH)
            return
        types = {c: pa.string() for c in _CSV_TEXT if c in header}
        reader = pcsv.open_csv(p, read_options=pcsv.ReadOptions(block_size=64 << 20), convert_options=pcsv.ConvertOptions(column_types=types))
        yield from reader
        return
    if p.is_file():
        f = pq.ParquetFile(p)
        if _is_trace(f.schema_arrow.names):
            yield from _trace_as_history(f.read(), name, unrun).to_batches(max_chunksize=BATCH)
            return
        yield from f.iter_batches(batch_size=BATCH)
        return
    t = read_table(p)
    if _is_trace(t.column_names):
        t = _trace_as_history(t, name, unrun)
    yield from t.to_batches(max_chunksize=BATCH)


def _array(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


def _offset_rows(e: Exception, r0: int) -> HistoryError:
    """An error naming a row of a batch, naming it as the file has it."""
    return HistoryError(re.sub(r"\brow (\d+)", lambda m: f"row {int(m.group(1)) + r0}", str(e)))


def _read_batch(batch: pa.RecordBatch, name: str, f: int, r0: int, dialect: str, full: Mapping[int, str], examples: dict[int, str], class_texts: dict[int, str]) -> pa.Table:
    """One batch of a history file, checked, each statement classified; its texts are dropped
    but for each new class's first (into ``examples``, and its normalised text into
    ``class_texts``)."""
    t = pa.Table.from_batches([batch])
    missing = [c for c in REQUIRED if c not in t.column_names]
    if missing:
        raise HistoryError(f"{name}: missing column(s) {', '.join(f'`{c}`' for c in missing)} (a SYS_QUERY_HISTORY export has query_id, start_time, end_time, status)")
    for c in (*REQUIRED, *(["workgroup"] if "workgroup" in t.column_names else [])):
        if t[c].null_count:
            r = int(np.flatnonzero(pc.is_null(t[c]).to_numpy(zero_copy_only=False))[0])
            raise HistoryError(f"{name} row {r + r0}, column `{c}`: empty")
    try:
        start = epoch_seconds(t["start_time"], name, "start_time")
        end = epoch_seconds(t["end_time"], name, "end_time")
        cache_hit = _bools(t, "result_cache_hit", name) if "result_cache_hit" in t.column_names else np.zeros(t.num_rows, bool)
    except _core.AutoSloCoreError as e:
        raise _offset_rows(e, r0) from None
    if start is None or end is None:
        raise HistoryError(f"{name}: `start_time` and `end_time` must be timestamps (or ISO 8601 text), not numbers")
    status = _lower(t["status"])
    known = COMPLETED | CENSORED | FAILED | UNFINISHED
    unknown = pc.invert(pc.is_in(status, pa.array(sorted(known)))).to_numpy(zero_copy_only=False)
    if unknown.any():
        r = int(np.flatnonzero(unknown)[0])
        raise HistoryError(f"{name} row {r + r0}, column `status`: unknown status {status[r].as_py()!r} (known: {', '.join(sorted(known))})")
    text = pc.cast(t["query_text"], pa.string()) if "query_text" in t.column_names else pa.nulls(t.num_rows, pa.string())
    if full:
        qid = t["query_id"].to_pylist()
        text = pa.array([full.get(q, s) for q, s in zip(qid, text.to_pylist())], pa.string())
    text = _array(text)
    hashes = _array(pc.cast(t["generic_query_hash"], pa.string())) if "generic_query_hash" in t.column_names else None
    per_row, distinct = _core.classify_sql(text, dialect, hashes)
    ids = per_row["class_id"].to_numpy()
    for c, tx in zip(distinct["class_id"].to_pylist(), distinct["text"].to_pylist()):
        class_texts.setdefault(c, tx)
    has_text = pc.match_substring_regex(text, r"\S").to_numpy(zero_copy_only=False)
    new, first = np.unique(ids, return_index=True)
    for c, r in zip(new.tolist(), first.tolist()):
        if c not in examples and has_text[r]:
            examples[c] = text[r].as_py()
    cols: dict[str, Any] = {
        "query_id": pc.cast(t["query_id"], pa.int64()),
        "start": pa.array(start),
        "end": pa.array(end),
        "status": status,
        "workgroup": pc.cast(t["workgroup"], pa.string()) if "workgroup" in t.column_names else pa.array([DEFAULT_WORKGROUP] * t.num_rows),
        "query_type": _lower(t["query_type"]) if "query_type" in t.column_names else pa.nulls(t.num_rows, pa.string()),
        "result_cache_hit": pa.array(cache_hit),
        "class_id": per_row["class_id"],
        "_raw": per_row["raw"],
        "_select": per_row["select"],
        "_has_text": pa.array(has_text),
        "_has_hash": pc.is_valid(hashes) if hashes is not None else pa.array(np.zeros(t.num_rows, bool)),
        "_file": pa.array(np.full(t.num_rows, f, np.int32)),
        "_row": pa.array(np.arange(r0, r0 + t.num_rows, dtype=np.int64)),
    }
    if "rpu" in t.column_names:
        cols["rpu"] = pc.cast(t["rpu"], pa.float64())
    return pa.table(cols)


def _cluster_sizes(t: pa.Table, workgroups: np.ndarray, rpu: int | Mapping[str, int] | None, files: Sequence[str], fidx: np.ndarray, rows: np.ndarray) -> np.ndarray:
    if "rpu" in t.column_names:
        col = t["rpu"]
        sizes = pc.fill_null(pc.cast(col, pa.float64()), -1.0).to_numpy(zero_copy_only=False)
        bad = ~((sizes > 0) & (sizes == np.round(sizes)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise HistoryError(f"{_where(files, fidx[i], rows[i], 'rpu')}: {col[i].as_py()!r} is not a positive whole number of RPU")
        return sizes.astype(np.int64)
    names = sorted(set(workgroups.tolist()))
    if isinstance(rpu, int):
        if len(names) > 1:
            raise HistoryError(f"the history has {len(names)} workgroups ({', '.join(names[:5])}): give each one's size (--rpu WORKGROUP=N)")
        return np.full(workgroups.size, rpu, np.int64)
    if rpu is None:
        raise HistoryError("the history has no `rpu` column: give the cluster size (--rpu N for one workgroup, --rpu WORKGROUP=N for each)")
    unknown = [w for w in names if w not in rpu]
    if unknown:
        raise HistoryError(f"no size for workgroup(s) {', '.join(unknown)}: give --rpu WORKGROUP=N for each")
    return np.array([rpu[w] for w in workgroups.tolist()], np.int64)


def from_history(
    history: Sequence[pa.Table | str | Path],
    *,
    texts: Sequence[pa.Table | str | Path] = (),
    explain: Sequence[pa.Table | str | Path] = (),
    plans: Sequence[pa.Table | str | Path] = (),
    rpu: int | Mapping[str, int] | None = None,
    dialect: str = "redshift",
    out: str | Path | None = None,
    shares: tuple[float, float] = SHARES,
    split: str = "time",
) -> HistoryImport:
    """Import query-history exports (see the module's documentation) into training traces.

    ``rpu``: each workgroup's size where the history has no ``rpu`` column (one number for a
    history of one workgroup, else ``{workgroup: rpu}``). ``dialect``: the SQL's (``redshift``,
    ``postgres``, ``generic``). Written to ``out`` as :func:`autoslo.predictor.from_traces`
    writes, with ``classes.parquet`` (each class's text, executions and plan features) and
    ``plan_schema.json``; the report is printed by the command and kept in the manifest.

    ``split``: ``time`` (the kept statements cut by arrival) or ``classes`` (each class wholly in
    one part, about ``shares`` of the classes each, by its id: a model is then judged on classes
    it never saw)."""
    if not history:
        raise ValueError("give at least one history file")
    a, b = shares
    if not (0 < a and 0 < b and a + b < 1):
        raise ValueError(f"shares are (train, validation), each > 0 and together < 1, got {shares}")
    if isinstance(rpu, int) and rpu <= 0 or isinstance(rpu, Mapping) and any(v <= 0 for v in rpu.values()):
        raise ValueError(f"cluster sizes must be positive, got {rpu}")
    if split not in ("time", "classes"):
        raise ValueError(f"split is `time` or `classes`, got {split!r}")
    if dialect not in _core.SQL_DIALECTS and dialect != "postgresql":
        raise ValueError(f"unknown SQL dialect {dialect!r} (known: {', '.join(_core.SQL_DIALECTS)})")

    full: dict[int, str] = {}
    for k, x in enumerate(texts):
        tt, name = _read(x, f"texts {k}")
        full.update(_full_texts(tt, name))
    files: list[str] = []
    parts = []
    unrun: Counter[str] = Counter()
    examples: dict[int, str] = {}  # each class's first statement, as written
    class_texts: dict[int, str] = {}
    for i, h in enumerate(history):
        name = str(h) if not isinstance(h, pa.Table) else f"history {i}"
        files.append(name)
        r0 = 0
        for batch in _batches(h, name, unrun):
            parts.append(_read_batch(batch, name, i, r0, dialect, full, examples, class_texts))
            r0 += batch.num_rows
        if r0 == 0:
            raise HistoryError(f"{name}: no rows")
    t = pa.concat_tables(parts, promote_options="permissive")
    n = t.num_rows
    fidx = t["_file"].to_numpy()
    rows = t["_row"].to_numpy()
    start, end = t["start"].to_numpy(), t["end"].to_numpy()
    backwards = end < start
    if backwards.any():
        i = int(np.flatnonzero(backwards)[0])
        raise HistoryError(f"{_where(files, fidx[i], rows[i], 'end_time')}: ends before it starts (start_time + {end[i] - start[i]:.6f} s)")
    # A query id repeats in no workgroup.
    key = pa.table({"w": t["workgroup"], "q": t["query_id"]})
    dup = key.group_by(["w", "q"]).aggregate([([], "count_all")]).filter(pc.greater(pc.field("count_all"), 1))
    if dup.num_rows:
        w, q = dup["w"][0].as_py(), dup["q"][0].as_py()
        hit = np.flatnonzero((t["query_id"].to_numpy() == q) & (t["workgroup"].to_numpy(zero_copy_only=False) == w))
        raise HistoryError(f"{_where(files, fidx[hit[1]], rows[hit[1]], 'query_id')}: query {q} appears again in workgroup {w} ({files[fidx[hit[0]]]} row {rows[hit[0]]})")
    status = t["status"].to_numpy(zero_copy_only=False)
    has_text = t["_has_text"].to_numpy(zero_copy_only=False)
    has_hash = t["_has_hash"].to_numpy(zero_copy_only=False)
    select_by_text = t["_select"].to_numpy(zero_copy_only=False)
    qtype = t["query_type"]
    if qtype.null_count < n:
        qt = qtype.to_numpy(zero_copy_only=False)
        is_select = np.where(_is_none(qt), select_by_text & has_text, qt == "select")
    else:
        is_select = select_by_text & has_text
    cache_hit = t["result_cache_hit"].to_numpy(zero_copy_only=False)

    reason = np.full(n, "", dtype=object)
    reason[np.isin(status, list(UNFINISHED))] = "unfinished (running, queued)"
    reason[(reason == "") & ~has_text & ~has_hash] = "no text and no generic_query_hash"
    reason[(reason == "") & ~is_select] = "not a SELECT"
    reason[(reason == "") & cache_hit] = "result-cache hit"
    failed = (reason == "") & np.isin(status, list(FAILED))
    keep = (reason == "") & ~failed
    censored = keep & np.isin(status, list(CENSORED))
    set_aside = dict(Counter(reason[reason != ""].tolist()) + unrun)
    dropped = {"failed": int(failed.sum())} if failed.any() else {}
    if keep.sum() < 3 * MIN_PART:
        raise HistoryError(f"{keep.sum()} statements kept of {n} (set aside: {set_aside}; dropped: {dropped}): a history needs at least {math.ceil(MIN_PART / min(a, b, 1 - a - b))}")

    workgroups = t["workgroup"].to_numpy(zero_copy_only=False).astype(str)
    sizes = _cluster_sizes(t, workgroups, rpu, files, fidx, rows)
    idx = np.flatnonzero(keep)
    idx = idx[np.argsort(start[idx], kind="stable")]
    origin = math.floor(start[idx].min() / 86_400.0) * 86_400.0
    wg_names = sorted(set(workgroups[idx].tolist()))
    wg_id = {w: k for k, w in enumerate(wg_names)}
    class_id = t["class_id"].to_numpy()
    m = idx.size
    part_of = np.empty(m, np.int8)
    if split == "time":
        cuts = (0, round(m * a), round(m * (a + b)), m)
        for k in range(3):
            part_of[cuts[k] : cuts[k + 1]] = k
    else:
        # Leave classes out: each class wholly in one part, by where its id (a hash) falls.
        u = (class_id[idx] % np.uint64(1_000_000)).astype(np.float64) / 1e6
        part_of[:] = np.where(u < a, 0, np.where(u < a + b, 1, 2))
    for k in range(3):
        got = int((part_of == k).sum())
        if got < MIN_PART:
            raise HistoryError(
                f"{m} statements kept leave {got} for {('train', 'val', 'test')[k]} (split by {split}): "
                + (f"a history needs at least {math.ceil(MIN_PART / min(a, b, 1 - a - b))}" if split == "time" else f"{np.unique(class_id[idx]).size} classes are too few to leave some out")
            )

    # Classes: executions (all, and in train), an example text, a plan.
    cls = class_id[idx]
    uniq, counts = np.unique(cls, return_counts=True)
    train_counts = dict(zip(*np.unique(cls[part_of == 0], return_counts=True)))
    plan_of: dict[int, tuple[str, str]] = {}
    for k, x in enumerate(plans):
        pt, name = _read(x, f"plans {k}")
        plan_of.update(_plans(pt, name))
    explain_t = None
    if explain:
        explain_t = pa.concat_tables([_read(x, f"explain {k}")[0] for k, x in enumerate(explain)], promote_options="permissive")
    explain_ids = set(explain_t["query_id"].to_pylist()) if explain_t is not None and "query_id" in explain_t.column_names else set()
    qids = t["query_id"].to_numpy()
    # Each class's plan: that of its first execution (by arrival) that has one.
    plan_for: dict[int, tuple[str, str | None, int | None]] = {}
    if plan_of or explain_ids:
        has_plan = np.isin(qids[idx], np.array(sorted(set(plan_of) | explain_ids), np.int64))
        with_plan = idx[has_plan]
        u_c, u_first = np.unique(class_id[with_plan], return_index=True)
        for c, r in zip(u_c.tolist(), with_plan[u_first].tolist()):
            q = int(qids[r])
            plan_for[c] = (plan_of[q][0], plan_of[q][1], None) if q in plan_of else ("rows", None, q)
    sql_col, plan_col, fmt_col, pq_col = [], [], [], []
    for u in uniq.tolist():
        sql_col.append(examples.get(u))
        fmt, text, q = plan_for.get(u, ("none", None, None))
        fmt_col.append(fmt)
        plan_col.append(text)
        pq_col.append(q)
    weights = [float(train_counts.get(u, 0)) for u in uniq.tolist()]
    feats = _core.featurize_classes(sql_col, plan_col, fmt_col, weights, pq_col, explain_t, dialect)
    classes = pa.table(
        {
            "class_id": pa.array(uniq, pa.uint64()),
            "text": [class_texts.get(int(u), "") for u in uniq.tolist()],
            "example": [(s or "")[:4000] for s in sql_col],
            "executions": pa.array(counts, pa.int64()),
            "executions_train": pa.array([int(w) for w in weights], pa.int64()),
            "feature_source": feats["sources"],
            "problem": feats["problems"],
            "features": pa.FixedSizeListArray.from_arrays(pa.array(feats["features"].ravel(), pa.float32()), feats["features"].shape[1]),
        }
    )

    trace = pa.table(
        {
            "query_id": pa.array(qids[idx], pa.int64()),
            "class_id": pa.array(cls, pa.uint64()),
            "workgroup": pa.array(workgroups[idx]),
            "cluster_id": pa.array([wg_id[w] for w in workgroups[idx].tolist()], pa.int64()),
            "cluster_size": pa.array(sizes[idx], pa.int64()),
            "arrival": pa.array(start[idx] - origin),
            "end": pa.array(end[idx] - origin),
            "censored": pa.array(censored[idx]),
            "outcome": pa.array(np.where(censored[idx], "timeout", "completed")),
        }
    )
    by_split: dict[str, pa.Table] = {}
    manifest_files: list[dict[str, Any]] = []
    outdir = Path(out) if out is not None else None
    for k, part_name in enumerate(("train", "val", "test")):
        part = trace.filter(pa.array(part_of == k))
        part = part.append_column("run", pa.array([k] * part.num_rows, pa.int64())).append_column("workload", pa.array(["history"] * part.num_rows)).append_column("seed", pa.array([0] * part.num_rows, pa.int64()))
        by_split[part_name] = part
        rel = f"history/{part_name}.parquet"
        manifest_files.append({"path": rel, "split": part_name, "seed": 0, "workload": "history", "run": k})
    wg_report = {w: {"rpu": int(sizes[idx][workgroups[idx] == w][0]), "kept": int((workgroups[idx] == w).sum())} for w in wg_names}
    schema = json.loads(feats["schema"])
    report = ImportReport(
        files=files,
        rows=n + sum(unrun.values()),
        kept=int(keep.sum()),
        censored=int(censored.sum()),
        set_aside=set_aside,
        dropped=dropped,
        classes=int(uniq.size),
        unreadable_texts=int((t["_raw"].to_numpy(zero_copy_only=False) & has_text & keep).sum()),
        feature_sources=dict(Counter(feats["sources"])),
        feature_problems=dict(Counter(p.split(":")[0] for p in feats["problems"] if p)),
        workgroups=wg_report,
        parts={s: by_split[s].num_rows for s in by_split},
        schema=schema,
        split=split,
    )
    manifest: dict[str, Any] = {
        "format": "autoslo-traces",
        "version": 1,
        "config": {"source": "history", "history": files, "dialect": dialect, "split": split, "shares": [a, b, round(1 - a - b, 6)], "origin_unix_s": origin},
        "files": manifest_files,
        "classes": "classes.parquet",
        "plan_schema": "plan_schema.json",
        "report": asdict(report),
    }
    manifest["sha256"] = {k: table_sha256(v) for k, v in by_split.items()}
    if outdir is not None:
        (outdir / "history").mkdir(parents=True, exist_ok=True)
        for f in manifest_files:
            pq.write_table(by_split[f["split"]], outdir / f["path"])
        pq.write_table(classes, outdir / "classes.parquet")
        (outdir / "plan_schema.json").write_text(feats["schema"])
        (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return HistoryImport(TraceSet(by_split["train"], by_split["val"], by_split["test"], manifest, classes, feats["schema"]), report)


def _is_none(a: np.ndarray) -> np.ndarray:
    """Elementwise: is this object-array entry None."""
    return np.array([x is None for x in a], bool)


def print_report(r: ImportReport, file: Any = None) -> None:
    """Print an import report (to standard output unless ``file`` is given)."""
    for line in r.lines():
        print(line, file=file or sys.stdout)
