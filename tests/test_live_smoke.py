"""The live path in the default tier, small: a workgroup created on the local Redshift Serverless
endpoint (a real PostgreSQL server behind it), a query routed to it and run there as SQL, the
workgroup deleted at the end. `pytest -m live` runs live mode at length (tests/test_live.py)."""

from __future__ import annotations

import subprocess
import time

from autoslo.live import LocalEndpoint, serve


def test_a_workgroup_is_created_routed_to_over_sql_and_deleted() -> None:
    with LocalEndpoint(time_factor=0.005) as ep:
        with serve([8], "noop", routing="round-robin", endpoint=ep.url, name_prefix="smoke", tick_s=0.1, delete_timeout_s=30) as svc:
            assert [(c["workgroup"], c["state"]) for c in svc.clusters()] == [("smoke-0", "available")]
            where = svc.route(1, 3, 1, 60.0)
            assert (where["workgroup"], where["address"]) == ("smoke-0", "127.0.0.1")
            out = subprocess.run(["psql", "-h", where["address"], "-p", str(where["port"]), "-U", "autoslo", "-d", "postgres", "-tAc", "SELECT 40 + 2"], capture_output=True, text=True, timeout=60)
            assert out.stdout.strip() == "42", out.stderr
            assert [c["running"] for c in svc.clusters()] == [1]
            svc.complete(1)
        # Stopping the service deletes its workgroup: the endpoint says so.
        deadline = time.monotonic() + 30
        while any(w[1] != "DELETING" for w in ep.workgroups()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [w[1] for w in ep.workgroups()] in ([], ["DELETING"]), ep.workgroups()
    served = svc.take_served().to_pylist()
    assert [(r["query_id"], r["outcome"], r["met"]) for r in served] == [(1, "completed", True)]
