"""Kimi-K3's layout (docs/model.md, "By attention kind"): Kimi Delta Attention linear layers beside gated MLA full
layers (``linear-mla``), and routed experts in a latent space narrower than the hidden state."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from hw_profile.errors import HwProfileError
from hw_profile.estimate.estimate import (
    Deployment,
    attention_work,
    default_parallel,
    exchange_ms,
    roofline_parts,
    write_estimate_set,
)
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import dense_gemms, drafter_shape, get_shape

FULL = [*range(4, 93, 4), 93]  # the config's one-based full-attention layers: every 4th and the last
TEXT_CONFIG = {  # the fields of Kimi-K3's config.json (its text_config) that a shape reads
    "model_type": "kimi_linear", "hidden_size": 7168, "num_hidden_layers": 93, "intermediate_size": 33792,
    "num_attention_heads": 96, "num_key_value_heads": 96, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_output_gate": True,
    "num_experts": 896, "num_experts_per_token": 16, "num_shared_experts": 2, "moe_intermediate_size": 3072,
    "routed_expert_hidden_size": 3584, "first_k_dense_replace": 1, "vocab_size": 163840,
    "tie_word_embeddings": False,
    "linear_attn_config": {"full_attn_layers": FULL, "kda_layers": [n for n in range(1, 94) if n not in FULL],
                           "head_dim": 128, "num_heads": 96, "short_conv_kernel_size": 4},
    "quantization_config": {"format": "mxfp4-pack-quantized", "quant_method": "compressed-tensors"},
}


def test_its_config_json_reads_as_the_builtin(tmp_path):
    k3 = get_shape("kimi-k3")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "kimi_k3", "text_config": TEXT_CONFIG}))
    assert get_shape(path) == replace(k3, name="config")
    assert (k3.attention_kind, k3.full_attention_layers, k3.linear_attention_layers) == ("linear-mla", 24, 69)
    assert (k3.expert_dtype, k3.checkpoint_dtype, k3.latent_kv) == ("fp4", "bf16", True)


def test_its_weights_counted_layer_by_layer():
    """Every stored weight, enumerated per layer as the config lays them out (a KDA layer's q, k, v and gate
    projections, beta and decay heads, convolution and output; a gated MLA layer's low-rank query, latent, expansion,
    gate and output; the dense first layer; latent experts with their projections and the shared experts at the
    hidden width), against the shape's totals."""
    k3 = get_shape("kimi-k3")
    h, p = 7168, 96 * 128
    kda = 4 * h * p + 2 * h * 96 + 4 * 3 * p + p * h
    mla = h * 1536 + 1536 * 96 * 192 + h * 576 + 512 * 96 * 256 + h * 96 * 128 + 96 * 128 * h
    routed = 3 * 3584 * 3072
    moe_layer = 896 * routed + 2 * 3 * h * 3072 + 2 * h * 3584 + h * 896  # + shared, latent projections, router
    stored = 69 * kda + 24 * mla + 3 * h * 33792 + 92 * moe_layer + 2 * h * 163840
    active = stored - 92 * (896 - 16) * routed - h * 163840  # 16 experts a token; the embedding is a lookup
    # within a parameter a layer: the attention is kept as a mean over the layers (``attn_params_per_layer``)
    assert k3.total_params == pytest.approx(stored, abs=93) and k3.matmul_params == pytest.approx(active, abs=93)
    assert (round(stored / 1e12, 2), round(active / 1e9)) == (2.78, 104)
    # the dense GEMMs of a forward are the weights every token reads, bar the router, the convolutions and the
    # latent's expansion (absorbed into the attention, as engines decode MLA)
    gemms = sum(n * k * layers for _, n, k, layers in dense_gemms(k3))
    not_gemms = 92 * h * 896 + 69 * 4 * 3 * p + 24 * 512 * 96 * 256
    assert gemms == pytest.approx(k3.dense_params - k3.head_params - not_gemms, abs=93)


