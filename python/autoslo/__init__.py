"""AutoSLO: keep per-query latency SLOs on multi-cluster cloud data warehouses at the lowest cost.

The Rust core (``autoslo._core``) holds the workloads, SLOs, billing and the warehouse emulator;
this package is the typed Python front: workloads and traces are ``pyarrow`` tables, results are
:class:`EmulationResult` objects, and ``autoslo`` is the command line.
"""

from __future__ import annotations

from autoslo._core import (
    AutoSloCoreError,
    BillingTimer,
    __version__,
    billed_seconds,
    catalog_fit_report,
    catalog_table,
    isolated_runtime,
    slo_for,
)
from autoslo.emulation import EmulationResult, calibrate, emulate
from autoslo.workloads import (
    base_workload,
    phased_workload,
    read_table,
    read_workload,
    redbench_workload,
    validate_workload,
    write_table,
)

__all__ = [
    "AutoSloCoreError",
    "BillingTimer",
    "EmulationResult",
    "__version__",
    "base_workload",
    "billed_seconds",
    "calibrate",
    "catalog_fit_report",
    "catalog_table",
    "emulate",
    "isolated_runtime",
    "phased_workload",
    "read_table",
    "read_workload",
    "redbench_workload",
    "slo_for",
    "validate_workload",
    "write_table",
]
