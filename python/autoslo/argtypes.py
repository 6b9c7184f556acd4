"""Argument types shared by the ``autoslo`` subcommands: each parses one value or refuses it with
a message naming what was expected, before the command does any work. :func:`size_list` does the
same for cluster sizes given to the Python API."""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Callable, Iterable

from autoslo import _core


def sizes(text: str) -> list[int]:
    """Cluster sizes in RPU, comma-separated: ``16,32``."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"need at least one cluster size, got {text!r}")
    parts = [s.strip() for s in text.split(",")]
    if "" in parts:
        # "16,,32" is a typo more often than a list of two; say so instead of guessing.
        raise argparse.ArgumentTypeError(f"an empty cluster size between commas in {text!r}")
    try:
        out = [int(s) for s in parts]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"cluster sizes must be comma-separated integers (RPU), got {text!r}") from e
    bad = [s for s in out if not _core.is_base_capacity(s)]
    if bad:
        raise argparse.ArgumentTypeError(f"cluster sizes must each be {_core.BASE_CAPACITIES}, got {', '.join(map(str, bad))} in {text!r}")
    return out


def size_list(values: Iterable[object], what: str = "clusters") -> list[int]:
    """Cluster sizes given to the Python API, as a list of ints (Python or NumPy integers). A
    string, a lone number, a bool or a float is refused with a message naming ``what`` and the
    entry, never truncated, as is a size outside 1 to 2³² − 1; whether each is a base capacity the
    core checks where it uses it."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{what} is a list of cluster sizes in RPU, such as [32, 16]; got {values!r}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{what}[{i}] must be a whole number of RPU, got {v!r}")
        if not 0 < int(v) < 2**32:  # beyond what the core can even read as a size
            raise _core.AutoSloCoreError(f"{what}[{i}]: cluster size must be {_core.BASE_CAPACITIES}, got {v!r}")
        out.append(int(v))
    return out


def size(text: str) -> int:
    """One cluster size in RPU, a Redshift Serverless base capacity: ``16``."""
    try:
        out = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"a cluster size is a whole number of RPU, got {text!r}") from e
    if not _core.is_base_capacity(out):
        raise argparse.ArgumentTypeError(f"a cluster size must be {_core.BASE_CAPACITIES}, got {out}")
    return out


def count(least: int) -> Callable[[str], int]:
    """A whole number ≥ ``least``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"need a whole number, got {text!r}") from e
        if n < least:
            raise argparse.ArgumentTypeError(f"need a whole number ≥ {least}, got {n}")
        return n

    return parse


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"need a number, got {text!r}") from e


def seconds_or_zero(text: str) -> float:
    """A finite time in s, ≥ 0 (where 0 means "none")."""
    v = _number(text)
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"need a finite time ≥ 0 s, got {text!r}")
    return v


def positive(text: str) -> float:
    """A finite number > 0 (a time, a factor)."""
    v = _number(text)
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"need a finite number > 0, got {text!r}")
    return v


def rate(text: str) -> float:
    """A violation rate: a number in [0, 1]."""
    v = _number(text)
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"need a violation rate in [0, 1], got {text!r}")
    return v
