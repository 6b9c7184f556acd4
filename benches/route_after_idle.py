"""Live routing from Python with arrivals apart (issue: adoption, "live routing after idle").

A live ``autoslo.Router("autoslo", [32, 16] × 4)`` with the bundled Iconq+ predictor is filled with
32 running queries per cluster (``route(..., among=[i])``). Each decision routes a new query among
all eight clusters, timed around the Python call; then the oldest query on the chosen cluster
completes, so every decision sees 8 × 32 running. Between decisions the caller sleeps ``gap``
seconds: live arrivals come seconds apart, and after idle a decision runs on cold caches. Queries
come from ``autoslo.base_workload(0.5, seed=1, kappa=2)``, with their SLOs (``--slo workload``)
or none (``--slo none``: every placement meets its SLO, so cost decides).

Beside each row, a fixed pure-Python loop timed after the same sleep tells how much slower the
machine itself runs after idle (the CPU's idle states and clock), whatever the router does.

Run with ``make bench-route-idle`` (``python benches/route_after_idle.py --json`` prints JSON).
With ``AUTOSLO_SIMD=avx2`` the predictor's kernel runs without AVX-512 (``portable``: without AVX2
either), to measure what a machine without it gets.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from typing import Any

import numpy as np

import autoslo
from autoslo import predictor

CLUSTERS = [32, 16] * 4
PER_CLUSTER = 32


def measure(gap: float, decisions: int, slo_mode: str, search: str) -> dict[str, Any]:
    """p50 / p90 (ms) of ``route()`` at 8 × 32 running with ``gap`` seconds between decisions."""
    router = autoslo.Router("autoslo", CLUSTERS, predictor=predictor.load(), search=search)
    queries = autoslo.base_workload(0.5, seed=1, kappa=2).to_pylist()
    running: list[deque[int]] = [deque() for _ in CLUSTERS]
    clock, qid = 0.0, 0

    def route(among: list[int] | None) -> float:
        nonlocal qid
        q = queries[qid % len(queries)]
        slo = q["slo"] if slo_mode == "workload" else 1e9
        t0 = time.perf_counter()
        c = router.route(qid, q["template"], q["instance"], clock, slo, among=among)
        elapsed = time.perf_counter() - t0
        running[c].append(qid)
        qid += 1
        return elapsed

    for _ in range(PER_CLUSTER):
        for i in range(len(CLUSTERS)):
            clock += 0.01
            route([i])
    warmup, times, chosen = 5, [], []
    for k in range(decisions + warmup):
        time.sleep(gap)
        clock += 0.01
        t = route(None)
        c = max(range(len(CLUSTERS)), key=lambda i: len(running[i]))
        router.complete(running[c].popleft(), clock)
        if k >= warmup:
            times.append(t * 1e3)
            chosen.append(c)
    return {
        "gap_s": gap,
        "slo": slo_mode,
        "search": search,
        "decisions": decisions,
        "p50_ms": float(np.percentile(times, 50)),
        "p90_ms": float(np.percentile(times, 90)),
        "clusters_chosen": sorted(set(chosen)),
    }


def machine_idle(gap: float, repeats: int) -> float:
    """p50 (ms) of a fixed pure-Python loop with ``gap`` seconds of sleep before each run: how much
    slower this machine runs any work after idle, whatever the router does."""
    times = []
    for _ in range(repeats + 5):
        time.sleep(gap)
        t0 = time.perf_counter()
        sum(i * i for i in range(3000))
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.percentile(times[5:], 50))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gaps", default="0,0.05,2", help="seconds between decisions, comma-separated")
    ap.add_argument("--decisions", type=int, default=200, help="decisions per gap (25 at most for gaps ≥ 1 s)")
    ap.add_argument("--slo", choices=["workload", "none"], default="workload")
    ap.add_argument("--search", default="auto,exhaustive", help=f"router searches, comma-separated, of {autoslo._core.ROUTER_SEARCHES}")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    gaps = {float(g): min(args.decisions, 25) if float(g) >= 1 else args.decisions for g in args.gaps.split(",")}
    idle = {gap: machine_idle(gap, n) for gap, n in gaps.items()}
    for search in args.search.split(","):
        for gap, n in gaps.items():
            print(f"{search}, gap {gap:g} s: {n} decisions, about {n * gap:.0f} s", file=sys.stderr)
            rows.append(measure(gap, n, args.slo, search) | {"machine_loop_p50_ms": idle[gap]})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"SLOs: {args.slo}\n\n| search | gap between arrivals | p50 | p90 | clusters chosen | a fixed Python loop, p50 |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['search']} | {r['gap_s']:g} s | {r['p50_ms']:.2f} ms | {r['p90_ms']:.2f} ms | {r['clusters_chosen']} | {r['machine_loop_p50_ms']:.3f} ms |")


if __name__ == "__main__":
    main()
