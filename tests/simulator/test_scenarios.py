"""Every shipped scenario validates, with every file it names (tables, profiles, traces)."""

from __future__ import annotations

import pytest

from simulator.cli import cli
from tests.conftest import ROOT

SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
LIBRARY = {"offpeak", "midday", "peak", "tide-24h", "azure-conv", "azure-code", "paper-v4-flash"}


def test_the_library_is_complete():
    assert LIBRARY <= {p.stem for p in SCENARIOS}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_checks(path):
    from click.testing import CliRunner

    res = CliRunner().invoke(cli, ["check", str(path)])
    assert res.exit_code == 0, res.output
    assert "systems (" in res.output
    if path.stem not in LIBRARY:
        return
    text = path.read_text()
    for system in ("mtp-1", "static-3", "static-5", "threshold-0.7", "batch-table", "goodput-k", "dspark", "dspark-async"):
        assert system in text, f"{path.name} should compare {system}"
