"""Type annotations of the Rust extension ``autoslo._core`` (bindings of ``autoslo-core``).

Checked against the built extension by ``tests/test_typing.py`` (mypy's stubtest). A default
written ``...`` is one the extension computes: ``timeout_s`` is 3600 s and ``slo_headroom`` is
``DEFAULT_SLO_HEADROOM``."""

from typing import Any, Callable, Mapping, Protocol, Sequence, final

import numpy as np
import pyarrow as pa

__all__: list[str]

class _AutoscalerSpec(Protocol):
    """What has the core's autoscaler settings (``autoslo.AutoscalerConfig``)."""

    def spec(self) -> dict[str, object]: ...

__version__: str
ROUTING_POLICIES: list[str]
ROUTER_SEARCHES: list[str]
#: Inputs of the at-arrival correction (``arrival.json``), in order.
ARRIVAL_FEATURES: list[str]
#: Default SLO headroom of the ``autoslo`` router.
DEFAULT_SLO_HEADROOM: float
#: The ``autoslo`` scaling policy's selector headroom (a change to Algorithm 3; see docs/autoscaler.md).
DEFAULT_SELECTOR_HEADROOM: float
#: μ of every scaling policy but ``autoslo`` (the reference value, 16).
DEFAULT_MU: int
#: μ of the ``autoslo`` policy (32; chosen with the selector headroom, ``docs/autoscaler.md``).
DEFAULT_AUTOSLO_MU: int
BASE_CAPACITIES: str
#: The Configuration Tuner's default cost tolerance (a change to BestWithTarget; see docs/tuner.md).
DEFAULT_COST_TOLERANCE: float
#: The T_idle values (s) of the Configuration Tuner's default search space (a change: see docs/tuner.md).
DEFAULT_T_IDLE_S: list[float]
#: The τ_trigger values of the Configuration Tuner's default search space (a change: see docs/tuner.md).
DEFAULT_TAU_TRIGGER: list[float]
#: Scaling policies selectable by name (see ``autoslo.autoscaler``).
SCALING_POLICIES: list[str]
#: Spinup triggers (``queue@N`` for any N >= 1).
TRIGGERS: list[str]
#: Keys an autoscaler spec may hold.
AUTOSCALER_SETTINGS: list[str]

class AutoSloCoreError(ValueError):
    """Invalid input or action reported by the AutoSLO core."""

def isolated_runtime(template: int, instance: int, rpu: int) -> float:
    """Mean isolated runtime (s) of TPC-DS query ``template``/``instance`` on ``rpu`` RPU (measured or fitted)."""

def catalog_table() -> pa.Table:
    """The measured isolated-runtime catalog, one row per (template, instance, rpu)."""

def catalog_fit_report() -> dict[str, Any]:
    """Q-error of the size-scaling law on the measured points (in sample and leave-one-size-out)."""

def slo_for(
    template: int,
    workload_class: str = "adhoc",
    kappa: float = 2.0,
    baseline: Mapping[int, float] | None = None,
    class_kappa: Mapping[str, float] | None = None,
    class_slo_s: Mapping[str, float] | None = None,
) -> float:
    """The SLO (s) of a template in a workload class: κ × baseline, or the class's own rule."""

def base_workload(
    rate: float,
    seed: int = 0,
    kappa: float = 2.0,
    baseline: Mapping[int, float] | None = None,
    class_kappa: Mapping[str, float] | None = None,
    class_slo_s: Mapping[str, float] | None = None,
) -> pa.Table:
    """The paper's BaseWorkload(λ): 297 shuffled TPC-DS queries with Poisson arrivals at ``rate``/s."""

def phased_workload(x: int, rate_low: float, rate_high: float, seed: int = 0, kappa: float = 2.0) -> pa.Table:
    """BaseWorkload alternating ``x`` queries at ``rate_low`` with 10 at ``rate_high``."""

def redbench_workload(
    days: int = 1,
    seed: int = 0,
    queries_per_day: float = 20000.0,
    tenants: int = 4,
    start_weekday: int = 0,
    kappa: float = 2.0,
    baseline: Mapping[int, float] | None = None,
    class_kappa: Mapping[str, float] | None = None,
    class_slo_s: Mapping[str, float] | None = None,
) -> pa.Table:
    """A Redbench-like multi-day, multi-tenant workload (diurnal/weekly patterns, bursts, scheduled jobs)."""

def validate_workload(
    table: pa.Table,
    kappa: float | None = None,
    baseline: Mapping[int, float] | None = None,
    class_kappa: Mapping[str, float] | None = None,
    class_slo_s: Mapping[str, float] | None = None,
) -> pa.Table:
    """Validate a workload table and return it normalised (SLOs filled from ``kappa`` if absent)."""

