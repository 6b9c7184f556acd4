"""SimulateBatch on Ray: the same results as rayon, workloads put once, a killed worker retried."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import psutil
import ray

import autoslo
from autoslo import tuner as T
from autoslo.cli import main
from autoslo.ray_backend import RayBackend, backend_for

# One Ray batch is in the default tier (test_simulate_batch_on_ray_equals_rayon_...); the rest
# of the Ray runs are `scaleout`.

START = dt.date(2024, 4, 1)  # a Monday


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def reservoir(tmp_path_factory: pytest.TempPathFactory) -> T.Reservoir:
    r = T.Reservoir(tmp_path_factory.mktemp("reservoir"))
    r.append(autoslo.redbench_workload(days=8, seed=5, queries_per_day=1500, tenants=2, kappa=2), start_date=START)
    return r


def configs() -> list[T.ExecutionConfig]:
    return [T.ExecutionConfig.fixed([16]), T.ExecutionConfig.fixed([8, 8], routing="round-robin"), T.ExecutionConfig({"initial_clusters": [8], "scheduled_spinups": [{"at_s": 600.0, "size": 16}], "autoscaler": {}})]


def test_simulate_batch_on_ray_equals_rayon_and_puts_each_workload_once() -> None:
    ws = [autoslo.base_workload(0.3, seed=s, kappa=2) for s in range(3)]
    local = T.simulate_batch(configs(), ws, keep_logs=True)
    backend = RayBackend(chunk_size=2)
    remote = T.simulate_batch(configs(), ws, keep_logs=True, backend=backend)
    assert remote == local
    assert backend.tasks_submitted == 5 and backend.workloads_put == 3  # 9 jobs in chunks of 2
    again = T.simulate_batch(configs()[:1], ws, backend=backend)
    assert [o["cost"] for o in again[0]] == [o["cost"] for o in local[0]]
    assert backend.workloads_put == 3  # the same workloads are not put again


@pytest.mark.scaleout
def test_tune_on_ray_gives_the_rayon_configuration(reservoir: T.Reservoir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = T.TunerSettings(forecasts=3, eta=1, phi=1, space={"t_idle_s": [300.0, 600.0]}, initial_clusters=[[8], [16]], spinup_sizes=[16])
    day = START + dt.timedelta(days=8)
    local = T.tune(reservoir, day, settings=settings)
    backend = RayBackend()
    remote = T.tune(reservoir, day, settings=settings, backend=backend)
    assert remote.config == local.config
    assert remote.report["validation_violation_rate"] == local.report["validation_violation_rate"]
    assert remote.report["simulations"] == local.report["simulations"]
    assert remote.report["backend"] == "ray" and local.report["backend"] == "rayon"
    assert backend.workloads_put == 3  # the three forecasts, put once for every batch of the tuning

    out = tmp_path / "c.yaml"
    assert main(["tune", "--reservoir", str(reservoir.path), "--day", day.isoformat(), "--out", str(out), "--forecasts", "2", "--backend", "ray", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["report"]["backend"] == "ray"


@pytest.mark.scaleout
@pytest.mark.parametrize(
    "change",
    [{"simulator_cold_start_factor": 5.0, "simulator_cold_start_s": 3600.0}, {"simulator_noise_sigma": 0.8}, {"simulator_class_scale": {c: 3.0 for c in ("adhoc", "backfill", "dashboard", "report")}}],
    ids=["cold-start", "latency-noise", "class-scale"],
)
def test_the_simulator_changes_travel_to_the_workers(reservoir: T.Reservoir, change: dict[str, Any]) -> None:
    settings = T.TunerSettings(forecasts=3, eta=1, phi=1, space={"t_idle_s": [300.0]}, initial_clusters=[[8]], spinup_sizes=[16])
    changed = replace(settings, **change)
    day = START + dt.timedelta(days=8)
    plain = T.tune(reservoir, day, settings=settings)
    local = T.tune(reservoir, day, settings=changed)
    remote = T.tune(reservoir, day, settings=changed, backend=RayBackend())
    assert remote.report["backend"] == "ray"
    assert (remote.config, remote.report["validation_violation_rate"], remote.report["validation_cost"]) == (local.config, local.report["validation_violation_rate"], local.report["validation_cost"])
    # The change changed the simulations, so the workers did not drop it.
    assert (local.report["validation_violation_rate"], local.report["validation_cost"]) != (plain.report["validation_violation_rate"], plain.report["validation_cost"])


def _chunk_workers() -> list[psutil.Process]:
    """Ray workers running a SimulateBatch chunk (Ray titles a busy worker ``ray::<task>``)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith("ray::_simulate_chunk"):
            found.append(p)
    return found


@pytest.mark.scaleout
def test_a_killed_worker_is_retried_and_the_result_is_unchanged() -> None:
    ws = [autoslo.base_workload(0.6, seed=10 + s, kappa=2) for s in range(4)]
    cfgs = configs()[:2]
    local = T.simulate_batch(cfgs, ws)
    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            for p in _chunk_workers():
                os.kill(p.pid, signal.SIGKILL)
                killed.append(p.pid)
                return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_one)
    killer.start()
    remote = T.simulate_batch(cfgs, ws, backend=RayBackend(chunk_size=1))
    killer.join()
    assert killed, "no running chunk was found to kill"
    assert remote == local


def test_backend_names_and_settings_are_checked() -> None:
    assert backend_for(None) is None and backend_for("rayon") is None
    assert isinstance(backend_for("ray"), RayBackend)
    with pytest.raises(ValueError, match="unknown SimulateBatch backend 'dask'"):
        backend_for("dask")
    with pytest.raises(ValueError, match="chunk_size must be ≥ 1"):
        RayBackend(chunk_size=0)


@pytest.mark.scaleout
def test_the_hindsight_search_on_ray_finds_the_rayon_plan() -> None:
    from autoslo.hindsight import best_plan_in_hindsight

    day = autoslo.base_workload(0.2, seed=4, kappa=4)
    given = [T.ExecutionConfig({"initial_clusters": [16]})]
    local = best_plan_in_hindsight(day, given=given, plans=24, seed=4, progress=False)
    backend = RayBackend(chunk_size=5)
    remote = best_plan_in_hindsight(day, given=given, plans=24, seed=4, backend=backend, progress=False)
    assert remote.plans == local.plans
    assert remote.best == local.best and remote.cost == local.cost and remote.violation_rate == local.violation_rate
    assert backend.tasks_submitted >= 5  # the given plan alone, then the rest in chunks of 5
