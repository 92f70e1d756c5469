"""A table sidecar's ``prefill_cost`` block (``ChunkAttention``): its closed form and the errors of a malformed
block."""

from __future__ import annotations

import numpy as np
import pytest

from hw_profile.tables.step_table import ChunkAttention, StepTable, TableError


def test_chunk_attention_closed_form():
    cost = ChunkAttention(10.0)
    # chunks of 200 (nothing cached) and 100 (200 cached): (200 x 100 + 100 x 250) pairs x 10 ns
    assert cost.ms(np.array([200, 100, 0]), np.array([0, 200, 999])) == pytest.approx(0.45, abs=1e-12)
    assert cost.each_ms(np.array([200, 100]), np.array([0, 200])) == pytest.approx([0.2, 0.25], abs=1e-12)
    # a prompt token's own attention beyond T's price of it: -1,000 ns each, 300 tokens, 0.3 ms less
    own = ChunkAttention(10.0, ns_per_token=-1000.0)
    assert own.ms(np.array([200, 100, 0]), np.array([0, 200, 999])) == pytest.approx(0.45 - 0.3, abs=1e-12)
    assert own.each_ms(np.array([200, 100]), np.array([0, 200])) == pytest.approx([0.0, 0.15], abs=1e-12)


def test_windowed_layers_attend_to_the_window_at_most():
    """Half the work in layers with a 100-token window: a chunk's pairs are half the full count plus half the
    integral of min(p + i, 100) over its tokens, checked against a fine sum over random chunks."""
    cost = ChunkAttention(10.0, window=100, windowed_share=0.5)
    # 200 from nothing: full 200 x 100 pairs; windowed 100 x 50 + 100 x 100 = 15,000
    assert cost.each_ms(np.array([200]), np.array([0]))[0] == pytest.approx((0.5 * 20_000 + 0.5 * 15_000) * 1e-5)
    rng = np.random.default_rng(0)
    c, p = rng.integers(0, 400, 50), rng.integers(0, 400, 50)
    steps = 20_000
    x = (np.arange(steps) + 0.5) / steps  # midpoints over each chunk, as a fraction of it
    windowed = np.array([np.minimum(pi + ci * x, 100).sum() * ci / steps for ci, pi in zip(c, p, strict=True)])
    want = (0.5 * c * (p + c / 2) + 0.5 * windowed) * 10.0 / 1e6
    assert cost.each_ms(c, p) == pytest.approx(want, rel=1e-6, abs=1e-12)
    assert cost.ms(c, p) == pytest.approx(want.sum(), rel=1e-6)
    no_window = ChunkAttention(10.0)
    assert (cost.each_ms(c, p) <= no_window.each_ms(c, p) + 1e-12).all()


def test_the_block_is_read_with_the_table_and_the_retired_gemm_price_ignored(tmp_path):
    rows = [{"batch_tokens": 1, "kv_tokens": 0, "status": "ok", "step_ms": 1.0}]
    meta = {"prefill_cost": {"us_per_token": 5, "ns_per_token_kv": 0.5, "source": "estimate"}}
    path = StepTable.from_points(rows, meta=meta).write(tmp_path / "t.csv")
    assert StepTable.read(path).chunk_attention == ChunkAttention(0.5, "estimate")
    windowed = {"prefill_cost": {"ns_per_token_kv": 0.5, "window": 1024, "windowed_share": 0.8}}
    path = StepTable.from_points(rows, meta=windowed).write(tmp_path / "w.csv")
    assert StepTable.read(path).chunk_attention == ChunkAttention(0.5, window=1024, windowed_share=0.8)
    own = {"prefill_cost": {"ns_per_token_kv": 0.5, "ns_per_token": -2500}}
    path = StepTable.from_points(rows, meta=own).write(tmp_path / "o.csv")
    assert StepTable.read(path).chunk_attention == ChunkAttention(0.5, ns_per_token=-2500.0)
    bare = StepTable.from_points(rows).write(tmp_path / "bare.csv")
    assert StepTable.read(bare).chunk_attention is None


@pytest.mark.parametrize(("block", "match"), [
    ([1, 2], "prefill_cost must be an object"),
    ({"ns_per_token_kv": -1.0}, r"prefill_cost.ns_per_token_kv must be a number >= 0, got -1.0"),
    ({"us_per_token": 1.0}, r"prefill_cost.ns_per_token_kv must be a number >= 0, got None"),
    ({"ns_per_token_kv": 1.0, "source": 3}, "prefill_cost.source must be a string"),
    ({"ns_per_token_kv": 1.0, "window": 0, "windowed_share": 0.5}, r"prefill_cost.window must be a number >= 1"),
    ({"ns_per_token_kv": 1.0, "window": 64}, r"prefill_cost.windowed_share must be a number >= 0, got None"),
    ({"ns_per_token_kv": 1.0, "window": 64, "windowed_share": 1.5}, "windowed_share must be at most 1"),
    ({"ns_per_token_kv": 1.0, "ns_per_token": "fast"}, "prefill_cost.ns_per_token must be a number, got 'fast'"),
])
def test_a_malformed_block_fails_when_the_table_is_read(tmp_path, block, match):
    rows = [{"batch_tokens": 1, "kv_tokens": 0, "status": "ok", "step_ms": 1.0}]
    path = StepTable.from_points(rows, meta={"prefill_cost": block}).write(tmp_path / "bad.csv")
    with pytest.raises(TableError, match=match):
        StepTable.read(path)
