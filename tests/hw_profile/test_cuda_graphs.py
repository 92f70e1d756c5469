"""Captured CUDA graphs as a table's staircase: the padding rule against a plain transcription, the grid's T(B, K)
on the stairs, the sidecar block, and what a staircase does to Theta = tau x SPS(B)."""

from __future__ import annotations

import bisect
import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw_profile.errors import HwProfileError
from hw_profile.tables.cuda_graphs import CudaGraphs
from hw_profile.tables.step_table import StepTable, StepTimeGrid, TableError
from simulator.core.forward import StepCost
from simulator.core.policies import greedy_prefix_lengths


def replayed_reference(graphs: CudaGraphs, tokens: float, rows: float, prompts: bool) -> tuple[float, bool]:
    """The padding rule written out plainly (module docstring of hw_profile.tables.cuda_graphs)."""
    if tokens <= 0:
        return tokens, False
    if graphs.counts == "requests":
        if prompts:
            return tokens, True
        count = rows if rows > 0 else tokens
    else:
        count = tokens
    if count > graphs.sizes[-1]:
        return tokens, True
    size = graphs.sizes[bisect.bisect_left(graphs.sizes, count)]
    return tokens / count * size, False


def line_grid() -> StepTimeGrid:
    """T = 1 + 0.01 B ms at every K: each stair's height is its padding's tokens."""
    b = np.array([1.0, 4096.0])
    return StepTimeGrid(b, np.array([0.0]), (1.0 + 0.01 * b)[None, :])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 700), min_size=1, max_size=12, unique=True), st.sampled_from(["tokens", "requests"]),
       st.floats(0, 2000), st.integers(0, 300), st.booleans())
def test_padding_matches_the_plain_rule(sizes, counts, tokens, rows, prompts):
    graphs = CudaGraphs(tuple(sorted(sizes)), counts, 3.0)
    grid = replace(line_grid(), graphs=graphs)
    b, eager = grid.replayed(tokens, rows, prompts)
    want_b, want_eager = replayed_reference(graphs, tokens, rows, prompts)
    assert eager == want_eager
    assert b == pytest.approx(want_b, rel=1e-12)
    t = grid.step_ms(tokens, 0.0, rows, prompts)
    plain = line_grid().step_ms(want_b, 0.0)
    assert t == pytest.approx(max(plain, 3.0) if want_eager else plain, rel=1e-12)
    assert grid.values(np.array([tokens]), 0.0, rows, prompts)[0] == t  # the array rule is the scalar rule


def test_a_step_pays_for_its_padded_size_and_past_the_largest_runs_eager():
    graphs = CudaGraphs((1, 2, 4, 8, 16, 24, 32), "tokens", eager_floor_ms=2.5)
    grid = replace(line_grid(), graphs=graphs)
    plain = line_grid()
    for b in range(1, 33):  # every B on a stair costs the stair's top
        top = next(s for s in graphs.sizes if s >= b)
        assert grid.step_ms(b, 0.0) == plain.step_ms(top, 0.0)
    assert grid.step_ms(33, 0.0) == 2.5  # eager: its launches (the floor) exceed its kernels
    assert grid.step_ms(400, 0.0) == plain.step_ms(400, 0.0)  # eager with kernels longer than the launches
    assert grid.step_ms(17, 0.0) > grid.step_ms(16, 0.0) == grid.step_ms(15, 0.0)


def test_counting_requests_pads_rows_and_runs_prompt_steps_eagerly():
    grid = replace(line_grid(), graphs=CudaGraphs((1, 2, 4, 8), "requests", eager_floor_ms=9.0))
    plain = line_grid()
    assert grid.step_ms(15, 0.0, rows=3) == plain.step_ms(20, 0.0)  # 3 rows of 5 tokens replay as 4 rows of 5
    assert grid.step_ms(8, 0.0) == plain.step_ms(8, 0.0)  # no rows given: one token a request
    assert grid.step_ms(15, 0.0, rows=3, prompts=True) == 9.0  # an extend step runs eagerly
    assert grid.step_ms(90, 0.0, rows=9) == 9.0  # more requests than the largest graph


def test_the_block_round_trips_through_the_sidecar_and_bad_blocks_name_the_field(tmp_path):
    graphs = CudaGraphs((1, 2, 4, 8), "requests", 1.25, "test")
    table = StepTable.from_points([{"batch_tokens": b, "kv_tokens": 0, "step_ms": 1 + b / 100} for b in (1, 64)],
                                  {"cuda_graphs": graphs.to_meta()})
    path = table.write(tmp_path / "t.csv")
    back = StepTable.read(path)
    assert back.cuda_graphs == graphs
    assert back.grid.graphs == graphs
    assert back.grid.step_ms(3, 0.0) == back.grid.step_ms(4, 0.0)
    for block, field in (({"sizes": [4, 2]}, "ascending"), ({"sizes": "1,2"}, "sizes"),
                         ({"sizes": [1, 2], "counts": "steps"}, "counts"), ({"sizes": [1], "eager_floor_ms": -1}, "eager")):
        side = path.with_suffix(".json")
        side.write_text(json.dumps({"cuda_graphs": block}))
        with pytest.raises(TableError, match=f"t.json.*{field}"):
            StepTable.read(path)
    with pytest.raises(HwProfileError, match="sizes"):
        CudaGraphs(())


def test_a_staircase_makes_theta_multimodal_and_the_early_stop_stops_on_a_stair():
    """On stairs, admitting one token past a captured size costs the next stair at once, so Theta falls and rises
    again: Algorithm 1's early stop halts at the first fall, the global search goes on past it."""
    grid = replace(line_grid(), graphs=CudaGraphs((8, 16, 64), "tokens", 0.0))
    rows = 8
    conf = np.full((rows, 7), 0.97)  # 8 anchors, 56 drafts of high survival
    cost = StepCost(grid, 0.0, 0, 0.0, rows)
    early = greedy_prefix_lengths(conf, cost, early_stop=True)
    best = greedy_prefix_lengths(conf, cost, early_stop=False)

    def theta(lengths):
        tau = rows + np.cumprod(conf, axis=1)[np.arange(7)[None, :] < lengths[:, None]].sum()
        return tau * float(cost(np.array([rows + lengths.sum()]))[0])

    assert early.sum() == 8  # fills the 16-token graph, then meets the jump to 64
    assert best.sum() > early.sum() and theta(best) > theta(early)
