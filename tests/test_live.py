"""Live mode on this machine: the local Redshift Serverless endpoint (real HTTP, signed requests),
PostgreSQL servers behind the workgroups with a TPC-DS database, queries as SQL over the wire.
Every server is started and stopped by the tests themselves (needs Debian's `postgresql`)."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import utc

import autoslo
from autoslo import _core, base_workload
from autoslo.cli import main
from autoslo.live import ClusterManager, LocalData, LocalEndpoint, live, prepare_tpcds, read_sql_map, runnable, serve
from autoslo.serving import ServedLog
from autoslo.tuner import ExecutionConfig
from autoslo.workloads import read_table, write_table

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def tpcds(tmp_path_factory: pytest.TempPathFactory) -> LocalData:
    return prepare_tpcds(tmp_path_factory.mktemp("tpcds") / "sf0.01", scale=0.01)


def _until(ok: Callable[[], bool], within_s: float = 30.0) -> bool:
    """Wait for observable state: poll ``ok`` until it holds (``within_s`` guards a hang)."""
    deadline = time.monotonic() + within_s
    while not ok() and time.monotonic() < deadline:
        time.sleep(0.01)
    return ok()


def _deleting(ep: LocalEndpoint) -> bool:
    """Every workgroup the endpoint has is being deleted (or none is left)."""
    return all(w[1] == "DELETING" for w in ep.workgroups())


def _workload(tpcds: LocalData, n: int) -> pa.Table:
    """The first ``n`` queries of a BaseWorkload whose templates ran on the local database."""
    return runnable(base_workload(0.5, seed=3, kappa=4), tpcds).slice(0, n)


def test_the_local_tpcds_database_runs_at_least_20_templates(tpcds: LocalData) -> None:
    m = tpcds.manifest
    assert m["tables"] == 24 and m["scale"] == 0.01
    assert m["templates_that_ran"] >= 20, m["checks"]
    assert len(tpcds.queries) == m["templates_that_ran"]
    assert (tpcds.template / "PG_VERSION").is_file()
    assert LocalData.open(tpcds.root) == tpcds
    with pytest.raises(FileNotFoundError, match="autoslo local prepare"):
        LocalData.open(tpcds.root / "nowhere")


def test_the_cluster_manager_from_python_with_typed_errors() -> None:
    with LocalEndpoint(time_factor=0.005) as ep:
        m = ClusterManager(endpoint=ep.url, max_attempts=3)
        w = m.create_cluster("py-a", rpu=8, timeout_s=60)
        assert w["status"] == "AVAILABLE" and w["address"] == "127.0.0.1" and w["port"]
        assert m.create_cluster("py-a", rpu=8, timeout_s=60)["name"] == "py-a", "idempotent"
        assert [x["name"] for x in m.list_workgroups()] == ["py-a"]
        with pytest.raises(_core.ResourceNotFoundError, match="nope"):
            m.get_workgroup("nope")
        before = ep.requests()
        ep.throttle_next(2)
        assert m.get_workgroup("py-a")["status"] == "AVAILABLE"
        assert ep.requests() - before == 3, "two throttled attempts, then the answer"
        ep.throttle_next(50)
        with pytest.raises(_core.ThrottledError):
            m.get_workgroup("py-a")
        ep.throttle_next(0)
        w = m.update_capacity("py-a", 32, timeout_s=60)
        assert (w["base_capacity"], w["status"]) == (32, "AVAILABLE")
        with pytest.raises(_core.CloudServiceError, match="baseCapacity"):
            m.create_cluster("py-b", rpu=12, timeout_s=60)
        with pytest.raises(_core.AutoSloCoreError, match="one of them"):
            m.create_cluster("py-c", timeout_s=60)
        m.delete_cluster("py-a", timeout_s=60)
        m.delete_cluster("py-b", timeout_s=60)
        assert m.list_workgroups() == []
        url = ep.url
        # The endpoint is configuration only: the SDK's service-specific variable reaches it too.
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AWS_ENDPOINT_URL_REDSHIFT_SERVERLESS", url)
            before = ep.requests()
            assert ClusterManager().list_workgroups() == [] and ep.requests() == before + 1
    with pytest.raises(_core.EndpointUnreachableError):
        ClusterManager(endpoint=url, max_attempts=1).list_workgroups()


def test_a_live_run_on_two_local_clusters_with_a_forced_scale_up(tpcds: LocalData) -> None:
    wl = _workload(tpcds, 60)
    horizon = wl["arrival"][-1].as_py()
    scale = horizon / 10.0  # the workload in about 10 real seconds
    # Round robin: a cluster is used as soon as it is up (the product's router would leave an idle
    # 16 RPU cluster alone while two 8 RPU ones meet these SLOs). The workgroup's server takes a
    # few real seconds to start here (5 s once, beside other work), hence the early spinup.
    cfg = ExecutionConfig({"initial_clusters": [8, 8], "scheduled_spinups": [{"at_s": 0.1 * horizon, "size": 16}], "autoscaler": None, "routing": "round-robin"})
    with LocalEndpoint(time_factor=0.005, template=str(tpcds.template)) as ep:
        r = live(wl, config=cfg, sql=tpcds, endpoint=ep.url, time_scale=scale, tick_s=0.05 * scale, spinup_s=0.5 * scale, name_prefix="up")
        assert _until(lambda: _deleting(ep)), "the run deletes its workgroups"
    t = r.trace
    assert t["query_id"].to_pylist() == wl["query_id"].to_pylist(), "one row per query, in order"
    assert set(t["outcome"].to_pylist()) == {"completed"}, t.filter(pc.not_equal(t["outcome"], "completed")).to_pylist()[:3]
    assert len(set(t["template"].to_pylist())) >= 15, "many distinct TPC-DS templates ran as SQL"
    assert pc.min(t["client_s"]).as_py() > 0 and pc.min(t["latency"]).as_py() > 0
    clusters = r.clusters.to_pylist()
    assert [c["spinup_reason"] for c in clusters] == ["initial", "initial", "scheduled"]
    assert clusters[2]["size"] == 16 and clusters[2]["ready_at"] > clusters[2]["requested_at"] >= 0.1 * horizon - 0.1 * scale
    on_new = t.filter(pc.equal(t["cluster_id"], 2))
    assert on_new.num_rows > 0, "the new cluster took queries"
    # Not before it was up, though the router was told to expect it after 0.5 real seconds.
    assert pc.min(on_new["arrival"]).as_py() >= clusters[2]["ready_at"], (on_new["arrival"].to_pylist(), clusters[2])
    assert [e["event"] for e in r.events.to_pylist() if e["cluster_id"] == 2][:2] == ["spinup", "ready"]
    assert r.workgroups == [(0, "up-0"), (1, "up-1"), (2, "up-2")]
    assert sum(r.chargeback()["cost_micro_usd"].to_pylist()) == sum(r.clusters["cost_micro_usd"].to_pylist()) > 0
    assert r.summary()["failed"] == 0 and r.retried == 0 and not r.interrupted
    assert r.decisions.num_rows == 0 and "option_size" in r.decisions.column_names, "a scheduled spinup is no autoscaler decision"


def test_a_server_killed_during_a_run_loses_no_query(tpcds: LocalData) -> None:
    wl = _workload(tpcds, 80)
    horizon = wl["arrival"][-1].as_py()
    scale = horizon / 6.0
    with LocalEndpoint(time_factor=0.005, template=str(tpcds.template)) as ep:

        def kill() -> None:
            deadline = time.monotonic() + 60
            while sum(w[1] == "AVAILABLE" for w in ep.workgroups()) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(2.0)
            ep.kill_server("kill-0")

        killer = threading.Thread(target=kill)
        killer.start()
        r = live(wl, [8, 8, 8], routing="round-robin", sql=tpcds, endpoint=ep.url, time_scale=scale, tick_s=0.05 * scale, name_prefix="kill")
        killer.join()
    t = r.trace
    assert t.num_rows == 80 and t["query_id"].to_pylist() == wl["query_id"].to_pylist()
    outcomes = t["outcome"].to_pylist()
    assert set(outcomes) == {"completed"}, [e for e in t["error"].to_pylist() if e]
    assert r.retried >= 1, "queries on the killed server ran again elsewhere"
    retried = t.filter(pc.greater(t["attempts"], 1))
    assert 0 not in retried["cluster_id"].to_pylist()
    assert [e for e in r.events.to_pylist() if e["event"] == "failed"][0]["cluster_id"] == 0
    assert r.clusters.to_pylist()[0]["teardown_reason"] == "failed"
    assert any(kind == "failed" and c == 0 for _, c, _, kind, _ in r.control_log)


def test_a_workgroup_that_never_becomes_available_and_a_slow_one(tpcds: LocalData) -> None:
    """The other two faults: a spinup whose workgroup stays CREATING (its queries go elsewhere)
    and a cluster whose replies are delayed (its queries are slower; none is lost)."""
    from autoslo.autoscaler import AutoscalerConfig

    wl = _workload(tpcds, 50)
    # The replay lasts 20 real seconds: the stuck spinup is given up after 3 s, and its successor
    # has time to come up and take queries. The scaler starts it on the next queue after the
    # failure, which comes late when the first queue did: a CI run of 30 queries over 8 s saw the
    # successor ready after the last arrival, and so did 12 s runs beside a busy core. A server
    # start takes well under a second on an idle machine and over 2 s with a busy core beside it
    # (a successor slower than the create timeout fails too, and the next one comes up): the
    # initial cluster's wait is generous.
    scale = wl["arrival"][-1].as_py() / 20.0
    snowflake = AutoscalerConfig(policy="snowflake-standard", warehouse_size=8, min_clusters=1, max_clusters=2, max_concurrency=1)
    with LocalEndpoint(time_factor=0.005, template=str(tpcds.template)) as ep:
        ep.never_available("na-1")
        r = live(wl, [8], autoscaler=snowflake, sql=tpcds, endpoint=ep.url, time_scale=scale, tick_s=0.05 * scale, spinup_s=0.0, create_timeout_s=3.0, initial_timeout_s=120.0, name_prefix="na")
    t = r.trace
    assert t.num_rows == 50 and set(t["outcome"].to_pylist()) == {"completed"}, [e for e in t["error"].to_pylist() if e]
    assert 1 not in t["cluster_id"].to_pylist(), "the stuck cluster ran nothing"
    # The router waits for the manager's word that a workgroup is up, and cluster 0 always has
    # room: no query was sent to the stuck one, so each ran at its first attempt.
    assert set(t["attempts"].to_pylist()) == {1}, t["attempts"].to_pylist()
    clusters = r.clusters.to_pylist()
    assert clusters[1]["teardown_reason"] == "failed"
    # The scaler tried again: a later workgroup came up and took queries (on a loaded machine the
    # scaler may stop and start clusters more than once in the replay).
    later = [c for c in clusters[2:] if c["spinup_reason"] == "snowflake-start" and c["ready_at"] is not None]
    assert later and any(c["cluster_id"] in t["cluster_id"].to_pylist() for c in later), clusters

    with LocalEndpoint(time_factor=0.005, template=str(tpcds.template)) as ep:

        def slow() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    ep.slow_down("sl-1", 0.3)
                    return
                except _core.AutoSloCoreError:
                    time.sleep(0.005)

        slower = threading.Thread(target=slow)
        slower.start()
        r = live(wl, [8, 8], routing="round-robin", sql=tpcds, endpoint=ep.url, time_scale=scale, name_prefix="sl")
        slower.join()
    t = r.trace
    assert set(t["outcome"].to_pylist()) == {"completed"}
    # Measured at the client, in real seconds (the trace's latency is on the compressed clock).
    client = {c: [x for x, k in zip(t["client_s"].to_pylist(), t["cluster_id"].to_pylist()) if k == c] for c in (0, 1)}
    # Medians, not means: one long TPC-DS query on the fast cluster takes 5-6 s at the client and
    # would swing a mean of 25 by about 0.2 s. Every reply of the slow one is delayed 0.3 s per chunk
    # (its fastest query measured 0.63 s, the fast cluster's median 0.06 s).
    assert statistics.median(client[1]) > statistics.median(client[0]) + 0.25, ("the slow cluster's queries are slower", sorted(client[1]), sorted(client[0]))


def test_sql_per_template_is_read_with_the_bad_entry_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "sql.json"
    f.write_text(json.dumps({"1": "SELECT 1", "42": "SELECT 42"}))
    assert read_sql_map(f) == {1: "SELECT 1", 42: "SELECT 42"}
    for text, message in [
        ("{", "sql.json: not valid JSON"),
        ('["SELECT 1"]', "sql.json: SQL per template is a JSON object .*got list"),
        ('{"q1": "SELECT 1"}', "sql.json: key 'q1' is not a template number"),
        ('{"0": "SELECT 1"}', "sql.json: key '0' is not a TPC-DS template \\(1–99\\)"),
        ('{"100": "SELECT 1"}', "sql.json: key '100' is not a TPC-DS template \\(1–99\\)"),
        ('{"3": 7}', "sql.json: the SQL of template 3 must be a non-empty string, got 7"),
        ('{"3": " "}', "sql.json: the SQL of template 3 must be a non-empty string"),
        ("{}", "sql.json: no SQL in it"),
    ]:
        f.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_sql_map(f)
    # On the command line: an error naming the file, before any workgroup starts.
    wl = tmp_path / "wl.parquet"
    write_table(base_workload(1.0, seed=0), wl)
    f.write_text('{"q1": "SELECT 1"}')
    assert main(["live", "--local", "--workload", str(wl), "--sql", str(f)]) == 2
    assert "sql.json: key 'q1' is not a template number" in capsys.readouterr().err


def test_autoslo_live_on_the_command_line(tpcds: LocalData, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = _workload(tpcds, 30)
    path = tmp_path / "wl.parquet"
    write_table(wl, path)
    cfg = tmp_path / "cfg.yaml"
    ExecutionConfig({"initial_clusters": [8], "autoscaler": None, "routing": "autoslo"}).save(cfg)
    scale = wl["arrival"][-1].as_py() / 4.0
    trace = tmp_path / "trace.parquet"
    code = main(["live", "--local", "--time-factor", "0.005", "--workload", str(path), "--config", str(cfg), "--data", str(tpcds.root), "--time-scale", str(scale), "--tick", str(0.1 * scale), "--trace", str(trace), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queries"] == 30 and out["failed"] == 0 and out["workgroups"] == [[0, "autoslo-0"]]
    import pyarrow.parquet as pq

    assert pq.read_table(trace).num_rows == 30
    only_one = tmp_path / "one.json"
    only_one.write_text(json.dumps({"1": "SELECT 1"}))
    assert main(["live", "--local", "--workload", str(path), "--config", str(cfg), "--sql", str(only_one), "--data", str(tpcds.root)]) != 0
    assert "no SQL for the workload's templates [" in capsys.readouterr().err
    # A query log as a warehouse keeps it (CSV, ISO 8601 times from 09:00 UTC, no SLOs) replays
    # from its first query with --from-first-arrival, instead of idling until 09:00.
    import datetime as dt

    import pyarrow.csv as pcsv

    nine = dt.datetime(2024, 5, 1, 9, tzinfo=dt.timezone.utc)
    log = pa.table({"arrival": [(nine + dt.timedelta(seconds=a)).isoformat() for a in wl["arrival"].to_pylist()], "template": wl["template"], "instance": wl["instance"]})
    pcsv.write_csv(log, tmp_path / "log.csv")
    argv = ["live", "--local", "--time-factor", "0.005", "--workload", str(tmp_path / "log.csv"), "--clusters", "8", "--data", str(tpcds.root), "--time-scale", str(scale), "--tick", str(0.1 * scale), "--json"]
    assert main([*argv, "--from-first-arrival"]) == 2 and "column `slo`: missing" in capsys.readouterr().err
    assert main([*argv, "--from-first-arrival", "--kappa", "4", "--trace", str(trace)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queries"] == 30 and out["failed"] == 0 and out["arrivals_moved_by_s"] == pytest.approx(9 * 3600 + wl["arrival"][0].as_py())
    assert pq.read_table(trace)["arrival"][0].as_py() < 1.0


def test_sigterm_stops_autoslo_live_cleanly_and_deletes_its_workgroups(tpcds: LocalData, tmp_path: Path) -> None:
    # A supervisor (Airflow, systemd, Kubernetes) stops a run with SIGTERM. Python's default ends
    # the process at once and leaves the workgroups running, billed on AWS; the CLI stops the run
    # as Ctrl-C does instead.
    wl = _workload(tpcds, 200)
    path = tmp_path / "wl.parquet"
    write_table(wl, path)
    scale = wl["arrival"][-1].as_py() / 60.0  # a minute of replay: stopped well before its end
    with LocalEndpoint(time_factor=0.005, template=str(tpcds.template)) as ep:
        cmd = [sys.executable, "-m", "autoslo", "live", "--endpoint", ep.url, "--workload", str(path), "--clusters", "8,8", "--routing", "round-robin", "--data", str(tpcds.root), "--time-scale", str(scale), "--name-prefix", "term", "--json"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while sum(w[1] == "AVAILABLE" for w in ep.workgroups()) < 2 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            time.sleep(2.0)  # queries running
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        assert proc.returncode == 130, err
        summary = json.loads(out)
        assert summary["interrupted"] and summary["cancelled"] > 0 and summary["queries"] == 200, summary
        assert _until(lambda: _deleting(ep)), ep.workgroups()


def test_a_supervisor_s_own_exception_stops_a_live_run_after_it_deleted_its_workgroups(tpcds: LocalData) -> None:
    # Airflow's SIGTERM handler raises Airflow's own exception: the run stops as on Ctrl-C, deletes
    # its workgroups, and then raises that exception (not a result marked interrupted).
    class Stopped(Exception):
        pass

    def stop(signum: int, frame: object) -> None:
        raise Stopped("the scheduler stopped the task")

    wl = _workload(tpcds, 200)
    scale = wl["arrival"][-1].as_py() / 60.0
    with LocalEndpoint(time_factor=0.005, template=str(tpcds.template)) as ep:
        previous = signal.signal(signal.SIGALRM, stop)
        try:
            signal.setitimer(signal.ITIMER_REAL, 4.0)  # the workgroups are up and queries run
            with pytest.raises(Stopped, match="the scheduler stopped the task"):
                live(wl, [8], routing="round-robin", sql=tpcds, endpoint=ep.url, time_scale=scale, name_prefix="sup", initial_timeout_s=120.0)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert _until(lambda: _deleting(ep)), ep.workgroups()


def test_serve_tells_a_client_where_each_query_runs_and_deletes_its_workgroups() -> None:
    """Production routing: the service creates the plan's workgroups, routes each query to an
    available one by the plan's deadlines, and the client runs the SQL there itself (psql here)."""
    from autoslo.live import serve

    policy = {"deadlines": [{"tier": "*", "class": "dashboard", "deadline_s": 5}]}
    cfg = ExecutionConfig({"initial_clusters": [8, 8], "autoscaler": None, "routing": "round-robin", "slo_policy": policy})
    with LocalEndpoint(time_factor=0.005) as ep:
        with serve(config=cfg, endpoint=ep.url, name_prefix="srv", tick_s=0.1, delete_timeout_s=30) as svc:
            assert [(c["cluster_id"], c["workgroup"], c["state"]) for c in svc.clusters()] == [(0, "srv-0", "available"), (1, "srv-1", "available")]
            where = [svc.route(q, 3, 1, tenant="acme", workload_class="dashboard") for q in range(4)]
            assert [w["cluster_id"] for w in where] == [0, 1, 0, 1] and where[1]["workgroup"] == "srv-1"
            out = subprocess.run(["psql", "-h", where[1]["address"], "-p", str(where[1]["port"]), "-U", "autoslo", "-d", "postgres", "-tAc", "SELECT 40 + 2"], capture_output=True, text=True, timeout=60)
            assert out.stdout.strip() == "42", out.stderr
            assert [c["running"] for c in svc.clusters()] == [2, 2]
            with pytest.raises(_core.AutoSloCoreError, match="no rule of the SLO policy covers"):
                svc.route(9, 3, 1, tenant="acme", workload_class="adhoc")
            assert svc.route(9, 3, 1, 60.0, tenant="acme", workload_class="adhoc")["cluster_id"] in (0, 1)
            for q in [*range(4), 9]:
                svc.complete(q)
            with pytest.raises(_core.AutoSloCoreError, match="not routed"):
                svc.complete(9)
            svc.lost(1, "connection refused")
            deadline = time.monotonic() + 30
            while svc.clusters()[1]["state"] != "deleted" and time.monotonic() < deadline:
                time.sleep(0.02)
            assert svc.clusters()[1]["state"] == "deleted"
            assert svc.route(10, 3, 1, tenant="acme", workload_class="dashboard")["cluster_id"] == 0
            svc.complete(10)
            svc.route(12, 5, 2, 90.0)  # still running at the stop: cancelled
        assert _until(lambda: _deleting(ep)), ep.workgroups()
        with pytest.raises(_core.AutoSloCoreError, match="stopped"):
            svc.route(11, 3, 1, 5.0)
    # What it served: every routed query once, with its SLO, cluster and outcome, per tenant × class.
    served = svc.take_served()
    assert sorted(served["query_id"].to_pylist()) == [0, 1, 2, 3, 9, 10, 12]
    rows = {r["query_id"]: r for r in served.to_pylist()}
    assert rows[9]["slo"] == 60.0 and rows[0]["slo"] == 5.0 and rows[9]["class"] == "adhoc"
    assert rows[12]["outcome"] == "cancelled" and not rows[12]["met"] and (rows[12]["tenant"], rows[12]["class"]) == ("default", "adhoc")
    assert all(rows[q]["outcome"] == "completed" and rows[q]["met"] for q in (0, 1, 2, 3, 9, 10))
    assert served.schema.field("arrival").type == pa.timestamp("us", tz="UTC")
    totals = {(t["tenant"], t["class"]): t for t in svc.totals().to_pylist()}
    assert (totals["acme", "dashboard"]["met"], totals["acme", "adhoc"]["met"], totals["default", "adhoc"]["cancelled"]) == (5, 1, 1)
    assert totals["acme", "dashboard"]["violation_rate"] == 0.0 and totals["default", "adhoc"]["violation_rate"] == 1.0
    assert svc.cost() > 0 and all(c["billed_s"] > 0 for c in svc.clusters())
    # Each workgroup's bill is split over the queries it ran: per query and per tenant × class,
    # the costs sum to it; a query never placed pays nothing.
    assert pc.sum(served["cost"]).as_py() == pytest.approx(svc.cost(), rel=1e-9)
    assert sum(totals[k]["cost"] for k in totals) == pytest.approx(svc.cost(), rel=1e-9)
    assert all(rows[q]["cost"] > 0 for q in rows)
    # A query log as it is: the reservoir stores it as history, the emulator replays it.
    with tempfile.TemporaryDirectory() as d:
        res = autoslo.Reservoir(d)
        days = res.append(served)
        assert len(days) == 1 and res.queries(days) == 7
        autoslo.write_table(served, f"{d}/served.parquet")
        assert autoslo.read_workload(f"{d}/served.parquet").num_rows == 7