def emulate(
    workload: pa.Table,
    clusters: Sequence[int],
    seed: int = 0,
    routing: str = "round-robin",
    kappa: float | None = None,
    timeout_s: float | None = ...,
    lifecycle: str = "fixed",
    spinup_s: float = 300.0,
    teardown_s: float = 200.0,
    cold_start_factor: float = 1.5,
    cold_start_duration_s: float = 300.0,
    noise: bool = True,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    schedule: Sequence[tuple[float, str, int]] | None = None,
    progress: Callable[[int, int], bool | None] | None = None,
    predictor: Predictor | None = None,
    slo_headroom: float = ...,
    autoscaler: Mapping[str, object] | None = None,
    config: str | None = None,
    reservation: tuple[Sequence[str], Sequence[str] | None, Sequence[int], bool] | None = None,
    admission: tuple[float, int | None] | None = None,
    ejection: tuple[int, float, float, float, float, bool] | None = None,
    degradations: Sequence[tuple[int, float, float, float]] | None = None,
    queue: tuple[int, int, float, float, tuple[Sequence[tuple[str, float, float]], tuple[float, float], float, bool] | None, tuple[Sequence[str], float, float, int] | None] | None = None,
    budgets: tuple[Mapping[str, float], float] | None = None,
) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    """Emulate a workload; returns (per-query trace, per-cluster bills, cluster events, the
    scaler's decisions: one row per option compared).
    ``autoscaler`` is a spec with keys from ``AUTOSCALER_SETTINGS``, ``schedule`` fixed actions,
    ``config`` an execution configuration (JSON) carrying both; give at most one of autoscaler
    and config (a schedule and an autoscaler together run side by side)."""

def calibrate(seed: int = 0, seeds: int = 10, isolated_replications: int = 20) -> dict[str, Any]:
    """Compare the emulator with the real Redshift measurements on check seed stream ``seed``
    (``seeds`` seeds pooled): overlap bins, timed-out fraction and share of >= 64 overlaps,
    isolated means, run-to-run noise, and ``passed``. Raises ValueError for the fit's seed stream."""

def calibrate_fit(
    seeds: int = 30,
    random_candidates: int = 500,
    budget: int = 2000,
    search_seed: int = 1,
    progress: Callable[[int, int], bool | None] | None = None,
) -> tuple[str, list[tuple[int, float, int]]]:
    """Fit the emulator's interference parameters on the fit seed stream; returns the parameter
    file text and (rpu, loss, evaluations) per size. ``progress`` returning False interrupts."""

def billed_seconds(intervals: Sequence[tuple[float, float]], minimum_s: float = 60.0) -> float:
    """Billed seconds of busy intervals under the §2 billing timer."""

@final
class BillingTimer:
    """The incremental §2 billing timer of one cluster."""

    def __new__(cls, minimum_s: float = 60.0) -> BillingTimer: ...
    def on_arrival(self, now: float) -> None: ...
    def on_idle(self, now: float) -> None: ...
    def billed_seconds_at(self, now: float) -> float: ...
    def billed_seconds_until_drained(self, drain_at: float) -> float: ...
    def cost_until_drained(
        self, rpu: int, drain_at: float, arrival_at: float | None = None, price_per_rpu_hour: float = 0.375
    ) -> float: ...
    def copy(self) -> BillingTimer: ...

# --- Latency Predictor -------------------------------------------------------------------------

def predictor_dataset(
    trace: pa.Table,
    stage_path: str,
    size_features: bool = True,
    after_chronological: bool = True,
    censored_prob: float = 0.0,
    seed: int = 0,
    keep_timeouts: bool = True,
    classes_path: str | None = None,
) -> dict[str, np.ndarray]:
    """Iconq+ samples of a trace: per-query features, compact pair rows, sample offsets and labels.
    A trace of a history's classes (``class_id``) needs ``classes_path``, their ``classes.json``."""

def stage_estimates(stage_path: str, template: Sequence[int], instance: Sequence[int], rpu: Sequence[int], use_cache: bool = True) -> list[float]:
    """Stage's isolated-runtime estimates (s) from a ``stage.json``."""

def stage_class_estimates(stage_path: str, class_id: Sequence[int], plans: Sequence[Sequence[float]], rpu: Sequence[int], use_cache: bool = True) -> list[float]:
    """Stage's estimates (s) of a history's classes from their plan features (``use_cache=False``:
    the trees alone)."""

def stage_class_paths(stage_path: str, class_id: Sequence[int], rpu: Sequence[int]) -> list[str]:
    """Which path each (class, size) takes in a history model's Stage: ``measured`` (it ran alone
    on that size in training), ``size_law`` (on other sizes only) or ``features`` (the trees)."""

def interaction_feature_names() -> list[str]:
    """Names of the interaction feature vector's components, in order."""

@final
class Counterfactual:
    """The effect of adding a query to a cluster, not yet committed."""

    @property
    def prediction(self) -> float:
        """Predicted latency (s) of the added query."""
    @property
    def updated(self) -> list[tuple[int, float]]:
        """(query id, updated prediction s) of the running queries."""

