"""An HTTP/JSON front for :func:`autoslo.live.serve`, so a gateway in any language asks AutoSLO
where each query goes (``autoslo serve``). Standard library only; one thread per request.

=======  ===========  ===========================================================================
method   path         body → answer
=======  ===========  ===========================================================================
POST     /route       ``{"query_id", "template", "instance", "slo"?, "tenant"?, "class"?}`` →
                      ``{"cluster_id", "size", "workgroup", "address", "port"}``
POST     /complete    ``{"query_id", "timed_out"?}`` → ``{}``
POST     /lost        ``{"cluster_id", "why"}`` → ``{}``
GET      /clusters    → ``[{"cluster_id", "size", "workgroup", "state", "running", "address", "port"}]``
GET      /events      → ``[{"time", "cluster_id", "size", "event", "reason"}]``
GET      /health      → ``{"ok": true, "now": <service clock>}``
GET      /stats       → ``{"now", "cost", "totals": [{"tenant", "class", "routed", "running", "met",
                      "late", "timed_out", "failed", "cancelled", "violation_rate",
                      "latency_mean", "cost"}], "budgets": [{"tenant", "budget", "spent",
                      "window_start"}]}`` (``cost``: dollars attributed to the ended queries
                      whose cost is final; ``spent``: estimated dollars admission charged)
GET      /metrics     → the same, and each cluster's bill, in Prometheus's text format
=======  ===========  ===========================================================================

With a token (``autoslo serve --token-file``), every request but ``GET /health`` needs
``Authorization: Bearer <token>``; without it, 401.

A request AutoSLO refuses (a bad field, a query routed twice, no SLO for it) is answered 400 with
``{"error": "<why>"}``; one whose body would exceed 64 KiB 413, and a chunked one 411 (both
unread, the connection closed); a query that cannot be placed (its cluster lost or never
available, or the service stopping) 503. A connection idle for ``--idle-timeout`` seconds (300) is
closed. A query refused at admission (``--admission``, ``--budget``) is
answered ``{"error", "rejected": <reason>}``: 422 for ``infeasible-deadline``, 429 for
``budget`` (with ``Retry-After`` and ``retry_after_s``: the seconds until the tenant's budget
window ends), 503 for ``capacity``.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hmac
import json
import math
import os
import re
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from autoslo import _core
from autoslo._files import atomic, fsync_dir, remove_unfinished

#: Fields each POST takes: name → (type, required).
_FIELDS: dict[str, dict[str, tuple[type, bool]]] = {
    "/route": {"query_id": (int, True), "template": (int, True), "instance": (int, True), "slo": (float, False), "tenant": (str, False), "class": (str, False)},
    "/complete": {"query_id": (int, True), "timed_out": (bool, False)},
    "/lost": {"cluster_id": (int, True), "why": (str, True)},
}


def _fields(path: str, body: Any) -> dict[str, Any]:
    """The request's fields, checked by name and type (a whole number is a float too: an SLO of 5
    is 5.0)."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    spec = _FIELDS[path]
    unknown = sorted(set(body) - set(spec))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; {path} takes {', '.join(spec)}")
    out: dict[str, Any] = {}
    for name, (kind, required) in spec.items():
        if name not in body or body[name] is None:
            if required:
                raise ValueError(f"missing field `{name}`")
            continue
        v = body[name]
        ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool))
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            v, ok = float(v), True
        if not ok:
            raise ValueError(f"field `{name}` must be {kind.__name__}, got {v!r}")
        if kind is int and v < 0:
            raise ValueError(f"field `{name}` must be ≥ 0, got {v}")
        out[name] = v
    return out


def stats(svc: _core.Service) -> dict[str, Any]:
    """What ``GET /stats`` answers: the service's clock, dollars billed so far, the queries so
    far per tenant × class (violation_rate and latency_mean null until a query ended), and each
    budgeted tenant's budget and estimated spend in the current window."""
    return {"now": svc.now(), "cost": svc.cost(), "totals": svc.totals().to_pylist(), "budgets": svc.budgets()}


def _label(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _sample(name: str, labels: dict[str, object], value: float) -> str:
    inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value!r}" if inner else f"{name} {value!r}"


