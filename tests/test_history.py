"""A warehouse's own query history: classes of its SQL, plan features, and the import's report."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

from autoslo import _core
from autoslo.cli import main
from autoslo.predictor import HistoryError, from_history, load_traces

T0 = dt.datetime(2024, 5, 1, 8)
TEMPLATES = [
    "select sum(l_extendedprice) from lineitem where l_shipdate < '{d}'",
    "SELECT o_orderpriority, COUNT(*) FROM orders WHERE o_orderdate >= '{d}' GROUP BY o_orderpriority ORDER BY 1",
    "select c_name from customer c join orders o on c.c_custkey = o.o_custkey where o.o_totalprice > {x} limit 10",
    "insert into t values ({x})",
]


def history(n: int = 300, seed: int = 0) -> pa.Table:
    """A SYS_QUERY_HISTORY-shaped export of two workgroups: three read classes, one write."""
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.uniform(0, 7200, n))
    rows = []
    for i, s in enumerate(starts):
        k = int(rng.integers(0, 4))
        begin = T0 + dt.timedelta(seconds=float(s))
        end = begin + dt.timedelta(seconds=float(rng.exponential(5) + 0.1))
        rows.append(
            {
                "query_id": i,
                "start_time": begin.isoformat(sep=" "),
                "end_time": end.isoformat(sep=" "),
                "status": "failed" if i % 37 == 5 else "canceled" if i % 41 == 7 else "success",
                "query_text": TEMPLATES[k].format(d=f"1995-0{1 + i % 9}-01", x=i),
                "query_type": "INSERT" if k == 3 else "SELECT",
                "result_cache_hit": i % 50 == 0,
                "workgroup": ["a", "b"][i % 2],
            }
        )
    return pa.Table.from_pylist(rows)


def test_classes_fold_literals_and_case():
    per_row, distinct = _core.classify_sql(pa.array(["select a from t where x = 1", "SELECT a  FROM T WHERE x=22 -- c", "select b from t", "select 'open"]))
    ids = per_row["class_id"].to_pylist()
    assert ids[0] == ids[1] != ids[2]
    assert per_row["raw"].to_pylist() == [False, False, False, True]
    assert distinct.num_rows == 3
    assert "select a from t where x = ?" in distinct["text"].to_pylist()
    hashed, _ = _core.classify_sql(pa.array(["select 1", "select 2"]), "postgres", pa.array(["h1", None]))
    assert hashed["class_id"][0] != hashed["class_id"][1]
    with pytest.raises(_core.AutoSloCoreError, match="SQL dialect"):
        _core.classify_sql(pa.array(["select 1"]), "oracle7")


def test_import_counts_every_row_and_splits_by_arrival(tmp_path: Path):
    t = history()
    h = from_history([t], rpu={"a": 8, "b": 32}, out=tmp_path)
    r = h.report
    assert r.rows == t.num_rows
    # Nothing leaves uncounted.
    assert r.kept + sum(r.set_aside.values()) + sum(r.dropped.values()) == r.rows
    assert r.set_aside["not a SELECT"] == sum(1 for q in t["query_type"].to_pylist() if q == "INSERT")
    assert r.dropped["failed"] > 0 and r.censored > 0
    assert r.classes == 3 and r.feature_sources == {"sql": 3}
    assert sum(r.parts.values()) == r.kept
    ts = load_traces(tmp_path)
    assert ts.train["arrival"].to_numpy().max() <= ts.val["arrival"].to_numpy().min()
    assert ts.val["arrival"].to_numpy().max() <= ts.test["arrival"].to_numpy().min()
    assert set(ts.train["cluster_size"].to_pylist()) == {8, 32}
    assert abs(ts.train.num_rows / r.kept - 0.7) < 0.01
    # Arrivals count from midnight UTC of the first day: the 08:00 start stays at 08:00.
    assert 8 * 3600 <= ts.train["arrival"][0].as_py() < 8 * 3600 + 60
    # Censored rows are the canceled reads that did not hit the result cache.
    canceled = {r["query_id"] for r in t.to_pylist() if r["status"] == "canceled" and r["query_type"] == "SELECT" and not r["result_cache_hit"]}
    all_rows = pa.concat_tables([ts.train, ts.val, ts.test])
    assert canceled and {q for q, c in zip(all_rows["query_id"].to_pylist(), all_rows["censored"].to_pylist()) if c} == canceled
    assert (tmp_path / "classes.parquet").is_file()
    schema = json.loads((tmp_path / "plan_schema.json").read_text())
    assert set(schema["tables"]) == {"lineitem", "orders", "customer"}
    assert len(_core.plan_schema_names(json.dumps(schema))) == 34


def test_plans_give_features_and_bad_plans_fall_back():
    t = history()
    kept = [q for q, k, s, c in zip(t["query_id"].to_pylist(), t["query_type"].to_pylist(), t["status"].to_pylist(), t["result_cache_hit"].to_pylist()) if k == "SELECT" and s == "success" and not c]
    texts = dict(zip(t["query_id"].to_pylist(), t["query_text"].to_pylist()))
    scan = next(q for q in kept if "lineitem" in texts[q])
    agg = next(q for q in kept if "orders" in texts[q] and "customer" not in texts[q])
    plans = pa.table(
        {
            "query_id": [scan, agg],
            "plan": [
                "XN Aggregate  (cost=1.00..1.00 rows=1 width=8)\n  ->  XN Seq Scan on lineitem  (cost=0.00..1.00 rows=6000000 width=8)",
                "not a plan at all",
            ],
        }
    )
    explain_rows = pa.table({"query_id": [99999], "child_query_sequence": [1], "plan_node_id": [1], "plan_parent_id": [0], "plan_node": ["XN Seq Scan on x  (cost=0.00..1.00 rows=1 width=8)"]})
    h = from_history([t], plans=[plans], explain=[explain_rows], rpu={"a": 8, "b": 32})
    src = dict(zip(h.classes["text"].to_pylist(), h.classes["feature_source"].to_pylist()))
    assert src[next(s for s in src if "lineitem" in s)] == "plan"
    assert src[next(s for s in src if "orderpriority" in s)] == "sql"  # the plan could not be read: its SQL
    assert h.report.feature_problems
    # The schema is fitted on the plan-backed class.
    assert h.report.schema["tables"] == ["lineitem"]
    row = h.classes.filter(pa.compute.equal(h.classes["feature_source"], "plan"))["features"][0].as_py()
    assert row[3] == pytest.approx(np.log1p(6e6), rel=1e-5)


def test_explain_rows_with_a_missing_parent_name_the_row():
    t = history()
    q = next(q for q, k in zip(t["query_id"].to_pylist(), t["query_type"].to_pylist()) if k == "SELECT" and q % 50 and q % 37 != 5 and q % 41 != 7)
    rows = pa.table({"query_id": [q, q], "child_query_sequence": [1, 1], "plan_node_id": [1, 2], "plan_parent_id": [0, 7], "plan_node": ["XN Limit  (cost=0.00..1.00 rows=1 width=8)", "XN Seq Scan on x  (cost=0.00..1.00 rows=1 width=8)"]})
    with pytest.raises(_core.AutoSloCoreError, match=r"row 1: .*parent 7"):
        from_history([t], explain=[rows], rpu={"a": 8, "b": 32})


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda t: t.drop_columns(["status"]), r"missing column\(s\) `status`"),
        (lambda t: t.set_column(1, "start_time", pa.array(["yesterday"] + t["start_time"].to_pylist()[1:])), r"row 0, column `start_time`: 'yesterday'"),
        (lambda t: t.set_column(2, "end_time", pa.array(["2024-05-01 07:00:00"] + t["end_time"].to_pylist()[1:])), r"row 0, column `end_time`: ends before it starts"),
        # Rows 0 and 2 are both in workgroup `a`.
        (lambda t: t.set_column(0, "query_id", pa.array([0, 1, 0] + t["query_id"].to_pylist()[3:])), r"row 2, column `query_id`: query 0 appears again in workgroup a"),
        (lambda t: t.set_column(3, "status", pa.array(["weird"] + t["status"].to_pylist()[1:])), r"row 0, column `status`: unknown status 'weird'"),
    ],
)
def test_bad_input_names_file_row_and_column(tmp_path: Path, edit, match):
    t = edit(history())
    f = tmp_path / "h.csv"
    pcsv.write_csv(t, f)
    with pytest.raises(_core.AutoSloCoreError, match=match) as e:
        from_history([f], rpu={"a": 8, "b": 32})
    assert str(f) in str(e.value)


def test_unreadable_sql_is_kept_and_counted():
    t = history()
    texts = t["query_text"].to_pylist()
    i = next(i for i, (k, s, c) in enumerate(zip(t["query_type"].to_pylist(), t["status"].to_pylist(), t["result_cache_hit"].to_pylist())) if k == "SELECT" and s == "success" and not c)
    texts[i] = "select 'unterminated from t"
    h = from_history([t.set_column(4, "query_text", pa.array(texts))], rpu={"a": 8, "b": 32})
    assert h.report.unreadable_texts == 1
    assert h.report.classes == 4
    assert h.report.feature_sources.get("fallback") == 1


def test_sizes_are_required_and_named():
    t = history()
    with pytest.raises(_core.AutoSloCoreError, match="2 workgroups"):
        from_history([t], rpu=8)
    with pytest.raises(_core.AutoSloCoreError, match="no size for workgroup"):
        from_history([t], rpu={"a": 8})
    with pytest.raises(_core.AutoSloCoreError, match="no `rpu` column"):
        from_history([t])
    one = t.append_column("rpu", pa.array([16] * t.num_rows)).drop_columns(["workgroup"])
    assert from_history([one]).report.workgroups == {"default": {"rpu": 16, "kept": from_history([one]).report.kept}}


def test_cli_imports_trains_and_evaluates(tmp_path: Path, capsys):
    import pyarrow.parquet as pq

    f = tmp_path / "h.parquet"
    pq.write_table(history(), f)
    out = tmp_path / "out"
    assert main(["predictor", "data", "--from-history", str(f), "--rpu", "a=8", "b=32", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "set aside: not a SELECT" in printed and "dropped: failed" in printed and "classes: 3" in printed
    assert main(["predictor", "data", "--rpu", "8", "--out", str(tmp_path / "x")]) == 2
    assert "options of --from-history" in capsys.readouterr().err
    model = tmp_path / "m"
    assert main(["predictor", "train", "--traces", str(out), "--out", str(model), "--epochs", "1", "--hidden", "8", "--embedding", "8"]) == 0
    assert "isolated runs of the history" in capsys.readouterr().err
    meta = json.loads((model / "meta.json").read_text())
    assert meta["classes_sha256"] and (model / "classes.json").is_file()
    # The Rust core loads it with its classes.
    from autoslo import predictor

    p = predictor.load(model)
    ts = load_traces(out)
    r = p.predict_trace(ts.test)
    assert len(r["ln_pred"]) == ts.test.num_rows and np.isfinite(r["ln_pred"]).all()
    assert main(["predictor", "eval", "--traces", str(out), "--models", str(model), "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert "noise_floor" not in ev
    assert ev["concurrency_blind"]["overall"]["n"] == ev["variants"]["iconq+"]["overall"]["n"] > 0
    assert ev["concurrency_blind"]["classes_not_in_training"] == 0
    paths = ev["variants"]["iconq+"]["stage_paths"]
    assert sum(v["n"] for v in paths.values()) == ev["variants"]["iconq+"]["overall"]["n"]


def test_leave_class_out_split_keeps_each_class_in_one_part(tmp_path: Path):
    t = history(600)
    # Thirty classes: the same statement over thirty tables.
    texts = [f"select count(*) from t{q % 30} where x > {q}" for q in t["query_id"].to_pylist()]
    t = t.set_column(4, "query_text", pa.array(texts)).set_column(5, "query_type", pa.array(["SELECT"] * t.num_rows))
    h = from_history([t], rpu={"a": 8, "b": 32}, split="classes")
    parts = [set(p["class_id"].to_pylist()) for p in (h.traces.train, h.traces.val, h.traces.test)]
    assert all(parts) and not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert h.report.split == "classes"
    with pytest.raises(_core.AutoSloCoreError, match="too few to leave some out"):
        from_history([history()], rpu={"a": 8, "b": 32}, split="classes")


def test_autoslo_traces_read_as_histories(tmp_path: Path):
    import pyarrow.parquet as pq

    import autoslo

    day = autoslo.redbench_workload(days=1, seed=3, queries_per_day=1500, tenants=2, kappa=4)
    run = autoslo.emulate(day, [8, 32], seed=3)
    f = tmp_path / "trace.parquet"
    pq.write_table(run.trace, f)
    h = from_history([f, run.trace])
    ran = sum(1 for o in run.trace["outcome"].to_pylist() if o in ("completed", "timeout"))
    assert h.report.rows == 2 * ran and h.report.kept == 2 * ran
    # Each run's clusters are workgroups of their own, sized as they ran.
    assert set(h.report.workgroups) == {f"{f}:c0", f"{f}:c1", "history 1:c0", "history 1:c1"}
    assert {w["rpu"] for w in h.report.workgroups.values()} == {8, 32}
    # A class per TPC-DS template that ran.
    assert h.report.classes == len(set(run.trace["template"].to_pylist()))


def test_the_size_scaling_law_of_a_historys_classes():
    from autoslo.predictor.stage import class_size_slope

    # Class 1 halves its runtime per 4× size (slope −0.5), class 2 per 2× (−1); class 3 has one size.
    medians = {(1, 8): 4.0, (1, 32): 2.0, (2, 8): 8.0, (2, 16): 4.0, (3, 8): 1.0}
    assert class_size_slope(medians) == pytest.approx(-0.75)
    assert class_size_slope({(1, 8): 4.0}) is None
    assert class_size_slope({(1, 8): 1.0, (1, 16): 1000.0}) == 1.0  # clamped
