"""AutoSLO: keep per-query latency SLOs on multi-cluster cloud data warehouses at the lowest cost.

The Rust core (``autoslo._core``) holds the workloads, SLOs, billing and the warehouse emulator;
this package is the typed Python front: workloads and traces are ``pyarrow`` tables, results are
:class:`EmulationResult` objects, and ``autoslo`` is the command line.
"""

from __future__ import annotations

try:  # an installed extension finds libtorch through its rpath (site-packages/torch/lib) …
    from autoslo import _core as _core
except ImportError:  # … elsewhere (editable installs, user-site torch) preload it from torch's package
    import ctypes
    import importlib.util
    from pathlib import Path

    _spec = importlib.util.find_spec("torch")
    if _spec is None or _spec.origin is None:
        raise ImportError("autoslo needs torch==2.13.0 (its libtorch runs the latency predictor): pip install torch==2.13.0") from None
    for _lib in ("libc10.so", "libtorch_cpu.so"):
        ctypes.CDLL(str(Path(_spec.origin).parent / "lib" / _lib), mode=ctypes.RTLD_GLOBAL)
    from autoslo import _core as _core
from autoslo._core import (
    AutoSloCoreError,
    BillingTimer,
    QueryRejectedError,
    __version__,
    billed_seconds,
    catalog_fit_report,
    catalog_table,
    is_base_capacity,
    isolated_runtime,
    slo_for,
)
from autoslo._core import ControlPlane, Router
from autoslo.autoscaler import AutoscalerConfig, control_plane
from autoslo.emulation import EmulationResult, calibrate, emulate, simulate
from autoslo.tuner import ExecutionConfig, Forecasts, Reservoir, TuneResult, TunerSettings, forecast, tune
from autoslo.workloads import (
    base_workload,
    phased_workload,
    read_table,
    read_workload,
    redbench_workload,
    slo_feasibility,
    validate_workload,
    write_table,
)

__all__ = [
    "AutoSloCoreError",
    "AutoscalerConfig",
    "QueryRejectedError",
    "ControlPlane",
    "control_plane",
    "BillingTimer",
    "EmulationResult",
    "ExecutionConfig",
    "Reservoir",
    "TunerSettings",
    "TuneResult",
    "tune",
    "Forecasts",
    "forecast",
    "Router",
    "__version__",
    "base_workload",
    "billed_seconds",
    "calibrate",
    "catalog_fit_report",
    "catalog_table",
    "emulate",
    "simulate",
    "is_base_capacity",
    "isolated_runtime",
    "phased_workload",
    "read_table",
    "read_workload",
    "redbench_workload",
    "slo_feasibility",
    "slo_for",
    "validate_workload",
    "write_table",
]
