"""Train Stage (§4.1): the concurrency-unaware estimate, on isolated executions only (§8.3.2).

Training data: the measured isolated runs of the bundled Redshift catalog, plus every trace query
that ran alone (no other query overlapped it on its cluster). The model is a gradient-boosted tree
ensemble (xgboost) over the template's plan features, the instance and the size, predicting
ln(runtime); it is exported to ``stage.json`` (portable trees + the measured-runtime cache) and
evaluated by the Rust core, which is checked against xgboost here on every export.
"""

from __future__ import annotations

import csv
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from autoslo import _core

FORMAT = "autoslo-stage"
FORMAT_VERSION = 1
FEATURE_VERSION = 1


def _data_csv(name: str) -> list[dict[str, str]]:
    with resources.files("autoslo").joinpath("data", name).open() as f:
        return list(csv.DictReader(f))


def plan_feature_table() -> tuple[list[str], dict[int, list[float]]]:
    """(feature names, template → plan features) from the bundled table."""
    rows = _data_csv("plan_features.csv")
    names = [k for k in rows[0] if k != "template"]
    return names, {int(r["template"]): [float(r[k]) for k in names] for r in rows}


def stage_inputs(template: np.ndarray, instance: np.ndarray, rpu: np.ndarray) -> np.ndarray:
    """Tree inputs, in the order `Stage::inputs` builds them in Rust."""
    _, plan = plan_feature_table()
    p = np.array([plan[int(t)] for t in template], dtype=np.float32)
    extra = np.stack([instance, rpu, np.log2(rpu)], axis=1).astype(np.float32)
    return np.concatenate([p, extra], axis=1)


def alone(trace: pa.Table) -> np.ndarray:
    """Rows of a trace that ran alone and finished: everything earlier on their cluster (in their
    run) ended before they arrived, and the next arrival came after they ended."""
    d = {c: trace[c].to_numpy(zero_copy_only=False) for c in ("arrival", "end", "censored", "cluster_id")}
    run = trace["run"].to_numpy() if "run" in trace.column_names else np.zeros(trace.num_rows, dtype=np.int64)
    order = np.lexsort((d["arrival"], d["cluster_id"], run))
    key = np.stack([run, d["cluster_id"]], 1)[order]
    a, e = d["arrival"][order], d["end"][order]
    cens = d["censored"][order]
    n = len(order)
    out = []
    prev_end = -math.inf
    for k in range(n):
        if k > 0 and not (key[k] == key[k - 1]).all():
            prev_end = -math.inf
        same_next = k + 1 < n and (key[k] == key[k + 1]).all()
        if prev_end <= a[k] and (not same_next or a[k + 1] >= e[k]) and not cens[k]:
            out.append(order[k])
        prev_end = max(prev_end, e[k])
    return np.array(out, dtype=np.int64)


