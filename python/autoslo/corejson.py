"""JSON handed to the Rust core. JSON has no NaN or infinity, and Python's ``json`` writes them
anyway as ``NaN`` / ``Infinity``, which the core can only reject as "expected value at line 1
column 50". :func:`dumps` refuses them first, naming the field."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from autoslo import _core


def _non_finite(value: Any, path: str) -> tuple[str, float] | None:
    """The path and value of the first NaN or infinite float in ``value``, depth first."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = _non_finite(v, f"{path}.{k}" if path else str(k))
            if found is not None:
                return found
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        for i, v in enumerate(value):
            found = _non_finite(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def check_finite(value: Any, what: str) -> None:
    """Raise :class:`autoslo.AutoSloCoreError` for a NaN or infinity anywhere in ``value``,
    naming ``what`` and the field's path, e.g. ``execution configuration: `autoscaler.tau` must
    be a finite number, got nan``."""
    found = _non_finite(value, "")
    if found is not None:
        path, v = found
        where = f"`{path}`" if path else "the value"
        raise _core.AutoSloCoreError(f"{what}: {where} must be a finite number, got {v}")


def dumps(value: Any, what: str) -> str:
    """``value`` as JSON for the core, after :func:`check_finite`."""
    check_finite(value, what)
    return json.dumps(value, allow_nan=False)
