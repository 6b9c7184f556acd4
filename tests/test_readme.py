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


def test_shell_commands_parse() -> None:
    parser = build_parser()
    commands = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("autoslo "):
                commands.append(line)
    assert len(commands) >= 10
    for cmd in commands:
        try:
            parser.parse_args(shlex.split(cmd)[1:])
        except SystemExit as e:  # argparse reports errors by exiting
            pytest.fail(f"README command does not parse: {cmd} ({e})")
