"""``autoslo local`` (the local Redshift Serverless endpoint and its TPC-DS database),
``autoslo live`` (a workload replayed as SQL on real clusters) and ``autoslo serve`` (routing
decisions over real clusters, on HTTP)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from autoslo import _core, argtypes
from autoslo.bundled import model_option
from autoslo.live import LocalData, LocalEndpoint, default_data_dir, live, prepare_tpcds, read_sql_map, runnable, serve
from autoslo.serving import ServedLog, make_server, read_token
from autoslo.tables import fmt_table
from autoslo.tenancy import Budgets, DeadlineAdmission
from autoslo.tuner import ExecutionConfig
from autoslo.workloads import check_output, read_workload, write_table


def _plan_options(args: argparse.Namespace) -> Any:
    """Refuse --clusters, --routing or --autoscaler beside --config (the configuration sets them);
    the predictor --model names, where something predicts."""
    if args.config:
        overlap = [f"--{d}" for d in ("clusters", "routing", "autoscaler") if getattr(args, d) is not None]
        if overlap:
            raise ValueError(f"--config sets the clusters, routing and autoscaler: give {', '.join(overlap)} in the configuration, not beside it")
    return model_option(args.model, args.routing, scales=bool(args.config or args.autoscaler))


def cmd_local_prepare(args: argparse.Namespace) -> int:
    data = prepare_tpcds(args.data, scale=args.scale, query_timeout_s=args.query_timeout, replace=args.replace)
    m = data.manifest
    print(json.dumps({"data": str(data.root), "scale": m["scale"], "tables": m["tables"], "templates_that_ran": m["templates_that_ran"]}))
    return 0


def cmd_local_endpoint(args: argparse.Namespace) -> int:
    data = LocalData.open(args.data or default_data_dir()) if not args.empty else None
    ep = LocalEndpoint(port=args.port, time_factor=args.time_factor, template=str(data.template) if data else None)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"local Redshift Serverless endpoint on {ep.url} (workgroups are PostgreSQL servers; Ctrl-C stops it and them)")
    print(f"export AWS_ENDPOINT_URL_REDSHIFT_SERVERLESS={ep.url}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        ep.close()
    return 0


def cmd_live(args: argparse.Namespace) -> int:
    # What can be checked without a database or an endpoint is checked first.
    if args.local and args.endpoint:
        raise ValueError("give --endpoint or --local, not both")
    predictor = _plan_options(args)
    for out in (args.trace, args.events_out, args.decisions_out):
        check_output(out)
    wl = read_workload(args.workload, kappa=args.kappa)
    first = float(wl["arrival"][0].as_py()) if wl.num_rows else 0.0
    shift = 0.0
    if args.from_first_arrival:
        shift = first
        wl = wl.set_column(wl.schema.get_field_index("arrival"), "arrival", pc.subtract(wl["arrival"], shift))
    elif first / args.time_scale > 60:
        print(
            f"autoslo live: the first query arrives at workload second {first:.0f} ({first / 3600:.2f} h), {first / args.time_scale:.0f} real seconds"
            f" after the start at --time-scale {args.time_scale:g}; --from-first-arrival starts the replay there",
            file=sys.stderr,
        )
    if args.sql:
        sql: Any = read_sql_map(args.sql)
    else:
        sql = LocalData.open(args.data or default_data_dir())
    if args.only_runnable:
        wl = runnable(wl, sql)
    ep = None
    endpoint = args.endpoint
    if args.local:
        data = sql if isinstance(sql, LocalData) else LocalData.open(args.data or default_data_dir())
        ep = LocalEndpoint(time_factor=args.time_factor, template=str(data.template))
        endpoint = ep.url
    kwargs: dict[str, Any] = dict(
        predictor=predictor,
        sql=sql,
        endpoint=endpoint,
        time_scale=args.time_scale,
        timeout_s=args.timeout if args.timeout > 0 else None,
        tick_s=args.tick,
        spinup_s=args.spinup,
        name_prefix=args.name_prefix,
        keep_leftovers=args.keep_leftovers,
        pool_size=args.pool_size,
        create_timeout_s=args.create_timeout,
        progress=args.progress,
    )
    # A supervisor's SIGTERM (Airflow, systemd, Kubernetes) stops the run as Ctrl-C does: the
    # queries left end `cancelled` and the workgroups are deleted. Python's default would end the
    # process at once and leave them running.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if args.config:
            result = live(wl, config=ExecutionConfig.load(args.config).from_time(shift), **kwargs)
        else:
            result = live(wl, args.clusters or [16, 16], routing=args.routing or "autoslo", autoscaler=args.autoscaler, **kwargs)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ep is not None:
            ep.close()
    if args.trace:
        write_table(result.trace, args.trace)
    if args.events_out:
        write_table(result.events, args.events_out)
    if args.decisions_out:
        write_table(result.decisions, args.decisions_out)
    summary = {**result.summary(), "retried": result.retried, "interrupted": result.interrupted, **({"arrivals_moved_by_s": shift} if shift else {})}
    if args.json:
        print(json.dumps({**summary, "cluster_events": result.events.to_pylist(), "workgroups": result.workgroups}))
    else:
        print(fmt_table([summary], list(summary)))
        print()
        print(fmt_table(result.events.to_pylist(), ["time", "cluster_id", "size", "event", "reason"]))
    return 130 if result.interrupted else 0


def _since_midnight(now: dt.datetime) -> float:
    return (now - now.replace(hour=0, minute=0, second=0, microsecond=0)).total_seconds()


def _plan_of_day(plans: str, day: dt.date) -> Path | None:
    """The published plan for ``day`` in ``plans`` (``<day>.yaml``), if there is one."""
    p = Path(plans) / f"{day.isoformat()}.yaml"
    return p if p.is_file() else None


def _new_day(plans: str, day: dt.date, wall: dt.datetime, service_now: float) -> tuple[dt.date, float, Path | None] | None:
    """What ``autoslo serve --plans`` does at a tick: ``None`` while ``wall`` (UTC) is still in
    ``day``; past midnight, the new day, the time its day began on the service's clock, and its
    published plan (``None`` if there is none: the plan in force stays)."""
    if wall.date() == day:
        return None
    return wall.date(), service_now - _since_midnight(wall), _plan_of_day(plans, wall.date())


def _tenant_budget(text: str) -> tuple[str, float]:
    """``TENANT=DOLLARS`` → (tenant, dollars ≥ 0)."""
    tenant, sep, dollars = text.partition("=")
    if not sep or not tenant:
        raise argparse.ArgumentTypeError(f"need TENANT=DOLLARS, got {text!r}")
    try:
        value = float(dollars)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"need TENANT=DOLLARS with a number of dollars, got {text!r}") from e
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"a budget is a finite number of dollars ≥ 0, got {text!r}")
    return tenant, value


def cmd_serve(args: argparse.Namespace) -> int:
    if args.plans:
        if args.config:
            raise ValueError("give --config (one plan) or --plans (the published directory, a plan per day), not both")
        today = dt.datetime.now(dt.timezone.utc).date()
        first = _plan_of_day(args.plans, today) or (Path(args.plans) / "current.yaml")
        if not first.is_file():
            raise FileNotFoundError(f"no plan for {today} in {args.plans} ({today}.yaml), nor current.yaml: publish one first (autoslo.airflow.publish)")
        args.config = str(first)
    if not args.config and args.start_s is not None:
        raise ValueError("--start-s places a configuration's schedule in the day: give it with --config or --plans")
    predictor = _plan_options(args)
    kwargs: dict[str, Any] = dict(
        predictor=predictor,
        endpoint=args.endpoint,
        timeout_s=args.timeout if args.timeout > 0 else None,
        tick_s=args.tick,
        spinup_s=args.spinup,
        name_prefix=args.name_prefix,
        create_timeout_s=args.create_timeout,
        keep_clusters=args.keep_clusters,
        keep_leftovers=args.keep_leftovers,
        price_per_rpu_hour=args.price,
        billing_minimum_s=args.billing_minimum,
        admission=DeadlineAdmission(margin=args.admission_margin) if args.admission == "deadline" else None,
        budgets=Budgets(dict(args.budget), window_s=args.budget_window) if args.budget else None,
    )
    token = read_token(args.token_file) if args.token_file else None
    if token is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"autoslo serve: listening on {args.host} without --token-file: whoever reaches the port can route queries and read the stats", file=sys.stderr)
    # Before any workgroup exists: a directory another service writes is refused, and what a
    # crashed run journaled there becomes a part.
    log = ServedLog(args.log) if args.log else None
    # The service's clock at second 0 of the plan's day (the plan is placed start_s into it).
    day_zero = 0.0
    try:
        if args.config:
            start_s = args.start_s if args.start_s is not None else _since_midnight(dt.datetime.now(dt.timezone.utc))
            svc = serve(config=ExecutionConfig.load(args.config), start_s=start_s, **kwargs)
            day_zero = svc.now() - start_s
        else:
            svc = serve(args.clusters or [16, 16], args.autoscaler, routing=args.routing or "autoslo", **kwargs)
    except BaseException:
        if log is not None:
            log.close()
        raise
    if log is None:
        svc.keep_log(False)
    # A restart does not refill a budget: what the log says each tenant was charged in this
    # window is charged again.
    restored = log.charged(args.budget_window) if log is not None and args.budget else {}
    for tenant, dollars in restored.items():
        svc.charge_budget(tenant, dollars)
    # From here the workgroups exist: Ctrl-C or a supervisor's SIGTERM stops serving and deletes them.
    stop, reload = threading.Event(), threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    previous_hup = signal.signal(signal.SIGHUP, lambda *_: reload.set()) if args.config else None
    parts: list[str] = []
    day = dt.datetime.now(dt.timezone.utc).date()

    def hand_over(path: Path | None, why: str, day_start: float) -> None:
        """Hand the service over to the plan at ``path``, its day begun at ``day_start`` on the
        service's clock; a plan that cannot be loaded is reported and the one in force stays."""
        if path is None:
            print(json.dumps({"plan": None, "day": day.isoformat(), "why": why, "kept": "the plan in force", "missing": f"{args.plans}/{day.isoformat()}.yaml"}), flush=True)
            return
        try:
            spun_up = svc.load_plan(ExecutionConfig.load(path), day_start)
            print(json.dumps({"plan": str(path), "why": why, "day_start": day_start, "spun_up": spun_up}), flush=True)
        except (OSError, ValueError, _core.AutoSloCoreError) as e:
            print(json.dumps({"plan": str(path), "why": why, "error": str(e), "kept": "the plan in force"}), flush=True)

    def journal() -> None:
        """Sync the log's journal; a failure (a full disk) is reported, serving goes on, and
        what ended is kept for the next sync."""
        if log is not None:
            try:
                log.sync(svc)
            except OSError as e:
                print(json.dumps({"log": args.log, "error": f"cannot write the journal: {e}", "kept": "in memory until a sync succeeds"}), flush=True)

    def write_part() -> None:
        if log is not None:
            journal()
            try:
                if (part := log.compact()) is not None:
                    parts.append(str(part))
            except OSError as e:
                print(json.dumps({"log": args.log, "error": f"cannot write a part: {e}", "kept": "in the journal"}), flush=True)

    try:
        server = make_server(svc, args.host, args.port, token=token, idle_timeout_s=args.idle_timeout)
        threading.Thread(target=server.serve_forever, name="autoslo-serve-http", daemon=True).start()
        port = server.server_address[1]
        leftovers = [e["reason"] for e in svc.events() if e["event"] == "leftover"]
        recovered = str(log.recovered) if log is not None and log.recovered is not None else None
        print(json.dumps({"serving": f"http://{args.host}:{port}", "clusters": svc.clusters(), "log": args.log, "recovered": recovered, "budgets_spent": restored, "leftovers": leftovers}), flush=True)
        try:
            last = last_sync = time.monotonic()
            while not stop.wait(min(0.5, args.journal_every)):
                if time.monotonic() - last_sync >= args.journal_every:
                    journal()
                    last_sync = time.monotonic()
                if time.monotonic() - last >= args.log_every:
                    write_part()
                    last = time.monotonic()
                if args.plans and (turn := _new_day(args.plans, day, dt.datetime.now(dt.timezone.utc), svc.now())) is not None:
                    day, day_zero, plan = turn
                    hand_over(plan, "a new day", day_zero)
                if reload.is_set():
                    reload.clear()
                    hand_over(_plan_of_day(args.plans, day) or Path(args.plans) / "current.yaml" if args.plans else Path(args.config), "SIGHUP", day_zero)
        except KeyboardInterrupt:
            pass
        server.shutdown()
        server.server_close()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_hup is not None:
            signal.signal(signal.SIGHUP, previous_hup)
        svc.stop()
        # After the stop, which ends what still ran as cancelled: the log loses nothing.
        write_part()
        if log is not None:
            log.close()
    print(json.dumps({"stopped": True, "events": svc.events(), "cost": svc.cost(), "totals": svc.totals().to_pylist(), "log_parts": parts}), flush=True)
    return 0


