"""Query Router (Algorithm 1), routing baselines, the live Router object and the Workload Simulator."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import autoslo
from autoslo import _core, predictor


@pytest.fixture(scope="module")
def model() -> predictor.Predictor:
    return predictor.load()


def test_policies_are_selectable_by_name(model: predictor.Predictor) -> None:
    assert set(_core.ROUTING_POLICIES) == {"autoslo", "autoslo-latency", "stage-cost", "round-robin", "least-work"}
    wl = autoslo.base_workload(0.2, seed=3, kappa=2).slice(0, 80)
    for p in _core.ROUTING_POLICIES:
        r = autoslo.emulate(wl, [32, 16], seed=3, routing=p, predictor=model)
        ids = r.trace["query_id"].to_pylist()
        assert sorted(ids) == sorted(wl["query_id"].to_pylist()), p  # every query routed exactly once
    with pytest.raises(_core.AutoSloCoreError, match="unknown policy"):
        autoslo.emulate(wl, [16], routing="fastest")


def test_live_router(model: predictor.Predictor) -> None:
    r = autoslo.Router("autoslo", [16, 16], predictor=model)
    a = r.route(1, 3, 1, 0.0, slo=1e6)
    b = r.route(2, 17, 1, 1.0, slo=1e6)
    assert {a, b} <= {0, 1}
    assert sum(n for _, _, n in r.clusters()) == 2
    r.complete(1, 5.0)
    assert sum(n for _, _, n in r.clusters()) == 1
    with pytest.raises(_core.AutoSloCoreError, match="not running"):
        r.complete(1, 6.0)
    assert r.route(3, 5, 1, 0.5, slo=1e6) in (0, 1)  # a late report is taken as arriving now
    with pytest.raises(_core.AutoSloCoreError, match="already running"):
        r.route(3, 5, 1, 6.0, slo=1e6)
    with pytest.raises(_core.AutoSloCoreError, match="SLO"):
        r.route(3, 5, 1, 7.0, slo=-1.0)
    new = r.add_cluster(32)
    assert new == 2 and len(r.clusters()) == 3
    # `among` restricts the choice: a query goes to the one cluster allowed, whichever is best.
    for qid, only in ((10, 0), (11, 2), (12, 0)):
        assert r.route(qid, 7, 1, 8.0, slo=1e6, among=[only]) == only
    assert r.route(13, 7, 1, 8.0, slo=1e6, among=[1, 2]) in (1, 2)
    with pytest.raises(_core.AutoSloCoreError, match="no cluster 7"):
        r.route(14, 7, 1, 8.0, slo=1e6, among=[0, 7])
    with pytest.raises(_core.AutoSloCoreError, match="among no clusters"):
        r.route(14, 7, 1, 8.0, slo=1e6, among=[])
    r.remove_cluster(0)
    r.remove_cluster(1)
    with pytest.raises(_core.AutoSloCoreError, match="last cluster"):
        r.remove_cluster(2)
    with pytest.raises(_core.AutoSloCoreError, match="clusters must name at least one size"):
        autoslo.Router("round-robin", [])
    with pytest.raises(_core.AutoSloCoreError, match=r"needs a latency predictor \(from Python: `import autoslo.predictor`"):
        autoslo.Router("autoslo", [16])


def test_router_searches_choose_the_same_clusters(model: predictor.Predictor) -> None:
    assert _core.ROUTER_SEARCHES == ["auto", "exhaustive", "branch-and-bound"]
    wl = autoslo.base_workload(0.5, seed=4, kappa=2).to_pylist()[:150]
    chosen = {}
    for search in _core.ROUTER_SEARCHES:
        r = autoslo.Router("autoslo", [32, 16, 16, 8], predictor=model, search=search)
        out = []
        for q in wl:
            out.append(r.route(q["query_id"], q["template"], q["instance"], q["arrival"], q["slo"]))
            if q["query_id"] % 3 == 0:
                r.complete(q["query_id"], q["arrival"])
        chosen[search] = out
    assert chosen["auto"] == chosen["exhaustive"] == chosen["branch-and-bound"]
    assert len(set(chosen["auto"])) > 1
    with pytest.raises(_core.AutoSloCoreError, match="unknown search"):
        autoslo.Router("autoslo", [16], predictor=model, search="greedy")


def test_live_router_is_thread_safe(model: predictor.Predictor) -> None:
    r = autoslo.Router("autoslo", [16, 16, 32], predictor=model)
    t0 = time.monotonic()
    errors: list[Exception] = []
    done: list[int] = []

    def worker(base: int) -> None:
        try:
            for k in range(40):
                qid = base + k
                c = r.route(qid, 1 + qid % 99, 1, time.monotonic() - t0, 100.0)  # concurrent, routing without the GIL
                assert c in (0, 1, 2)
                if k % 3 == 0:
                    r.complete(qid, time.monotonic() - t0)
                    done.append(qid)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(1000 * i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors
    assert sum(n for _, _, n in r.clusters()) == 160 - len(done)


def test_simulator_replays_with_predicted_completions(model: predictor.Predictor) -> None:
    wl = autoslo.base_workload(0.2, seed=5, kappa=2)
    sim = autoslo.simulate(wl, [16, 16], predictor=model, routing="autoslo")
    emu = autoslo.emulate(wl, [16, 16], routing="autoslo", predictor=model, seed=5)
    assert sim.queries == emu.queries == wl.num_rows
    assert sim.cost > 0 and 0 <= sim.violation_rate <= 1
    # The simulator is a model of the emulator: its cost is within 20 % of the emulator's (0.86
    # on this workload when this was written).
    assert 0.8 < sim.cost / emu.cost < 1.2


def test_slo_headroom_and_arrival_correction_change_decisions(model: predictor.Predictor) -> None:
    wl = autoslo.base_workload(0.1, seed=7, kappa=4)
    with pytest.raises(_core.AutoSloCoreError, match="slo_headroom"):
        autoslo.emulate(wl, [16, 16], routing="autoslo", predictor=model, slo_headroom=0.5)
    with pytest.raises(_core.AutoSloCoreError, match="slo_headroom"):
        autoslo.Router("autoslo", [16, 16], predictor=model, slo_headroom=float("nan"))
    share: dict[str, list[float]] = {"literal": [], "default": []}
    vr: dict[str, list[float]] = {"literal": [], "default": []}
    for seed in range(5):
        wl = autoslo.base_workload(0.1, seed=seed, kappa=4)
        for name, p, h in (("literal", model.without_arrival_correction(), 1.0), ("default", model, _core.DEFAULT_SLO_HEADROOM)):
            r = autoslo.emulate(wl, [16, 16], routing="autoslo", predictor=p, seed=seed, slo_headroom=h)
            counts = np.bincount(np.asarray(r.trace["cluster_id"]), minlength=2)
            share[name].append(counts.max() / counts.sum())
            vr[name].append(r.violation_rate)
    # Lightly loaded, raw at-arrival predictions underestimate what is still to come: the literal
    # router packs one cluster harder (76 % vs 72 % of queries over these seeds) and misses more
    # SLOs on every seed (4.5 % vs 2.9 % on average).
    assert np.mean(share["literal"]) > np.mean(share["default"]) + 0.02
    assert all(a > b for a, b in zip(vr["literal"], vr["default"])), vr


@pytest.mark.reproduce
def test_reproduce_router_over_seeds_and_ablations() -> None:
    args = ["--seed", "1", "2", "--queries", "30", "--policies", "round-robin", "autoslo", "--no-arrival-correction", "--slo-headroom", "1", "--json"]
    r = subprocess.run([sys.executable, "-m", "autoslo", "reproduce", "router", *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["settings"] == {"slo_headroom": 1.0, "arrival_correction": False}
    assert out["seed"] == [1, 2] and set(out["per_seed"]) == {"1", "2"}
    assert len(out["rows"]) == 2 * 8 * 2 and {x["seed"] for x in out["rows"]} == {1, 2}
    bad = subprocess.run([sys.executable, "-m", "autoslo", "reproduce", "router", "--queries", "5", "--slo-headroom", "0.5"], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "slo_headroom" in bad.stderr


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((-1, 3, 1), _core.AutoSloCoreError, "a query id must be from 0 to 2\\*\\*64 - 1, got -1"),
        ((1, 70000, 1), _core.AutoSloCoreError, "a query's template must be a TPC-DS template number, 1-99, got 70000"),
        ((1, -3, 1), _core.AutoSloCoreError, "template must be a TPC-DS template number, 1-99, got -3"),
        ((1, 100, 1), _core.AutoSloCoreError, "unknown query template 100"),
        ((1, 3, 70000), _core.AutoSloCoreError, "a query's instance must be from 1 to 65535, got 70000"),
        ((1, 3, 0), _core.AutoSloCoreError, "a query's instance must be from 1 to 65535, got 0"),
        ((1, 3, 1.5), TypeError, r"a query's instance must be a whole number \(from 1 to 65535\), got 1.5"),
        ((1, "3", 1), TypeError, "a query's template must be a whole number .*, got '3'"),
    ],
)
def test_a_live_query_out_of_range_or_of_the_wrong_type_is_a_clear_error(model: predictor.Predictor, args: tuple, error: type, message: str) -> None:
    """The live entry points (``Router.route``, ``ControlPlane.route``, the predictor's estimates)
    say what a query id, template, instance or size must be, not pyo3's overflow text."""
    router = autoslo.Router("autoslo", [16, 16], predictor=model)
    cp = autoslo.control_plane([16], "noop", routing="round-robin")
    with pytest.raises(error, match=message):
        router.route(args[0], args[1], args[2], 0.0, 10.0)
    with pytest.raises(error, match=message):
        cp.route(*args, 10.0)
    assert router.route(7, 3, 1, 0.0, 10.0) in (0, 1) and cp.route(7, 3, 1, 10.0) == 0


def test_an_estimate_for_a_negative_size_is_a_clear_error(model: predictor.Predictor) -> None:
    with pytest.raises(_core.AutoSloCoreError, match="a cluster size must be a Redshift Serverless base capacity.*got -16"):
        model.stage_estimate(3, 1, -16)
    with pytest.raises(_core.AutoSloCoreError, match="a cluster size must be a Redshift Serverless base capacity.*got -16"):
        autoslo.isolated_runtime(3, 1, -16)
