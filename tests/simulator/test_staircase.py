"""A table's CUDA-graph staircase where the simulator reads it: the clock charges every step at its padded size,
``simulate check`` says how steps run, and the report draws the stairs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from hw_profile.tables.cuda_graphs import CudaGraphs
from hw_profile.tables.step_table import StepTable, StepTimeGrid
from simulator.cli import cli
from simulator.core.engine import EngineConfig, Simulation, StepPrices
from simulator.outputs.report import step_time_figure

ROOT = Path(__file__).resolve().parents[2]


def line_grid() -> StepTimeGrid:
    b = np.array([1.0, 4096.0])
    return StepTimeGrid(b, np.array([0.0, 1e6]), np.array([1.0 + 0.01 * b, 2.0 + 0.01 * b]))


def test_the_clock_charges_each_step_at_its_padded_size():
    graphs = CudaGraphs((1, 2, 4, 8, 16), "tokens", eager_floor_ms=50.0)
    sim = Simulation(EngineConfig(max_running=24, max_batch_tokens=8192, kv_capacity=10**6),
                     StepPrices(replace(line_grid(), graphs=graphs)))
    rng = np.random.default_rng(3)  # outputs of many lengths: the batch's size wanders across the stairs
    sim.closed_loop(12, lambda n: (np.full(n, 64), rng.integers(2, 60, n), np.zeros(n, dtype=np.int64)))
    sim.run(until=5.0)
    steps = sim.steps.frame()
    plain = line_grid()
    for b, k, ms in zip(steps["batch_tokens"], steps["kv_tokens"], steps["step_ms"], strict=True):
        sizes = [s for s in graphs.sizes if s >= b]
        want = plain.step_ms(sizes[0], k) if sizes else max(plain.step_ms(b, k), 50.0)
        assert ms == want
    assert (steps["batch_tokens"] > 16).any() and (steps["batch_tokens"] <= 16).any()  # both sides of the stairs


def test_check_says_how_the_steps_run():
    out = CliRunner().invoke(cli, ["check", str(ROOT / "scenarios" / "peak.yaml")]).output
    table = StepTable.read(ROOT / "scenarios" / "hardware" / "h200-qwen3-8b-bf16-vllm.csv")
    largest = table.cuda_graphs.largest
    assert f"step times: a staircase, steps padded to the next of {len(table.cuda_graphs.sizes)} captured" in out
    assert f"past {largest} eager" in out
    out = CliRunner().invoke(cli, ["check", str(ROOT / "scenarios" / "tiny-world-trace.yaml")]).output
    assert "each step priced at its own size" in out


def test_the_report_draws_the_stairs():
    table = StepTable.from_points([{"batch_tokens": b, "kv_tokens": 0, "step_ms": 1 + b / 100} for b in (1, 1024)],
                                  {"cuda_graphs": CudaGraphs((8, 64), "tokens", 0.0).to_meta()})
    fig = step_time_figure(table, [0.0])
    x, y = np.asarray(fig.data[0].x), np.asarray(fig.data[0].y)
    assert {8, 9, 64, 65} <= set(x.tolist())
    assert y[x == 9][0] == y[x == 64][0] > y[x == 8][0]  # 9 tokens replay the 64-token graph
    assert "staircase" in fig.layout.title.text
