"""The ``autoslo`` command line. Every subcommand has ``--help``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from autoslo import _core, argtypes
from autoslo._files import atomic
from autoslo.autoscaler import SELECTOR_POLICIES, SNOWFLAKE_POLICIES, TRIGGERED_POLICIES, AutoscalerConfig
from autoslo.emulation import calibrate, emulate
from autoslo.bundled import load, model_option
from autoslo.demo import run_demo
from autoslo.hindsight_cli import register as register_hindsight
from autoslo.predictor.cli import register as register_predictor
from autoslo.reproduce import ROUTER_POLICIES, SPINUP_SIZE_METHODS, TRIGGER_METHODS, reproduce_all, reproduce_router, reproduce_spinup_size, reproduce_trigger
from autoslo.tables import fmt_table
from autoslo.reproduce_placement import emulated_slowdown
from autoslo.reproduce_tenancy import deferred_batch, premium_tenant
from autoslo.tenancy import DeadlineAdmission
from autoslo.live_cli import register as register_live
from autoslo.tuner import TAU_SCOPES
from autoslo.tuner_cli import register as register_tuner
from autoslo.workloads import base_workload, check_output, read_workload, redbench_workload, write_table

if TYPE_CHECKING:
    from autoslo.tuner import TunerSettings


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload")
    g.add_argument("--workload", choices=["base", "redbench"], help="generator (default: base = the paper's BaseWorkload)")
    g.add_argument("--workload-file", metavar="FILE", help="read the workload (or a query log: arrival, template, instance, [tenant, class, slo]) from Parquet or CSV instead of generating one")
    g.add_argument("--rate", type=float, help="base: BaseWorkload arrival rate λ in queries/s (default 0.1)")
    g.add_argument("--days", type=argtypes.count(1), help="redbench: number of days (default 1)")
    g.add_argument("--queries-per-day", type=float, help="redbench: weekday queries across tenants (default 20000)")
    g.add_argument("--tenants", type=argtypes.count(1), help="redbench: number of tenants (default 4)")
    g.add_argument("--kappa", type=float, default=2.0, help="SLO = κ × per-template baseline (default 2)")
    g.add_argument("--seed", type=argtypes.count(0), default=0, help="seed of workload and emulator (default 0)")


# The generator options of the workload group: the source that reads each, and its default. One
# given for another source (a --rate with --workload redbench, --tenants with --workload-file) is
# refused, instead of running a workload other than the one asked for.
_GENERATOR_OPTIONS: dict[str, tuple[str, float]] = {"rate": ("base", 0.1), "days": ("redbench", 1), "queries_per_day": ("redbench", 20_000), "tenants": ("redbench", 4)}


def _workload(args: argparse.Namespace) -> pa.Table:
    if args.workload_file and args.workload:
        raise ValueError(f"--workload {args.workload} and --workload-file both choose the workload: give one")
    source = "file" if args.workload_file else args.workload or "base"
    given = {k: getattr(args, k) for k in _GENERATOR_OPTIONS if getattr(args, k) is not None}
    ignored = {f"--{k.replace('_', '-')}": _GENERATOR_OPTIONS[k][0] for k in given if _GENERATOR_OPTIONS[k][0] != source}
    if ignored:
        what = "--workload-file" if source == "file" else f"--workload {source}"
        readers = ", ".join(f"--workload {r}" for r in sorted(set(ignored.values())))
        raise ValueError(f"{' and '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} not read with {what} (only with {readers})")
    if source == "file":
        return read_workload(args.workload_file, kappa=args.kappa)
    v = {k: given.get(k, default) for k, (_, default) in _GENERATOR_OPTIONS.items()}
    if source == "redbench":
        return redbench_workload(days=int(v["days"]), seed=args.seed, queries_per_day=v["queries_per_day"], tenants=int(v["tenants"]), kappa=args.kappa)
    return base_workload(v["rate"], seed=args.seed, kappa=args.kappa)


# The autoscaling options of `autoslo emulate`: the AutoscalerConfig field each sets, and the
# policies that read it. An option the chosen policy would ignore is refused, and so is any of them
# without --autoscaler.
_SCALING_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "trigger": ("trigger", TRIGGERED_POLICIES),
    "tau": ("tau", TRIGGERED_POLICIES),
    "sizes": ("sizes", (*SELECTOR_POLICIES, "rais")),
    "theta": ("theta", TRIGGERED_POLICIES),
    "mu": ("mu", SELECTOR_POLICIES),
    "window": ("window_s", TRIGGERED_POLICIES),
    "t_idle": ("t_idle_s", TRIGGERED_POLICIES),
    "t_min_lifetime": ("t_min_lifetime_s", TRIGGERED_POLICIES),
    "max_clusters": ("max_clusters", (*TRIGGERED_POLICIES, *SNOWFLAKE_POLICIES, "rais")),
    "rais_level": ("rais_level", ("rais",)),
}


def _option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _autoscaler(args: argparse.Namespace) -> AutoscalerConfig | None:
    given = {dest: getattr(args, dest) for dest in _SCALING_OPTIONS if getattr(args, dest) is not None}
    if args.autoscaler is None:
        if given:
            names = ", ".join(_option(d) for d in given)
            raise ValueError(f"{names} set{'s' if len(given) == 1 else ''} the autoscaler: name one with --autoscaler (without it the clusters stay as given)")
        return None
    for dest in given:
        field, used_by = _SCALING_OPTIONS[dest]
        if args.autoscaler not in used_by:
            raise ValueError(f"{_option(dest)} does not apply to --autoscaler {args.autoscaler} (it applies to {', '.join(used_by)})")
    settings: dict[str, Any] = {_SCALING_OPTIONS[dest][0]: value for dest, value in given.items()}
    if "sizes" in settings:
        settings["sizes"] = tuple(given["sizes"])
    return AutoscalerConfig(policy=args.autoscaler, **settings)


def cmd_emulate(args: argparse.Namespace) -> int:
    for out in (args.trace, args.clusters_out, args.events_out, args.decisions_out):
        check_output(out)
    wl = _workload(args)
    admission = DeadlineAdmission(margin=args.admission_margin) if args.admission == "deadline" else None
    predictor = model_option(args.model, args.routing, scales=bool(args.config or args.autoscaler or admission))
    if args.config:
        overlap = [_option(d) for d in ("clusters", "routing", "autoscaler", *_SCALING_OPTIONS) if getattr(args, d) is not None]
        if overlap:
            raise ValueError(f"--config sets the clusters, routing and autoscaler: give {', '.join(overlap)} in the configuration, not beside it")
        result = emulate(wl, seed=args.seed, timeout_s=args.timeout if args.timeout > 0 else None, lifecycle=args.lifecycle, progress=args.progress, config=args.config, admission=admission, predictor=predictor)
    else:
        result = emulate(
            wl,
            args.clusters or [16, 16],
            seed=args.seed,
            routing=args.routing or "autoslo",
            timeout_s=args.timeout if args.timeout > 0 else None,
            lifecycle=args.lifecycle,
            progress=args.progress,
            autoscaler=_autoscaler(args),
            admission=admission,
            predictor=predictor,
        )
    if args.trace:
        write_table(result.trace, args.trace)
    if args.clusters_out:
        write_table(result.clusters, args.clusters_out)
    if args.events_out:
        write_table(result.events, args.events_out)
    if args.decisions_out:
        write_table(result.decisions, args.decisions_out)
    summary = result.summary()
    measured = set(_core.catalog_table()["rpu"].to_pylist())
    unmeasured = sorted({c["size"] for c in result.clusters.to_pylist()} - measured)
    if args.json:
        print(json.dumps({**summary, "chargeback": result.chargeback().to_pylist(), "cluster_events": result.events.to_pylist(), "sizes_beyond_measurements": unmeasured}))
    else:
        print(fmt_table([summary], list(summary)))
        print()
        print(fmt_table(result.per_tenant_class().to_pylist(), ["tenant", "class", "queries", "met", "late", "rejected", "violation_rate", "latency_p50", "latency_p95", "latency_p99", "cost"]))
        print()
        print("chargeback (every cluster's bill, idle and spinup time included, attributed to queries; docs/tenancy.md):")
        print(fmt_table(result.chargeback().to_pylist(), ["tenant", "queries", "work_s", "cost_micro_usd", "cost"]))
        changes = [e for e in result.events.to_pylist() if e["reason"] != "initial"]
        if changes:
            print()
            print(fmt_table(changes, ["time", "cluster_id", "size", "event", "reason"]))
        chosen = [d for d in result.decisions.to_pylist() if d["chosen"]]
        if chosen:
            spun = sum(1 for d in chosen if d["spun_up_size"])
            print(f"\nautoscaler decisions: {len(chosen)} ({spun} spun up, {len(chosen) - spun} did nothing); --decisions-out F.parquet keeps the options each compared")
        if unmeasured:
            sizes = ", ".join(str(s) for s in sorted(measured))
            print(f"\nnote: {', '.join(map(str, unmeasured))} RPU {'is' if len(unmeasured) == 1 else 'are'} beyond the real measurements ({sizes} RPU): the emulator extrapolates there (docs/emulator.md)")
    return 0


def cmd_workload(args: argparse.Namespace) -> int:
    wl = _workload(args)
    write_table(wl, args.out)
    print(json.dumps({"queries": wl.num_rows, "out": args.out}))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.fit:
        return _calibrate_fit(args)
    report = calibrate(seed=args.seed, seeds=args.seeds, isolated_replications=args.replications)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["passed"] else 1

    def mark(checked: bool, within: bool) -> str:
        return ("yes" if within else "NO") if checked else ""

    rows = [
        {
            "rpu": b["rpu"],
            "overlapping": b["overlapping"],
            "n": b["n"],
            "emulated": b["emulated_median"],
            "real": b["real_median"],
            "real rows": b["real_rows"],
            f"within x{report['median_tolerance']}": mark(b["checked"], b["within"]),
        }
        for b in report["bins"]
    ]
    print(f"Check seeds: stream {report['seed']}, {report['seeds']} seeds (the fit used stream {report['fit_seed']})")
    print(f"Median latency / isolated runtime by overlapping queries (real: concurrent_latencies.csv; checked: >= {report['min_rows']} real rows at 8-32 RPU)")
    print(fmt_table(rows, list(rows[0])))
    print()
    print("Load: timed-out fraction and share of queries with >= 64 overlaps (real: executions, partial-neighbour-set rows excluded)")
    load = [
        {
            "rpu": r["rpu"],
            "timed out": r["emulated_timed_out"],
            "real": r["real_timed_out"],
            f"within ±{report['timeout_tolerance']}": mark(True, r["timed_out_within"]),
            ">=64": r["emulated_share64"],
            "real ": r["real_share64"],
            f"within ±{report['share64_tolerance']}": mark(True, r["share64_within"]),
        }
        for r in report["load"]
    ]
    print(fmt_table(load, list(load[0])))
    print()
    print("Isolated runs: mean runtime per RPU (real: the measured runs)")
    print(fmt_table(report["isolated"], ["rpu", "runs", "emulated_mean", "real_mean", "relative_error", "within"]))
    print()
    print(f"Run-to-run noise: std of log runtime per repeated query, p50 / p90 (p50 checked at 8-32 RPU, within x{report['noise_tolerance']})")
    noise = [{**n, "within": mark(n["checked"], n["within"])} for n in report["noise"]]
    print(fmt_table(noise, ["rpu", "real_entries", "real_log_std_p50", "emulated_log_std_p50", "real_log_std_p90", "emulated_log_std_p90", "within"]))
    print(f"\ncalibration {'PASSED' if report['passed'] else 'FAILED'}")
    return 0 if report["passed"] else 1


def _calibrate_fit(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    bar = tqdm(total=1, unit="eval", desc="fitting interference")

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        text, sizes = _core.calibrate_fit(seeds=args.fit_seeds, budget=args.budget, search_seed=args.search_seed, progress=progress)
    finally:
        bar.close()
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "data" / "interference.csv"
    with atomic(out) as tmp:
        tmp.write_text(text)
    for rpu, loss, evals in sizes:
        print(f"{rpu:>2} RPU: loss {loss:.3f} after {evals} evaluations")
    print(f"wrote {out}; the Rust core embeds it at build time: rebuild (make build), then check with `autoslo calibrate`")
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    report = _core.catalog_fit_report()
    if args.out:
        write_table(_core.catalog_table(), args.out)
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(queries_per_day=args.queries_per_day, seed=args.seed, kappa=args.kappa, as_json=args.json, plot=None if args.no_plot else args.plot, hindsight_plans=args.hindsight_plans)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autoslo", description="Latency-SLO-aware multi-cluster workload management for cloud data warehouses.")
    parser.add_argument("--version", action="version", version=f"autoslo {_core.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("emulate", help="run a workload on the calibrated warehouse emulator", description="Run a workload on the calibrated warehouse emulator and report violation rate and cost.")
    _add_workload_args(p)
    p.add_argument("--clusters", type=argtypes.sizes, help="cluster sizes in RPU, comma-separated (default 16,16)")
    p.add_argument("--config", metavar="CONFIG.yaml", help="run an execution configuration (as `autoslo tune` writes): its clusters, routing, scheduled spinups and autoscaler")
    p.add_argument(
        "--routing",
        choices=_core.ROUTING_POLICIES,
        help="routing policy (default: autoslo, the product's router with the bundled Iconq+; baselines by name: round-robin, stage-cost, least-work; not with --config)",
    )
    p.add_argument("--model", metavar="DIR", help="Latency Predictor model directory (`autoslo predictor train` writes one; default: the bundled Iconq+)")
    p.add_argument("--timeout", type=argtypes.seconds_or_zero, default=3600.0, help="per-query timeout in s; 0 disables (default 3600)")
    p.add_argument("--lifecycle", choices=["fixed", "measured"], default="fixed", help="spinup/teardown times: fixed 300 s, or drawn from the real workgroup timings")
    p.add_argument("--trace", metavar="OUT.parquet", help="write the per-query trace to Parquet")
    p.add_argument("--clusters-out", metavar="OUT.parquet", help="write the per-cluster bills to Parquet")
    p.add_argument("--events-out", metavar="OUT.parquet", help="write the cluster events (spinups, teardowns, with reasons) to Parquet")
    p.add_argument("--decisions-out", metavar="OUT.parquet", help="write the autoscaler's decisions to Parquet: one row per option it compared, with its predicted violation rate and cost")
    p.add_argument("--admission", choices=("none", "deadline"), default="none", help="admission at the router boundary: none (default), or deadline (reject, before any work, queries whose Stage estimate exceeds their SLO on the largest cluster)")
    p.add_argument("--admission-margin", dest="admission_margin", type=float, default=1.0, help="with --admission deadline: reject only when the estimate exceeds SLO x this (default 1)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    g = p.add_argument_group("autoscaling (default: the clusters stay as given)")
    g.add_argument("--autoscaler", choices=_core.SCALING_POLICIES, help="scaling policy: autoslo (the paper's Autoscaler with one change, its selector's headroom of 2, and μ = 32; add-best --trigger combined is the literal form), add-best/horizontal/vertical with --trigger, noop, snowflake-standard, snowflake-economy, rais")
    g.add_argument("--trigger", help="spinup trigger of add-best/horizontal/vertical: combined (default), observed, queue@N")
    g.add_argument("--tau", type=argtypes.rate, help="target violation rate τ (default 0.1)")
    g.add_argument("--sizes", type=argtypes.sizes, help="eligible cluster sizes, comma-separated (default 4,8,16,32)")
    g.add_argument("--theta", type=argtypes.count(0), help="θ: observations before the trigger may fire (default 16)")
    g.add_argument("--mu", type=argtypes.count(1), help="μ: completions per selector branch (default 32 for autoslo, 16 for the baselines)")
    g.add_argument("--window", type=float, help="observation window w in s (default 300)")
    g.add_argument("--t-idle", dest="t_idle", type=float, help="T_idle in s (default 600)")
    g.add_argument("--t-min-lifetime", dest="t_min_lifetime", type=float, help="T_min_lifetime in s (default 1200)")
    g.add_argument("--max-clusters", dest="max_clusters", type=argtypes.count(1), help="never more active clusters than this (default 10)")
    g.add_argument("--rais-level", dest="rais_level", choices=["cost", "balanced", "performance"], help="price-performance level of the rais policy (default balanced)")
    p.set_defaults(func=cmd_emulate)

    p = sub.add_parser("workload", help="generate a workload and write it to Parquet", description="Generate a workload and write it to Parquet.")
    _add_workload_args(p)
    p.add_argument("--out", required=True, metavar="OUT.parquet", help="where to write the workload")
    p.set_defaults(func=cmd_workload)

    p = sub.add_parser("calibrate", help="compare the emulator with the real Redshift measurements", description="Compare the emulator's concurrency slowdowns and isolated runtimes with the real Redshift Serverless measurements.")
    p.add_argument("--seed", type=argtypes.count(0), default=0, help="check seed stream S: pools derive_seed(S, k) for k < --seeds (default 0)")
    p.add_argument("--seeds", type=argtypes.count(1), default=10, help="seeds pooled per emulated median (default 10)")
    p.add_argument("--replications", type=argtypes.count(1), default=20, help="repetitions of the measured isolated runs (default 20)")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--fit", action="store_true", help="fit the interference parameters instead (seeded; writes the parameter file the package ships)")
    p.add_argument("--fit-seeds", dest="fit_seeds", type=argtypes.count(1), default=30, help="with --fit: seeds of the fit stream pooled per evaluation (default 30)")
    p.add_argument("--budget", type=argtypes.count(1), default=2000, help="with --fit: loss evaluations per size (default 2000)")
    p.add_argument("--search-seed", dest="search_seed", type=argtypes.count(0), default=1, help="with --fit: seed of the search (default 1)")
    p.add_argument("--out", help="with --fit: where to write the parameters (default: the package's data/interference.csv)")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("catalog", help="report the TPC-DS runtime catalog's scaling-law fit", description="Report the size-scaling law's error on the measured isolated runtimes.")
    p.add_argument("--out", metavar="OUT.parquet", help="also write the measured catalog to Parquet")
    p.add_argument("--json", action="store_true", help="compact JSON")
    p.set_defaults(func=cmd_catalog)

    p = sub.add_parser(
        "demo",
        help="the whole story: plan a day from a week of history, then emulate it against the baselines",
        description="Generate a week of Redbench-like history, tune the next day's execution configuration with the Policy Tuner, emulate that day under it, untuned AutoSLO and the scaling users run today, and compare violation rate and cost, fleet-wide and per tenant × class.",
    )
    p.add_argument("--queries-per-day", type=float, default=20_000, help="weekday queries across tenants (default 20000)")
    p.add_argument("--seed", type=argtypes.count(0), default=1, help="seed (default 1)")
    p.add_argument("--kappa", type=float, default=4.0, help="SLO multiplier κ (default 4)")
    p.add_argument("--json", action="store_true", help="print rows as JSON")
    p.add_argument("--plot", default="autoslo-demo.png", metavar="PNG", help="where to save the cost-vs-violations figure (default autoslo-demo.png)")
    p.add_argument("--no-plot", dest="no_plot", action="store_true", help="do not save the figure")
    p.add_argument("--hindsight-plans", dest="hindsight_plans", type=argtypes.count(0), default=100, help="plans the search for the best plan in hindsight emulates (default 100; 0: no search)")
    p.set_defaults(func=cmd_demo)

    register_predictor(sub)
    register_tuner(sub)
    register_hindsight(sub, _add_workload_args, _workload)
    register_live(sub)

    p = sub.add_parser("reproduce", help="reproduce the paper's experiments on the emulator", description="Reproduce the paper's experiments on the emulator.")
    rs = p.add_subparsers(dest="experiment", required=True)
    r = rs.add_parser("router", help="Table 2: round robin vs Stage + cost vs AutoSLO routing")
    r.add_argument("--seed", type=argtypes.count(0), nargs="+", default=[0], help="one seed, or several (results averaged per scenario over seeds)")
    r.add_argument("--queries", type=argtypes.count(1), help="truncate each workload to this many queries (quick runs)")
    r.add_argument("--policies", nargs="+", default=list(ROUTER_POLICIES), choices=[*_core.ROUTING_POLICIES, "algorithm1"])
    r.add_argument("--model", help="predictor model directory (default: the bundled Iconq+)")
    r.add_argument("--slo-headroom", dest="slo_headroom", type=float, default=_core.DEFAULT_SLO_HEADROOM, help="autoslo counts a violation when prediction × this > SLO (default %(default)s; 1 = Algorithm 1 literally)")
    r.add_argument("--no-arrival-correction", dest="arrival_correction", action="store_false", help="ablation: route on raw Iconq+ predictions at arrival")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_reproduce_router)
    for name, methods, helptext in (
        ("spinup-size", SPINUP_SIZE_METHODS, "Table 3: noop vs horizontal vs vertical vs add-best after one forced decision"),
        ("trigger", TRIGGER_METHODS, "Table 4: noop vs queue@32 vs observed vs combined triggers, and Snowflake and RAIS-like scaling"),
    ):
        r = rs.add_parser(name, help=helptext)
        r.add_argument("--seed", type=argtypes.count(0), nargs="+", default=[0], help="one seed, or several (results averaged per scenario over seeds)")
        r.add_argument("--queries", type=argtypes.count(1), help="truncate each workload to this many queries (quick runs)")
        r.add_argument("--methods", nargs="+", default=list(methods), choices=list(methods))
        r.add_argument("--model", help="predictor model directory (default: the bundled Iconq+)")
        r.add_argument("--json", action="store_true")
        r.set_defaults(func=cmd_reproduce_autoscaler, table=name)
    for name, helptext in (
        ("tuner", "Table 5: tuning with no past data vs 1, 7 and 30 days of history"),
        ("end-to-end", "Figure 6: AutoSLO tuned on 30 days vs 1x64, 2x32 round robin, RAIS-like and Snowflake scaling"),
    ):
        r = rs.add_parser(name, help=helptext)
        r.add_argument("--seed", type=argtypes.count(0), default=0, help="seed of the generated history and the tuner (default 0)")
        r.add_argument("--queries-per-day", dest="queries_per_day", type=float, default=15_000, help="weekday queries of the generated history (default 15000)")
        r.add_argument("--target-days", dest="target_days", type=argtypes.count(1), nargs="+", help="day indices from 2024-04-01 to plan (default 30 65)")
        r.add_argument("--kappas", type=float, nargs="+", help="SLO multipliers (default 4 2)")
        r.add_argument("--forecasts", type=argtypes.count(2), help="forecasts per tuning (default 8)")
        r.add_argument("--arrivals", choices=["deciles", "pattern"], help="the forecaster's arrival model (default: the product's, see docs/tuner.md)")
        r.add_argument("--tau-simulated", dest="tau_simulated", type=argtypes.rate, help="the violation-rate target the tuner holds simulations to (default τ)")
        r.add_argument("--tau-scope", dest="tau_scope", choices=TAU_SCOPES, help="whose violation rate τ holds in the tuner: fleet (default, the paper's) or tenant (every tenant's too, a change)")
        r.add_argument(
            "--cost-tolerance", dest="cost_tolerance", type=float, metavar="FRACTION", help="among configurations that meet τ within FRACTION of the cheapest cost, take the fewest violations (a change; default 0, BestWithTarget as listed)"
        )
        r.add_argument(
            "--simulator-cold-start", dest="simulator_cold_start", type=float, metavar="FACTOR", help="slow queries on clusters spun up in a simulation by FACTOR, fading over 300 s (a change; default none, the paper's simulator)"
        )
        r.add_argument(
            "--simulator-noise", dest="simulator_noise", type=float, metavar="SIGMA", help="scatter simulated latencies around their predictions by exp(SIGMA·z), z standard normal (a change; default none, the paper's simulator)"
        )
        r.add_argument(
            "--simulator-calibration",
            dest="simulator_calibration",
            action="store_true",
            help="scale the simulator's latencies per workload class as the emulator ran the day before the target day under the untuned configuration (a change; default off, the paper's simulator)",
        )
        r.add_argument(
            "--learn-gap",
            dest="learn_gap",
            action="store_true",
            help="tune the day before too, run it on the emulator, and hold the day's simulations to τ minus how much later it ran than its estimate (a change; default off)",
        )
        r.add_argument("--t-idle", dest="t_idle", type=float, nargs="+", metavar="S", help=f"the T_idle values (s) the Configuration Tuner tries (default {' '.join(f'{t:g}' for t in _core.DEFAULT_T_IDLE_S)})")
        r.add_argument("--tau-trigger", dest="tau_trigger", type=argtypes.rate, nargs="+", metavar="RATE", help=f"the τ_trigger values the Configuration Tuner tries (default {' '.join(f'{t:g}' for t in _core.DEFAULT_TAU_TRIGGER)})")
        r.add_argument("--model", help="predictor model directory (default: the bundled Iconq+)")
        r.add_argument("--json", action="store_true")
        if name == "tuner":
            r.add_argument("--history", type=argtypes.count(0), nargs="+", help="days of history to compare (default 0 1 7 30; 0 = no past data)")
        else:
            r.add_argument("--plot", metavar="FIG6.png", help="save the figure")
            r.add_argument("--hindsight-plans", dest="hindsight_plans", type=argtypes.count(0), help="plans the search for the best plan in hindsight emulates per scenario (default 200; 0: no search)")
        r.set_defaults(func=cmd_reproduce_tuner, experiment_name=name)
    r = rs.add_parser("canopy", help="the multi-tenant analytics case's fixture: capacity, memory, global vs tenant p99, fairness, daily cost")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_reproduce_canopy)
    r = rs.add_parser("placement", help="the load-balancing chapter's Mercury fixture: count-balanced vs work-aware placement, remapping, a 3x slower worker (and a 3x slower cluster on the emulator)")
    r.add_argument("--seed", type=argtypes.count(0), default=0)
    r.add_argument("--emulator-seed", dest="emulator_seed", type=argtypes.count(0), default=3, help="Redbench seed of the emulated slowdown (default 3; 2 was used to choose the ejection settings)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_reproduce_placement)
    r = rs.add_parser("premium", help="on the emulator: the fleet meets its objective while a premium tenant misses it; tenant-aware policies beside a tenant-blind one")
    r.add_argument("--seed", type=argtypes.count(0), default=2, help="Redbench seed (default 2)")
    r.add_argument("--premium", default="tenant-3", help="the premium tenant (default tenant-3)")
    r.add_argument("--tau", type=argtypes.rate, default=0.10, help="every population's violation-rate objective (default 0.10)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_reproduce_premium)
    r = rs.add_parser("deferral", help="on the emulator: backfills deferred to the night, beside no queue and an 8-slot queue")
    r.add_argument("--seed", type=argtypes.count(0), nargs="+", default=[0, 2, 3], help="Redbench seeds (default 0 2 3; 1 chose the background slots)")
    r.add_argument("--background-slots", dest="background_slots", type=argtypes.count(1), default=1, help="deferred work runs on clusters holding fewer queries than this (default 1)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_reproduce_deferral)
    r = rs.add_parser("all", help="Tables 2, 3 and 4, and the canopy and Mercury fixtures, at once: JSON, a figure per table (PNG) and a summary page")
    r.add_argument("--seed", type=argtypes.count(0), nargs="+", default=[0, 1, 2, 3, 4], help="seeds (default 0 1 2 3 4)")
    r.add_argument("--out", required=True, help="directory for the results (e.g. docs/results)")
    r.add_argument("--no-figures", dest="no_figures", action="store_true", help="skip the PNG figures (they need matplotlib)")
    r.add_argument("--model", help="predictor model directory (default: the bundled Iconq+)")
    r.set_defaults(func=cmd_reproduce_all)
    return parser


def cmd_reproduce_canopy(args: argparse.Namespace) -> int:
    r = json.loads(_core.canopy_report())
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print("The multi-tenant analytics case (002_…), recomputed from its inputs:\n")
    rows = [{**c, "cost_per_query": f"${c['cost_per_query']:.7f}"} for c in r["classes"]]
    print(fmt_table(rows, ["class", "rate_per_s", "cpu_cores", "scan_gib_per_s", "live_queries", "live_memory_gib", "cost_per_query", "cost_per_day"]))
    print()
    print(f"queries/s {r['queries_per_s']:.2f}; CPU {r['cpu_cores']:.1f} cores ({r['cpu_share_of_safe']:.1%} of the safe envelope); scan {r['scan_gib_per_s']:.1f} GiB/s ({r['scan_share_of_safe']:.1%})")
    print(f"unconstrained live memory {r['unconstrained_memory_gib']:.1f} GiB against a safe {r['safe_memory_gib']:.0f} GiB")
    print(f"dashboard p99: global {r['global_dashboard_p99_s']} s, Aster {r['aster_dashboard_p99_s']} s")
    print(f"Jain's index over four populations' attainment: {r['jain_baseline']:.4f} -> {r['jain_selected']:.5f}")
    print(f"cost per day from the rate card: ${r['cost_per_day']:,.2f}")
    return 0


def cmd_reproduce_placement(args: argparse.Namespace) -> int:
    r = json.loads(_core.mercury_report(args.seed))
    r["emulator"] = emulated_slowdown(seed=args.emulator_seed)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    workers = "ABCDEFGH"
    print(f"Mercury: 12,000 requests/s on 8 workers, budget {r['budget_ms_per_s']:.0f} CPU ms/s each, mean demand {r['mean_cpu_ms_per_s']:.0f}\n")
    rows = [{"policy": run["policy"], **{w: c for w, c in zip(workers, run["cpu_ms_per_s"])}, "peak": run["peak_cpu_ms_per_s"], "over budget": run["workers_over_budget"], "p99 ms": run["p99_response_ms"]} for run in (r["count_balanced"], r["work_aware"])]
    print(fmt_table(rows, list(rows[0])))
    s = r["slowdown"]
    print(f"\nworker {workers[s['worker']]} {s['factor']:.0f}x slower from {s['from_s']:.0f} s for {s['for_s']:.0f} s (300 s run):")
    rows = [{"policy": run["policy"], "p99 ms": run["p99_response_ms"], "p99 ms in the slow window": run["p99_response_slow_window_ms"], "slow worker's share": run["slow_worker_share"], "ejections": " ".join(f"{t:.0f}s+{d:.0f}s" for t, _, d in run["ejections"]) or "-"} for run in r["slow"]]
    print(fmt_table(rows, list(rows[0])))
    print(f"\nremapped on 10 -> 11 workers: modulo {r['remap_modulo_10_to_11']:.3f} (10/11 = 0.909), consistent ring {r['remap_ring_10_to_11']:.3f} (1/11 = 0.091)")
    e = r["emulator"]
    print(f"\non the emulator (Redbench seed {e['seed']}): cluster 1 of 3 x 16 RPU {e['factor']:.0f}x slower from {e['window_s'][0] / 3600:.0f} h to {e['window_s'][1] / 3600:.0f} h, AutoSLO router:")
    rows = [{"run": x["run"], "VR": x["violation_rate"], "VR in the slow window": x["window_violation_rate"], "slow cluster's share": x["slow_cluster_share"], "cost": x["cost"], "ejections": " ".join(f"{ev}@{t / 3600:.2f}h" for t, _, ev in x["ejections"]) or "-"} for x in e["runs"]]
    print(fmt_table(rows, list(rows[0])))
    return 0


def cmd_reproduce_premium(args: argparse.Namespace) -> int:
    r = premium_tenant(seed=args.seed, premium=args.premium, tau=args.tau)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"Redbench seed {r['seed']}, 6,000 queries, 4 tenants, AutoSLO router; objective: violation rate <= {r['tau']:.0%} for the fleet and each tenant; premium: {r['premium']}\n")
    tenants = sorted(r["runs"][0]["per_tenant"])
    rows = [{"run": x["run"], "fleet VR": x["violation_rate"], **{t: x["per_tenant"][t] for t in tenants}, "cost": x["cost"], "flagged": " ".join(x["flagged"]) or "-"} for x in r["runs"]]
    print(fmt_table(rows, list(rows[0])))
    return 0


def cmd_reproduce_deferral(args: argparse.Namespace) -> int:
    r = deferred_batch(seeds=tuple(args.seed), background_slots=args.background_slots)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print("Redbench days, 6,000 queries, 4 tenants, 2 x 16 RPU, AutoSLO router; backfill deadline 1 day; deferral window 20 h - 6 h\n")
    classes = sorted(r["rows"][0]["per_class"])
    rows = [{"seed": x["seed"], "run": x["run"], "VR": x["violation_rate"], **{c: x["per_class"][c] for c in classes}, "cost": x["cost"], "refused": x["refused"], "timeouts": x["timeouts"]} for x in r["rows"]]
    print(fmt_table(rows, list(rows[0])))
    return 0


def reproduction_tuner_settings(args: argparse.Namespace) -> TunerSettings:
    """The tuner settings `reproduce tuner` / `end-to-end` run with: the reproductions' own, with
    the command line's changes."""
    from dataclasses import replace

    from autoslo.reproduce_tuner import reproduction_settings

    settings = reproduction_settings()
    if args.forecasts is not None:
        settings = replace(settings, forecasts=args.forecasts)
    if args.arrivals is not None:
        settings = replace(settings, arrivals=args.arrivals)
    if args.tau_simulated is not None:
        settings = replace(settings, tau_simulated=args.tau_simulated)
    if args.simulator_cold_start is not None:
        settings = replace(settings, simulator_cold_start_factor=args.simulator_cold_start)
    if args.simulator_noise is not None:
        settings = replace(settings, simulator_noise_sigma=args.simulator_noise)
    if args.cost_tolerance is not None:
        settings = replace(settings, cost_tolerance=args.cost_tolerance)
    if args.tau_scope is not None:
        settings = replace(settings, tau_scope=args.tau_scope)
    if args.t_idle:
        settings = replace(settings, space={**(settings.space or {}), "t_idle_s": [float(t) for t in args.t_idle]})
    if args.tau_trigger:
        settings = replace(settings, space={**(settings.space or {}), "tau_trigger": [float(t) for t in args.tau_trigger]})
    return settings