@final
class ClusterPredictor:
    """Incremental Iconq+ state of one cluster."""

    @property
    def size(self) -> int: ...
    def add_arrival(self, query_id: int, template: int, instance: int, arrival: float) -> tuple[float, list[tuple[int, float]]]:
        """Add an arrival (in time order); returns its prediction and the running queries' updated ones."""
    def counterfactual(self, query_id: int, template: int, instance: int, arrival: float) -> Counterfactual:
        """Predict adding a query without committing it."""
    def commit(self, cf: Counterfactual) -> None:
        """Apply a counterfactual computed from this exact state (else AutoSloCoreError: stale)."""
    def complete(self, query_id: int) -> None:
        """A running query finished."""
    def predictions(self) -> list[tuple[int, float]]:
        """(id, predicted latency s) of the running queries, in arrival order."""
    def copy(self) -> ClusterPredictor:
        """An independent copy (a simulation branch)."""
    def __len__(self) -> int: ...

@final
class Predictor:
    """A loaded model directory (model.pt + stage.json + meta.json), verified against libtorch on load."""

    def __new__(cls, path: str, backend: str = "native") -> Predictor: ...
    @property
    def meta(self) -> dict[str, object]: ...
    @property
    def backend(self) -> str: ...
    @property
    def verified_max_abs_diff(self) -> float: ...
    def verify(self, n: int = 64, seed: int = 1) -> float:
        """Largest |native − libtorch| (ln s) over ``n`` probe samples."""
    def with_backend(self, backend: str) -> Predictor: ...
    @property
    def has_arrival_correction(self) -> bool:
        """Whether at-arrival predictions go through a fitted correction (``arrival.json``)."""
    def without_arrival_correction(self) -> Predictor:
        """This predictor without its at-arrival correction (raw Iconq+ at arrival; for ablations)."""
    def at_arrival(self, prediction: float, stage: float, size: int, running: int) -> float:
        """The router's prediction (s) for a query arriving with Iconq+ ``prediction`` and Stage
        ``stage`` on a ``size`` RPU cluster running ``running`` queries."""
    def arrival_samples(self, trace: pa.Table) -> dict[str, np.ndarray]:
        """Replay a trace through the incremental predictor: per query ``inputs`` (n × 5),
        ``ln_prediction``, ``ln_latency``, ``censored``, ``cluster_size``, ``stage_s``, ``running``."""
    def stage_estimate(self, template: int, instance: int, rpu: int) -> float: ...
    def cluster(self, size: int) -> ClusterPredictor: ...
    def predict_trace(self, trace: pa.Table) -> dict[str, np.ndarray]:
        """Predict every query of a trace from its full neighbour sets (offline evaluation)."""

# --- Query Router and Workload Simulator ---------------------------------------------------------

@final
class ControlPlane:
    """The live control plane: the Query Router on the request path, the autoscaler (``autoscaler``:
    an ``autoslo.AutoscalerConfig``, a policy name, or a dict with keys from
    ``AUTOSCALER_SETTINGS``) on a background thread every ``tick_s`` of
    control-plane time, over an in-process cluster manager with the ``lifecycle`` timings. The
    clock is seconds since start × ``time_scale``. Thread-safe; routing releases the GIL and never
    waits for a scaling decision."""

    def __new__(
        cls,
        clusters: Sequence[int],
        predictor: Predictor | None = None,
        routing: str = "autoslo",
        autoscaler: _AutoscalerSpec | str | Mapping[str, object] | None = None,
        lifecycle: str = "fixed",
        spinup_s: float = 300.0,
        teardown_s: float = 200.0,
        time_scale: float = 1.0,
        tick_s: float = 10.0,
        seed: int = 0,
        price_per_rpu_hour: float = 0.375,
        billing_minimum_s: float = 60.0,
        slo_headroom: float = ...,
        config: str | None = None,
        admission: tuple[float, int | None] | None = None,
        budgets: tuple[dict[str, float], float] | None = None,
    ) -> ControlPlane: ...
    def route(self, query_id: int, template: int, instance: int, slo: float | None = None, *, tenant: str | None = None, workload_class: str | None = None) -> int:
        """Route a query arriving now; returns the cluster id. Its SLO is the deadline the
        configuration's ``slo_policy`` sets for it (by ``tenant``, ``workload_class`` and
        template), else ``slo``; neither is an error. A query refused at admission raises
        :class:`QueryRejectedError` (its ``reason``) and is not routed."""
    def budgets(self) -> list[dict[str, Any]]:
        """Each budgeted tenant's standing in the current window, as dicts (tenant, budget,
        spent: the estimated dollars admission charged, window_start: Unix time); empty without
        budgets."""
    def charge_budget(self, tenant: str, dollars: float) -> None:
        """Charge ``dollars`` to ``tenant``'s current budget window, as if its queries had been
        admitted (a restarted control plane restores what its tenants spent). Nothing without
        budgets."""
    def complete(self, query_id: int, timed_out: bool = False) -> None:
        """A routed query finished now."""
    def cost(self) -> float:
        """Dollars billed so far for the queries routed: each cluster billed while it ran them,
        each busy period at least the billing minimum."""
    def totals(self) -> pa.Table:
        """The queries so far per tenant × class (``Service.totals``'s columns): a query routed
        without a tenant or class counts as tenant ``default``, class ``adhoc``."""
    def take_served(self) -> pa.Table:
        """Take the queries that ended since the last take, once their cost is final
        (``Service.take_served``'s columns): each query's ``cost`` is its share of its cluster's
        bill, billed from its routing; once every query has ended and the billing minimum is
        over, the costs sum to :meth:`cost`. A query log ``Reservoir.append`` takes."""
    def log_dropped(self) -> int:
        """Ended queries dropped from a full log (more than 262,144 not taken)."""
    def slo_of(self, template: int, slo: float | None = None, *, tenant: str | None = None, workload_class: str | None = None) -> float:
        """The SLO :meth:`route` gives a query: the deadline the configuration's ``slo_policy``
        sets for it, else ``slo``; neither is an error."""
    def load_plan(self, config: object, day_start: float | None = None) -> list[int]:
        """Hand the control plane over to a new day's plan (an ExecutionConfig, or its JSON)
        whose second 0 is ``day_start`` on its clock (default: now), keeping every cluster;
        returns the sizes spun up for the clusters it wants now."""
    def clusters(self) -> list[tuple[int, int, int, bool]]:
        """(id, size, running queries, ready) of the clusters queries may go to."""
    def decisions(self) -> pa.Table:
        """The scaler's decisions so far, one row per option compared (``EmulationResult.decisions``
        describes the columns), as of the autoscaler thread's last pass."""
    def events(self) -> list[dict[str, object]]:
        """Every change of the cluster set so far, as dicts (time, cluster_id, size, event, reason).

        ``event`` is ``spinup``, ``teardown`` or ``failed`` (a cluster lost), or ``skipped``: a
        teardown of a cluster already gone, or a scaling decision that could not be taken
        (``reason`` says why; the scaler did nothing then)."""
    def now(self) -> float:
        """The control plane's clock (s)."""

