"""Table 5's target day under the untuned configuration: each model's per-class bias, and the
emulated against the simulated violation rate (docs/predictor.md, docs/tuner.md).

    python scripts/table5_day.py --seed 0 --models python/autoslo/models/iconq_plus /tmp/candidate
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from autoslo import _core
from autoslo.emulation import emulate, simulate
from autoslo.predictor import bundled_model_dir, evaluate
from autoslo.reproduce_tuner import DAY_S, experiment, reproduction_settings
from autoslo.tuner import ExecutionConfig
from autoslo.workloads import window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--day", type=int, default=30, help="day index from 2024-04-01 (default 30: 2024-05-01)")
    ap.add_argument("--kappas", type=float, nargs="+", default=[4.0, 2.0])
    ap.add_argument("--models", nargs="+", default=[str(bundled_model_dir())], help="model directories (the first routes the reference trace)")
    ap.add_argument("--t-idle", dest="t_idle", type=float, default=None, help="the untuned configuration with this T_idle (s) instead of its own")
    args = ap.parse_args()
    models = {m: _core.Predictor(m) for m in args.models}
    exp = experiment(seed=args.seed)
    untuned = json.loads(_core.untuned_config(reproduction_settings().to_json()))
    if args.t_idle is not None:
        untuned["autoscaler"]["t_idle_s"] = args.t_idle
    cfg = ExecutionConfig(untuned)
    print(f"untuned configuration: {untuned['initial_clusters']} RPU, T_idle {untuned['autoscaler']['t_idle_s']:g} s")
    for kappa in args.kappas:
        w = window(exp.generated(kappa), args.day * DAY_S, (args.day + 1) * DAY_S)  # as Table 5 emulates it
        # One reference trace (routed with the first model) so every model is scored on the same executions.
        ref = emulate(w, config=cfg, seed=args.seed, predictor=models[args.models[0]]).trace
        scored = evaluate(dict(zip(args.models, args.models)), ref)["variants"]
        for m, p in models.items():
            v = scored[m]
            bias = ", ".join(f"{c} {q['mean_ln_residual']:+.2f}" for c, q in v["per_class"].items())
            runs = {"emulated": emulate(w, config=cfg, seed=args.seed, predictor=p), "simulated": simulate(w, config=cfg, seed=args.seed, predictor=p)}
            print(f"κ={kappa:g} {Path(m).name}: bias {bias} | Q-error p50/p90 {v['overall']['p50']:.2f}/{v['overall']['p90']:.2f}", flush=True)
            for engine, r in runs.items():
                s = r.summary()
                cls, met = np.asarray(r.trace["class"]), np.asarray(r.trace["met"])
                late = ", ".join(f"{c} {np.mean(~met[cls == c]):.1%}" for c in sorted(set(cls.tolist())))
                spinups = sum(e["event"] == "spinup" for e in r.events.to_pylist())
                print(f"    untuned {engine}: VR {s['violation_rate']:.4f}, ${s['cost']:.0f}, {spinups} spinups; late by class: {late}", flush=True)


if __name__ == "__main__":
    main()
