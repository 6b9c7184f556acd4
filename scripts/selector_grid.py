"""The `autoslo` Autoscaler's selector settings (μ × selector headroom), measured on the tuning
seeds only, by the rule of docs/autoscaler.md: among the settings that cut Table 3 by ≥ 90 % on
seeds 10-14 and keep all 8 tuning days (seeds 100 and 7; 2024-05-01 and 2024-06-05; κ 4 and 2;
the Policy Tuner's untuned configuration) within τ, the cheapest on those days.

    python scripts/selector_grid.py [--mu 16 32 64 128] [--headroom 1.25 1.5 2] [--json out.json]

Prints one Markdown row per setting (about 3 minutes on two cores).
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

from tqdm import tqdm

from autoslo import reproduce_tuner as T
from autoslo.bundled import predictor_for
from autoslo.emulation import emulate
from autoslo.reproduce import reproduce_spinup_size
from autoslo.tuner import ExecutionConfig

TABLE3_SEEDS = (10, 11, 12, 13, 14)
DAY_SEEDS = (100, 7)


def table3(mu: int, headroom: float, predictor) -> float:
    """Table 3's mean violation-rate change of the selector at (μ, headroom) against `noop`."""
    out = reproduce_spinup_size(list(TABLE3_SEEDS), methods=["noop", "autoslo"], predictor=predictor, selector={"mu": mu, "selector_headroom": headroom})
    return float(out["mean_change_vs_noop"]["autoslo"]["mean_violation_rate_change"])


def tuning_days(settings: list[tuple[int, float]], predictor) -> dict[tuple[int, float], list[tuple[float, float]]]:
    """(violation rate, cost) of the untuned configuration on each tuning day, per setting."""
    out: dict[tuple[int, float], list[tuple[float, float]]] = {s: [] for s in settings}
    for seed in DAY_SEEDS:
        exp = T.TunerExperiment(seed=seed)
        with tempfile.TemporaryDirectory() as tmp:
            world = T.HistoryWorld(exp, Path(tmp))
            for d, k in tqdm(exp.scenarios(), desc=f"tuning days, seed {seed}", unit="day"):
                base, _ = T.tuned_config(world, d, k, 0, predictor)
                wl = world.actual(d, k)
                for mu, h in settings:
                    c = base.as_dict()
                    c["autoscaler"]["selector_headroom"] = h
                    c["autoscaler"]["mu"] = mu
                    s = emulate(wl, config=ExecutionConfig(c), seed=exp.seed, predictor=predictor).summary()
                    out[(mu, h)].append((s["violation_rate"], s["cost"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mu", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--headroom", type=float, nargs="+", default=[1.25, 1.5, 2.0])
    ap.add_argument("--tau", type=float, default=0.1)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args()
    predictor = predictor_for(True, None)
    settings = list(itertools.product(args.mu, args.headroom))
    t3 = {s: table3(*s, predictor) for s in tqdm(settings, desc="Table 3, seeds 10-14", unit="setting")}
    days = tuning_days(settings, predictor)
    rows = []
    for s in settings:
        vr = [v for v, _ in days[s]]
        cost = [c for _, c in days[s]]
        rows.append({"mu": s[0], "headroom": s[1], "table3_change": t3[s], "days_mean_vr": sum(vr) / len(vr), "days_max_vr": max(vr), "days_mean_cost": sum(cost) / len(cost), "days_over_tau": sum(v > args.tau for v in vr)})
    eligible = [r for r in rows if r["table3_change"] <= -0.9 and r["days_over_tau"] == 0]
    chosen = min(eligible, key=lambda r: r["days_mean_cost"]) if eligible else None
    print("| μ | headroom | Table 3, seeds 10–14 | tuning days: mean VR (max) | mean cost | days over τ |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        mark = "**" if r is chosen else ""
        change = f"{r['table3_change'] * 100:+.1f}".replace("-", "−")
        print(f"| {mark}{r['mu']}{mark} | {mark}{r['headroom']:g}{mark} | {change} % | {r['days_mean_vr'] * 100:.1f} % ({r['days_max_vr'] * 100:.1f} %) | ${r['days_mean_cost']:.1f} | {r['days_over_tau']} |")
    print("chosen by the rule:", f"μ = {chosen['mu']}, headroom {chosen['headroom']:g}" if chosen else "none qualifies")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
