"""The packaged data is exactly what the import script derives from the real measurements."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "redshift"


@pytest.mark.skipif(not SOURCE.exists(), reason="../shared/data/redshift is not beside this checkout")
def test_packaged_data_matches_the_source() -> None:
    spec = importlib.util.spec_from_file_location("import_redshift_data", ROOT / "scripts" / "import_redshift_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, text in mod.build(SOURCE).items():
        assert (ROOT / "python" / "autoslo" / "data" / name).read_text() == text, name
    assert (ROOT / "python" / "autoslo" / "data" / "LICENSE.source").read_text() == (SOURCE / "LICENSE.source").read_text()
