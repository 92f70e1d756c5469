"""A table sidecar's ``verify_attention`` block: the correction for verifying more or fewer tokens per request
than the table priced, its closed form, how it is read, and what ``hw-profile estimate`` writes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hw_profile.estimate.engine_costs import engine_defaults
from hw_profile.estimate.estimate import Deployment, estimate_points, verify_attention
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.tables.step_table import StepTable, StepTimeGrid, TableError, VerifyAttention

ROWS = [{"batch_tokens": b, "kv_tokens": k, "status": "ok", "step_ms": 1.0} for b in (1, 512) for k in (0, 10**6)]


def test_closed_form_compute_bound_reads_bound_and_below_the_priced_budget():
    grid = replace(StepTimeGrid.from_points(np.array([1.0, 512.0]), np.array([0.0, 1e6]), np.ones(2)),
                   verify=VerifyAttention(2.0, 10.0, 20.0))
    # 8 tokens for one request over 1,000 KV tokens: 1,000 x (max(10, 160) - max(10, 40)) ns
    assert grid.verify_ms(8.0, 1, 1000.0) == pytest.approx(0.12, rel=1e-12)
    # plain decoding (1 a request) where the table priced 2: the compute it did not do comes off
    assert grid.verify_ms(64.0, 64, 1000.0) == pytest.approx(1000 * (20 - 40) * 1e-6, rel=1e-12)
    # reads-bound at both budgets: no change
    reads = replace(grid, verify=VerifyAttention(2.0, 500.0, 20.0))
    assert reads.verify_ms(np.array([64.0, 256.0]), 64, 1e5).tolist() == [0.0, 0.0]
    # a step of fewer tokens than the table's budget: the table priced min(B, q) there
    assert grid.verify_ms(1.0, 1, 1000.0) == 0.0
    # without the block, or without requests, nothing
    assert replace(grid, verify=None).verify_ms(8.0, 1, 1000.0) == 0.0 and grid.verify_ms(8.0, 0, 1000.0) == 0.0
    # elementwise over an array, the same rule as one value at a time
    b = np.array([8.0, 32.0, 100.0, 640.0])
    assert grid.verify_ms(b, 10, 5e4).tolist() == [grid.verify_ms(float(x), 10, 5e4) for x in b]


def test_a_per_request_read_is_corrected_to_the_steps_own_requests():
    """A Gated DeltaNet request's states are read once a step: the table priced them at B / min(B, q) requests, so a
    step of B tokens over R requests adds (R - B / q) x P ns, on top of the context's term (none at no context)."""
    grid = replace(StepTimeGrid.from_points(np.array([1.0, 512.0]), np.array([0.0, 1e6]), np.ones(2)),
                   verify=VerifyAttention(2.0, 10.0, 20.0, ns_per_request=4e5))
    # 64 tokens over 8 requests (8 each): the table's 2 a request read 32 requests' states, the step reads 8
    assert grid.verify_ms(64.0, 8, 0.0) == pytest.approx((8 - 32) * 4e5 * 1e-6, rel=1e-12)
    # decoding, one a request: twice the requests the table read
    assert grid.verify_ms(64.0, 64, 0.0) == pytest.approx((64 - 32) * 4e5 * 1e-6, rel=1e-12)
    # with context, the two terms add
    both = grid.verify_ms(64.0, 8, 1000.0)
    assert both == pytest.approx((8 - 32) * 4e5 * 1e-6 + 1000 * (max(10, 160) - max(10, 40)) * 1e-6, rel=1e-12)
    assert grid.verify_ms(2.0, 1, 0.0) == 0.0  # the table's own shape