def cmd_reproduce_tuner(args: argparse.Namespace) -> int:
    from autoslo.reproduce_tuner import experiment, reproduce_end_to_end, reproduce_tuner

    settings = reproduction_tuner_settings(args)
    history = getattr(args, "history", None) or ((0, 1, 7, 30) if args.experiment_name == "tuner" else (30,))
    exp = experiment(seed=args.seed, queries_per_day=args.queries_per_day, target_days=args.target_days, kappas=args.kappas, history=history, settings=settings, calibrate_simulator=args.simulator_calibration, hindsight_plans=getattr(args, "hindsight_plans", None), learn_gap=args.learn_gap)
    predictor = load(args.model) if args.model else None
    if args.experiment_name == "tuner":
        out = reproduce_tuner(exp, predictor=predictor)
    else:
        out = reproduce_end_to_end(exp, predictor=predictor, plot=args.plot)
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
    key = "history_days" if args.experiment_name == "tuner" else "method"
    rows = [{"scenario": r["scenario"], key: r[key], "violation_rate": r["violation_rate"], "cost": r["cost"], "clusters": r["clusters"]} for r in out["rows"]]
    print(fmt_table(rows, ["scenario", key, "violation_rate", "cost", "clusters"]))
    if args.experiment_name == "tuner":
        for h, s in out["mean_change_vs_no_past_data"].items():
            ref = f"  (paper: {s['paper_violation_rate_change']:+.1%})" if s["paper_violation_rate_change"] is not None else ""
            above = s["mean_violation_rate_change_above_floor"]
            floor = f"; {above:+.1%} above the SLOs out of reach" if above is not None else ""
            print(f"{h} days of history: mean violation-rate change {s['mean_violation_rate_change']:+.1%}{floor}, cost {s['mean_cost_change']:+.1%} vs no past data{ref}")
            for t, c in s["per_tenant"].items():
                change = f"{c['mean_violation_rate_change']:+.1%}" if c["mean_violation_rate_change"] is not None else "-"
                floor = ""
                if "slo_infeasible_share" in c:
                    a = c["mean_violation_rate_change_above_floor"]
                    floor = f"; {c['slo_infeasible_share']:.1%} of its SLOs out of reach" + (f", {a:+.1%} above them" if a is not None else "")
                print(f"    {t}: {change} ({c['untuned_violation_rate']:.2%} → {c['tuned_violation_rate']:.2%} on average; worse in {c['worse_in']} of {c['scenarios']} scenarios{floor})")
        for sc, inf in out["slo_infeasible"].items():
            print(f"{sc}: {inf['share']:.1%} of the queries miss their SLO even alone on {', '.join(map(str, inf['sizes']))} RPU")
    else:
        for p in out["per_scenario"]:
            vs = f"{p['cost_change_vs_it']:+.1%} cost vs {p['cheapest_baseline_meeting_tau']}" if p["cheapest_baseline_meeting_tau"] else "no baseline meets τ"
            inf = p["slo_infeasible"]
            on = ", ".join(map(str, inf["sizes"]))
            reach = f"; {inf['share']:.1%} of the queries miss their SLO even alone on {on} RPU ({inf['share_on_64_rpu']:.1%} on 64 RPU)"
            hs = ""
            if p.get("hindsight_cost") is not None:
                hs = f"; best plan in hindsight ${p['hindsight_cost']:.2f} at {p['hindsight_violation_rate']:.1%}, regret {p['regret']:+.1%}"
            print(f"{p['scenario']}: AutoSLO {'meets' if p['autoslo_meets_tau'] else 'MISSES'} τ at {p['autoslo_violation_rate']:.1%}; {vs}{hs}{reach}")
        if out.get("mean_regret") is not None:
            print(f"regret against the best plan in hindsight: mean {out['mean_regret']:+.1%}, max {out['max_regret']:+.1%}")
    print(f"goal met: {out['goal']['met']}")
    return 0


