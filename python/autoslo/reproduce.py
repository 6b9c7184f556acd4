"""Reproductions of the paper's experiments on the emulator.

``reproduce_router`` is Table 2 (§8.4): BaseWorkload at λ ∈ {0.1, 0.2}, κ ∈ {4, 2}, clusters
[32, 16] or [16, 16], routed by round robin, Stage + cost-optimal and AutoSLO (Iconq+ + cost),
reporting violation rate and cost per scenario and the mean relative change against round robin.
``algorithm1`` is the literal Algorithm 1 (raw Iconq+ at arrival, headroom 1) beside ``autoslo``
(Algorithm 1 with the at-arrival correction and headroom 1.5, both changes) and
``autoslo-latency`` (a further change: the routed query's predicted latency as second key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from autoslo import _core
from autoslo._files import atomic
from autoslo.autoscaler import AutoscalerConfig
from autoslo.emulation import NEEDS_PREDICTOR, emulate, predictor_for
from autoslo.workloads import base_workload

#: (λ, κ, cluster sizes) in the paper's column order.
ROUTER_SCENARIOS: tuple[tuple[float, float, tuple[int, ...]], ...] = (
    (0.1, 4, (32, 16)),
    (0.1, 4, (16, 16)),
    (0.1, 2, (32, 16)),
    (0.1, 2, (16, 16)),
    (0.2, 4, (32, 16)),
    (0.2, 4, (16, 16)),
    (0.2, 2, (32, 16)),
    (0.2, 2, (16, 16)),
)
ROUTER_POLICIES = ("round-robin", "stage-cost", "algorithm1", "autoslo", "autoslo-latency")
#: Algorithm 1 taken literally: the ``autoslo`` router on raw Iconq+ predictions (no at-arrival
#: correction) with SLO headroom 1. ``autoslo`` is Algorithm 1 with two changes, the at-arrival
#: correction and headroom 1.5; this row measures them against the literal form.
LITERAL = "algorithm1"
#: The paper's Table 2 mean changes against round robin (violation rate, cost).
PAPER_TABLE2 = {"stage-cost": (-0.243, -0.193), "autoslo": (-0.478, -0.129)}


def reproduce_router(
    seed: int | Sequence[int] = 0,
    policies: Sequence[str] = ROUTER_POLICIES,
    scenarios: Sequence[tuple[float, float, tuple[int, ...]]] = ROUTER_SCENARIOS,
    queries: int | None = None,
    predictor: _core.Predictor | None = None,
    slo_headroom: float = _core.DEFAULT_SLO_HEADROOM,
) -> dict:
    """Run Table 2 on the emulator.

    ``seed`` is one seed or several: with several, every (scenario, policy) runs once per seed and
    the mean change against round robin is computed from the per-scenario means over seeds (one
    BaseWorkload has 297 queries, so a single seed's violation rate moves in steps of 0.34 %);
    ``per_seed`` then lists each seed's own mean change. ``queries`` truncates each workload (small
    runs for tests); ``slo_headroom`` is the ``autoslo`` router's (see
    :func:`autoslo.emulation.emulate`).
    """
    if "round-robin" not in policies:
        raise ValueError("the comparison is against round-robin: include it in policies")
    unknown = [p for p in policies if p not in _core.ROUTING_POLICIES and p != LITERAL]
    if unknown:
        raise ValueError(f"unknown routing policies {unknown}; known: {[*_core.ROUTING_POLICIES, LITERAL]}")
    seeds = [seed] if isinstance(seed, int) else list(seed)
    if not seeds:
        raise ValueError("give at least one seed")
    if queries is not None and queries < 1:
        raise ValueError(f"queries truncates each workload to that many queries: give at least 1, got {queries}")
    predictor = predictor_for(any(p in NEEDS_PREDICTOR or p == LITERAL for p in policies), predictor)
    raw = predictor.without_arrival_correction() if predictor is not None and LITERAL in policies else None
    rows = []
    for s in seeds:
        for lam, kappa, clusters in scenarios:
            wl: pa.Table = base_workload(lam, seed=s, kappa=kappa)
            if queries is not None:
                wl = wl.slice(0, queries)
            for p in policies:
                if p == LITERAL:
                    r = emulate(wl, list(clusters), seed=s, routing="autoslo", predictor=raw, slo_headroom=1.0)
                else:
                    r = emulate(wl, list(clusters), seed=s, routing=p, predictor=predictor, slo_headroom=slo_headroom)
                rows.append(
                    {
                        "seed": s,
                        "rate": lam,
                        "kappa": kappa,
                        "clusters": list(clusters),
                        "policy": p,
                        "queries": r.queries,
                        "violation_rate": r.violation_rate,
                        "cost": r.cost,
                        "timeouts": r.timeouts,
                    }
                )
    settings = {"slo_headroom": slo_headroom, "arrival_correction": bool(predictor is not None and predictor.has_arrival_correction)}
    out: dict[str, Any] = {"seed": seeds[0] if len(seeds) == 1 else seeds, "queries_per_workload": queries, "settings": settings, "rows": rows}
    out["mean_change_vs_round_robin"] = _mean_changes(rows, policies, scenarios)
    if len(seeds) > 1:
        out["per_seed"] = {s: _mean_changes([r for r in rows if r["seed"] == s], policies, scenarios) for s in seeds}
    return out


def _mean_changes(rows: list[dict], policies: Sequence[str], scenarios: Sequence[tuple[float, float, tuple[int, ...]]]) -> dict:
    """Table 2's summary: each policy against round robin (see :func:`_changes_vs`)."""
    return _changes_vs(rows, policies, scenarios, "round-robin", PAPER_TABLE2, key="policy")


