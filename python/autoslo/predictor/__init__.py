"""The Latency Predictor (§4): Stage + Iconq+, trained in PyTorch, served by the Rust core.

Typical use::

    from autoslo import predictor
    p = predictor.load()                       # the bundled default Iconq+ model
    c = p.cluster(16)                          # incremental state of a 16 RPU cluster
    pred, updated = c.add_arrival(1, 42, 1, 0.0)

Training from scratch (what ``autoslo predictor data/train`` do)::

    traces = predictor.generate_traces(out="traces/")
    predictor.train_stage(traces.train, "models/mine/stage.json")
    predictor.train(traces.train, traces.val, "models/mine/stage.json", "models/mine")
    predictor.fit_arrival("models/mine", traces.train, traces.val, traces.test)

On your own executions instead (``autoslo predictor data --from-trace``)::

    traces = predictor.from_traces(["day1.parquet", "day2.parquet"], out="traces/")

A warehouse's query history (``autoslo predictor data --from-history``): each statement's class
and each class's plan features, with a report of what was kept and set aside::

    h = predictor.from_history(["sys_query_history.csv"], rpu=32, out="history/")
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from autoslo import _core
from autoslo._core import ClusterPredictor, Counterfactual, Predictor
from autoslo.bundled import BUNDLED, bundled_model_dir, load
from autoslo.traces import trace_classes
from autoslo.predictor.data import REDBENCH, DataConfig, TraceSet, test_split
from autoslo.predictor.data import from_traces
from autoslo.predictor.history import HistoryError, HistoryImport, ImportReport, from_history
from autoslo.predictor.data import generate as generate_traces
from autoslo.predictor.data import load as load_traces
from autoslo.predictor.stage import isolated_executions, train_stage
from autoslo.predictor.arrival import fit_arrival
from autoslo.predictor.config import VARIANTS, TrainConfig, qerror_summary


__all__ = [
    "BUNDLED",
    "ClusterPredictor",
    "Counterfactual",
    "DataConfig",
    "HistoryError",
    "HistoryImport",
    "ImportReport",
    "REDBENCH",
    "Predictor",
    "TraceSet",
    "TrainConfig",
    "VARIANTS",
    "bundled_model_dir",
    "concurrency_blind",
    "stage_paths",
    "qerror_summary",
    "evaluate",
    "noise_floor",
    "fit_arrival",
    "from_history",
    "from_traces",
    "generate_traces",
    "load",
    "load_traces",
    "print_arrival",
    "train",
    "train_stage",
    "train_variants",
]


def train(*args: Any, **kwargs: Any) -> Any:
    """Train one variant in PyTorch and export it (see :func:`autoslo.predictor.training.train`)."""
    from autoslo.predictor.training import train as _train

    return _train(*args, **kwargs)


def train_variants(traces: TraceSet, out: Path, variants: list[str], base: TrainConfig, layout_bundle: bool) -> dict:
    """What ``autoslo predictor train`` does: Stage (on a history's classes for an imported
    history), then each variant in ``variants`` into ``out`` (``layout_bundle``: one
    subdirectory per variant, as the bundle has them) with its at-arrival correction. Progress
    goes to standard error; returns every step's report."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stage_path = Path(tmp) / "stage.json"
        classes_path = None
        if traces.classes is not None:
            from autoslo.predictor.stage import train_stage_classes, write_classes_json

            classes_path = write_classes_json(traces.classes, traces.plan_schema or "", Path(tmp) / "classes.json")
            stage_report = train_stage_classes(traces.train, traces.classes, stage_path, seed=base.seed)
            print(f"Stage: {stage_report['samples']} isolated runs of the history, leave-class-out Q-error p50 {stage_report['leave_class_out_qerror']['p50']:.2f}", file=sys.stderr)
        else:
            stage_report = train_stage(traces.train, stage_path, seed=base.seed)
            print(f"Stage: {stage_report['samples']} isolated runs, leave-template-out Q-error p50 {stage_report['leave_template_out_qerror']['p50']:.2f}", file=sys.stderr)
        reports = {"stage": stage_report}
        data_meta = {"data": traces.manifest.get("config", {}), "stage": stage_report}
        for v in variants:
            cfg = TrainConfig(**{**base.__dict__, "variant": v})
            target = out / BUNDLED[v] if layout_bundle else out
            reports[v] = train(traces.train, traces.val, stage_path, target, cfg, traces.manifest.get("sha256", {}).get("train", ""), data_meta, classes_path=classes_path)
            print(f"{v}: best validation loss {reports[v]['best_val_loss']:.4f} after {reports[v]['epochs']} epochs → {target}", file=sys.stderr)
            reports[v]["arrival"] = fit_arrival(target, traces.train, traces.val, traces.test, seed=base.seed, threads=base.threads)
            print_arrival(v, reports[v]["arrival"])
    return reports


