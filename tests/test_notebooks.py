"""Every notebook runs end to end (small settings)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The notebooks' scratch directories (tempfile) go in one the test removes. It is open to
    # every user, as /tmp is: the live notebook's PostgreSQL runs as another user than root.
    scratch = Path(tempfile.mkdtemp(prefix="autoslo-notebook-test-"))
    scratch.chmod(0o1777)
    monkeypatch.setenv("TMPDIR", str(scratch))
    nb = nbformat.read(path, as_version=4)
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


def test_there_is_a_quickstart() -> None:
    assert any(p.name == "01_quickstart.ipynb" for p in NOTEBOOKS)
