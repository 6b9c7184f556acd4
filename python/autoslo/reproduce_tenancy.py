"""The multi-tenant case's scenario on the emulator (``autoslo reproduce premium``,
``docs/tenancy.md``): the fleet meets its objective while a premium tenant misses it; the
per-tenant report flags the tenant; tenant-aware policies are measured beside a tenant-blind one
of the same kind."""

from __future__ import annotations

from typing import Any

from autoslo.emulation import emulate
from autoslo.tenancy import AdmissionQueue, Reservation, Share
from autoslo.workloads import redbench_workload


def premium_tenant(seed: int = 2, premium: str = "tenant-3", tau: float = 0.10) -> dict[str, Any]:
    """A Redbench day (seed ``seed``, 6,000 queries, 4 tenants, κ = 3) on two 16 RPU clusters with
    the AutoSLO router; every population's objective is a violation rate ≤ ``tau``, and
    ``premium`` is the premium tenant. Runs the day as is (the per-tenant report flags who
    misses), with three tenant-aware policies (the premium tenant first in a shared admission
    queue; an added 8 RPU cluster reserved for it, with and without lending it when idle) and a
    tenant-blind one (the same 8 RPU cluster added for everyone), and reports each run's fleet
    and per-tenant violation rates, cost, and whether the premium tenant and every other meet
    ``tau``."""
    if not 0 <= tau <= 1:
        raise ValueError(f"τ is a violation rate in [0, 1], got {tau}")
    wl = redbench_workload(days=1, seed=seed, queries_per_day=6000, tenants=4, kappa=3)
    tenants = sorted(set(wl["tenant"].to_pylist()))
    if premium not in tenants:
        raise ValueError(f"no tenant {premium!r} in the workload (its tenants: {', '.join(tenants)})")
    runs: dict[str, tuple[list[int], dict[str, Any]]] = {
        "as is (2 x 16 RPU)": ([16, 16], {}),
        "premium first in the queue (4 slots)": ([16, 16], {"queue": AdmissionQueue(slots_per_cluster=4, shares={premium: Share(reservation=100.0)})}),
        "+ 8 RPU reserved for premium": ([16, 16, 8], {"reservation": Reservation([premium], [2])}),
        "+ 8 RPU reserved, lent when idle": ([16, 16, 8], {"reservation": Reservation([premium], [2], borrow_idle=True)}),
        "+ 8 RPU for everyone (tenant-blind)": ([16, 16, 8], {}),
    }
    out: dict[str, Any] = {"seed": seed, "premium": premium, "tau": tau, "runs": []}
    for name, (clusters, kw) in runs.items():
        r = emulate(wl, clusters, routing="autoslo", **kw)
        per = r.violation_rates("tenant")
        worst = r.worst_tenants(1).to_pylist()[0]
        out["runs"].append(
            {
                "run": name,
                "clusters": clusters,
                "violation_rate": r.violation_rate,
                "per_tenant": per,
                "flagged": sorted(t for t, v in per.items() if v > tau),
                "worst_population": {"tenant": worst["tenant"], "class": worst["class"], "violation_rate": worst["violation_rate"]},
                "cost": r.cost,
                "fleet_meets": r.violation_rate <= tau,
                "premium_meets": per[premium] <= tau,
                "others_meet": all(v <= tau for t, v in per.items() if t != premium),
            }
        )
    return out


def deferred_batch(seeds: tuple[int, ...] = (0, 2, 3), background_slots: int = 1) -> dict[str, Any]:
    """Batch work deferred to the night. Redbench days (6,000 queries, 4 tenants, κ = 3) on two
    16 RPU clusters with the AutoSLO router, where an SLO policy gives the ``backfill`` class a
    day's deadline (in every run). Each day runs without a queue, with only the deferral of
    backfills arriving between 6 h and 20 h to the 20 h – 6 h window (in the background, on
    clusters holding fewer than ``background_slots`` queries; 1 was chosen on seed 1), with an
    8-slot admission queue, and with both; reports the violation rate overall and per class,
    the cost, refusals and timeouts."""
    from autoslo.tenancy import Deferral, apply_slo_policy

    defer = Deferral(["backfill"], from_h=20.0, until_h=6.0, slots_per_cluster=background_slots)
    out: dict[str, Any] = {"background_slots": background_slots, "rows": []}
    for seed in seeds:
        wl = redbench_workload(days=1, seed=seed, queries_per_day=6000, tenants=4, kappa=3)
        wl = apply_slo_policy(wl, {"deadlines": [{"tier": "*", "class": "backfill", "deadline_s": 86_400}]})
        runs = {
            "no queue": None,
            "deferral": AdmissionQueue(slots_per_cluster=10**6, defer=defer),
            "queue (8 slots)": AdmissionQueue(slots_per_cluster=8),
            "queue (8 slots) + deferral": AdmissionQueue(slots_per_cluster=8, defer=defer),
        }
        for name, queue in runs.items():
            r = emulate(wl, [16, 16], routing="autoslo", queue=queue)
            out["rows"].append({"seed": seed, "run": name, "violation_rate": r.violation_rate, "per_class": r.violation_rates("class"), "cost": r.cost, "refused": r.rejected, "timeouts": r.timeouts})
    return out
