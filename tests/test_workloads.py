"""Workload generators, validation and Parquet round trips."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import autoslo


def test_base_workload_is_the_papers() -> None:
    wl = autoslo.base_workload(0.1, seed=3, kappa=4)
    assert wl.num_rows == 297
    assert set(wl.column_names) >= {"query_id", "arrival", "template", "instance", "tenant", "class", "slo"}
    counts = wl.group_by("template").aggregate([("instance", "count_distinct")])
    assert counts.num_rows == 99 and pc.all(pc.equal(counts["instance_count_distinct"], 3)).as_py()
    arrivals = wl["arrival"].to_pylist()
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    # SLO = κ × p100 baseline: template 1 has a 3.204 s baseline.
    slo1 = pc.filter(wl["slo"], pc.equal(wl["template"], 1)).to_pylist()
    assert slo1 == pytest.approx([4 * 3.204] * 3)
    assert autoslo.base_workload(0.1, seed=3, kappa=4).equals(wl)
    assert not autoslo.base_workload(0.1, seed=4, kappa=4).equals(wl)


def test_user_supplied_slos() -> None:
    wl = autoslo.base_workload(0.1, seed=1, kappa=3, baseline={1: 10.0})
    assert set(pc.filter(wl["slo"], pc.equal(wl["template"], 1)).to_pylist()) == {30.0}
    assert pc.filter(wl["slo"], pc.equal(wl["template"], 2)).to_pylist() == pytest.approx([3 * 11.197] * 3)
    rb = autoslo.redbench_workload(days=1, seed=1, queries_per_day=500, tenants=2, class_kappa={"backfill": 10.0})
    back = rb.filter(pc.equal(rb["class"], "backfill")).slice(0, 1).to_pylist()[0]
    assert back["slo"] == pytest.approx(10 * autoslo.slo_for(back["template"], kappa=1.0))
    with pytest.raises(autoslo.AutoSloCoreError, match="baseline latency of template 1"):
        autoslo.base_workload(0.1, baseline={1: -2.0})


def test_redbench_is_multi_tenant_and_seeded() -> None:
    wl = autoslo.redbench_workload(days=2, seed=5, queries_per_day=3000, tenants=3, class_slo_s={"dashboard": 10.0})
    assert set(wl["tenant"].to_pylist()) == {"tenant-1", "tenant-2", "tenant-3"}
    assert set(wl["class"].to_pylist()) == {"dashboard", "adhoc", "report", "backfill"}
    assert pc.max(wl["arrival"]).as_py() < 2 * 86400
    dash = pc.filter(wl["slo"], pc.equal(wl["class"], "dashboard"))
    assert set(dash.to_pylist()) == {10.0}
    assert autoslo.redbench_workload(days=2, seed=5, queries_per_day=3000, tenants=3, class_slo_s={"dashboard": 10.0}).equals(wl)
    # A seed out of range says what a seed is, wherever it is given.
    for bad in (-1, 2**64):
        with pytest.raises(ValueError, match=f"a seed is a whole number from 0 to 2\\*\\*64 - 1, got {bad}"):
            autoslo.redbench_workload(days=1, seed=bad)
    with pytest.raises(ValueError, match="a seed is a whole number"):
        autoslo.emulate(wl.slice(0, 5), [16], seed=-1)


def _table(**cols: list) -> pa.Table:
    base = {"arrival": [0.0, 1.0, 2.0], "template": [1, 2, 3], "instance": [1, 1, 1]}
    base.update(cols)
    return pa.table({k: v for k, v in base.items() if v is not None})


@pytest.mark.parametrize(
    ("cols", "message"),
    [
        ({"template": None}, "missing column `template`"),
        ({"arrival": [0.0, -1.0, 2.0]}, "arrival of row 1"),
        ({"arrival": [0.0, 5.0, 2.0]}, "not sorted"),
        ({"template": [1, 2, 120]}, "unknown query template 120"),
        ({"instance": [1, 0, 1]}, "instance of row 1"),
        ({"slo": [1.0, None, 1.0]}, "row 1 has no value"),
        ({"query_id": [1, 1, 2], "slo": [1.0, 1.0, 1.0]}, "duplicate query id 1"),
    ],
)
def test_malformed_workloads_are_clear_errors(cols: dict, message: str) -> None:
    with pytest.raises(autoslo.AutoSloCoreError, match=message):
        autoslo.validate_workload(_table(**cols), kappa=2.0)


def test_missing_slo_needs_a_rule() -> None:
    with pytest.raises(autoslo.AutoSloCoreError, match="slo"):
        autoslo.validate_workload(_table())
    ok = autoslo.validate_workload(_table(), kappa=2.0)
    assert ok["slo"].to_pylist() == pytest.approx([autoslo.slo_for(t, kappa=2.0) for t in (1, 2, 3)])
    assert ok["tenant"].to_pylist() == ["default"] * 3


def test_parquet_round_trip(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    wl = autoslo.redbench_workload(days=1, seed=1, queries_per_day=500, tenants=2)
    path = tmp_path / "wl.parquet"
    autoslo.write_table(wl, path)
    back = autoslo.read_workload(path)
    assert back.equals(wl)
    res = autoslo.emulate(back, [16], seed=2)
    autoslo.write_table(res.trace, tmp_path / "trace.parquet")
    assert autoslo.read_table(tmp_path / "trace.parquet").equals(res.trace)
    # A write interrupted mid-way (a full disk, Ctrl-C) leaves the file that was there, whole.
    import pyarrow.parquet as pq

    def interrupted(table: pa.Table, where: object, **kwargs: object) -> None:
        with open(str(where), "wb") as f:
            f.write(b"PAR1 half a table")
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", interrupted)
    with pytest.raises(KeyboardInterrupt):
        autoslo.write_table(wl, path)
    monkeypatch.undo()
    assert autoslo.read_workload(path).equals(wl)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.parquet", "wl.parquet"], "no temporary file is left"


def test_a_query_log_in_csv_with_timestamps_reads_as_the_workload_it_logs(tmp_path) -> None:
    import datetime as dt

    import pyarrow.csv as pcsv

    wl = autoslo.redbench_workload(days=1, seed=1, queries_per_day=500, tenants=2)
    pcsv.write_csv(wl, tmp_path / "wl.csv")
    assert autoslo.read_workload(tmp_path / "wl.csv").equals(wl)
    # A log as a warehouse keeps it: ISO 8601 times from 09:00 UTC (some with an offset), rows out
    # of order, no query ids and no SLOs (κ gives them).
    start = dt.datetime(2024, 5, 1, 9, tzinfo=dt.timezone.utc)
    times = [(start + dt.timedelta(seconds=a)).isoformat() for a in wl["arrival"].to_pylist()]
    times[1] = (start + dt.timedelta(seconds=wl["arrival"][1].as_py())).astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat()
    log = pa.table({"arrival": times, "template": wl["template"], "instance": wl["instance"], "tenant": wl["tenant"], "class": wl["class"]})
    pcsv.write_csv(log.take(pa.array(range(log.num_rows - 1, -1, -1))), tmp_path / "log.csv")
    back = autoslo.read_workload(tmp_path / "log.csv", kappa=2.0)
    assert back["arrival"].to_numpy() == pytest.approx(wl["arrival"].to_numpy() + 9 * 3600, abs=1e-5)
    for c in ("template", "instance", "tenant", "class", "slo"):
        assert back[c].equals(wl[c]), c
    pcsv.write_csv(pa.table({"arrival": ["2024-05-01T09:00:00", "noon"], "template": [1, 2], "instance": [1, 1]}), tmp_path / "bad.csv")
    with pytest.raises(autoslo.AutoSloCoreError, match=r"workload row 1, column `arrival`: 'noon' is not an ISO 8601 time"):
        autoslo.read_workload(tmp_path / "bad.csv", kappa=2.0)
    # Seconds with one typo: the CSV reader keeps the column as text; the error names the typo.
    (tmp_path / "typo.csv").write_text("arrival,template,instance\n0.5,1,1\n1.5,2,1\n2..5,3,1\n")
    with pytest.raises(autoslo.AutoSloCoreError, match=r"workload row 2, column `arrival`: '2\.\.5' is not a number of seconds"):
        autoslo.read_workload(tmp_path / "typo.csv", kappa=2.0)
    with pytest.raises(FileNotFoundError, match="no CSV file at"):
        autoslo.read_workload(tmp_path / "missing.csv")


@pytest.mark.parametrize(
    ("cols", "message"),
    [
        ({"slo": [1.0, -2.0, 3.0]}, r"SLO of row 1 must be a positive number"),
        ({"template": [1, 300, 3]}, r"unknown query template 300 in row 1 "),
        ({"instance": [1, 1, 70_000]}, r"instance of row 2 must be a query instance from 1 to 65535"),
        ({"arrival": [100.0, None, 1.0]}, r"column `arrival`: row 1 has no value \(1 of 3 rows"),
        ({"arrival": ["2024-04-01T10:00:00", None, "2024-04-01T09:00:00"]}, r"column `arrival`: row 1 has no value"),
    ],
)
def test_a_logs_bad_row_is_named_as_the_file_has_it(tmp_path, cols: dict, message: str) -> None:
    """read_workload sorts a log by arrival; its errors still name the file's row, not the sorted one."""
    import pyarrow.csv as pcsv

    base = {"arrival": [5.0, 100.0, 1.0], "template": [1, 2, 3], "instance": [1, 1, 1], "slo": [1.0, 2.0, 3.0]}  # sorted: rows 2, 0, 1
    base.update(cols)
    pcsv.write_csv(pa.table(base), tmp_path / "log.csv")
    with pytest.raises(autoslo.AutoSloCoreError, match=message):
        autoslo.read_workload(tmp_path / "log.csv")
    pcsv.write_csv(pa.table(base).slice(0, 0), tmp_path / "empty.csv")
    with pytest.raises(autoslo.AutoSloCoreError, match="no queries"):
        autoslo.read_workload(tmp_path / "empty.csv")


