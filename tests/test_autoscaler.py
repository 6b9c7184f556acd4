"""The Autoscaler from Python: scaling policies in the emulator and the simulator, the cluster
events they leave, clear errors, and the ordering claims of Tables 3 and 4 across seeds."""

from __future__ import annotations

import pytest
import utc

from autoslo import _core, predictor
from autoslo.autoscaler import AutoscalerConfig
from autoslo.emulation import emulate, simulate
from autoslo.workloads import base_workload


@pytest.fixture(scope="module")
def overloaded():
    """BaseWorkload λ 0.2, κ 2: far too much for one 8 RPU cluster."""
    return base_workload(0.2, seed=3, kappa=2)


def test_autoslo_spins_up_and_records_why(overloaded) -> None:
    fixed = emulate(overloaded, [8], routing="autoslo", seed=3)
    scaled = emulate(overloaded, [8], routing="autoslo", seed=3, autoscaler=AutoscalerConfig(sizes=(8, 16, 32)))
    assert scaled.violation_rate < fixed.violation_rate
    ev = scaled.events.to_pylist()
    spinups = [e for e in ev if e["event"] == "spinup"]
    assert spinups and all(e["reason"] == "spinup-trigger" and e["size"] in (8, 16, 32) for e in spinups)
    # Each spun-up cluster becomes ready after the 300 s spinup delay.
    for s in spinups:
        ready = next(e for e in ev if e["event"] == "ready" and e["cluster_id"] == s["cluster_id"])
        assert ready["time"] == pytest.approx(s["time"] + 300.0)
    assert scaled.clusters["spinup_reason"].to_pylist()[0] == "initial"
    # Every query ran exactly once, and attributed cost adds up to the bill.
    assert sorted(scaled.trace["query_id"].to_pylist()) == sorted(overloaded["query_id"].to_pylist())
    assert sum(scaled.trace["cost"].to_pylist()) == pytest.approx(scaled.cost)


@pytest.mark.parametrize("engine", [emulate, simulate])
def test_every_decision_is_reported_with_the_options_it_compared(overloaded, engine) -> None:  # type: ignore[no-untyped-def]
    forced = AutoscalerConfig(policy="add-best", trigger="never", force_at=600.0, teardown=False, sizes=(8, 16, 32))
    r = engine(overloaded, [8], seed=3, autoscaler=forced)
    d = r.decisions.to_pylist()
    # One forced decision: the selector's branches for do-nothing and each eligible size.
    assert sorted((row["option_size"] or 0) for row in d) == [0, 8, 16, 32]
    assert {row["cause"] for row in d} == {"forced"} and len({row["time"] for row in d}) == 1 and 600.0 <= d[0]["time"] < 660.0
    assert all(0 <= row["predicted_violation_rate"] <= 1 and row["predicted_cost"] >= 0 and row["observations"] > 0 for row in d)
    chosen = [row for row in d if row["chosen"]]
    assert len(chosen) == 1 and chosen[0]["option_size"] == chosen[0]["spun_up_size"]
    spinups = [e["size"] for e in r.events.to_pylist() if e["event"] == "spinup"]
    assert spinups == ([chosen[0]["spun_up_size"]] if chosen[0]["spun_up_size"] else [])
    # The choice is BestWithTarget's: no option both meets τ and is cheaper, or has fewer violations when none meets it.
    best = chosen[0]
    if best["predicted_violation_rate"] <= forced.tau:
        assert not [o for o in d if o["predicted_violation_rate"] <= forced.tau and o["predicted_cost"] < best["predicted_cost"] - 1e-9]
    else:
        assert min(o["predicted_violation_rate"] for o in d) == best["predicted_violation_rate"]


