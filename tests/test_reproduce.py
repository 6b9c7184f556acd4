"""`autoslo reproduce all`: every table at once, written where the docs read it (`pytest -m
reproduce` selects the reproduction tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoslo.reproduce import ALL_TABLES, reproduce_all


@pytest.mark.reproduce
def test_reproduce_all_writes_every_table(tmp_path: Path) -> None:
    results = reproduce_all(tmp_path, seeds=[0])
    assert set(results) == set(ALL_TABLES)
    page = (tmp_path / "README.md").read_text()
    for stem in ALL_TABLES:
        data = json.loads((tmp_path / f"{stem}.json").read_text())
        assert data["rows"], stem
    for title in ("Table 2", "Table 3", "Table 4"):
        assert title in page
    # The product's policies beat the do-nothing baselines on this seed too.
    assert results["table3-spinup-size"]["mean_change_vs_noop"]["add-best"]["mean_violation_rate_change"] < -0.5
    assert results["table4-trigger"]["mean_change_vs_noop"]["combined"]["mean_violation_rate_change"] < -0.3


@pytest.mark.reproduce
def test_table5_and_figure6_run_end_to_end_at_reduced_size(tmp_path: Path) -> None:
    from autoslo.reproduce_tuner import experiment, reproduce_end_to_end, reproduce_tuner
    from autoslo.tuner import TunerSettings

    small = TunerSettings(forecasts=3, eta=1, phi=1, space={"t_idle_s": [300.0, 600.0]})
    exp = experiment(seed=2, queries_per_day=1500, target_days=[8], kappas=[2.0], history=[0, 1, 7], settings=small)
    t5 = reproduce_tuner(exp)
    assert [r["history_days"] for r in t5["rows"]] == [0, 1, 7]
    none, one, week = t5["rows"]
    assert none["tuning"]["simulations"] == 0 and none["config"]["scheduled_spinups"] == []
    assert one["tuning"]["forecast_policy"] == "previous-day" and week["tuning"]["forecast_policy"] == "decay"
    assert one["config"]["provenance"]["history_days"] == 1 and one["tuning"]["simulations"] > 0
    assert all(r["queries"] == none["queries"] > 0 for r in t5["rows"]), "every configuration runs the same real day"
    assert set(t5["mean_change_vs_no_past_data"]) == {1, 7} and "met" in t5["goal"]
    assert {g["tenant"] for g in one["per_tenant_class"]} == {"tenant-1", "tenant-2", "tenant-3", "tenant-4"}

    fig = tmp_path / "fig6.png"
    f6 = reproduce_end_to_end(experiment(seed=2, queries_per_day=1500, target_days=[8], kappas=[2.0], history=[7], settings=small), plot=fig)
    methods = [r["method"] for r in f6["rows"]]
    assert methods[0] == "AutoSLO" and {"1 x 64 RPU", "2 x 32 RPU, round robin", "RAIS-like balanced", "RAIS-like high performance", "Snowflake standard", "Snowflake economy"} <= set(methods)
    assert len(f6["per_scenario"]) == 1 and fig.stat().st_size > 10_000