# --- The Autoscaler: Table 3 (Spinup Size Selector) and Table 4 (spinup trigger), §8.5–8.6 ---

#: (λ, κ, initial cluster) in the paper's row order of Tables 3 and 4.
AUTOSCALER_SCENARIOS: tuple[tuple[float, float, tuple[int, ...]], ...] = (
    (0.1, 4, (8,)),
    (0.1, 4, (16,)),
    (0.1, 2, (8,)),
    (0.1, 2, (16,)),
    (0.2, 4, (8,)),
    (0.2, 4, (16,)),
    (0.2, 2, (8,)),
    (0.2, 2, (16,)),
)
#: Eligible sizes of the selector in both tables.
AUTOSCALER_SIZES = (4, 8, 16, 32)
SPINUP_SIZE_METHODS = ("noop", "horizontal", "vertical", "add-best", "autoslo")
TRIGGER_METHODS = ("noop", "queue@32", "observed", "combined", "autoslo", "snowflake-standard", "snowflake-economy", "rais")
#: The paper's mean changes against No-Op (violation rate, cost).
PAPER_TABLE3 = {"horizontal": (-0.427, 0.110), "vertical": (-0.836, 0.091), "add-best": (-0.937, 0.118)}
PAPER_TABLE4 = {"queue@32": (-0.410, 0.351), "observed": (-0.376, 0.433), "combined": (-0.546, 0.641)}


def _spinup_size_config(method: str, force_at: float, selector: Mapping[str, Any] | None = None) -> AutoscalerConfig:
    """Table 3: one forced decision, no trigger, no teardown. ``autoslo`` is ``add-best`` with the
    ``autoslo`` policy's selector (the headroom change, ``DEFAULT_SELECTOR_HEADROOM``, and its μ,
    ``DEFAULT_AUTOSLO_MU``), with
    ``selector``'s settings on top (e.g. ``mu``); ``add-best`` is Algorithm 3 as listed."""
    if method == "autoslo":
        cfg = AutoscalerConfig(policy="add-best", trigger="never", force_at=force_at, teardown=False, sizes=AUTOSCALER_SIZES, selector_headroom=_core.DEFAULT_SELECTOR_HEADROOM, mu=_core.DEFAULT_AUTOSLO_MU)
        return replace(cfg, **(selector or {}))
    return AutoscalerConfig(policy=method, trigger="never", force_at=force_at, teardown=False, sizes=AUTOSCALER_SIZES)


def _trigger_config(method: str, selector: Mapping[str, Any] | None = None) -> AutoscalerConfig:
    """Table 4: the standard selector (add-best) behind each trigger; the scalers users run today.
    ``selector``'s settings go on top of the ``autoslo`` policy's."""
    if method == "noop":
        return AutoscalerConfig(policy="noop", sizes=AUTOSCALER_SIZES)
    if method == "autoslo":
        return replace(AutoscalerConfig(policy=method, sizes=AUTOSCALER_SIZES), **(selector or {}))
    if method in ("snowflake-standard", "snowflake-economy", "rais"):
        return AutoscalerConfig(policy=method, sizes=AUTOSCALER_SIZES)
    return AutoscalerConfig(policy="add-best", trigger=method, sizes=AUTOSCALER_SIZES)