def test_triggered_decisions_carry_the_trigger_s_reading(overloaded) -> None:
    r = emulate(overloaded, [8], seed=3, autoscaler=AutoscalerConfig(sizes=(8, 16, 32)))
    d = r.decisions.to_pylist()
    assert d and {row["cause"] for row in d} == {"trigger"}
    assert all(row["trigger_violation_rate"] > 0.1 and row["trigger_running"] + row["trigger_completed"] >= 16 for row in d)
    spun = sorted(row["spun_up_size"] for row in d if row["chosen"] and row["spun_up_size"])
    assert spun == sorted(e["size"] for e in r.events.to_pylist() if e["event"] == "spinup")
    fixed = emulate(overloaded, [8], seed=3)
    assert fixed.decisions.num_rows == 0 and fixed.decisions.schema == r.decisions.schema


@pytest.mark.parametrize("policy", ["snowflake-standard", "snowflake-economy", "rais", "noop"])
def test_baseline_scalers_run_by_name(overloaded, policy: str) -> None:
    r = emulate(overloaded, [8], routing="least-work", seed=3, autoscaler=policy)
    assert r.queries == overloaded.num_rows
    reasons = {e["reason"] for e in r.events.to_pylist()}
    if policy == "noop":
        assert reasons == {"initial"}
    else:
        assert reasons - {"initial"}, f"{policy} never scaled an overloaded warehouse"


def test_the_simulator_runs_the_same_autoscaler(overloaded) -> None:
    r = simulate(overloaded, [8], autoscaler=AutoscalerConfig(sizes=(16, 32)))
    assert r.queries == overloaded.num_rows
    assert any(e["event"] == "spinup" for e in r.events.to_pylist())


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tau": 1.5}, "τ_target must be in \\[0, 1\\], got 1.5"),
        ({"theta": -3}, "autoscaler `theta` = -3"),
        ({"mu": 0}, "μ \\(minimum completions\\) must be ≥ 1"),
        ({"window_s": -5.0}, "window w must be a finite time > 0 s"),
        ({"t_idle_s": float("nan")}, "T_idle must be a finite time ≥ 0 s"),
        ({"min_clusters": 3, "max_clusters": 2}, "need 1 ≤ min_clusters ≤ max_clusters, got 3 and 2"),
        ({"sizes": (16, 36)}, "eligible sizes\\[1\\] must be"),
        ({"policy": "add-best", "trigger": "eager"}, "unknown policy `eager`"),
        ({"policy": "snowflake-economy", "trigger": "observed"}, "takes no trigger"),
    ],
)
def test_bad_values_are_refused_when_the_config_is_built(settings: dict[str, object], message: str) -> None:
    with pytest.raises(_core.AutoSloCoreError, match=message):
        AutoscalerConfig(**settings)  # type: ignore[arg-type]


def test_bad_autoscaler_settings_are_clear_errors(overloaded) -> None:
    with pytest.raises(ValueError, match="unknown scaling policy"):
        AutoscalerConfig(policy="grow")
    with pytest.raises(_core.AutoSloCoreError, match="route with `autoslo`"):
        emulate(overloaded, [8], routing="round-robin", autoscaler="autoslo")
    with pytest.raises(_core.AutoSloCoreError, match="unknown autoscaler setting `tua`"):
        _core.emulate(overloaded, [8], autoscaler={"tua": 0.1})
    with pytest.raises(_core.AutoSloCoreError, match="not both"):
        emulate(overloaded, [8], schedule=[(10.0, "spinup", 16)], autoscaler="noop")
    # A spec that skips AutoscalerConfig is checked when the run builds its scaler.
    bundled = predictor.load()
    with pytest.raises(_core.AutoSloCoreError, match="τ_target"):
        _core.emulate(overloaded, [8], routing="autoslo", predictor=bundled, autoscaler={"tau": 1.5})
    with pytest.raises(_core.AutoSloCoreError, match="unknown policy `eager`"):
        _core.emulate(overloaded, [8], routing="autoslo", predictor=bundled, autoscaler={"policy": "add-best", "trigger": "eager"})


