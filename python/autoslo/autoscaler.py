"""Autoscaler settings: which scaling policy changes the cluster set, and its knobs.

The policies (``autoslo._core.SCALING_POLICIES``):

- ``autoslo`` (the product's default): the paper's Autoscaler (§6), the ``combined`` spinup trigger
  (Algorithm 2) and the Spinup Size Selector adding the best cluster (Algorithm 3), plus the
  teardown trigger, with one change: the selector counts a violation when the predicted latency
  × ``DEFAULT_SELECTOR_HEADROOM`` (2) exceeds the SLO (``selector_headroom``), and its branches
  wait for ``DEFAULT_AUTOSLO_MU`` (32) completions instead of the reference 16 (``mu``), both
  chosen on seeds disjoint from those reported. ``add-best`` with the ``combined`` trigger is the
  literal form;
- ``add-best``, ``horizontal``, ``vertical`` with a ``trigger`` of ``combined``, ``observed`` or
  ``queue@N``: the paper's baselines (§8.5, §8.6);
- ``noop``: never changes the cluster set;
- ``snowflake-standard`` / ``snowflake-economy``: Snowflake's multi-cluster warehouse scaling
  policies, as Snowflake documents them;
- ``rais``: a RAIS-like scaler holding a price-performance level (``rais_level``).

``add-best``, ``vertical`` and the ``combined`` trigger read the Query Router's predictions, so
they need ``routing="autoslo"`` (or ``autoslo-latency``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from os import PathLike

from autoslo import _core
from autoslo._checks import core_args
from autoslo.argtypes import size_list
from autoslo.bundled import NEEDS_PREDICTOR, predictor_for
from autoslo.tenancy import Budgets, DeadlineAdmission
from autoslo.tuner import ExecutionConfig


#: The policies that run the Spinup Size Selector, those with a spinup trigger, and Snowflake's.
SELECTOR_POLICIES = ("autoslo", "add-best", "vertical")
TRIGGERED_POLICIES = ("autoslo", "add-best", "horizontal", "vertical")
SNOWFLAKE_POLICIES = ("snowflake-standard", "snowflake-economy")

# The settings whose default is "unset", and the policies that read them: giving one to another
# policy is a mistake (it would be ignored), so it is refused.
_POLICY_SETTINGS: dict[str, tuple[str, ...]] = {
    "mu": SELECTOR_POLICIES,
    "selector_headroom": SELECTOR_POLICIES,
    "selector_counts_backlog": SELECTOR_POLICIES,
    "selector_spinup_on_tie": SELECTOR_POLICIES,
    "tau_trigger": TRIGGERED_POLICIES,
    "warehouse_size": SNOWFLAKE_POLICIES,
}


@dataclass(frozen=True)
class AutoscalerConfig:
    """One scaling policy and its parameters (defaults are the paper's reference values).

    ``tau`` is the target violation rate τ (the selector's τ_target, and τ_trigger unless
    ``tau_trigger`` is given); ``theta`` (θ) the observations before the trigger may fire; ``mu``
    (μ) the completions each selector branch waits for (default ``DEFAULT_MU`` = 16, the
    reference value, except ``DEFAULT_AUTOSLO_MU`` = 32 for ``autoslo``); ``window_s`` the observation window w;
    ``t_idle_s`` and ``t_min_lifetime_s`` the teardown trigger's T_idle and T_min_lifetime;
    ``sizes`` the eligible cluster sizes (RPU); ``spinup_s`` the spinup delay δ the selector assumes
    (default: the engine's); ``force_at`` forces one decision at that time (the paper's Table 3
    protocol); ``teardown=False`` keeps every cluster. ``warehouse_size`` and ``max_concurrency``
    configure the Snowflake policies, ``rais_level`` (``cost``, ``balanced``, ``performance``) the
    RAIS-like one. ``selector_headroom`` (≥ 1): the selector counts a violation when latency ×
    this factor exceeds the SLO; default 1 (Algorithm 3 literally) except for ``autoslo``, which
    uses ``DEFAULT_SELECTOR_HEADROOM`` = 2 (a change, measured beside the literal ``add-best``).
    ``selector_counts_backlog``: whether a selector branch's outcome includes every query still
    running at its end (Algorithm 3's line 27 as listed; the default) or only those issued after
    the new cluster is available (as the paper's Figure 4 draws it; see ``docs/autoscaler.md``).
    ``selector_spinup_on_tie``: whether the largest size tied with do-nothing is spun up (a
    change; default ``False``, Algorithm 3, where a spinup must strictly improve on doing nothing).
    A setting the chosen policy does not read (``mu`` for ``rais``, ``warehouse_size`` for
    ``autoslo``) raises ``ValueError`` instead of being ignored, and a value the core would refuse
    (τ outside [0, 1], a negative time or count, a size that is no base capacity, an unknown
    trigger) raises :class:`AutoSloCoreError` here, at construction, not when a run starts.
    """

    policy: str = "autoslo"
    trigger: str | None = None
    tau: float = 0.1
    tau_trigger: float | None = None
    theta: int = 16
    mu: int | None = None
    window_s: float = 300.0
    t_idle_s: float = 600.0
    t_min_lifetime_s: float = 1200.0
    sizes: Sequence[int] = (4, 8, 16, 32)
    spinup_s: float | None = None
    min_clusters: int = 1
    max_clusters: int = 10
    force_at: float | None = None
    teardown: bool = True
    warehouse_size: int | None = None
    max_concurrency: int = 8
    rais_level: str = "balanced"
    selector_headroom: float | None = None
    selector_counts_backlog: bool | None = None
    selector_spinup_on_tie: bool | None = None

    def __post_init__(self) -> None:
        size_list(self.sizes, "AutoscalerConfig.sizes")
        if self.policy not in _core.SCALING_POLICIES:
            raise ValueError(f"unknown scaling policy {self.policy!r}; known: {', '.join(_core.SCALING_POLICIES)}")
        for name, used_by in _POLICY_SETTINGS.items():
            if getattr(self, name) is not None and self.policy not in used_by:
                raise ValueError(f"`{name}` applies to the {', '.join(used_by)} policies; the {self.policy!r} policy would ignore it")
        # The core checks every value (ranges, sizes, trigger names) as a run would build it.
        _core.validate_autoscaler(self.spec())

    def spec(self) -> dict[str, object]:
        """The settings as the core takes them."""
        d = asdict(self)
        d["sizes"] = [int(s) for s in self.sizes]  # checked whole numbers at construction
        return {k: v for k, v in d.items() if v is not None}



def as_spec(autoscaler: AutoscalerConfig | str | None) -> dict[str, object] | None:
    """``autoscaler`` (a config, a policy name, or ``None``) as the core's spec."""
    if autoscaler is None:
        return None
    if isinstance(autoscaler, str):
        autoscaler = AutoscalerConfig(policy=autoscaler)
    if not isinstance(autoscaler, AutoscalerConfig):
        raise TypeError(f"`autoscaler` must be an autoslo.AutoscalerConfig, a policy name ({', '.join(_core.SCALING_POLICIES)}) or None, got {autoscaler!r}")
    return autoscaler.spec()


def control_plane(
    clusters: Sequence[int] | None = None,
    autoscaler: AutoscalerConfig | str | None = "autoslo",
    *,
    config: ExecutionConfig | str | PathLike[str] | None = None,
    routing: str = "autoslo",
    predictor: _core.Predictor | None = None,
    lifecycle: str = "fixed",
    spinup_s: float = 300.0,
    time_scale: float = 1.0,
    tick_s: float = 10.0,
    seed: int = 0,
    start_s: float = 0.0,
    admission: DeadlineAdmission | None = None,
    budgets: Budgets | None = None,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
) -> _core.ControlPlane:
    """A live :class:`autoslo.ControlPlane` over ready clusters of ``clusters`` RPU: route queries
    with ``cp.route(query_id, template, instance, slo)`` as they arrive and report
    ``cp.complete(query_id)`` as they finish; the autoscaler adds and removes clusters in the
    background (``cp.events()``). ``predictor`` defaults to the bundled Iconq+ when the router or
    the autoscaler needs it. ``time_scale`` > 1 runs the clock faster (demos and tests).
    ``config`` (an execution configuration or its YAML file, as ``autoslo tune`` writes) sets the
    clusters, the routing, the autoscaler and the scheduled spinups instead. Its times are times
    of the day; ``start_s`` says how far into the day the control plane starts (a service started,
    or restarted, at 10:00 passes 36000; default 0, the day's start): the clusters scheduled by
    then start with it, the later ones come at their time (``ExecutionConfig.from_time``). The
    control plane's own clock, in ``cp.now()`` and ``cp.events()``, counts from its start.
    A configuration's ``slo_policy`` sets the SLO of each query routed with its tenant and class:
    ``cp.route(query_id, template, instance, tenant="aster", workload_class="dashboard")``
    (``slo`` is the SLO of a query no rule covers; ``cp.slo_of`` says which a query gets).

    ``admission`` (:class:`autoslo.tenancy.DeadlineAdmission`) and ``budgets``
    (:class:`autoslo.tenancy.Budgets`, by tenant name; a day's window is a UTC day, on Unix time
    at the start plus the control plane's clock) refuse a query before any work, as in the
    emulator and :func:`autoslo.live.serve`: ``cp.route`` raises
    :class:`autoslo.QueryRejectedError` (``reason``: ``infeasible-deadline``, ``capacity`` or
    ``budget``) and the query is not routed. A query routed without a tenant is held to the
    budget of tenant ``default``. ``cp.budgets()`` gives each budgeted tenant's standing;
    ``cp.charge_budget(tenant, dollars)`` restores what a tenant spent before a restart.

    What it served is kept as :func:`autoslo.live.serve` keeps it: ``cp.totals()`` counts the
    queries per tenant × class, ``cp.take_served()`` takes those that ended as a query log with
    each one's share of its cluster's bill (billed from its routing at ``price_per_rpu_hour``, each
    busy period at least ``billing_minimum_s``), and ``cp.cost()`` is the bill so far."""
    plan = served_plan(clusters, autoscaler, config, routing, predictor, start_s, admission=admission, budgets=budgets)
    return _core.ControlPlane(
        plan.clusters,
        predictor=plan.predictor,
        routing=plan.routing,
        autoscaler=plan.autoscaler,
        lifecycle=lifecycle,
        spinup_s=spinup_s,
        time_scale=time_scale,
        tick_s=tick_s,
        seed=seed,
        config=plan.config,
        admission=plan.admission,
        budgets=plan.budgets,
        price_per_rpu_hour=price_per_rpu_hour,
        billing_minimum_s=billing_minimum_s,
    )


@dataclass(frozen=True)
class ServedPlan:
    """What a long-running control plane starts with (:func:`served_plan`)."""

    clusters: list[int]
    routing: str
    autoscaler: dict[str, object] | None
    predictor: _core.Predictor | None
    #: The execution configuration as JSON (its schedule placed in the day), if one was given.
    config: str | None
    #: ``admission`` in the form the extension takes, if one was given.
    admission: tuple[float, int | None] | None = None
    #: ``budgets`` in the form the extension takes, if any were given.
    budgets: tuple[dict[str, float], float] | None = None


def served_plan(
    clusters: Sequence[int] | None,
    autoscaler: AutoscalerConfig | str | None,
    config: ExecutionConfig | str | PathLike[str] | None,
    routing: str,
    predictor: _core.Predictor | None,
    start_s: float,
    *,
    admission: DeadlineAdmission | None = None,
    budgets: Budgets | None = None,
) -> ServedPlan:
    """The clusters, routing, autoscaler and predictor a control plane serves: given one by one,
    or by an execution configuration placed ``start_s`` into the day (``ExecutionConfig.from_time``),
    and its ``admission`` and ``budgets`` (checked to be of their kind). Admission or budgets read
    the predictor's Stage estimates, so with either the predictor is loaded whatever the routing."""
    admission_args = core_args(admission, DeadlineAdmission, "admission")
    budgets_args = core_args(budgets, Budgets, "budgets")
    stage_estimates = admission is not None or budgets is not None
    if config is None and start_s:
        raise ValueError("start_s places an execution configuration's schedule in the day: give it with config=")
    if config is not None:
        if clusters is not None:
            raise ValueError("an execution configuration sets the clusters: give config= without clusters")
        cfg = config if isinstance(config, ExecutionConfig) else ExecutionConfig.load(config)
        cfg = cfg.from_time(start_s)
        return ServedPlan(cfg.initial_clusters, cfg.routing, None, predictor_for(True, predictor), cfg.to_json(), admission_args, budgets_args)
    if clusters is None:
        raise ValueError("give the initial clusters (sizes in RPU) or an execution configuration (config=)")
    return ServedPlan(
        size_list(clusters),
        routing,
        as_spec(autoscaler),
        predictor_for(routing in NEEDS_PREDICTOR or stage_estimates, predictor),
        None,
        admission_args,
        budgets_args,
    )
