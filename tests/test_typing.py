"""The package's type annotations hold: mypy over `python/autoslo` (configured in pyproject.toml)
and mypy's stubtest of the hand-written `_core.pyi` against the built extension, so a binding
whose parameters change without its stub fails here rather than in a user's editor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mypy", reason="mypy is in requirements-dev.txt")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


def test_the_package_type_checks() -> None:
    r = _run("mypy", "--config-file", "pyproject.toml")
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_extension_matches_its_stub() -> None:
    r = _run(
        "mypy.stubtest",
        "autoslo._core",
        "--mypy-config-file",
        "pyproject.toml",
        # PEP 800 markers: the stub marks the extension's classes @final, which is what users need.
        "--ignore-disjoint-bases",
        "--allowlist",
        "tests/stubtest_allowlist.txt",
    )
    assert r.returncode == 0, r.stdout + r.stderr
