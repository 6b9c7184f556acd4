"""The at-arrival correction: fit it on replayed training traces, store it with the model.

Iconq+ learns from complete traces, where a query's after-neighbours are known. When the router
predicts a query at its arrival there are none yet, and the network reads the empty after-set as
"nobody came": on loaded clusters its at-arrival predictions are far too low. The correction is an
xgboost model of ``ln(latency) − ln(Iconq+ at arrival)`` over what is known at arrival (cluster
size, running queries, the prediction, the Stage estimate; ``autoslo._core.ARRIVAL_FEATURES``).

Samples come from :meth:`autoslo.Predictor.arrival_samples`, which replays each trace through the
same incremental state the router uses. The fit is written to ``arrival.json`` in the model
directory and its digest to ``meta.json``; the Rust router then applies it to every routed query.
Timed-out queries enter with their lower bound (the timeout), so the fit is, if anything, low for
overloaded clusters.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from autoslo import _core
from autoslo.predictor.config import qerror_summary
from autoslo.predictor.stage import export_booster

FORMAT = "autoslo-arrival"
FORMAT_VERSION = 1


def _qerrors(ln_pred: np.ndarray, s: dict) -> dict:
    keep = ~s["censored"]
    size = s["cluster_size"][keep]
    lp, ll = ln_pred[keep], s["ln_latency"][keep]
    return {
        "overall": qerror_summary(lp, ll),
        "mean_ln_residual": float(np.mean(ll - lp)) if len(ll) else float("nan"),
        "per_rpu_mean_ln_residual": {int(k): float(np.mean(ll[size == k] - lp[size == k])) for k in np.unique(size)},
    }


def fit_arrival(
    model_dir: str | Path,
    train: pa.Table,
    val: pa.Table,
    test: pa.Table | None = None,
    seed: int = 0,
    n_estimators: int = 200,
    max_depth: int = 4,
    threads: int = 2,
) -> dict:
    """Fit the at-arrival correction of the model in ``model_dir`` and store it there.

    Replays ``train`` (fit), ``val`` and ``test`` (reported) through the model's incremental
    predictor, fits the residual trees, writes ``arrival.json``, records its SHA-256 and the report
    in ``meta.json``, reloads the model through Rust and checks Rust against xgboost. Returns the
    report: samples per split and at-arrival Q-error without and with the correction.
    """
    import xgboost as xgb

    model_dir = Path(model_dir)
    p = _core.Predictor(str(model_dir)).without_arrival_correction()
    splits = {"train": train, "val": val, **({"test": test} if test is not None else {})}
    samples = {k: p.arrival_samples(t) for k, t in splits.items()}
    tr = samples["train"]
    if len(tr["ln_latency"]) < 100:
        raise ValueError(f"only {len(tr['ln_latency'])} training arrivals; the correction needs at least 100")
    params = {"max_depth": max_depth, "eta": 0.05, "subsample": 0.8, "seed": seed, "nthread": threads, "objective": "reg:squarederror"}
    booster = xgb.train(params, xgb.DMatrix(tr["inputs"], label=tr["ln_latency"] - tr["ln_prediction"]), num_boost_round=n_estimators)
    base, trees = export_booster(booster)
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "features": list(_core.ARRIVAL_FEATURES), "base_score": base, "trees": trees}
    path = model_dir / "arrival.json"
    path.write_text(json.dumps(doc, separators=(",", ":")))

    report: dict = {"samples": {k: int(len(s["ln_latency"])) for k, s in samples.items()}, "trees": n_estimators, "max_depth": max_depth}
    for k, s in samples.items():
        if k == "train":
            continue
        corrected = s["ln_prediction"] + booster.predict(xgb.DMatrix(s["inputs"]))
        report[k] = {"raw": _qerrors(s["ln_prediction"], s), "corrected": _qerrors(corrected, s)}

    meta_path = model_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["arrival_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    meta["arrival"] = report
    meta_path.write_text(json.dumps(meta, indent=1))

    # The stored correction, read back by Rust, must match xgboost.
    q = _core.Predictor(str(model_dir))
    probe = samples.get("test", samples["val"])
    n = min(2000, len(probe["ln_latency"]))
    want = booster.predict(xgb.DMatrix(probe["inputs"][:n]))
    raw, st, size, running = np.exp(probe["ln_prediction"][:n]), probe["stage_s"][:n], probe["cluster_size"][:n], probe["running"][:n]
    got = np.array([np.log(q.at_arrival(float(raw[i]), float(st[i]), int(size[i]), int(running[i])) / raw[i]) for i in range(n)])
    diff = float(np.max(np.abs(got - want))) if n else 0.0
    if diff > 1e-3:
        raise RuntimeError(f"exported at-arrival correction disagrees with xgboost by {diff:.2e} in ln seconds")
    report["max_abs_diff_rust_vs_xgboost"] = diff
    return report