def test_a_windowed_layer_is_corrected_to_the_windows_of_the_steps_own_requests():
    """Half the attention in layers that see 100 tokens of a request: over K = 8,000 tokens, 64 tokens over 8
    requests attend to 4,000 + min(4,000, 800) = 4,800 tokens a layer where the table's 32 requests attended to
    4,000 + min(4,000, 3,200) = 7,200, each at its own tokens per request (8 against the table's 2)."""
    grid = replace(StepTimeGrid.from_points(np.array([1.0, 512.0]), np.array([0.0, 1e6]), np.ones(2)),
                   verify=VerifyAttention(2.0, 10.0, 20.0, window=100.0, windowed_share=0.5))
    want = (4800 * max(10, 20 * 8) - 7200 * max(10, 20 * 2)) * 1e-6
    assert grid.verify_ms(64.0, 8, 8000.0) == pytest.approx(want, rel=1e-12)
    # past every window nothing is cut: the same as a model without windows
    full = replace(grid, verify=VerifyAttention(2.0, 10.0, 20.0))
    assert grid.verify_ms(64.0, 8, 500.0) == pytest.approx(full.verify_ms(64.0, 8, 500.0), rel=1e-12)


def test_the_estimate_windows_what_it_writes_and_the_correction_matches_it():
    """Gemma 3 12B (40 of 48 layers see 1,024 tokens): the estimate writes its window and share, and the correction
    from the table's 2 tokens a request to 8 is the estimate's own change at 16 requests over 32,768 tokens each."""
    shape = get_shape("gemma3-12b")
    dep = Deployment(gpu=get_gpu("H200"), gpus=1, ep=1, dtype="bf16", parallel="tp", engine="vllm",
                     costs=engine_defaults("vllm"))
    block = verify_attention(shape, dep, dep.costs)
    assert (block.window, block.windowed_share) == (1024.0, 40 / 48)
    b, k = np.array([128.0]), np.array([16 * 32768.0])
    at = {q: estimate_points(shape, replace(dep, costs=replace(dep.costs, verify_tokens_per_request=q)), b, k,
                             "roofline").parts["attention"][0] for q in (2.0, 8.0)}
    grid = replace(StepTimeGrid.from_points(b, k, np.ones(1)), verify=block)
    assert grid.verify_ms(128.0, 16, float(k[0])) == pytest.approx(at[8.0] - at[2.0], rel=1e-9)


def test_the_per_request_term_is_written_only_where_a_model_has_one(tmp_path):
    """A Gated DeltaNet estimate writes ns_per_request (a request's states over the GPU's bandwidth, split with
    the heads); other kinds leave it out, and a sidecar without it reads as 0."""
    qn = get_shape("qwen3-next-80b-a3b")
    dep = Deployment(gpu=get_gpu("H200"), gpus=2, ep=2, dtype="bf16", parallel="tp", engine="vllm",
                     costs=engine_defaults("vllm"))
    block = verify_attention(qn, dep, dep.costs)
    assert block.ns_per_request == pytest.approx(qn.state_bytes_per_request / 2 / dep.bandwidth * 1e9, rel=1e-12)
    assert block.to_meta()["ns_per_request"] == block.ns_per_request
    # it predicts what the estimate itself prices: 256 tokens over no context at 8 a request against the table's 2
    b, k = np.array([256.0]), np.array([0.0])
    at = {q: estimate_points(qn, replace(dep, costs=replace(dep.costs, verify_tokens_per_request=q)), b, k,
                             "roofline").parts["attention"][0] for q in (2.0, 8.0)}
    grid = replace(StepTimeGrid.from_points(b, k, np.ones(1)), verify=block)
    assert grid.verify_ms(256.0, 32, 0.0) == pytest.approx(at[8.0] - at[2.0], rel=1e-9) and at[8.0] < at[2.0]
    plain = verify_attention(get_shape("qwen3-8b"), dep, dep.costs)
    assert plain.ns_per_request == 0.0 and "ns_per_request" not in plain.to_meta()
    table = StepTable.read(StepTable.from_points(ROWS, meta={"verify_attention": block.to_meta()})
                           .write(tmp_path / "qn.csv"))
    assert table.verify_attention == block
    with pytest.raises(TableError, match=r"verify_attention.ns_per_request must be a number >= 0, got -1"):
        StepTable.read(StepTable.from_points(ROWS, meta={"verify_attention": {**block.to_meta(), "ns_per_request": -1}})
                       .write(tmp_path / "bad.csv"))


