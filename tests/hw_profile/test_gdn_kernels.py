"""A Gated DeltaNet hybrid's linear layers from the kernel database's measured decode kernels (Qwen3.5 on the H200,
SGLang): the convolution's update at B tokens, the recurrent delta rule at (R + B) / 2 one-token sequences (each
request's states read once, each verified token's written), checked against the rows they come from."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from hw_profile.errors import HwProfileError
from hw_profile.hardware.shapes import get_shape
from hw_profile.kernels import database as kernel_db
from hw_profile.kernels import ops

pytestmark = pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                                reason="the kernel database (dspark-sim[kernels]) is not installed")

SHAPE = get_shape("qwen3.5-397b-a17b")
GPUS = 8  # 64 value and 16 key heads: 8 and 2 a GPU


def measured(kernel: str, batch: int) -> float:
    """The H200's SGLang row for this Qwen3.5 kernel at one token for each of ``batch`` sequences, ms a layer."""
    base, system, version = kernel_db.system_of("H200", "sglang")
    frame = kernel_db.find_table(base, system, "linear_attention", "sglang", version, "gdn_perf").frame
    row = frame[(frame["model_name"] == "Qwen/Qwen3.5-397B-A17B") & (frame["phase"] == "generation")
                & (frame["num_v_heads"] == 64 // GPUS) & (frame["kernel_source"].str.contains(kernel))
                & (frame["batch_size"] == batch)]
    assert len(row) == 1
    return float(row["latency"].iloc[0])


def linear_layers_ms(tokens, requests) -> np.ndarray:
    b = np.asarray(tokens, dtype=float)
    ctx = ops._Ctx.open("H200", "sglang", "bf16", GPUS, b)
    return ops._gdn_linear_attention(ctx, SHAPE, b, np.asarray(requests, dtype=float))


def test_verifying_reads_each_requests_states_once_and_writes_each_tokens():
    # 32 requests verifying 8 tokens each, and 64 verifying 4: measured batch sizes, so the lookups are the rows
    got = linear_layers_ms([256, 256], [32, 64])
    for value, r in zip(got, (32, 64), strict=True):
        expected = SHAPE.linear_attention_layers * (measured("conv1d", 256)
                                                     + (measured("recurrent", r) + measured("recurrent", 256)) / 2)
        assert value == pytest.approx(expected, rel=1e-9)
    assert got[0] < got[1]  # fewer requests, fewer state reads


def test_one_token_a_request_is_the_kernels_as_measured():
    got = linear_layers_ms([16], [16])[0]
    assert got == pytest.approx(SHAPE.linear_attention_layers * (measured("conv1d", 16) + measured("recurrent", 16)))


def test_a_head_layout_the_database_did_not_measure_is_refused_with_what_it_has():
    ctx = ops._Ctx.open("H200", "sglang", "bf16", 3, np.ones(1))  # 16 / 3 key heads: no such kernel
    with pytest.raises(HwProfileError, match=r"num_k_heads=5 \(measured: \[1, 16, 2, 4, 8\]\)"):
        ops._gdn_linear_attention(ctx, SHAPE, np.ones(1), np.ones(1))
