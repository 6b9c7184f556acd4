"""``autoslo demo``: the main job.

For now: one Redbench-like weekday, emulated on a few fixed cluster configurations with round-robin
routing, reported fleet-wide and per tenant × class (a green fleet can hide a red tenant). Later
issues turn this into the full AutoSLO day against the paper's baselines.
"""

from __future__ import annotations

import json

from tqdm.auto import tqdm

from autoslo.emulation import emulate
from autoslo.tables import fmt_table
from autoslo.workloads import redbench_workload

CONFIGURATIONS: list[list[int]] = [[16], [16, 16], [32, 16], [32, 32], [32, 32, 32, 32]]


def run_demo(queries_per_day: float = 20_000, seed: int = 1, kappa: float = 4.0, as_json: bool = False) -> int:
    """Emulate the day on every configuration and print the comparison. Returns an exit code."""

    wl = redbench_workload(days=1, seed=seed, queries_per_day=queries_per_day, tenants=4, kappa=kappa)
    fleet, groups = [], []
    for sizes in tqdm(CONFIGURATIONS, desc="configurations", unit="config"):
        name = "+".join(str(s) for s in sizes)
        r = emulate(wl, sizes, seed=seed)
        fleet.append({"config": name, **r.summary()})
        for g in r.per_tenant_class().to_pylist():
            groups.append({"config": name, **g})
    if as_json:
        print(json.dumps({"fleet": fleet, "per_tenant_class": groups}))
        return 0
    print(f"One Redbench-like weekday: {wl.num_rows} queries, 4 tenants, SLO = {kappa} x baseline, round-robin routing\n")
    print(fmt_table(fleet, ["config", "queries", "violation_rate", "timeouts", "cost"]))
    print("\nPer tenant x class (attributed cost sums to the billed cost):")
    print(fmt_table(groups, ["config", "tenant", "class", "queries", "violation_rate", "latency_p95", "cost"]))
    worst = max(groups, key=lambda g: g["violation_rate"])
    print(f"\nWorst tenant x class: {worst['tenant']}/{worst['class']} on {worst['config']} at {worst['violation_rate']:.1%} violations")
    return 0
