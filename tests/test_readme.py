"""The README's code blocks work: every Python block runs (in order, in a scratch directory), and
every `autoslo …` command in a shell block parses with the real command line (the long ones are run
elsewhere: the reproductions and the demo have their own tests)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from autoslo.cli import build_parser

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_code_to_check() -> None:
    assert len(_blocks("python")) >= 2 and len(_blocks("bash")) >= 3


def test_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for block in _blocks("python"):
        exec(compile(block, str(README), "exec"), {})  # noqa: S102 - the README's own code


def _commands() -> list[str]:
    """The `autoslo …` lines of the README's shell blocks, comments cut."""
    lines = (line.split("#", 1)[0].strip() for block in _blocks("bash") for line in block.splitlines())
    return [line for line in lines if line.startswith("autoslo ")]


def test_shell_commands_parse() -> None:
    parser = build_parser()
    commands = _commands()
    assert len(commands) >= 10
    for cmd in commands:
        try:
            parser.parse_args(shlex.split(cmd)[1:])
        except SystemExit as e:  # argparse reports errors by exiting
            pytest.fail(f"README command does not parse: {cmd} ({e})")


def test_emulate_commands_run(tmp_path: Path) -> None:
    """Every `autoslo emulate` command of the README runs as written (in a scratch directory
    holding the query file it names) and exits 0; with --json it prints a run's summary."""
    import json
    import subprocess
    import sys

    import autoslo

    import pyarrow.csv as pcsv

    pcsv.write_csv(autoslo.base_workload(0.2, seed=1, kappa=2).slice(0, 200), tmp_path / "my_queries.csv")
    commands = [c for c in _commands() if c.startswith("autoslo emulate ") and "--config" not in c]
    assert len(commands) >= 4
    for cmd in commands:
        r = subprocess.run([sys.executable, "-m", "autoslo", *shlex.split(cmd)[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (cmd, r.stderr[-2000:])
        if "--json" in cmd:
            summary = json.loads(r.stdout)
            assert summary["queries"] > 0 and 0.0 <= summary["violation_rate"] <= 1.0 and summary["cost"] > 0, (cmd, summary)
