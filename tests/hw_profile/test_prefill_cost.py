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


def test_the_block_is_read_with_the_table_and_the_retired_gemm_price_ignored(tmp_path):
    rows = [{"batch_tokens": 1, "kv_tokens": 0, "status": "ok", "step_ms": 1.0}]
    meta = {"prefill_cost": {"us_per_token": 5, "ns_per_token_kv": 0.5, "source": "estimate"}}
    path = StepTable.from_points(rows, meta=meta).write(tmp_path / "t.csv")
    assert StepTable.read(path).chunk_attention == ChunkAttention(0.5, "estimate")
    bare = StepTable.from_points(rows).write(tmp_path / "bare.csv")
    assert StepTable.read(bare).chunk_attention is None


@pytest.mark.parametrize(("block", "match"), [
    ([1, 2], "prefill_cost must be an object"),
    ({"ns_per_token_kv": -1.0}, r"prefill_cost.ns_per_token_kv must be a number >= 0, got -1.0"),
    ({"us_per_token": 1.0}, r"prefill_cost.ns_per_token_kv must be a number >= 0, got None"),
    ({"ns_per_token_kv": 1.0, "source": 3}, "prefill_cost.source must be a string"),
])
def test_a_malformed_block_fails_when_the_table_is_read(tmp_path, block, match):
    rows = [{"batch_tokens": 1, "kv_tokens": 0, "status": "ok", "step_ms": 1.0}]
    path = StepTable.from_points(rows, meta={"prefill_cost": block}).write(tmp_path / "bad.csv")
    with pytest.raises(TableError, match=match):
        StepTable.read(path)
