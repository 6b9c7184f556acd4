"""``autoslo hindsight``: the best plan in hindsight for a day, and a plan's regret against it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from autoslo import argtypes
from autoslo.bundled import load
from autoslo.emulation import emulate
from autoslo.hindsight import DEFAULT_PLANS, best_plan_in_hindsight
from autoslo.ray_backend import RayBackend
from autoslo.tables import fmt_table
from autoslo.tuner import TAU_SCOPES, ExecutionConfig
from autoslo.workloads import write_table


def cmd_hindsight(args: argparse.Namespace, workload: Callable[[argparse.Namespace], pa.Table]) -> int:
    day = workload(args)
    predictor = load(args.model) if args.model else None
    given = [ExecutionConfig.load(p) for p in args.config or []]
    backend = RayBackend(args.ray_address).connect() if args.backend == "ray" else None
    r = best_plan_in_hindsight(
        day, given=given, tau=args.tau, tau_scope=args.tau_scope, plans=args.plans, search_seed=args.search_seed, seed=args.seed, predictor=predictor, backend=backend, progress=not args.json
    )
    judged = []
    for path, plan, row in zip(args.config or [], given, r.outcomes.slice(0, len(given)).to_pylist()):
        # A given plan the bound cut (a duplicate of another, or late) is run to the end for its figures.
        if row["status"] != "finished":
            e = emulate(day, config=plan, seed=args.seed, predictor=predictor)
            row = {**row, "violation_rate": e.violation_rate, "cost": e.cost}
        judged.append({"plan": path, "violation_rate": row["violation_rate"], "cost": row["cost"], "meets_tau": row["violation_rate"] <= args.tau, "regret": r.regret(row["cost"])})
    if args.save and r.best is not None:
        r.best.save(args.save)
    if args.outcomes:
        plans = pa.array([p.to_json() for p in r.plans])
        write_table(r.outcomes.append_column("plan", plans), args.outcomes)
    out: dict[str, Any] = {**r.summary(), "judged": judged}
    if args.json:
        print(json.dumps(out, default=str))
        return 0
    s = out
    print(f"{day.num_rows} queries; τ = {args.tau:g} ({args.tau_scope}); {s['plans']} plans emulated: {s['finished']} to the end, {s['cut_violations']} cut for lateness, {s['cut_cost']} for cost")
    if r.best is None:
        print("no plan of the space meets τ on this day")
    else:
        print(f"best plan in hindsight: ${s['hindsight_cost']:.2f} at {s['hindsight_violation_rate']:.2%} late: {r.best}")
    if judged:
        print(fmt_table(judged, ["plan", "violation_rate", "cost", "meets_tau", "regret"]))
    if args.save and r.best is not None:
        print(f"wrote {args.save}")
    return 0


def register(sub: Any, add_workload_args: Callable[[argparse.ArgumentParser], None], workload: Callable[[argparse.Namespace], pa.Table]) -> None:
    """Add ``hindsight`` to the ``autoslo`` command line."""
    p = sub.add_parser(
        "hindsight",
        help="the cheapest plan that would have met τ on a day that has run, and a plan's regret against it",
        description="Emulate the plans AutoSLO could have run on a day (fixed fleets and the Policy Tuner's whole space) and report the cheapest that meets τ; with --config, each given plan's regret (its cost over that plan's, minus one).",
    )
    add_workload_args(p)
    p.add_argument("--config", action="append", metavar="CONFIG.yaml", help="a plan to judge (repeatable), e.g. what `autoslo tune` wrote for the day")
    p.add_argument("--tau", type=argtypes.rate, default=0.1, help="target violation rate τ (default 0.1)")
    p.add_argument("--tau-scope", dest="tau_scope", choices=TAU_SCOPES, default="fleet", help="fleet (default) or tenant: every tenant within τ too")
    p.add_argument("--plans", type=argtypes.count(1), default=DEFAULT_PLANS, help=f"plans to emulate (default {DEFAULT_PLANS})")
    p.add_argument("--search-seed", dest="search_seed", type=argtypes.count(0), default=0, help="seed of the plans drawn (default 0)")
    p.add_argument("--model", help="predictor model directory (default: the bundled Iconq+)")
    p.add_argument("--save", metavar="BEST.yaml", help="write the best plan as an execution configuration")
    p.add_argument("--outcomes", metavar="OUT.parquet", help="write every plan's outcome (and the plan, as JSON)")
    p.add_argument("--backend", choices=("rayon", "ray"), default="rayon", help="where the plans run: this machine's cores (default) or a Ray cluster")
    p.add_argument("--ray-address", dest="ray_address", metavar="ADDRESS", help="Ray cluster to join with --backend ray")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lambda a: cmd_hindsight(a, workload))
