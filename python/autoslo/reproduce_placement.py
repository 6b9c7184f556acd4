"""The load-balancing chapter's drill on the emulator: one cluster silently turns slower, and
outlier ejection around the AutoSLO router (``docs/placement.md``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow.compute as pc

from autoslo.emulation import emulate
from autoslo.placement import Ejection
from autoslo.workloads import redbench_workload


def emulated_slowdown(seed: int = 3, factor: float = 3.0, from_h: float = 8.0, for_h: float = 3.0, ejection: Ejection | None = None) -> dict[str, Any]:
    """One cluster of three (16 RPU each, AutoSLO router) silently turns ``factor``× slower from
    ``from_h`` for ``for_h`` hours of a Redbench day (seed ``seed``, 6,000 queries, 4 tenants,
    κ = 3). Runs healthy (with and without ``ejection``, default :class:`Ejection`: false
    ejections), degraded, degraded with ``ejection``, and both again with the ejected capacity
    covered (``cover=True``), and
    reports each run's violation rate overall and for the queries arriving during the slowdown,
    the slow cluster's share of those, and the ejections and re-entries."""
    ejection = ejection or Ejection()
    covered = dataclasses.replace(ejection, cover=True)
    wl = redbench_workload(days=1, seed=seed, queries_per_day=6000, tenants=4, kappa=3)
    window = (from_h * 3600.0, (from_h + for_h) * 3600.0)
    slow = [(1, factor, window[0], window[1])]
    runs = {
        "healthy": emulate(wl, [16, 16, 16], routing="autoslo"),
        "healthy + ejection": emulate(wl, [16, 16, 16], routing="autoslo", ejection=ejection),
        "degraded": emulate(wl, [16, 16, 16], routing="autoslo", degradations=slow),
        "degraded + ejection": emulate(wl, [16, 16, 16], routing="autoslo", degradations=slow, ejection=ejection),
        "healthy + ejection + cover": emulate(wl, [16, 16, 16], routing="autoslo", ejection=covered),
        "degraded + ejection + cover": emulate(wl, [16, 16, 16], routing="autoslo", degradations=slow, ejection=covered),
    }
    out: dict[str, Any] = {"seed": seed, "slow_cluster": 1, "factor": factor, "window_s": list(window), "ejection": ejection.__dict__, "runs": []}
    for name, r in runs.items():
        t = r.trace
        inside = t.filter(pc.and_(pc.greater_equal(t["arrival"], window[0]), pc.less(t["arrival"], window[1])))
        events = [e for e in r.events.to_pylist() if e["event"] in ("ejected", "reentered") or e["reason"] in ("ejection-cover", "ejection-cleared")]
        out["runs"].append(
            {
                "run": name,
                "violation_rate": r.violation_rate,
                "window_violation_rate": 1.0 - float(pc.mean(pc.cast(inside["met"], "float64")).as_py()),
                "slow_cluster_share": float(pc.mean(pc.cast(pc.equal(inside["cluster_id"], 1), "float64")).as_py()),
                "cost": r.cost,
                "ejections": [(e["time"], e["cluster_id"], e["event"] if e["event"] in ("ejected", "reentered") else f"{e['event']} cover") for e in events],
            }
        )
    return out