@pytest.mark.parametrize(("tick_s", "pause_s"), [(30.0, 0.002), (600.0, 0.01)])
def test_control_plane_routes_concurrently_while_it_scales(tick_s: float, pause_s: float) -> None:
    """Four threads route an overload onto one 8 RPU cluster (SLOs at κ = 2) while the autoscaler
    runs on its own thread; time runs 3000× so the 300 s spinup takes 0.1 s. With a 600 s tick
    the scaler judges batches of arrivals longer than its 300 s window, as it does on a loaded
    machine whose scaler thread wakes late."""
    import threading
    import time

    import autoslo

    cp = autoslo.control_plane([8], AutoscalerConfig(sizes=(16, 32), theta=8), time_scale=3000.0, tick_s=tick_s)
    errors: list[BaseException] = []
    routed: dict[int, int] = {}
    lock = threading.Lock()

    def client(k: int) -> None:
        try:
            for i in range(40):
                qid = k * 1000 + i
                template = (qid * 37) % 99 + 1
                c = cp.route(qid, template=template, instance=1, slo=autoslo.slo_for(template, "adhoc", 2.0))
                with lock:
                    routed[qid] = c
                time.sleep(pause_s)
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(routed) == 160
    deadline = time.time() + 60  # generous: the decision runs on a background thread of a loaded machine
    while not any(e["event"] == "spinup" for e in cp.events()) and time.time() < deadline:
        time.sleep(0.01)
    events = cp.events()
    spinups = [e for e in events if e["event"] == "spinup"]
    assert spinups and spinups[0]["reason"] == "spinup-trigger" and spinups[0]["size"] in (16, 32), events
    assert not [e for e in events if e["event"] == "skipped"], events
    # The decision behind it, with the options compared (copied out right after the pass that made it).
    deadline = time.time() + 10
    while not (chosen := [d for d in cp.decisions().to_pylist() if d["chosen"] and d["spun_up_size"]]) and time.time() < deadline:
        time.sleep(0.01)
    assert chosen and chosen[0]["spun_up_size"] == spinups[0]["size"] and chosen[0]["cause"] == "trigger"
    options = [d["option_size"] for d in cp.decisions().to_pylist() if d["time"] == chosen[0]["time"]]
    assert sorted(o or 0 for o in options) == [0, 16, 32]
    while len([c for c in cp.clusters() if c[3]]) < 2 and time.time() < deadline:
        time.sleep(0.01)
    # The new cluster became ready (after the scaled spinup delay) and takes queries.
    ready = [c for c in cp.clusters() if c[3]]
    assert len(ready) >= 2 and spinups[0]["cluster_id"] in {c[0] for c in ready}
    cp.route(99_999, template=3, instance=1, slo=1e6)
    # Every query completes once.
    for qid in [*routed, 99_999]:
        cp.complete(qid)
    with pytest.raises(_core.AutoSloCoreError, match="not running"):
        cp.complete(99_999)


def test_the_control_plane_class_takes_the_autoscaler_as_emulate_does() -> None:
    """``autoslo.ControlPlane`` takes an ``AutoscalerConfig``, a policy name or a settings dict, and
    says what it expected of anything else."""
    import autoslo
    from autoslo.bundled import load

    p = load()
    for a in (AutoscalerConfig(policy="horizontal", sizes=(16,)), "snowflake-standard", {"policy": "rais"}, None):
        cp = autoslo.ControlPlane([8], predictor=p, autoscaler=a, time_scale=100.0)
        assert cp.route(1, template=3, instance=1, slo=1e6) == 0
        cp.complete(1)
    with pytest.raises(TypeError, match="expected an autoslo.AutoscalerConfig, a policy name or a dict of AUTOSCALER_SETTINGS, got int"):
        autoslo.ControlPlane([8], predictor=p, autoscaler=3)  # type: ignore[arg-type]
    with pytest.raises(_core.AutoSloCoreError, match="unknown"):
        autoslo.ControlPlane([8], predictor=p, autoscaler="eager")