@final
class Service:
    """A long-running control plane over Redshift Serverless workgroups, serving routing
    decisions (see :func:`autoslo.live.serve`). Thread-safe; routing releases the GIL."""

    def __new__(
        cls,
        clusters: Sequence[int],
        predictor: Predictor | None = None,
        routing: str = "autoslo",
        autoscaler: Mapping[str, object] | None = None,
        config: str | None = None,
        endpoint: str | None = None,
        region: str | None = None,
        time_scale: float = 1.0,
        timeout_s: float | None = ...,
        create_timeout_s: float = 900.0,
        initial_timeout_s: float | None = None,
        delete_timeout_s: float = 900.0,
        name_prefix: str = "autoslo",
        tick_s: float = 10.0,
        spinup_s: float = 300.0,
        keep_clusters: bool = False,
        keep_leftovers: bool = False,
        seed: int = 0,
        price_per_rpu_hour: float = 0.375,
        billing_minimum_s: float = 60.0,
        slo_headroom: float = ...,
        admission: tuple[float, int | None] | None = None,
        budgets: tuple[dict[str, float], float] | None = None,
    ) -> Service: ...
    def route(self, query_id: int, template: int, instance: int, slo: float | None = None, *, tenant: str | None = None, workload_class: str | None = None) -> dict[str, Any]:
        """Route a query arriving now: where to run it (cluster_id, size, workgroup, address, port)."""
    def complete(self, query_id: int, timed_out: bool = False) -> None:
        """A routed query finished now."""
    def lost(self, cluster_id: int, why: str) -> None:
        """The client found a cluster dead: it leaves the router and its workgroup is deleted."""
    def clusters(self) -> list[dict[str, Any]]:
        """Every cluster so far (cluster_id, size, workgroup, state, running, address, port,
        and its bill so far: billed_s, cost)."""
    def load_plan(self, config: object, day_start: float | None = None) -> list[int]:
        """Hand the service over to a new day's plan (an ExecutionConfig, or its JSON) whose
        second 0 is ``day_start`` on the service's clock (default: now), keeping every
        workgroup; returns the sizes spun up for its initial clusters."""
    def cost(self) -> float:
        """Dollars billed so far over every cluster."""
    def totals(self) -> pa.Table:
        """The queries so far per tenant × class (routed, running, met, late, timed_out, failed,
        cancelled, rejected, violation_rate (rejections count as violations), latency_mean, cost:
        dollars attributed to its ended queries whose cost is final; all of them once stopped)."""
    def take_served(self) -> pa.Table:
        """Take the queries that ended since the last take: a query log (query_id, arrival,
        arrival_s, template, instance, tenant, class, slo, cluster_id, cluster_size, latency, outcome,
        met, cost, reject_reason, charged). ``cost`` is the dollars of its cluster's bill attributed to it: each billed
        second split among the queries running then, a busy period's idle part of the billing
        minimum among that minute's queries. A query is taken once its cost is final: as it ends,
        or once its cluster's billing minute is over. Once stopped, the costs sum to ``cost()``.
        ``charged`` is the estimate admission charged to its tenant's budget (0 without one)."""
    def budgets(self) -> list[dict[str, Any]]:
        """Each budgeted tenant's standing in the current window, as dicts (tenant, budget,
        spent: the estimated dollars admission charged, window_start: Unix time); empty without
        budgets."""
    def charge_budget(self, tenant: str, dollars: float) -> None:
        """Charge ``dollars`` to ``tenant``'s current budget window, as if its queries had been
        admitted: a restarted service restores what its log's ``charged`` column says the tenant
        spent in this window (``autoslo.serving.ServedLog.charged``). Nothing without budgets."""
    def pending_served(self) -> pa.Table:
        """The ended queries whose cost is not final yet (their cluster's billing minimum still
        runs), as ``take_served``'s table with ``cost`` null; nothing is taken, and
        ``take_served`` returns them once their cost is final. ``autoslo.serving.ServedLog``
        journals them, so that a crash before then loses no query."""
    def keep_log(self, on: bool) -> None:
        """Keep the log of ended queries (on from the start) or not."""
    def log_dropped(self) -> int:
        """Ended queries dropped from a full log (more than 262,144 not taken)."""
    def events(self) -> list[dict[str, object]]:
        """Every change of the cluster set so far (time, cluster_id, size, event, reason)."""
    def decisions(self) -> pa.Table:
        """The scaler's decisions so far."""
    def now(self) -> float:
        """The service's clock (s)."""
    def stop(self) -> None:
        """Stop the autoscaler and delete the workgroups (unless ``keep_clusters``)."""
    def __enter__(self) -> Service: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class Router:
    """A Query Router used live (thread-safe; routing releases the GIL).

    ``policy`` is one of ``ROUTING_POLICIES``; ``autoslo``, ``autoslo-latency``, ``stage-cost`` and ``least-work`` need a
    ``predictor``. ``clusters`` are the sizes (RPU) of the initial clusters, ids 0, 1, … (each a
    Redshift Serverless base capacity, :func:`is_base_capacity`).
    ``slo_headroom`` (≥ 1): ``autoslo`` counts a query as a predicted violator when its predicted
    latency times this factor exceeds its SLO (1 is Algorithm 1's literal test).
    ``search`` (``autoslo`` policies): how a decision searches the clusters, one of
    ``ROUTER_SEARCHES``: ``exhaustive`` evaluates every cluster (Algorithm 1 as listed),
    ``branch-and-bound`` skips the clusters it proves cannot be chosen, ``auto`` (the default)
    picks per decision. All three choose the same cluster.
    """

    def __new__(
        cls,
        policy: str,
        clusters: Sequence[int],
        predictor: Predictor | None = None,
        seed: int = 0,
        price_per_rpu_hour: float = 0.375,
        billing_minimum_s: float = 60.0,
        slo_headroom: float = ...,
        search: str = "auto",
    ) -> Router: ...
    @property
    def policy(self) -> str: ...
    def route(
        self, query_id: int, template: int, instance: int, arrival: float, slo: float, among: Sequence[int] | None = None
    ) -> int:
        """Route a query arriving at ``arrival`` (s, non-decreasing); returns the cluster id.

        ``among`` restricts the choice to those cluster ids (each one the router may use)."""
    def complete(self, query_id: int, now: float, timed_out: bool = False) -> None:
        """A routed query finished at ``now``."""
    def add_cluster(self, size: int, ready_at: float | None = None) -> int:
        """Add a cluster (taking queries from ``ready_at``); returns its id."""
    def remove_cluster(self, cluster: int) -> None:
        """Stop routing to a cluster."""
    def clusters(self) -> list[tuple[int, int, int]]:
        """(id, size, running queries) of the usable clusters."""

