"""The paper's experiments as tests, at three sizes.

Each reproduction runs ``tiny`` in the default tier (one seed, short workloads: does it run, are
the columns and the literal and product policies there, and does each claim point the right
way), ``small`` with ``pytest -m reproduce`` (a second seed or more history), and at the size
the docs report with ``AUTOSLO_REPRODUCE=full pytest -m reproduce`` (seeds 0-4 for Tables 2-4,
the full tuner experiment for Table 5 and Figure 6, the emulated slowdown of the placement
fixture), where the relative claims are asserted at the thresholds the docs give. Every test
records its numbers: as JSON in ``$AUTOSLO_REPRODUCE_OUT`` (default: the test's temporary
directory) and as pytest properties (``--junitxml``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

from autoslo import _core
from autoslo.reproduce import ALL_TABLES, reproduce_all, reproduce_router, reproduce_spinup_size, reproduce_trigger

FULL = os.environ.get("AUTOSLO_REPRODUCE", "small") == "full"
# `tiny` in the default tier; `small` (or `full`) in the reproduce tier.
SIZES = [pytest.param("tiny"), pytest.param("full" if FULL else "small", marks=pytest.mark.reproduce)]
SEEDS = {"tiny": [0], "small": [0, 1], "full": [0, 1, 2, 3, 4]}


@pytest.fixture
def record(tmp_path: Path, record_property: Callable[[str, object], None], request: pytest.FixtureRequest) -> Callable[[dict[str, Any]], None]:
    """Keep a test's numbers: a JSON file named after the test, and a pytest property."""
    out = Path(os.environ.get("AUTOSLO_REPRODUCE_OUT", tmp_path))
    out.mkdir(parents=True, exist_ok=True)

    def keep(numbers: dict[str, Any]) -> None:
        callspec = getattr(request.node, "callspec", None)
        size = callspec.params["size"] if callspec else "full" if FULL else "small"
        (out / f"{request.node.name}.json").write_text(json.dumps({"size": size, **numbers}, indent=1, default=str))
        record_property("numbers", json.dumps(numbers, default=str))

    return keep


@pytest.mark.parametrize("size", SIZES)
def test_table2_router(size: str, record: Callable[[dict[str, Any]], None]) -> None:
    full = size == "full"
    queries = {"tiny": 40, "small": 60, "full": None}[size]
    out = reproduce_router(seed=SEEDS["full"] if full else [1], queries=queries)
    record({"mean_change_vs_round_robin": out["mean_change_vs_round_robin"]})
    assert {x["policy"] for x in out["rows"]} == {"round-robin", "stage-cost", "algorithm1", "autoslo", "autoslo-latency"}
    assert len(out["rows"]) == 8 * 5 * (5 if full else 1)
    mean = out["mean_change_vs_round_robin"]
    # docs/router.md: autoslo −25.2 % violations at −20.8 % cost; the change with the second key
    # cuts violations further; the literal Algorithm 1 less. Small runs keep the directions.
    assert mean["autoslo"]["mean_violation_rate_change"] < (-0.2 if full else 0.0)
    assert mean["autoslo"]["mean_cost_change"] < (-0.1 if full else 0.0)
    assert mean["autoslo-latency"]["mean_violation_rate_change"] < mean["autoslo"]["mean_violation_rate_change"]
    assert mean["autoslo"]["mean_violation_rate_change"] < mean["algorithm1"]["mean_violation_rate_change"]
    if not full:
        assert all(x["queries"] == queries for x in out["rows"])


