"""The rules of the test tiers hold (tests/conftest.py, pyproject.toml): the default tier selects
no marked test, a hung test fails with a timeout that names it, and a skip fails where
AUTOSLO_STRICT_SKIPS asks every test to run."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFTEST = (ROOT / "tests" / "conftest.py").read_text()


def test_the_default_tier_deselects_every_registered_tier() -> None:
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    markers = [m.split(":", 1)[0] for m in opts["markers"]]
    assert set(markers) == {"slow", "reproduce", "live", "notebook", "scaleout"}
    addopts = opts["addopts"]
    assert "--strict-markers" in addopts
    expression = addopts[addopts.index("-m") + 1]
    assert expression == " and ".join(f"not {m}" for m in markers), expression


def test_a_hung_test_fails_with_a_timeout_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_hang="import time\n\ndef test_that_never_ends():\n    time.sleep(600)\n")
    r = pytester.runpytest_subprocess("--timeout", "2")
    r.assert_outcomes(failed=1)
    assert any("Timeout" in line for line in r.outlines), r.outlines
    assert any("test_that_never_ends" in line for line in r.outlines)


def test_a_skip_fails_where_every_test_must_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_skips="import pytest\n\ndef test_missing_a_package():\n    pytest.importorskip('no_such_package_here')\n\n@pytest.mark.xfail(reason='known')\ndef test_known_failure():\n    assert False\n")
    monkeypatch.delenv("AUTOSLO_STRICT_SKIPS", raising=False)
    pytester.runpytest_subprocess().assert_outcomes(skipped=1, xfailed=1)
    monkeypatch.setenv("AUTOSLO_STRICT_SKIPS", "1")
    r = pytester.runpytest_subprocess()
    r.assert_outcomes(failed=1, xfailed=1)
    assert any("AUTOSLO_STRICT_SKIPS=1" in line and "no_such_package_here" in line for line in r.outlines), r.outlines
