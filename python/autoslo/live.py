"""Live mode: replay a workload on real clusters, as SQL, under the Query Router and the Autoscaler.

The clusters are Redshift Serverless workgroups created through the cluster manager
(:class:`ClusterManager`, the AWS SDK underneath). On AWS, credentials and region come from the
standard chain; on this machine, :class:`LocalEndpoint` serves the same API on 127.0.0.1 with a
PostgreSQL server behind every workgroup, holding a small TPC-DS database
(:func:`prepare_tpcds`). The same code talks to either: the endpoint is configuration only
(``endpoint=``, or ``AWS_ENDPOINT_URL_REDSHIFT_SERVERLESS``).

A local server is a functional stand-in for a warehouse, not a performance model: a workgroup's
size maps to PostgreSQL settings (parallel workers per gather, work_mem), and its latencies are
those of this machine. The emulator (:func:`autoslo.emulate`) is the calibrated performance model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from autoslo import _core
from autoslo.autoscaler import AutoscalerConfig, as_spec, served_plan
from autoslo.bundled import NEEDS_PREDICTOR, predictor_for
from autoslo.emulation import EmulationResult, _with_config, _with_extras
from autoslo.progress import progress_bar
from autoslo.tenancy import Budgets, DeadlineAdmission
from autoslo.tuner import ExecutionConfig

#: Raised by ``Service.route`` for a query refused at admission; ``reason`` names why.
QueryRejectedError = _core.QueryRejectedError

#: The Redshift Serverless endpoint on 127.0.0.1 backed by PostgreSQL servers (see the module doc).
LocalEndpoint = _core.LocalEndpoint
#: The cluster manager: one cluster is a workgroup ``<name>`` in namespace ``<name>-ns``.
ClusterManager = _core.ClusterManager

__all__ = ["ClusterManager", "LiveResult", "LocalData", "LocalEndpoint", "Service", "default_data_dir", "live", "prepare_tpcds", "read_sql_map", "runnable", "serve"]


def default_data_dir(scale: float = 0.01) -> Path:
    """Where :func:`prepare_tpcds` puts its database unless told: ``$AUTOSLO_LOCAL_DATA``, else
    ``~/.cache/autoslo/local-tpcds-sf<scale>``."""
    env = os.environ.get("AUTOSLO_LOCAL_DATA")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "autoslo" / f"local-tpcds-sf{scale:g}"


@dataclass(frozen=True)
class LocalData:
    """A prepared local TPC-DS database: the data directory every local workgroup copies, and
    the TPC-DS query texts (DuckDB's, one per template 1-99) that ran on PostgreSQL."""

    root: Path

    @property
    def template(self) -> Path:
        """The stopped PostgreSQL data directory (give it to :class:`LocalEndpoint`)."""
        return self.root / "pgdata"

    @property
    def manifest(self) -> dict[str, object]:
        """Scale factor, generator versions, and each query's check (seconds or error)."""
        return json.loads((self.root / "manifest.json").read_text())

    @property
    def queries(self) -> dict[int, str]:
        """SQL per TPC-DS template, for the templates that ran."""
        return {int(k): v for k, v in json.loads((self.root / "queries.json").read_text()).items()}

    @classmethod
    def open(cls, root: str | PathLike[str]) -> LocalData:
        """A database :func:`prepare_tpcds` made; a clear error if there is none."""
        r = Path(root)
        if not (r / "pgdata" / "PG_VERSION").is_file() or not (r / "queries.json").is_file():
            raise FileNotFoundError(f"no prepared local database in {r}: run `autoslo local prepare --data {r}` (or autoslo.live.prepare_tpcds)")
        return cls(r)


def _tpcds_extension() -> str:
    import duckdb_extension_tpcds  # the PyPI package that carries the extension (offline)

    base = Path(duckdb_extension_tpcds.__path__[0]) / "extensions"
    found = sorted(base.rglob("tpcds.duckdb_extension"))
    if not found:
        raise RuntimeError(f"the duckdb-extension-tpcds package has no extension file under {base}")
    return str(found[-1])


def tpcds_queries() -> dict[int, str]:
    """The 99 TPC-DS query texts of DuckDB's ``tpcds`` extension, by template (offline, from the
    ``duckdb-extension-tpcds`` package of the ``autoslo[live]`` extra)."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"LOAD '{_tpcds_extension()}'")
    return {int(n): q for n, q in con.execute("SELECT query_nr, query FROM tpcds_queries() ORDER BY 1").fetchall()}


def prepare_tpcds(root: str | PathLike[str] | None = None, scale: float = 0.01, query_timeout_s: float = 20.0, replace: bool = False) -> LocalData:
    """Generate TPC-DS at ``scale`` with DuckDB's dsdgen, load it into a fresh PostgreSQL data
    directory under ``root`` (default :func:`default_data_dir`), and keep the TPC-DS queries that
    run there within ``query_timeout_s``. Needs ``duckdb==1.5.5`` and
    ``duckdb-extension-tpcds==1.5.5`` (the ``autoslo[live]`` extra) and PostgreSQL's server
    programs. Returns the existing database when there is one (unless ``replace``)."""
    if not 0.001 <= scale <= 1.0:
        raise ValueError(f"scale factor must be in [0.001, 1] for a local database, got {scale}")
    dest = Path(root) if root is not None else default_data_dir(scale)
    if (dest / "queries.json").is_file() and not replace:
        return LocalData.open(dest)
    if dest.exists():
        shutil.rmtree(dest)
    import duckdb

    con = duckdb.connect()
    con.execute(f"LOAD '{_tpcds_extension()}'")
    con.execute(f"CALL dsdgen(sf={scale})")
    tables = [r[0] for r in con.execute("SHOW TABLES").fetchall()]
    ddl = []
    with tempfile.TemporaryDirectory(prefix="autoslo-tpcds-") as tmp:
        files = []
        for t in tables:
            cols = con.execute(f"DESCRIBE {t}").fetchall()
            ddl.append(f"CREATE TABLE {t} ({', '.join(f'{c[0]} {c[1]}' for c in cols)});")
            path = Path(tmp) / f"{t}.csv"
            con.execute(f"COPY {t} TO '{path}' (FORMAT csv, DELIMITER '|', HEADER false, NULLSTR '')")
            files.append((t, str(path)))
        queries = [(int(n), q) for n, q in con.execute("SELECT query_nr, query FROM tpcds_queries()").fetchall()]
        checks = _core.prepare_local_template(str(dest / "pgdata"), "\n".join(ddl), files, queries, query_timeout_s)
    ran = {q: sql for (q, sql), (_, ok, _, _) in zip(queries, checks) if ok}
    (dest / "queries.json").write_text(json.dumps({str(k): v for k, v in sorted(ran.items())}, indent=1))
    manifest = {
        "scale": scale,
        "duckdb": duckdb.__version__,
        "tables": len(tables),
        "query_timeout_s": query_timeout_s,
        "templates_that_ran": len(ran),
        "checks": {str(q): ({"seconds": s} if ok else {"error": e}) for q, ok, s, e in checks},
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return LocalData(dest)


def read_sql_map(path: str | PathLike[str]) -> dict[int, str]:
    """SQL per TPC-DS template from a JSON object ``{"1": "SELECT ...", ...}`` (what ``autoslo
    live --sql`` reads). A file that is not such an object, a key that is not a template number
    or a text that is not a non-empty string raises ``ValueError`` naming the file and the key."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f'{p}: SQL per template is a JSON object {{"1": "SELECT ...", ...}}, got {type(data).__name__}')
    out: dict[int, str] = {}
    for k, v in data.items():
        try:
            template = int(k)
        except ValueError:
            raise ValueError(f"{p}: key {k!r} is not a template number") from None
        if not 1 <= template <= 99:
            raise ValueError(f"{p}: key {k!r} is not a TPC-DS template (1–99)")
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{p}: the SQL of template {k} must be a non-empty string, got {v!r}")
        out[template] = v
    if not out:
        raise ValueError(f"{p}: no SQL in it")
    return out


def runnable(workload: pa.Table, sql: Mapping[int, str] | LocalData) -> pa.Table:
    """The queries of ``workload`` whose template has SQL to run (the others dropped)."""
    texts = sql.queries if isinstance(sql, LocalData) else sql
    keep = pc.is_in(workload["template"], value_set=pa.array(sorted(texts), pa.int64()))
    return workload.filter(keep)


@dataclass(frozen=True, repr=False)
class LiveResult(EmulationResult):
    """A live run's outcome: the emulator's tables (the trace also has ``attempts``,
    ``client_s``, the measured seconds of the last attempt's SQL, and ``error``), the workgroup
    behind each cluster, and the control plane's log."""

    #: (cluster_id, workgroup name).
    workgroups: list[tuple[int, str]]
    #: (time, cluster_id, size, kind, reason): spinups, teardowns, failures, skipped decisions.
    control_log: list[tuple[float, int | None, int, str, str]]
    #: Whether the run was stopped (Ctrl-C); the queries it did not finish are ``cancelled``.
    interrupted: bool

    @property
    def failed(self) -> int:
        """Queries that failed (cluster lost on every attempt, or an SQL error)."""
        return int(pc.sum(pc.equal(self.trace["outcome"], "failed")).as_py() or 0)

    @property
    def retried(self) -> int:
        """Queries that needed a second attempt."""
        return int(pc.sum(pc.greater(self.trace["attempts"], 1)).as_py() or 0)


def live(
    workload: pa.Table,
    clusters: Sequence[int] | None = None,
    *,
    sql: Mapping[int, str] | LocalData | None = None,
    config: ExecutionConfig | str | PathLike[str] | None = None,
    routing: str = "autoslo",
    predictor: _core.Predictor | None = None,
    autoscaler: AutoscalerConfig | str | None = None,
    endpoint: str | None = None,
    region: str | None = None,
    time_scale: float = 1.0,
    timeout_s: float | None = 3600.0,
    pool_size: int = 8,
    create_timeout_s: float = 900.0,
    initial_timeout_s: float | None = None,
    delete_timeout_s: float = 900.0,
    name_prefix: str = "autoslo",
    tick_s: float = 10.0,
    spinup_s: float = 300.0,
    max_attempts: int = 2,
    keep_clusters: bool = False,
    keep_leftovers: bool = False,
    db_user: str = "autoslo",
    db_name: str = "postgres",
    db_password: str | None = None,
    seed: int = 0,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    slo_headroom: float = _core.DEFAULT_SLO_HEADROOM,
    progress: bool = False,
) -> LiveResult:
    """Replay ``workload`` live on Redshift Serverless workgroups (AWS, or a :class:`LocalEndpoint`
    given as ``endpoint=ep.url``).

    The initial clusters (``clusters``, or ``config``'s) are created and waited for; then every
    query arrives at ``arrival / time_scale`` real seconds, is routed by ``routing`` (default the
    product's router with the bundled predictor), runs its template's SQL (``sql``: a
    :class:`LocalData` or a template → text mapping) on a pooled connection, and is timed at the
    client. The autoscaler (``autoscaler`` or ``config``'s) runs every ``tick_s`` and creates or
    deletes workgroups through the cluster manager; a new workgroup takes queries once it is
    AVAILABLE, and until then the router plans with the spinup delay ``spinup_s``. Times in the trace are on the control plane's clock (real seconds × ``time_scale``,
    the scale SLOs are in). A query whose cluster is lost (killed server, refused connection,
    never available within ``create_timeout_s``) is retried once on another cluster; every query
    ends with exactly one row. The initial clusters are waited for up to ``initial_timeout_s``
    (default ``create_timeout_s``); if one does not come up, the run stops with that error. The
    workgroups are deleted at the end unless ``keep_clusters``. Workgroups ``<name_prefix>-<n>``
    beyond the initial clusters, left by an earlier run under the prefix (it died, or kept its
    clusters), are deleted while the initial ones are made, unless ``keep_leftovers``; either way
    each is an event ``leftover``.
    ``progress=True`` shows a bar; Ctrl-C stops the run, and the queries left are ``cancelled``.
    So does any signal whose Python handler raises, checked while the run waits: after the
    workgroups are deleted, ``KeyboardInterrupt`` returns what ran (``interrupted``), and any other
    exception (Airflow's on SIGTERM) is raised. ``autoslo live`` maps SIGTERM to
    ``KeyboardInterrupt`` for the run (``signal.signal(signal.SIGTERM,
    signal.default_int_handler)``), so a supervisor stopping it does not leave workgroups behind.
    """
    if sql is None:
        raise ValueError("give the SQL to run per template: sql=LocalData.open(dir) (see `autoslo local prepare`) or a {template: text} mapping")
    texts = sql.queries if isinstance(sql, LocalData) else {int(k): str(v) for k, v in sql.items()}
    sizes, routing, cfg = _with_config(clusters, routing, config, autoscaler, None)
    predictor = predictor_for(routing in NEEDS_PREDICTOR or cfg is not None, predictor)
    callback, close = progress_bar(progress, "live", "query")
    try:
        trace, cluster_table, events, extras = _core.live(
            workload,
            texts,
            sizes,
            predictor=predictor,
            routing=routing,
            autoscaler=as_spec(autoscaler),
            config=cfg,
            endpoint=endpoint,
            region=region,
            time_scale=time_scale,
            timeout_s=timeout_s,
            pool_size=pool_size,
            create_timeout_s=create_timeout_s,
            initial_timeout_s=initial_timeout_s,
            delete_timeout_s=delete_timeout_s,
            name_prefix=name_prefix,
            tick_s=tick_s,
            spinup_s=spinup_s,
            max_attempts=max_attempts,
            keep_clusters=keep_clusters,
            keep_leftovers=keep_leftovers,
            db_user=db_user,
            db_name=db_name,
            db_password=db_password,
            seed=seed,
            price_per_rpu_hour=price_per_rpu_hour,
            billing_minimum_s=billing_minimum_s,
            slo_headroom=slo_headroom,
            progress=callback,
        )
    finally:
        close()
    trace = _with_extras(trace, workload, cfg)
    trace = trace.append_column("attempts", pa.array(extras["attempts"], pa.int64()))
    trace = trace.append_column("client_s", pa.array(extras["client_s"], pa.float64()))
    trace = trace.append_column("error", pa.array(extras["errors"], pa.string()))
    return LiveResult(
        trace=trace,
        clusters=cluster_table,
        events=events,
        decisions=extras["decisions"],
        workgroups=[(int(c), str(n)) for c, n in extras["workgroups"]],
        control_log=list(extras["control_log"]),
        interrupted=bool(extras["interrupted"]),
    )


#: The serving control plane :func:`serve` returns.
Service = _core.Service


def serve(
    clusters: Sequence[int] | None = None,
    autoscaler: AutoscalerConfig | str | None = "autoslo",
    *,
    config: ExecutionConfig | str | PathLike[str] | None = None,
    start_s: float = 0.0,
    routing: str = "autoslo",
    predictor: _core.Predictor | None = None,
    endpoint: str | None = None,
    region: str | None = None,
    time_scale: float = 1.0,
    timeout_s: float | None = 3600.0,
    create_timeout_s: float = 900.0,
    initial_timeout_s: float | None = None,
    delete_timeout_s: float = 900.0,
    name_prefix: str = "autoslo",
    tick_s: float = 10.0,
    spinup_s: float = 300.0,
    keep_clusters: bool = False,
    keep_leftovers: bool = False,
    seed: int = 0,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    slo_headroom: float = _core.DEFAULT_SLO_HEADROOM,
    admission: DeadlineAdmission | None = None,
    budgets: Budgets | None = None,
) -> _core.Service:
    """Serve routing decisions over real Redshift Serverless workgroups (AWS, or a
    :class:`LocalEndpoint` given as ``endpoint=ep.url``): the production side of AutoSLO.

    The initial clusters (``clusters``, or ``config``'s, its schedule placed ``start_s`` into the
    day as :func:`autoslo.control_plane` does) are created as workgroups ``<name_prefix>-<id>``
    and waited for (up to ``initial_timeout_s``, default ``create_timeout_s``). Then your gateway
    or scheduler asks where each query goes and runs the SQL itself, with its own driver::

        with autoslo.live.serve(config="plan.yaml", endpoint=ep.url) as svc:
            where = svc.route(query_id, template, instance, tenant="aster", workload_class="dashboard")
            ...  # run the query on where["address"]:where["port"] (workgroup where["workgroup"])
            svc.complete(query_id)

    ``route`` returns a dict with ``cluster_id``, ``size``, ``workgroup``, ``address`` and
    ``port`` of an available workgroup. The query's SLO is the configuration's ``slo_policy``
    deadline for it, else ``slo=``. The router (``routing``, default the product's, with the
    bundled predictor) picks the cluster; the autoscaler (``autoscaler`` or ``config``'s) runs
    every ``tick_s`` of the service's clock and creates or deletes workgroups through the cluster
    manager. ``svc.lost(cluster_id, why)`` reports a cluster your client found dead: it leaves
    the router and its workgroup is deleted. A routed query not completed within ``timeout_s``
    (on the service's clock; ``None``: never) ends as timed out, so a client that forgets one
    does not hold its cluster busy. ``svc.clusters()``, ``svc.events()`` and
    ``svc.decisions()`` say what the service has and did. ``svc.stop()`` (also on leaving the
    ``with`` block) stops the autoscaler and deletes every workgroup, unless ``keep_clusters``,
    once its routed queries complete or ``delete_timeout_s`` has passed; queries still running
    then end as ``cancelled``. Workgroups ``<name_prefix>-<n>`` beyond the initial clusters that an
    earlier service under the prefix left (it died, or kept its clusters) are deleted at the start,
    unless ``keep_leftovers``; each is an event ``leftover`` in ``svc.events()``.

    ``svc.load_plan(config, day_start)`` hands the service over to a new day's plan (its second 0
    at ``day_start`` on the service's clock, default now) without dropping a workgroup: its
    autoscaler and deadlines take over, and the clusters it wants that no workgroup stands for are
    spun up (``docs/live.md``). A plan routing by another policy is refused.

    What it served is kept. ``svc.totals()`` counts the queries per tenant × class (met, late,
    timed out, failed, cancelled, violation rate, cost); ``svc.clusters()`` carries each
    workgroup's bill so far (final once stopped: each busy period's billing minimum included) and
    ``svc.cost()`` their sum. Each bill is split over the queries the workgroup ran, each second
    among the queries running then (``docs/tenancy.md``). ``svc.take_served()`` takes the queries
    that ended since the last take and whose cost is final (at most ``billing_minimum_s`` after
    their workgroup's busy period began), as a query log (arrival as a UTC timestamp, template,
    instance, tenant, class, SLO, cluster, latency, outcome, cost): append it to the Workload Reservoir and
    tomorrow's plan is tuned on today's traffic. Take it regularly: the service holds at most
    262,144 ended queries not taken and drops the oldest past that (``svc.log_dropped()``), or
    turn it off with ``svc.keep_log(False)``.

    ``admission`` (:class:`autoslo.tenancy.DeadlineAdmission`) and ``budgets``
    (:class:`autoslo.tenancy.Budgets`, by tenant name; a day's window is a UTC day) refuse a
    query before any work, as in the emulator: ``route`` raises
    :class:`QueryRejectedError` (``reason``: ``infeasible-deadline``, ``capacity`` or
    ``budget``), and the query ends in the log and the totals as ``rejected``, a violation that
    took no cluster."""
    plan = served_plan(clusters, autoscaler, config, routing, predictor, start_s, admission=admission, budgets=budgets)
    return _core.Service(
        plan.clusters,
        predictor=plan.predictor,
        routing=plan.routing,
        autoscaler=plan.autoscaler,
        config=plan.config,
        endpoint=endpoint,
        region=region,
        time_scale=time_scale,
        timeout_s=timeout_s,
        create_timeout_s=create_timeout_s,
        initial_timeout_s=initial_timeout_s,
        delete_timeout_s=delete_timeout_s,
        name_prefix=name_prefix,
        tick_s=tick_s,
        spinup_s=spinup_s,
        keep_clusters=keep_clusters,
        keep_leftovers=keep_leftovers,
        seed=seed,
        price_per_rpu_hour=price_per_rpu_hour,
        billing_minimum_s=billing_minimum_s,
        slo_headroom=slo_headroom,
        admission=plan.admission,
        budgets=plan.budgets,
    )
