"""``autoslo demo``: the whole story on one Redbench-like weekday.

A week of generated history (four tenants; weekly and diurnal patterns, bursts, scheduled reports)
goes into a Workload Reservoir. The Policy Tuner plans the next day from it (forecasts,
ScheduleSpinups, Configuration Tuner, all on the Workload Simulator). That day is then emulated
(the ground truth) under AutoSLO's tuned configuration, under AutoSLO untuned (its autoscaler
from one 16 RPU cluster, and its router on a fixed 2 × 32 RPU), and under what users run today:
one 64 RPU cluster, 2 × 32 RPU with round robin, a RAIS-like scaler and Snowflake's multi-cluster
policies. Results are fleet-wide and per tenant × class (a green fleet can hide a red tenant); a
figure of cost against violation rate is saved.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import tempfile
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from autoslo.autoscaler import AutoscalerConfig
from autoslo.bundled import predictor_for
from autoslo.emulation import emulate
from autoslo.reproduce_tuner import HINDSIGHT, START, HistoryWorld, TunerExperiment, figure6_baselines, hindsight_row, outcome, plot_cost_vs_violations, tuned_config
from autoslo.tables import fmt_table
from autoslo.tuner import TunerSettings, default_space

#: Day index of the planned day (a Tuesday: the history holds the Tuesday before).
DEMO_DAY = 8
#: Plans the demo's search for the best plan in hindsight emulates (``--hindsight-plans``).
DEMO_HINDSIGHT_PLANS = 100


def demo_settings() -> TunerSettings:
    """A quick tuning: 6 forecasts, at most 2 scheduled spinups; T_idle, the initial clusters,
    the autoscaler's eligible sizes and the selector's headroom searched (of the default space)."""
    keep = ("t_idle_s", "initial_clusters", "sizes", "selector_headroom")
    return TunerSettings(forecasts=6, eta=2, phi=2, space={k: v for k, v in default_space().items() if k in keep})


def _verdict(rows: list[dict[str, Any]], tau: float, n_autoslo: int) -> str:
    """Which runs met τ, cheapest first; the tuned configuration (the first row) against the
    untuned autoscaler (the second), what the history bought; and against the cheapest of today's
    policies (the rows after the first ``n_autoslo``) that met τ."""
    meets = sorted((r for r in rows if r["violation_rate"] <= tau), key=lambda r: r["cost"])
    lines = [f"meet τ = {tau:g}, cheapest first: " + ("; ".join(f"{r['method']} ${r['cost']:.2f}" for r in meets) or "none")]
    tuned, untuned = rows[0], rows[1]
    lines.append(
        f"{tuned['method']} against {untuned['method']}: violation rate {untuned['violation_rate']:.1%} -> {tuned['violation_rate']:.1%}, "
        f"cost ${untuned['cost']:.2f} -> ${tuned['cost']:.2f} ({tuned['cost'] / untuned['cost'] - 1:+.1%})"
    )
    today = [r for r in meets if r in rows[n_autoslo:] and r["method"] != HINDSIGHT]
    if tuned["violation_rate"] > tau:
        lines.append(f"{tuned['method']} misses τ ({tuned['violation_rate']:.1%})")
    elif today:
        change = tuned["cost"] / today[0]["cost"] - 1
        lines.append(f"{tuned['method']}: {abs(change):.1%} {'less' if change < 0 else 'more'} than the cheapest of today's policies that meets τ ({today[0]['method']})")
    else:
        lines.append(f"{tuned['method']} meets τ, and none of today's policies does")
    hs = next((r for r in rows if r["method"] == HINDSIGHT and r["cost"]), None)
    if hs is not None:
        lines.append(
            f"the best plan in hindsight (the cheapest of the plans searched that meets τ, knowing the day) costs ${hs['cost']:.2f} at {hs['violation_rate']:.1%}: "
            f"{tuned['method']} at {tuned['violation_rate']:.1%} has a regret of {tuned['cost'] / hs['cost'] - 1:+.1%}"
        )
    return "\n".join(lines)


def run_demo(queries_per_day: float = 20_000, seed: int = 1, kappa: float = 4.0, as_json: bool = False, plot: str | Path | None = "autoslo-demo.png", hindsight_plans: int = DEMO_HINDSIGHT_PLANS) -> int:
    """Plan and emulate the day, search the best plan in hindsight (``hindsight_plans`` plans; 0:
    none), print the comparison, save the figure. Returns an exit code."""
    exp = TunerExperiment(seed=seed, queries_per_day=queries_per_day, target_days=(DEMO_DAY,), kappas=(kappa,), history=(DEMO_DAY,), settings=demo_settings(), hindsight_plans=hindsight_plans)
    predictor = predictor_for(True, None)
    day = START + dt.timedelta(days=DEMO_DAY)
    with tempfile.TemporaryDirectory() as tmp:
        world = HistoryWorld(exp, Path(tmp))
        actual = world.actual(DEMO_DAY, kappa)
        config, report = tuned_config(world, DEMO_DAY, kappa, DEMO_DAY, predictor)
    runs = [
        ("AutoSLO, tuned on the week", None, config, None, None),
        ("AutoSLO autoscaler from 16, untuned", [16], None, "autoslo", AutoscalerConfig(policy="autoslo", sizes=(16, 32))),
        ("AutoSLO router, fixed 2 x 32", [32, 32], None, "autoslo", None),
        *[(name, clusters, None, routing, autoscaler) for name, clusters, routing, autoscaler in figure6_baselines()],
    ]
    rows: list[dict[str, Any]] = []
    for name, clusters, cfg, routing, autoscaler in tqdm(runs, desc="emulating the day", unit="config"):
        if cfg is not None:
            r = emulate(actual, config=cfg, seed=seed, predictor=predictor)
        else:
            r = emulate(actual, clusters, seed=seed, routing=routing or "round-robin", autoscaler=autoscaler, predictor=predictor)
        rows.append({"scenario": f"{day.isoformat()} κ={kappa:g}", "method": name, **outcome(r)})
    if hindsight_plans:
        rows.append({"scenario": f"{day.isoformat()} κ={kappa:g}", **hindsight_row(actual, config, exp, predictor)})
    out = {"day": day.isoformat(), "kappa": kappa, "tau": exp.tau, "queries": actual.num_rows, "tuned_config": config.as_dict(), "tuning": report, "rows": rows}
    note = None
    if plot:
        if importlib.util.find_spec("matplotlib") is None:
            note = "no figure: matplotlib is not installed (pip install 'autoslo[notebook]')"
            plot = None
        else:
            plot_cost_vs_violations(out, Path(plot))
    if as_json:
        print(json.dumps(out, default=str))
        return 0
    print(f"{day.isoformat()} ({day.strftime('%A')}): {actual.num_rows} queries, 4 tenants, SLO = {kappa:g} x baseline, target violation rate τ = {exp.tau}")
    print(f"Planned from {report['history_days']} days of history: {config}\n")
    print(fmt_table(rows, ["method", "violation_rate", "cost", "clusters", "spinups"]))
    print("\n" + _verdict(rows, exp.tau, n_autoslo=3))
    groups: list[dict[str, Any]] = [{"method": r["method"], **g} for r in rows for g in r["per_tenant_class"]]
    worst = sorted(groups, key=lambda g: -g["violation_rate"])[:5]
    print("\nWorst tenant x class populations (attributed cost sums to the billed cost):")
    print(fmt_table(worst, ["method", "tenant", "class", "queries", "violation_rate", "latency_p95", "cost"]))
    mine = sorted((g for g in groups if g["method"] == rows[0]["method"]), key=lambda g: -g["violation_rate"])
    print("\nUnder the tuned configuration, per tenant x class (worst first):")
    print(fmt_table(mine, ["tenant", "class", "queries", "violation_rate", "latency_p95", "cost"]))
    if plot:
        print(f"\nfigure: {plot}")
    elif note:
        print(f"\n{note}")
    return 0
