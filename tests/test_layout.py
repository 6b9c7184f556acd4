"""The package's structure: no import cycles between its modules, hidden or not."""

from __future__ import annotations

import ast
from pathlib import Path

import autoslo

PKG = Path(autoslo.__file__).resolve().parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        # Every import, at module level or inside a function (a cycle hidden in a function is one).
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                # The most specific module of the package that the import names.
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and t != "autoslo":
                    graph[name].add(t)
                    break
    return graph


def test_no_import_cycles() -> None:
    graph = _import_graph()
    assert "autoslo.emulation" in graph and "autoslo.cli" in graph
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_top_level_models_directory_holds_current_cards() -> None:
    """The design card's ``models/``: a card per bundled variant and its training configuration,
    as ``autoslo predictor cards`` writes them from the artifacts the wheel carries."""
    from autoslo.predictor.cards import card_files

    root = Path(__file__).resolve().parents[1] / "models"
    files = card_files()
    assert {"README.md", "iconq_plus/training.json", "iconq/training.json", "size/training.json", "censored/training.json"} <= set(files)
    for rel, text in files.items():
        assert (root / rel).read_text() == text, f"models/{rel} is stale: run `autoslo predictor cards --out models`"
