"""AutoSLO's daily tuning cycle: copy this file into your Airflow deployment's DAG folder.

Each run (logical date D, after day D ends) ingests day D's query log into the Workload
Reservoir, tunes day D + 1's execution configuration, validates it on held-out forecasts,
publishes it to AUTOSLO_PUBLISH_DIR/current.yaml, and fails (the alert) when its validated
violation rate exceeds τ. When day D's log is a trace of the configuration published for D, it
also records how faithfully the Workload Simulator reproduced that day (staging/D.fidelity.json).
Configure it with environment variables (or edit the call below):

  AUTOSLO_RESERVOIR       the reservoir directory (shared by every run)
  AUTOSLO_QUERY_LOG       the query log of a day, `{ds}` standing for YYYY-MM-DD
                          (Parquet or CSV: arrival, template, instance[, tenant, class])
  AUTOSLO_PUBLISH_DIR     where configurations are published (the live control plane reads it)
  AUTOSLO_TUNER_SETTINGS  optional YAML file of TunerSettings fields (tau, initial_clusters, ...)
  AUTOSLO_BACKEND         `rayon` (default: the worker's cores) or `ray`
  RAY_ADDRESS             with `ray`: the Ray cluster to join (default: a local one)
  AUTOSLO_START_DATE      optional first logical date, YYYY-MM-DD
"""

from __future__ import annotations

import datetime as dt
import os

from autoslo.airflow import daily_tuning_dag


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"the AutoSLO daily tuning DAG needs the environment variable {name} (see this file's docstring)")
    return value


_start = os.environ.get("AUTOSLO_START_DATE")

dag = daily_tuning_dag(
    reservoir=_required("AUTOSLO_RESERVOIR"),
    log=_required("AUTOSLO_QUERY_LOG"),
    publish_dir=_required("AUTOSLO_PUBLISH_DIR"),
    settings=os.environ.get("AUTOSLO_TUNER_SETTINGS") or None,
    backend=os.environ.get("AUTOSLO_BACKEND", "rayon"),
    start_date=dt.datetime.fromisoformat(_start).replace(tzinfo=dt.timezone.utc) if _start else None,
    tags=["autoslo"],
)