def metrics(svc: _core.Service) -> str:
    """What ``GET /metrics`` answers, in Prometheus's text exposition format (0.0.4): queries
    routed, running and ended (by outcome: met, late, timed_out, failed, cancelled) per tenant ×
    class, each cluster's billed dollars and state, the dollars attributed to each tenant ×
    class, each budgeted tenant's budget and estimated spend in the window, and log entries
    dropped."""
    lines: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[str]) -> None:
        lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}", *samples])

    totals = svc.totals().to_pylist()
    tc = [({"tenant": t["tenant"], "class": t["class"]}, t) for t in totals]
    family("autoslo_queries_routed_total", "counter", "Queries routed, per tenant and class.", [_sample("autoslo_queries_routed_total", lab, float(t["routed"])) for lab, t in tc])
    family("autoslo_queries_running", "gauge", "Queries routed and not yet ended, per tenant and class.", [_sample("autoslo_queries_running", lab, float(t["running"])) for lab, t in tc])
    outcomes = ("met", "late", "timed_out", "failed", "cancelled", "rejected")
    family(
        "autoslo_queries_ended_total",
        "counter",
        "Queries that ended, per tenant, class and outcome (met: completed within the SLO; rejected: refused at admission).",
        [_sample("autoslo_queries_ended_total", {**lab, "outcome": o}, float(t[o])) for lab, t in tc for o in outcomes],
    )
    clusters = svc.clusters()
    family(
        "autoslo_billed_dollars_total",
        "counter",
        "Dollars billed so far, per cluster (while it runs queries, with the billing minimum).",
        [_sample("autoslo_billed_dollars_total", {"cluster": c["cluster_id"], "workgroup": c["workgroup"], "size": c["size"]}, float(c["cost"])) for c in clusters],
    )
    family(
        "autoslo_attributed_dollars_total",
        "counter",
        "Dollars of the clusters' bills attributed to the queries that ended, per tenant and class (final a billing minimum after a busy period began).",
        [_sample("autoslo_attributed_dollars_total", lab, float(t["cost"])) for lab, t in tc],
    )
    states = ("creating", "available", "lost", "deleted")
    family("autoslo_clusters", "gauge", "Clusters by state.", [_sample("autoslo_clusters", {"state": st}, float(sum(c["state"] == st for c in clusters))) for st in states])
    budgets = svc.budgets()
    family("autoslo_budget_dollars", "gauge", "Each budgeted tenant's budget per window.", [_sample("autoslo_budget_dollars", {"tenant": b["tenant"]}, float(b["budget"])) for b in budgets])
    family(
        "autoslo_budget_spent_dollars",
        "gauge",
        "Estimated dollars admission charged to each budgeted tenant in the current window.",
        [_sample("autoslo_budget_spent_dollars", {"tenant": b["tenant"]}, float(b["spent"])) for b in budgets],
    )
    family("autoslo_log_dropped_total", "counter", "Ended queries dropped from a full log.", [_sample("autoslo_log_dropped_total", {}, float(svc.log_dropped()))])
    return "\n".join(lines) + "\n"


def write_served(svc: _core.Service, directory: str | os.PathLike[str]) -> Path | None:
    """Take the queries that ended since the last take and write them as one Parquet part,
    ``served-<UTC time>-<first query id>.parquet``, in ``directory`` (made if missing), atomically
    (a temporary file, then a rename). Returns the part, or ``None`` when nothing ended. The
    parts are a query log: ``autoslo reservoir add --log DIR/served-*.parquet`` stores them as
    history for tomorrow's tuning. What ended since the last part is lost if the process dies
    first; :class:`ServedLog` journals it."""
    table = svc.take_served()
    if table.num_rows == 0:
        return None
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    return _write_part(out, table)


