"""Table 5's configurations on their target days: each emulated, then its trace replayed in the
Workload Simulator under the same configuration (`autoslo.fidelity`), with 1 day of history
against none (docs/tuner.md, "The simulator on the tuning seeds' target days").

    python scripts/table5_fidelity.py --seed 100
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from autoslo import reproduce_tuner as T
from autoslo.bundled import predictor_for
from autoslo.emulation import emulate
from autoslo.fidelity import simulator_fidelity


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--history", type=int, nargs="+", default=[0, 1])
    args = ap.parse_args()
    p = predictor_for(True, None)
    exp = T.TunerExperiment(seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        world = T.HistoryWorld(exp, Path(tmp))
        for d, k in exp.scenarios():
            for h in args.history:
                cfg, _ = T.tuned_config(world, d, k, h, p)
                run = emulate(world.actual(d, k), config=cfg, seed=args.seed, predictor=p)
                f = simulator_fidelity(run.trace, cfg, predictor=p)
                o = f["overall"]
                classes = " | ".join(f"{c['class']} {c['observed_violation_rate']:.3f}/{c['simulated_violation_rate']:.3f} ×{c['latency_scale'] or float('nan'):.2f}" for c in f["per_class"])
                print(f"{T._scenario_key(d, k)}, {h} d: observed {o['observed_violation_rate']:.4f}, simulated {o['simulated_violation_rate']:.4f} ({100 * o['violation_rate_gap']:+.1f} points); per class observed/simulated, latency scale: {classes}", flush=True)


if __name__ == "__main__":
    main()
