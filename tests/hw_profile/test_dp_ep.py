"""The data-parallel-attention + expert-parallel step model against hand computation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hw_profile.estimate.dp_ep import DpEpParams, step_time_ms, stored_bytes_per_gpu, weights_per_gpu
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.kernels.roofline import RooflineParams

V3 = get_shape("deepseek-v3")
H800 = get_gpu("H800")


def test_weights_per_gpu_by_hand():
    ep = 64
    one_expert = 3 * 7168 * 2048
    # one token on every rank touches 1 - (1 - 8/256)^64 of each rank's 4 experts per MoE layer
    frac = 1 - (1 - 8 / 256) ** 64
    want = V3.dense_params + 58 * (256 / ep) * one_expert * frac
    assert weights_per_gpu(V3, 1, ep) == pytest.approx(want)
    assert weights_per_gpu(V3, 10_000, ep) == pytest.approx(V3.dense_params + 58 * 4 * one_expert)
    embedding = 129280 * 7168
    assert stored_bytes_per_gpu(V3, ep, "fp8") == pytest.approx(V3.dense_params + 58 * 4 * one_expert + embedding)


def test_all_to_all_bound_slope_is_bytes_over_bandwidth():
    p = DpEpParams(ep=64, network_gb_s=43.0)
    per_token_s = 58 * 7168 * (1.0 + 2.0) * 8 / 43e9  # 58 MoE layers, fp8 out, bf16 back, 8 copies
    t1, _ = step_time_ms(V3, H800, 400, 0, params=p)
    t2, _ = step_time_ms(V3, H800, 500, 0, params=p)
    assert (t2 - t1) / 100 == pytest.approx(per_token_s * 1e3, rel=1e-9)
    # DeepEP's README (EP64, 128 tokens): dispatch 173 us + combine 314 us per layer, ~28 ms for 58 layers
    t128, _ = step_time_ms(V3, H800, 128, 0, params=p)
    assert 25.0 < t128 < 35.0


def test_memory_bound_at_small_batch_and_no_overlap_adds_communication():
    rp = RooflineParams()
    t, _ = step_time_ms(V3, H800, 1, 0)
    mem = weights_per_gpu(V3, 1, 64) * 1.0 / (3.35e12 * rp.mem_eff)
    assert float(t) == pytest.approx(rp.launch_ms + mem * 1e3, rel=1e-9)
    flat = step_time_ms(V3, H800, np.array([2, 8, 16]), 0)[0]
    assert np.ptp(flat) / flat.mean() < 0.1  # SPS roughly flat while memory-bound
    serial, _ = step_time_ms(V3, H800, 128, 0, params=DpEpParams(overlap=False))
    overlapped, _ = step_time_ms(V3, H800, 128, 0)
    assert serial > overlapped


def test_dense_shape_has_no_communication():
    dense = get_shape("qwen3-8b")
    t1, _ = step_time_ms(dense, H800, 1, 0, dtype="bf16")
    assert float(t1) == pytest.approx(0.15 + dense.matmul_params * 2 / (3.35e12 * 0.8) * 1e3, rel=1e-9)


def test_drafter_of_moe_layers_keeps_its_experts():
    drafter = replace(V3, layers=3, dense_layers=0)
    assert drafter.moe_layers == 3 and drafter.is_moe