def _autoscaler_table(
    table: str,
    seed: int | Sequence[int],
    methods: Sequence[str],
    scenarios: Sequence[tuple[float, float, tuple[int, ...]]],
    predictor: _core.Predictor | None,
    queries: int | None,
    selector: Mapping[str, Any] | None = None,
) -> dict:
    seeds = [seed] if isinstance(seed, int) else list(seed)
    if not seeds:
        raise ValueError("give at least one seed")
    if queries is not None and queries < 1:
        raise ValueError(f"queries truncates each workload to that many queries: give at least 1, got {queries}")
    known = SPINUP_SIZE_METHODS if table == "spinup-size" else TRIGGER_METHODS
    unknown = [m for m in methods if m not in known]
    if unknown or "noop" not in methods:
        raise ValueError(f"methods must include noop and come from {list(known)}; got unknown {unknown}")
    predictor = predictor_for(True, predictor)
    rows = []
    for s in seeds:
        for lam, kappa, clusters in scenarios:
            wl: pa.Table = base_workload(lam, seed=s, kappa=kappa)
            if queries is not None:
                wl = wl.slice(0, queries)
            n = wl.num_rows
            arrivals = wl["arrival"].to_pylist()
            for m in methods:
                if table == "spinup-size":
                    cfg = _spinup_size_config(m, force_at=arrivals[int(0.2 * n)], selector=selector)
                    first = int(0.8 * n)  # measure the last 20 %
                else:
                    cfg = _trigger_config(m, selector)
                    first = 0
                r = emulate(wl, list(clusters), seed=s, routing="autoslo", predictor=predictor, autoscaler=cfg)
                measured = r.trace.slice(first)
                met = sum(measured["met"].to_pylist())
                spinups = [(e["time"], e["size"], e["reason"]) for e in r.events.to_pylist() if e["event"] == "spinup"]
                rows.append(
                    {
                        "seed": s,
                        "rate": lam,
                        "kappa": kappa,
                        "clusters": list(clusters),
                        "method": m,
                        "queries": measured.num_rows,
                        "violation_rate": 1 - met / measured.num_rows if measured.num_rows else 0.0,
                        "cost": float(sum(measured["cost"].to_pylist())),
                        "spinups": [{"time": t, "size": z, "reason": why} for t, z, why in spinups],
                        "teardowns": sum(1 for e in r.events.to_pylist() if e["event"] == "teardown"),
                    }
                )
    paper = PAPER_TABLE3 if table == "spinup-size" else PAPER_TABLE4
    out: dict = {"table": table, "seed": seeds[0] if len(seeds) == 1 else seeds, "queries_per_workload": queries, "sizes": list(AUTOSCALER_SIZES), "rows": rows}
    out["mean_change_vs_noop"] = _changes_vs(rows, methods, scenarios, "noop", paper)
    if len(seeds) > 1:
        out["per_seed"] = {s: _changes_vs([r for r in rows if r["seed"] == s], methods, scenarios, "noop", paper) for s in seeds}
    return out


def _changes_vs(rows: list[dict], methods: Sequence[str], scenarios: Sequence[tuple[float, float, tuple[int, ...]]], base: str, paper: dict, key: str = "method") -> dict:
    """Mean over scenarios of each method's relative change against ``base`` (per-scenario values
    averaged over the seeds in ``rows`` first); rows name their method in ``key``. A scenario
    where ``base`` has no violations (or no cost) is left out of that mean."""

    def mean(method: str, s: tuple[float, float, tuple[int, ...]], field: str) -> float:
        xs = [r[field] for r in rows if r[key] == method and (r["rate"], r["kappa"], tuple(r["clusters"])) == (s[0], s[1], tuple(s[2]))]
        return sum(xs) / len(xs)

    out = {}
    for m in methods:
        if m == base:
            continue
        dv, dk = [], []
        for s in scenarios:
            bv, bk = mean(base, s, "violation_rate"), mean(base, s, "cost")
            if bv > 0:
                dv.append(mean(m, s, "violation_rate") / bv - 1)
            if bk > 0:
                dk.append(mean(m, s, "cost") / bk - 1)
        out[m] = {
            "mean_violation_rate_change": sum(dv) / len(dv) if dv else float("nan"),
            "mean_cost_change": sum(dk) / len(dk) if dk else float("nan"),
            "mean_violation_rate": sum(mean(m, s, "violation_rate") for s in scenarios) / len(scenarios),
            "scenarios_compared": len(dv),
            "paper": dict(zip(("mean_violation_rate_change", "mean_cost_change"), paper[m])) if m in paper else None,
        }
    return out


