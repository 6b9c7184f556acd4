"""The daily tuning cycle, as task functions and an Airflow DAG.

The run for logical date ``D`` (Airflow's daily data interval ``D`` to ``D + 1``, which runs once
day ``D`` is over) plans day ``D + 1``:

1. :func:`ingest` — day ``D``'s query log (a trace, or the team's own Parquet/CSV query log) into
   the Workload Reservoir, replacing what was stored for ``D``;
2. :func:`tune_day` — forecast ``D + 1`` from the reservoir and tune its execution configuration
   (the Policy Tuner), written to a staging file with its report beside it;
3. :func:`validate` — simulate that configuration on held-out forecasts (seeds the tuner did not
   use) and record its violation rate and cost beside it;
4. :func:`publish` — atomically publish it as ``<publish_dir>/<D+1>.yaml`` and ``current.yaml``,
   where the live control plane picks it up (:func:`published_config`);
5. :func:`check` — fail, with a clear message, when the validated violation rate exceeds τ. The
   configuration is published first: it is still the best the tuner found, and yesterday's plan is
   for another day; the failed task is the alert.

Before the tuning, :func:`record_fidelity` — when day ``D``'s log is a trace of the configuration
published for ``D`` (a live run's), replay it in the Workload Simulator and record how faithfully
the simulator the tuner relies on reproduced that day (:mod:`autoslo.fidelity`); the tuning of
``D + 1`` then holds its simulations to τ minus how much later day ``D`` ran than its plan's
estimate (:func:`latest_gap`, a change: the day lands near τ instead of far below it).

Every step is idempotent per logical date: re-running a day replaces its reservoir partition (no
duplicate rows) and, the tuner being seeded, produces the same configuration.

The functions need only ``autoslo``; :func:`daily_tuning_dag` builds the DAG and needs Airflow 3
(``pip install "autoslo[airflow]"``). Drop a file like ``examples/airflow/autoslo_daily.py`` into
the deployment's DAG folder.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any


from autoslo.fidelity import TRACE_COLUMNS, simulator_fidelity
from autoslo.traces import from_served, is_served_log
from autoslo.ray_backend import RayBackend
from autoslo._files import atomic
from autoslo.tuner import ExecutionConfig, Reservoir, TunerSettings, estimate_gap, forecast, simulate_batch, tune
from autoslo.tuner_cli import read_log

#: Seed offset of the held-out forecasts, disjoint from the tuner's (which use ``seed``).
HOLDOUT_SEED_OFFSET = 7919


class ViolationRateAboveTarget(RuntimeError):
    """The validated violation rate of the configuration exceeds the target τ."""


def _day(value: dt.date | str) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value)[:10])


def _settings(settings: TunerSettings | Mapping[str, Any] | str | os.PathLike[str] | None) -> TunerSettings:
    """Tuner settings from an object, a dict, or a YAML file (any field of TunerSettings)."""
    if settings is None:
        return TunerSettings()
    if isinstance(settings, TunerSettings):
        return settings
    if isinstance(settings, Mapping):
        return TunerSettings.from_mapping(settings)
    return TunerSettings.load(settings)


def ingest(reservoir: str | os.PathLike[str], log: str | os.PathLike[str], day: dt.date | str, *, start_date: dt.date | str | None = None, max_arrivals_per_hour: int = 2000) -> dict[str, Any]:
    """Store day ``day`` of the query log at ``log`` (``{ds}`` in the path is replaced by the
    day, ``YYYY-MM-DD``) in the reservoir, replacing what it held for that day. Rows of other days
    are left out. Arrivals are timestamps, or seconds from midnight of ``start_date`` (default:
    ``day``)."""
    d = _day(day)
    path = Path(str(log).replace("{ds}", d.isoformat()))
    table = read_log(path)
    r = Reservoir(reservoir, max_arrivals_per_hour=max_arrivals_per_hour)
    written = r.append(table, start_date=start_date, replace=True, day=d)
    if not written:
        raise ValueError(f"{path} holds no query of {d}: nothing to ingest (is the log for another day, or its arrivals in another unit?)")
    return {"day": d.isoformat(), "log": str(path), "rows_in_log": table.num_rows, "queries_stored": r.queries([d]), "days_stored": len(r.days())}


def tune_day(
    reservoir: str | os.PathLike[str],
    day: dt.date | str,
    staging: str | os.PathLike[str],
    *,
    settings: TunerSettings | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    history_days: int | None = None,
    kappa: float = 2.0,
    backend: str | RayBackend | None = None,
    ray_address: str | None = None,
    fidelity_dir: str | os.PathLike[str] | None = None,
    publish_dir: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Tune day ``day`` from the reservoir's history and write the configuration to ``staging``
    (atomically). SimulateBatch runs on ``backend`` (``"rayon"`` or ``"ray"``, joining
    ``ray_address`` if given). With ``fidelity_dir`` (where :func:`record_fidelity` writes) and
    ``publish_dir``, and no ``estimate_gap`` or ``tau_simulated`` in the settings, the newest
    day of the last :data:`GAP_MAX_AGE_DAYS` whose fidelity was measured sets the gap
    (:func:`latest_gap`, ``TunerSettings.estimate_gap``, a change): the tuner learns from
    yesterday how optimistic its estimate was. Returns the tuner's report (JSON-serialisable)."""
    if backend == "ray" and ray_address is not None:
        backend = RayBackend(ray_address)
    s = _settings(settings)
    gap_from = None
    if fidelity_dir is not None and publish_dir is not None and s.estimate_gap is None and s.tau_simulated is None:
        gap_from = latest_gap(fidelity_dir, publish_dir, _day(day))
        if gap_from is not None:
            s = replace(s, estimate_gap=gap_from[1])
    result = tune(Reservoir(reservoir, create=False), _day(day), settings=s, history_days=history_days, kappa=kappa, backend=backend)
    Path(staging).parent.mkdir(parents=True, exist_ok=True)
    result.config.save(staging)
    keep = ("tuned", "history_days", "days_used", "history_age_days", "forecast_policy", "validation_violation_rate", "validation_cost", "validation_tenants", "simulations", "backend", "slo_out_of_reach")
    report = {"day": _day(day).isoformat(), "staging": str(staging), **{k: result.report[k] for k in keep if k in result.report}}
    if gap_from is not None:
        report["estimate_gap"] = {"from": gap_from[0], "gap": gap_from[1]}
    with atomic(Path(f"{staging}.report.json")) as tmp:
        tmp.write_text(json.dumps(report, indent=2, default=str))
    return report


