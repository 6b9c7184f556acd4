"""The daily tuning cycle: task functions, and the example DAG end to end under Airflow's
``dag.test()`` for two consecutive days, a re-run, and the alert."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import autoslo
from autoslo import airflow as A
from autoslo import tuner as T

ROOT = Path(__file__).resolve().parents[1]
START = dt.date(2024, 4, 1)  # a Monday
DAY_S = 86_400.0

RUNNER = """
import datetime as dt, runpy, sys
dag = runpy.run_path(sys.argv[1])["dag"]
run = dag.test(logical_date=dt.datetime.fromisoformat(sys.argv[2]).replace(tzinfo=dt.timezone.utc))
print("DAG RUN STATE", run.state)
"""


def day_log(full: pa.Table, k: int) -> pa.Table:
    """Day ``k`` of a multi-day workload, arrivals in seconds from that day's midnight."""
    rows = full.filter(pc.and_(pc.greater_equal(full["arrival"], k * DAY_S), pc.less(full["arrival"], (k + 1) * DAY_S)))
    return rows.set_column(rows.schema.get_field_index("arrival"), "arrival", pc.subtract(rows["arrival"], k * DAY_S))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Seven days in the reservoir, and the query logs of days 8 and 9 waiting to be ingested."""
    root = tmp_path_factory.mktemp("cycle")
    full = autoslo.redbench_workload(days=9, seed=6, queries_per_day=1200, tenants=2, kappa=2)
    reservoir = T.Reservoir(root / "reservoir")
    reservoir.append(full.filter(pc.less(full["arrival"], 7 * DAY_S)), start_date=START)
    (root / "logs").mkdir()
    for k in (7, 8):
        pq.write_table(day_log(full, k), root / "logs" / f"{START + dt.timedelta(days=k)}.parquet")
    (root / "settings.yaml").write_text("tau: 0.5\nforecasts: 3\neta: 1\nphi: 1\nspace: null\ninitial_clusters: [[16]]\nforecast_policy: equal-7-day\n")
    return {"root": root, "reservoir": root / "reservoir", "log": root / "logs" / "{ds}.parquet", "publish": root / "published", "settings": root / "settings.yaml"}


def test_task_functions_run_the_cycle_and_are_idempotent(world: dict[str, Path], tmp_path: Path) -> None:
    reservoir = tmp_path / "reservoir"
    shutil.copytree(world["reservoir"], reservoir)
    d1 = START + dt.timedelta(days=7)
    first = A.ingest(reservoir, world["log"], d1)
    again = A.ingest(reservoir, world["log"], d1)
    assert first == again and first["days_stored"] == 8  # re-ingesting the day adds no rows
    with pytest.raises(FileNotFoundError, match="no query log"):
        A.ingest(reservoir, world["log"], d1 + dt.timedelta(days=5))
    # The same day logged as a warehouse keeps it, with timestamps (CSV, ISO 8601, no start date),
    # stores the same counts.
    log = pq.read_table(str(world["log"]).replace("{ds}", d1.isoformat()))
    midnight = dt.datetime.combine(d1, dt.time(), dt.timezone.utc)
    stamped = log.set_column(log.schema.get_field_index("arrival"), "arrival", pa.array([(midnight + dt.timedelta(seconds=a)).isoformat() for a in log["arrival"].to_pylist()]))
    pcsv.write_csv(stamped, tmp_path / "stamped.csv")
    other = tmp_path / "stamped-reservoir"
    shutil.copytree(world["reservoir"], other)
    assert A.ingest(other, tmp_path / "stamped.csv", d1)["queries_stored"] == first["queries_stored"]
    assert T.Reservoir(other).tables([d1])[0].equals(T.Reservoir(reservoir).tables([d1])[0])
    staging = tmp_path / "staging" / "c.yaml"
    plan = d1 + dt.timedelta(days=1)
    with pytest.raises(FileNotFoundError, match="no Workload Reservoir"):  # a mistyped path is not an empty history
        A.tune_day(tmp_path / "reservoir-typo", plan, staging, settings=world["settings"])
    assert not (tmp_path / "reservoir-typo").exists() and not staging.exists()
    tuned = A.tune_day(reservoir, plan, staging, settings=world["settings"])
    assert tuned["tuned"] and d1.isoformat() in tuned["days_used"]
    # The report on disk says which of the history's SLOs no eligible size can meet, per tenant.
    on_disk = json.loads(Path(f"{staging}.report.json").read_text())
    assert on_disk == json.loads(json.dumps(tuned)) and set(on_disk["slo_out_of_reach"]) >= {"sizes", "share", "per_tenant", "with_larger"}
    v = A.validate(staging, reservoir, plan, settings=world["settings"], forecasts=2)
    assert v["validated"] and v["forecasts"] == 2 and 0 <= v["violation_rate"] <= 1
    published = A.publish(staging, tmp_path / "pub", plan)
    assert A.published_config(tmp_path / "pub") == A.published_config(tmp_path / "pub", plan) == T.ExecutionConfig.load(staging)
    # Re-publishing an older day does not make it current.
    A.publish(staging, tmp_path / "pub", plan - dt.timedelta(days=3))
    assert (A.published_config(tmp_path / "pub").provenance or {})["day"] == plan.isoformat()
    assert published["current"] is not None
    assert A.check(v) == v
    # The day the published configuration ran: its trace replayed in the simulator, recorded beside.
    ran = autoslo.emulate(pq.read_table(str(world["log"]).replace("{ds}", plan.isoformat())), config=A.published_config(tmp_path / "pub", plan), seed=1)
    traces = tmp_path / "traces"
    traces.mkdir()
    pq.write_table(ran.trace, traces / f"{plan}.parquet")
    f = A.record_fidelity(traces / "{ds}.parquet", tmp_path / "pub", plan, tmp_path / "staging")
    assert f["overall"]["queries"] == ran.queries and f["overall"]["observed_violation_rate"] == pytest.approx(ran.violation_rate)
    assert json.loads((tmp_path / "staging" / f"{plan}.fidelity.json").read_text()) == json.loads(json.dumps(f))
    # The next day's tuning learns how much later the published plan ran than its estimate.
    gap = A.latest_gap(tmp_path / "staging", tmp_path / "pub", plan + dt.timedelta(days=1))
    assert gap is not None and gap[0].endswith(f"{plan}.fidelity.json")
    estimate = (A.published_config(tmp_path / "pub", plan).provenance or {})["validation_violation_rate"]
    assert gap[1] == pytest.approx(ran.violation_rate - estimate)
    assert A.latest_gap(tmp_path / "staging", tmp_path / "pub", plan + dt.timedelta(days=1 + A.GAP_MAX_AGE_DAYS)) is None, "too old"
    nxt = A.tune_day(reservoir, plan + dt.timedelta(days=1), tmp_path / "staging" / "n.yaml", settings=world["settings"], fidelity_dir=tmp_path / "staging", publish_dir=tmp_path / "pub")
    assert nxt["estimate_gap"]["gap"] == pytest.approx(gap[1])
    # A plain query log, or a day no configuration was published for, is recorded as skipped.
    assert "not a trace" in A.record_fidelity(world["log"], tmp_path / "pub", plan, tmp_path / "staging")["skipped"]
    assert "no configuration was published" in A.record_fidelity(traces / "{ds}.parquet", tmp_path / "pub-none", plan, tmp_path / "staging")["skipped"]
    with pytest.raises(A.ViolationRateAboveTarget, match="above the target τ"):
        A.check({**v, "violation_rate": 0.2, "worst_violation_rate": 0.3}, tau=0.1)


def _run_dag(world: dict[str, Path], env: dict[str, str], day: dt.date) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUNNER, str(Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / "autoslo_daily.py"), day.isoformat()], env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.scaleout
def test_the_example_dag_runs_two_days_reruns_and_alerts(world: dict[str, Path], tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "examples" / "airflow" / "autoslo_daily.py", dags)
    reservoir = tmp_path / "reservoir"
    shutil.copytree(world["reservoir"], reservoir)
    publish = tmp_path / "published"
    settings = tmp_path / "settings.yaml"
    shutil.copy(world["settings"], settings)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AUTOSLO_RESERVOIR": str(reservoir),
        "AUTOSLO_QUERY_LOG": str(world["log"]),
        "AUTOSLO_PUBLISH_DIR": str(publish),
        "AUTOSLO_TUNER_SETTINGS": str(settings),
    }
    migrate = subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True, timeout=600)
    assert migrate.returncode == 0, migrate.stderr[-3000:]

    d1, d2 = START + dt.timedelta(days=7), START + dt.timedelta(days=8)
    for d in (d1, d2):
        r = _run_dag(world, env, d)
        assert "DAG RUN STATE success" in r.stdout, (r.stdout + r.stderr)[-5000:]
    plan1, plan2 = d1 + dt.timedelta(days=1), d2 + dt.timedelta(days=1)
    first = (publish / f"{plan1}.yaml").read_text()
    report2 = json.loads((publish / "staging" / f"{plan2}.yaml.report.json").read_text())
    # The second day's configuration was tuned on a history holding the first day's ingest.
    assert d1.isoformat() in report2["days_used"] and report2["history_days"] == 9
    # The logs are plain query logs: the fidelity record says so.
    assert "not a trace" in json.loads((publish / "staging" / f"{d2}.fidelity.json").read_text())["skipped"]
    assert (A.published_config(publish).provenance or {})["day"] == plan2.isoformat()
    counts_before = T.Reservoir(reservoir).queries()

    # Re-running the first day gives the same configuration, adds no reservoir rows, and leaves
    # the later day current.
    r = _run_dag(world, env, d1)
    assert "DAG RUN STATE success" in r.stdout, (r.stdout + r.stderr)[-5000:]
    assert (publish / f"{plan1}.yaml").read_text() == first
    assert T.Reservoir(reservoir).queries() == counts_before
    assert (A.published_config(publish).provenance or {})["day"] == plan2.isoformat()

    # A target no configuration meets: the run fails with the alert's message.
    settings.write_text(settings.read_text().replace("tau: 0.5", "tau: 0.0"))
    r = _run_dag(world, env, d2)
    assert "DAG RUN STATE failed" in r.stdout, (r.stdout + r.stderr)[-5000:]
    assert "above the target τ = 0.0%" in r.stdout + r.stderr
