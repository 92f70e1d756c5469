"""Round trip: simulate with a known step-time table, calibrate from the runs.csv it writes, and recover the
table's step times over the observed range."""

from __future__ import annotations

import numpy as np
import pytest

from hw_profile.calibrate.calibrate import DraftShare, fit
from hw_profile.calibrate.observations import read_telemetry
from hw_profile.estimate.dp_ep import dp_ep_table
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.tables.step_table import StepTable
from simulator.inputs.config import load_scenario
from simulator.runs.sweep import Sweep
from tests.conftest import ROOT
from tools.paper_v4 import WINDOW, head_layer_equivalents

FLASH = ROOT / "scenarios" / "hardware" / "paper-v4-flash-calibrated.csv"


def simulate_runs_csv(scenario_file, tmp_path, table, systems, concurrency, **extra):
    path = scenario_file(hardware={"table": str(table)},
                         engine={"max_running": 512, "max_batch_tokens": 8192, "kv_capacity_tokens": 4_000_000,
                                 "prefill": "disaggregated"},
                         acceptance={"source": "profile", "profile": "paper-qwen3-8b"},
                         drafter={"name": "dspark", "gamma": 5}, systems=systems,
                         workload={"mix": {"math": 1, "chat": 1},
                                   "prompt": {"dist": "uniform", "low": 500, "high": 3000},
                                   "output": {"dist": "uniform", "low": 100, "high": 400}},
                         frontier={"concurrency": concurrency},
                         run={"duration_s": 12.0, "warmup_s": 4.0, "quick_duration_s": 12.0, "quick_warmup_s": 4.0},
                         **extra)
    sweep = Sweep.plan(load_scenario(path), tmp_path / "out", quick=False, seed=None, replicates=None)
    sweep.execute(jobs=1)
    return sweep.write_runs_csv()  # a path


def test_round_trip_recovers_a_calibrated_table_through_the_mtp_drafter(scenario_file, tmp_path):
    """The paper's V4-Flash table with its MTP drafter: the system in service is MTP-1, whose drafting is inside
    every observed step; calibrating with the drafter's share gives back the target's table."""
    runs = simulate_runs_csv(scenario_file, tmp_path, FLASH, ["mtp-1"], [4, 16, 48, 96, 160, 240])
    obs, info = read_telemetry(runs)
    assert info["format"] == "runs.csv" and len(obs) == 6
    assert obs["tau"].between(1.8, 1.95).all() and np.allclose(obs["verify_budget"], 2.0, atol=0.01)
    shape = get_shape("deepseek-v4-flash")
    cal = fit(obs, draft=DraftShare(1 + head_layer_equivalents(shape), shape.layers, WINDOW))
    known = StepTable.read(FLASH).grid
    b, k = obs["batch_tokens"].to_numpy(), obs["kv_tokens"].to_numpy()
    for frac in np.linspace(0, 1, 11):  # the observed points and the path between the outermost ones
        bq = b.min() + frac * (b.max() - b.min())
        kq = k.min() + frac * (k.max() - k.min())
        assert cal.target_ms(bq, kq) == pytest.approx(known.step_ms(bq, kq), rel=0.03)
    assert np.abs(cal.residual_pct).max() < 3.0


def test_round_trip_recovers_a_first_principles_table(scenario_file, tmp_path):
    """A table the linear form does not contain (the DP+EP roofline of V4-Flash: max of memory, compute and
    all-to-all time), plain decoding so no drafter: the fit still recovers it within 3% where it was observed."""
    table = dp_ep_table(get_shape("deepseek-v4-flash"), get_gpu("H800"), name="known").write(tmp_path / "known.csv")
    runs = simulate_runs_csv(scenario_file, tmp_path, table, ["ar"], [64, 128, 200, 300, 400])
    obs, _ = read_telemetry(runs)
    cal = fit(obs)
    known = StepTable.read(table).grid
    for bq, kq in zip(obs["batch_tokens"], obs["kv_tokens"], strict=True):
        assert cal.target_ms(bq, kq) == pytest.approx(known.step_ms(bq, kq), rel=0.03)
