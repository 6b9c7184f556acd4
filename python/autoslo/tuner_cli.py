"""``autoslo reservoir`` and ``autoslo tune``: the Policy Tuner's command line."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from autoslo import argtypes
from autoslo.bundled import load
from autoslo.fidelity import simulator_fidelity
from autoslo.tables import fmt_table
from autoslo.ray_backend import RayBackend
from autoslo.tuner import STALE_HISTORY_DAYS, TAU_SCOPES, ExecutionConfig, Reservoir, TunerSettings, class_latency_scale, estimate_gap, learned_tau_simulated, tune
from autoslo.workloads import check_output, read_table


def read_log(path: str | Path) -> pa.Table:
    """A query log from Parquet or CSV (by extension, :func:`autoslo.workloads.read_table`)."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no query log at {path}")
    return read_table(path)


def cmd_reservoir_add(args: argparse.Namespace) -> int:
    r = Reservoir(args.reservoir, max_arrivals_per_hour=args.max_arrivals_per_hour)
    days = r.append(read_log(args.log), start_date=args.start_date, replace=args.replace)
    print(json.dumps({"reservoir": str(r.path), "days_written": [d.isoformat() for d in days], "days_stored": len(r.days())}))
    return 0


def cmd_reservoir_show(args: argparse.Namespace) -> int:
    r = Reservoir(args.reservoir, create=False)
    rows = [{"day": d.isoformat(), "weekday": d.strftime("%a"), "queries": r.queries([d])} for d in r.days()]
    if args.json:
        print(json.dumps(rows))
    elif rows:
        print(fmt_table(rows, ["day", "weekday", "queries"]))
    else:
        print(f"the reservoir at {r.path} is empty")
    return 0


def _settings(args: argparse.Namespace) -> TunerSettings:
    """The settings file's (or the defaults), with the command line's options over them."""
    settings = TunerSettings.load(args.settings) if args.settings else TunerSettings()
    over: dict[str, Any] = {}
    if args.tau is not None:
        over["tau"] = args.tau
    if args.tau_scope is not None:
        over["tau_scope"] = args.tau_scope
    if args.sizes is not None:
        over["spinup_sizes"] = args.sizes
        if settings.autoscaler is not None:
            over["autoscaler"] = {**settings.autoscaler, "sizes": args.sizes}
    if args.forecasts is not None:
        over["forecasts"] = args.forecasts
    if args.seed is not None:
        over["seed"] = args.seed
    return replace(settings, **over)


