"""The load-balancing chapter's Mercury fixture, from the command line."""

from __future__ import annotations

import json

import pytest

from autoslo.cli import main


def test_reproduce_placement(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "placement", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["count_balanced"]["workers_over_budget"] == 2 and r["work_aware"]["workers_over_budget"] == 0
    assert max(r["work_aware"]["cpu_ms_per_s"]) < r["budget_ms_per_s"]
    assert r["remap_ring_10_to_11"] < 0.12 < 0.85 < r["remap_modulo_10_to_11"]
    plain, ejecting = r["slow"][1], r["slow"][2]
    assert ejecting["ejections"] and not plain["ejections"]
    assert ejecting["p99_response_slow_window_ms"] < plain["p99_response_slow_window_ms"]
    assert main(["reproduce", "placement"]) == 0
    assert "work-aware + ejection" in capsys.readouterr().out