def print_arrival(name: str, r: dict) -> None:
    """Print one line of an at-arrival correction's report (:func:`fit_arrival`) to standard error."""
    split = "test" if "test" in r else "val"
    raw, cor = r[split]["raw"], r[split]["corrected"]
    print(
        f"{name}: at-arrival Q-error on {split} p50/p90 {raw['overall']['p50']:.2f}/{raw['overall']['p90']:.2f} raw → "
        f"{cor['overall']['p50']:.2f}/{cor['overall']['p90']:.2f} corrected (mean ln residual {raw['mean_ln_residual']:+.3f} → {cor['mean_ln_residual']:+.3f})",
        file=sys.stderr,
    )


def noise_floor() -> dict:
    """Q-error of an in-sample oracle of single runs, from the real measurements.

    Every (template, instance, RPU) measured more than once in isolation (the bundled copy of
    ``isolated_runtimes.yml``) is predicted by the geometric mean of its own runs: the prediction
    with the least squared log error in sample, knowing the query, the size and that nothing else
    runs. What is left is run-to-run noise, which the emulator reproduces (``autoslo calibrate``
    checks its spread): a reference for how low a predictor of single runs can score, not a proof
    of a bound on every percentile. Overall and per RPU (sizes with at least 30 such runs).
    """
    tpl, inst, rpu, y, _ = isolated_executions(None)
    ly = np.log(y.astype(np.float64))
    keys = np.stack([rpu, tpl, inst], axis=1)
    _, group, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    group = group.ravel()
    centre = np.bincount(group, weights=ly) / counts
    repeated = counts[group] >= 2
    lp, ll, size = centre[group][repeated], ly[repeated], rpu[repeated]
    per_rpu = {int(s): qerror_summary(lp[size == s], ll[size == s]) for s in np.unique(size) if (size == s).sum() >= 30}
    return {"overall": qerror_summary(lp, ll), "per_rpu": per_rpu}


def _per_class(lp: np.ndarray, ll: np.ndarray, classes: np.ndarray) -> dict:
    out = {}
    for c in sorted(set(classes.tolist())):
        m = classes == c
        out[str(c)] = {**qerror_summary(lp[m], ll[m]), "mean_ln_residual": float(np.mean(ll[m] - lp[m]))}
    return out


def concurrency_blind(train: pa.Table, trace: pa.Table, r: dict) -> dict:
    """The concurrency-blind baseline on the scored rows of ``r`` (a model's ``predict_trace`` of
    ``trace``): each query predicted by the median latency of its class (``class_id``, or TPC-DS
    template and instance) among the training trace's completed queries, or by their overall
    median for a class the training trace lacks. Q-error overall and per size, and how many rows
    had no class median."""
    key = ["class_id"] if "class_id" in train.column_names else ["template", "instance"]
    done = train.filter(pc.invert(train["censored"]))
    lat = (pc.subtract(done["end"], done["arrival"])).to_numpy(zero_copy_only=False)
    keys = list(zip(*[done[k].to_pylist() for k in key]))
    by: dict[tuple, list[float]] = {}
    for k, v in zip(keys, lat.tolist()):
        by.setdefault(k, []).append(v)
    median = {k: float(np.median(v)) for k, v in by.items()}
    overall = float(np.median(lat))
    row_key = dict(zip(zip(trace["run"].to_pylist() if "run" in trace.column_names else [0] * trace.num_rows, trace["query_id"].to_pylist()), zip(*[trace[k].to_pylist() for k in key])))
    keep = ~r["censored"]
    pred, unseen = [], 0
    for run, q in zip(r["run"][keep].tolist(), r["query_id"][keep].tolist()):
        k = row_key[(run, q)]
        if k not in median:
            unseen += 1
        pred.append(median.get(k, overall))
    lp, ll, size = np.log(np.maximum(pred, 1e-9)), r["ln_label"][keep], r["cluster_size"][keep]
    return {
        "overall": qerror_summary(lp, ll),
        "mean_ln_residual": float(np.mean(ll - lp)) if len(ll) else float("nan"),
        "per_rpu": {int(s): qerror_summary(lp[size == s], ll[size == s]) for s in np.unique(size)},
        "classes_not_in_training": unseen,
    }


