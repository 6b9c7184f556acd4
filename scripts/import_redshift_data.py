#!/usr/bin/env python3
"""Rebuild the run-time data in ``python/autoslo/data`` from ``../shared/data/redshift``.

The installed package never reads ``../shared``: the measured TPC-DS runtimes, the SLO baselines,
the workgroup lifecycle timings and the real latencies under concurrency it needs are converted here into small CSV files that ship
inside the package (and are embedded into the Rust core), together with ``LICENSE.source``.

Usage: python scripts/import_redshift_data.py [--source ../shared/data/redshift]
"""
from __future__ import annotations

import argparse
import csv
import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "python" / "autoslo" / "data"

READY_STEPS = (
    "create_namespace",
    "wait_for_namespace_available",
    "create_workgroup",
    "wait_for_workgroup_available",
    "attach_tpcds_database",
    "create_external_schemas",
)
TEARDOWN_STEPS = (
    "delete_workgroup",
    "wait_for_workgroup_deleted",
    "delete_namespace",
    "wait_for_namespace_deleted",
)


def isolated_rows(src: Path) -> list[tuple[int, int, int, int, float]]:
    data = yaml.safe_load((src / "isolated_runtimes.yml").read_text())
    rows = []
    for rpu, templates in data.items():
        for template, instances in templates.items():
            for instance, entry in instances.items():
                if entry.get("lower_bounds"):
                    raise SystemExit(f"unexpected censored isolated run at {rpu}/{template}/{instance}")
                for run, runtime in enumerate(entry["exact_runtimes"]):
                    rows.append((int(rpu), int(template), int(instance), run, float(runtime)))
    rows.sort()
    return rows


def slo_rows(src: Path) -> list[tuple[int, float, float, float]]:
    tables = {
        agg: yaml.safe_load((src / f"slo_baseline_rpu16_{agg}.yml").read_text())["slo_dict"]
        for agg in ("p100", "mean", "p50")
    }
    return sorted(
        (int(t), float(tables["p100"][t]), float(tables["mean"][t]), float(tables["p50"][t]))
        for t in tables["p100"]
    )


def lifecycle_rows(src: Path) -> list[tuple[int, int, float, float]]:
    data = yaml.safe_load((src / "workgroup_lifecycle_timings.yml").read_text())
    rows = []
    for key, iterations in data["rpu_results"].items():
        rpu = int(key.removeprefix("rpu_"))
        for it in iterations:
            if not it.get("success"):
                continue
            steps = {s["step"]: s for s in it["data"]["steps"]}
            ready = sum(steps[s]["duration_seconds"] for s in READY_STEPS if s in steps)
            teardown = sum(steps[s]["duration_seconds"] for s in TEARDOWN_STEPS if s in steps)
            rows.append((rpu, int(it["iteration"]), round(ready, 3), round(teardown, 3)))
    rows.sort()
    return rows


def concurrent_rows(src: Path) -> list[tuple[int, int, int, int, float, int, int]]:
    """The real latencies under concurrency, one row per observation.

    ``partial`` marks the reference predictor's sampled partial-neighbour-set observations
    (``query_id`` ``query_N__censor_K``): the same execution cut at a later arrival, a lower
    bound by construction, not a query that ran to a timeout. ``censored`` is
    ``target_is_lower_bound``; a censored row that is not partial is a real one-hour timeout.
    """
    rows = []
    with (src / "concurrent_latencies.csv").open() as f:
        for r in csv.DictReader(f):
            _, template, instance = r["query_text_id"].split("#")
            rows.append((
                int(r["rpu"]), int(template), int(instance), int(r["num_other_concurrent_queries"]),
                round(float(r["y"]), 4), int(r["target_is_lower_bound"] == "True"),
                int("__censor" in r["query_id"]),
            ))
    rows.sort()
    return rows


def render(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = [",".join(header)]
    lines += [",".join(repr(v) if isinstance(v, float) else str(v) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


def build(src: Path) -> dict[str, str]:
    """Return the package data files (name -> text) derived from ``src``."""
    return {
        "isolated_runtimes.csv": render(("rpu", "template", "instance", "run", "runtime_s"), isolated_rows(src)),
        "slo_baseline_rpu16.csv": render(("template", "p100_s", "mean_s", "p50_s"), slo_rows(src)),
        "workgroup_lifecycle.csv": render(("rpu", "iteration", "ready_s", "teardown_s"), lifecycle_rows(src)),
        "concurrent_latencies.csv": render(
            ("rpu", "template", "instance", "overlaps", "latency_s", "censored", "partial"), concurrent_rows(src)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=ROOT.parent / "shared" / "data" / "redshift")
    args = parser.parse_args()
    DEST.mkdir(parents=True, exist_ok=True)
    for name, text in build(args.source).items():
        (DEST / name).write_text(text)
    shutil.copyfile(args.source / "LICENSE.source", DEST / "LICENSE.source")
    print(f"wrote {DEST}")


if __name__ == "__main__":
    main()