def test_the_in_process_control_plane_refuses_at_admission_as_the_service_does() -> None:
    """``autoslo.control_plane(admission=, budgets=)``: a query no cluster can serve within its SLO,
    or one that would take its tenant past its budget, raises ``QueryRejectedError`` and takes no
    cluster; a query without a tenant is held to tenant ``default``'s budget; a restarted control
    plane restores what a tenant spent with ``charge_budget``."""
    import time

    import autoslo
    from autoslo import predictor
    from autoslo.tenancy import Budgets, DeadlineAdmission

    est = predictor.load().stage_estimate(3, 1, 8)
    per_query = 0.375 * 8 * est / 3600
    budgets = Budgets({"acme": 2.5 * per_query, "default": 1.5 * per_query})
    t0 = time.time()
    # Round robin needs no predictor; admission loads the bundled one for its Stage estimates.
    cp = autoslo.control_plane([8], "noop", routing="round-robin", admission=DeadlineAdmission(), budgets=budgets)
    with pytest.raises(autoslo.QueryRejectedError, match="infeasible-deadline") as e:
        cp.route(1, 3, 1, est / 10, tenant="beta")
    assert (e.value.reason, e.value.retry_after_s) == ("infeasible-deadline", None)
    assert [cp.route(q, 3, 1, 60.0, tenant="acme") for q in (2, 3)] == [0, 0]
    with pytest.raises(autoslo.QueryRejectedError, match="budget") as e:
        cp.route(4, 3, 1, 60.0, tenant="acme")
    assert e.value.reason == "budget"
    assert utc.is_to_midnight(e.value.retry_after_s, t0, time.time()), "its budget comes back at the next UTC midnight"
    assert cp.route(5, 3, 1, 60.0, tenant="beta") == 0, "beta has no budget"
    assert cp.route(6, 3, 1, 60.0) == 0
    with pytest.raises(autoslo.QueryRejectedError, match="budget"):
        cp.route(7, 3, 1, 60.0)
    assert [c[2] for c in cp.clusters()] == [4], "rejected queries take no cluster"
    with pytest.raises(_core.AutoSloCoreError, match="query 4 is not running"):
        cp.complete(4)
    for q in (2, 3, 5, 6):
        cp.complete(q)
    standing = {b["tenant"]: b for b in cp.budgets()}
    assert set(standing) == {"acme", "default"}
    assert standing["acme"]["spent"] == pytest.approx(2 * per_query) and standing["default"]["spent"] == pytest.approx(per_query)
    assert utc.is_day_start(standing["acme"]["window_start"], t0, time.time()), "a day's window is a UTC day"

    # A restart: what acme spent comes back, so it has room for no more query today.
    again = autoslo.control_plane([8], "noop", routing="round-robin", budgets=budgets)
    again.charge_budget("acme", standing["acme"]["spent"])
    with pytest.raises(autoslo.QueryRejectedError, match="budget"):
        again.route(1, 3, 1, 60.0, tenant="acme")
    with pytest.raises(_core.AutoSloCoreError, match="finite and ≥ 0"):
        again.charge_budget("acme", -1.0)
    # Without admission or budgets: every query is routed, and there is nothing to charge.
    plain = autoslo.control_plane([8], "noop", routing="round-robin")
    assert plain.route(1, 3, 1, est / 10) == 0 and plain.budgets() == []
    plain.charge_budget("acme", 1.0)
    with pytest.raises(_core.AutoSloCoreError, match="margin"):
        autoslo.control_plane([8], "noop", routing="round-robin", admission=DeadlineAdmission(margin=0.5))
    with pytest.raises(TypeError, match="`budgets` must be an autoslo.tenancy.Budgets"):
        autoslo.control_plane([8], "noop", routing="round-robin", budgets={"acme": 1.0})  # type: ignore[arg-type]