def cmd_reproduce_all(args: argparse.Namespace) -> int:
    reproduce_all(args.out, seeds=args.seed, predictor=load(args.model) if args.model else None, figures=not args.no_figures)
    print((Path(args.out) / "README.md").read_text())
    return 0


def cmd_reproduce_autoscaler(args: argparse.Namespace) -> int:
    run = reproduce_spinup_size if args.table == "spinup-size" else reproduce_trigger
    seed = args.seed[0] if len(args.seed) == 1 else args.seed
    out = run(seed=seed, methods=args.methods, queries=args.queries, predictor=load(args.model) if args.model else None)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    groups: dict[tuple, list[dict]] = {}
    for r in out["rows"]:
        groups.setdefault((r["rate"], r["kappa"], "+".join(map(str, r["clusters"])), r["method"]), []).append(r)
    rows = [
        {
            "rate": k[0],
            "kappa": k[1],
            "clusters": k[2],
            "method": k[3],
            "violation_rate": sum(x["violation_rate"] for x in g) / len(g),
            "cost": sum(x["cost"] for x in g) / len(g),
            "spinups": " ".join(str(len(x["spinups"])) for x in g),
        }
        for k, g in groups.items()
    ]
    what = "the last 20 % of each workload" if args.table == "spinup-size" else "the whole workload"
    print(f"means over seeds {', '.join(map(str, args.seed))}, measured over {what}; spinups: count per seed (sizes and times in --json)")
    print(fmt_table(rows, ["rate", "kappa", "clusters", "method", "violation_rate", "cost", "spinups"]))
    for m, s in out["mean_change_vs_noop"].items():
        paper = s["paper"]
        ref = f"  (paper: {paper['mean_violation_rate_change']:+.1%} / {paper['mean_cost_change']:+.1%})" if paper else ""
        print(f"{m}: mean violation-rate change {s['mean_violation_rate_change']:+.1%}, cost {s['mean_cost_change']:+.1%} vs noop{ref}")
    return 0


