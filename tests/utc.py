"""UTC-day arithmetic for tests of budgets that reset at UTC midnight.

A test reads the wall clock before (``t0``) and after (``t1``) the calls it checks: the service
read its clock somewhere in between, so an expectation holds if it holds at ``t0`` or at ``t1``.
This keeps such a test right when it runs across midnight."""

from __future__ import annotations

DAY = 86_400.0


def day_start(t: float) -> float:
    """The UTC midnight that starts the day of ``t`` (epoch seconds)."""
    return DAY * (t // DAY)


def to_midnight(t: float) -> float:
    """Seconds from ``t`` to the next UTC midnight."""
    return DAY - t % DAY


def is_day_start(value: float, t0: float, t1: float) -> bool:
    """``value`` is the start of the UTC day at some time in ``[t0, t1]``."""
    return value in (day_start(t0), day_start(t1))


def is_to_midnight(value: float, t0: float, t1: float, tolerance: float = 60.0) -> bool:
    """``value`` is, within ``tolerance`` seconds, the time to the next UTC midnight from some time
    in ``[t0, t1]``."""
    return any(abs(value - to_midnight(t)) <= tolerance for t in (t0, t1))
