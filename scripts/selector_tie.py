"""The selector's tie change (`selector_spinup_on_tie`) beside the `autoslo` policy without it:
Table 3's and Table 4's mean change against `noop` on the given seeds, and with `--days` the 8
tuning days (seeds 100 and 7; 2024-05-01 and 2024-06-05; κ 4 and 2; the Policy Tuner's untuned
configuration), as `scripts/selector_grid.py` runs them (docs/autoscaler.md).

    python scripts/selector_tie.py --seeds 10 11 12 13 14 --days
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from autoslo import reproduce_tuner as T
from autoslo.bundled import predictor_for
from autoslo.emulation import emulate
from autoslo.reproduce import reproduce_spinup_size, reproduce_trigger
from autoslo.tuner import ExecutionConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[10, 11, 12, 13, 14])
    ap.add_argument("--days", action="store_true", help="also run the 8 tuning days")
    args = ap.parse_args()
    p = predictor_for(True, None)
    for tie in (False, True):
        sel = {"selector_spinup_on_tie": True} if tie else None
        t3 = reproduce_spinup_size(args.seeds, methods=["noop", "autoslo"], predictor=p, selector=sel)["mean_change_vs_noop"]["autoslo"]
        t4 = reproduce_trigger(args.seeds, methods=["noop", "autoslo"], predictor=p, selector=sel)["mean_change_vs_noop"]["autoslo"]
        print(f"tie change {'on ' if tie else 'off'}: Table 3 {t3['mean_violation_rate_change']:+.1%} (cost {t3['mean_cost_change']:+.1%}), Table 4 {t4['mean_violation_rate_change']:+.1%} (cost {t4['mean_cost_change']:+.1%})", flush=True)
    if not args.days:
        return
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for seed in (100, 7):
        exp = T.TunerExperiment(seed=seed)
        with tempfile.TemporaryDirectory() as tmp:
            world = T.HistoryWorld(exp, Path(tmp))
            for d, k in exp.scenarios():
                base, _ = T.tuned_config(world, d, k, 0, p)
                for tie in (False, True):
                    c = base.as_dict()
                    if tie:
                        c["autoscaler"]["selector_spinup_on_tie"] = True
                    s = emulate(world.actual(d, k), config=ExecutionConfig(c), seed=exp.seed, predictor=p).summary()
                    runs[tie].append((s["violation_rate"], s["cost"]))
    for tie, rs in runs.items():
        vr, cost = [v for v, _ in rs], [c for _, c in rs]
        print(f"tuning days, tie change {'on ' if tie else 'off'}: mean VR {sum(vr) / len(vr):.2%} (max {max(vr):.2%}), mean cost ${sum(cost) / len(cost):.2f}, {sum(v > 0.1 for v in vr)} over τ")


if __name__ == "__main__":
    main()
