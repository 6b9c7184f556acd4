"""Reproductions of the paper's experiments on the emulator.

``reproduce_router`` is Table 2 (§8.4): BaseWorkload at λ ∈ {0.1, 0.2}, κ ∈ {4, 2}, clusters
[32, 16] or [16, 16], routed by round robin, Stage + cost-optimal and AutoSLO (Iconq+ + cost),
reporting violation rate and cost per scenario and the mean relative change against round robin.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from autoslo import _core
from autoslo.emulation import emulate
from autoslo.workloads import base_workload

#: (λ, κ, cluster sizes) in the paper's column order.
ROUTER_SCENARIOS: tuple[tuple[float, float, tuple[int, ...]], ...] = (
    (0.1, 4, (32, 16)),
    (0.1, 4, (16, 16)),
    (0.1, 2, (32, 16)),
    (0.1, 2, (16, 16)),
    (0.2, 4, (32, 16)),
    (0.2, 4, (16, 16)),
    (0.2, 2, (32, 16)),
    (0.2, 2, (16, 16)),
)
ROUTER_POLICIES = ("round-robin", "stage-cost", "autoslo")
#: The paper's Table 2 mean changes against round robin (violation rate, cost).
PAPER_TABLE2 = {"stage-cost": (-0.243, -0.193), "autoslo": (-0.478, -0.129)}


def reproduce_router(
    seed: int = 0,
    policies: Sequence[str] = ROUTER_POLICIES,
    scenarios: Sequence[tuple[float, float, tuple[int, ...]]] = ROUTER_SCENARIOS,
    queries: int | None = None,
    predictor: _core.Predictor | None = None,
) -> dict:
    """Run Table 2 on the emulator. ``queries`` truncates each workload (small runs for tests)."""
    if "round-robin" not in policies:
        raise ValueError("the comparison is against round-robin: include it in policies")
    unknown = [p for p in policies if p not in _core.ROUTING_POLICIES]
    if unknown:
        raise ValueError(f"unknown routing policies {unknown}; known: {_core.ROUTING_POLICIES}")
    if predictor is None and any(p != "round-robin" for p in policies):
        from autoslo.predictor import load

        predictor = load()
    rows = []
    for lam, kappa, clusters in scenarios:
        wl: pa.Table = base_workload(lam, seed=seed, kappa=kappa)
        if queries is not None:
            wl = wl.slice(0, queries)
        for p in policies:
            r = emulate(wl, list(clusters), seed=seed, routing=p, predictor=predictor)
            rows.append(
                {
                    "rate": lam,
                    "kappa": kappa,
                    "clusters": list(clusters),
                    "policy": p,
                    "queries": r.queries,
                    "violation_rate": r.violation_rate,
                    "cost": r.cost,
                    "timeouts": r.timeouts,
                }
            )
    summary = {}
    for p in policies:
        if p == "round-robin":
            continue
        dv, dk = [], []
        for s in scenarios:
            key = lambda r: (r["rate"], r["kappa"], tuple(r["clusters"])) == (s[0], s[1], s[2])  # noqa: E731
            base = next(r for r in rows if key(r) and r["policy"] == "round-robin")
            mine = next(r for r in rows if key(r) and r["policy"] == p)
            if base["violation_rate"] > 0:
                dv.append(mine["violation_rate"] / base["violation_rate"] - 1)
            dk.append(mine["cost"] / base["cost"] - 1)
        summary[p] = {
            "mean_violation_rate_change": sum(dv) / len(dv) if dv else float("nan"),
            "mean_cost_change": sum(dk) / len(dk),
            "scenarios_compared": len(dv),
            "paper": dict(zip(("mean_violation_rate_change", "mean_cost_change"), PAPER_TABLE2[p])) if p in PAPER_TABLE2 else None,
        }
    return {"seed": seed, "queries_per_workload": queries, "rows": rows, "mean_change_vs_round_robin": summary}