def stage_paths(model: str | Path, trace: pa.Table, r: dict) -> dict:
    """Which path each scored query of a history's trace took in a model's Stage: ``measured``
    (its class ran alone on that size in training: the median), ``size_law`` (on other sizes
    only: the nearest carried by the size-scaling law) or ``features`` (a class training never
    saw alone: the trees), with Iconq+'s Q-error on each."""
    runs = trace["run"].to_pylist() if "run" in trace.column_names else [0] * trace.num_rows
    cls = dict(zip(zip(runs, trace["query_id"].to_pylist()), trace["class_id"].to_pylist()))
    keep = ~r["censored"]
    ids = [cls[(a, q)] for a, q in zip(r["run"][keep].tolist(), r["query_id"][keep].tolist())]
    path = np.array(_core.stage_class_paths(str(Path(model) / "stage.json"), ids, r["cluster_size"][keep].tolist()))
    lp, ll = r["ln_pred"][keep], r["ln_label"][keep]
    return {p: qerror_summary(lp[path == p], ll[path == p]) if (path == p).any() else {"n": 0} for p in ("measured", "size_law", "features")}


def evaluate(models: dict[str, str | Path] | None = None, trace: pa.Table | None = None, config: DataConfig | None = None, train: pa.Table | None = None) -> dict:
    """Q-error p50/p90/p95 of each model on a trace, overall and per cluster size; with the mean
    ln residual (ln latency − ln prediction: positive when the model predicts too fast), and per
    workload class when the trace has a ``class`` column (as Redbench-like traces do).

    ``noise_floor`` (see :func:`noise_floor`) is what the best in-sample prediction of single real
    runs scores. Defaults: the four bundled ablation variants, on the held-out test split of the
    generated data (regenerated deterministically from the models' data configuration). Only uncensored queries
    with their full neighbour sets are scored, as in the paper's Figure 7a. With ``train`` (the
    training trace), ``concurrency_blind`` scores the per-class median latency of it on the same
    queries (:func:`concurrency_blind`). On a history's trace (``class_id``), ``noise_floor`` is
    left out (it is the TPC-DS measurements') and ``stage_paths`` says how many queries Stage
    knew from a measured run and how many it estimated from features (:func:`stage_paths`).
    """
    if models is None:
        models = {v: bundled_model_dir(v) for v in BUNDLED if bundled_model_dir(v).is_dir()}
        if not models:
            raise FileNotFoundError("no bundled models found; build them with `make models`")
    if trace is None:
        trace = test_split(config or DataConfig())
    history = "class_id" in trace.column_names and "template" not in trace.column_names
    out: dict = {"queries": int(trace.num_rows), "variants": {}, **({} if history else {"noise_floor": noise_floor()})}
    for name, path in models.items():
        p = load(path)
        r = p.predict_trace(trace)
        if train is not None and "concurrency_blind" not in out:
            out["concurrency_blind"] = concurrency_blind(train, trace, r)
        keep = ~r["censored"]
        lp, ll, size = r["ln_pred"][keep], r["ln_label"][keep], r["cluster_size"][keep]
        stage_q = qerror_summary(np.log(r["stage_s"][keep]), ll)
        classes = trace_classes(trace, r)
        out["variants"][name] = {
            "overall": qerror_summary(lp, ll),
            "mean_ln_residual": float(np.mean(ll - lp)) if len(ll) else float("nan"),
            "per_rpu": {int(s): qerror_summary(lp[size == s], ll[size == s]) for s in np.unique(size)},
            **({"per_class": _per_class(lp, ll, classes[keep])} if classes is not None else {}),
            **({"stage_paths": stage_paths(path, trace, r)} if history else {}),
            "stage_only": stage_q,
            "censored_excluded": int((~keep).sum()),
            "native_vs_tch_max_abs_diff": float(p.verified_max_abs_diff),
            "path": str(path),
        }
    return out