def test_the_in_process_control_plane_keeps_what_it_served_as_the_service_does(tmp_path) -> None:
    """``cp.totals()``, ``cp.take_served()`` and ``cp.cost()``: every query counted per tenant ×
    class (a rejection too), logged once its cost is final, and the logged costs add up to the
    bill once everything has ended and the billing minimum is over; the log is a query log the
    reservoir takes."""
    import datetime as dt
    import time

    import autoslo
    from autoslo.tenancy import Budgets

    # 1000×: 1 ms is 1 s of the control plane's clock; the billing minimum is 600 s (0.6 s).
    t0 = time.time()
    cp = autoslo.control_plane([16, 32], "noop", routing="round-robin", time_scale=1000.0, budgets=Budgets({"acme": 0.0}), billing_minimum_s=600.0)
    with pytest.raises(autoslo.QueryRejectedError, match="budget"):
        cp.route(1, 3, 1, 100.0, tenant="acme", workload_class="dashboard")
    for q, tenant in ((2, "beta"), (3, "beta"), (4, None)):
        cp.route(q, 3, 1, 100.0, tenant=tenant, workload_class="report" if tenant else None)
    time.sleep(0.02)
    cp.complete(2)
    cp.complete(3, timed_out=True)
    assert cp.take_served().num_rows == 1, "only the rejection's cost is final yet"
    cp.complete(4)
    time.sleep(0.8)
    totals = {(t["tenant"], t["class"]): t for t in cp.totals().to_pylist()}
    assert set(totals) == {("acme", "dashboard"), ("beta", "report"), ("default", "adhoc")}
    assert (totals["acme", "dashboard"]["rejected"], totals["beta", "report"]["met"], totals["beta", "report"]["timed_out"], totals["default", "adhoc"]["met"]) == (1, 1, 1, 1)
    log = cp.take_served()
    assert sorted(log["query_id"].to_pylist()) == [2, 3, 4] and log["outcome"].to_pylist().count("timeout") == 1
    assert all(c > 0 for c in log["cost"].to_pylist())
    assert sum(log["cost"].to_pylist()) == pytest.approx(cp.cost(), rel=1e-9) and cp.cost() > 0
    assert cp.take_served().num_rows == 0 and cp.log_dropped() == 0
    reservoir = autoslo.Reservoir(tmp_path / "res")
    served_on = {dt.datetime.fromtimestamp(t, dt.timezone.utc).date() for t in (t0, time.time())}
    assert len(dates := reservoir.append(log)) == 1 and dates[0] in served_on


def test_idle_clusters_are_torn_down_after_t_idle_and_t_min_lifetime_down_to_min_clusters() -> None:
    """The teardown trigger (§6): a cluster goes, with reason ``idle``, once nothing was routed to
    it for T_idle and it has lived T_min_lifetime; never below ``min_clusters``; never with
    ``teardown=False``."""
    wl = base_workload(0.02, seed=3, kappa=4)  # about 300 queries over 4 h: three clusters are too many

    def teardowns(**knobs: object) -> tuple[list[dict], list[dict]]:
        r = emulate(wl, [16, 16, 16], autoscaler=AutoscalerConfig(tau=0.1, sizes=(16,), **knobs))  # type: ignore[arg-type]
        return [e for e in r.events.to_pylist() if e["event"] == "teardown"], r.trace.to_pylist()

    for t_idle, t_min, floor in ((600.0, 1200.0, 2), (300.0, 3000.0, 1), (1800.0, 1200.0, 1)):
        downs, rows = teardowns(t_idle_s=t_idle, t_min_lifetime_s=t_min, min_clusters=floor)
        assert len(downs) == 3 - floor, (t_idle, t_min, floor, downs)
        for e in downs:
            assert e["reason"] == "idle" and e["time"] >= t_min, e
            routed = [q["arrival"] for q in rows if q["cluster_id"] == e["cluster_id"]]
            assert e["time"] - max([a for a in routed if a <= e["time"]], default=0.0) >= t_idle, (e, routed)
            assert all(a <= e["time"] for a in routed), "nothing is routed to a cluster after its teardown"
    downs, _ = teardowns(t_idle_s=300.0, t_min_lifetime_s=300.0, min_clusters=1, teardown=False)
    assert downs == []
