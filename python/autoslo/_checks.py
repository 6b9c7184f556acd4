"""Checks of user-given settings, shared by the settings classes (:mod:`autoslo.tenancy`,
:mod:`autoslo.placement`). Each raises :class:`autoslo.AutoSloCoreError` naming the setting; the
ranges a setting must fall in stay the core's to check wherever the core can."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, Protocol, cast

from autoslo import _core


def finite_at_least(value: object, least: float) -> bool:
    """Whether ``value`` is a real number (Python or NumPy, not a bool), finite and ≥ ``least``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return math.isfinite(value) and float(value) >= least


def check_names(value: object, what: str) -> None:
    """Refuse anything but a non-empty list (or other sequence, not one string) of non-empty names."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _core.AutoSloCoreError(f"{what} must be a list of names (e.g. [{value!r}] for one), got {value!r}")
    if not value or not all(isinstance(v, str) and v for v in value):
        raise _core.AutoSloCoreError(f"{what} must be a non-empty list of non-empty names, got {list(value)!r}")


def check_whole(value: object, what: str, least: int, below: int = 2**64) -> None:
    """Refuse anything but a whole number (Python or NumPy, not a bool) from ``least`` up to, not
    including, ``below``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not least <= int(value) < below:
        raise _core.AutoSloCoreError(f"{what} must be a whole number ≥ {least}" + (f" and < {below}" if below < 2**64 else "") + f", got {value!r}")


def check_number(value: object, what: str) -> None:
    """Refuse anything but a real number (Python or NumPy, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _core.AutoSloCoreError(f"{what} must be a number, got {value!r}")


def check_kind(value: object, kind: type, name: str) -> None:
    """Refuse a value that is neither ``None`` nor a ``kind`` (a settings class), naming ``name``."""
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"`{name}` must be an {kind.__module__}.{kind.__qualname__} (or None), got {value!r}")


class _Settings(Protocol):
    def as_args(self) -> Any: ...


def core_args(value: object, kind: type, name: str) -> Any:
    """A settings object (``None`` or a ``kind``, else the ``TypeError`` of :func:`check_kind`)
    in the form the extension takes: its ``as_args()``, or ``None``."""
    check_kind(value, kind, name)
    return None if value is None else cast(_Settings, value).as_args()


def check_flag(value: object, what: str) -> None:
    """Refuse anything but ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise _core.AutoSloCoreError(f"{what} must be True or False, got {value!r}")