def reproduce_spinup_size(
    seed: int | Sequence[int] = 0,
    methods: Sequence[str] = SPINUP_SIZE_METHODS,
    scenarios: Sequence[tuple[float, float, tuple[int, ...]]] = AUTOSCALER_SCENARIOS,
    queries: int | None = None,
    predictor: _core.Predictor | None = None,
    selector: Mapping[str, Any] | None = None,
) -> dict:
    """Table 3 (§8.5) on the emulator: start with one 8 or 16 RPU cluster, run 20 % of
    BaseWorkload, force one scaling decision, let 60 % elapse and measure violation rate and
    attributed cost over the last 20 % of the queries. Methods: ``noop``, ``horizontal`` (a copy
    of the cluster), ``vertical`` (the selector's best single cluster replaces it), ``add-best``
    (the selector's best cluster is added; the paper's method, Algorithm 3 as listed) and
    ``autoslo`` (``add-best`` with the product's selector headroom and μ). All route with ``autoslo``.
    ``selector`` overrides :class:`AutoscalerConfig` fields of the ``autoslo`` method only, e.g.
    ``{"mu": 32, "selector_headroom": 1.5}`` (``scripts/selector_grid.py``)."""
    return _autoscaler_table("spinup-size", seed, methods, scenarios, predictor, queries, selector)


def reproduce_trigger(
    seed: int | Sequence[int] = 0,
    methods: Sequence[str] = TRIGGER_METHODS,
    scenarios: Sequence[tuple[float, float, tuple[int, ...]]] = AUTOSCALER_SCENARIOS,
    queries: int | None = None,
    predictor: _core.Predictor | None = None,
    selector: Mapping[str, Any] | None = None,
) -> dict:
    """Table 4 (§8.6) on the emulator, over the whole workload: the standard Spinup Size Selector
    behind the ``queue@32``, ``observed`` and ``combined`` (Algorithm 2, the paper's) triggers,
    against ``noop``; and Snowflake's ``standard`` and ``economy`` policies and the RAIS-like
    scaler on the same scenarios. All route with ``autoslo``; teardown is on. ``selector``
    overrides :class:`AutoscalerConfig` fields of the ``autoslo`` method only."""
    return _autoscaler_table("trigger", seed, methods, scenarios, predictor, queries, selector)


# --- Everything at once: docs/results ---

#: The reproductions ``reproduce_all`` runs, by file stem.
ALL_TABLES = {"table2-router": "router", "table3-spinup-size": "spinup-size", "table4-trigger": "trigger", "canopy": "canopy", "placement-mercury": "placement"}


def _summary_markdown(title: str, command: str, summary: dict, base: str) -> str:
    lines = [f"## {title}", "", f"`{command}`", "", f"| method | mean violation-rate change vs {base} | mean cost change | paper |", "|---|---|---|---|"]
    for m, s in summary.items():
        paper = s.get("paper")
        ref = f"{paper['mean_violation_rate_change']:+.1%} / {paper['mean_cost_change']:+.1%}" if paper else "—"
        lines.append(f"| {m} | {s['mean_violation_rate_change']:+.1%} | {s['mean_cost_change']:+.1%} | {ref} |")
    return "\n".join(lines) + "\n"


