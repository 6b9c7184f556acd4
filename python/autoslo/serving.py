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
=======  ===========  ===========================================================================

A request AutoSLO refuses (a bad field, a query routed twice, no SLO for it) is answered 400 with
``{"error": "<why>"}``; a query that cannot be placed (its cluster lost or never available, or
the service stopping) 503.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from autoslo import _core

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


def make_server(svc: _core.Service, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving: call ``serve_forever``) answering for ``svc``."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "autoslo"
        protocol_version = "HTTP/1.1"  # keep-alive: a gateway reuses its connection
        # Without it, a response's header and body writes wait on the client's delayed ACK
        # (Nagle): about 44 ms a request on Linux, measured with benches/serve_http.py.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

        def _answer(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/clusters":
                self._answer(200, svc.clusters())
            elif self.path == "/events":
                self._answer(200, svc.events())
            elif self.path == "/health":
                self._answer(200, {"ok": True, "now": svc.now()})
            else:
                self._answer(404, {"error": f"no {self.path}: GET /clusters, /events or /health"})

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
            raw = self.rfile.read(length)
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
            except (ValueError, OverflowError) as e:
                self._answer(400, {"error": str(e)})
            except _core.AutoSloCoreError as e:
                unavailable = str(e).startswith(("cannot route the query", "the service is stopped"))
                self._answer(503 if unavailable else 400, {"error": str(e)})

    return ThreadingHTTPServer((host, port), Handler)