@pytest.mark.parametrize("size", SIZES)
def test_table3_spinup_size(size: str, record: Callable[[dict[str, Any]], None]) -> None:
    """add-best beats noop and horizontal on every seed, and vertical on the mean
    (docs/autoscaler.md: on four of the five seeds; on seed 1 vertical cuts 94.7 % against
    93.9 %)."""
    out = reproduce_spinup_size(seed=SEEDS[size])
    per_seed = out.get("per_seed") or {SEEDS[size][0]: out["mean_change_vs_noop"]}  # one seed: its mean
    record({"mean_change_vs_noop": out["mean_change_vs_noop"], "per_seed": per_seed})
    for s, ch in per_seed.items():
        add = ch["add-best"]["mean_violation_rate_change"]
        assert add < -0.5, (s, ch)
        assert add < ch["horizontal"]["mean_violation_rate_change"], (s, ch)
    mean = out["mean_change_vs_noop"]
    assert mean["add-best"]["mean_violation_rate_change"] < mean["vertical"]["mean_violation_rate_change"], mean


def test_spinup_size_selector_overrides_reach_only_the_autoslo_method() -> None:
    """``selector`` changes the ``autoslo`` method's selector and nothing else: with headroom 1
    and μ 16 it is Algorithm 3 as listed, so it decides exactly as ``add-best``; with its own
    headroom (2) and μ (32) it does not (from 8 RPU at λ 0.2, κ 4 it adds 32 RPU where ``add-best`` adds 16)."""
    scenarios = [(0.2, 4, (8,)), (0.2, 2, (16,))]
    kw: dict[str, Any] = {"seed": 0, "methods": ["noop", "add-best", "autoslo"], "scenarios": scenarios, "queries": 400}
    literal = reproduce_spinup_size(selector={"selector_headroom": 1.0, "mu": 16}, **kw)["rows"]
    default = reproduce_spinup_size(**kw)["rows"]
    by = lambda rows, m: [(r["spinups"], r["violation_rate"], r["cost"]) for r in rows if r["method"] == m]  # noqa: E731
    assert by(literal, "autoslo") == by(literal, "add-best")
    assert by(literal, "add-best") == by(default, "add-best")
    assert by(default, "autoslo") != by(default, "add-best")
    sizes = lambda rows, m: [[s["size"] for s in r["spinups"]] for r in rows if r["method"] == m and r["clusters"] == [8]]  # noqa: E731
    assert (sizes(default, "autoslo"), sizes(default, "add-best")) == ([[32]], [[16]])


@pytest.mark.parametrize("size", SIZES)
def test_table4_trigger(size: str, record: Callable[[dict[str, Any]], None]) -> None:
    """combined beats observed on average and queue@32 on every seed."""
    small = {} if size == "full" else {"methods": ["noop", "queue@32", "observed", "combined"]}
    out = reproduce_trigger(seed=SEEDS[size], **small)
    per_seed = out.get("per_seed") or {SEEDS[size][0]: out["mean_change_vs_noop"]}  # one seed: its mean
    record({"mean_change_vs_noop": out["mean_change_vs_noop"], "per_seed": per_seed})
    mean = out["mean_change_vs_noop"]
    assert mean["combined"]["mean_violation_rate_change"] < -0.3
    assert mean["combined"]["mean_violation_rate_change"] < mean["observed"]["mean_violation_rate_change"]
    for s, ch in per_seed.items():
        assert ch["combined"]["mean_violation_rate_change"] < ch["queue@32"]["mean_violation_rate_change"], (s, ch)


def _tuner_experiment(size: str, history: tuple[int, ...]) -> Any:
    from autoslo.reproduce_tuner import experiment, reproduction_settings
    from autoslo.tuner import TunerSettings

    if size == "full":
        return experiment(seed=0, history=history, settings=reproduction_settings())
    small = TunerSettings(forecasts=3, eta=1, phi=1, space={"t_idle_s": [300.0, 600.0]})
    return experiment(seed=2, queries_per_day=1500, target_days=[8], kappas=[2.0], history=history, settings=small, hindsight_plans=24)


