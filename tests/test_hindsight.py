"""The best plan in hindsight from Python and the command line: exact, seeded, and clear on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import autoslo
from autoslo import _core
from autoslo.hindsight import best_plan_in_hindsight, default_space, regret
from autoslo.tuner import ExecutionConfig

CLI = [sys.executable, "-m", "autoslo"]


@pytest.fixture(scope="module")
def day() -> pa.Table:
    return autoslo.base_workload(0.2, seed=4, kappa=4)


def test_the_best_plan_meets_tau_and_no_plan_emulated_to_the_end_that_meets_it_is_cheaper(day) -> None:  # type: ignore[no-untyped-def]
    tuned = ExecutionConfig({"initial_clusters": [16]})
    r = best_plan_in_hindsight(day, given=[tuned], plans=30, seed=4, progress=False)
    assert r.best is not None and r.violation_rate is not None and r.violation_rate <= 0.1
    rows = r.outcomes.to_pylist()
    assert len(rows) == len(r.plans) == 30 and rows[0]["origin"] == "given"
    assert {x["status"] for x in rows} <= {"finished", "violations", "cost"}
    finished = [x for x in rows if x["status"] == "finished" and x["violation_rate"] <= 0.1]
    assert min(x["cost"] for x in finished) == r.cost
    # The emulator agrees with the search on the best plan, run on its own.
    e = autoslo.emulate(day, config=r.best, seed=4)
    assert (e.violation_rate, e.cost) == pytest.approx((r.violation_rate, r.cost))
    # The tuned plan is among those searched: its regret is never negative when it meets τ.
    own = autoslo.emulate(day, config=tuned, seed=4)
    if own.violation_rate <= 0.1:
        assert r.regret(own.cost) >= 0
    assert r.summary()["plans"] == 30 and "best:" in repr(r)


def test_the_search_is_seeded_and_a_narrower_space_is_searched_as_given(day) -> None:  # type: ignore[no-untyped-def]
    a = best_plan_in_hindsight(day, plans=12, seed=4, search_seed=3, progress=False)
    b = best_plan_in_hindsight(day, plans=12, seed=4, search_seed=3, progress=False)
    assert a.plans == b.plans and a.best == b.best
    space = {**default_space(), "fleet_sizes": [32], "max_fleet_clusters": 1}
    c = best_plan_in_hindsight(day, plans=12, seed=4, space=space, progress=False)
    fleets = [p for p, o in zip(c.plans, c.outcomes["origin"].to_pylist()) if o == "fleet"]
    assert [p.initial_clusters for p in fleets] == [[32]]


def test_per_tenant_every_tenant_of_the_best_plan_is_within_tau() -> None:
    day = autoslo.redbench_workload(days=1, seed=2, queries_per_day=600, tenants=3, kappa=2)
    r = best_plan_in_hindsight(day, plans=16, tau=0.15, tau_scope="tenant", progress=False)
    if r.best_outcome is not None:
        assert all(t["violation_rate"] <= 0.15 for t in r.best_outcome["tenants"].values())
        assert len(r.best_outcome["tenants"]) == 3


def test_bad_input_is_refused_with_a_clear_message(day) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="plans"):
        best_plan_in_hindsight(day, plans=0, progress=False)
    with pytest.raises(_core.AutoSloCoreError, match="tau"):
        best_plan_in_hindsight(day, plans=5, tau=1.5, progress=False)
    with pytest.raises(_core.AutoSloCoreError, match="tau_scope|fleet, tenant"):
        best_plan_in_hindsight(day, plans=5, tau_scope="everyone", progress=False)
    with pytest.raises(_core.AutoSloCoreError, match="t_idle_s"):
        best_plan_in_hindsight(day, plans=5, space={**default_space(), "autoscaled": {**default_space()["autoscaled"], "t_idle_s": []}}, progress=False)
    with pytest.raises(_core.AutoSloCoreError, match="unknown field"):
        best_plan_in_hindsight(day, plans=5, space={"sizes": [8]}, progress=False)
    assert regret(110.0, 100.0) == pytest.approx(0.1) and regret(1.0, None) is None


def test_the_command_judges_a_plan_and_writes_the_best_and_every_outcome(tmp_path: Path) -> None:
    wl = tmp_path / "day.parquet"
    subprocess.run([*CLI, "workload", "--workload", "base", "--rate", "0.2", "--seed", "4", "--kappa", "4", "--out", str(wl)], check=True, capture_output=True)
    plan = tmp_path / "plan.yaml"
    ExecutionConfig({"initial_clusters": [16]}).save(plan)
    best, outcomes = tmp_path / "best.yaml", tmp_path / "outcomes.parquet"
    args = ["hindsight", "--workload-file", str(wl), "--seed", "4", "--plans", "20", "--config", str(plan), "--save", str(best), "--outcomes", str(outcomes)]
    out = json.loads(subprocess.run([*CLI, *args, "--json"], check=True, capture_output=True, text=True).stdout)
    assert out["plans"] == 20 and out["hindsight_cost"] > 0 and out["judged"][0]["plan"] == str(plan)
    assert out["judged"][0]["regret"] == pytest.approx(out["judged"][0]["cost"] / out["hindsight_cost"] - 1)
    assert ExecutionConfig.load(best).as_dict() == out["hindsight_plan"]
    t = pq.read_table(outcomes)
    assert t.num_rows == 20 and {"plan", "status", "cost", "violation_rate", "origin"} <= set(t.column_names)
    text = subprocess.run([*CLI, *args], check=True, capture_output=True, text=True).stdout
    assert "best plan in hindsight: $" in text and "regret" in text
    bad = subprocess.run([*CLI, "hindsight", "--workload-file", str(wl), "--plans", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--plans" in bad.stderr