def _write_part(out: Path, table: pa.Table, journal: list[str] | None = None, tmp_dir: Path | None = None) -> Path:
    """``table`` as the part ``served-<UTC time>-<first query id>.parquet`` in ``out``, written
    atomically (:func:`autoslo._files.atomic`, its temporary file in ``tmp_dir`` if given);
    ``journal`` names the journal files it holds (kept in the part's metadata)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    path = out / f"served-{stamp}-{table['query_id'][0].as_py()}.parquet"
    if journal is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), _JOURNAL_KEY: json.dumps(journal).encode()})
    with atomic(path, tmp_dir) as tmp:
        pq.write_table(table, tmp)
    return path


#: The key of a part's metadata that names the journal files compacted into it.
_JOURNAL_KEY = b"autoslo.journal"
#: A journal file of queries whose cost is final: <run start, ns>-<n>.arrow.
_JOURNAL_NAME = re.compile(r"\d{20}-\d{12}\.arrow")


class ServedLog:
    """The serving log ``autoslo serve --log DIR`` writes: a crash loses no query that ended.

    :meth:`sync` (every second or so) takes the queries whose cost became final and writes them to
    a journal file, ``DIR/.journal/<run>-<n>.arrow``, and rewrites ``DIR/.journal/pending.arrow`` with
    the queries that ended but whose cost is not final yet (their cluster's billing minimum
    still runs). Each file is written whole, synced and renamed into place, so a crash leaves it
    whole or absent. :meth:`compact` (every few minutes, and after the service stopped) writes
    the journal's queries as one Parquet part ``served-<UTC time>-<first query id>.parquet``,
    whose metadata names the journal files it holds, then removes them; the parts are what
    :func:`autoslo.read_table` and the reservoir read. Temporary files are written in the journal,
    and the next opening removes those a crash left half written.

    Opening a directory a crashed run left a journal in compacts that journal first (into
    :attr:`recovered`): the queries it priced with their cost, those still pending with ``cost``
    null (their bill died with the service). Queries still running at the crash had not ended,
    so no log holds them. One process writes a directory at a time: it holds ``DIR/.lock``
    (released when the process ends, however it ends), and a second one gets an error.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.directory / ".lock", "a+")  # noqa: SIM115 - held until close()
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "unknown"
            self._lock.close()
            raise RuntimeError(f"the serving log {self.directory} is being written by another process (pid {holder}): give each service its own --log directory") from None
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(str(os.getpid()))
        self._lock.flush()
        self._journal = self.directory / ".journal"
        self._journal.mkdir(exist_ok=True)
        # A run that died mid-write left its temporary file: only whole files are renamed into
        # place, so one is never data. Every temporary file of a log is in its journal, which
        # only the holder of the lock writes.
        remove_unfinished(self._journal)
        self._unwritten: pa.Table | None = None
        self._compacted: set[str] = set()
        # Journal files are named <run>-<n>.arrow, the run by its start in ns: names never repeat
        # across runs, since a part's metadata names the files it holds.
        self._run = f"{time.time_ns():020d}"
        self._next = 1
        #: The part a crashed run's journal was compacted into on opening, if there was one.
        self.recovered: Path | None = self._recover()

    def _entries(self) -> list[Path]:
        """The journal files not yet in a part (one a part holds but that could not be removed
        is left out)."""
        return sorted(f for f in self._journal.glob("*.arrow") if _JOURNAL_NAME.fullmatch(f.name) and f.name not in self._compacted)

    def _write_journal(self, name: str, table: pa.Table) -> None:
        with atomic(self._journal / name) as tmp, pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)

    def sync(self, svc: _core.Service) -> int:
        """Journal the queries of ``svc`` that ended since the last sync: those whose cost became
        final, and a fresh list of those whose cost is not final yet. Returns the number that
        became final. If the journal cannot be written (a full disk, say), the error is raised
        and the queries taken are kept for the next sync: none is lost while the process lives."""
        table = svc.take_served()
        if self._unwritten is not None:
            table = pa.concat_tables([self._unwritten, table], promote_options="default")
            self._unwritten = None
        if table.num_rows:
            try:
                self._write_journal(f"{self._run}-{self._next:012d}.arrow", table)
            except BaseException:
                self._unwritten = table
                raise
            self._next += 1
        pending = svc.pending_served()
        if pending.num_rows:
            self._write_journal("pending.arrow", pending)
        elif (self._journal / "pending.arrow").exists():
            (self._journal / "pending.arrow").unlink()
            fsync_dir(self._journal)
        return int(table.num_rows)

    def compact(self, with_pending: bool = False) -> Path | None:
        """Write the journaled queries as one Parquet part and remove their journal files;
        ``with_pending`` adds the queries whose cost was not final (``cost`` null: for a journal
        whose service is gone). Returns the part, or ``None`` when the journal held nothing."""
        entries = self._entries()
        tables = [pa.ipc.open_file(pa.memory_map(str(f))).read_all() for f in entries]
        pending = self._journal / "pending.arrow"
        if with_pending and pending.exists():
            taken = {q for t in tables for q in t["query_id"].to_pylist()}
            late = pa.ipc.open_file(pa.memory_map(str(pending))).read_all()
            late = late.filter(pa.array([q not in taken for q in late["query_id"].to_pylist()], pa.bool_()))
            if late.num_rows:
                tables.append(late)
        part = None
        rows = [t for t in tables if t.num_rows]
        if rows:
            part = _write_part(self.directory, pa.concat_tables(rows, promote_options="default"), [f.name for f in entries], tmp_dir=self._journal)
        self._compacted.update(f.name for f in entries)
        for f in entries:
            f.unlink()
            self._compacted.discard(f.name)
        if with_pending and pending.exists():
            pending.unlink()
        fsync_dir(self._journal)
        return part

    def _recover(self) -> Path | None:
        entries = self._entries()
        if not entries and not (self._journal / "pending.arrow").exists():
            return None
        # Journal files an earlier compaction wrote into a part but did not get to remove.
        held: set[str] = set()
        for part in self.directory.glob("served-*.parquet"):
            meta = pq.read_schema(part).metadata or {}
            if _JOURNAL_KEY in meta:
                held.update(json.loads(meta[_JOURNAL_KEY]))
        for f in entries:
            if f.name in held:
                f.unlink()
        return self.compact(with_pending=True)

    def charged(self, window_s: float = 86_400.0, now: float | None = None) -> dict[str, float]:
        """Per tenant, the dollars admission charged to its budget (the ``charged`` column) for
        the queries of this log that arrived in the budget window holding ``now`` (Unix time,
        default the present; windows of ``window_s`` seconds from 1970-01-01 UTC, as the
        service counts them). What a restarted service charges again with
        ``svc.charge_budget(tenant, dollars)``, so a restart does not refill a tenant's budget.
        Queries still running at a crash are in no log, so they are not counted."""
        if not (window_s > 0 and np.isfinite(window_s)):
            raise ValueError(f"a budget window is a finite number of seconds > 0, got {window_s!r}")
        now = time.time() if now is None else now
        start = np.floor(now / window_s) * window_s
        # A query that arrived in the window was written in a part named after the window began.
        since = dt.datetime.fromtimestamp(start, dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        parts = sorted(p for p in self.directory.glob("served-*.parquet") if p.name[len("served-") :].split("-")[0] >= since)
        spent: dict[str, float] = {}
        for part in parts:
            t = pq.read_table(part)
            if "charged" not in t.column_names:
                continue
            arrival = t["arrival"].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False) / 1e6
            window = np.floor(arrival / window_s) * window_s == start
            for tenant, dollars in zip(np.asarray(t["tenant"].to_pylist(), dtype=object)[window], t["charged"].to_numpy(zero_copy_only=False)[window]):
                if dollars > 0:
                    spent[tenant] = spent.get(tenant, 0.0) + float(dollars)
        return spent

    def close(self) -> None:
        """Release the directory (the journal stays: :meth:`compact` first to empty it)."""
        if not self._lock.closed:
            self._lock.close()

    def __enter__(self) -> ServedLog:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def read_token(path: str | os.PathLike[str]) -> str:
    """The bearer token in the file at ``path`` (surrounding whitespace dropped), which must not
    be empty: what ``autoslo serve --token-file`` requires of every request but ``/health``."""
    token = Path(path).read_text().strip()
    if not token:
        raise ValueError(f"the token file {path} is empty: put the bearer token the gateway sends in it")
    if any(c.isspace() for c in token) or not token.isprintable():
        raise ValueError(f"the token in {path} has whitespace or unprintable characters inside it; a bearer token is one printable word")
    return token


