"""The command line, run as users run it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import autoslo

CLI = [sys.executable, "-m", "autoslo"]


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, check=check)


@pytest.mark.parametrize("sub", ["emulate", "workload", "calibrate", "catalog", "demo"])
def test_every_subcommand_has_help(sub: str) -> None:
    out = run(sub, "--help").stdout
    assert "usage: autoslo " + sub in out


def test_emulate_json_and_trace(tmp_path) -> None:
    trace = tmp_path / "out.parquet"
    out = run("emulate", "--workload", "base", "--rate", "0.1", "--clusters", "16,16", "--kappa", "2", "--seed", "1", "--trace", str(trace), "--json").stdout
    summary = json.loads(out)
    assert summary["queries"] == 297
    assert 0 <= summary["violation_rate"] <= 1 and summary["cost"] > 0
    t = autoslo.read_table(trace)
    assert t.num_rows == 297
    assert summary["violation_rate"] == pytest.approx(1 - sum(t["met"].to_pylist()) / 297)


def test_emulate_redbench_and_workload_file(tmp_path) -> None:
    wl = tmp_path / "wl.parquet"
    run("workload", "--workload", "redbench", "--days", "1", "--queries-per-day", "800", "--tenants", "2", "--out", str(wl))
    a = json.loads(run("emulate", "--workload-file", str(wl), "--clusters", "32", "--json").stdout)
    b = json.loads(run("emulate", "--workload", "redbench", "--days", "1", "--queries-per-day", "800", "--tenants", "2", "--clusters", "32", "--json").stdout)
    assert a == b


def test_bad_input_exits_with_a_message(tmp_path) -> None:
    r = run("emulate", "--clusters", "16,x", check=False)
    assert r.returncode == 2 and "cluster sizes" in r.stderr
    r = run("emulate", "--workload-file", str(tmp_path / "missing.parquet"), check=False)
    assert r.returncode != 0
    import pyarrow as pa

    bad = tmp_path / "bad.parquet"
    autoslo.write_table(pa.table({"arrival": [0.0, 1.0], "template": [1, 500], "instance": [1, 1]}), bad)
    r = run("emulate", "--workload-file", str(bad), check=False)
    assert r.returncode == 2 and "unknown query template 500" in r.stderr


def test_calibrate_json_holds() -> None:
    r = run("calibrate", "--json", "--seeds", "2", "--replications", "3")
    report = json.loads(r.stdout)
    assert report["passed"]
    checked = [b for b in report["bins"] if b["checked"]]
    assert len(checked) == 12
    for b in checked:
        assert 1 / 1.5 <= b["emulated_median"] / b["real_median"] <= 1.5


def test_demo_prints_its_table() -> None:
    out = run("demo", "--queries-per-day", "2000").stdout
    assert "violation_rate" in out and "Per tenant x class" in out and "32+32" in out