def test_catalog_and_scaling_law() -> None:
    cat = autoslo.catalog_table()
    assert cat.num_rows == 617 and pc.sum(cat["runs"]).as_py() == 2758
    rep = autoslo.catalog_fit_report()
    assert rep["templates_from_baseline"] == [67]
    assert 1.0 <= rep["in_sample_q_error"][0] <= rep["holdout_q_error"][0] < 1.5
    assert autoslo.isolated_runtime(15, 2, 4) == pytest.approx(7.658700108528137)
    assert autoslo.isolated_runtime(1, 1, 64) < autoslo.isolated_runtime(1, 1, 8)
    with pytest.raises(autoslo.AutoSloCoreError, match="unknown query template"):
        autoslo.isolated_runtime(0, 1, 16)


def test_slo_feasibility_flags_the_slos_no_size_can_meet() -> None:
    wl = autoslo.base_workload(0.1, seed=3, kappa=1)
    # Template 83 instance 3 alone: 8.29 s on 16 RPU, 4.63 s on 32, 2.59 s on 64 (the catalog).
    q = pa.table({"template": [83, 83, 83], "instance": [3, 3, 3], "slo": [4.0, 5.0, 2.0]})
    f = autoslo.slo_feasibility(q, [16, 32])
    assert f["fastest_rpu"].to_pylist() == [32, 32, 32]
    assert f["fastest_s"].to_pylist() == pytest.approx([autoslo.isolated_runtime(83, 3, 32)] * 3)
    assert f["feasible"].to_pylist() == [False, True, False]
    assert autoslo.slo_feasibility(q, [64, 16])["feasible"].to_pylist() == [True, True, False]
    # Larger sizes never make a query less feasible; at κ = 1 some SLOs sit below a 16 RPU run.
    small, large = (pc.sum(pc.cast(autoslo.slo_feasibility(wl, s)["feasible"], pa.int64())).as_py() for s in ([16], [16, 32, 64]))
    assert 0 < small < large <= wl.num_rows
    assert autoslo.slo_feasibility(wl, [16]).column_names == [*wl.column_names, "fastest_rpu", "fastest_s", "feasible"]
    for bad, message in (([], "at least one"), ([0], "base capacity"), ([16.5], "base capacity"), ([True], "base capacity"), ([16, 12], "base capacity in RPU .*, got 12")):
        with pytest.raises(ValueError, match=message):
            autoslo.slo_feasibility(q, bad)
    with pytest.raises(ValueError, match=r"\['slo'\]"):
        autoslo.slo_feasibility(q.drop_columns(["slo"]), [16])
    with pytest.raises(autoslo.AutoSloCoreError, match="unknown query template 100"):
        autoslo.slo_feasibility(pa.table({"template": [100], "instance": [1], "slo": [1.0]}), [16])