def simulate(
    workload: pa.Table,
    clusters: Sequence[int],
    predictor: Predictor,
    routing: str = "autoslo",
    seed: int = 0,
    timeout_s: float | None = ...,
    spinup_s: float = 300.0,
    teardown_s: float = 200.0,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    schedule: Sequence[tuple[float, str, int]] | None = None,
    slo_headroom: float = ...,
    autoscaler: Mapping[str, object] | None = None,
    config: str | None = None,
    progress: Callable[[int, int], bool | None] | None = None,
) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    """The Workload Simulator: completions from the predictor; returns (trace, clusters, events,
    decisions). ``progress`` is called with (done, total) now and then; returning False or Ctrl-C
    stops the run."""

def validate_autoscaler(spec: Mapping[str, object]) -> None:
    """Check an autoscaler spec (``AutoscalerConfig.spec()``) by building its scaler as a run
    would; raises :class:`AutoSloCoreError` naming the bad setting."""

def validate_queue(
    slots_per_cluster: int,
    max_queued: int,
    max_queued_work_s: float,
    reserve: float,
    sharing: tuple[list[tuple[str, float, float]], tuple[float, float], float, bool] | None,
) -> None:
    """Check an admission queue's settings (``AdmissionQueue.as_args()`` without the deferral) by
    the core's rules; raises :class:`AutoSloCoreError` naming the bad setting. Tenant names are
    checked against a workload only when a run starts."""