def cmd_reproduce_router(args: argparse.Namespace) -> int:
    pred = load(args.model) if any(p != "round-robin" for p in args.policies) else None
    if pred is not None and not args.arrival_correction:
        pred = pred.without_arrival_correction()
    out = reproduce_router(seed=args.seed[0] if len(args.seed) == 1 else args.seed, policies=args.policies, queries=args.queries, predictor=pred, slo_headroom=args.slo_headroom)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    rows = [{**r, "clusters": "+".join(map(str, r["clusters"]))} for r in out["rows"]]
    if len(args.seed) > 1:
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            groups.setdefault((r["rate"], r["kappa"], r["clusters"], r["policy"]), []).append(r)
        rows = [
            {"rate": k[0], "kappa": k[1], "clusters": k[2], "policy": k[3], "violation_rate": sum(x["violation_rate"] for x in g) / len(g), "cost": sum(x["cost"] for x in g) / len(g), "timeouts": sum(x["timeouts"] for x in g)}
            for k, g in groups.items()
        ]
        print(f"means over seeds {', '.join(map(str, args.seed))} (timeouts: total)")
    print(fmt_table(rows, ["rate", "kappa", "clusters", "policy", "violation_rate", "cost", "timeouts"]))
    for seed, ch in out.get("per_seed", {}).items():
        print(f"seed {seed}: " + ", ".join(f"{p} {c['mean_violation_rate_change']:+.1%} / {c['mean_cost_change']:+.1%}" for p, c in ch.items()))
    for p, s in out["mean_change_vs_round_robin"].items():
        paper = s["paper"]
        ref = f"  (paper: {paper['mean_violation_rate_change']:+.1%} / {paper['mean_cost_change']:+.1%})" if paper else ""
        print(f"{p}: mean violation-rate change {s['mean_violation_rate_change']:+.1%}, cost {s['mean_cost_change']:+.1%} vs round robin{ref}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except _core.AutoSloCoreError as e:
        print(f"autoslo: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"autoslo: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        # A missing file, a directory where a file was expected, no permission: say which path.
        print(f"autoslo: error: {f'{e.strerror}: {e.filename}' if e.strerror and e.filename else e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autoslo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