#: The largest request body the server reads (a request is a few hundred bytes of JSON). A
#: larger Content-Length is answered 413 and the connection closed, before any byte is read.
MAX_BODY_BYTES = 65_536


def make_server(svc: _core.Service, host: str = "127.0.0.1", port: int = 8080, token: str | None = None, idle_timeout_s: float | None = 300.0) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving: call ``serve_forever``) answering for ``svc``. With
    ``token``, every request but ``GET /health`` must carry ``Authorization: Bearer <token>``;
    one without it, or with another token, is answered 401 (a Prometheus scrape passes it with
    ``authorization: {credentials_file: ...}``). A connection on which nothing arrives for
    ``idle_timeout_s`` seconds (an idle keep-alive one, or a request sent in part) is closed, so
    it does not hold its thread for good (``None``: never)."""
    if idle_timeout_s is not None and not (math.isfinite(idle_timeout_s) and idle_timeout_s > 0):
        raise ValueError(f"idle_timeout_s must be a positive number of seconds or None, got {idle_timeout_s!r}")
    expected = f"Bearer {token}".encode() if token is not None else None

    class Handler(BaseHTTPRequestHandler):
        server_version = "autoslo"
        protocol_version = "HTTP/1.1"  # keep-alive: a gateway reuses its connection
        # A socket timeout: a read that waits longer ends the connection (handle_one_request).
        timeout = idle_timeout_s
        # Without it, a response's header and body writes wait on the client's delayed ACK
        # (Nagle): about 44 ms a request on Linux, measured with benches/serve_http.py.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

        def _answer(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            """Whether the request may proceed; answered 401 if not."""
            if expected is None or self.path == "/health":
                return True
            given = (self.headers.get("Authorization") or "").strip().encode()
            if hmac.compare_digest(given, expected):
                return True
            data = json.dumps({"error": "missing or wrong bearer token: send Authorization: Bearer <the token of --token-file>"}).encode()
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Bearer realm="autoslo"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return False

        def do_GET(self) -> None:
            if not self._authorized():
                return
            if self.path == "/clusters":
                self._answer(200, svc.clusters())
            elif self.path == "/events":
                self._answer(200, svc.events())
            elif self.path == "/health":
                self._answer(200, {"ok": True, "now": svc.now()})
            elif self.path == "/stats":
                self._answer(200, stats(svc))
            elif self.path == "/metrics":
                data = metrics(svc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._answer(404, {"error": f"no {self.path}: GET /clusters, /events, /health, /stats or /metrics"})

        def do_POST(self) -> None:
            # The body is read first, whatever the answer: the connection is kept alive.
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self.close_connection = True
                self._answer(400, {"error": "a POST needs a Content-Length"})
                return
            if self.headers.get("Transfer-Encoding"):
                # A chunked body is not read: left in the stream, it would be taken for the next request.
                self.close_connection = True
                self._answer(411, {"error": "send the body with a Content-Length, not chunked"})
                return
            if length > MAX_BODY_BYTES:
                # Not read: reading would allocate what the header claims, before any check.
                self.close_connection = True
                self._answer(413, {"error": f"a request body is at most {MAX_BODY_BYTES} bytes, got a Content-Length of {length}"})
                return
            raw = self.rfile.read(length)
            if not self._authorized():
                return
            if self.path not in _FIELDS:
                self._answer(404, {"error": f"no {self.path}: POST /route, /complete or /lost"})
                return
            try:
                f = _fields(self.path, json.loads(raw or b"null"))
                if self.path == "/route":
                    where = svc.route(f["query_id"], f["template"], f["instance"], f.get("slo"), tenant=f.get("tenant"), workload_class=f.get("class"))
                    self._answer(200, where)
                elif self.path == "/complete":
                    svc.complete(f["query_id"], f.get("timed_out", False))
                    self._answer(200, {})
                else:
                    svc.lost(f["cluster_id"], f["why"])
                    self._answer(200, {})
            except _core.QueryRejectedError as e:
                # Refused at admission: the same query would be again (422), a budget clears
                # with the next window (429, with Retry-After), capacity may come (503).
                status = {"infeasible-deadline": 422, "budget": 429}.get(e.reason, 503)
                answer: dict[str, Any] = {"error": str(e), "rejected": e.reason}
                retry = {}
                if e.retry_after_s is not None:
                    answer["retry_after_s"] = e.retry_after_s
                    retry["Retry-After"] = str(max(1, math.ceil(e.retry_after_s)))
                self._answer(status, answer, retry)
            except (ValueError, OverflowError) as e:
                self._answer(400, {"error": str(e)})
            except _core.AutoSloCoreError as e:
                unavailable = str(e).startswith(("cannot route the query", "the service is stopped"))
                self._answer(503 if unavailable else 400, {"error": str(e)})

    return ThreadingHTTPServer((host, port), Handler)