def validate_ejection(ejection: tuple[int, float, float, float, float, bool]) -> None:
    """Check outlier-ejection settings (``Ejection.as_args()``) by the core's rules; raises
    :class:`AutoSloCoreError` naming the bad setting."""

def validate_deferral(deferral: tuple[list[str], float, float, int]) -> None:
    """Check a deferral (``Deferral.as_args()``) by the core's rules: the window must not be
    empty, at least one class, at least one slot. Class names are checked when a run starts."""

def validate_execution_config(text: str) -> str:
    """Parse and validate an execution configuration (JSON; unknown fields rejected); returns it
    normalised as JSON."""

def learned_tau_simulated(tau: float, gap: float) -> float:
    """``tau − gap`` kept within 0.1 τ and 2 τ: the simulated target of a tuning that knows how much
    later (``gap``, observed − estimated violation rate) the warehouse ran a past plan than the
    tuner estimated."""

def tuner_settings(text: str) -> str:
    """Validate Policy Tuner settings (JSON) and return them with every default filled in."""

def untuned_config(spec: str) -> str:
    """The first initial configuration of tuner settings (JSON), untuned: what a day with no
    history runs."""

def forecast(
    counts: pa.Table,
    arrivals: pa.Table,
    days: Sequence[int],
    target: int,
    kappa: float = 2.0,
    policy: str = "decay",
    decay: float = 0.5,
    forecasts: int = 20,
    training_share: float = 0.6,
    seed: int = 0,
    arrival_model: str = "deciles",
) -> tuple[list[pa.Table], list[pa.Table], str, list[int]]:
    """The Workload Forecaster over the reservoir's tables (dates as days since 1970-01-01):
    (training workloads, validation workloads, policy used, days used)."""

def simulate_batch(
    configs: Sequence[str],
    workloads: Sequence[pa.Table],
    predictor: Predictor,
    keep_logs: bool = False,
    timeout_s: float | None = ...,
    spinup_s: float = 300.0,
    teardown_s: float = 200.0,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    progress: Callable[[int, int], bool | None] | None = None,
    backend: object | None = None,
) -> list[list[dict[str, Any]]]:
    """SimulateBatch: R[i][j] for configuration i (JSON) on workload j, in parallel. ``progress``
    is called with (done, total) every 100 ms; returning False or Ctrl-C stops the batch.
    ``backend``: ``None`` (rayon, this machine's cores) or an object with the protocol of
    :class:`autoslo.ray_backend.RayBackend` (``put_predictor``, ``get_workload``,
    ``put_workload``, ``submit``)."""

def simulate_pairs(
    configs: Sequence[str],
    workloads: Sequence[pa.Table],
    pairs: Sequence[tuple[int, int]],
    jobs: Sequence[int],
    predictor: Predictor,
    threads: int | None = None,
    keep_logs: bool = False,
    timeout_s: float | None = ...,
    spinup_s: float = 300.0,
    teardown_s: float = 200.0,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    cold_start_factor: float | None = None,
    cold_start_duration_s: float = 300.0,
    noise_sigma: float | None = None,
    noise_seed: int = 0,
    class_scale: Mapping[str, float] | None = None,
) -> pa.Table:
    """Simulate (configuration, workload) ``pairs`` on ``threads`` threads (a remote worker's
    share of a batch), with the simulator's cold start (``cold_start_factor``) and latency noise
    (``noise_sigma``, drawn from ``noise_seed``) and latency scale per class (``class_scale``) when given. Returns a table: ``job`` (from
    ``jobs``), ``queries``, ``violations``, ``cost``, ``clusters``, and with ``keep_logs`` the list
    columns ``arrival``, ``end``, ``violated``."""

DEFAULT_HINDSIGHT_PLANS: int

def hindsight(
    workload: pa.Table,
    predictor: Predictor,
    given: Sequence[str] = ...,
    tau: float = 0.1,
    tau_scope: str = "fleet",
    plans: int = ...,
    refine: float = ...,
    search_seed: int = 0,
    space: str | None = None,
    seed: int = 0,
    lifecycle: str = "fixed",
    spinup_s: float = 300.0,
    teardown_s: float = 200.0,
    timeout_s: float | None = ...,
    backend: object | None = None,
    progress: Callable[[int, int], bool | None] | None = None,
) -> str:
    """The best plan in hindsight for the day ``workload`` (see :mod:`autoslo.hindsight`): the
    search's result as JSON (``plans``, ``outcomes``, ``best``, ``origin``). ``given`` are plans
    (JSON) emulated first; ``space`` a hindsight space (JSON, :func:`hindsight_space`'s keys);
    ``backend`` ``None`` (rayon) or an object with :class:`autoslo.ray_backend.RayBackend`'s
    protocol (``put_predictor``, ``get_workload``, ``put_workload``, ``submit_plans``)."""

