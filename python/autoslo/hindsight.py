"""The best plan in hindsight: the yardstick of a plan.

For a day that has run (on the emulator, or a live day whose queries were imported), search the
plans AutoSLO could have run (fixed fleets of one to four clusters, and the Policy Tuner's whole
space: initial clusters, scheduled spinups, T_idle, T_min_lifetime, τ_trigger, θ, μ, w, the router's
and the selector's headroom, the eligible sizes), each emulated on that very day, and return the
cheapest that meets τ. A plan's **regret** is its cost over that plan's, minus one: 0 is the best
any plan of the space could have done with perfect knowledge of the day.

The search runs in the Rust core (``tuner::hindsight``) on this machine's cores, or on Ray
(``backend="ray"``). Each plan runs under an exact bound (it stops once more queries are late than
τ allows, or once it has cost more than the cheapest plan known to meet τ), so the best plan is the
one a search running every plan to the end would return. Seeded: the same arguments draw the same
plans and return the same best plan.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from autoslo import _core
from autoslo.bundled import predictor_for
from autoslo.progress import progress_bar
from autoslo.ray_backend import RayBackend, backend_for
from autoslo.tuner import ExecutionConfig

#: Plans a search emulates unless told otherwise.
DEFAULT_PLANS: int = _core.DEFAULT_HINDSIGHT_PLANS


def default_space() -> dict[str, Any]:
    """The values of every knob the search draws from (pass a changed copy as ``space``)."""
    return json.loads(_core.hindsight_space())


@dataclass(frozen=True)
class HindsightResult:
    """A hindsight search's outcome.

    ``plans`` are the plans emulated, in order; ``outcomes`` has one row per plan: ``index``,
    ``origin`` (``given``, ``fleet``, ``random``, ``refine``), ``status`` (``finished``, or why the
    bound cut it: ``violations``, ``tenant-violations``, ``cost``), ``queries``, ``violations`` and
    ``cost`` (for a cut plan, what it had reached: lower bounds), ``violation_rate``, ``clusters``,
    ``cut_at`` (s into the day) and ``seconds`` spent on it. ``best`` is the cheapest plan that
    meets τ (``None`` if none does) and ``best_outcome`` its row, with ``tenants`` (each tenant's
    queries and late queries).
    """

    tau: float
    tau_scope: str
    plans: list[ExecutionConfig]
    outcomes: pa.Table
    best: ExecutionConfig | None
    best_outcome: dict[str, Any] | None

    @property
    def cost(self) -> float | None:
        """The best plan's cost ($)."""
        return None if self.best_outcome is None else float(self.best_outcome["cost"])

    @property
    def violation_rate(self) -> float | None:
        """The best plan's violation rate."""
        return None if self.best_outcome is None else float(self.best_outcome["violation_rate"])

    def regret(self, cost: float) -> float | None:
        """``cost`` ÷ the best plan's cost − 1 (``None`` when no plan meets τ)."""
        return regret(cost, self.cost)

    def summary(self) -> dict[str, Any]:
        """Plain figures: the best plan, its cost and violation rate, and how the search went."""
        status = self.outcomes["status"].to_pylist()
        return {
            "tau": self.tau,
            "tau_scope": self.tau_scope,
            "plans": len(self.plans),
            "finished": status.count("finished"),
            "cut_violations": status.count("violations") + status.count("tenant-violations"),
            "cut_cost": status.count("cost"),
            "hindsight_cost": self.cost,
            "hindsight_violation_rate": self.violation_rate,
            "hindsight_plan": self.best.as_dict() if self.best is not None else None,
            "hindsight_tenants": self.best_outcome["tenants"] if self.best_outcome else None,
        }

    def __repr__(self) -> str:
        s = self.summary()
        best = "none meets τ" if self.best is None else f"${s['hindsight_cost']:.2f} at {s['hindsight_violation_rate']:.2%}"
        return f"HindsightResult(plans={s['plans']}, finished={s['finished']}, best: {best})"


def regret(cost: float, hindsight_cost: float | None) -> float | None:
    """A plan's regret: its cost ÷ the hindsight plan's − 1 (``None`` without a hindsight plan)."""
    if hindsight_cost is None or not hindsight_cost > 0:
        return None
    return cost / hindsight_cost - 1.0


def best_plan_in_hindsight(
    workload: pa.Table,
    *,
    given: Sequence[ExecutionConfig] = (),
    tau: float = 0.1,
    tau_scope: str = "fleet",
    plans: int = DEFAULT_PLANS,
    refine: float | None = None,
    search_seed: int = 0,
    space: Mapping[str, Any] | None = None,
    seed: int = 0,
    predictor: _core.Predictor | None = None,
    backend: str | RayBackend | None = None,
    progress: bool = True,
) -> HindsightResult:
    """Search the best plan in hindsight for the day ``workload`` (a table as
    :func:`autoslo.emulate` takes, with SLOs). ``given`` are plans to include first (the one you
    judge: the result is never dearer than the cheapest of them that meets τ); ``plans`` the number
    to emulate in all; ``refine`` the share of them spent around the best plan found first;
    ``tau_scope="tenant"`` holds every tenant to τ too. ``seed`` is the emulator's (use the one the
    day was emulated with), ``search_seed`` the search's. ``backend``: ``"rayon"`` (default) or
    ``"ray"``."""
    if isinstance(plans, bool) or not isinstance(plans, int) or plans < 1:
        raise ValueError(f"plans is how many plans to emulate: give at least 1, got {plans!r}")
    predictor = predictor_for(True, predictor)
    given_list = [g if isinstance(g, ExecutionConfig) else ExecutionConfig(g) for g in given]
    ray = backend_for(backend)
    update, close = progress_bar(progress, "hindsight", "plan")
    kwargs: dict[str, Any] = {} if refine is None else {"refine": refine}
    try:
        text = _core.hindsight(
            workload,
            predictor,
            given=[g.to_json() for g in given_list],
            tau=tau,
            tau_scope=tau_scope,
            plans=plans,
            search_seed=search_seed,
            space=None if space is None else json.dumps(dict(space)),
            seed=seed,
            backend=ray,
            progress=update,
            **kwargs,
        )
    finally:
        close()
    r = json.loads(text)
    configs = [ExecutionConfig(p) for p in r["plans"]]
    rows = []
    for o, origin in zip(r["outcomes"], r["origin"]):
        q = o["queries"]
        rows.append(
            {
                "index": o["index"],
                "origin": origin,
                "status": o["status"],
                "queries": q,
                "violations": o["violations"],
                "violation_rate": o["violations"] / q if q else 0.0,
                "cost": o["cost"],
                "clusters": o["clusters"],
                "cut_at": o["cut_at"],
                "seconds": o["seconds"],
            }
        )
    best = r["best"]
    best_outcome = None
    if best is not None:
        o = r["outcomes"][best]
        best_outcome = {**rows[best], "tenants": {t: {"queries": q, "violations": v, "violation_rate": v / q if q else 0.0} for t, q, v in o["tenants"]}}
    return HindsightResult(tau=tau, tau_scope=tau_scope, plans=configs, outcomes=pa.Table.from_pylist(rows), best=None if best is None else configs[best], best_outcome=best_outcome)
