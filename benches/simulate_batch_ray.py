"""SimulateBatch on rayon and on a local Ray cluster (issue: scale-out), and Ray's cost per task.

The batch is the tuner benchmark's (``benches/tuner.rs``): 20 Redbench-like weekdays truncated to
15k queries each, for a fixed 2 × 32 RPU configuration and for one 16 RPU cluster with the AutoSLO
autoscaler. Each is timed on rayon (this machine's cores, inside the core) and on Ray
(``ray.init(num_cpus=CPUS)`` on this machine, one task per workload), median of ``--repeats``.
Ray's cost per task is measured twice: as the wall time of many near-empty tasks (one 10-query
workload each) divided by their number, and as (Ray − rayon) / tasks on the real batch.

Run with ``make bench-ray`` (``python benches/simulate_batch_ray.py --json`` prints JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import pyarrow as pa
import ray

import autoslo
from autoslo import tuner as T
from autoslo.ray_backend import RayBackend


def workloads(n: int, queries: int) -> list[pa.Table]:
    return [autoslo.redbench_workload(days=1, seed=s, queries_per_day=queries * 1.1, tenants=4, start_weekday=1).slice(0, queries) for s in range(n)]


def timed(f: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=20)
    ap.add_argument("--queries", type=int, default=15_000)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tiny-tasks", dest="tiny_tasks", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ray.init(num_cpus=a.cpus, include_dashboard=False, logging_level="warning", log_to_driver=False)
    ws = workloads(a.workloads, a.queries)
    configs = {"fixed_2x32": T.ExecutionConfig({"initial_clusters": [32, 32], "autoscaler": None}), "autoscaled_from_16": T.ExecutionConfig({"initial_clusters": [16], "autoscaler": {}})}
    backend = RayBackend(chunk_size=1)
    rows = []
    for name, cfg in configs.items():
        T.simulate_batch([cfg], ws[:1], backend=backend)  # warm: workers started, predictor loaded
        rayon = timed(lambda: T.simulate_batch([cfg], ws), a.repeats)
        on_ray = timed(lambda: T.simulate_batch([cfg], ws, backend=backend), a.repeats)
        assert T.simulate_batch([cfg], ws, backend=backend) == T.simulate_batch([cfg], ws), "Ray and rayon disagree"
        rows.append({"config": name, "batch": f"{a.workloads}x{a.queries}", "rayon_s": rayon, "ray_s": on_ray, "tasks": a.workloads, "ray_minus_rayon_per_task_ms": 1000 * (on_ray - rayon) / a.workloads})
    tiny = [autoslo.base_workload(0.01, seed=s, kappa=2).slice(0, 10) for s in range(a.tiny_tasks)]
    cfg = configs["fixed_2x32"]
    T.simulate_batch([cfg], tiny, backend=backend)  # put the tiny workloads once
    tiny_ray = timed(lambda: T.simulate_batch([cfg], tiny, backend=backend), a.repeats)
    tiny_rayon = timed(lambda: T.simulate_batch([cfg], tiny), a.repeats)
    out = {
        "cpus": a.cpus,
        "ray": ray.__version__,
        "batches": rows,
        "tiny_tasks": a.tiny_tasks,
        "tiny_ray_ms_per_task": 1000 * tiny_ray / a.tiny_tasks,
        "tiny_rayon_ms_per_job": 1000 * tiny_rayon / a.tiny_tasks,
    }
    ray.shutdown()
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"SimulateBatch on {a.cpus} CPUs (Ray {out['ray']}), median of {a.repeats}:")
    for r in rows:
        print(f"  {r['config']:>20} {r['batch']}: rayon {r['rayon_s']:.2f} s, Ray {r['ray_s']:.2f} s ({r['tasks']} tasks; {r['ray_minus_rayon_per_task_ms']:+.1f} ms per task)")
    print(f"  Ray's cost per task: {out['tiny_ray_ms_per_task']:.2f} ms ({a.tiny_tasks} near-empty tasks; rayon {out['tiny_rayon_ms_per_job']:.3f} ms per job)")


if __name__ == "__main__":
    main()