@pytest.mark.parametrize("size", SIZES)
def test_table5_tuner(size: str, record: Callable[[dict[str, Any]], None]) -> None:
    """The goal (−44.6 % violations with 1 day of history) is not met (docs/tuner.md); what is
    asserted is the structure, and that history never makes the tuned plans worse on average."""
    from autoslo.reproduce_tuner import reproduce_tuner

    t5 = reproduce_tuner(_tuner_experiment(size, {"tiny": (0, 1), "small": (0, 1, 7), "full": (0, 1, 7, 30)}[size]))
    record({"mean_change_vs_no_past_data": t5["mean_change_vs_no_past_data"], "goal": t5["goal"]})
    rows = t5["rows"]
    none = [r for r in rows if r["history_days"] == 0]
    assert none and all(r["tuning"]["simulations"] == 0 and r["config"]["scheduled_spinups"] == [] for r in none)
    one = [r for r in rows if r["history_days"] == 1]
    assert all(r["tuning"]["forecast_policy"] == "previous-day" and r["tuning"]["simulations"] > 0 for r in one)
    assert all(r["queries"] > 0 for r in rows)
    assert t5["mean_change_vs_no_past_data"][1]["mean_violation_rate_change"] <= 0.0
    assert {g["tenant"] for g in one[0]["per_tenant_class"]} == {"tenant-1", "tenant-2", "tenant-3", "tenant-4"}
    assert set(t5["mean_change_vs_no_past_data"][1]["per_tenant"]) == {"tenant-1", "tenant-2", "tenant-3", "tenant-4"}
    # The floor of SLOs out of reach, per scenario, on the sizes the configurations may use.
    assert set(t5["slo_infeasible"]) == {r["scenario"] for r in rows}
    assert all(0.0 <= f["share"] <= 1.0 and f["sizes"] == [16, 32] for f in t5["slo_infeasible"].values())
    assert all(set(f["per_tenant"]) == {"tenant-1", "tenant-2", "tenant-3", "tenant-4"} for f in t5["slo_infeasible"].values())
    assert all("slo_infeasible_share" in c for c in t5["mean_change_vs_no_past_data"][1]["per_tenant"].values())


def test_table5_per_tenant_change_weighs_each_tenants_classes_by_queries() -> None:
    from autoslo.reproduce_tuner import per_tenant_change

    def row(h: int, scenario: str, groups: list[tuple[str, str, int, float]]) -> dict[str, Any]:
        return {"scenario": scenario, "history_days": h, "per_tenant_class": [{"tenant": t, "class": c, "queries": n, "violation_rate": v} for t, c, n, v in groups]}

    rows = [
        row(0, "a", [("t1", "adhoc", 100, 0.10), ("t1", "report", 300, 0.02), ("t2", "adhoc", 50, 0.0)]),
        row(1, "a", [("t1", "adhoc", 100, 0.02), ("t1", "report", 300, 0.02), ("t2", "adhoc", 50, 0.04)]),
        row(0, "b", [("t1", "adhoc", 200, 0.05), ("t2", "adhoc", 50, 0.10)]),
        row(1, "b", [("t1", "adhoc", 200, 0.10), ("t2", "adhoc", 50, 0.05)]),
    ]
    out = per_tenant_change(rows, 1)
    # t1: (10 + 6) / 400 = 4 % → (2 + 6) / 400 = 2 % in a (−50 %), 5 % → 10 % in b (+100 %).
    assert out["t1"]["mean_violation_rate_change"] == pytest.approx((-0.5 + 1.0) / 2)
    assert out["t1"]["untuned_violation_rate"] == pytest.approx((0.04 + 0.05) / 2) and out["t1"]["worse_in"] == 1
    # t2 had no violations untuned in a: only b counts in its mean change, both in its rates.
    assert out["t2"]["mean_violation_rate_change"] == pytest.approx(-0.5)
    assert out["t2"]["tuned_violation_rate"] == pytest.approx((0.04 + 0.05) / 2) and out["t2"]["worse_in"] == 1 and out["t2"]["scenarios"] == 2
    assert "slo_infeasible_share" not in out["t1"]
    # With each scenario's SLOs out of reach per tenant: t1 has 3 % in a (untuned 4 % → 2 %: below
    # its floor, counted as (2 − 4) / (4 − 3) = −200 %) and none in b (+100 %); t2's 8 % in b leaves
    # 10 % → 5 % as (5 − 10) / (10 − 8) = −250 %, and a (0 % untuned) is not above its floor.
    floors = {"a": {"per_tenant": {"t1": 0.03}}, "b": {"per_tenant": {"t1": 0.0, "t2": 0.08}}}
    out = per_tenant_change(rows, 1, floors)
    assert out["t1"]["mean_violation_rate_change_above_floor"] == pytest.approx((-2.0 + 1.0) / 2) and out["t1"]["slo_infeasible_share"] == pytest.approx(0.015)
    assert out["t2"]["mean_violation_rate_change_above_floor"] == pytest.approx(-2.5) and out["t2"]["slo_infeasible_share"] == pytest.approx(0.04)
    assert out["t1"]["mean_violation_rate_change"] == pytest.approx(0.25)