def test_the_block_is_read_with_the_table_and_rides_on_its_grid(tmp_path):
    meta = {"verify_attention": {"tokens_per_request": 2, "ns_per_kv_token": 1.5, "ns_per_query_kv": 3,
                                 "source": "estimate"}}
    table = StepTable.read(StepTable.from_points(ROWS, meta=meta).write(tmp_path / "t.csv"))
    assert table.verify_attention == VerifyAttention(2.0, 1.5, 3.0, "estimate")
    assert table.grid.verify == table.verify_attention
    bare = StepTable.read(StepTable.from_points(ROWS).write(tmp_path / "bare.csv"))
    assert bare.verify_attention is None and bare.grid.verify is None


@pytest.mark.parametrize(("block", "match"), [
    ("x", "verify_attention must be an object"),
    ({"tokens_per_request": 0.5, "ns_per_kv_token": 1, "ns_per_query_kv": 1},
     r"verify_attention.tokens_per_request must be a number >= 1, got 0.5"),
    ({"tokens_per_request": 2, "ns_per_kv_token": -1, "ns_per_query_kv": 1},
     r"verify_attention.ns_per_kv_token must be a number >= 0, got -1"),
    ({"tokens_per_request": 2, "ns_per_kv_token": 1}, r"verify_attention.ns_per_query_kv must be a number >= 0"),
    ({"tokens_per_request": 2, "ns_per_kv_token": 1, "ns_per_query_kv": 1, "window": 128},
     r"verify_attention.window and windowed_share go together"),
    ({"tokens_per_request": 2, "ns_per_kv_token": 1, "ns_per_query_kv": 1, "window": 128, "windowed_share": 1.5},
     r"the share in \(0, 1\]"),
])
def test_a_malformed_block_fails_when_the_table_is_read(tmp_path, block, match):
    path = StepTable.from_points(ROWS, meta={"verify_attention": block}).write(tmp_path / "bad.csv")
    with pytest.raises(TableError, match=match):
        StepTable.read(path)


def test_the_estimate_writes_the_roofline_attention_it_priced():
    """The block's terms are the kernel-level roofline's attention: at a point where attention is compute-bound,
    raising the table's tokens per request from 2 to 8 moves the attention part by what the block predicts. (Under
    tensor parallelism the latent cache is read whole on every GPU while the heads split, so the same model is
    bound by reads up to about 7 tokens a request there.)"""
    shape = get_shape("deepseek-v3")
    # data-parallel attention: every GPU computes all 128 heads over its own requests' latent cache
    dep = Deployment(gpu=get_gpu("H800"), gpus=8, ep=8, dtype="fp8", parallel="dp", engine="sglang",
                     costs=engine_defaults("sglang"))
    b, k = np.array([256.0]), np.array([256 * 8000.0])
    at = {q: estimate_points(shape, replace(dep, costs=replace(dep.costs, verify_tokens_per_request=q)), b, k,
                             "roofline").parts["attention"][0] for q in (2.0, 8.0)}
    block = verify_attention(shape, dep, dep.costs)
    assert block.tokens_per_request == 2.0 and block.ns_per_query_kv * 2 > block.ns_per_kv_token  # compute-bound
    grid = replace(StepTimeGrid.from_points(b, k, np.ones(1)), verify=block)
    # a step of 256 tokens over 32 requests verifies 8 each: the table's 2 priced 128 requests
    assert grid.verify_ms(256.0, 32, float(k[0])) == pytest.approx(at[8.0] - at[2.0], rel=1e-6)