def evaluate_plans(
    workload: pa.Table,
    plans: Sequence[tuple[int, str]],
    predictor: Predictor,
    tau: float,
    tau_scope: str = "fleet",
    incumbent: float = ...,
    seed: int = 0,
    lifecycle: str = "fixed",
    spinup_s: float = 300.0,
    teardown_s: float = 200.0,
    timeout_s: float | None = ...,
    threads: int | None = None,
) -> str:
    """Emulate ``plans`` ((index, JSON) pairs) on the day under a hindsight search's bound (a remote
    worker's share of the search): their outcomes as JSON."""

def hindsight_space() -> str:
    """The default hindsight space (JSON): the values of every knob a search draws from."""

SQL_DIALECTS: list[str]

def classify_sql(texts: pa.Array | pa.ChunkedArray, dialect: str = "redshift", hashes: pa.Array | pa.ChunkedArray | None = None) -> tuple[pa.Table, pa.Table]:
    """Each statement's class on every core: a table of ``class_id`` (uint64), ``raw`` (the
    tokenizer could not read it: its whitespace-folded text is its class) and ``select`` per text,
    and a table of ``class_id``, ``text`` (normalised) per distinct class. A non-null entry of
    ``hashes`` (Redshift's ``generic_query_hash``) names its statement's class instead."""

def featurize_classes(
    sql: Sequence[str | None],
    plans: Sequence[str | None],
    formats: Sequence[str],
    executions: Sequence[float],
    plan_queries: Sequence[int | None] | None = None,
    explain: pa.Table | None = None,
    dialect: str = "redshift",
) -> dict[str, Any]:
    """Plan features of every class under a schema fitted on them (``formats``: ``text``,
    ``json``, ``rows`` — that query's ``SYS_QUERY_EXPLAIN`` rows in ``explain`` — or ``none``).
    Returns ``features`` (float32, classes × 34), ``sources`` (plan, sql or fallback),
    ``problems`` (why a class fell back, or None), ``names`` and ``schema`` (JSON)."""

def plan_schema_names(schema: str) -> list[str]:
    """Check a plan schema's JSON and return its 34 feature names."""

def find_good_spinup_time(
    logs: Sequence[tuple[Sequence[float], Sequence[float], Sequence[bool]]], tau_target: float = 0.1, k: int = 1, spinup_s: float = 300.0, sigma_min_s: float = 1800.0
) -> list[float]:
    """FindGoodSpinupTime (Algorithm 5) over per-workload (arrival, end, violated) logs."""

def tune(
    counts: pa.Table,
    arrivals: pa.Table,
    days: Sequence[int],
    target: int,
    predictor: Predictor,
    spec: str = "{}",
    kappa: float = 2.0,
    timeout_s: float | None = ...,
    spinup_s: float = 300.0,
    teardown_s: float = 200.0,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    progress: Callable[[int, int], bool | None] | None = None,
    backend: object | None = None,
) -> dict[str, Any]:
    """The Policy Tuner end to end (forecast, ScheduleSpinups, Configuration Tuner): a dict with
    ``config`` (JSON) and the report (``backend`` names where SimulateBatch ran; see
    :func:`simulate_batch`)."""

def is_base_capacity(rpu: int) -> bool:
    """Whether a Redshift Serverless workgroup can have a base capacity of ``rpu`` RPU (4, 8 to 512 in steps of 8, or 544 to 1024 in steps of 32): the sizes the emulator, the simulator and an execution configuration accept."""

def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n Σx²) of non-negative values; 1 when all are equal."""

def canopy_report() -> str:
    """The multi-tenant case's fixture arithmetic (capacity, memory, p99s, fairness, daily cost)
    as JSON."""

def mercury_report(seed: int = 0) -> str:
    """The load-balancing chapter's Mercury fixture under count-balanced and work-aware
    placement, the 10 → 11 remap fractions, and a worker 3× slower for 90 s, as JSON."""

def slo_policy_tiers(policy: str, tenants: Sequence[str]) -> list[str]:
    """The tier an SLO policy (JSON) puts each tenant in."""

def apply_slo_policy(workload: pa.Table, policy: str) -> tuple[pa.Table, list[str]]:
    """A workload with each query's SLO set by an SLO policy (JSON); returns the table and each
    query's tier."""

# --- Cloud side: the Redshift Serverless cluster manager, the local endpoint, live mode ---------

class CloudServiceError(AutoSloCoreError):
    """A Redshift Serverless call failed (base of the typed cloud errors)."""

class ResourceNotFoundError(CloudServiceError):
    """The named namespace or workgroup does not exist."""

class ResourceConflictError(CloudServiceError):
    """The resource exists with other settings, or is busy."""

class ThrottledError(CloudServiceError):
    """Throttled on every attempt, after backoff."""

