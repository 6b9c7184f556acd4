"""The Configuration Tuner's strategies side by side on Table 5's world (docs/tuner.md): each tunes
the target day over the default search space (every knob, 72 points) from the same history, then
the chosen configuration runs the day's real workload on the emulator.

    python scripts/tuner_strategies.py --seed 7 --kappas 4 2
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import tempfile
import time
from pathlib import Path

from autoslo.bundled import load
from autoslo.emulation import emulate
from autoslo.reproduce_tuner import START, HistoryWorld, experiment, reproduction_settings
from autoslo.tables import fmt_table
from autoslo.tuner import tune


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=7, help="history seed (default 7, a tuning seed)")
    ap.add_argument("--day", type=int, default=30, help="target day index from 2024-04-01 (default 30: 2024-05-01)")
    ap.add_argument("--kappas", type=float, nargs="+", default=[4.0, 2.0])
    ap.add_argument("--history", type=int, default=1, help="days of history (default 1)")
    ap.add_argument("--strategies", nargs="+", default=["grid", "coordinate-descent", "adaptive-batch"])
    ap.add_argument("--budget", type=int, default=1, help="each strategy's budget (default 1)")
    args = ap.parse_args()
    predictor = load()
    exp = experiment(seed=args.seed, target_days=[args.day], kappas=args.kappas)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        world = HistoryWorld(exp, Path(tmp))
        target = START + dt.timedelta(days=args.day)
        for kappa in args.kappas:
            for strategy in args.strategies:
                settings = dataclasses.replace(reproduction_settings(), space={}, strategy=strategy, budget=args.budget, seed=args.seed)
                t0 = time.perf_counter()
                r = tune(world.reservoir, target, settings=settings, history_days=args.history, kappa=kappa, predictor=predictor)
                seconds = time.perf_counter() - t0
                run = emulate(world.actual(args.day, kappa), config=r.config, seed=args.seed, predictor=predictor).summary()
                knobs = r.config.as_dict().get("autoscaler") or {}
                rows.append(
                    {
                        "κ": kappa,
                        "strategy": strategy,
                        "candidates": len(r.report.get("tuning_candidates", [])),
                        "simulations": r.report["simulations"],
                        "seconds": round(seconds, 1),
                        "chosen": f"{r.config.initial_clusters} T_idle {knobs.get('t_idle_s')} τ_trig {knobs.get('tau_trigger')} θ {knobs.get('theta')} μ {knobs.get('mu')} w {knobs.get('window_s')}",
                        "validation VR": r.report["validation_violation_rate"],
                        "validation $": r.report["validation_cost"],
                        "emulated VR": run["violation_rate"],
                        "emulated $": run["cost"],
                    }
                )
                print(fmt_table(rows[-1:], list(rows[-1])), flush=True)
    print()
    print(fmt_table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