def _read_trace(path: str | Path) -> pa.Table:
    """A trace (``autoslo emulate --trace``, or a live run's), or a serving log (a file, or the
    directory ``autoslo serve --log`` writes)."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no trace at {path}")
    return read_table(path)


def cmd_tune(args: argparse.Namespace) -> int:
    check_output(args.out)
    settings = _settings(args)
    predictor = load(args.model) if args.model else None
    if args.simulator_scale_from:
        scale = class_latency_scale(_read_trace(args.simulator_scale_from), predictor)
        settings = replace(settings, simulator_class_scale=scale)
        if not args.json:
            print("simulator latency scale per class (from " + args.simulator_scale_from + "): " + ", ".join(f"{c} ×{v:.2f}" for c, v in scale.items()))
    if args.learn_from:
        plan_path, trace_path = args.learn_from
        trace = _read_trace(trace_path)
        observed = 1.0 - float(pc.mean(trace["met"].cast(pa.float64())).as_py() or 0.0)
        gap = estimate_gap(ExecutionConfig.load(plan_path), observed)
        settings = replace(settings, estimate_gap=gap)
        if not args.json:
            print(f"{plan_path} ran {observed:.2%} late against its estimate's {observed - gap:.2%}: simulations are held to {learned_tau_simulated(settings.tau, gap):.2%}")
    result = tune(
        Reservoir(args.reservoir, create=False),
        args.day,
        settings=settings,
        history_days=args.history_days,
        kappa=args.kappa,
        predictor=predictor,
        progress=not args.json,
        backend=RayBackend(args.ray_address) if args.backend == "ray" else None,
    )
    result.config.save(args.out)
    if args.json:
        print(json.dumps({"config": result.config.as_dict(), "report": result.report}, default=str))
        return 0
    rep = result.report
    if not rep["tuned"]:
        print(f"no history before {args.day}: wrote the untuned configuration to {args.out}")
        return 0
    print(f"tuned {args.day} from {rep['history_days']} days of history ({rep['forecast_policy']} forecasts from {', '.join(rep['days_used'])})")
    age = rep.get("history_age_days")
    if age is not None and age > STALE_HISTORY_DAYS:
        print(f"warning: the newest history the forecasts drew from is {age} days before {args.day}: the plan reflects that traffic, not recent traffic (add recent query logs with `autoslo reservoir add`)", file=sys.stderr)
    print(f"{rep['training_forecasts']} training + {rep['validation_forecasts']} validation forecasts, {rep['forecast_queries']:.0f} queries each on average; {rep['simulations']} simulations")
    cands = [
        {
            "initial": "+".join(map(str, c["initial_clusters"])),
            "scheduled spinups": " ".join(f"{s}@{t / 3600:.2f}h" for t, s in c["scheduled_spinups"]) or "-",
            "train VR": c["training"][0],
            "train cost": c["training"][1],
            "val VR": c["validation"][0],
            "val cost": c["validation"][1],
        }
        for c in rep["schedule_candidates"]
    ]
    print(fmt_table(cands, list(cands[0])))
    reach = rep["slo_out_of_reach"]
    if reach["share"] > 0:
        worst = max(reach["per_tenant"].items(), key=lambda kv: kv[1])
        print(
            f"\n{reach['share']:.1%} of the history's queries have an SLO below their runtime alone on {', '.join(map(str, reach['sizes']))} RPU"
            f" ({worst[0]}: {worst[1]:.1%}): late however the fleet scales; a larger size (--sizes) or a looser SLO reaches them"
        )
        for more in reach["with_larger"]:
            print(f"  with {more['size']} RPU eligible too: {more['share']:.1%} ({worst[0]}: {more['per_tenant'].get(worst[0], 0.0):.1%})")
    print(f"\nchosen: {result.config}")
    print(f"validation (simulated): violation rate {result.validation_violation_rate:.4f}, cost ${result.validation_cost:.2f}")
    tenants = rep.get("validation_tenants") or {}
    if len(tenants) > 1:
        tau = result.config.as_dict()["provenance"]["tau"]
        over = [t for t, v in tenants.items() if v > tau]
        print("  per tenant: " + ", ".join(f"{t} {v:.4f}" for t, v in tenants.items()))
        if over and settings.tau_scope == "fleet" and result.validation_violation_rate <= tau:
            print(f"  {', '.join(over)} above τ = {tau:g} where the fleet meets it; --tau-scope tenant holds every tenant to τ")
    print(f"wrote {args.out} (run it: autoslo emulate --config {args.out} ...)")
    return 0


def cmd_fidelity(args: argparse.Namespace) -> int:
    out = simulator_fidelity(_read_trace(args.trace), args.config, predictor=load(args.model) if args.model else None, seed=args.seed)
    if args.json:
        print(json.dumps(out))
        return 0
    for key, group in (("class", [*out["per_class"], out["overall"]]), ("tenant", out["per_tenant"])):
        rows = [
            {
                key: r.get(key, "all"),
                "queries": r["queries"],
                "observed VR": r["observed_violation_rate"],
                "simulated VR": r["simulated_violation_rate"],
                "gap (points)": 100 * r["violation_rate_gap"],
                "observed p95 s": r["observed_latency_p95"],
                "simulated p95 s": r["simulated_latency_p95"],
                **({"latency scale": r.get("latency_scale")} if key == "class" else {}),
            }
            for r in group
        ]
        print(fmt_table(rows, list(rows[0])) + "\n")
    o = out["overall"]
    observed = "not per query (a serving log written before queries were priced)" if o["observed_cost"] is None else f"${o['observed_cost']:.2f}"
    print(f"cost: observed {observed}, simulated ${o['simulated_cost']:.2f}")
    gap = 100 * o["violation_rate_gap"]
    verdict = "optimistic" if gap < 0 else "pessimistic" if gap > 0 else "exact"
    print(f"the Workload Simulator is {verdict} on this day by {abs(gap):.1f} points of violation rate; the tuner judges configurations by it (docs/tuner.md)")
    return 0


def register(sub: Any) -> None:
    """Add ``reservoir``, ``tune`` and ``fidelity`` to the ``autoslo`` command line."""
    p = sub.add_parser("reservoir", help="the Workload Reservoir: add query logs, list days", description="The Workload Reservoir the Policy Tuner forecasts from.")
    rs = p.add_subparsers(dest="action", required=True)
    a = rs.add_parser("add", help="add a query log (Parquet or CSV: arrival, template, instance, [tenant, class])")
    a.add_argument("--reservoir", required=True, metavar="DIR")
    a.add_argument("--log", required=True, metavar="PATH", help="query log or workload (.parquet or .csv; `autoslo workload` writes one), or a directory of Parquet parts (`autoslo serve --log` writes one; add a finished day with --replace)")
    a.add_argument("--start-date", dest="start_date", metavar="YYYY-MM-DD", help="calendar date of second 0, when arrivals are seconds")
    a.add_argument("--replace", action="store_true", help="replace the stored days the log covers (re-ingesting a day is idempotent; without it, a log added before is refused)")
    a.add_argument("--max-arrivals-per-hour", dest="max_arrivals_per_hour", type=argtypes.count(2), default=2000, help="arrival offsets kept per hour (default 2000)")
    a.set_defaults(func=cmd_reservoir_add)
    s = rs.add_parser("show", help="list the stored days")
    s.add_argument("--reservoir", required=True, metavar="DIR")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_reservoir_show)

    p = sub.add_parser(
        "tune",
        help="plan a day: forecast, schedule spinups, tune the autoscaler; write the execution configuration",
        description="The Policy Tuner (§7): forecast DAY from the reservoir, run ScheduleSpinups and the Configuration Tuner on the Workload Simulator, and write the execution configuration as YAML.",
    )
    p.add_argument("--reservoir", required=True, metavar="DIR")
    p.add_argument("--day", required=True, metavar="YYYY-MM-DD", help="the day to plan")
    p.add_argument("--tau", type=argtypes.rate, help="target violation rate τ (default: the settings file's, else 0.1)")
    p.add_argument(
        "--tau-scope",
        dest="tau_scope",
        choices=TAU_SCOPES,
        help="whose violation rate τ holds: fleet (default, the paper's) or tenant (the fleet's and every tenant's, a change; docs/tuner.md)",
    )
    p.add_argument("--out", required=True, metavar="CONFIG.yaml")
    p.add_argument("--history-days", dest="history_days", type=argtypes.count(0), help="use only the last N days before DAY (default: all; 0 = no past data, the untuned configuration)")
    p.add_argument("--kappa", type=argtypes.positive, default=2.0, help="SLO = κ × per-template baseline for the forecast queries (default 2)")
    p.add_argument("--sizes", type=argtypes.sizes, help="cluster sizes (RPU) the configuration may add, by scheduled spinups and by its autoscaler (default 16,32)")
    p.add_argument("--forecasts", type=argtypes.count(2), help="forecasts N (default 20, 60 %% for training)")
    p.add_argument("--seed", type=argtypes.count(0), help="seed of the forecasts and the search (default 0)")
    p.add_argument("--settings", metavar="FILE.yaml", help="tuner settings (any field of autoslo.tuner.TunerSettings)")
    p.add_argument("--model", help="predictor model directory (default: the bundled Iconq+)")
    p.add_argument(
        "--simulator-scale-from",
        dest="simulator_scale_from",
        metavar="TRACE.parquet",
        help="scale the Workload Simulator's latencies per workload class as the warehouse ran them in this trace (`autoslo emulate --trace`, or a live trace): a change to the paper's simulator, off by default (docs/tuner.md)",
    )
    p.add_argument(
        "--learn-from",
        dest="learn_from",
        nargs=2,
        metavar=("PLAN.yaml", "TRACE"),
        help="a past day's plan (as `autoslo tune` wrote it) and its trace: hold simulations to τ minus how much later that day ran than the plan's estimate, a change that lands the day near τ (docs/tuner.md)",
    )
    p.add_argument("--backend", choices=("rayon", "ray"), default="rayon", help="where SimulateBatch runs: this machine's cores (rayon, default) or a Ray cluster (pip install 'autoslo[ray]')")
    p.add_argument("--ray-address", dest="ray_address", metavar="ADDRESS", help="Ray cluster to join with --backend ray (default: RAY_ADDRESS, or a local cluster)")
    p.add_argument("--json", action="store_true", help="print the configuration and the report as JSON")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser(
        "fidelity",
        help="how faithfully the Workload Simulator reproduces a day a configuration ran",
        description="Replay the queries of a trace in the Workload Simulator under the configuration that ran them, and compare violation rate, cost and latency with what the warehouse did, overall and per workload class.",
    )
    p.add_argument("--config", required=True, metavar="CONFIG.yaml", help="the execution configuration the trace ran with")
    p.add_argument("--trace", required=True, metavar="PATH", help="the day's trace (`autoslo emulate --trace`, or a live run's), or what `autoslo serve --log` wrote (a file or its directory)")
    p.add_argument("--model", help="predictor model directory (default: the bundled Iconq+)")
    p.add_argument("--seed", type=argtypes.count(0), default=0, help="seed of the simulation (default 0)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fidelity)