def isolated_executions(trace: pa.Table | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(template, instance, rpu, runtime s, is_real) of measured runs and of trace queries that ran alone."""
    cat = _data_csv("isolated_runtimes.csv")
    t = [int(r["template"]) for r in cat]
    i = [int(r["instance"]) for r in cat]
    s = [int(r["rpu"]) for r in cat]
    y = [float(r["runtime_s"]) for r in cat]
    real = [True] * len(cat)
    if trace is not None and trace.num_rows:
        rows = alone(trace)
        d = {c: trace[c].to_numpy(zero_copy_only=False) for c in ("template", "instance", "cluster_size", "arrival", "end")}
        t += d["template"][rows].astype(int).tolist()
        i += d["instance"][rows].astype(int).tolist()
        s += d["cluster_size"][rows].astype(int).tolist()
        y += (d["end"][rows] - d["arrival"][rows]).astype(float).tolist()
        real += [False] * len(rows)
    return np.array(t), np.array(i), np.array(s), np.array(y), np.array(real)


def export_booster(booster: Any) -> tuple[float, list[dict]]:
    """An xgboost booster as (base score, trees) in the portable JSON the Rust core walks."""
    cfg = json.loads(booster.save_config())
    base = float(str(cfg["learner"]["learner_model_param"]["base_score"]).strip("[]"))
    trees = []
    for dump in booster.get_dump(dump_format="json"):
        nodes: dict[int, dict] = {}

        def walk(n: dict) -> None:
            nodes[n["nodeid"]] = n
            for c in n.get("children", []):
                walk(c)

        walk(json.loads(dump))
        ids = sorted(nodes)
        pos = {nid: k for k, nid in enumerate(ids)}
        tree: dict[str, list] = {k: [] for k in ("split", "threshold", "left", "right", "default_left", "value")}
        for nid in ids:
            n = nodes[nid]
            if "leaf" in n:
                tree["split"].append(-1)
                tree["threshold"].append(0.0)
                tree["left"].append(0)
                tree["right"].append(0)
                tree["default_left"].append(False)
                tree["value"].append(float(n["leaf"]))
            else:
                tree["split"].append(int(str(n["split"]).lstrip("f")))
                tree["threshold"].append(float(n["split_condition"]))
                tree["left"].append(pos[n["yes"]])
                tree["right"].append(pos[n["no"]])
                tree["default_left"].append(n["missing"] == n["yes"])
                tree["value"].append(0.0)
        trees.append(tree)
    return base, trees


def _export_stage(booster: Any, x: np.ndarray, plan_names: list[str], caches: dict[str, list], out: str | Path, rust_estimates: Callable[[str], list[float]]) -> float:
    """Write ``stage.json`` (the booster's trees and ``caches``) to ``out``, read it back through
    the Rust core (``rust_estimates``: its tree estimates of the rows of ``x``, in seconds) and
    return the largest |Rust − xgboost| in ln seconds; an error if it exceeds 1e-4."""
    import xgboost as xgb

    base, trees = export_booster(booster)
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "feature_version": FEATURE_VERSION,
        "features": plan_names + ["instance", "rpu", "log2_rpu"],
        "base_score": base,
        "trees": trees,
        **caches,
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, separators=(",", ":")))
    diff = float(np.max(np.abs(np.log(rust_estimates(str(out))) - booster.predict(xgb.DMatrix(x)))))
    if diff > 1e-4:
        raise RuntimeError(f"exported Stage disagrees with xgboost by {diff:.2e} in ln seconds")
    return diff


def train_stage(trace: pa.Table | None, out: str | Path, seed: int = 0, n_estimators: int = 150, max_depth: int = 4) -> dict:
    """Fit Stage on isolated executions, write ``stage.json`` to `out`, check Rust against xgboost.

    Returns a report: sample counts, leave-template-out Q-error of the tree model, and the largest
    |Rust − xgboost| difference in ln seconds.
    """
    import xgboost as xgb

    t, i, s, y, real = isolated_executions(trace)
    x = stage_inputs(t, i, s)
    ly = np.log(y)
    params = {"max_depth": max_depth, "eta": 0.08, "subsample": 0.8, "seed": seed, "nthread": 2, "objective": "reg:squarederror"}

    def fit(mask: np.ndarray) -> Any:
        return xgb.train(params, xgb.DMatrix(x[mask], label=ly[mask]), num_boost_round=n_estimators)

    # Leave-template-out error on the real measurements: how well it does on templates it has never seen.
    templates = np.unique(t)
    qerr = []
    for f in range(5):
        held = np.isin(t, templates[templates % 5 == f])
        test = held & real
        if test.any():
            m = fit(~held)
            qerr.append(np.exp(np.abs(m.predict(xgb.DMatrix(x[test])) - ly[test])))
    q = np.concatenate(qerr)
    booster = fit(np.ones(len(ly), dtype=bool))
    names, _ = plan_feature_table()
    cache: dict[tuple[int, int, int], list[float]] = {}
    for tt, ii, ss, yy, rr in zip(t, i, s, y, real):
        if rr:
            cache.setdefault((int(tt), int(ii), int(ss)), []).append(float(yy))
    caches = {"cache": [[k[0], k[1], k[2], float(np.mean(v)), len(v)] for k, v in sorted(cache.items())]}
    diff = _export_stage(booster, x, names, caches, out, lambda path: _core.stage_estimates(path, t.tolist(), i.tolist(), s.tolist(), use_cache=False))
    return {
        "samples": int(len(y)),
        "measured_runs": int(real.sum()),
        "trace_isolated_runs": int((~real).sum()),
        "trees": n_estimators,
        "cache_entries": len(cache),
        "leave_template_out_qerror": {"p50": float(np.quantile(q, 0.5)), "p90": float(np.quantile(q, 0.9))},
        "max_abs_diff_rust_vs_xgboost": diff,
    }


#: Isolated executions a history must hold for Stage to learn from it.
MIN_ISOLATED = 20


def class_features(classes: pa.Table) -> dict[int, np.ndarray]:
    """class id → its 34 plan features (an imported history's ``classes``)."""
    f = np.asarray(classes["features"].combine_chunks().flatten().to_numpy(zero_copy_only=False), np.float32).reshape(classes.num_rows, -1)
    return {int(c): f[k] for k, c in enumerate(classes["class_id"].to_pylist())}


def write_classes_json(classes: pa.Table, plan_schema: str, out: str | Path) -> Path:
    """``classes.json``: each class's plan features under the history's schema (the Rust core's
    `ClassFeatures`)."""
    feats = class_features(classes)
    doc = {"format": "autoslo-classes", "format_version": 1, "schema": json.loads(plan_schema), "classes": [[c, [float(x) for x in v]] for c, v in feats.items()]}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, separators=(",", ":")))
    return out


def class_size_slope(medians: dict[tuple[int, int], float]) -> float | None:
    """The size-scaling law of a history's classes: the median, over the classes measured alone
    on several sizes, of the least-squares slope of ln runtime on ln size (clamped to [−2, 1]);
    ``None`` when no class was measured on two sizes."""
    by: dict[int, list[tuple[float, float]]] = {}
    for (c, s), m in medians.items():
        by.setdefault(c, []).append((math.log(s), math.log(m)))
    slopes = []
    for pts in by.values():
        if len({x for x, _ in pts}) >= 2:
            x, y = np.array(pts).T
            slopes.append(float(np.polyfit(x, y, 1)[0]))
    return float(np.clip(np.median(slopes), -2.0, 1.0)) if slopes else None


def train_stage_classes(trace: pa.Table, classes: pa.Table, out: str | Path, seed: int = 0, n_estimators: int = 150, max_depth: int = 4) -> dict:
    """Stage for a history's classes: trees over each class's plan features and the size, fitted on
    the training trace's executions that ran alone (no TPC-DS measurements: another warehouse),
    and a cache of each (class, size)'s median isolated runtime. Writes ``stage.json``; checks Rust
    against xgboost. The report gives the leave-class-out Q-error of the trees (5 folds of classes)."""
    import xgboost as xgb

    rows = alone(trace)
    if rows.size < MIN_ISOLATED:
        raise ValueError(
            f"Stage learns from executions that ran alone on their workgroup: the training part has {rows.size}, "
            f"it needs at least {MIN_ISOLATED} (a history from quieter hours, or a longer one)"
        )
    feats = class_features(classes)
    cls = trace["class_id"].to_numpy()[rows].astype(np.uint64)
    size = trace["cluster_size"].to_numpy()[rows].astype(np.int64)
    y = (trace["end"].to_numpy() - trace["arrival"].to_numpy())[rows]
    keep = y > 0
    cls, size, y = cls[keep], size[keep], y[keep]
    plan = np.stack([feats[int(c)] for c in cls.tolist()])
    x = np.concatenate([plan, np.stack([np.zeros(len(y)), size, np.log2(size)], 1)], 1).astype(np.float32)
    ly = np.log(y)
    params = {"max_depth": max_depth, "eta": 0.08, "subsample": 0.8, "seed": seed, "nthread": 2, "objective": "reg:squarederror"}

    def fit(mask: np.ndarray) -> Any:
        return xgb.train(params, xgb.DMatrix(x[mask], label=ly[mask]), num_boost_round=n_estimators)

    fold = (cls % np.uint64(5)).astype(np.int64)
    qerr = []
    for f in range(5):
        held = fold == f
        if held.any() and (~held).any():
            qerr.append(np.exp(np.abs(fit(~held).predict(xgb.DMatrix(x[held])) - ly[held])))
    booster = fit(np.ones(len(ly), dtype=bool))
    cache: dict[tuple[int, int], list[float]] = {}
    for c, s, v in zip(cls.tolist(), size.tolist(), y.tolist()):
        cache.setdefault((int(c), int(s)), []).append(float(v))
    medians = {k: float(np.median(v)) for k, v in cache.items()}
    slope = class_size_slope(medians)
    caches: dict[str, Any] = {"cache": [], "class_cache": [[k[0], k[1], medians[k], len(v)] for k, v in sorted(cache.items())]}
    if slope is not None:
        caches["class_size_slope"] = slope
    names = [f"plan_{k}" for k in range(plan.shape[1])]
    diff = _export_stage(booster, x, names, caches, out, lambda path: _core.stage_class_estimates(path, cls.tolist(), plan.tolist(), size.tolist(), use_cache=False))
    q = np.concatenate(qerr) if qerr else np.array([np.nan])
    return {
        "samples": int(len(y)),
        "measured_runs": 0,
        "trace_isolated_runs": int(len(y)),
        "trees": n_estimators,
        "cache_entries": len(cache),
        "class_size_slope": slope,
        "leave_class_out_qerror": {"p50": float(np.nanquantile(q, 0.5)), "p90": float(np.nanquantile(q, 0.9))},
        "max_abs_diff_rust_vs_xgboost": diff,
    }
