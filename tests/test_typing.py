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


API_MODULES = ["autoslo", "autoslo.tuner", "autoslo.autoscaler", "autoslo.tenancy", "autoslo.placement", "autoslo.live", "autoslo.airflow", "autoslo.predictor", "autoslo.workloads", "autoslo.emulation", "autoslo.ray_backend", "autoslo._core"]


def test_the_public_api_is_documented() -> None:
    import importlib
    import inspect

    missing = []
    for name in API_MODULES:
        mod = importlib.import_module(name)
        for attr in getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]:
            obj = getattr(mod, attr)
            if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)) or not getattr(obj, "__module__", "").startswith("autoslo"):
                continue
            if not (obj.__doc__ or "").strip():
                missing.append(f"{name}.{attr}")
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for member, value in vars(obj).items():
                    if not member.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)) and not (value.__doc__ or "").strip():
                        missing.append(f"{name}.{attr}.{member}")
    assert not missing, f"public names without a docstring: {sorted(set(missing))}"
