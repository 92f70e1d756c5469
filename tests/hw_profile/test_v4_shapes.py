"""The DeepSeek-V4 shapes: totals against the model cards, compressed-attention KV by hand, and the analytic and
DP+EP models on them."""

from __future__ import annotations

import numpy as np
import pytest

from hw_profile.estimate.dp_ep import step_time_ms as dp_ep_ms
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.kernels.roofline import analytic_table, stored_weight_bytes
from tools.paper_v4 import calibrate_model

FLASH = get_shape("deepseek-v4-flash")
PRO = get_shape("deepseek-v4-pro")


@pytest.mark.parametrize("shape, total, active", [(FLASH, 284e9, 13.9e9), (PRO, 1.6e12, 49e9)])
def test_totals_match_the_model_cards(shape, total, active):
    assert shape.total_params == pytest.approx(total, rel=0.03)
    embedding = shape.hidden * shape.vocab
    assert shape.matmul_params + embedding == pytest.approx(active, rel=0.03)
    assert shape.csa_layers + shape.hca_layers <= shape.layers


def test_flash_compressed_kv_by_hand():
    # per context token: 21 CSA layers keep a 512-wide row and a 128-wide index key per 4 tokens, 20 HCA layers a
    # 512-wide row per 128 tokens; 2 bytes a value
    assert FLASH.kv_bytes_per_token == pytest.approx(2 * (21 * 640 / 4 + 20 * 512 / 128))
    # a step reads per context token only the index keys and the HCA rows ...
    assert FLASH.kv_read_bytes_per_token == pytest.approx(2 * (21 * 128 / 4 + 20 * 512 / 128))
    # ... and per query token the 512 selected rows of each CSA layer and every layer's 128-token window
    assert FLASH.attn_read_bytes_per_query_token == pytest.approx(2 * 512 * (21 * 512 + 43 * 128))
    mla = get_shape("deepseek-v3").kv_bytes_per_token
    assert FLASH.kv_bytes_per_token < mla / 10  # compressed attention: a tenth of V3's MLA cache per token


def test_fp4_experts_halve_their_bytes():
    routed = FLASH.moe_layers * FLASH.experts * FLASH.expert_params
    fp8 = stored_weight_bytes(FLASH, "fp8")
    assert fp8 == pytest.approx(FLASH.total_params - routed / 2)


@pytest.mark.parametrize("gpu", ["H20", "H200", "H800", "B200"])
def test_analytic_v4_on_each_gpu_with_tp_and_ep(gpu):
    t = analytic_table("deepseek-v4-flash", gpu, dtype="fp8", gpus=8, ep=8, b_axis=[1, 64, 512],
                       k_axis=[0, 1_000_000])
    grid = t.grid
    assert 0 < grid.step_ms(1, 0) < grid.step_ms(512, 0) < grid.step_ms(512, 1_000_000)
    # context costs little: a million KV tokens read add well under the weight pass of one step at B = 1
    assert grid.step_ms(1, 1_000_000) - grid.step_ms(1, 0) < grid.step_ms(1, 0)


def test_first_principles_per_token_cost_is_steeper_than_the_telemetry():
    """The DP+EP roofline of V4-Flash charges every verified token the all-to-all of 43 MoE layers at DeepEP's
    ~43 GB/s; the MTP-1 telemetry implies a large fixed step cost and a per-token cost about 2.5x smaller."""
    h800 = get_gpu("H800")
    b = np.array([200.0, 400.0])
    t, _ = dp_ep_ms(FLASH, h800, b, b / 2 * 4700)
    first_principles_us = float(np.diff(t)[0] / 200 * 1e3)
    cal, _, _ = calibrate_model("flash")
    assert first_principles_us > 2 * cal.ms_per_token * 1e3
    assert cal.fixed_ms > 3 * float(dp_ep_ms(FLASH, h800, 1.0, 0.0)[0])
