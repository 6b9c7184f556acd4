"""The Policy Tuner from Python: reservoir, forecaster, SimulateBatch, FindGoodSpinupTime, tune,
execution configurations, and the CLI."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import autoslo
from autoslo import tuner as T
from autoslo.cli import main

START = dt.date(2024, 4, 1)  # a Monday


@pytest.fixture(scope="module")
def history() -> pa.Table:
    return autoslo.redbench_workload(days=8, seed=4, queries_per_day=2500, tenants=2, kappa=2)


@pytest.fixture(scope="module")
def reservoir(history: pa.Table, tmp_path_factory: pytest.TempPathFactory) -> T.Reservoir:
    r = T.Reservoir(tmp_path_factory.mktemp("reservoir"))
    r.append(history, start_date=START)
    return r


def test_reservoir_stores_exact_counts_and_a_bounded_arrival_sample(reservoir: T.Reservoir, history: pa.Table) -> None:
    assert reservoir.days() == [START + dt.timedelta(days=i) for i in range(8)]
    assert reservoir.queries() == history.num_rows
    counts, arrivals = reservoir.tables([START])
    day0 = pc.sum(pc.less(history["arrival"], 86_400.0)).as_py()
    assert pc.sum(counts["count"]).as_py() == day0
    assert set(counts["tenant"].to_pylist()) == {"tenant-1", "tenant-2"}
    assert pc.min(arrivals["offset_s"]).as_py() >= 0 and pc.max(arrivals["offset_s"]).as_py() < 3600
    # A small cap keeps at most that many offsets per hour, and a day logged in two parts adds up.
    small = T.Reservoir(reservoir.path.parent / "small", max_arrivals_per_hour=10)
    one_day = history.filter(pc.less(history["arrival"], 86_400.0))
    half = one_day.num_rows // 2
    small.append(one_day.slice(0, half), start_date=START)
    small.append(one_day.slice(half), start_date=START)
    c, a = small.tables()
    assert pc.sum(c["count"]).as_py() == one_day.num_rows
    per_hour = a.group_by("hour").aggregate([("offset_s", "count")])["offset_s_count"].to_pylist()
    assert max(per_hour) == 10
    # The same rows again, in any order, would double their counts: refused, and nothing is written.
    before = [(p.name, p.read_bytes()) for p in sorted(small.path.rglob("*.parquet"))]
    for again in (one_day.slice(half), one_day.slice(half).take(np.arange(one_day.num_rows - half)[::-1])):
        with pytest.raises(ValueError, match=f"already holds these rows for {START.isoformat()}.*nothing was written"):
            small.append(again, start_date=START)
    assert [(p.name, p.read_bytes()) for p in sorted(small.path.rglob("*.parquet"))] == before
    # Re-ingesting with replace is idempotent.
    small.append(one_day, start_date=START, replace=True)
    small.append(one_day, start_date=START, replace=True)
    assert small.queries() == one_day.num_rows


def test_reservoir_reads_timestamps_and_csv_and_names_bad_rows(tmp_path: Path) -> None:
    ts = pa.array([dt.datetime(2024, 5, 1, 9, 0, 5), dt.datetime(2024, 5, 1, 9, 30), dt.datetime(2024, 5, 2, 23, 59, 59)], pa.timestamp("s"))
    log = pa.table({"arrival": ts, "template": [1, 2, 3], "instance": [1, 1, 2], "tenant": ["a", "a", "b"], "class": ["dashboard", "adhoc", "report"]})
    r = T.Reservoir(tmp_path / "r")
    assert r.append(log) == [dt.date(2024, 5, 1), dt.date(2024, 5, 2)]
    c, a = r.tables([dt.date(2024, 5, 2)])
    assert c.to_pylist() == [{"date": T.day_number("2024-05-02"), "hour": 23, "template": 3, "instance": 2, "tenant": "b", "class": "report", "count": 1}]
    assert a["offset_s"].to_pylist() == [3599.0]
    csv = tmp_path / "log.csv"
    pcsv.write_csv(log, csv)
    from autoslo.tuner_cli import read_log

    assert T.Reservoir(tmp_path / "r2").append(read_log(csv)) == [dt.date(2024, 5, 1), dt.date(2024, 5, 2)]
    bad = log.set_column(1, "template", pa.array([1, 2, 120]))
    with pytest.raises(autoslo.AutoSloCoreError, match=r"row 2, column `template`: 120"):
        r.append(bad)
    # A column the reader left as text, or read as floats, is named at its first bad row.
    with pytest.raises(autoslo.AutoSloCoreError, match=r"row 1, column `template`: 'abc' is not a whole number"):
        r.append(log.set_column(1, "template", pa.array(["1", "abc", "3"])))
    with pytest.raises(autoslo.AutoSloCoreError, match=r"row 2, column `instance`: 2.5 is not a whole number"):
        r.append(log.set_column(2, "instance", pa.array([1.0, 1.0, 2.5])))
    with pytest.raises(autoslo.AutoSloCoreError, match=r"row 0, column `template`: type list<item: int64> is not an integer"):
        r.append(log.set_column(1, "template", pa.array([[1], [2], [3]])))
    with pytest.raises(autoslo.AutoSloCoreError, match=r"row 1, column `tenant`: missing value"):
        r.append(log.set_column(3, "tenant", pa.array(["a", None, "b"])))
    with pytest.raises(autoslo.AutoSloCoreError, match="start date"):
        r.append(pa.table({"arrival": [1.0], "template": [1], "instance": [1]}))
    with pytest.raises(autoslo.AutoSloCoreError, match="row 0, column `arrival`"):
        r.append(pa.table({"arrival": [-1.0], "template": [1], "instance": [1]}), start_date="2024-05-01")
    with pytest.raises(autoslo.AutoSloCoreError, match="missing column `instance`"):
        r.append(pa.table({"arrival": [1.0], "template": [1]}), start_date="2024-05-01")
    # ISO 8601 text (JSON exports, CSV columns the reader left as text): with Z or an offset, or
    # without (UTC), mixed row by row; 10:00+02:00 is 08:00 UTC.
    text = pa.table({"arrival": ["2024-05-03T09:00:00", "2024-05-03 09:30:00.5", "2024-05-03T10:00:00+02:00", "2024-05-03T23:59:59Z"], "template": [1, 2, 3, 4], "instance": [1] * 4})
    r3 = T.Reservoir(tmp_path / "r3")
    assert r3.append(text) == [dt.date(2024, 5, 3)]
    c, a = r3.tables()
    assert sorted(zip(c["template"].to_pylist(), c["hour"].to_pylist())) == [(1, 9), (2, 9), (3, 8), (4, 23)]
    assert sorted(a["offset_s"].to_pylist()) == [0.0, 0.0, 1800.5, 3599.0]
    with pytest.raises(autoslo.AutoSloCoreError, match=r"row 1, column `arrival`: 'May 3rd' is not an ISO 8601 time"):
        r3.append(pa.table({"arrival": ["2024-05-03T09:00:00", "May 3rd"], "template": [1, 1], "instance": [1, 1]}))


def test_appends_from_two_writers_lose_nothing(history: pa.Table, tmp_path: Path) -> None:
    import threading

    r = T.Reservoir(tmp_path / "r")
    day0 = history.filter(pc.less(history["arrival"], 86_400.0))
    half = day0.num_rows // 2
    r.append(day0.slice(0, half), start_date=START)
    # While another writer holds the reservoir, an append waits for it instead of reading the day
    # before the other one has written it.
    done = threading.Event()
    with r._writer():
        t = threading.Thread(target=lambda: (T.Reservoir(r.path).append(day0.slice(half), start_date=START), done.set()))
        t.start()
        assert not done.wait(0.3)
    t.join(30)
    assert done.is_set() and r.queries([START]) == day0.num_rows
    # Writers in other processes too: eight appends of disjoint parts at once, every row kept.
    other = T.Reservoir(tmp_path / "r2")
    parts = [day0.slice(k * (day0.num_rows // 8), day0.num_rows // 8) for k in range(8)]
    for k, p in enumerate(parts):
        pq.write_table(p, tmp_path / f"part{k}.parquet")
    procs = [subprocess.Popen([sys.executable, "-m", "autoslo", "reservoir", "add", "--reservoir", str(other.path), "--log", str(tmp_path / f"part{k}.parquet"), "--start-date", START.isoformat()]) for k in range(8)]
    assert [p.wait(120) for p in procs] == [0] * 8
    assert other.queries([START]) == sum(p.num_rows for p in parts)


def test_a_crash_mid_append_loses_nothing_already_stored(reservoir: T.Reservoir, history: pa.Table, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    r = T.Reservoir(tmp_path / "r")
    day0 = history.filter(pc.less(history["arrival"], 86_400.0))
    r.append(day0, start_date=START)
    before = r.tables()

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(T.pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        r.append(day0, start_date=START, replace=True)
    monkeypatch.undo()
    assert r.tables()[0].equals(before[0]) and r.tables()[1].equals(before[1])
    assert not list(r.path.rglob("*.tmp")), "no temporary file is left behind"
    # A process killed mid-write (no handler runs) leaves its temporary file; the next append,
    # holding the writer lock, removes it and reads the day as stored.
    day_dir = next(r.path.glob("day=*"))
    (day_dir / ".counts.parquet.k1ll3d.tmp").write_bytes(b"PAR1 half a file")
    (day_dir / ".arrivals.parquet.k1ll3d.tmp").write_bytes(b"")
    assert r.tables()[0].equals(before[0]), "a half-written temporary file is never read"
    day1 = history.filter(pc.and_(pc.greater_equal(history["arrival"], 86_400.0), pc.less(history["arrival"], 2 * 86_400.0)))
    r.append(day1, start_date=START)
    assert not list(r.path.rglob("*.tmp")) and r.queries([START]) == day0.num_rows


def test_an_atomic_write_leaves_the_old_file_or_the_new_one_with_the_usual_mode(tmp_path: Path) -> None:
    """`autoslo._files.atomic`, behind every replaced file: a failed write keeps the old content and
    leaves no temporary file; a finished one has the mode a plain write gets (0666 less the
    umask), not mkstemp's 0600, so a configuration published for another user stays readable."""
    import os

    from autoslo._files import atomic, remove_unfinished

    target = tmp_path / "sub" / "plan.yaml"
    with atomic(target) as tmp:
        tmp.write_text("old")
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.read_text() == "old" and target.stat().st_mode & 0o777 == 0o666 & ~umask
    with pytest.raises(RuntimeError, match="mid-write"):
        with atomic(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("died mid-write")
    assert target.read_text() == "old" and sorted(p.name for p in target.parent.iterdir()) == ["plan.yaml"]
    with atomic(target, tmp_path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".plan.yaml.") and tmp.name.endswith(".tmp")
        tmp.write_text("new")
    assert target.read_text() == "new" and not list(tmp_path.glob(".*.tmp"))
    (tmp_path / ".plan.yaml.dead.tmp").write_text("a killed writer's")
    assert remove_unfinished(tmp_path) == 1 and not list(tmp_path.glob(".*"))


def test_forecasts_follow_the_history_and_fall_back_without_a_same_weekday(reservoir: T.Reservoir) -> None:
    f = T.forecast(reservoir, START + dt.timedelta(days=8), forecasts=5, kappa=4, seed=1)
    assert (len(f.training), len(f.validation), f.policy, f.days_used) == (3, 2, "decay", [START + dt.timedelta(days=1)])
    for w in f.training + f.validation:
        assert autoslo.validate_workload(w).num_rows == w.num_rows
    assert T.forecast(reservoir, START + dt.timedelta(days=8), forecasts=5, kappa=4, seed=1).training[0].equals(f.training[0])
    assert T.forecast(reservoir, START + dt.timedelta(days=3), forecasts=2, history_days=2).policy == "previous-day"
    with pytest.raises(autoslo.AutoSloCoreError, match="no day before"):
        T.forecast(reservoir, START)
    with pytest.raises(autoslo.AutoSloCoreError, match="unknown policy"):
        T.forecast(reservoir, START + dt.timedelta(days=8), policy="crystal-ball")


def test_simulate_batch_and_find_good_spinup_time() -> None:
    ws = [autoslo.base_workload(0.3, seed=s, kappa=2) for s in range(2)]
    fixed = T.ExecutionConfig.fixed([8])
    m = T.simulate_batch([fixed, fixed], ws, keep_logs=True)
    assert [len(r) for r in m] == [2, 2]
    assert m[0] == m[1], "deterministic"
    assert len(m[0][0]["arrival"]) == ws[0].num_rows
    gamma = T.find_good_spinup_time(m[0], tau_target=0.1, k=2)
    assert gamma == sorted(gamma) and all(t >= 0 for t in gamma)
    assert gamma, "an 8 RPU cluster at λ = 0.3 congests"
    with pytest.raises(autoslo.AutoSloCoreError, match="different lengths"):
        T.find_good_spinup_time([{"arrival": [1.0], "end": [], "violated": [True]}])


def test_a_signal_handler_s_exception_stops_a_batch_and_is_raised_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    # A supervisor's handler (Airflow raises its own exception on SIGTERM) must reach the caller
    # as itself, not as a bare KeyboardInterrupt("interrupted").
    class Stopped(Exception):
        pass

    finished = threading.Event()

    def stop(signum: int, frame: object) -> None:
        if not finished.is_set():
            raise Stopped("told to stop")

    ws = [autoslo.redbench_workload(days=1, seed=s, queries_per_day=15000, tenants=2) for s in range(8)]
    configs = [T.ExecutionConfig({"initial_clusters": [16]})] * 2
    # The signal is sent once the batch reports its first simulation done (15 more to go), so it
    # lands while the batch runs, however fast the machine.
    running = threading.Event()
    monkeypatch.setattr(T, "progress_bar", lambda enabled, desc, unit: ((lambda done, total: running.set() if done > 0 else None), lambda: None))

    def signal_once_running() -> None:
        while not finished.is_set():
            if running.wait(0.05):
                os.kill(os.getpid(), signal.SIGALRM)
                return

    previous = signal.signal(signal.SIGALRM, stop)
    sender = threading.Thread(target=signal_once_running)
    try:
        sender.start()
        with pytest.raises(Stopped, match="told to stop"):
            T.simulate_batch(configs, ws, progress=True)
    finally:
        finished.set()
        sender.join()
        signal.signal(signal.SIGALRM, previous)


def test_execution_configs_round_trip_and_reject_unknown_fields(tmp_path: Path) -> None:
    cfg = T.ExecutionConfig({"initial_clusters": [16], "scheduled_spinups": [{"at_s": 600, "size": 32}]})
    path = tmp_path / "c.yaml"
    cfg.save(path)
    assert T.ExecutionConfig.load(path) == cfg
    assert cfg.scheduled_spinups == [(600.0, 32)] and cfg.autoscaler["policy"] == "autoslo"
    path.write_text("initial_clusters: [16]\nautoscaler:\n  t_idel_s: 600\n")
    with pytest.raises(autoslo.AutoSloCoreError, match=r"c.yaml: .*unknown field `t_idel_s`"):
        T.ExecutionConfig.load(path)
    path.write_text("- 16\n")
    with pytest.raises(autoslo.AutoSloCoreError, match="a mapping"):
        T.ExecutionConfig.load(path)
    # μ unset is the policy's own (32 for autoslo) and is not written; a user's μ is kept; 0 is refused.
    assert "mu" not in cfg.autoscaler
    cfg.save(path)
    assert "mu:" not in path.read_text()
    path.write_text("initial_clusters: [16]\nautoscaler:\n  mu: 16\n")
    assert T.ExecutionConfig.load(path).autoscaler["mu"] == 16
    path.write_text("initial_clusters: [16]\nautoscaler:\n  mu: 0\n")
    with pytest.raises(autoslo.AutoSloCoreError, match="μ"):
        T.ExecutionConfig.load(path)
    # The selector's tie change (off unless asked) is kept when asked for.
    assert "selector_spinup_on_tie" not in cfg.autoscaler
    path.write_text("initial_clusters: [16]\nautoscaler:\n  selector_spinup_on_tie: true\n")
    assert T.ExecutionConfig.load(path).autoscaler["selector_spinup_on_tie"] is True


def test_a_nan_or_infinity_is_refused_by_the_field_that_holds_it(tmp_path: Path) -> None:
    # JSON has no NaN: without the check the core could only say "expected value at line 1 column 50".
    nan, inf = float("nan"), float("inf")
    with pytest.raises(autoslo.AutoSloCoreError, match=r"^execution configuration: `autoscaler\.tau` must be a finite number, got nan$"):
        T.ExecutionConfig({"initial_clusters": [16], "autoscaler": {"tau": nan}})
    with pytest.raises(autoslo.AutoSloCoreError, match=r"`scheduled_spinups\[0\]\.at_s` must be a finite number, got inf"):
        T.ExecutionConfig({"initial_clusters": [16], "scheduled_spinups": [{"at_s": inf, "size": 16}]})
    path = tmp_path / "c.yaml"
    path.write_text("initial_clusters: [16]\nautoscaler:\n  tau_trigger: .nan\n")
    with pytest.raises(autoslo.AutoSloCoreError, match=r"c\.yaml: execution configuration: `autoscaler\.tau_trigger` must be a finite number"):
        T.ExecutionConfig.load(path)
    with pytest.raises(autoslo.AutoSloCoreError, match="tuner settings: `tau` must be a finite number, got nan"):
        T.TunerSettings(tau=nan)
    with pytest.raises(autoslo.AutoSloCoreError, match=r"tuner settings: `space\.t_idle_s\[1\]` must be a finite number"):
        T.TunerSettings(space={"t_idle_s": [600.0, nan]})
    with pytest.raises(autoslo.AutoSloCoreError, match=r"slo_policy: `deadlines\[0\]\.deadline_s` must be a finite number"):
        autoslo.tenancy.apply_slo_policy(autoslo.base_workload(0.1), {"deadlines": [{"tier": "*", "class": "adhoc", "deadline_s": nan}]})


def test_emulate_runs_a_configuration_with_its_schedule() -> None:
    wl = autoslo.base_workload(0.2, seed=3, kappa=2)
    cfg = T.ExecutionConfig({"initial_clusters": [8], "scheduled_spinups": [{"at_s": 100, "size": 16}], "autoscaler": None})
    r = autoslo.emulate(wl, config=cfg)
    ups = [e for e in r.events.to_pylist() if e["event"] == "spinup"]
    assert [(e["size"], e["reason"]) for e in ups] == [(16, "scheduled")]
    assert 100 <= ups[0]["time"] <= 105
    with pytest.raises(ValueError, match="config= alone"):
        autoslo.emulate(wl, [16], config=cfg)
    with pytest.raises(ValueError, match="initial clusters"):
        autoslo.emulate(wl)
    s = autoslo.simulate(wl, config=cfg)
    assert s.summary()["clusters"] == 2


def test_a_control_plane_started_into_the_day_runs_the_rest_of_the_plan() -> None:
    import time

    cfg = T.ExecutionConfig({"initial_clusters": [8], "scheduled_spinups": [{"at_s": 0, "size": 16}, {"at_s": 3600, "size": 32}, {"at_s": 30000, "size": 16}], "autoscaler": None})
    assert cfg.from_time(0) == cfg
    later = cfg.from_time(3600)
    assert later.initial_clusters == [8, 16] and later.scheduled_spinups == [(0.0, 32), (26400.0, 16)]
    assert cfg.from_time(30001).initial_clusters == [8, 16, 32, 16] and cfg.from_time(30001).scheduled_spinups == []
    with pytest.raises(ValueError, match="a time of the day in seconds ≥ 0"):
        cfg.from_time(float("nan"))
    # Restarted at 02:00: the 00:00 and 01:00 clusters are up at once; the last comes at 08:20.
    cp = autoslo.control_plane(config=cfg, start_s=7200, time_scale=1e5, tick_s=100.0)
    assert sorted(c[1] for c in cp.clusters()) == [8, 16, 32]
    deadline = time.monotonic() + 10
    while len(cp.clusters()) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    ups = [e for e in cp.events() if e["event"] == "spinup"]
    assert [(e["size"], e["reason"]) for e in ups] == [(16, "scheduled")]
    assert 22800 <= ups[0]["time"] < 22800 + 5000
    with pytest.raises(ValueError, match="give it with config="):
        autoslo.control_plane([16], start_s=60)


def test_a_control_plane_serving_a_plan_holds_queries_to_its_slo_policy() -> None:
    policy = {"tiers": {"aster": "premium"}, "deadlines": [{"tier": "premium", "class": "dashboard", "deadline_s": 2}, {"tier": "*", "class": "dashboard", "deadline_s": 5}]}
    cfg = T.ExecutionConfig({"initial_clusters": [16, 16], "autoscaler": None, "slo_policy": policy})
    cp = autoslo.control_plane(config=cfg, tick_s=0.05)
    assert cp.slo_of(3, tenant="aster", workload_class="dashboard") == 2.0
    assert cp.slo_of(3, 60.0, tenant="aster", workload_class="dashboard") == 2.0, "the plan's deadline wins"
    assert cp.slo_of(3, 60.0, tenant="cedar", workload_class="adhoc") == 60.0, "no rule: the query's own"
    assert cp.route(1, 3, 1, tenant="aster", workload_class="dashboard") in (0, 1)
    with pytest.raises(autoslo.AutoSloCoreError, match="no rule of the SLO policy covers template 3 of tenant `cedar`, class `adhoc`: give the query's SLO"):
        cp.route(2, 3, 1, tenant="cedar", workload_class="adhoc")
    plain = autoslo.control_plane([16], autoscaler=None, tick_s=0.05)
    assert plain.route(1, 3, 1, 30.0) == 0
    with pytest.raises(autoslo.AutoSloCoreError, match="has no SLO policy"):
        plain.route(2, 3, 1)


def test_a_new_days_plan_takes_over_a_running_control_plane() -> None:
    import time

    today = T.ExecutionConfig({"initial_clusters": [16], "autoscaler": None, "routing": "round-robin", "slo_policy": {"deadlines": [{"tier": "*", "class": "dashboard", "deadline_s": 5}]}})
    cp = autoslo.control_plane(config=today, tick_s=0.05)
    tomorrow = {"initial_clusters": [16, 8], "scheduled_spinups": [{"at_s": 0.3, "size": 32}], "autoscaler": None, "routing": "round-robin", "slo_policy": {"deadlines": [{"tier": "*", "class": "dashboard", "deadline_s": 9}]}}
    with pytest.raises(autoslo.AutoSloCoreError, match="routes by `autoslo` and the control plane by `round-robin`"):
        cp.load_plan(T.ExecutionConfig({**tomorrow, "routing": "autoslo"}))
    with pytest.raises(TypeError, match="ExecutionConfig or its JSON"):
        cp.load_plan(42)
    assert cp.slo_of(3, tenant="t", workload_class="dashboard") == 5.0, "a refused plan changes nothing"
    # The 16 stands for the plan's 16; an 8 is spun up, and the 32 comes 0.3 s into its day.
    assert cp.load_plan(T.ExecutionConfig(tomorrow)) == [8]
    assert cp.slo_of(3, tenant="t", workload_class="dashboard") == 9.0
    deadline = time.monotonic() + 10
    while len(cp.clusters()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(c[1] for c in cp.clusters()) == [8, 16, 32]
    assert [e["event"] for e in cp.events()].count("plan") == 1
    # Its JSON works as well; the same plan again, its day begun, wants nothing more.
    assert cp.load_plan(T.ExecutionConfig(tomorrow).to_json(), day_start=0.0) == []


@pytest.mark.parametrize(("field", "value"), [("eta", -1), ("forecasts", 2.5), ("seed", -3), ("top_k", True), ("delinquent_k", -2)])
def test_tuner_settings_name_a_bad_count(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"tuner setting `{field}` must be a whole number ≥ 0"):
        T.TunerSettings(**{field: value})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"forecasts": 1}, "forecasts must be ≥ 2 \\(training and validation\\), got 1"),
        ({"training_share": 1.0}, "training_share must be in \\(0, 1\\), got 1"),
        ({"decay": 0.0}, "forecaster decay λ must be in \\(0, 1\\], got 0"),
        ({"tau": 2.0}, "τ_target must be in \\[0, 1\\], got 2"),
        ({"cost_tolerance": -1.0}, "cost_tolerance must be a fraction ≥ 0, got -1"),
        ({"strategy": "nope"}, "unknown policy `nope`"),
        ({"initial_clusters": []}, "`initial_clusters` needs at least one cluster set"),
    ],
)
def test_tuner_settings_refuse_what_tune_would_before_any_history_is_read(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        T.TunerSettings(**settings)  # type: ignore[arg-type]


def test_tuner_settings_files_and_mappings_name_what_is_wrong(tmp_path: Path) -> None:
    f = tmp_path / "settings.yaml"
    f.write_text("tau: 0.2\nforecasts: 4\n")
    assert (T.TunerSettings.load(f).tau, T.TunerSettings.load(f).forecasts) == (0.2, 4)
    f.write_text("")
    assert T.TunerSettings.load(f) == T.TunerSettings()
    for text, message in [
        ("tau: [0.1\n", "settings.yaml: not valid YAML"),
        ("- tau\n", "settings.yaml: tuner settings are a mapping of setting → value, got list"),
        ("tua: 0.1\n", "settings.yaml: unknown tuner settings \\['tua'\\] \\(known: .*'tau'"),
        ("eta: -1\n", "settings.yaml: tuner setting `eta` must be a whole number ≥ 0"),
        ("tau: 2\n", "settings.yaml: .*τ_target must be in"),
    ]:
        f.write_text(text)
        with pytest.raises(ValueError, match=message):
            T.TunerSettings.load(f)
    with pytest.raises(FileNotFoundError):
        T.TunerSettings.load(tmp_path / "missing.yaml")
    # A DAG's params as a mapping: the same check, not Python's "unexpected keyword argument".
    with pytest.raises(ValueError, match="unknown tuner settings \\['forcasts'\\]"):
        T.TunerSettings.from_mapping({"forcasts": 3})
    assert T.TunerSettings.from_mapping({"seed": 3}).seed == 3


def test_every_configuration_tuner_strategy_runs_from_python(reservoir: T.Reservoir) -> None:
    day = START + dt.timedelta(days=8)
    space = {"t_idle_s": [300.0, 600.0, 1200.0], "tau_trigger": [0.05, 0.1]}
    sims = {}
    for strategy, budget in [("grid", 1), ("random", 3), ("coordinate-descent", 1), ("adaptive-batch", 0)]:
        settings = T.TunerSettings(forecasts=3, eta=0, strategy=strategy, budget=budget, space=space, initial_clusters=[[8]])
        r = T.tune(reservoir, day, settings=settings, kappa=2)
        assert r.report["tuned"], strategy
        sims[strategy] = r.report["simulations"]
    assert sims["adaptive-batch"] <= sims["grid"] and sims["random"] < sims["grid"]
    with pytest.raises(autoslo.AutoSloCoreError, match="adaptive-batch"):
        T.tune(reservoir, day, settings=T.TunerSettings(forecasts=3, eta=0, strategy="adaptive", space=space), kappa=2)
    # Sizes a Redshift Serverless workgroup cannot have are refused before any simulation.
    for bad, what in [({"spinup_sizes": [16, 12]}, r"spinup_sizes\[1\]"), ({"initial_clusters": [[8], [7]]}, r"initial_clusters\[0\]")]:
        with pytest.raises(autoslo.AutoSloCoreError, match=f"{what} must be a Redshift Serverless base capacity"):
            T.tune(reservoir, day, settings=T.TunerSettings(forecasts=3, eta=1, **bad), kappa=2)


def test_tune_reports_the_historys_slos_out_of_reach(reservoir: T.Reservoir, history: pa.Table) -> None:
    """The report's share of SLOs no eligible size can meet equals autoslo.slo_feasibility over the
    history's own queries (the reservoir keeps exact counts), overall and per tenant."""
    settings = T.TunerSettings(forecasts=3, eta=0, initial_clusters=[[8]], spinup_sizes=[16], space={"t_idle_s": [300.0]})
    reach = T.tune(reservoir, START + dt.timedelta(days=8), settings=settings, kappa=2).report["slo_out_of_reach"]
    assert reach["sizes"] == settings.eligible_sizes() == [8, 16, 32] and reach["kappa"] == 2
    f = autoslo.slo_feasibility(history, reach["sizes"]).to_pylist()
    late = [not q["feasible"] for q in f]
    assert 0 < reach["share"] == pytest.approx(sum(late) / len(late))
    for tenant in ("tenant-1", "tenant-2"):
        mine = [not q["feasible"] for q in f if q["tenant"] == tenant]
        assert reach["per_tenant"][tenant] == pytest.approx(sum(mine) / len(mine))
    # What allowing 64 or 128 RPU too would reach: never more out of reach than without.
    assert [m["size"] for m in reach["with_larger"]] == [64, 128]
    for m in reach["with_larger"]:
        g = [not q["feasible"] for q in autoslo.slo_feasibility(history, [8, 16, 32, m["size"]]).to_pylist()]
        assert m["share"] == pytest.approx(sum(g) / len(g)) and m["share"] <= reach["share"]


def test_tune_holds_the_forecasts_to_a_teams_slo_policy_and_the_plan_carries_it(reservoir: T.Reservoir, history: pa.Table, tmp_path: Path) -> None:
    """With ``slo_policy`` in the settings every simulation judges the forecasts by its deadlines,
    the configuration written carries it, and held-out validation (Airflow's) uses it too."""
    from autoslo import airflow as cycle
    from autoslo.tenancy import apply_slo_policy

    day = START + dt.timedelta(days=8)
    tight = {"deadlines": [{"tier": "*", "class": c, "deadline_s": 0.5} for c in ("dashboard", "adhoc", "report", "backfill")]}
    base = T.TunerSettings(forecasts=3, eta=0, initial_clusters=[[8]], spinup_sizes=[16], space={"t_idle_s": [300.0]})
    plain = T.tune(reservoir, day, settings=base, kappa=2)
    held = T.tune(reservoir, day, settings=replace(base, slo_policy=tight), kappa=2)
    assert plain.config.slo_policy is None and held.config.slo_policy == {"default_tier": "standard", "tiers": {}, "templates": [], **tight}
    assert held.validation_violation_rate > plain.validation_violation_rate + 0.2
    # The history's queries a 0.5 s deadline puts out of reach of every eligible size.
    reach = held.report["slo_out_of_reach"]
    assert reach["share"] > plain.report["slo_out_of_reach"]["share"]
    f = autoslo.slo_feasibility(apply_slo_policy(history, tight), reach["sizes"]).to_pylist()
    assert reach["share"] == pytest.approx(sum(not q["feasible"] for q in f) / len(f))
    # Written, read back, validated on held-out forecasts by the policy's deadlines.
    held.config.save(tmp_path / "held.yaml")
    assert T.ExecutionConfig.load(tmp_path / "held.yaml").slo_policy == held.config.slo_policy
    plain.config.save(tmp_path / "plain.yaml")
    v_held = cycle.validate(tmp_path / "held.yaml", reservoir.path, day, forecasts=2)
    v_plain = cycle.validate(tmp_path / "plain.yaml", reservoir.path, day, forecasts=2)
    assert v_held["violation_rate"] > v_plain["violation_rate"] + 0.2


def test_tau_scope_tenant_holds_the_worst_tenant_where_the_fleet_hides_it(reservoir: T.Reservoir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On this history the cheapest plan meeting τ fleet-wide leaves one tenant above τ; holding
    every tenant to τ (``tau_scope="tenant"``) takes another plan, with a lower worst tenant."""
    from autoslo import airflow as cycle

    day = START + dt.timedelta(days=8)
    base = T.TunerSettings(forecasts=4, eta=1, initial_clusters=[[8], [16]], spinup_sizes=[16], space={"t_idle_s": [300.0]})
    fleet = T.tune(reservoir, day, settings=base, kappa=2)
    every = T.tune(reservoir, day, settings=replace(base, tau_scope="tenant"), kappa=2)
    ft, et = fleet.report["validation_tenants"], every.report["validation_tenants"]
    assert set(ft) == set(et) == {"tenant-1", "tenant-2"}
    # The fleet meets τ while a tenant does not: what the fleet-wide target hides.
    assert fleet.validation_violation_rate <= 0.1 < max(ft.values())
    assert every.config.as_dict()["initial_clusters"] != fleet.config.as_dict()["initial_clusters"] or every.config.as_dict()["scheduled_spinups"] != fleet.config.as_dict()["scheduled_spinups"]
    assert max(et.values()) < max(ft.values())
    # Each tenant's rate lies on the same side of the fleet's as its share of the queries says.
    assert min(ft.values()) <= fleet.validation_violation_rate <= max(ft.values())
    with pytest.raises(ValueError, match="tau_scope` must be one of fleet, tenant"):
        T.TunerSettings(tau_scope="tenants")
    # Held-out validation records each tenant's rate, and the daily check fails on a tenant above
    # τ only when the plan was tuned to hold every tenant to it.
    fleet.config.save(tmp_path / "fleet.yaml")
    v = cycle.validate(tmp_path / "fleet.yaml", reservoir.path, day, forecasts=2, settings=base)
    assert v["tau_scope"] == "fleet" and set(v["tenant_violation_rates"]) == {"tenant-1", "tenant-2"}
    worst = max(v["tenant_violation_rates"].items(), key=lambda kv: kv[1])
    assert v["violation_rate"] <= 0.1 < worst[1]
    assert cycle.check(v) == v
    with pytest.raises(cycle.ViolationRateAboveTarget, match=f"{worst[0]} {worst[1]:.1%}"):
        cycle.check({**v, "tau_scope": "tenant"})
    # The CLI: the flag, and each tenant's simulated rate with a hint when one is above τ.
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", str(day), "--out", str(tmp_path / "c.yaml"), "--forecasts", "4", "--tau-scope", "tenant", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["report"]["validation_tenants"]) == {"tenant-1", "tenant-2"}


def test_tune_writes_a_configuration_the_cli_runs(reservoir: T.Reservoir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = T.TunerSettings(forecasts=3, eta=1, phi=1, space={"t_idle_s": [300.0, 600.0]}, initial_clusters=[[8], [16]], spinup_sizes=[16])
    day = START + dt.timedelta(days=8)
    r = T.tune(reservoir, day, settings=settings, kappa=2)
    assert r.report["tuned"] and r.report["history_days"] == 8
    assert r.report["history_age_days"] == 7, r.report["days_used"]  # the same weekday a week before
    assert r.config.provenance["day"] == day.isoformat()
    assert r.config.initial_clusters in ([8], [16])
    assert len(r.report["tuning_candidates"]) >= 2
    none = T.tune(reservoir, START, settings=settings)
    assert not none.report["tuned"] and none.config.initial_clusters == [8]
    with pytest.raises(autoslo.AutoSloCoreError, match="unknown field `bogus`"):
        T.tune(reservoir, day, settings=T.TunerSettings(space={"bogus": [1]}))
    # The simulator's cold start (a change) reaches every simulation the tuner runs, and is checked.
    cold = T.tune(reservoir, day, settings=replace(settings, simulator_cold_start_factor=5.0, simulator_cold_start_s=3600.0), kappa=2)
    assert (cold.report["validation_violation_rate"], cold.report["validation_cost"]) != (r.report["validation_violation_rate"], r.report["validation_cost"])
    with pytest.raises(autoslo.AutoSloCoreError, match="simulator_cold_start_factor.*must be ≥ 1"):
        T.tune(reservoir, day, settings=replace(settings, simulator_cold_start_factor=0.5))
    # So does its latency noise (a change).
    noisy = T.tune(reservoir, day, settings=replace(settings, simulator_noise_sigma=0.8), kappa=2)
    assert (noisy.report["validation_violation_rate"], noisy.report["validation_cost"]) != (r.report["validation_violation_rate"], r.report["validation_cost"])
    with pytest.raises(autoslo.AutoSloCoreError, match="simulator_noise_sigma.*in \\[0, 3\\]"):
        T.tune(reservoir, day, settings=replace(settings, simulator_noise_sigma=-1.0))
    # And its latency scale per class (a change); a class the workloads lack changes nothing.
    slower = T.tune(reservoir, day, settings=replace(settings, simulator_class_scale={c: 3.0 for c in ("adhoc", "backfill", "dashboard", "report")}), kappa=2)
    assert (slower.report["validation_violation_rate"], slower.report["validation_cost"]) != (r.report["validation_violation_rate"], r.report["validation_cost"])
    other = T.tune(reservoir, day, settings=replace(settings, simulator_class_scale={"etl": 3.0}), kappa=2)
    assert (other.config, other.report["validation_violation_rate"], other.report["validation_cost"]) == (r.config, r.report["validation_violation_rate"], r.report["validation_cost"])
    with pytest.raises(autoslo.AutoSloCoreError, match="simulator_class_scale.*\"backfill\".*in \\[0.05, 20\\]"):
        T.tune(reservoir, day, settings=replace(settings, simulator_class_scale={"backfill": 0.0}))
    with pytest.raises(autoslo.AutoSloCoreError, match="cost_tolerance"):
        T.tune(reservoir, day, settings=replace(settings, cost_tolerance=-0.1))

    out = tmp_path / "config.yaml"
    settings_file = tmp_path / "s.yaml"
    settings_file.write_text("eta: 1\nphi: 1\nspace: null\ninitial_clusters: [[16]]\ntau: 0.03\n")
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(out), "--forecasts", "2", "--settings", str(settings_file), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["config"]["initial_clusters"] == [16]
    # The settings file's τ is the target unless --tau is given (the option's default once overrode it).
    assert printed["config"]["autoscaler"]["tau"] == 0.03 and printed["config"]["provenance"]["tau"] == 0.03
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(out), "--forecasts", "2", "--settings", str(settings_file), "--tau", "0.2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["autoscaler"]["tau"] == 0.2
    assert T.ExecutionConfig.load(out).initial_clusters == [16]
    assert main(["emulate", "--config", str(out), "--workload", "redbench", "--queries-per-day", "1000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queries"] > 0
    assert main(["emulate", "--config", str(out), "--clusters", "16"]) == 2
    # Options the configuration sets are refused beside it, not silently ignored.
    for extra in (["--routing", "round-robin"], ["--tau", "0.05"], ["--sizes", "8,16"]):
        assert main(["emulate", "--config", str(out), "--workload", "redbench", "--queries-per-day", "1000", *extra]) == 2
        assert f"give {extra[0]} in the configuration, not beside it" in capsys.readouterr().err
    assert main(["live", "--workload", "w.parquet", "--config", str(out), "--routing", "round-robin"]) == 2
    assert "give --routing in the configuration, not beside it" in capsys.readouterr().err
    # The simulator calibrated from a trace of past executions (a change): the scales are printed.
    trace = tmp_path / "t.parquet"
    assert main(["emulate", "--workload", "redbench", "--queries-per-day", "1000", "--clusters", "16", "--trace", str(trace), "--json"]) == 0
    capsys.readouterr()
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(out), "--forecasts", "2", "--simulator-scale-from", str(trace)]) == 0
    printed_text = capsys.readouterr().out
    assert "simulator latency scale per class" in printed_text
    assert "of the history's queries have an SLO below their runtime alone on 16, 32 RPU (tenant-" in printed_text
    assert "  with 64 RPU eligible too: " in printed_text
    # Learning from a past day's plan and its trace (a change): the gap between what it ran and its
    # estimate sets the simulated target; a plan without an estimate is refused by name.
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(out), "--forecasts", "2", "--settings", str(settings_file), "--json"]) == 0
    capsys.readouterr()
    past = T.ExecutionConfig.load(out)
    estimate = past.provenance["validation_violation_rate"]
    assert T.estimate_gap(past, estimate + 0.04) == pytest.approx(0.04)
    assert T.learned_tau_simulated(0.1, 0.04) == pytest.approx(0.06)
    assert main(["emulate", "--config", str(out), "--workload", "redbench", "--queries-per-day", "1000", "--trace", str(trace), "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)["violation_rate"]
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(tmp_path / "next.yaml"), "--forecasts", "2", "--settings", str(settings_file), "--learn-from", str(out), str(trace)]) == 0
    learned = capsys.readouterr().out
    assert f"ran {ran:.2%} late against its estimate's {estimate:.2%}: simulations are held to {T.learned_tau_simulated(0.03, ran - estimate):.2%}" in learned, learned
    with pytest.raises(ValueError, match="carries no estimate"):
        T.estimate_gap(T.ExecutionConfig.fixed([16]), 0.1)
    # A day far past the reservoir is tuned from what it holds, and the command says how old that is.
    late = day + dt.timedelta(days=70)
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", late.isoformat(), "--out", str(out), "--forecasts", "2", "--settings", str(settings_file)]) == 0
    err = capsys.readouterr().err
    assert "warning: the newest history the forecasts drew from is " in err and f"days before {late}: the plan reflects that traffic" in err, err
    assert T.tune(reservoir, late, settings=settings, kappa=2).report["history_age_days"] > T.STALE_HISTORY_DAYS
    # --sizes sets the sizes scheduled spinups and the autoscaler may add.
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(out), "--forecasts", "2", "--sizes", "16,64", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["report"]["slo_out_of_reach"]["sizes"] == [16, 32, 64] and printed["config"]["autoscaler"]["sizes"] == [16, 64]  # 32: an initial set
    with pytest.raises(SystemExit):  # argparse refuses the value
        main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(out), "--sizes", "16,60"])
    assert "got 60 in '16,60'" in capsys.readouterr().err
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(out), "--simulator-scale-from", str(tmp_path / "none.parquet")]) == 2
    assert "no trace at" in capsys.readouterr().err
    settings_file.write_text("etta: 1\n")
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(out), "--settings", str(settings_file)]) == 2
    assert "etta" in capsys.readouterr().err


def test_class_latency_scale_is_each_class_s_geometric_mean_latency_over_prediction() -> None:
    w = autoslo.redbench_workload(days=1, seed=3, queries_per_day=3000, tenants=2, kappa=2)
    run = autoslo.emulate(w, clusters=[16], seed=3)
    p = autoslo.predictor.load()
    scale = T.class_latency_scale(run.trace, p)
    # Recomputed here from the predictor's own per-query predictions on the same executions.
    r = p.predict_trace(run.trace)
    ok = ~r["censored"]
    by_id = dict(zip(run.trace["query_id"].to_pylist(), run.trace["class"].to_pylist()))
    cls = np.array([by_id[int(q)] for q in r["query_id"]], dtype=object)[ok]
    resid = (r["ln_label"] - r["ln_pred"])[ok]
    assert set(scale) == {c for c in set(cls.tolist()) if (cls == c).sum() >= 30}
    for c, v in scale.items():
        assert v == pytest.approx(float(np.exp(resid[cls == c].mean())), rel=1e-6)
        assert 0.85 < v < 1.2, (c, v)  # the bundled model is within 20 % of the emulator on every class (0.97-1.11 when written)
    # Classes with too few scored queries are left out.
    fewest = min((cls == c).sum() for c in scale)
    assert set(T.class_latency_scale(run.trace, p, min_queries=int(fewest) + 1)) < set(scale)
    with pytest.raises(ValueError, match="no `class` column"):
        T.class_latency_scale(run.trace.drop_columns(["class"]), p)
    with pytest.raises(ValueError, match="min_queries"):
        T.class_latency_scale(run.trace, p, min_queries=0)


def test_reservoir_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = tmp_path / "w.parquet"
    assert main(["workload", "--workload", "redbench", "--days", "2", "--queries-per-day", "500", "--out", str(wl)]) == 0
    capsys.readouterr()
    assert main(["reservoir", "add", "--reservoir", str(tmp_path / "r"), "--log", str(wl), "--start-date", "2024-04-01"]) == 0
    assert json.loads(capsys.readouterr().out)["days_written"] == ["2024-04-01", "2024-04-02"]
    assert main(["reservoir", "show", "--reservoir", str(tmp_path / "r"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["day"] for r in rows] == ["2024-04-01", "2024-04-02"]
    assert sum(r["queries"] for r in rows) == pq.read_table(wl).num_rows
    assert main(["reservoir", "add", "--reservoir", str(tmp_path / "r"), "--log", str(wl)]) == 2
    assert "start date" in capsys.readouterr().err
    # Adding the same log twice is refused; --replace re-ingests its days.
    assert main(["reservoir", "add", "--reservoir", str(tmp_path / "r"), "--log", str(wl), "--start-date", "2024-04-01"]) == 2
    assert "already holds these rows for 2024-04-01, 2024-04-02" in capsys.readouterr().err
    assert main(["reservoir", "add", "--reservoir", str(tmp_path / "r"), "--log", str(wl), "--start-date", "2024-04-01", "--replace"]) == 0
    assert T.Reservoir(tmp_path / "r").queries() == pq.read_table(wl).num_rows


def test_eligible_sizes_are_every_size_a_tuned_configuration_may_run() -> None:
    assert T.TunerSettings().eligible_sizes() == [16, 32]
    s = T.TunerSettings(initial_clusters=[[8], [8, 16]], spinup_sizes=[64], autoscaler={"sizes": [32]})
    assert s.eligible_sizes() == [8, 16, 32, 64]
    assert T.TunerSettings(space={"initial_clusters": [[128]]}).eligible_sizes() == [16, 32, 128]
    assert T.TunerSettings(initial_clusters=[[8]], spinup_sizes=[16], autoscaler=None).eligible_sizes() == [8, 16]


def test_simulator_fidelity_sets_the_simulated_day_beside_the_observed_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autoslo.fidelity import simulator_fidelity

    w = autoslo.redbench_workload(days=1, seed=6, queries_per_day=2000, tenants=2, kappa=2)
    cfg = T.ExecutionConfig({"initial_clusters": [16], "autoscaler": {"policy": "autoslo", "sizes": [16, 32]}})
    run = autoslo.emulate(w, config=cfg, seed=6)
    out = simulator_fidelity(run.trace, cfg)
    o = out["overall"]
    assert o["queries"] == run.queries == sum(r["queries"] for r in out["per_class"])
    assert o["observed_violation_rate"] == pytest.approx(run.violation_rate)
    assert o["observed_cost"] == pytest.approx(run.cost)
    # The simulated side is the simulator's own run of the same queries under the same configuration.
    sim = autoslo.simulate(w, config=cfg)
    assert o["simulated_violation_rate"] == pytest.approx(sim.violation_rate) and o["simulated_cost"] == pytest.approx(sim.cost)
    assert o["violation_rate_gap"] == pytest.approx(o["simulated_violation_rate"] - o["observed_violation_rate"])
    assert {r["class"] for r in out["per_class"]} == set(w["class"].to_pylist())
    assert all(r["latency_scale"] == out["latency_scale"].get(r["class"]) for r in out["per_class"])
    assert {r["tenant"] for r in out["per_tenant"]} == set(w["tenant"].to_pylist()) and sum(r["queries"] for r in out["per_tenant"]) == run.queries
    with pytest.raises(ValueError, match="lacks slo"):
        simulator_fidelity(run.trace.drop_columns(["slo"]), cfg)
    # The command line prints the table and the verdict.
    trace, config = tmp_path / "day.parquet", tmp_path / "c.yaml"
    pq.write_table(run.trace, trace)
    cfg.save(config)
    assert main(["fidelity", "--config", str(config), "--trace", str(trace)]) == 0
    printed = capsys.readouterr().out
    assert "simulated VR" in printed and "the Workload Simulator is" in printed
    assert main(["fidelity", "--config", str(config), "--trace", str(trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["queries"] == run.queries


def test_a_serving_log_reads_as_the_trace_of_the_day_it_served(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a serving control plane logs (``Service.take_served``, ``autoslo serve --log``) is
    read as a trace by the fidelity check, the daily cycle's record of it, and predictor
    training: here an emulated day written in the serving log's form."""
    from autoslo.airflow import record_fidelity
    from autoslo.fidelity import simulator_fidelity
    from autoslo.predictor import from_traces
    from autoslo.traces import from_served

    w = autoslo.redbench_workload(days=1, seed=6, queries_per_day=800, tenants=2, kappa=2)
    cfg = T.ExecutionConfig({"initial_clusters": [16, 16], "autoscaler": None, "routing": "round-robin"})
    t = autoslo.emulate(w, config=cfg, seed=6).trace
    day = dt.date(2026, 12, 5)
    midnight = dt.datetime(2026, 12, 5, tzinfo=dt.timezone.utc).timestamp()
    stamps = np.round((midnight + t["arrival"].to_numpy()) * 1e6).astype(np.int64)
    served = pa.table(
        {
            "query_id": t["query_id"],
            "arrival": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            "arrival_s": t["arrival"],
            **{c: t[c] for c in ("template", "instance", "tenant", "class", "slo", "cluster_id", "cluster_size", "latency", "outcome", "met")},
        }
    )
    back = from_served(served)
    assert np.allclose(back["arrival"].to_numpy(), t["arrival"].to_numpy(), atol=1e-5) and back["query_id"].equals(t["query_id"])
    ran = pc.equal(t["outcome"], "completed")
    assert np.allclose(back.filter(ran)["end"].to_numpy(), t.filter(ran)["end"].to_numpy(), atol=1e-5)
    assert back["censored"].to_pylist() == pc.equal(t["outcome"], "timeout").to_pylist()
    assert from_served(served, day=day).num_rows == t.num_rows
    with pytest.raises(ValueError, match="no query of 2026-12-06"):
        from_served(served, day=day + dt.timedelta(days=1))
    # The fidelity check: the same day, the same verdict. A log without per-query costs (written
    # before the service priced its queries) has no observed cost; one with them, their sum.
    as_trace, as_served = simulator_fidelity(t, cfg)["overall"], simulator_fidelity(served, cfg)["overall"]
    for k in ("queries", "observed_violation_rate", "simulated_violation_rate", "simulated_cost"):
        assert as_served[k] == pytest.approx(as_trace[k]), k
    assert as_served["observed_cost"] is None and as_trace["observed_cost"] > 0
    priced = simulator_fidelity(served.append_column("cost", t["cost"]), cfg)["overall"]
    assert priced["observed_cost"] == pytest.approx(as_trace["observed_cost"])
    # The directory `autoslo serve --log` writes, in two parts: the command line and the daily cycle.
    parts = tmp_path / "served"
    parts.mkdir()
    half = served.num_rows // 2
    pq.write_table(served.slice(0, half), parts / "served-1.parquet")
    pq.write_table(served.slice(half), parts / "served-2.parquet")
    cfg.save(tmp_path / "c.yaml")
    assert main(["fidelity", "--config", str(tmp_path / "c.yaml"), "--trace", str(parts)]) == 0
    assert "not per query" in capsys.readouterr().out
    (tmp_path / "published").mkdir()
    cfg.save(tmp_path / "published" / f"{day}.yaml")
    rec = record_fidelity(parts, tmp_path / "published", day, tmp_path / "staging")
    assert rec["overall"]["observed_violation_rate"] == pytest.approx(as_trace["observed_violation_rate"])
    # Predictor training from what the warehouse ran for the clients.
    ts = from_traces([served])
    assert ts.train.num_rows + ts.val.num_rows + ts.test.num_rows == pc.sum(pc.is_in(t["outcome"], pa.array(["completed", "timeout"]))).as_py()


@pytest.mark.parametrize("scale", [{"backfill": float("inf")}, {"backfill": "2"}, {1: 2.0}, [("backfill", 2.0)]])
def test_tuner_settings_refuse_a_class_scale_that_is_not_names_to_finite_numbers(scale: object) -> None:
    with pytest.raises(ValueError, match="simulator_class_scale"):
        T.TunerSettings(simulator_class_scale=scale)  # type: ignore[arg-type]
