"""``autoslo demo``: the main job on one Redbench-like weekday.

The day runs on fixed cluster configurations (round robin, and AutoSLO's Query Router), then with
the cluster set changed during the day: AutoSLO's Autoscaler (Router + Algorithms 2–3, from one
16 RPU cluster), and the scaling users pick today (Snowflake's standard multi-cluster policy and a
RAIS-like price-performance scaler, both with least-outstanding-work routing). Results are reported
fleet-wide and per tenant × class (a green fleet can hide a red tenant), with the clusters the
autoscaler spun up and tore down.
"""

from __future__ import annotations

import json
from collections import Counter

from tqdm.auto import tqdm

from autoslo.autoscaler import AutoscalerConfig
from autoslo.emulation import emulate
from autoslo.tables import fmt_table
from autoslo.workloads import redbench_workload

#: (name, initial clusters, routing, autoscaler) in the order shown.
RUNS: list[tuple[str, list[int], str, AutoscalerConfig | None]] = [
    ("fixed 16+16, round robin", [16, 16], "round-robin", None),
    ("fixed 32+32, round robin", [32, 32], "round-robin", None),
    ("fixed 32+32, autoslo router", [32, 32], "autoslo", None),
    ("snowflake-standard from 16", [16], "least-work", AutoscalerConfig(policy="snowflake-standard")),
    ("rais (balanced) from 16", [16], "least-work", AutoscalerConfig(policy="rais", sizes=(8, 16, 32))),
    ("autoslo autoscaler from 16", [16], "autoslo", AutoscalerConfig(policy="autoslo", sizes=(8, 16, 32))),
]


def run_demo(queries_per_day: float = 20_000, seed: int = 1, kappa: float = 4.0, as_json: bool = False) -> int:
    """Emulate the day under every configuration and print the comparison. Returns an exit code."""

    wl = redbench_workload(days=1, seed=seed, queries_per_day=queries_per_day, tenants=4, kappa=kappa)
    fleet, groups, scaled = [], [], {}
    for name, sizes, routing, autoscaler in tqdm(RUNS, desc="configurations", unit="config"):
        r = emulate(wl, sizes, seed=seed, routing=routing, autoscaler=autoscaler)
        events = r.events.to_pylist()
        spinups = [e for e in events if e["event"] == "spinup"]
        teardowns = [e for e in events if e["event"] == "teardown"]
        fleet.append({"config": name, **r.summary(), "spinups": len(spinups), "teardowns": len(teardowns)})
        for g in r.per_tenant_class().to_pylist():
            groups.append({"config": name, **g})
        if autoscaler is not None:
            scaled[name] = events
    if as_json:
        print(json.dumps({"fleet": fleet, "per_tenant_class": groups, "cluster_events": scaled}))
        return 0
    print(f"One Redbench-like weekday: {wl.num_rows} queries, 4 tenants, SLO = {kappa} x baseline\n")
    print(fmt_table(fleet, ["config", "queries", "violation_rate", "timeouts", "cost", "clusters", "spinups", "teardowns"]))
    print("\nPer tenant x class (attributed cost sums to the billed cost):")
    print(fmt_table(groups, ["config", "tenant", "class", "queries", "violation_rate", "latency_p95", "cost"]))
    worst = max(groups, key=lambda g: g["violation_rate"])
    print(f"\nWorst tenant x class: {worst['tenant']}/{worst['class']} on {worst['config']} at {worst['violation_rate']:.1%} violations")
    name = RUNS[-1][0]
    ups = [e for e in scaled[name] if e["event"] == "spinup"]
    per_hour = Counter((int(e["time"] // 3600), e["size"]) for e in ups)
    rows = [{"hour": h, "size": s, "spinups": n} for (h, s), n in sorted(per_hour.items())]
    print(f"\nClusters the {name} spun up, per hour of the day:")
    print(fmt_table(rows, ["hour", "size", "spinups"]))
    return 0
