"""Test tiers and the rules every run keeps.

The tiers are pytest markers, registered in ``pyproject.toml`` (``--strict-markers`` refuses any
other): ``slow``, ``reproduce``, ``live``, ``notebook`` and ``scaleout``. The default run
(``pytest``, ``make test``) selects none of them; ``pytest -m live`` runs one tier,
``pytest -m ""`` (``make test-all``) every test.

With ``AUTOSLO_STRICT_SKIPS=1`` (``.ci/run`` sets it) a skipped test fails: every test dependency
is declared in ``requirements-dev.txt``, so a skip there means a package or a server is missing
and a tier would pass without testing anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# tests/test_tiers.py runs small pytest sessions to check these rules.
pytest_plugins = ["pytester"]

STRICT_SKIPS = os.environ.get("AUTOSLO_STRICT_SKIPS", "") not in ("", "0")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if STRICT_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where AUTOSLO_STRICT_SKIPS=1 asks every test to run: {reason}"