def test_only_its_mla_layers_cache_and_its_states_split_with_the_heads():
    """24 MLA layers cache a latent and a rotary key per token (one copy on every tensor-parallel GPU); each of the 69
    KDA layers holds 96 states of 128 x 128 and a 4-wide convolution's last 3 q, k, v inputs per request, which
    tensor parallelism splits with the heads."""
    k3 = get_shape("kimi-k3")
    assert k3.kv_bytes_per_token == 24 * (512 + 64) * 2.0
    state = 2.0 * 69 * (96 * 128 * 128 + 3 * 3 * 96 * 128)
    assert k3.state_bytes_per_request == state == k3.attn_read_bytes_per_request
    assert k3.attn_flops_per_kv_token == 24 * 96 * (4.0 * 512 + 2.0 * 64)
    dep = Deployment(gpu=get_gpu("MI355X"), gpus=8, ep=8, dtype="bf16", parallel="tp", engine="sglang")
    work = attention_work(k3, dep)
    assert work.per_kv == k3.kv_bytes_per_token  # whole on each GPU
    assert work.per_request == work.per_query == state / 8
    assert k3.kv_cache_facts(2.0, 8, 8)["kv_bytes_per_token_per_gpu"] == k3.kv_bytes_per_token
    # what grows with the context is the MLA layers' latent alone: 24 of 93 layers of a DeepSeek-style MLA model
    mla_only = replace(k3, linear_interval=0, full_layers=0)
    b, k = np.array([64.0, 64.0]), np.array([64 * 1024.0, 64 * 8192.0])
    grow = np.diff(roofline_parts(k3, dep, b, k, floors=False)["attention"])[0]
    grow_all = np.diff(roofline_parts(mla_only, dep, b, k, floors=False)["attention"])[0]
    assert grow == pytest.approx(grow_all * 24 / 93)


def test_latent_experts_move_and_read_the_latent_width():
    """The routed experts read and write 3,584 values a token: their weights and the expert-parallel exchange are at
    that width, half what the hidden width would make them; the shared experts stay at the hidden width."""
    k3 = get_shape("kimi-k3")
    wide = replace(k3, expert_hidden=0)
    assert (k3.expert_params * 2, k3.shared_expert_params) == (wide.expert_params, wide.expert_params)
    dep = Deployment(gpu=get_gpu("H200"), gpus=8, ep=8, dtype="fp8", parallel="tp", engine="sglang")
    b = np.array([4096.0, 8192.0])  # enough tokens that the exchange is bound by its volume, not its latency
    np.testing.assert_allclose(exchange_ms(k3, dep, b) / exchange_ms(wide, dep, b), 0.5)


def test_it_is_tensor_parallel_by_default_and_priced_on_the_roofline():
    """DeepSeek's data-parallel attention is the default for a latent-cache MoE model (Kimi-K2), not for Kimi-K3, whose
    per-head linear layers are most of its attention; the kernel database has no KDA kernels, so the roofline prices
    it; a drafter of it attends in full, through MLA, with no states."""
    from hw_profile.kernels.ops import step_times

    assert (default_parallel(get_shape("kimi-k3"), 8, 8), default_parallel(get_shape("kimi-k2"), 8, 8)) == ("tp", "dp")
    with pytest.raises(HwProfileError, match="Kimi Delta Attention"):
        step_times(get_shape("kimi-k3"), "B200", "sglang", "fp8", 8, 8, [1], [1], [1024])
    mtp = drafter_shape(get_shape("kimi-k3"), 1)
    assert (mtp.attention_kind, mtp.full_attention_layers, mtp.state_bytes_per_request) == ("mla", 1, 0.0)


@pytest.mark.slow
def test_a_scenario_says_when_running_requests_states_leave_no_kv_room(tmp_path):
    """On each GPU of the 8-GPU table (its memory facts: the weights' and the KDA states' share of one GPU, 232 MB a
    request over 8), 4,096 running requests' states and the weights fill the GPU: the scenario asks for a KV
    capacity and says what holds the memory; at 384 running requests it plans."""
    from tests.simulator.test_config import ROOT, run_cli

    k3 = get_shape("kimi-k3")
    table = tmp_path / "k3.csv"
    dep = Deployment(gpu=get_gpu("MI355X"), gpus=8, ep=8, dtype="bf16", parallel="tp", engine="sglang")
    write_estimate_set(k3, dep, table, ["mtp", "dspark"])
    peak = ROOT / "scenarios" / "peak.yaml"
    eight = ("--set", f"hardware.table={table}", "--set", "hardware.gpus_per_replica=8")
    res = run_cli("check", str(peak), *eight, "--set", "engine.max_running=4096")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert f"engine.max_running 4096 requests' states ({4096 * k3.state_bytes_per_request / 8 / 1e9:.0f} GB a GPU)" \
        in res.stderr
    res = run_cli("check", str(peak), *eight)
    assert res.returncode == 0, res.stderr