def test_change_above_floor_counts_only_reachable_violations() -> None:
    """Seed 0's 2024-05-01 at κ = 2 (docs/tuner.md): 8.50 % untuned, 6.45 % tuned, 4.8 % out of reach."""
    from autoslo.reproduce_tuner import change_above_floor

    assert change_above_floor(0.0850, 0.0645, 0.048) == pytest.approx(-0.554, abs=1e-3)
    assert change_above_floor(0.0850, 0.048, 0.048) == pytest.approx(-1.0)
    assert change_above_floor(0.10, 0.05, 0.0) == pytest.approx(0.05 / 0.10 - 1)
    assert change_above_floor(0.04, 0.03, 0.04) is None


@pytest.mark.parametrize("size", SIZES)
def test_figure6_end_to_end(size: str, record: Callable[[dict[str, Any]], None], tmp_path: Path) -> None:
    from autoslo.reproduce_tuner import HINDSIGHT, reproduce_end_to_end

    fig = tmp_path / "fig6.png"
    f6 = reproduce_end_to_end(_tuner_experiment(size, (30,) if size == "full" else (7,)), plot=fig)
    record({"rows": [{k: r[k] for k in ("scenario", "method", "violation_rate", "cost")} for r in f6["rows"]]})
    methods = [r["method"] for r in f6["rows"]]
    assert methods[0] == "AutoSLO" and {"1 x 64 RPU", "2 x 32 RPU, round robin", "RAIS-like balanced", "RAIS-like high performance", "Snowflake standard", "Snowflake economy", HINDSIGHT} <= set(methods)
    assert fig.stat().st_size > 10_000
    for p in f6["per_scenario"]:
        # The tuned plan is among the plans searched: the best plan in hindsight is never dearer
        # than it when it meets τ, and it meets τ itself.
        assert p["hindsight_violation_rate"] <= 0.1 + 1e-12, p
        assert not p["autoslo_meets_tau"] or p["regret"] >= -1e-9, p
    assert f6["mean_regret"] is not None and f6["max_regret"] >= f6["mean_regret"]
    for p in f6["per_scenario"]:
        inf = p["slo_infeasible"]
        assert inf["sizes"] == [16, 32] and 0.0 <= inf["share_on_64_rpu"] <= inf["share"] < 1.0, p
    for scen in {r["scenario"] for r in f6["rows"]}:
        by = {r["method"]: r for r in f6["rows"] if r["scenario"] == scen}
        # docs/tuner.md: AutoSLO is the cheapest configuration within reach of τ; the fixed large
        # configurations cost more.
        assert by["AutoSLO"]["cost"] < by["1 x 64 RPU"]["cost"] and by["AutoSLO"]["cost"] < by["2 x 32 RPU, round robin"]["cost"], scen
        if size == "full":
            # And the load-driven policies run more violations.
            assert by["AutoSLO"]["violation_rate"] < by["RAIS-like balanced"]["violation_rate"], scen
        else:
            # Within τ = 0.1, and cheaper than every policy of today that is within it too.
            assert by["AutoSLO"]["violation_rate"] <= 0.1, by["AutoSLO"]
            assert all(by["AutoSLO"]["cost"] < r["cost"] for m, r in by.items() if m not in ("AutoSLO", HINDSIGHT) and r["violation_rate"] <= 0.1), scen


