"""Every shipped scenario validates, with every file it names (tables, profiles, traces)."""

from __future__ import annotations

import pytest

from simulator.cli import cli
from tests.conftest import ROOT

SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
LIBRARY = {"offpeak", "midday", "peak", "tide-24h", "azure-conv", "azure-code"}
PAPER = {"paper-v4-flash", "paper-v4-pro"}  # prediction tests: MTP-1 (calibrated on) against DSpark (predicted)


def test_the_library_is_complete():
    assert LIBRARY | PAPER <= {p.stem for p in SCENARIOS}


@pytest.mark.parametrize("stem", sorted(PAPER))
def test_paper_scenarios_run_on_calibrated_tables_and_compare_dspark_with_mtp1(stem):
    from simulator.inputs.config import load_scenario
    from simulator.inputs.hardware import load_target_table

    scn = load_scenario(ROOT / "scenarios" / f"{stem}.yaml")
    assert load_target_table(scn).meta["kind"] == "calibrated"
    text = (ROOT / "scenarios" / f"{stem}.yaml").read_text()
    assert "mtp-1" in text and "dspark-async" in text and scn.model.sla.baseline == "mtp-1"


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["peak"])
def test_sla_anchors_separate_the_policies(stem):
    """The anchors sit where the frontiers differ: MTP-1 and DSpark both cross them (no saturated corner, no
    'above'), more than 10% apart in throughput per GPU (quick runs, the scenario's own load points)."""
    import pandas as pd

    from simulator.inputs.config import load_scenario
    from simulator.inputs.systems import resolve_systems
    from simulator.outputs.frontier import anchors_summary
    from simulator.runs.run import LoadPoint, RunSpec, run_one

    scn = load_scenario(ROOT / "scenarios" / f"{stem}.yaml", ("systems=[mtp-1, dspark]",))
    rows = [run_one(scn, RunSpec(system, LoadPoint(c), 0, True))[0]
            for system in resolve_systems(scn) for c in scn.model.frontier.concurrency]
    anchors = scn.model.sla.tps_targets
    summary = anchors_summary(pd.DataFrame(rows), anchors, "mtp-1")
    for a in anchors:
        mtp, dspark = (summary[s]["anchors"][f"{a:g}"] for s in ("mtp-1", "dspark"))
        assert mtp["status"] == dspark["status"] == "crossed", (stem, a, mtp, dspark)
        assert abs(dspark["gain_vs_baseline"]) > 0.10, (stem, a, dspark)
