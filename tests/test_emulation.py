"""Emulator behaviour seen from Python: results, invariants, billing, errors."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import autoslo


def test_result_object_and_trace_columns() -> None:
    wl = autoslo.base_workload(0.2, seed=1, kappa=2)
    res = autoslo.emulate(wl, [16, 16], seed=1)
    assert res.queries == 297
    assert 0.0 <= res.violation_rate <= 1.0 and res.cost > 0
    t = res.trace
    for col in ["query_id", "template", "instance", "tenant", "class", "cluster_id", "cluster_size", "arrival", "start", "end", "latency", "slo", "met", "censored", "outcome", "cost"]:
        assert col in t.column_names
    assert sorted(t["query_id"].to_pylist()) == sorted(wl["query_id"].to_pylist()), "every query exactly once"
    assert pc.sum(t["cost"]).as_py() == pytest.approx(res.cost, rel=1e-9)
    assert res.clusters.num_rows == 2
    per = res.per_tenant_class()
    assert pc.sum(per["queries"]).as_py() == 297
    assert pc.sum(per["cost"]).as_py() == pytest.approx(res.cost, rel=1e-9)
    same = autoslo.emulate(wl, [16, 16], seed=1)
    assert same.trace.equals(res.trace), "same seed, same trace"
    # In a notebook the result shows its summary, not 297 rows of trace.
    text = repr(res)
    assert text.startswith("EmulationResult(queries=297, ") and f"cost=${res.cost:.2f}" in text and len(text) < 300
    page = res._repr_html_()
    assert page.count("<table>") == 2 and f"<td>{res.queries}</td>" in page


def test_bigger_clusters_cost_more_and_violate_less() -> None:
    wl = autoslo.base_workload(0.2, seed=7, kappa=2)
    small = autoslo.emulate(wl, [8], seed=3)
    big = autoslo.emulate(wl, [32, 32], seed=3)
    assert big.violation_rate < small.violation_rate
    assert big.cost > small.cost


def test_timeouts_are_censored_rows() -> None:
    wl = autoslo.base_workload(1.0, seed=2, kappa=2)
    res = autoslo.emulate(wl, [4], seed=2, timeout_s=120)
    cens = res.trace.filter(res.trace["censored"])
    assert cens.num_rows > 0
    assert set(cens["latency"].to_pylist()) == {120.0}
    assert set(cens["outcome"].to_pylist()) == {"timeout"}
    assert not any(cens["met"].to_pylist())


def test_schedule_spins_up_and_tears_down() -> None:
    wl = autoslo.base_workload(0.2, seed=4, kappa=2)
    res = autoslo.emulate(wl, [16], seed=1, lifecycle="measured", schedule=[(100.0, "spinup", 32), (900.0, "teardown", 0)])
    c = res.clusters.to_pylist()
    assert len(c) == 2 and c[1]["size"] == 32
    assert 50 < c[1]["ready_at"] - c[1]["requested_at"] < 200, "measured 32-RPU readiness (about a minute)"
    assert c[0]["teardown_requested_at"] == pytest.approx(900.0, abs=1.0)
    late = res.trace.filter(pc.greater(res.trace["arrival"], 901.0))
    assert set(late["cluster_id"].to_pylist()) == {1}


def test_chargeback_attributes_every_billed_micro_dollar() -> None:
    wl = autoslo.redbench_workload(days=1, seed=3, queries_per_day=1500, tenants=3, kappa=2)
    res = autoslo.emulate(wl, [8], seed=2, routing="round-robin", schedule=[(3600.0, "spinup", 16), (30_000.0, "teardown", 1)])
    per_tenant = res.chargeback()
    assert per_tenant["tenant"].to_pylist() == ["tenant-1", "tenant-2", "tenant-3"]
    billed = pc.sum(res.clusters["cost_micro_usd"]).as_py()
    assert pc.sum(per_tenant["cost_micro_usd"]).as_py() == billed > 0
    assert pc.sum(per_tenant["queries"]).as_py() == res.queries
    assert pc.sum(res.chargeback(("tenant", "class"))["cost_micro_usd"]).as_py() == billed
    assert abs(pc.sum(per_tenant["cost"]).as_py() - res.cost) < 1e-5
    with pytest.raises(ValueError, match="unknown: \\['team'\\]"):
        res.chargeback(("team",))
    f = res.fairness()
    rows = res.per_tenant_class().to_pylist()
    assert f["populations"] == len(rows) and 0 < f["jain_attainment"] <= 1
    assert f["worst"]["attainment"] == pytest.approx(1 - max(r["violation_rate"] for r in rows))


def test_jain_index_and_the_canopy_fixture(capsys: pytest.CaptureFixture[str]) -> None:
    assert autoslo._core.jain_index([0.91, 0.98, 0.99, 0.72]) == pytest.approx(0.9857, abs=5e-5)
    with pytest.raises(autoslo.AutoSloCoreError, match="value 1"):
        autoslo._core.jain_index([0.5, -1.0])
    from autoslo.cli import main

    assert main(["reproduce", "canopy", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["queries_per_s"] == pytest.approx(445.28) and r["cpu_cores"] == pytest.approx(421.6) and r["scan_gib_per_s"] == pytest.approx(331.6)
    assert r["unconstrained_memory_gib"] == pytest.approx(3544.2)
    assert (r["global_dashboard_p99_s"], r["aster_dashboard_p99_s"]) == (1.1, 8.4)
    assert r["jain_selected"] == pytest.approx(0.99998, abs=5e-6)
    assert r["cost_per_day"] == pytest.approx(1449.33, abs=0.005)
    assert main(["reproduce", "canopy"]) == 0
    assert "$1,449.33" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"routing": "random"}, "unknown policy `random`"),
        ({"lifecycle": "instant"}, "unknown lifecycle"),
        ({"timeout_s": -5.0}, "timeout"),
        ({"schedule": [(10.0, "teardown", 9)]}, "does not exist"),
        ({"schedule": [(10.0, "resize", 9)]}, "unknown scheduled action"),
        ({"price_per_rpu_hour": -1.0}, "price"),
        ({"degradations": [(0, 0.5, 0.0, 10.0)]}, r"degradations\[0\].factor must be ≥ 1"),
        ({"degradations": [(-1, 2.0, 0.0, 10.0)]}, r"degradations\[0\]'s cluster must be a whole number ≥ 0"),
        ({"degradations": [(0, "2", 0.0, 10.0)]}, r"degradations\[0\]'s factor must be a number, got '2'"),
    ],
)
def test_bad_emulation_input_is_a_clear_error(kwargs: dict, message: str) -> None:
    wl = autoslo.base_workload(0.2, seed=4, kappa=2)
    with pytest.raises(autoslo.AutoSloCoreError, match=message):
        autoslo.emulate(wl, [16], **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reservation": (["tenant-1"], [0])}, r"`reservation` must be an autoslo.tenancy.Reservation \(or None\), got \(\['tenant-1'\], \[0\]\)"),
        ({"queue": {"slots_per_cluster": 3}}, "`queue` must be an autoslo.tenancy.AdmissionQueue"),
        ({"admission": 1.5}, "`admission` must be an autoslo.tenancy.DeadlineAdmission"),
        ({"budgets": {"tenant-1": 5.0}}, "`budgets` must be an autoslo.tenancy.Budgets"),
        ({"ejection": True}, "`ejection` must be an autoslo.placement.Ejection"),
        ({"autoscaler": {"policy": "autoslo"}}, r"`autoscaler` must be an autoslo.AutoscalerConfig, a policy name \(autoslo, add-best"),
        ({"degradations": [(0, 2.0)]}, r"degradations\[0\] must be \(cluster, factor, from_s, until_s\), got \(0, 2.0\)"),
    ],
)
def test_settings_of_the_wrong_kind_are_type_errors_naming_the_setting(kwargs: dict, message: str) -> None:
    wl = autoslo.base_workload(0.2, seed=4, kappa=2)
    with pytest.raises(TypeError, match=message):
        autoslo.emulate(wl, [16], **kwargs)


def test_sizes_no_redshift_serverless_workgroup_can_have_are_refused_everywhere() -> None:
    """Initial clusters, scheduled spinups, eligible sizes and a live router's clusters: each is a
    Redshift Serverless base capacity (4, 8 to 512 in steps of 8, 544 to 1024 in steps of 32)."""
    from autoslo import predictor

    assert [r for r in range(0, 1100) if autoslo.is_base_capacity(r)][:4] == [4, 8, 16, 24]
    assert autoslo.is_base_capacity(1024) and not autoslo.is_base_capacity(1000) and not autoslo.is_base_capacity(2**40)
    wl = autoslo.base_workload(0.2, seed=4, kappa=2).slice(0, 30)
    bad = "must be a Redshift Serverless base capacity"
    with pytest.raises(autoslo.AutoSloCoreError, match=f"cluster size {bad}.*got 12"):
        autoslo.emulate(wl, [16, 12])
    with pytest.raises(autoslo.AutoSloCoreError, match=f"cluster size {bad}.*got 3"):
        autoslo.emulate(wl, [16], schedule=[(10.0, "spinup", 3)])
    with pytest.raises(autoslo.AutoSloCoreError, match=r"eligible sizes\[1\] must be"):
        autoslo.emulate(wl, [16], autoscaler=autoslo.AutoscalerConfig(sizes=(16, 36)))
    with pytest.raises(autoslo.AutoSloCoreError, match=f"cluster size {bad}.*got 20"):
        autoslo.simulate(wl, [20], predictor=predictor.load())
    with pytest.raises(autoslo.AutoSloCoreError, match=f"a router's clusters\\[1\\] {bad}.*got 2"):
        autoslo.Router("round-robin", [16, 2])
    assert autoslo.emulate(wl, [4, 24, 1024]).summary()["queries"] == 30
    # A size is a whole number: never truncated, and a string is not a list of digits.
    with pytest.raises(TypeError, match=r"clusters\[0\] must be a whole number of RPU, got 8.5"):
        autoslo.emulate(wl, [8.5])
    with pytest.raises(TypeError, match="clusters is a list of cluster sizes in RPU, such as \\[32, 16\\]; got '16'"):
        autoslo.emulate(wl, "16")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"AutoscalerConfig.sizes\[1\] must be a whole number of RPU, got True"):
        autoslo.AutoscalerConfig(sizes=(16, True))
    with pytest.raises(TypeError, match=r"clusters\[0\] must be a whole number of RPU"):
        autoslo.control_plane([16.0], "autoslo")  # type: ignore[list-item]
    assert autoslo.emulate(wl, np.array([16, 8])).summary()["queries"] == 30  # NumPy integers are whole numbers
    # Beyond any size the core can read: still the base-capacity message, not an overflow.
    for huge in (-16, 2**40):
        with pytest.raises(autoslo.AutoSloCoreError, match=rf"clusters\[1\]: cluster size {bad}.*got {huge}"):
            autoslo.emulate(wl, [16, huge])
        with pytest.raises(autoslo.AutoSloCoreError, match=f"every cluster size must be a Redshift Serverless base capacity.*got \\[16, {huge}\\]"):
            autoslo.Router("round-robin", [16, huge])
    with pytest.raises(TypeError, match="clusters is a list of cluster sizes in RPU, such as \\[32, 16\\]; got '16'"):
        autoslo.Router("round-robin", "16")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"clusters is a list of whole numbers of RPU, such as \[32, 16\]; got \[16.0\]"):
        autoslo.Router("round-robin", [16.0])  # type: ignore[list-item]


def test_the_tables_of_two_runs_concatenate() -> None:
    """Every run's tables have one schema, whether or not this run has nulls (a rejected query has
    no start, a fixed warehouse no teardown): traces of several runs can be stacked."""
    import pyarrow as pa

    from autoslo.tenancy import DeadlineAdmission

    wl = autoslo.base_workload(0.2, seed=4, kappa=2)
    a = autoslo.emulate(wl, [16])
    b = autoslo.emulate(wl, [8], admission=DeadlineAdmission(), autoscaler=autoslo.AutoscalerConfig(sizes=(8, 16)))
    assert a.trace["start"].null_count == 0 < b.trace["start"].null_count
    assert a.decisions.num_rows == 0 < b.decisions.num_rows
    for name in ("trace", "clusters", "events", "decisions"):
        both = pa.concat_tables([getattr(a, name), getattr(b, name)])
        assert both.num_rows == getattr(a, name).num_rows + getattr(b, name).num_rows


def test_no_clusters_is_an_error() -> None:
    with pytest.raises(autoslo.AutoSloCoreError, match="no clusters: give at least one"):
        autoslo.emulate(autoslo.base_workload(0.2), [])
    with pytest.raises(autoslo.AutoSloCoreError, match="no clusters: give at least one"):
        autoslo.simulate(autoslo.base_workload(0.2), [])


def test_progress_callback_and_interrupt() -> None:
    wl = autoslo.redbench_workload(days=1, seed=1, queries_per_day=9000, tenants=2)
    seen: list[tuple[int, int]] = []
    from autoslo import _core

    _core.emulate(wl, [32, 32], progress=lambda done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] == wl.num_rows and len(seen) >= 2
    with pytest.raises(KeyboardInterrupt):
        _core.emulate(wl, [32, 32], progress=lambda done, total: False)

    # A callback that raises stops the run with its own exception, not a bare "interrupted".
    def broken(done: int, total: int) -> None:
        raise ZeroDivisionError("a bug in the callback")

    with pytest.raises(ZeroDivisionError, match="a bug in the callback"):
        _core.emulate(wl, [32, 32], progress=broken)
    # The simulator reports progress the same way (its total counts arrivals and completions).
    sim: list[tuple[int, int]] = []
    p = autoslo.bundled.load()
    _core.simulate(wl, [32, 32], p, progress=lambda done, total: sim.append((done, total)))
    assert len(sim) >= 2 and sim[-1][0] == sim[-1][1] and all(a[0] <= b[0] for a, b in zip(sim, sim[1:]))
    with pytest.raises(KeyboardInterrupt):
        _core.simulate(wl, [32, 32], p, progress=lambda done, total: False)
    with pytest.raises(ZeroDivisionError, match="a bug in the callback"):
        _core.simulate(wl, [32, 32], p, progress=broken)
    assert autoslo.simulate(wl, [32, 32], predictor=p, progress=True).trace.num_rows == wl.num_rows


def test_billing_timer_matches_the_paper() -> None:
    t = autoslo.BillingTimer(60.0)
    assert t.billed_seconds_at(5.0) == 0.0
    t.on_arrival(100.0)
    t.on_idle(110.0)
    assert t.billed_seconds_at(1000.0) == 60.0
    assert t.cost_until_drained(16, drain_at=0.0, arrival_at=2000.0) == pytest.approx(0.375 * 16 * 120 / 3600)
    with pytest.raises(autoslo.AutoSloCoreError, match="backwards"):
        t.on_arrival(50.0)
    assert autoslo.billed_seconds([(0.0, 10.0), (30.0, 40.0), (200.0, 300.0)]) == pytest.approx(160.0)


intervals = st.lists(st.tuples(st.floats(0, 5000), st.floats(0, 500)), max_size=30).map(lambda v: [(a, a + d) for a, d in v])


@settings(max_examples=60, deadline=None)
@given(intervals, st.floats(0, 120))
@example([(0.0, 1.0), (1.0, 1.0)], 1.0)  # a query arriving as another ends: one window, 1 s
def test_incremental_and_batch_billing_agree(iv: list[tuple[float, float]], minimum: float) -> None:
    events = sorted([(a, 1) for a, _ in iv] + [(b, -1) for _, b in iv], key=lambda e: (e[0], -e[1]))
    timer = autoslo.BillingTimer(minimum)
    present = 0
    for t, d in events:
        present += d
        if d > 0:
            timer.on_arrival(t)
        elif present == 0:
            timer.on_idle(t)
    batch = autoslo.billed_seconds(iv, minimum)
    assert batch >= 0
    assert timer.billed_seconds_at(1e9) == pytest.approx(batch, abs=1e-6)


def test_a_reservation_keeps_other_queries_off_the_reserved_cluster() -> None:
    from autoslo.tenancy import Reservation

    wl = autoslo.redbench_workload(days=1, seed=5, queries_per_day=1200, tenants=3, kappa=3)
    res = autoslo.emulate(wl, [16, 16, 8], routing="round-robin", reservation=Reservation(["tenant-1"], [2], premium_classes=["dashboard"]))
    on_reserved = res.trace.filter(pc.equal(res.trace["cluster_id"], 2)).to_pylist()
    assert on_reserved and all(r["tenant"] == "tenant-1" and r["class"] == "dashboard" for r in on_reserved)
    with pytest.raises(autoslo.AutoSloCoreError, match="tenant `nobody` is not in the workload"):
        autoslo.emulate(wl, [16], reservation=Reservation(["nobody"], [0]))
    with pytest.raises(autoslo.AutoSloCoreError, match="cluster 3 is not one of the 1 initial clusters"):
        autoslo.emulate(wl, [16], reservation=Reservation(["tenant-1"], [3]))
    with pytest.raises(autoslo.AutoSloCoreError, match="class `etl` is not in the workload"):
        autoslo.emulate(wl, [16], reservation=Reservation(["tenant-1"], [0], premium_classes=["etl"]))


def test_tenancy_settings_are_refused_where_they_are_written() -> None:
    from autoslo.bundled import load
    from autoslo.tenancy import AdmissionQueue, Deferral, Reservation, Share

    bad: list[tuple[Any, str]] = [
        (lambda: Reservation("gold", [0]), r"premium tenants must be a list of names \(e.g. \['gold'\] for one\)"),
        (lambda: Reservation([], [0]), "premium tenants must be a non-empty list"),
        (lambda: Reservation(["gold"], [0], premium_classes="dashboard"), "premium classes must be a list of names"),
        (lambda: Reservation(["gold"], []), "clusters must be a non-empty list"),
        (lambda: Reservation(["gold"], [-1]), r"reserved cluster \(an index of the run's initial clusters, 0-based\) must be a whole number ≥ 0 and < 4294967296, got -1"),
        (lambda: Reservation(["gold"], [True]), "got True"),
        (lambda: Reservation(["gold"], [1.5]), "got 1.5"),
        (lambda: Reservation(["gold"], [2**32]), "got 4294967296"),
        (lambda: Reservation(["gold"], [0], borrow_idle="yes"), "`borrow_idle` must be True or False"),
        (lambda: Deferral("backfill"), "deferral's classes must be a list of names"),
        (lambda: Deferral(["backfill"], slots_per_cluster=0), "`slots_per_cluster` must be a whole number ≥ 1, got 0"),
        (lambda: Deferral(["backfill"], from_h=6, until_h=6), "same time of day"),
        (lambda: AdmissionQueue(slots_per_cluster=0), "queue's `slots_per_cluster` must be a whole number ≥ 1, got 0"),
        (lambda: AdmissionQueue(slots_per_cluster=2.5), "got 2.5"),
        (lambda: AdmissionQueue(max_queued=-1), "`max_queued` must be a whole number ≥ 0, got -1"),
        (lambda: AdmissionQueue(reserve=0.5), "execution reserve must be ≥ 1 × the estimate, got 0.5"),
        (lambda: AdmissionQueue(reserve="2"), "`reserve` must be a number, got '2'"),
        (lambda: AdmissionQueue(max_queued_work_s=-1.0), "queued work bound must be ≥ 0 s, got -1"),
        (lambda: AdmissionQueue(max_wait_s=0.0), "`max_wait_s` must be > 0 s"),
        (lambda: AdmissionQueue(shares={"gold": 1.0}), "`shares` must map tenant names to Share"),
        (lambda: AdmissionQueue(excess_only=None), "`excess_only` must be True or False"),
        (lambda: AdmissionQueue(defer=["backfill"]), "`defer` must be a Deferral"),
    ]
    for make, message in bad:
        with pytest.raises(autoslo.AutoSloCoreError, match=message):
            make()
    # Good values pass, NumPy whole numbers and an unbounded queue included.
    assert Reservation(("gold",), [np.int64(1)]).as_args() == (["gold"], None, [1], False)
    assert AdmissionQueue(slots_per_cluster=np.int32(4), max_queued_work_s=float("inf"), shares={"gold": Share(1.0)}).as_args()[0] == 4
    # The core still checks what it is handed directly.
    wl = autoslo.redbench_workload(days=1, seed=0, queries_per_day=200, tenants=2, kappa=3)
    with pytest.raises(autoslo.AutoSloCoreError, match="execution reserve"):
        autoslo._core.emulate(wl, [8], queue=(3, 10, 1e300, 0.5, None, None), predictor=load())
    with pytest.raises(autoslo.AutoSloCoreError, match="same time of day"):
        autoslo._core.emulate(wl, [8], queue=(3, 10, 1e300, 1.0, None, (["backfill"], 3600.0, 3600.0, 1)), predictor=load())


def test_deadline_admission_rejects_infeasible_queries_as_outcomes_of_their_own() -> None:
    from autoslo.tenancy import DeadlineAdmission

    wl = autoslo.redbench_workload(days=1, seed=0, queries_per_day=1500, tenants=2, kappa=3)
    res = autoslo.emulate(wl, [16, 16], routing="round-robin", admission=DeadlineAdmission())
    rejected = res.trace.filter(pc.equal(res.trace["outcome"], "rejected"))
    assert rejected.num_rows > 0 and res.summary()["rejected"] == rejected.num_rows
    assert set(rejected["reject_reason"].to_pylist()) == {"infeasible-deadline"}
    assert rejected["cluster_id"].null_count == rejected.num_rows and pc.sum(rejected["cost_micro_usd"]).as_py() == 0
    from autoslo.bundled import load

    model = load()
    assert all(model.stage_estimate(r["template"], r["instance"], 16) > r["slo"] for r in rejected.to_pylist())
    t = res.per_tenant_class()
    assert pc.sum(t["met"]).as_py() + pc.sum(t["late"]).as_py() + pc.sum(t["rejected"]).as_py() == res.queries
    assert pc.sum(res.chargeback()["cost_micro_usd"]).as_py() == pc.sum(res.clusters["cost_micro_usd"]).as_py()
    assert res.worst_tenants(2).num_rows == 2
    with pytest.raises(autoslo.AutoSloCoreError, match="admission margin"):
        autoslo.emulate(wl, [16], admission=DeadlineAdmission(margin=0.5))
    # Refused where it is written, before any run; the core checks the same on its own.
    for bad in ({"margin": float("nan")}, {"margin": True}, {"largest_size": 12}, {"largest_size": -16}, {"largest_size": 2**40}):
        with pytest.raises(autoslo.AutoSloCoreError, match="admission margin|admission's largest size"):
            DeadlineAdmission(**bad)  # type: ignore[arg-type]
    with pytest.raises(autoslo.AutoSloCoreError, match="admission's largest size must be a Redshift Serverless base capacity.*got 12"):
        autoslo._core.emulate(wl, [16], admission=(1.0, 12), predictor=model)


def test_the_admission_queue_holds_arrivals_within_their_deadline() -> None:
    from autoslo.tenancy import AdmissionQueue

    wl = autoslo.redbench_workload(days=1, seed=0, queries_per_day=1500, tenants=2, kappa=3)
    base = autoslo.emulate(wl, [8], routing="round-robin")
    res = autoslo.emulate(wl, [8], routing="round-robin", queue=AdmissionQueue(slots_per_cluster=3))
    t = res.trace
    assert t["query_id"].to_pylist() == wl["query_id"].to_pylist(), "one row per query"
    reasons = set(t.filter(pc.equal(t["outcome"], "rejected"))["reject_reason"].to_pylist())
    assert "expired" in reasons and reasons <= {"expired", "capacity", "infeasible-deadline"}
    # Refused queries did no work and paid nothing; every bill is still attributed exactly.
    refused = t.filter(pc.equal(t["outcome"], "rejected"))
    assert pc.sum(refused["work"]).as_py() == 0 and refused["cluster_id"].null_count == refused.num_rows
    assert pc.sum(res.chargeback()["cost_micro_usd"]).as_py() == pc.sum(res.clusters["cost_micro_usd"]).as_py()
    # Fewer late runs than without the queue (the refusals are the price).
    late = lambda r: r.violations - r.rejected  # noqa: E731
    assert late(res) < late(base)
    with pytest.raises(autoslo.AutoSloCoreError, match="reserve"):
        autoslo.emulate(wl, [8], queue=AdmissionQueue(reserve=0.5))


def test_a_reserved_share_of_the_queue_lets_its_tenant_wait_less() -> None:
    from autoslo.tenancy import AdmissionQueue, Share

    # An overloaded day: tenant-2 reserves more than the cluster delivers, so it goes first whenever it waits.
    wl = autoslo.redbench_workload(days=1, seed=0, queries_per_day=4000, tenants=2, kappa=3)
    fifo = autoslo.emulate(wl, [8], routing="round-robin", queue=AdmissionQueue(slots_per_cluster=3))
    shared = autoslo.emulate(wl, [8], routing="round-robin", queue=AdmissionQueue(slots_per_cluster=3, shares={"tenant-2": Share(reservation=100.0)}))

    def expired(r: autoslo.EmulationResult, tenant: str) -> int:
        t = r.trace
        return t.filter(pc.and_(pc.equal(t["tenant"], tenant), pc.equal(t["reject_reason"], "expired"))).num_rows

    assert shared.trace["query_id"].to_pylist() == wl["query_id"].to_pylist(), "one row per query"
    assert expired(shared, "tenant-2") < expired(fifo, "tenant-2")
    assert expired(shared, "tenant-1") > expired(fifo, "tenant-1"), "the other tenant waits instead"
    with pytest.raises(autoslo.AutoSloCoreError, match="tenant `nobody`"):
        autoslo.emulate(wl, [8], queue=AdmissionQueue(shares={"nobody": Share(1.0)}))
    # Bad shares are refused when the queue is made, naming the tenant (the core knows it only by index).
    with pytest.raises(autoslo.AutoSloCoreError, match="share of tenant 'tenant-2': weight must be a finite number > 0, got 0.0"):
        autoslo.emulate(wl, [8], queue=AdmissionQueue(shares={"tenant-2": Share(weight=0.0)}))
    with pytest.raises(autoslo.AutoSloCoreError, match="share of tenant 'tenant-1': reservation"):
        AdmissionQueue(shares={"tenant-1": Share(reservation=float("nan"))})
    with pytest.raises(autoslo.AutoSloCoreError, match="the default share: weight"):
        AdmissionQueue(default_share=Share(weight=float("inf")))


def test_budgets_refuse_a_tenant_past_its_estimated_spend() -> None:
    from autoslo.tenancy import Budgets, DeadlineAdmission

    wl = autoslo.redbench_workload(days=1, seed=0, queries_per_day=1500, tenants=2, kappa=3)
    free = autoslo.emulate(wl, [16, 16], routing="round-robin")
    spend = {r["tenant"]: r["cost"] for r in free.chargeback().to_pylist()}
    # A twentieth of what tenant-1 was charged without a budget (the estimate counts isolated
    # runtime only; the chargeback also carries slowdowns, billing minimums and idle time).
    capped = autoslo.emulate(wl, [16, 16], routing="round-robin", budgets=Budgets({"tenant-1": spend["tenant-1"] / 20}))
    t = capped.trace
    refused = t.filter(pc.equal(t["reject_reason"], "budget"))
    assert refused.num_rows > 0 and set(refused["tenant"].to_pylist()) == {"tenant-1"}, "only the budgeted tenant is refused"
    # Refusals come once the budget is spent: none early in the day.
    assert min(refused["arrival"].to_pylist()) > 3600
    after = {r["tenant"]: r["cost"] for r in capped.chargeback().to_pylist()}
    assert after["tenant-1"] < spend["tenant-1"]
    # With the deadline admission too: its reasons stand beside the budget's.
    both = autoslo.emulate(wl, [16, 16], routing="round-robin", admission=DeadlineAdmission(), budgets=Budgets({"tenant-1": spend["tenant-1"] / 20}))
    assert {"budget", "infeasible-deadline"} <= set(both.trace["reject_reason"].drop_null().to_pylist())
    with pytest.raises(autoslo.AutoSloCoreError, match="tenant `nobody`"):
        autoslo.emulate(wl, [16], budgets=Budgets({"nobody": 1.0}))
    with pytest.raises(autoslo.AutoSloCoreError, match="the budget of tenant 'tenant-1' must be a finite number of dollars ≥ 0, got -1.0"):
        autoslo.emulate(wl, [16], budgets=Budgets({"tenant-1": -1.0}))
    with pytest.raises(autoslo.AutoSloCoreError, match="the budget of tenant 'tenant-2'.*got nan"):
        Budgets({"tenant-1": 1.0, "tenant-2": float("nan")})
    for window in (0.0, -1.0, float("inf")):
        with pytest.raises(autoslo.AutoSloCoreError, match="budget window must be a finite time > 0 s"):
            Budgets({"tenant-1": 1.0}, window_s=window)
    with pytest.raises(autoslo.AutoSloCoreError, match="budget window must be > 0 s"):
        autoslo._core.emulate(wl, [16], budgets=({"tenant-1": 1.0}, 0.0), predictor=autoslo.bundled.load())


def test_the_report_counts_failed_and_cancelled_outcomes_apart() -> None:
    """Live runs add two outcomes (docs/live.md): they are violations, and neither late nor
    rejected."""
    import dataclasses

    import pyarrow as pa

    res = autoslo.emulate(autoslo.base_workload(0.2, seed=1, kappa=2), [16, 16], routing="round-robin")
    outcome = res.trace["outcome"].to_pylist()
    outcome[:5] = ["failed"] * 5
    outcome[5:8] = ["cancelled"] * 3
    met = res.trace["met"].to_pylist()
    met[:8] = [False] * 8
    t = res.trace.set_column(res.trace.schema.get_field_index("outcome"), "outcome", pa.array(outcome)).set_column(res.trace.schema.get_field_index("met"), "met", pa.array(met))
    live_like = dataclasses.replace(res, trace=t)
    assert (live_like.failed, live_like.cancelled) == (5, 3)
    assert live_like.summary()["failed"] == 5 and live_like.summary()["cancelled"] == 3
    g = live_like.per_tenant_class()
    total = sum(pc.sum(g[c]).as_py() for c in ("met", "late", "rejected", "failed", "cancelled"))
    assert total == res.queries and pc.sum(g["failed"]).as_py() == 5 and pc.sum(g["cancelled"]).as_py() == 3
    assert pc.sum(g["violations"]).as_py() == live_like.violations


def test_slo_policy_tiers_and_cost_centers_ride_through_a_run() -> None:
    import pyarrow as pa

    from autoslo.tenancy import apply_slo_policy
    from autoslo.tuner import ExecutionConfig

    wl = autoslo.redbench_workload(days=1, seed=1, queries_per_day=800, tenants=3, kappa=2)
    wl = wl.append_column("cost_center", pa.array(["cc-" + t[-1] for t in wl["tenant"].to_pylist()]))
    policy = {
        "tiers": {"tenant-1": "premium"},
        "deadlines": [{"tier": "premium", "class": "dashboard", "deadline_s": 2.0}, {"tier": "*", "class": "dashboard", "deadline_s": 5.0}],
        "templates": [{"template": 1, "deadline_s": 99.0}],
    }
    applied = apply_slo_policy(wl, policy).to_pylist()
    for q in applied:
        if q["template"] == 1:
            assert q["slo"] == 99.0
        elif q["class"] == "dashboard":
            assert q["slo"] == (2.0 if q["tenant"] == "tenant-1" else 5.0) and q["tier"] == ("premium" if q["tenant"] == "tenant-1" else "standard")
    res = autoslo.emulate(wl, config=ExecutionConfig({"initial_clusters": [16], "autoscaler": None, "slo_policy": policy}))
    dash = res.trace.filter(pc.and_(pc.equal(res.trace["class"], "dashboard"), pc.not_equal(res.trace["template"], 1)))
    assert set(dash["slo"].to_pylist()) <= {2.0, 5.0}
    assert set(res.trace["tier"].to_pylist()) == {"premium", "standard"}
    cc = res.chargeback(("cost_center",))
    assert cc["cost_center"].to_pylist() == ["cc-1", "cc-2", "cc-3"] and pc.sum(cc["cost_micro_usd"]).as_py() == pc.sum(res.clusters["cost_micro_usd"]).as_py()
    # Violation rates by any column: per tenant they agree with the tenant x class report, and the
    # fleet's rate is their mean weighted by queries.
    groups = res.per_tenant_class().to_pylist()
    by_tenant = res.violation_rates("tenant")
    assert list(by_tenant) == ["tenant-1", "tenant-2", "tenant-3"]
    for t, rate in by_tenant.items():
        mine = [g for g in groups if g["tenant"] == t]
        assert rate == pytest.approx(sum(g["violations"] for g in mine) / sum(g["queries"] for g in mine))
    n = {t: sum(g["queries"] for g in groups if g["tenant"] == t) for t in by_tenant}
    assert sum(by_tenant[t] * n[t] for t in n) / sum(n.values()) == pytest.approx(res.violation_rate)
    assert set(res.violation_rates("tier")) == {"premium", "standard"} and set(res.violation_rates("class")) <= {"dashboard", "adhoc", "report", "backfill"}
    with pytest.raises(ValueError, match="the trace has no column 'team'"):
        res.violation_rates("team")
    with pytest.raises(autoslo.AutoSloCoreError, match="a second rule for tier `\\*` and class `adhoc`"):
        ExecutionConfig({"initial_clusters": [16], "slo_policy": {"deadlines": [{"tier": "*", "class": "adhoc", "deadline_s": 1}] * 2}})
    with pytest.raises(autoslo.AutoSloCoreError, match="unknown field `deadline`"):
        apply_slo_policy(wl, {"deadlines": [{"tier": "*", "class": "adhoc", "deadline": 1}]})


def test_the_report_flags_a_premium_tenant_the_fleet_rate_hides() -> None:
    from autoslo.reproduce_tenancy import premium_tenant

    r = premium_tenant()
    runs = {x["run"]: x for x in r["runs"]}
    as_is = runs["as is (2 x 16 RPU)"]
    assert as_is["fleet_meets"] and not as_is["premium_meets"] and as_is["flagged"] == ["tenant-3"]
    reserved = runs["+ 8 RPU reserved for premium"]
    assert reserved["premium_meets"] and reserved["others_meet"] and not reserved["flagged"]
    assert all(x["per_tenant"].keys() == as_is["per_tenant"].keys() for x in r["runs"])


def test_deferred_backfills_start_in_the_night_and_the_day_misses_less() -> None:
    from autoslo.tenancy import AdmissionQueue, Deferral, apply_slo_policy

    wl = autoslo.redbench_workload(days=1, seed=2, queries_per_day=6000, tenants=4, kappa=3)
    wl = apply_slo_policy(wl, {"deadlines": [{"tier": "*", "class": "backfill", "deadline_s": 86_400}]})
    base = autoslo.emulate(wl, [16, 16], routing="autoslo")
    res = autoslo.emulate(wl, [16, 16], routing="autoslo", queue=AdmissionQueue(slots_per_cluster=10**6, defer=Deferral(["backfill"], slots_per_cluster=1)))
    t = res.trace
    assert t["query_id"].to_pylist() == wl["query_id"].to_pylist() and res.rejected == 0 and res.timeouts == 0
    day = pc.and_(pc.greater_equal(t["arrival"], 6 * 3600), pc.less(t["arrival"], 20 * 3600))
    deferred = t.filter(pc.and_(day, pc.equal(t["class"], "backfill")))
    assert deferred.num_rows > 0 and pc.min(deferred["start"]).as_py() >= 20 * 3600
    assert pc.all(deferred["met"]).as_py(), "a day's deadline leaves room for the night"
    others = t.filter(pc.not_equal(t["class"], "backfill"))
    assert pc.all(pc.less(pc.subtract(others["start"], others["arrival"]), 3600)).as_py(), "nothing else waits for the window"
    assert res.violation_rate < base.violation_rate
    with pytest.raises(autoslo.AutoSloCoreError, match="class `nightly`"):
        autoslo.emulate(wl, [16], queue=AdmissionQueue(defer=Deferral(["nightly"])))
    with pytest.raises(autoslo.AutoSloCoreError, match="same time of day"):
        autoslo.emulate(wl, [16], queue=AdmissionQueue(defer=Deferral(["backfill"], from_h=6, until_h=6)))
    with pytest.raises(autoslo.AutoSloCoreError, match="deferral `from_h` must be an hour of the day from 0 to 24, got 30"):
        Deferral(["backfill"], from_h=30)
    with pytest.raises(autoslo.AutoSloCoreError, match="deferral `until_h`.*got nan"):
        Deferral(["backfill"], until_h=float("nan"))