class WaitTimeoutError(CloudServiceError):
    """A workgroup did not reach the wanted status in time."""

class EndpointUnreachableError(CloudServiceError):
    """Redshift Serverless (or the local endpoint) could not be reached."""

class QueryRejectedError(AutoSloCoreError):
    """A served query refused at admission, before any work."""

    reason: str
    """``infeasible-deadline``, ``capacity`` or ``budget``."""
    retry_after_s: float | None
    """Refused for its tenant's budget: the seconds until the budget window ends, when the same
    query may be admitted again; ``None`` for the other reasons."""

@final
class LocalEndpoint:
    """A Redshift Serverless endpoint on 127.0.0.1 (AWS JSON 1.1, signed requests) whose workgroups
    are PostgreSQL servers, copies of ``template`` (a prepared data directory) or fresh ones.
    Lifecycle times are the measured Redshift Serverless ones × ``time_factor``. A context manager;
    ``close()`` stops every server."""

    def __new__(cls, port: int = 0, time_factor: float = 0.01, template: str | None = None, root: str | None = None, seed: int = 0) -> LocalEndpoint: ...
    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
    def throttle_next(self, n: int) -> None:
        """Answer the next ``n`` requests with ThrottlingException."""
    def never_available(self, pattern: str) -> None:
        """Workgroups whose name contains ``pattern`` stay CREATING forever."""
    def kill_server(self, workgroup: str) -> None:
        """SIGKILL the PostgreSQL server behind a workgroup."""
    def slow_down(self, workgroup: str, seconds: float) -> None:
        """Delay every chunk of a workgroup's replies by ``seconds`` (0: back to normal)."""
    def requests(self) -> int:
        """Requests served so far."""
    def workgroups(self) -> list[tuple[str, str, int, int | None]]:
        """(name, status, base capacity, endpoint port) of every workgroup."""
    def close(self) -> None: ...
    def __enter__(self) -> LocalEndpoint: ...
    def __exit__(self, _t: object, _v: object, _tb: object) -> bool: ...

@final
class ClusterManager:
    """Redshift Serverless workgroups through the AWS SDK (credentials and region from the standard
    chain; ``endpoint`` or ``AWS_ENDPOINT_URL_REDSHIFT_SERVERLESS`` for another endpoint). One
    cluster is workgroup ``<name>`` in namespace ``<name>-ns``; names are idempotent; throttling is
    retried with backoff up to ``max_attempts``."""

    def __new__(cls, endpoint: str | None = None, region: str | None = None, max_attempts: int = 6) -> ClusterManager: ...
    def create_cluster(self, name: str, rpu: int | None = None, price_performance: int | None = None, timeout_s: float = 900.0) -> dict[str, object]:
        """Create (or find) the cluster and wait until AVAILABLE; a dict of name, namespace, status,
        base_capacity, address, port."""
    def get_workgroup(self, name: str) -> dict[str, object]: ...
    def list_workgroups(self) -> list[dict[str, object]]: ...
    def update_capacity(self, name: str, rpu: int, wait: bool = True, timeout_s: float = 900.0) -> dict[str, object]: ...
    def delete_cluster(self, name: str, timeout_s: float = 900.0) -> None:
        """Delete the workgroup, wait until it is gone, delete its namespace (missing is fine)."""

def live(
    workload: pa.Table,
    sql: Mapping[int, str],
    clusters: Sequence[int],
    predictor: Predictor | None = None,
    routing: str = "autoslo",
    autoscaler: Mapping[str, object] | None = None,
    config: str | None = None,
    endpoint: str | None = None,
    region: str | None = None,
    time_scale: float = 1.0,
    timeout_s: float | None = ...,
    pool_size: int = 8,
    create_timeout_s: float = 900.0,
    initial_timeout_s: float | None = None,
    delete_timeout_s: float = 900.0,
    name_prefix: str = "autoslo",
    tick_s: float = 10.0,
    spinup_s: float = 300.0,
    max_attempts: int = 2,
    keep_clusters: bool = False,
    keep_leftovers: bool = False,
    db_user: str = "autoslo",
    db_name: str = "postgres",
    db_password: str | None = None,
    seed: int = 0,
    price_per_rpu_hour: float = 0.375,
    billing_minimum_s: float = 60.0,
    slo_headroom: float = ...,
    progress: Callable[[int, int], object] | None = None,
) -> tuple[pa.Table, pa.Table, pa.Table, dict[str, Any]]:
    """A live run (see ``autoslo.live.live``): (trace, clusters, events, extras with attempts,
    client_s, errors, workgroups, control_log, decisions, interrupted)."""

def prepare_local_template(dest: str, ddl: str, tables: Sequence[tuple[str, str]], queries: Sequence[tuple[int, str]], query_timeout_s: float = 20.0) -> list[tuple[int, bool, float | None, str | None]]:
    """Make the local workgroups' template data directory: schema, CSV loads, ANALYZE, and each
    query run once (template, ran, seconds, error)."""