class _AutosloServe:
    """``autoslo serve ARGS`` as a subprocess, in a ``with`` block: entering reads its first line
    (``start``); leaving without an error sends SIGTERM and checks it exits 0, its last line in
    ``end``. It is killed if still running either way."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "autoslo", "serve", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.start: dict[str, Any] = {}
        self.end: dict[str, Any] = {}

    def line(self) -> Any:
        """Its next line of output, as JSON."""
        return json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]

    def __enter__(self) -> _AutosloServe:
        self.start = self.line()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        try:
            if kind is None:
                self.proc.send_signal(signal.SIGTERM)
                out, err = self.proc.communicate(timeout=60)
                assert self.proc.returncode == 0, err
                self.end = json.loads(out.strip().splitlines()[-1])
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def call(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """GET ``url``, or POST ``body`` as JSON: (status, the answer's JSON)."""
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_autoslo_serve_answers_on_http_and_sigterm_deletes_its_workgroups(tmp_path: Path) -> None:
    policy = {"deadlines": [{"tier": "*", "class": "dashboard", "deadline_s": 5}]}
    ExecutionConfig({"initial_clusters": [8, 8], "autoscaler": None, "routing": "round-robin", "slo_policy": policy}).save(tmp_path / "plan.yaml")
    with LocalEndpoint(time_factor=0.005) as ep:
        args = ["--config", str(tmp_path / "plan.yaml"), "--start-s", "0", "--endpoint", ep.url, "--port", "0", "--tick", "0.1", "--name-prefix", "http", "--log", str(tmp_path / "log"), "--log-every", "0.5", "--billing-minimum", "0.2"]
        with _AutosloServe(*args) as served:
            url = served.start["serving"]
            assert [c["workgroup"] for c in served.start["clusters"]] == ["http-0", "http-1"]
            status, where = call(f"{url}/route", {"query_id": 1, "template": 3, "instance": 1, "tenant": "acme", "class": "dashboard"})
            assert status == 200 and where["workgroup"] == "http-0" and where["port"] > 0, where
            assert call(f"{url}/route", {"query_id": 2, "template": 3, "instance": 1, "slo": 30})[1]["cluster_id"] == 1
            assert [c["running"] for c in call(f"{url}/clusters")[1]] == [1, 1]
            for body, message in [
                ({"query_id": 3, "template": 3, "instance": 1, "class": "adhoc"}, "no rule of the SLO policy covers"),
                ({"query_id": 1, "template": 3, "instance": 1, "slo": 9}, "already routed"),
                ({"query_id": "x", "template": 3, "instance": 1}, "field `query_id` must be int"),
                ({"query_id": 4, "template": 3, "instance": 1, "slo": 9, "tennant": "a"}, "unknown field(s) tennant"),
                # Round robin never reads the text; a query the log could not name is refused anyway.
                ({"query_id": 4, "template": 0, "instance": 1, "slo": 9}, "unknown query template 0"),
            ]:
                status, answer = call(f"{url}/route", body)
                assert status == 400 and message in answer["error"], (status, answer)
            assert call(f"{url}/complete", {"query_id": 1}) == (200, {})
            assert call(f"{url}/complete", {"query_id": 1, "timed_out": False})[0] == 400
            assert call(f"{url}/complete", {"query_id": 2, "timed_out": True}) == (200, {})
            assert call(f"{url}/health")[1]["ok"] is True
            assert call(f"{url}/nowhere")[0] == 404
            stats = call(f"{url}/stats")[1]
            by = {(t["tenant"], t["class"]): t for t in stats["totals"]}
            assert (by["acme", "dashboard"]["met"], by["default", "adhoc"]["timed_out"], by["default", "adhoc"]["violation_rate"]) == (1, 1, 1.0), stats
            with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
                assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                metrics = r.read().decode()
            assert 'autoslo_queries_ended_total{tenant="acme",class="dashboard",outcome="met"} 1.0' in metrics, metrics
            assert 'autoslo_clusters{state="available"} 2.0' in metrics and "# TYPE autoslo_billed_dollars_total counter" in metrics and 'autoslo_attributed_dollars_total{tenant="acme",class="dashboard"}' in metrics
            # A log part is written every 0.5 s: wait for the first.
            assert _until(lambda: any(p.name.startswith("served-") for p in (tmp_path / "log").iterdir()))
            parts = [p for p in (tmp_path / "log").iterdir() if not p.name.startswith(".")]  # .lock, .journal/
            assert parts and all(p.name.startswith("served-") and p.suffix == ".parquet" for p in parts), parts
            # One kept-alive connection, as a gateway keeps it: a refused request leaves it usable.
            u = urllib.parse.urlsplit(url)
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            for method, path, body, status in [("POST", "/nowhere", b'{"x": 1}', 404), ("GET", "/health", None, 200), ("POST", "/route", b'{"query_id": 5}', 400), ("GET", "/health", None, 200)]:
                conn.request(method, path, body)
                r = conn.getresponse()
                r.read()
                assert r.status == status, (path, r.status)
            conn.close()
        assert served.end["stopped"] is True and served.end["cost"] > 0
        # The log: each query once, across its parts, as a query log the reservoir takes.
        log = read_table(tmp_path / "log")  # the directory of parts, as one table
        assert sorted(zip(log["query_id"].to_pylist(), log["outcome"].to_pylist())) == [(1, "completed"), (2, "timeout")]
        assert not list((tmp_path / "log").glob(".*.tmp")), "no part left half-written"
        assert not list((tmp_path / "log" / ".journal").iterdir()), "the journal went into the parts"
        # The daily cycle's ingest takes the directory: the day's rows, as history for tomorrow.
        day = log["arrival"][0].as_py().date()
        from autoslo.airflow import ingest

        assert ingest(tmp_path / "res", tmp_path / "log", day)["queries_stored"] == sum(a.date() == day for a in log["arrival"].to_pylist())
        assert _until(lambda: _deleting(ep)), ep.workgroups()  # deleting, or gone


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def _pending_ids(path: Path) -> list[int]:
    """The query ids a journal's pending.arrow holds (none while it is absent)."""
    try:
        return [int(q) for q in pa.ipc.open_file(pa.memory_map(str(path))).read_all()["query_id"].to_pylist()]
    except FileNotFoundError:
        return []


def test_a_crashed_serve_loses_no_query_that_ended_and_the_next_run_logs_them(tmp_path: Path) -> None:
    """`autoslo serve --log` journals what ends; killed (SIGKILL: no handler runs), it leaves the
    journal, and the next run on that directory makes it a part before serving: a query whose
    cost was final with its cost, one whose billing minimum still ran with cost null. A second
    service on the same directory is refused while the first runs. The restart does not refill
    a budget: what the log says a tenant was charged today is charged again."""
    from autoslo import predictor

    per_query = 0.375 * 8 * predictor.load().stage_estimate(3, 1, 8) / 3600
    log_dir = tmp_path / "log"
    with LocalEndpoint(time_factor=0.005) as ep:
        args = ["--clusters", "8", "--routing", "round-robin", "--endpoint", ep.url, "--port", "0", "--tick", "0.1", "--name-prefix", "crash", "--log", str(log_dir), "--journal-every", "0.1", "--billing-minimum", "2"]
        args += ["--budget", f"acme={1.5 * per_query}"]
        crashed = _AutosloServe(*args)
        try:
            crashed.start = crashed.line()
            url = crashed.start["serving"]
            assert crashed.start["recovered"] is None and crashed.start["budgets_spent"] == {}
            with pytest.raises(RuntimeError, match="being written by another process"):
                ServedLog(log_dir)
            journal_dir = log_dir / ".journal"
            assert call(f"{url}/route", {"query_id": 1, "template": 3, "instance": 1, "slo": 60, "tenant": "acme"})[0] == 200
            assert call(f"{url}/complete", {"query_id": 1}) == (200, {})
            # Its busy period's billing minimum (2 s) ran out: its cost is final, and journaled.
            _wait_for(lambda: any(journal_dir.glob("*-000000000001.arrow")), "query 1 journaled with its cost")
            assert call(f"{url}/route", {"query_id": 2, "template": 3, "instance": 1, "slo": 60})[0] == 200
            assert call(f"{url}/complete", {"query_id": 2}) == (200, {})
            # Journaled, its cost still pending (its billing minimum runs 2 s more).
            _wait_for(lambda: 2 in _pending_ids(journal_dir / "pending.arrow"), "query 2 journaled as pending")
            crashed.proc.kill()
            crashed.proc.wait(timeout=30)
        finally:
            if crashed.proc.poll() is None:
                crashed.proc.kill()
        assert not list(log_dir.glob("*.parquet")), "no part was due (--log-every 300)"
        # The kill may land while pending.arrow is rewritten: a hidden temporary file, never data.
        journal = sorted(f.name for f in (log_dir / ".journal").iterdir() if not f.name.startswith("."))
        assert len(journal) == 2 and journal[0].endswith("-000000000001.arrow") and journal[1] == "pending.arrow", journal
        # Half-written files of a crash, as a kill mid-write leaves them: the next opening removes them.
        (log_dir / ".journal" / ".pending.arrow.tmp").write_bytes(b"ARROW1 half")
        (log_dir / ".journal" / ".served-20260101T000000000000Z-9.parquet.tmp").write_bytes(b"PAR1 half")
        with _AutosloServe(*args) as again:
            assert again.start["recovered"] and Path(again.start["recovered"]).parent == log_dir
            recovered = read_table(again.start["recovered"])
            assert again.start["budgets_spent"] == {"acme": pytest.approx(per_query)}
            status, answer = call(f"{again.start['serving']}/route", {"query_id": 3, "template": 3, "instance": 1, "slo": 60, "tenant": "acme"})
            assert (status, answer.get("rejected")) == (429, "budget"), answer
        rows = {r["query_id"]: r for r in recovered.to_pylist()}
        assert sorted(rows) == [1, 2] and rows[1]["outcome"] == rows[2]["outcome"] == "completed"
        assert rows[1]["cost"] > 0 and rows[1]["tenant"] == "acme" and rows[2]["cost"] is None
        assert rows[1]["charged"] == pytest.approx(per_query) and rows[2]["charged"] == 0
        assert len(again.end["log_parts"]) == 1, "the second run logged its refusal"
        log = read_table(log_dir)
        assert sorted(log["query_id"].to_pylist()) == [1, 2, 3] and not list((log_dir / ".journal").iterdir())


def test_a_served_log_compacts_its_journal_once_even_after_a_crash_mid_compaction(tmp_path: Path) -> None:
    """A compaction that wrote its part and died before removing the journal files is not
    replayed: the part names them, and the next opening removes them."""
    with LocalEndpoint(time_factor=0.005) as ep, serve([8], "noop", routing="round-robin", endpoint=ep.url, name_prefix="jrn", billing_minimum_s=0.0) as svc:
        log = ServedLog(tmp_path)
        for q in (1, 2):
            svc.route(q, 3, 1, 60.0)
            svc.complete(q)
            assert log.sync(svc) == 1
        journal = sorted((tmp_path / ".journal").glob("*-*.arrow"))
        assert len(journal) == 2
        saved = {f: f.read_bytes() for f in journal}
        part = log.compact()
        assert part is not None and read_table(part)["query_id"].to_pylist() == [1, 2]
        assert log.compact() is None and log.sync(svc) == 0
        log.close()
    for f, data in saved.items():  # as if the compaction had died before removing them
        f.write_bytes(data)
    with ServedLog(tmp_path) as reopened:
        assert reopened.recovered is None
    assert read_table(tmp_path)["query_id"].to_pylist() == [1, 2] and not list((tmp_path / ".journal").iterdir())

    class Replay:
        """What a service hands a log: ``table`` once, nothing pending."""

        def __init__(self, table: pa.Table) -> None:
            self.table = table

        def take_served(self) -> pa.Table:
            t, self.table = self.table, self.table.slice(0, 0)
            return t

        def pending_served(self) -> pa.Table:
            return self.table.slice(0, 0)

    # A later run's journal is its own, though the first run's part names the files it held: a
    # crash of the later run loses none of it. A journal that cannot be written keeps what it
    # took for the next sync.
    later = read_table(part).replace_schema_metadata(None).slice(0, 1)
    run = ServedLog(tmp_path)
    write, failures = run._write_journal, []

    def full_disk(name: str, table: pa.Table) -> None:
        failures.append(name)
        raise OSError(28, "No space left on device")

    run._write_journal = full_disk  # type: ignore[method-assign]
    with pytest.raises(OSError, match="No space left"):
        run.sync(Replay(later))  # type: ignore[arg-type]
    run._write_journal = write  # type: ignore[method-assign]
    assert failures and run.sync(Replay(later.slice(0, 0))) == 1, "kept, then written"
    run.close()  # a crash: the journal stays
    with ServedLog(tmp_path) as third:
        assert third.recovered is not None and read_table(third.recovered).num_rows == 1
    assert read_table(tmp_path)["query_id"].to_pylist() == [1, 2, 1]


def test_a_token_guards_every_endpoint_but_health(tmp_path: Path) -> None:
    """With a bearer token (`autoslo serve --token-file`), a request without it or with another
    one is refused 401 before any work; /health stays open for probes."""
    from autoslo.serving import make_server, read_token

    (tmp_path / "token").write_text("s3cret-Token\n")
    token = read_token(tmp_path / "token")
    assert token == "s3cret-Token"
    for bad, why in [("", "is empty"), ("two words", "whitespace")]:
        (tmp_path / "bad").write_text(bad)
        with pytest.raises(ValueError, match=why):
            read_token(tmp_path / "bad")
    with LocalEndpoint(time_factor=0.005) as ep, serve([8], "noop", routing="round-robin", endpoint=ep.url, name_prefix="tok") as svc:
        server = make_server(svc, "127.0.0.1", 0, token=token)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"

        def request(method: str, path: str, auth: str | None, body: dict[str, Any] | None = None) -> tuple[int, Any]:
            conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
            headers = {"Content-Type": "application/json", **({"Authorization": auth} if auth is not None else {})}
            conn.request(method, path, json.dumps(body).encode() if body is not None else None, headers)
            r = conn.getresponse()
            answer = (r.status, json.loads(r.read()) if r.getheader("Content-Type", "").startswith("application/json") else None, r.getheader("WWW-Authenticate"))
            conn.close()
            return answer[0], answer[1:]

        route = {"query_id": 1, "template": 3, "instance": 1, "slo": 60}
        for auth in (None, "Bearer wrong", "s3cret-Token", "Bearer s3cret-Token2"):
            status, (answer, challenge) = request("POST", "/route", auth, route)
            assert status == 401 and "bearer token" in answer["error"] and challenge.startswith("Bearer"), (auth, status, answer)
            assert request("GET", "/stats", auth)[0] == request("GET", "/metrics", auth)[0] == 401
        assert svc.clusters()[0]["running"] == 0, "a refused request did no work"
        assert request("GET", "/health", None)[0] == 200
        # A body the header claims to be a terabyte is refused unread: reading it would first
        # allocate what the header says.
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
        conn.putrequest("POST", "/route")
        conn.putheader("Content-Length", str(10**12))
        conn.endheaders()
        big = conn.getresponse()
        assert big.status == 413 and "at most 65536 bytes" in json.loads(big.read())["error"]
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
        conn.request("POST", "/route", iter([json.dumps(route).encode()]), {"Authorization": "Bearer s3cret-Token"}, encode_chunked=True)
        chunked = conn.getresponse()
        assert chunked.status == 411 and "Content-Length" in json.loads(chunked.read())["error"]
        conn.close()
        with pytest.raises(ValueError, match="idle_timeout_s"):
            make_server(svc, "127.0.0.1", 0, idle_timeout_s=0.0)
        # A request sent in part holds its connection only until the idle timeout.
        brief = make_server(svc, "127.0.0.1", 0, idle_timeout_s=0.3)
        threading.Thread(target=brief.serve_forever, daemon=True).start()
        with socket.create_connection(("127.0.0.1", brief.server_address[1]), timeout=30) as sock:
            sock.sendall(b"POST /route HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
            assert sock.recv(1024) == b"", "the server closed the stalled connection"
        brief.shutdown()
        brief.server_close()
        assert request("POST", "/route", "Bearer s3cret-Token", route)[0] == 200
        assert request("GET", "/metrics", "Bearer s3cret-Token")[0] == 200
        assert call(f"{base}/health")[0] == 200
        svc.complete(1)  # the stop waits for what still runs
        server.shutdown()
        server.server_close()


def test_autoslo_serve_follows_the_published_plans_without_dropping_a_workgroup(tmp_path: Path) -> None:
    """`autoslo serve --plans DIR` serves today's published plan; SIGHUP hands it over to the
    plan published again (and at UTC midnight to the next day's), keeping the workgroups; a plan
    that cannot be loaded is reported and the one in force stays."""
    def clusters(url: str) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{url}/clusters", timeout=30) as r:
            return list(json.loads(r.read()))

    plans = tmp_path / "published"
    plans.mkdir()
    today = plans / f"{dt.datetime.now(dt.timezone.utc).date().isoformat()}.yaml"
    ExecutionConfig({"initial_clusters": [8], "autoscaler": None, "routing": "round-robin"}).save(today)
    with LocalEndpoint(time_factor=0.005) as ep:
        with _AutosloServe("--plans", str(plans), "--endpoint", ep.url, "--port", "0", "--tick", "0.1", "--name-prefix", "day") as served:
            url = served.start["serving"]
            assert [c["workgroup"] for c in clusters(url)] == ["day-0"]
            # Republished with a second cluster and another routing: refused, the plan stays.
            ExecutionConfig({"initial_clusters": [8, 8], "autoscaler": None, "routing": "autoslo"}).save(today)
            served.proc.send_signal(signal.SIGHUP)
            refused = served.line()
            assert "routes by `autoslo`" in refused["error"] and refused["kept"] == "the plan in force", refused
            ExecutionConfig({"initial_clusters": [8, 8], "autoscaler": None, "routing": "round-robin"}).save(today)
            served.proc.send_signal(signal.SIGHUP)
            taken = served.line()
            assert taken["plan"] == str(today) and taken["spun_up"] == [8], taken
            deadline = time.monotonic() + 60
            while [c["state"] for c in clusters(url)] != ["available", "available"] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert [(c["workgroup"], c["state"]) for c in clusters(url)] == [("day-0", "available"), ("day-1", "available")]
        assert [e["event"] for e in served.end["events"]].count("plan") == 1
        assert _until(lambda: _deleting(ep)), ep.workgroups()


def _check_shape(shape: Any, value: Any, path: str) -> None:
    """``value`` (decoded JSON) conforms to botocore's ``shape``: known members only, required
    ones present, and each of the right JSON type."""
    kind = shape.type_name
    if kind == "structure":
        assert isinstance(value, dict), path
        unknown = set(value) - set(shape.members)
        assert not unknown, f"{path}: members not in the service model: {unknown}"
        for req in shape.required_members:
            assert req in value, f"{path}: required member {req} missing"
        for k, v in value.items():
            _check_shape(shape.members[k], v, f"{path}.{k}")
    elif kind == "list":
        assert isinstance(value, list), path
        for i, v in enumerate(value):
            _check_shape(shape.member, v, f"{path}[{i}]")
    elif kind == "string":
        assert isinstance(value, str), path
        if shape.enum:
            assert value in shape.enum, f"{path}: {value} not in {shape.enum}"
    elif kind in ("integer", "long"):
        assert isinstance(value, int) and not isinstance(value, bool), path
    elif kind == "boolean":
        assert isinstance(value, bool), path
    elif kind == "timestamp":
        assert isinstance(value, str) and value.endswith("Z") and "T" in value, f"{path}: {value} (the model says ISO 8601)"


def test_boto3_is_a_second_client_and_every_response_matches_the_service_model() -> None:
    import boto3
    with LocalEndpoint(time_factor=0.005) as ep:
        c = boto3.client("redshift-serverless", endpoint_url=ep.url, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
        raw: list[tuple[str, int, bytes]] = []

        def capture(operation_model: Any, response_dict: dict[str, Any], **_: Any) -> None:
            raw.append((operation_model.name, response_dict["status_code"], response_dict["body"]))

        c.meta.events.register("before-parse.redshift-serverless.*", capture)
        c.create_namespace(namespaceName="b3-ns", dbName="dev")
        w = c.create_workgroup(workgroupName="b3-wg", namespaceName="b3-ns", baseCapacity=8)["workgroup"]
        assert w["status"] == "CREATING"
        deadline = time.monotonic() + 30
        while (w := c.get_workgroup(workgroupName="b3-wg")["workgroup"])["status"] != "AVAILABLE" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert w["endpoint"]["address"] == "127.0.0.1" and w["endpoint"]["port"] == w["port"]
        c.update_workgroup(workgroupName="b3-wg", baseCapacity=16)
        c.list_workgroups(maxResults=1)
        c.list_namespaces()
        c.get_namespace(namespaceName="b3-ns")
        with pytest.raises(c.exceptions.ResourceNotFoundException):
            c.get_workgroup(workgroupName="missing")
        with pytest.raises(c.exceptions.ConflictException):
            c.create_namespace(namespaceName="b3-ns")
        with pytest.raises(c.exceptions.ValidationException):
            c.create_workgroup(workgroupName="b3-bad", namespaceName="b3-ns", baseCapacity=12)
        deadline = time.monotonic() + 30
        while c.get_workgroup(workgroupName="b3-wg")["workgroup"]["status"] != "AVAILABLE" and time.monotonic() < deadline:
            time.sleep(0.05)
        c.delete_workgroup(workgroupName="b3-wg")
        model = c.meta.service_model
        ops = set()
        for op, status, body in raw:
            if status == 200:
                ops.add(op)
                _check_shape(model.operation_model(op).output_shape, json.loads(body), op)
            else:
                err = json.loads(body)
                assert err["__type"] in model.shape_names, err
                _check_shape(model.shape_for(err["__type"]), {k: v for k, v in err.items() if k != "__type"}, err["__type"])
        assert {"CreateNamespace", "CreateWorkgroup", "GetWorkgroup", "UpdateWorkgroup", "ListWorkgroups", "ListNamespaces", "GetNamespace", "DeleteWorkgroup"} <= ops


def test_the_local_endpoint_pages_its_lists_and_names_an_operation_it_does_not_serve() -> None:
    """boto3's paginator walks ListNamespaces in pages of one and two (nextToken), and an
    operation the local endpoint does not serve is an UnknownOperationException, not a hang or
    an empty answer."""
    import boto3
    import botocore.exceptions

    with LocalEndpoint(time_factor=0.005) as ep:
        c = boto3.client("redshift-serverless", endpoint_url=ep.url, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
        names = [f"page-{i}" for i in range(5)]
        for n in names:
            c.create_namespace(namespaceName=n, dbName="dev")
        for size, pages in ((1, 5), (2, 3), (100, 1)):
            got = list(c.get_paginator("list_namespaces").paginate(PaginationConfig={"PageSize": size}))
            assert [len(p["namespaces"]) for p in got] == [min(size, 5 - i * size) for i in range(pages)], size
            assert sorted(n["namespaceName"] for p in got for n in p["namespaces"]) == names
            assert "nextToken" not in got[-1] and all("nextToken" in p for p in got[:-1])
        with pytest.raises(botocore.exceptions.ClientError) as e:
            c.list_snapshots()
        assert e.value.response["Error"]["Code"] == "UnknownOperationException", e.value.response
        with pytest.raises(botocore.exceptions.ClientError, match="nextToken"):
            c.list_namespaces(nextToken="not-a-token")


def test_a_service_deletes_the_workgroups_an_earlier_one_left_under_its_prefix() -> None:
    """A service that kept its clusters (or died) leaves workgroups `<prefix>-<n>`; the next one
    under the prefix takes over the initial ones and deletes the rest at its start, listing them."""
    from autoslo.live import serve

    with LocalEndpoint(time_factor=0.005) as ep:
        with serve([8, 8, 8], "noop", routing="round-robin", endpoint=ep.url, name_prefix="lf", keep_clusters=True, delete_timeout_s=30):
            pass
        assert sorted(w[0] for w in ep.workgroups()) == ["lf-0", "lf-1", "lf-2"]
        with serve([8], "noop", routing="round-robin", endpoint=ep.url, name_prefix="lf", keep_leftovers=True, keep_clusters=True) as svc:
            kept = sorted(e["reason"] for e in svc.events() if e["event"] == "leftover")
        assert [r.split(" (")[0] for r in kept] == ["kept workgroup lf-1", "kept workgroup lf-2"], kept
        with serve([8], "noop", routing="round-robin", endpoint=ep.url, name_prefix="lf", delete_timeout_s=30) as svc:
            said = sorted(e["reason"] for e in svc.events() if e["event"] == "leftover")
            assert [r.split(" (")[0] for r in said] == ["deleted workgroup lf-1", "deleted workgroup lf-2"], said
            assert [(w[0], w[1]) for w in ep.workgroups() if w[1] != "DELETING"] == [("lf-0", "AVAILABLE")]
            assert svc.route(1, 3, 1, 60.0)["workgroup"] == "lf-0"
            svc.complete(1)


def test_a_service_refuses_at_admission_infeasible_deadlines_and_tenants_past_their_budgets() -> None:
    """Admission on the serving path, as in the emulator: a query no cluster can serve within its
    SLO, or one that would take its tenant past its budget, is refused before any work. It is not
    routed, and ends in the log and totals as rejected (a violation with no cost). Over HTTP the
    status says why."""
    from autoslo import predictor
    from autoslo.live import QueryRejectedError, serve
    from autoslo.serving import make_server
    from autoslo.tenancy import Budgets, DeadlineAdmission

    est = predictor.load().stage_estimate(3, 1, 8)
    per_query = 0.375 * 8 * est / 3600
    with pytest.raises(_core.AutoSloCoreError, match="budget of tenant 'acme'"):
        Budgets({"acme": -1.0})
    # A setting of another kind is refused before any workgroup is touched.
    with pytest.raises(TypeError, match="`admission` must be an autoslo.tenancy.DeadlineAdmission"):
        serve([8], "noop", routing="round-robin", endpoint="http://127.0.0.1:9", admission=(1.0, None))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`budgets` must be an autoslo.tenancy.Budgets"):
        serve([8], "noop", routing="round-robin", endpoint="http://127.0.0.1:9", budgets={"acme": 1.0})  # type: ignore[arg-type]
    with LocalEndpoint(time_factor=0.005) as ep:
        admission, budgets = DeadlineAdmission(), Budgets({"acme": 2.5 * per_query})
        with serve([8], "noop", routing="round-robin", endpoint=ep.url, name_prefix="adm", admission=admission, budgets=budgets, billing_minimum_s=0.2) as svc:
            t0 = time.time()
            with pytest.raises(QueryRejectedError, match="infeasible-deadline") as e:
                svc.route(1, 3, 1, est / 10, tenant="beta")
            assert e.value.reason == "infeasible-deadline"
            for q in (2, 3):
                svc.route(q, 3, 1, 60.0, tenant="acme")
            with pytest.raises(QueryRejectedError) as e:
                svc.route(4, 3, 1, 60.0, tenant="acme")
            assert e.value.reason == "budget" and utc.is_to_midnight(e.value.retry_after_s, t0, time.time())
            svc.route(5, 3, 1, 60.0, tenant="beta")
            assert [c["running"] for c in svc.clusters()] == [3], "a rejected query takes no cluster"
            for q in (2, 3, 5):
                svc.complete(q)
            server = make_server(svc, "127.0.0.1", 0)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            url = f"http://127.0.0.1:{server.server_address[1]}/route"
            assert call(url, {"query_id": 6, "template": 3, "instance": 1, "slo": est / 10})[0] == 422
            req = urllib.request.Request(url, data=json.dumps({"query_id": 7, "template": 3, "instance": 1, "slo": 60.0, "tenant": "acme"}).encode())
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(req, timeout=30)
            answer = json.loads(refused.value.read())
            assert (refused.value.code, answer["rejected"]) == (429, "budget"), answer
            # The budget clears at the next UTC midnight: Retry-After says when, in whole seconds.
            t1 = time.time()
            assert utc.is_to_midnight(answer["retry_after_s"], t0, t1)
            assert utc.is_to_midnight(int(refused.value.headers["Retry-After"]), t0, t1)
            # Each budgeted tenant's standing, in /stats and /metrics: acme spent two queries' worth.
            standing = call(url.replace("/route", "/stats"))[1]["budgets"]
            assert [(b["tenant"], b["budget"]) for b in standing] == [("acme", pytest.approx(2.5 * per_query))] and standing == svc.budgets()
            assert standing[0]["spent"] == pytest.approx(2 * per_query) and utc.is_day_start(standing[0]["window_start"], t0, time.time())
            with urllib.request.urlopen(url.replace("/route", "/metrics"), timeout=30) as r:
                text = r.read().decode()
            assert f'autoslo_budget_spent_dollars{{tenant="acme"}} {standing[0]["spent"]!r}' in text and 'autoslo_budget_dollars{tenant="acme"}' in text
            server.shutdown()
            server.server_close()
        served = svc.take_served()
        rows = {r["query_id"]: r for r in served.to_pylist()}
        assert {q: rows[q]["reject_reason"] for q in (1, 4, 6, 7)} == {1: "infeasible-deadline", 4: "budget", 6: "infeasible-deadline", 7: "budget"}
        assert all(rows[q]["outcome"] == "rejected" and rows[q]["cost"] == 0 and rows[q]["cluster_id"] is None for q in (1, 4, 6, 7))
        assert all(rows[q]["reject_reason"] is None and rows[q]["met"] for q in (2, 3, 5))
        assert [rows[q]["charged"] for q in (2, 3)] == [pytest.approx(per_query)] * 2 and rows[5]["charged"] == rows[4]["charged"] == 0
        totals = {t["tenant"]: t for t in svc.totals().to_pylist()}
        assert (totals["acme"]["routed"], totals["acme"]["rejected"], totals["default"]["rejected"]) == (2, 2, 1)
        assert totals["acme"]["violation_rate"] == pytest.approx(0.5), "a rejection counts as a violation"
        assert pc.sum(served["cost"]).as_py() == pytest.approx(svc.cost(), rel=1e-9)
