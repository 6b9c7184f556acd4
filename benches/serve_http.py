"""Routing latency of the serving control plane (docs/live.md, "Serving production traffic"):
in process (``svc.route`` + ``svc.complete``) and over HTTP on one kept-alive connection
(``POST /route`` + ``POST /complete``), on the local endpoint with the product's router and the
bundled predictor over ``--clusters`` (each a PostgreSQL server here; routing does not touch them).

    python benches/serve_http.py --clusters 8,8,16,16 --decisions 500
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import threading
import time

from autoslo import argtypes
from autoslo.live import LocalEndpoint, serve
from autoslo.serving import make_server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=argtypes.sizes, default=[8, 8, 16, 16])
    ap.add_argument("--decisions", type=int, default=500)
    ap.add_argument("--running", type=int, default=8, help="queries kept running per cluster while timing (default 8)")
    args = ap.parse_args()
    ms = lambda xs: {"p50_ms": round(1e3 * statistics.median(xs), 3), "p90_ms": round(1e3 * statistics.quantiles(xs, n=10)[-1], 3)}  # noqa: E731
    with LocalEndpoint(time_factor=0.005) as ep, serve(args.clusters, None, endpoint=ep.url, name_prefix="bench", tick_s=60) as svc:
        n = len(args.clusters)
        for q in range(args.running * n):  # background load the router sees
            svc.route(10**9 + q, 1 + q % 99, 1, 60.0)
        local = []
        for q in range(args.decisions):
            t = time.perf_counter()
            svc.route(q, 1 + q % 99, 1, 30.0)
            svc.complete(q)
            local.append(time.perf_counter() - t)
        server = make_server(svc, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
        over_http = []
        for q in range(args.decisions, 2 * args.decisions):
            t = time.perf_counter()
            for path, body in (("/route", {"query_id": q, "template": 1 + q % 99, "instance": 1, "slo": 30.0}), ("/complete", {"query_id": q})):
                conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                assert r.status == 200, path
            over_http.append(time.perf_counter() - t)
        server.shutdown()
        for q in range(args.running * n):
            svc.complete(10**9 + q)
    print(json.dumps({"clusters": args.clusters, "running": args.running * n, "route+complete in process": ms(local), "route+complete over HTTP": ms(over_http)}))


if __name__ == "__main__":
    main()
