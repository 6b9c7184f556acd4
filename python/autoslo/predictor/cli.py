"""``autoslo predictor …``: generate traces, train, evaluate and bundle the Latency Predictor."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autoslo import argtypes
from autoslo import predictor as P
from autoslo.predictor.data import SIZES
from autoslo.workloads import read_table


def _fmt_q(d: dict) -> str:
    return f"p50 {d['p50']:.3f}  p90 {d['p90']:.3f}  p95 {d['p95']:.3f}  (n={d['n']})"


def _config(args: argparse.Namespace) -> P.TrainConfig:
    keys = ("epochs", "hidden", "embedding", "batch_size", "max_train_samples", "seed", "threads")
    kw = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    return P.TrainConfig(**kw)


def cmd_arrival(args: argparse.Namespace) -> int:
    traces = P.load_traces(args.traces)
    models = args.models or [str(P.bundled_model_dir(v)) for v in P.BUNDLED]
    reports = {}
    for m in models:
        reports[m] = P.fit_arrival(m, traces.train, traces.val, traces.test, seed=args.seed, threads=args.threads)
        P.print_arrival(m, reports[m])
    if args.json:
        print(json.dumps(reports, indent=1))
    return 0


def _rpu(values: list[str] | None) -> int | dict[str, int] | None:
    """``--rpu N`` (one workgroup) or ``--rpu WG=N …`` (each workgroup)."""
    if not values:
        return None
    if len(values) == 1 and "=" not in values[0]:
        return argtypes.size(values[0])
    out = {}
    for v in values:
        w, sep, n = v.partition("=")
        if not sep or not w:
            raise ValueError(f"--rpu {v}: give N for one workgroup, or WORKGROUP=N for each")
        out[w] = argtypes.size(n)
    return out


def cmd_data(args: argparse.Namespace) -> int:
    history_opts = [f"--{n.replace('_', '-')}" for n in ("texts", "explain", "plans", "rpu") if getattr(args, n)] + (["--split"] if args.split != "time" else [])
    if args.from_history:
        given = [f"--{n}" for n in ("seeds", "sizes") if getattr(args, n) is not None] + (["--redbench"] if args.redbench else []) + (["--from-trace"] if args.from_trace else [])
        if given:
            raise ValueError(f"{', '.join(given)}: not used with --from-history")
        from autoslo.predictor.history import from_history, print_report

        h = from_history(args.from_history, texts=args.texts or (), explain=args.explain or (), plans=args.plans or (), rpu=_rpu(args.rpu), dialect=args.dialect, out=args.out, split=args.split)
        print_report(h.report)
        print(f"wrote {h.report.parts['train']} train / {h.report.parts['val']} val / {h.report.parts['test']} test queries, {h.report.classes} classes to {args.out}")
        return 0
    if history_opts:
        raise ValueError(f"{', '.join(history_opts)}: options of --from-history")
    if args.from_trace:
        given = [f"--{n}" for n in ("seeds", "sizes") if getattr(args, n) is not None] + (["--redbench"] if args.redbench else [])
        if given:
            raise ValueError(f"{', '.join(given)}: options of the emulated runs, not used with --from-trace")
        ts = P.from_traces(args.from_trace, out=args.out)
    else:
        cfg = P.DataConfig(seeds=tuple(args.seeds or (0, 1, 2, 3)), sizes=tuple(args.sizes or SIZES), redbench=P.REDBENCH if args.redbench else ())
        ts = P.generate_traces(cfg, out=args.out)
    print(f"wrote {len(ts.manifest['files'])} traces ({ts.train.num_rows} train / {ts.val.num_rows} val / {ts.test.num_rows} test queries) to {args.out}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    traces = P.load_traces(args.traces)
    variants = list(P.VARIANTS) if args.variant == "all" else [args.variant]
    reports = P.train_variants(traces, Path(args.out), variants, _config(args), layout_bundle=args.variant == "all")
    if args.json:
        print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "history"} for k, v in reports.items()}, indent=1))
    return 0


def cmd_bundle(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else P.bundled_model_dir().parent
    traces = P.generate_traces(P.DataConfig(), out=None)
    reports = P.train_variants(traces, out, list(P.VARIANTS), _config(args), layout_bundle=True)
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "history"} for k, v in reports.items()}, indent=1))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    models = None
    if args.models:
        # Name each model by its variant; a variant given twice (or no readable meta) is named by its path.
        models = {}
        for m in args.models:
            meta = Path(m) / "meta.json"
            variant = json.loads(meta.read_text()).get("variant") if meta.is_file() else None
            models[variant if variant and variant not in models else m] = m
    train = None
    if args.trace:
        trace = read_table(args.trace)
    elif args.traces:
        ts = P.load_traces(args.traces)
        trace, train = ts.test, ts.train
    else:
        trace = None
    r = P.evaluate(models, trace, train=train)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    print(f"{r['queries']} queries")
    for name, v in r["variants"].items():
        print(f"{name:>9}: {_fmt_q(v['overall'])}  mean ln residual {v['mean_ln_residual']:+.3f}")
        for s, q in v["per_rpu"].items():
            print(f"{'':>9}  {s:>2} RPU: {_fmt_q(q)}")
        for c, q in v.get("per_class", {}).items():
            print(f"{'':>9}  {c:>9}: {_fmt_q(q)}  mean ln residual {q['mean_ln_residual']:+.3f}")
        print(f"{'':>9}  Stage alone: {_fmt_q(v['stage_only'])}")
        for path, q in v.get("stage_paths", {}).items():
            if q["n"]:
                print(f"{'':>9}  Stage from {dict(measured='a measured run', size_law='the size-scaling law', features='features')[path]}: {_fmt_q(q)}")
    if "concurrency_blind" in r:
        b = r["concurrency_blind"]
        print(f"concurrency-blind (each class's median latency in training): {_fmt_q(b['overall'])}  mean ln residual {b['mean_ln_residual']:+.3f}  ({b['classes_not_in_training']} queries of classes training lacks)")
    if "noise_floor" in r:
        floor = r["noise_floor"]
        print(f"noise floor (real isolated runs, each predicted by its own runs' geometric mean): {_fmt_q(floor['overall'])}")
    return 0


def cmd_cards(args: argparse.Namespace) -> int:
    from autoslo.predictor.cards import write_cards

    for path in write_cards(args.out):
        print(path)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predictor", help="generate traces, train, evaluate the Latency Predictor", description="Latency Predictor: training data, training, evaluation, the bundled models.")
    ps = p.add_subparsers(dest="predictor_command", required=True)

    c = ps.add_parser("cards", help="write the bundled models' cards and training configurations (the repository's models/)")
    c.add_argument("--out", default="models", help="directory (default models)")
    c.set_defaults(func=cmd_cards)

    d = ps.add_parser("data", help="emulate the paper's training traces to Parquet, or split traces of your own")
    d.add_argument("--out", required=True, help="output directory")
    d.add_argument("--seeds", type=argtypes.count(0), nargs="+", help="seeds; the last two are validation and test (default 0 1 2 3)")
    d.add_argument("--sizes", type=argtypes.size, nargs="+", help="cluster sizes (RPU) (default 4 8 16 32)")
    d.add_argument(
        "--from-trace",
        dest="from_trace",
        nargs="+",
        metavar="PATH",
        help="learn from these executions instead (`autoslo emulate --trace`, `autoslo live --trace`, or the directory `autoslo serve --log` writes): each is cut by arrival, 70 %% train, 15 %% validation, the last 15 %% test",
    )
    d.add_argument("--redbench", action="store_true", help="also Redbench-like windows on each size (multi-tenant traffic with heavy backfills; see docs/predictor.md)")
    d.add_argument(
        "--from-history",
        dest="from_history",
        nargs="+",
        metavar="FILE",
        help="learn from a warehouse's query history: SYS_QUERY_HISTORY exports (CSV or Parquet: query_id, start_time, end_time, status; query_text, query_type, result_cache_hit, generic_query_hash, workgroup, rpu where present), cut by arrival 70/15/15 %%",
    )
    d.add_argument("--texts", nargs="+", metavar="FILE", help="with --from-history: SYS_QUERY_TEXT rows (query_id, sequence, text), the full texts")
    d.add_argument("--explain", nargs="+", metavar="FILE", help="with --from-history: SYS_QUERY_EXPLAIN rows (query_id, child_query_sequence, plan_node_id, plan_parent_id, plan_node)")
    d.add_argument("--plans", nargs="+", metavar="FILE", help="with --from-history: EXPLAIN outputs (query_id, plan: Redshift or PostgreSQL text, or PostgreSQL JSON)")
    d.add_argument("--rpu", nargs="+", metavar="N|WG=N", help="with --from-history and no `rpu` column: the cluster size, N for one workgroup or WORKGROUP=N for each")
    d.add_argument("--dialect", default="redshift", choices=["redshift", "postgres", "generic"], help="with --from-history: the SQL dialect (default redshift)")
    d.add_argument(
        "--split",
        default="time",
        choices=["time", "classes"],
        help="with --from-history: cut by arrival (time, the default) or leave classes out (classes: each class in one part; a model trained on it is judged on classes it never saw)",
    )
    d.set_defaults(func=cmd_data)

    def hyper(q: argparse.ArgumentParser) -> None:
        q.add_argument("--epochs", type=argtypes.count(1))
        q.add_argument("--hidden", type=argtypes.count(1))
        q.add_argument("--embedding", type=argtypes.count(1))
        q.add_argument("--batch-size", dest="batch_size", type=argtypes.count(1))
        q.add_argument("--max-train-samples", dest="max_train_samples", type=argtypes.count(1), help="cap samples per epoch (quick runs)")
        q.add_argument("--seed", type=argtypes.count(0))
        q.add_argument("--threads", type=argtypes.count(1), help="torch CPU threads (default 2)")

    t = ps.add_parser("train", help="train Stage and an Iconq+ variant; export TorchScript + metadata")
    t.add_argument("--traces", required=True, help="directory written by `autoslo predictor data`")
    t.add_argument("--out", required=True, help="model directory (for --variant all: one subdirectory per variant)")
    t.add_argument("--variant", default="iconq+", choices=[*P.VARIANTS, "all"])
    t.add_argument("--json", action="store_true")
    hyper(t)
    t.set_defaults(func=cmd_train)

    e = ps.add_parser("eval", help="Q-error p50/p90/p95 of the ablation variants on held-out traces")
    e.add_argument("--trace", help="a trace in the emulator's format (Parquet)")
    e.add_argument("--traces", help="use the test split of this `predictor data` directory")
    e.add_argument("--models", nargs="+", help="model directories (default: the bundled variants)")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_eval)

    a = ps.add_parser("arrival", help="fit the at-arrival correction of trained models (replaying the training traces)")
    a.add_argument("--traces", required=True, help="the `predictor data` directory the models were trained on")
    a.add_argument("--models", nargs="+", help="model directories (default: the bundled variants)")
    a.add_argument("--seed", type=argtypes.count(0), default=0)
    a.add_argument("--threads", type=argtypes.count(1), default=2)
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_arrival)

    b = ps.add_parser("bundle", help="rebuild the bundled default models (all four variants)")
    b.add_argument("--out", help="default: the package's models directory")
    hyper(b)
    b.set_defaults(func=cmd_bundle)
