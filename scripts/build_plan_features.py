#!/usr/bin/env python3
"""Rebuild ``python/autoslo/data/plan_features.csv`` from real TPC-DS query plans.

Each of the 99 TPC-DS templates is EXPLAINed in DuckDB (the engine's own optimizer and cardinality estimator) over
a generated TPC-DS database, and the JSON plan is reduced to Iconq-style features (as Iconq featurizes Redshift
plans): per operator type the operator count and the log of its summed estimated output cardinality, per large
table the log of the estimated rows scanned, and whole-plan size/depth/cardinality totals.

Requires the offline-capable pair ``duckdb==1.5.5`` and ``duckdb-extension-tpcds==1.5.5`` (Python duckdb 2.x cannot
load tpcds offline)::

    pip install duckdb==1.5.5 duckdb-extension-tpcds==1.5.5
    python scripts/build_plan_features.py --sf 1

DuckDB ships one parameter instance per template, so the features are per template; instances of a template differ
only through Stage's measured-runtime cache. Estimated cardinalities scale with the scale factor, so a model sees
the same features up to a constant shift in log space whatever ``--sf`` is; the stored table uses SF 1.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
from collections import Counter
from pathlib import Path

OPERATORS = 10  # featurizer_num_operators of the reference predictor
TABLES = 10  # featurizer_num_tables


def _load_duckdb():
    try:
        import duckdb
        import duckdb_extension_tpcds as ext
    except ImportError as exc:  # pragma: no cover - depends on the environment
        sys.exit(f"error: {exc}; install duckdb==1.5.5 duckdb-extension-tpcds==1.5.5")
    if duckdb.__version__ != "1.5.5":
        sys.exit(f"error: duckdb {duckdb.__version__} found; the offline tpcds extension needs duckdb==1.5.5")
    path = Path(ext.__file__).parent / "extensions" / "v1.5.5" / "tpcds.duckdb_extension"
    if not path.is_file():
        sys.exit(f"error: tpcds extension binary not found at {path}")
    return duckdb, path


def _walk(node: dict, depth: int, out: list[tuple[str, float, str | None, int]]) -> None:
    info = node.get("extra_info") or {}
    card = info.get("Estimated Cardinality")
    try:
        est = float(card) if card is not None else 0.0
    except ValueError:
        est = 0.0
    table = info.get("Table") if isinstance(info, dict) else None
    if table:
        table = str(table).split(".")[-1]
    out.append((node["name"], est, table, depth))
    for child in node.get("children", []):
        _walk(child, depth + 1, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", type=float, default=1.0, help="TPC-DS scale factor of the generated database")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "python/autoslo/data/plan_features.csv"))
    args = ap.parse_args()

    duckdb, ext_path = _load_duckdb()
    con = duckdb.connect()
    con.execute(f"LOAD '{ext_path}'")
    print(f"generating TPC-DS sf={args.sf} in DuckDB {duckdb.__version__} ...", file=sys.stderr)
    con.execute(f"CALL dsdgen(sf={args.sf})")
    sizes = {
        name: con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
        for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    }
    queries = con.execute("SELECT query_nr, query FROM tpcds_queries() ORDER BY query_nr").fetchall()
    plans: dict[int, list[tuple[str, float, str | None, int]]] = {}
    for nr, sql in queries:
        rows = con.execute("EXPLAIN (FORMAT json) " + sql).fetchall()
        nodes: list[tuple[str, float, str | None, int]] = []
        for root in json.loads(rows[0][1]):
            _walk(root, 0, nodes)
        plans[int(nr)] = nodes

    op_freq = Counter(name for nodes in plans.values() for name, *_ in nodes)
    ops = sorted(op_freq, key=lambda k: (-op_freq[k], k))[:OPERATORS]
    tables = sorted(sizes, key=lambda k: (-sizes[k], k))[:TABLES]
    header = (
        ["template", "n_operators", "depth", "log_total_card", "log_max_card"]
        + [f"op_{o.lower()}_count" for o in ops]
        + [f"op_{o.lower()}_log_card" for o in ops]
        + [f"table_{t}_log_rows" for t in tables]
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for nr in sorted(plans):
            nodes = plans[nr]
            cards = [c for _, c, _, _ in nodes]
            row: list[float | int] = [
                nr,
                len(nodes),
                max(d for *_, d in nodes) + 1,
                math.log1p(sum(cards)),
                math.log1p(max(cards)),
            ]
            row += [sum(1 for n, *_ in nodes if n == o) for o in ops]
            row += [math.log1p(sum(c for n, c, _, _ in nodes if n == o)) for o in ops]
            row += [math.log1p(sum(c for _, c, t, _ in nodes if t == tab)) for tab in tables]
            w.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in row])
    print(f"wrote {len(plans)} templates x {len(header) - 1} features to {os.path.relpath(out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