#: A fidelity record older than this many days before the day tuned is not used.
GAP_MAX_AGE_DAYS = 7


def latest_gap(fidelity_dir: str | os.PathLike[str], publish_dir: str | os.PathLike[str], day: dt.date | str) -> tuple[str, float] | None:
    """(fidelity record, gap) of the newest day within :data:`GAP_MAX_AGE_DAYS` days before
    ``day`` whose fidelity was measured (:func:`record_fidelity`) under a plan published with an
    estimate: the violation rate observed that day minus the plan's validation violation rate
    (:func:`autoslo.tuner.estimate_gap`)."""
    d = _day(day)
    for back in range(1, GAP_MAX_AGE_DAYS + 1):
        past = (d - dt.timedelta(days=back)).isoformat()
        path = Path(fidelity_dir) / f"{past}.fidelity.json"
        plan = Path(publish_dir) / f"{past}.yaml"
        if path.exists() and plan.exists():
            data = json.loads(path.read_text())
            if "overall" in data:
                try:
                    return str(path), estimate_gap(ExecutionConfig.load(plan), data["overall"]["observed_violation_rate"])
                except ValueError:  # a plan without an estimate (written by hand)
                    continue
    return None


def validate(
    staging: str | os.PathLike[str],
    reservoir: str | os.PathLike[str],
    day: dt.date | str,
    *,
    settings: TunerSettings | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    forecasts: int = 8,
    history_days: int | None = None,
    kappa: float = 2.0,
    backend: str | RayBackend | None = None,
) -> dict[str, Any]:
    """Simulate the staged configuration on ``forecasts`` held-out forecasts of ``day`` (drawn
    with seed ``settings.seed + HOLDOUT_SEED_OFFSET``, so none is one the tuner saw) and record
    the mean violation rate and cost in ``<staging>.validation.json``. A day without history is
    not validated (``validated: False``)."""
    s = _settings(settings)
    d = _day(day)
    config = ExecutionConfig.load(staging)
    r = Reservoir(reservoir, create=False)
    out: dict[str, Any] = {"day": d.isoformat(), "tau": s.tau, "tau_scope": s.tau_scope, "forecasts": 0, "validated": False}
    if r.history(d, history_days):
        f = forecast(r, d, history_days=history_days, kappa=kappa, policy=s.forecast_policy, decay=s.decay, forecasts=forecasts, training_share=0.5, seed=s.seed + HOLDOUT_SEED_OFFSET)
        held_out = f.training + f.validation
        rows = simulate_batch([config], held_out, backend=backend)[0]
        out.update(
            forecasts=len(held_out),
            validated=True,
            violation_rate=sum(o["violation_rate"] for o in rows) / len(rows),
            worst_violation_rate=max(o["violation_rate"] for o in rows),
            cost=sum(o["cost"] for o in rows) / len(rows),
            tenant_violation_rates=_tenant_rates(rows),
        )
    with atomic(Path(f"{staging}.validation.json")) as tmp:
        tmp.write_text(json.dumps(out, indent=2))
    return out


