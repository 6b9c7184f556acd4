"""`autoslo reproduce all`: every table at once, written where the docs read it (`pytest -m
reproduce` selects the reproduction tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoslo.reproduce import ALL_TABLES, reproduce_all


@pytest.mark.reproduce
def test_reproduce_all_writes_every_table(tmp_path: Path) -> None:
    results = reproduce_all(tmp_path, seeds=[0])
    assert set(results) == set(ALL_TABLES)
    page = (tmp_path / "README.md").read_text()
    for stem in ALL_TABLES:
        data = json.loads((tmp_path / f"{stem}.json").read_text())
        assert data["rows"], stem
    for title in ("Table 2", "Table 3", "Table 4"):
        assert title in page
    # The product's policies beat the do-nothing baselines on this seed too.
    assert results["table3-spinup-size"]["mean_change_vs_noop"]["add-best"]["mean_violation_rate_change"] < -0.5
    assert results["table4-trigger"]["mean_change_vs_noop"]["combined"]["mean_violation_rate_change"] < -0.3
