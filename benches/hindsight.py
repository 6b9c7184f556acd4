"""The search for the best plan in hindsight on one 20k-query day (issue: spend the SLO budget).

The day is ``autoslo demo``'s (a Redbench-like Tuesday, 4 tenants, about 20k queries, κ = 4,
seed 1); the plan judged is the untuned one (one 16 RPU cluster with the AutoSLO autoscaler),
emulated first. The search emulates ``--plans`` plans on rayon (this machine's cores) and prints
the wall time, the plans per second, how many ran to the end and how many the bound cut (for
lateness, for cost), and the seconds spent per plan by where it came from.

Run with ``make bench-hindsight`` (``python benches/hindsight.py --json`` prints JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from typing import Any

import autoslo
from autoslo.hindsight import best_plan_in_hindsight
from autoslo.tuner import ExecutionConfig
from autoslo.workloads import window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, default=500)
    ap.add_argument("--queries-per-day", type=float, default=20_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    week = autoslo.redbench_workload(days=9, seed=1, queries_per_day=args.queries_per_day, tenants=4, kappa=4)
    day = window(week, 8 * 86_400.0, 9 * 86_400.0)
    given = ExecutionConfig({"initial_clusters": [16], "autoscaler": {"sizes": [16, 32]}})
    t = time.perf_counter()
    r = best_plan_in_hindsight(day, given=[given], plans=args.plans, seed=1, search_seed=1, progress=not args.json)
    wall = time.perf_counter() - t
    rows = r.outcomes.to_pylist()
    by_origin: dict[str, list[float]] = defaultdict(list)
    for x in rows:
        by_origin[x["origin"]].append(x["seconds"])
    out: dict[str, Any] = {
        "queries": day.num_rows,
        "cores": os.cpu_count(),
        "plans": len(rows),
        "wall_s": wall,
        "plans_per_s": len(rows) / wall,
        **{k: v for k, v in r.summary().items() if k in ("finished", "cut_violations", "cut_cost", "hindsight_cost", "hindsight_violation_rate")},
        "plan_seconds_by_origin": {o: {"plans": len(s), "mean_s": sum(s) / len(s), "total_s": sum(s)} for o, s in by_origin.items()},
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"{out['plans']} plans on a {out['queries']}-query day, {out['cores']} cores: {wall:.1f} s ({out['plans_per_s']:.2f} plans/s)")
    print(f"  to the end {out['finished']}, cut for lateness {out['cut_violations']}, for cost {out['cut_cost']}")
    print(f"  best: ${out['hindsight_cost']:.2f} at {out['hindsight_violation_rate']:.2%}")
    for o, s in out["plan_seconds_by_origin"].items():
        print(f"  {o}: {s['plans']} plans, {s['mean_s']:.2f} s each ({s['total_s']:.0f} s of CPU)")


if __name__ == "__main__":
    main()
