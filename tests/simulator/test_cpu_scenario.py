"""The measured-CPU-table recipe (docs/measured-table-to-scenario.md): its scenario runs inside its tables' grids,
and a scenario whose engine limits reach far beyond a table's grid is warned about."""

from __future__ import annotations

import pytest

from hw_profile.tables.step_table import StepTable
from simulator.inputs.config import load_scenario
from simulator.inputs.hardware import scenario_grid_warnings
from tests.conftest import ROOT
from tests.simulator.engine_helpers import simulate
from tests.simulator.test_config import run_cli

CPU = ROOT / "scenarios" / "cpu-qwen3-0.6b.yaml"


@pytest.mark.slow
def test_cpu_scenario_stays_inside_its_tables_and_runs():
    assert scenario_grid_warnings(load_scenario(CPU)) == []
    res = run_cli("check", str(CPU))
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    # a few users on one CPU: steps of hundreds of ms, per-user speeds of a few tokens/s
    row, sim = simulate(CPU, system="dspark", concurrency=4, quick=True)
    steps = sim.steps.frame()
    grid = StepTable.read(ROOT / "scenarios" / "hardware" / "cpu-qwen3-0.6b.csv").grid
    drafter = StepTable.read(ROOT / "scenarios" / "hardware" / "cpu-qwen3-0.6b.drafter-1l.csv").grid
    assert steps["batch_tokens"].max() <= 128 == grid.b_axis[-1]
    assert steps["kv_used"].max() <= 4096 == drafter.k_axis[-1] <= grid.k_axis[-1]
    assert row["beyond_table"] == 0.0
    assert 0.1 < sim.steps.frame()["step_ms"].mean() / 1000 < 3.0
    assert 1.0 < row["tps_per_user"] < 20.0 and row["tau"] > 1.5


@pytest.mark.slow
def test_engine_limits_beyond_the_grid_are_warned_about():
    scn = load_scenario(CPU, ["engine.max_batch_tokens=2048", "engine.prefill_chunk=1024"])
    (target, *drafters) = scenario_grid_warnings(scn)
    assert "hardware.table covers B <= 128 and K <= 8,192, but this scenario's steps can reach B = 2,048" in target
    assert drafters == []  # decode-only drafter batches stay small
    wide = load_scenario(CPU, ["engine.kv_capacity_tokens=100000"])
    assert len(scenario_grid_warnings(wide)) == 3  # K: the target's table and the drafter table (dspark and mtp)
    res = run_cli("check", str(CPU), "--set", "engine.max_batch_tokens=2048")
    assert res.returncode == 0 and res.stderr.startswith("warning: ") and "extrapolated" in res.stderr


def test_check_warns_on_any_excess_as_runs_flag_it():
    """One rule with the runs' beyond_table flag: a limit one token past the grid is warned about (the old rule
    let steps go up to twice past it unmentioned)."""
    (line,) = scenario_grid_warnings(load_scenario(CPU, ["engine.max_batch_tokens=129"]))
    assert "hardware.table covers B <= 128" in line and "can reach B = 129" in line
    drafter_only = scenario_grid_warnings(load_scenario(CPU, ["engine.kv_capacity_tokens=4097"]))
    assert [line.split(": ")[1].split(" covers")[0] for line in drafter_only] == [
        "drafter dspark's table", "drafter mtp's table"]
    assert len(scenario_grid_warnings(load_scenario(CPU, ["engine.kv_capacity_tokens=8193"]))) == 3


def test_a_windowed_drafter_is_judged_on_the_kv_it_reads():
    """The V4 scenarios' drafters read a 128-token window per request: their tables are judged on max_running x
    128 KV tokens, not on the KV capacity; the paper scenarios' own limits stay inside every grid."""
    flash = ROOT / "scenarios" / "paper-v4-flash.yaml"
    assert scenario_grid_warnings(load_scenario(flash)) == []
    (line,) = scenario_grid_warnings(load_scenario(flash, ["engine.kv_capacity_tokens=20000000"]))
    assert line.split(": ")[1].startswith("hardware.table covers") and "K = 20,000,000" in line
