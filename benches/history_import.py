"""Importing a warehouse's query history (issue: your own queries).

Builds a ``SYS_QUERY_HISTORY``-shaped Parquet file of ``--rows`` statements over two workgroups
whose texts are DuckDB's 99 TPC-DS queries with every number redrawn per statement (so nearly
every text is distinct, as literals make them in a real history; about 1.6 KB each), then times
``autoslo.predictor.from_history`` on it in a process of its own and reports that process's
peak resident memory. Then the routing-time costs: one new statement's class
from its SQL (``classify_sql`` over many texts, per text on one core), its plan features from
its SQL (``featurize_classes``, per class), and a class already known (a dict lookup of its id).

Run with ``make bench-history`` (``python benches/history_import.py --json`` prints JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from autoslo import _core
from autoslo.live import _tpcds_extension


def tpcds_texts() -> list[str]:
    import duckdb

    c = duckdb.connect()
    c.execute(f"LOAD '{_tpcds_extension()}'")
    return [q for _, q in c.execute("select query_nr, query from tpcds_queries() order by 1").fetchall()]


def history(rows: int, seed: int) -> pa.Table:
    texts = tpcds_texts()
    rng = np.random.default_rng(seed)
    which = rng.integers(0, len(texts), rows)
    # Numbers, but not those inside quoted identifiers (`as "30 days"`): constants, not names.
    numbers = re.compile(r'"[^"]*"|\b\d+\b')
    draws = iter(rng.integers(1, 10_000, rows * 40).tolist())
    sql = [numbers.sub(lambda m: m.group(0) if m.group(0).startswith('"') else str(next(draws, 7)), texts[k]) for k in which.tolist()]
    start = np.sort(rng.uniform(0, 30 * 86_400.0, rows))
    dur = rng.exponential(8.0, rows) + 0.05
    t0 = np.datetime64("2024-05-01T00:00:00", "us")
    status = np.where(rng.random(rows) < 0.01, "failed", np.where(rng.random(rows) < 0.01, "canceled", "success"))
    return pa.table(
        {
            "query_id": np.arange(rows, dtype=np.int64),
            "start_time": pa.array(t0 + (start * 1e6).astype("timedelta64[us]")),
            "end_time": pa.array(t0 + ((start + dur) * 1e6).astype("timedelta64[us]")),
            "status": status,
            "query_type": np.where(rng.random(rows) < 0.05, "INSERT", "SELECT"),
            "result_cache_hit": rng.random(rows) < 0.02,
            "query_text": sql,
            "workgroup": np.where(rng.random(rows) < 0.5, "etl", "bi"),
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: dict[str, Any] = {"rows": args.rows, "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "history.parquet"
        t = history(args.rows, args.seed)
        out["mean_text_chars"] = float(np.mean([len(s) for s in t["query_text"].to_pylist()[:10_000]]))
        pq.write_table(t, f)
        del t
        # The import in a process of its own, so that its peak memory is its own.
        code = (
            "import json, time; from autoslo.predictor import from_history\n"
            f"t0 = time.perf_counter(); h = from_history([{str(f)!r}], rpu={{'etl': 32, 'bi': 8}}, out={str(Path(tmp) / 'out')!r})\n"
            # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec.
            "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
            "print(json.dumps({'import_s': time.perf_counter() - t0, 'peak_rss_gb': hwm / 1e6, 'kept': h.report.kept, 'classes': h.report.classes}))"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        out.update(json.loads(r.stdout.strip().splitlines()[-1]))
        classes = pq.read_table(Path(tmp) / "out" / "classes.parquet")
        examples = classes["example"].to_pylist()
    texts = pa.array((examples * (20_000 // max(len(examples), 1) + 1))[:20_000], pa.large_string())
    _core.classify_sql(texts[:100])
    t0 = time.perf_counter()
    _core.classify_sql(texts)
    out["classify_us_per_text_all_cores"] = (time.perf_counter() - t0) / len(texts) * 1e6
    n = min(len(examples), 2_000)
    t0 = time.perf_counter()
    _core.featurize_classes(examples[:n], [None] * n, ["none"] * n, [1.0] * n)
    out["featurize_us_per_class_all_cores"] = (time.perf_counter() - t0) / n * 1e6
    known = {int(i): k for k, i in enumerate(classes["class_id"].to_pylist())}
    ids = list(known)
    t0 = time.perf_counter()
    for i in ids * 10:
        known[i]
    out["cached_class_us"] = (time.perf_counter() - t0) / (len(ids) * 10) * 1e6
    if args.json:
        print(json.dumps(out))
        return
    print(f"{out['rows']:,} statements ({out['mean_text_chars']:.0f} characters on average), {out['cores']} cores:")
    print(f"  import: {out['import_s']:.1f} s, peak resident {out['peak_rss_gb']:.2f} GB (its own process); {out['kept']:,} kept, {out['classes']:,} classes")
    print(f"  a new statement's class: {out['classify_us_per_text_all_cores']:.1f} µs per text ({out['cores']} cores)")
    print(f"  its plan features from its SQL: {out['featurize_us_per_class_all_cores']:.1f} µs per class ({out['cores']} cores)")
    print(f"  a known class (lookup by id): {out['cached_class_us']:.3f} µs")


if __name__ == "__main__":
    main()
