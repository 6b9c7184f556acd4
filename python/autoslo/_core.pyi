"""Type annotations of the Rust extension ``autoslo._core`` (bindings of ``autoslo-core``)."""

from typing import Callable, Mapping, Sequence

import pyarrow as pa

__version__: str
ROUTING_POLICIES: list[str]

class AutoSloCoreError(ValueError):
    """Invalid input or action reported by the AutoSLO core."""

def isolated_runtime(template: int, instance: int, rpu: int) -> float:
    """Mean isolated runtime (s) of TPC-DS query ``template``/``instance`` on ``rpu`` RPU (measured or fitted)."""

def catalog_table() -> pa.Table:
    """The measured isolated-runtime catalog, one row per (template, instance, rpu)."""

def catalog_fit_report() -> dict[str, object]:
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
    timeout_s: float | None = 3600.0,
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
) -> tuple[pa.Table, pa.Table]:
    """Emulate a workload; returns (per-query trace, per-cluster bills)."""

def calibrate(seed: int = 0, seeds: int = 3, isolated_replications: int = 20) -> dict[str, object]:
    """Compare the emulator with the real Redshift measurements."""

def billed_seconds(intervals: Sequence[tuple[float, float]], minimum_s: float = 60.0) -> float:
    """Billed seconds of busy intervals under the §2 billing timer."""

class BillingTimer:
    """The incremental §2 billing timer of one cluster."""

    def __init__(self, minimum_s: float = 60.0) -> None: ...
    def on_arrival(self, now: float) -> None: ...
    def on_idle(self, now: float) -> None: ...
    def billed_seconds_at(self, now: float) -> float: ...
    def billed_seconds_until_drained(self, drain_at: float) -> float: ...
    def cost_until_drained(
        self, rpu: int, drain_at: float, arrival_at: float | None = None, price_per_rpu_hour: float = 0.375
    ) -> float: ...
    def copy(self) -> BillingTimer: ...
