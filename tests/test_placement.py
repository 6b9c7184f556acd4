"""The load-balancing chapter's Mercury fixture, from the command line."""

from __future__ import annotations

import json

import pytest

from autoslo.cli import main


@pytest.mark.reproduce
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


def test_a_silently_slower_cluster_on_the_emulator_is_ejected_and_reenters() -> None:
    from autoslo.reproduce_placement import emulated_slowdown

    r = emulated_slowdown(seed=3)
    runs = {x["run"]: x for x in r["runs"]}
    healthy, degraded, ejecting = runs["healthy"], runs["degraded"], runs["degraded + ejection"]
    assert degraded["window_violation_rate"] > healthy["window_violation_rate"] + 0.05
    assert not healthy["ejections"] and not runs["healthy + ejection"]["ejections"] and not degraded["ejections"]
    start, end = r["window_s"]
    ejected = [(t, c) for t, c, ev in ejecting["ejections"] if ev == "ejected"]
    assert ejected and all(c == 1 and start <= t < end + 3600 for t, c in ejected), ejected
    # In service again at the end: the last event is a re-entry, on probation (docs/placement.md: on seed 3 it comes at
    # 10.71 h, shortly before the slowdown ends, and no fresh outlier ejects it again). That nothing is ejected an hour
    # after the window, once the slowed queries have completed, is asserted above.
    assert ejecting["ejections"][-1][2] == "reentered"
    # Covering the ejected capacity brings the violation rate nearer the healthy one; the cover is released at the end.
    covered = runs["degraded + ejection + cover"]
    assert not runs["healthy + ejection + cover"]["ejections"]
    assert covered["violation_rate"] < ejecting["violation_rate"] and covered["window_violation_rate"] < ejecting["window_violation_rate"]
    kinds = [ev for _, _, ev in covered["ejections"]]
    assert "spinup cover" in kinds and kinds[-1] in ("teardown cover", "gone cover"), kinds
    assert ejecting["slow_cluster_share"] < degraded["slow_cluster_share"]


def test_bad_ejection_settings_are_refused_where_they_are_written() -> None:
    import numpy as np

    import autoslo
    from autoslo.placement import Ejection

    for bad, message in [
        ({"ratio": 1.0}, "ejection policy's ratio must be a finite factor > 1, got 1"),
        ({"alpha": 0.0}, r"ejection policy's alpha must be in \(0, 1\], got 0"),
        ({"max_ejected_fraction": 1.5}, r"max_ejected_fraction must be in \[0, 1\], got 1.5"),
        ({"base_ejection_s": float("inf")}, "base_ejection_s must be a finite time > 0 s, got inf"),
        ({"min_samples": -1}, "min_samples must be a whole number ≥ 0, got -1"),
        ({"min_samples": 2.5}, "got 2.5"),
        ({"ratio": "2"}, "ratio must be a number, got '2'"),
        ({"cover": 1}, "`cover` must be True or False, got 1"),
    ]:
        with pytest.raises(autoslo.AutoSloCoreError, match=message):
            Ejection(**bad)
    assert Ejection(min_samples=np.int64(5), ratio=np.float64(2.0)).as_args()[:2] == (5, 2.0)
    # The core checks what it is handed directly, as a run does.
    with pytest.raises(autoslo.AutoSloCoreError, match="ratio"):
        autoslo._core.validate_ejection((20, 0.5, 0.02, 0.2, 600.0, False))