def _figure(path: Path, title: str, summary: dict, base: str) -> None:
    """Each method's mean violation-rate change against its mean cost change (the paper's points
    where it reports them), saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (m, v) in enumerate(summary.items()):
        color = f"C{i}"
        ax.scatter(100 * v["mean_cost_change"], 100 * v["mean_violation_rate_change"], color=color, s=40, label=m)
        if v.get("paper"):
            p = v["paper"]
            ax.scatter(100 * p["mean_cost_change"], 100 * p["mean_violation_rate_change"], color=color, marker="x", s=40)
    ax.axhline(0, color="k", lw=0.6)
    ax.axvline(0, color="k", lw=0.6)
    ax.set_xlabel(f"mean cost change vs {base} (%)")
    ax.set_ylabel(f"mean violation-rate change vs {base} (%)")
    ax.set_title(f"{title}  (o emulator, x paper)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _canopy_markdown(r: dict) -> str:
    return "\n".join(
        [
            "## The multi-tenant analytics case (canopy)",
            "",
            "`autoslo reproduce canopy`: the case's fixture arithmetic, recomputed from its inputs (docs/tenancy.md).",
            "",
            "| figure | value |",
            "|---|---|",
            f"| queries/s | {r['queries_per_s']:.2f} |",
            f"| CPU demand (cores) | {r['cpu_cores']:.1f} |",
            f"| scan (GiB/s) | {r['scan_gib_per_s']:.1f} |",
            f"| unconstrained live memory (GiB) | {r['unconstrained_memory_gib']:.1f} |",
            f"| dashboard p99: global / Aster (s) | {r['global_dashboard_p99_s']} / {r['aster_dashboard_p99_s']} |",
            f"| Jain's index: baseline → selected | {r['jain_baseline']:.4f} → {r['jain_selected']:.5f} |",
            f"| cost per day (rate card) | ${r['cost_per_day']:,.2f} |",
            "",
        ]
    )


def _mercury_markdown(r: dict) -> str:
    lines = [
        "## The load-balancing chapter's Mercury fixture (placement)",
        "",
        "`autoslo reproduce placement`: count-balanced against work-aware placement, and a slow worker (docs/placement.md; the emulated slowdown runs with the command).",
        "",
        "| policy | peak CPU ms/s | workers over budget | p99 ms |",
        "|---|---|---|---|",
    ]
    for run in (r["count_balanced"], r["work_aware"]):
        lines.append(f"| {run['policy']} | {run['peak_cpu_ms_per_s']:.0f} | {run['workers_over_budget']} | {run['p99_response_ms']:.1f} |")
    lines += ["", "| slow worker, policy | p99 ms in the slow window | slow worker's share |", "|---|---|---|"]
    for run in r["slow"]:
        lines.append(f"| {run['policy']} | {run['p99_response_slow_window_ms']:.1f} | {run['slow_worker_share']:.3f} |")
    lines += ["", f"Remapped keys on 10 → 11 workers: modulo {r['remap_modulo_10_to_11']:.3f}, consistent ring {r['remap_ring_10_to_11']:.3f}.", ""]
    return "\n".join(lines)


def reproduce_all(out: str | Path, seeds: Sequence[int] = (0, 1, 2, 3, 4), predictor: _core.Predictor | None = None, figures: bool = True) -> dict[str, dict]:
    """Run Tables 2, 3 and 4 on the emulator over ``seeds``, and the canopy and Mercury fixtures;
    write each one's full result as JSON (``table2-router.json``, …), a figure per table
    (``table2-router.png``, …; matplotlib, unless ``figures=False``) and a summary page
    (``README.md``) into ``out``. Returns the results by file stem."""
    import json

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    predictor = predictor_for(True, predictor)
    seed_list = list(seeds)
    results = {
        "table2-router": reproduce_router(seed=seed_list, predictor=predictor),
        "table3-spinup-size": reproduce_spinup_size(seed=seed_list, predictor=predictor),
        "table4-trigger": reproduce_trigger(seed=seed_list, predictor=predictor),
        "canopy": json.loads(_core.canopy_report()),
        "placement-mercury": json.loads(_core.mercury_report(0)),
    }
    args = " ".join(map(str, seed_list))
    tables = [
        ("table2-router", "Table 2: the Query Router", f"autoslo reproduce router --seed {args}", "mean_change_vs_round_robin", "round robin"),
        ("table3-spinup-size", "Table 3: the Spinup Size Selector (last 20 %)", f"autoslo reproduce spinup-size --seed {args}", "mean_change_vs_noop", "noop"),
        ("table4-trigger", "Table 4: the spinup trigger (whole workload)", f"autoslo reproduce trigger --seed {args}", "mean_change_vs_noop", "noop"),
    ]
    parts = [
        "# Reproductions on the emulator",
        "",
        f"Written by `autoslo reproduce all --seed {args} --out <dir>`: the paper's Tables 2–4, each averaged per scenario over seeds {args}, and the canopy and Mercury fixtures.",
        "The full per-scenario, per-seed rows are in the JSON files the command writes beside this page (not kept in the repository).",
        "The discussion is in `docs/router.md`, `docs/autoscaler.md`, `docs/tenancy.md` and `docs/placement.md`.",
        "The Policy Tuner's Table 5 and Figure 6 take minutes per seed; they run apart (`autoslo reproduce tuner`, `autoslo reproduce end-to-end --plot fig6.png`) and are reported in `docs/tuner.md`.",
        "",
    ]
    for stem, title, command, key, base in tables:
        parts.append(_summary_markdown(title, command, results[stem][key], base))
        if figures:
            _figure(out_dir / f"{stem}.png", title.split(":")[0], results[stem][key], base)
            parts.append(f"![{title}]({stem}.png)\n")
    parts.append(_canopy_markdown(results["canopy"]))
    parts.append(_mercury_markdown(results["placement-mercury"]))
    for stem, r in results.items():
        with atomic(out_dir / f"{stem}.json") as tmp:
            tmp.write_text(json.dumps(r, indent=1, default=str))
    (out_dir / "README.md").write_text("\n".join(parts))
    return results
