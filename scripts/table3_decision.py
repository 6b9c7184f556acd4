"""One scenario of Table 3: the forced decision's options as the Spinup Size Selector saw them
(``result.decisions``), and what each option gives over the measured last 20 % of the workload
when it is spun up at the decision time, in the Workload Simulator and in the emulator
(docs/autoscaler.md).

    python scripts/table3_decision.py --seed 15 --rate 0.1 --kappa 4 --start 16
"""

from __future__ import annotations

import argparse

from autoslo.emulation import emulate, simulate
from autoslo.reproduce import AUTOSCALER_SIZES, SPINUP_SIZE_METHODS, _spinup_size_config
from autoslo.tables import fmt_table
from autoslo.workloads import base_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate", type=float, default=0.1, help="BaseWorkload λ (default 0.1)")
    ap.add_argument("--kappa", type=float, default=4.0)
    ap.add_argument("--start", type=int, default=16, help="the initial cluster's size, RPU (default 16)")
    ap.add_argument("--method", default="autoslo", choices=[m for m in SPINUP_SIZE_METHODS if m not in ("noop", "horizontal")])
    args = ap.parse_args()

    wl = base_workload(args.rate, seed=args.seed, kappa=args.kappa)
    n = wl.num_rows
    at = wl["arrival"].to_pylist()[int(0.2 * n)]
    first = int(0.8 * n)

    def last_20(met: list[bool]) -> float:
        return 1 - sum(met[first:]) / (n - first)

    r = emulate(wl, [args.start], seed=args.seed, routing="autoslo", autoscaler=_spinup_size_config(args.method, force_at=at))
    rows = []
    for d in r.decisions.to_pylist():
        size = d["option_size"]
        schedule = [(at, "spinup", size)] if size else None
        sim = simulate(wl, [args.start], schedule=schedule)
        emu = emulate(wl, [args.start], seed=args.seed, routing="autoslo", schedule=schedule)
        rows.append(
            {
                "option": f"+{size}" if size else "do nothing",
                "chosen": "yes" if d["chosen"] else "",
                "selector VR": d["predicted_violation_rate"],
                "selector cost": d["predicted_cost"],
                "observations": d["observations"],
                "simulated VR, last 20 %": last_20(sim.trace["met"].to_pylist()),
                "emulated VR, last 20 %": last_20(emu.trace["met"].to_pylist()),
            }
        )
    met = r.trace["met"].to_pylist()
    k = int(0.2 * n)
    print(f"seed {args.seed}, λ {args.rate}, κ {args.kappa}, from {args.start} RPU, `{args.method}`; decision at {at:.0f} s over sizes {list(AUTOSCALER_SIZES)}")
    print(f"emulated VR before the decision {1 - sum(met[:k]) / k:.3f}, in the middle 60 % {1 - sum(met[k:first]) / (first - k):.3f}, in the last 20 % {last_20(met):.3f}")
    print(fmt_table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