def register(sub: Any) -> None:
    """Add ``local`` and ``live`` to the ``autoslo`` command line."""
    p = sub.add_parser("local", help="a local Redshift Serverless endpoint backed by PostgreSQL, and its TPC-DS database", description="A Redshift Serverless endpoint on 127.0.0.1 whose workgroups are PostgreSQL servers (a functional stand-in, not a performance model).")
    ls = p.add_subparsers(dest="action", required=True)
    a = ls.add_parser("prepare", help="generate TPC-DS with DuckDB and load it into a PostgreSQL data directory the workgroups copy")
    a.add_argument("--data", metavar="DIR", help="where (default $AUTOSLO_LOCAL_DATA or ~/.cache/autoslo/local-tpcds-sf<scale>)")
    a.add_argument("--scale", type=argtypes.positive, default=0.01, help="TPC-DS scale factor (default 0.01)")
    a.add_argument("--query-timeout", dest="query_timeout", type=argtypes.positive, default=20.0, help="a query slower than this (s) is left out (default 20)")
    a.add_argument("--replace", action="store_true", help="rebuild an existing database")
    a.set_defaults(func=cmd_local_prepare)
    e = ls.add_parser("endpoint", help="serve the Redshift Serverless API on 127.0.0.1 until Ctrl-C")
    e.add_argument("--port", type=argtypes.count(0), default=4599, help="port (default 4599; 0 = any free port)")
    e.add_argument("--data", metavar="DIR", help="the prepared database (default as for prepare)")
    e.add_argument("--empty", action="store_true", help="workgroups without the TPC-DS tables (fresh initdb)")
    e.add_argument("--time-factor", dest="time_factor", type=argtypes.positive, default=0.01, help="multiplies the measured workgroup lifecycle times (default 0.01)")
    e.set_defaults(func=cmd_local_endpoint)

    p = sub.add_parser(
        "live",
        help="replay a workload as SQL on real clusters, routed and scaled by AutoSLO",
        description="Replay a workload in real time (optionally compressed) on Redshift Serverless workgroups: AWS by default, "
        "or an endpoint given by --endpoint / AWS_ENDPOINT_URL_REDSHIFT_SERVERLESS, or --local. Routing defaults to the product's "
        "router (autoslo) with the bundled predictor.",
    )
    p.add_argument("--workload", required=True, metavar="FILE", help="workload or query log, Parquet or CSV (`autoslo workload` writes one)")
    p.add_argument("--kappa", type=argtypes.positive, help="SLO = κ × per-template baseline for a workload without an slo column")
    p.add_argument("--config", metavar="YAML", help="an execution configuration (`autoslo tune` writes one): clusters, routing, autoscaler")
    p.add_argument("--clusters", type=argtypes.sizes, help="initial cluster sizes in RPU, comma-separated (default 16,16; not with --config)")
    p.add_argument("--routing", choices=_core.ROUTING_POLICIES, help="routing policy (default autoslo; baselines by name; not with --config)")
    p.add_argument("--autoscaler", choices=_core.SCALING_POLICIES, help="scaling policy by name (default: none, or --config's)")
    p.add_argument("--model", metavar="DIR", help="Latency Predictor model directory (`autoslo predictor train` writes one; default: the bundled Iconq+)")
    p.add_argument("--endpoint", metavar="URL", help="Redshift Serverless endpoint URL (default: the AWS SDK's)")
    p.add_argument("--local", action="store_true", help="start a local endpoint in this process for the run")
    p.add_argument("--time-factor", dest="time_factor", type=argtypes.positive, default=0.01, help="with --local: lifecycle time factor (default 0.01)")
    p.add_argument("--data", metavar="DIR", help="the prepared local database, whose TPC-DS query texts run (default as for `local prepare`)")
    p.add_argument("--sql", metavar="JSON", help="SQL per template instead: {\"1\": \"SELECT ...\", ...}")
    p.add_argument("--only-runnable", dest="only_runnable", action="store_true", help="drop the workload's queries whose template has no SQL")
    p.add_argument(
        "--from-first-arrival",
        dest="from_first_arrival",
        action="store_true",
        help="start the replay at the first query instead of second 0 (a log from 09:00 would otherwise idle until then); times in the trace count from it, and a configuration's spinups scheduled by then start with the run",
    )
    p.add_argument("--time-scale", dest="time_scale", type=argtypes.positive, default=1.0, help="workload seconds per real second (default 1)")
    p.add_argument("--timeout", type=argtypes.seconds_or_zero, default=3600.0, help="per-query timeout in workload seconds (default 3600; 0 = none)")
    p.add_argument("--tick", type=argtypes.positive, default=10.0, help="autoscaler period in workload seconds (default 10)")
    p.add_argument("--spinup", type=argtypes.seconds_or_zero, default=300.0, help="spinup delay the router plans with until a new workgroup is AVAILABLE, workload seconds (default 300)")
    p.add_argument("--name-prefix", dest="name_prefix", default="autoslo", help="workgroups are <prefix>-<cluster id> (default autoslo)")
    p.add_argument(
        "--keep-leftovers",
        dest="keep_leftovers",
        action="store_true",
        help="leave the workgroups <prefix>-<n> beyond the initial clusters that an earlier run left (default: delete them at the start; either way they are listed)",
    )
    p.add_argument("--pool-size", dest="pool_size", type=argtypes.count(1), default=8, help="connections per cluster (default 8)")
    p.add_argument("--create-timeout", dest="create_timeout", type=argtypes.positive, default=900.0, help="real seconds a workgroup may take to become available (default 900)")
    p.add_argument("--trace", metavar="FILE", help="write the trace (the emulator's format, plus attempts, client_s, error) to Parquet")
    p.add_argument("--events-out", dest="events_out", metavar="FILE", help="write the cluster events to Parquet")
    p.add_argument("--decisions-out", dest="decisions_out", metavar="FILE", help="write the autoscaler's decisions (one row per option compared) to Parquet")
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_live)

    p = sub.add_parser(
        "serve",
        help="serve routing decisions over real clusters: an HTTP/JSON API your gateway asks where each query goes",
        description="Keep a plan's Redshift Serverless workgroups (AWS by default, or --endpoint / AWS_ENDPOINT_URL_REDSHIFT_SERVERLESS), "
        "scale them with its autoscaler, and answer on HTTP where each query goes: POST /route {query_id, template, instance, "
        "slo?, tenant?, class?} returns the workgroup's endpoint, POST /complete {query_id} when it ends, POST /lost {cluster_id, why}, "
        "GET /clusters, /events, /health, /stats, /metrics (Prometheus) (docs/live.md). Your client runs the SQL. With --log, every query that ends "
        "is written to Parquet parts, a query log `autoslo reservoir add` takes. Ctrl-C or SIGTERM stops serving and deletes the workgroups.",
    )
    p.add_argument("--config", metavar="YAML", help="the plan to serve (`autoslo tune` writes one): clusters, schedule, routing, autoscaler, deadlines; SIGHUP reloads it")
    p.add_argument(
        "--plans",
        metavar="DIR",
        help="serve the daily cycle's published plans (autoslo.airflow.publish): today's <YYYY-MM-DD>.yaml (else current.yaml), handed over to the next day's at each UTC midnight "
        "without dropping a workgroup; SIGHUP reloads today's",
    )
    p.add_argument("--start-s", dest="start_s", type=argtypes.seconds_or_zero, help="how far into the plan's day the service starts, in seconds (default: now, UTC)")
    p.add_argument("--clusters", type=argtypes.sizes, help="initial cluster sizes in RPU, comma-separated (default 16,16; not with --config)")
    p.add_argument("--routing", choices=_core.ROUTING_POLICIES, help="routing policy (default autoslo; not with --config)")
    p.add_argument("--autoscaler", choices=_core.SCALING_POLICIES, help="scaling policy by name (default: none, or --config's)")
    p.add_argument("--model", metavar="DIR", help="Latency Predictor model directory (default: the bundled Iconq+)")
    p.add_argument("--endpoint", metavar="URL", help="Redshift Serverless endpoint URL (default: the AWS SDK's)")
    p.add_argument("--host", default="127.0.0.1", help="address the HTTP API listens on (default 127.0.0.1)")
    p.add_argument("--port", type=argtypes.count(0), default=8080, help="its port (default 8080; 0 = any free port, printed at the start)")
    p.add_argument(
        "--token-file",
        dest="token_file",
        metavar="FILE",
        help="require `Authorization: Bearer <token>` with the token in FILE on every request but GET /health (401 otherwise); default: no token, so keep --host on a trusted interface",
    )
    p.add_argument("--idle-timeout", dest="idle_timeout", type=argtypes.positive, default=300.0, help="close an HTTP connection idle this many seconds, or stalled mid-request (default 300)")
    p.add_argument("--timeout", type=argtypes.seconds_or_zero, default=3600.0, help="a routed query not completed within this many seconds ends as timed out (default 3600; 0 = never)")
    p.add_argument("--tick", type=argtypes.positive, default=10.0, help="autoscaler period in seconds (default 10)")
    p.add_argument("--spinup", type=argtypes.seconds_or_zero, default=300.0, help="spinup delay the router plans with until a new workgroup is available (default 300)")
    p.add_argument("--name-prefix", dest="name_prefix", default="autoslo", help="workgroups are <prefix>-<cluster id> (default autoslo)")
    p.add_argument(
        "--keep-leftovers",
        dest="keep_leftovers",
        action="store_true",
        help="leave the workgroups <prefix>-<n> beyond the initial clusters that an earlier run left (default: delete them at the start; either way they are listed)",
    )
    p.add_argument("--create-timeout", dest="create_timeout", type=argtypes.positive, default=900.0, help="seconds a workgroup may take to become available (default 900)")
    p.add_argument("--keep-clusters", dest="keep_clusters", action="store_true", help="leave the workgroups in place when stopping")
    p.add_argument("--price", type=argtypes.positive, default=0.375, help="dollars per RPU-hour the bills and per-query costs use (default 0.375, us-east-1)")
    p.add_argument(
        "--billing-minimum",
        dest="billing_minimum",
        type=argtypes.seconds_or_zero,
        default=60.0,
        help="seconds a workgroup is billed at least per busy period (default 60, Redshift Serverless's); a query's cost is final, and it is logged, at most this long after its period began",
    )
    p.add_argument(
        "--admission",
        choices=("none", "deadline"),
        default="none",
        help="admission before any work: none (default), or deadline (refuse a query whose Stage estimate alone on the largest cluster exceeds its SLO; HTTP 422)",
    )
    p.add_argument("--admission-margin", dest="admission_margin", type=argtypes.positive, default=1.0, help="with --admission deadline: refuse only when the estimate exceeds SLO x this (default 1)")
    p.add_argument(
        "--budget",
        action="append",
        type=_tenant_budget,
        metavar="TENANT=DOLLARS",
        help="refuse a tenant's queries once its estimated spend in the window would pass DOLLARS (HTTP 429); repeat per tenant; tenants not named are not limited. With --log, a restart charges again what the log says each tenant spent in the window",
    )
    p.add_argument("--budget-window", dest="budget_window", type=argtypes.positive, default=86_400.0, help="seconds per budget window, counted from 1970-01-01 UTC (default 86400: a UTC day)")
    p.add_argument("--log", metavar="DIR", help="write every query that ends (SLO, cluster, latency, outcome, cost) to Parquet parts in DIR: history for `autoslo reservoir add --log` (default: no log). Journaled as it goes, so a crash loses nothing that ended; one service per DIR")
    p.add_argument("--log-every", dest="log_every", type=argtypes.positive, default=300.0, help="seconds between log parts (default 300; the last is written at the stop)")
    p.add_argument(
        "--journal-every",
        dest="journal_every",
        type=argtypes.positive,
        default=1.0,
        help="seconds between syncs of the log's journal (default 1): a crash loses no query that ended before the last sync, and the next run with this --log makes the journal a part",
    )
    p.set_defaults(func=cmd_serve)
