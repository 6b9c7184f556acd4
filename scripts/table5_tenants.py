"""Table 5 per tenant, with each tenant's SLOs out of reach (docs/tuner.md, "Per tenant"): reads
the JSON of `autoslo reproduce tuner --history 0 1 --json`, one file per seed, and prints one
Markdown row per seed, for each tenant: its mean violation-rate change with 1 day of history
against none / the same counted above its floor (its share of SLOs no eligible size can meet,
mean over the scenarios). With --rates, the table before it: the fleet's mean change, then each
tenant's mean change (its violation rate untuned → tuned, means over the scenarios), and the
scenarios where tuning made that tenant worse.

    for s in 0 1 2 3 4 5 6 8 9; do autoslo reproduce tuner --seed $s --history 0 1 --json > seed$s.json; done
    python scripts/table5_tenants.py seed*.json
    python scripts/table5_tenants.py --rates seed*.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.1f} %".replace("-", "−")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="JSON outputs of `autoslo reproduce tuner --history 0 1 --json`")
    ap.add_argument("--rates", action="store_true", help="each tenant's change with its violation rates untuned → tuned, and the fleet's change")
    args = ap.parse_args()
    runs = sorted((json.loads(p.read_text()) for p in args.runs), key=lambda r: r["seed"])
    tenants = sorted({t for r in runs for t in r["mean_change_vs_no_past_data"]["1"]["per_tenant"]})
    if args.rates:
        rates(runs, tenants)
        return
    print("| seed | " + " | ".join(tenants) + " |")
    print("|---" * (len(tenants) + 1) + "|")
    sums: dict[str, list[float]] = {t: [] for t in tenants}
    for r in runs:
        per = r["mean_change_vs_no_past_data"]["1"]["per_tenant"]
        cells = []
        for t in tenants:
            c = per.get(t)
            if c is None:
                cells.append("—")
                continue
            above = c.get("mean_violation_rate_change_above_floor")
            if above is not None:
                sums[t].append(above)
            cells.append(f"{pct(c['mean_violation_rate_change'])} / {pct(above)} ({c['slo_infeasible_share'] * 100:.1f} %)")
        print(f"| {r['seed']} | " + " | ".join(cells) + " |")
    print("| mean above the floor | " + " | ".join(pct(sum(v) / len(v)) if v else "—" for v in sums.values()) + " |")


def rates(runs: list[dict], tenants: list[str]) -> None:
    print("| seed | fleet | " + " | ".join(tenants) + " |")
    print("|---" * (len(tenants) + 2) + "|")
    fleet: list[float] = []
    sums: dict[str, list[float]] = {t: [] for t in tenants}
    for r in runs:
        one = r["mean_change_vs_no_past_data"]["1"]
        fleet.append(one["mean_violation_rate_change"])
        cells = []
        for t in tenants:
            c = one["per_tenant"].get(t)
            if c is None:
                cells.append("—")
                continue
            sums[t].append(c["mean_violation_rate_change"])
            worse = f", worse in {c['worse_in']}" if c["worse_in"] else ""
            cells.append(f"{pct(c['mean_violation_rate_change'])} ({c['untuned_violation_rate'] * 100:.1f} → {c['tuned_violation_rate'] * 100:.1f} %){worse}")
        print(f"| {r['seed']} | {pct(one['mean_violation_rate_change'])} | " + " | ".join(cells) + " |")
    print(f"| mean | {pct(sum(fleet) / len(fleet))} | " + " | ".join(pct(sum(v) / len(v)) if v else "—" for v in sums.values()) + " |")


if __name__ == "__main__":
    main()