def _tenant_rates(outcomes: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each tenant's violation rate over simulated outcomes: its violations over its queries,
    summed across the forecasts."""
    acc: dict[str, list[int]] = {}
    for o in outcomes:
        for t, (q, v) in o["tenants"].items():
            a = acc.setdefault(t, [0, 0])
            a[0] += q
            a[1] += v
    return {t: v / q for t, (q, v) in sorted(acc.items()) if q}


def publish(staging: str | os.PathLike[str], publish_dir: str | os.PathLike[str], day: dt.date | str) -> dict[str, Any]:
    """Publish the staged configuration as ``<publish_dir>/<day>.yaml`` and, unless a later day
    is already current (a re-run of an old day), as ``current.yaml``; each file is replaced
    atomically (a reader sees the old file or the new one, never a partial one)."""
    d = _day(day)
    config = ExecutionConfig.load(staging)  # validated again on the way out
    target = Path(publish_dir)
    target.mkdir(parents=True, exist_ok=True)
    config.save(target / f"{d.isoformat()}.yaml")  # atomic
    current = target / "current.yaml"
    current_day = (ExecutionConfig.load(current).provenance or {}).get("day") if current.exists() else None
    is_current = current_day is None or str(current_day) <= d.isoformat()
    if is_current:
        config.save(current)
    report = Path(f"{staging}.validation.json")
    if report.exists():
        with atomic(target / f"{d.isoformat()}.validation.json") as tmp:
            shutil.copyfile(report, tmp)
    return {"day": d.isoformat(), "published": str(target / f"{d.isoformat()}.yaml"), "current": str(current) if is_current else None}


def check(validation: Mapping[str, Any], tau: float | None = None) -> dict[str, Any]:
    """Raise :class:`ViolationRateAboveTarget` when the validated violation rate exceeds ``tau``
    (default: the τ the validation recorded), or, when the tuner held every tenant to τ
    (``tau_scope: tenant``), when a tenant's does."""
    tau = float(validation["tau"] if tau is None else tau)
    advice = "it was published as the best found: review the tuner's settings (initial clusters, spinup sizes, tau_simulated) or the capacity limits"
    if validation.get("validated") and float(validation["violation_rate"]) > tau:
        raise ViolationRateAboveTarget(
            f"the configuration for {validation['day']} violates {float(validation['violation_rate']):.1%} of SLOs on {validation['forecasts']} held-out forecasts "
            f"(worst {float(validation['worst_violation_rate']):.1%}), above the target τ = {tau:.1%}; {advice}"
        )
    if validation.get("validated") and validation.get("tau_scope") == "tenant":
        over = {t: r for t, r in (validation.get("tenant_violation_rates") or {}).items() if float(r) > tau}
        if over:
            named = ", ".join(f"{t} {float(r):.1%}" for t, r in over.items())
            raise ViolationRateAboveTarget(
                f"the configuration for {validation['day']} holds every tenant to τ = {tau:.1%}, but on {validation['forecasts']} held-out forecasts a tenant's violation rate exceeds it ({named}); {advice}"
            )
    return dict(validation)


def record_fidelity(log: str | os.PathLike[str], publish_dir: str | os.PathLike[str], day: dt.date | str, out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """When day ``day``'s log (``{ds}`` in the path is the day) is a trace (it has the columns of
    :data:`autoslo.fidelity.TRACE_COLUMNS`, as live runs write) and a configuration was published
    for that day, replay the day in the Workload Simulator under that configuration and write the
    comparison (:func:`autoslo.fidelity.simulator_fidelity`) to ``<out_dir>/<day>.fidelity.json``
    atomically. Otherwise record why not (``skipped``): a plain query log has no latencies to
    compare, and a day before the first publication ran no tuned configuration."""
    d = _day(day)
    path = Path(str(log).replace("{ds}", d.isoformat()))
    out: dict[str, Any] = {"day": d.isoformat(), "log": str(path)}
    config_path = Path(publish_dir) / f"{d.isoformat()}.yaml"
    table = read_log(path)
    if is_served_log(table):  # what `autoslo serve --log` wrote: that day's queries, as a trace
        table = from_served(table, day=d)
    missing = [c for c in TRACE_COLUMNS if c not in table.column_names]
    if missing:
        out["skipped"] = f"the log is not a trace (it lacks {', '.join(missing)})"
    elif not config_path.exists():
        out["skipped"] = f"no configuration was published for {d} ({config_path})"
    else:
        f = simulator_fidelity(table, config_path)
        out.update(config=str(config_path), overall=f["overall"], per_class=f["per_class"], per_tenant=f["per_tenant"], latency_scale=f["latency_scale"])
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    with atomic(target / f"{d.isoformat()}.fidelity.json") as tmp:
        tmp.write_text(json.dumps(out, indent=2))
    return out


def published_config(publish_dir: str | os.PathLike[str], day: dt.date | str | None = None) -> ExecutionConfig:
    """The configuration published for ``day`` (default: the current one)."""
    name = "current.yaml" if day is None else f"{_day(day).isoformat()}.yaml"
    path = Path(publish_dir) / name
    if not path.exists():
        raise FileNotFoundError(f"no configuration published at {path}")
    return ExecutionConfig.load(path)


def daily_tuning_dag(
    reservoir: str | os.PathLike[str],
    log: str,
    publish_dir: str | os.PathLike[str],
    *,
    dag_id: str = "autoslo_daily_tuning",
    staging_dir: str | os.PathLike[str] | None = None,
    settings: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    history_days: int | None = None,
    kappa: float = 2.0,
    backend: str = "rayon",
    ray_address: str | None = None,
    validation_forecasts: int = 8,
    schedule: str | None = "@daily",
    start_date: dt.datetime | None = None,
    **dag_kwargs: Any,
) -> Any:
    """The daily cycle as an Airflow DAG (``ingest >> record_fidelity >> tune >> validate >>
    publish >> check``: the tuning learns the simulator's gap from the day just ingested).

    ``log`` is the query log's path, with ``{ds}`` standing for the logical date (the day ingested);
    the run for logical date ``D`` plans ``D + 1``. ``staging_dir`` (default
    ``<publish_dir>/staging``) holds each day's candidate. ``backend="ray"`` runs SimulateBatch on
    Ray (``ray_address``, or ``RAY_ADDRESS``, or a local cluster). Other keyword arguments go to
    ``DAG`` (e.g. ``default_args``, ``tags``)."""
    try:
        from airflow.sdk import dag, task
        from airflow.sdk.exceptions import AirflowFailException
    except ImportError:
        raise ImportError('the daily tuning DAG needs Airflow 3: pip install "autoslo[airflow]"') from None
    if backend not in ("rayon", "ray"):
        raise ValueError(f"backend must be 'rayon' or 'ray', got {backend!r}")
    settings_arg: Any = dict(settings) if isinstance(settings, Mapping) else (str(settings) if settings is not None else None)
    staging_root = Path(staging_dir) if staging_dir is not None else Path(publish_dir) / "staging"
    start = start_date or dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

    def planned(ds: str) -> str:
        return (dt.date.fromisoformat(ds) + dt.timedelta(days=1)).isoformat()

    @dag(dag_id=dag_id, schedule=schedule, start_date=start, catchup=False, max_active_runs=1, **dag_kwargs)
    def autoslo_daily_tuning() -> None:
        @task
        def ingest_log(ds: str | None = None) -> dict[str, Any]:
            assert ds is not None
            return ingest(reservoir, log, ds)

        @task
        def tune_next_day(ingested: dict[str, Any], fidelity: dict[str, Any]) -> dict[str, Any]:
            day = planned(ingested["day"])
            return tune_day(reservoir, day, staging_root / f"{day}.yaml", settings=settings_arg, history_days=history_days, kappa=kappa, backend=backend, ray_address=ray_address, fidelity_dir=staging_root, publish_dir=publish_dir)

        @task
        def validate_held_out(tuned: dict[str, Any]) -> dict[str, Any]:
            return validate(tuned["staging"], reservoir, tuned["day"], settings=settings_arg, forecasts=validation_forecasts, history_days=history_days, kappa=kappa, backend=backend if ray_address is None else RayBackend(ray_address))

        @task
        def publish_config(tuned: dict[str, Any], validation: dict[str, Any]) -> dict[str, Any]:
            return {**publish(tuned["staging"], publish_dir, tuned["day"]), "validation": validation}

        @task
        def alert_above_target(published: dict[str, Any]) -> dict[str, Any]:
            try:
                return check(published["validation"])
            except ViolationRateAboveTarget as e:
                raise AirflowFailException(str(e)) from e

        @task
        def record_simulator_fidelity(ingested: dict[str, Any]) -> dict[str, Any]:
            # Advisory: a day whose fidelity cannot be measured must not stop the next day's
            # plan, which then tunes without a gap (or with an older one).
            try:
                return record_fidelity(log, publish_dir, ingested["day"], staging_root)
            except Exception as e:  # noqa: BLE001
                return {"day": ingested["day"], "skipped": f"{type(e).__name__}: {e}"}

        # Airflow's TaskFlow passes each task's XComArg where the function takes its value.
        ingested = ingest_log()
        # The day's fidelity is measured first: the tuning of the next day learns its gap from it.
        fidelity = record_simulator_fidelity(ingested)  # type: ignore[arg-type]
        tuned = tune_next_day(ingested, fidelity)  # type: ignore[arg-type]
        alert_above_target(publish_config(tuned, validate_held_out(tuned)))  # type: ignore[arg-type]

    return autoslo_daily_tuning()