def test_canopy_fixture(record: Callable[[dict[str, Any]], None]) -> None:
    r = json.loads(_core.canopy_report())
    record({k: r[k] for k in ("queries_per_s", "cpu_cores", "scan_gib_per_s", "unconstrained_memory_gib", "global_dashboard_p99_s", "aster_dashboard_p99_s", "jain_baseline", "jain_selected", "cost_per_day")})
    assert round(r["queries_per_s"], 2) == 445.28 and round(r["cpu_cores"], 1) == 421.6 and round(r["scan_gib_per_s"], 1) == 331.6
    assert round(r["unconstrained_memory_gib"], 1) == 3544.2
    assert (r["global_dashboard_p99_s"], r["aster_dashboard_p99_s"]) == (1.1, 8.4)
    assert round(r["jain_baseline"], 4) == 0.9857 and round(r["jain_selected"], 5) == 0.99998
    assert abs(r["cost_per_day"] - 1449.33) < 0.01


@pytest.mark.parametrize("size", SIZES)
def test_placement_fixture(size: str, record: Callable[[dict[str, Any]], None]) -> None:
    r = json.loads(_core.mercury_report(0))
    numbers: dict[str, Any] = {
        "peak_cpu_ms_per_s": {"count_balanced": r["count_balanced"]["peak_cpu_ms_per_s"], "work_aware": r["work_aware"]["peak_cpu_ms_per_s"]},
        "workers_over_budget": {"count_balanced": r["count_balanced"]["workers_over_budget"], "work_aware": r["work_aware"]["workers_over_budget"]},
        "remap": [r["remap_modulo_10_to_11"], r["remap_ring_10_to_11"]],
    }
    assert r["work_aware"]["workers_over_budget"] == 0 < r["count_balanced"]["workers_over_budget"]
    assert abs(r["remap_modulo_10_to_11"] - 10 / 11) < 0.01 and abs(r["remap_ring_10_to_11"] - 1 / 11) < 0.01
    slow = {run["policy"]: run for run in r["slow"]}
    assert len(slow) >= 2
    if size == "full":
        from autoslo.reproduce_placement import emulated_slowdown

        e = emulated_slowdown(seed=3)
        numbers["emulator"] = [{k: x[k] for k in ("run", "violation_rate", "window_violation_rate", "slow_cluster_share")} for x in e["runs"]]
        runs = {x["run"]: x for x in e["runs"]}
        # docs/placement.md: the slowdown raises the window's violation rate (7.7 % → 20.0 %).
        assert max(x["window_violation_rate"] for x in e["runs"]) > min(x["window_violation_rate"] for x in e["runs"]) + 0.05, runs
    record(numbers)


@pytest.mark.reproduce
def test_reproduce_all_writes_every_table_and_figure(tmp_path: Path) -> None:
    results = reproduce_all(tmp_path, seeds=[0, 1, 2, 3, 4] if FULL else [0])
    assert set(results) == set(ALL_TABLES)
    page = (tmp_path / "README.md").read_text()
    for stem in ALL_TABLES:
        data = json.loads((tmp_path / f"{stem}.json").read_text())
        assert data, stem
    for title in ("Table 2", "Table 3", "Table 4", "canopy", "Mercury"):
        assert title in page, title
    for png in sorted(tmp_path.glob("*.png")):
        assert png.name in page and png.stat().st_size > 5_000
    assert len(list(tmp_path.glob("*.png"))) >= 3
    # The product's policies beat the do-nothing baselines on this seed too.
    assert results["table3-spinup-size"]["mean_change_vs_noop"]["add-best"]["mean_violation_rate_change"] < -0.5
    assert results["table4-trigger"]["mean_change_vs_noop"]["combined"]["mean_violation_rate_change"] < -0.3
