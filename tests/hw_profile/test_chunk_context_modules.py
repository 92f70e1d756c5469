"""A prompt chunk's attention over what its request already holds, from the measured context modules of sparse
attention (DeepSeek-V4's CSA and HCA, DSA): the growth of their time with the cached prefix, per (chunk token, cached
token), in the sidecar's ``prefill_cost`` block; the roofline where the tables hold no such growth."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pandas as pd
import pytest

from hw_profile.estimate.estimate import Deployment, chunk_attention, estimate_table, measured_chunk_rate
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape
from hw_profile.kernels.ops import PREFIX_CHUNK_FROM, PREFIX_LINEAR_FROM, _prefix_slope
from hw_profile.tables.step_table import ChunkAttention

needs_db = pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                              reason="the kernel database (dspark-sim[kernels]) is not installed")


def sweep(rate_ms: float, chunks=((1, 4096), (2, 2048), (8, 512)), base_ms: float = 1.0, noise=None) -> pd.DataFrame:
    """Module times of chunks (batch_size prompts of isl tokens) over cached prefixes, growing at ``rate_ms`` per
    (chunk token x cached token)."""
    steps = [0, 4096, PREFIX_LINEAR_FROM, 32768, 65536, 131072]
    rows = [dict(batch_size=b, isl=i, step=s, latency=base_ms + rate_ms * b * i * s) for b, i in chunks for s in steps]
    frame = pd.DataFrame(rows)
    if noise is not None:
        frame["latency"] = noise(frame)
    return frame


def test_the_slope_of_a_linear_sweep_is_its_rate_per_pair():
    assert _prefix_slope(sweep(3e-9)) == pytest.approx(3e-9, rel=1e-6)


def test_no_rate_without_a_sweep_of_large_chunks_that_rises_in_a_line():
    assert _prefix_slope(sweep(3e-9, chunks=((64, 8), (8, PREFIX_CHUNK_FROM // 2)))) is None  # decode-like chunks
    assert _prefix_slope(sweep(-3e-9)) is None  # falls with the prefix
    rng = np.random.default_rng(0)
    assert _prefix_slope(sweep(1e-12, noise=lambda f: f["latency"] + rng.uniform(0, 1, len(f)))) is None  # jumps about
    short = sweep(3e-9)
    assert _prefix_slope(short[short["step"] < 32768]) is None  # one prefix past the linear start: no line


def test_a_chunk_priced_at_the_rate_grows_with_its_prefix_as_the_rate_says():
    cost = ChunkAttention(0.2)
    grown = cost.ms(np.array([4096]), np.array([524288])) - cost.ms(np.array([4096]), np.array([131072]))
    assert grown == pytest.approx(0.2e-6 * 4096 * (524288 - 131072))


@needs_db
def test_v4_chunks_on_the_h200_grow_with_the_prefix_as_the_measured_modules_do():
    """The H200's SGLang CSA and HCA modules (16 heads a GPU), one prompt of 4,096 tokens over 128K and 512K cached
    tokens: what the rate adds across the 43 layers is what the modules' times add, layer by layer."""
    from hw_profile.kernels import database as db

    shape = get_shape("deepseek-v4-flash")
    dep = Deployment(get_gpu("H200"), gpus=4, ep=4, dtype="fp8", engine="sglang")
    rate, source = measured_chunk_rate(shape, dep)
    assert "CSA and HCA context modules" in source and "h200_sxm / sglang" in source
    base, system, version = db.system_of("H200", "sglang")
    grown = 0.0
    for kind, layers in (("csa", shape.csa_layers), ("hca", shape.hca_layers)):
        frame = db.find_table(base, system, "sparse_attention", "sglang", version,
                              f"dsv4_{kind}_context_module_perf").frame
        rows = frame[frame["model"].str.contains("Flash") & (frame["num_heads"] == 16) & (frame["batch_size"] == 1)
                     & (frame["isl"] == 4096)]
        at = rows.groupby("step")["latency"].mean()
        grown += layers * (at[524288] - at[131072])
    priced = ChunkAttention(rate).ms(np.array([4096]), np.array([524288])) - \
        ChunkAttention(rate).ms(np.array([4096]), np.array([131072]))
    assert priced == pytest.approx(grown, rel=0.05)
    roofline = chunk_attention(shape, dep)["ns_per_token_kv"]
    assert rate > 3 * roofline  # the indexer's scan is far from the tensor cores' peak


@needs_db
def test_the_roofline_prices_chunks_where_the_tables_hold_no_growth():
    h200 = get_gpu("H200")
    # vLLM's V4 tables sweep one prefix past 16K per chunk; GLM-5.2's SGLang rows barely move with the prefix
    assert measured_chunk_rate(get_shape("deepseek-v4-flash"), Deployment(h200, 4, 4, "fp8", engine="vllm")) is None
    assert measured_chunk_rate(get_shape("glm-5.2"), Deployment(h200, 8, 8, "fp8", engine="sglang")) is None
    assert measured_chunk_rate(get_shape("qwen3-8b"), Deployment(h200, engine="sglang")) is None  # dense: roofline
    v4 = Deployment(h200, 4, 4, "fp8", engine="sglang")
    assert measured_chunk_rate(get_shape("deepseek-v4-flash"), v4, kernels="roofline") is None


@needs_db
def test_the_sidecar_carries_the_measured_rate_and_the_h800_its_twins():
    shape = get_shape("deepseek-v4-flash")
    b, k = np.array([1.0, 64.0]), np.array([4096.0, 65536.0])
    table = estimate_table(shape, Deployment(get_gpu("H800"), 8, 8, "fp8", engine="sglang"), "t", b_axis=b, k_axis=k)
    cost = table.chunk_attention
    assert "h100_sxm / sglang" in cost.source and "the H100's, H800's twin" in cost.source
    h100 = measured_chunk_rate(shape, Deployment(get_gpu("H100"), 8, 8, "fp8", engine="sglang"))
    assert cost.ns_per_token_kv == pytest.approx(h100[0])
    roofline = estimate_table(shape, Deployment(get_gpu("H800"), 8, 8, "fp8", engine="sglang"), "t", b_axis=b,
                              k_axis=k, kernels="roofline").chunk_attention
    assert roofline.source.startswith("compute-bound roofline")


@needs_db
def test_a_gated_deltanet_prompt_token_is_priced_from_the_measured_chunked_kernels():
    """T writes every token's recurrent states (verification keeps each position's); a prompt chunk writes them once.
    Where the database measures the prefill kernels of the layout (Qwen3.5-397B's 2 key and 8 value heads a GPU of
    8 H200s under SGLang), the sidecar's ns_per_token is their price per token less the roofline's attention of a
    2,048-token chunk as T prices it; a 4,096-token prompt then costs that much less. Elsewhere (vLLM's tables, the
    roofline asked for, Kimi Delta Attention, dense models) T's price stands."""
    from hw_profile.estimate.engine_costs import engine_defaults
    from hw_profile.estimate.estimate import (
        PROMPT_CHUNK_TOKENS,
        measured_chunk_token,
        prompt_token_ns,
        roofline_parts,
    )
    from hw_profile.kernels.families import ATTENTION
    from hw_profile.kernels.ops import chunk_token_ns

    q35 = get_shape("qwen3.5-397b-a17b")
    dep = Deployment(get_gpu("H200"), gpus=8, ep=8, dtype="bf16", engine="sglang", costs=engine_defaults("sglang"))
    measured = measured_chunk_token(q35, dep)
    assert measured == chunk_token_ns(q35, "H200", "sglang", "bf16", 8, PROMPT_CHUNK_TOKENS)
    c = np.array([float(PROMPT_CHUNK_TOKENS)])
    as_tokens = roofline_parts(q35, dep, c, np.zeros(1), floors=False)[ATTENTION][0] * 1e6 / c[0]
    assert prompt_token_ns(q35, dep, measured) == pytest.approx(measured[0] - as_tokens)
    assert 0 < measured[0] < as_tokens  # the chunked kernel: cheaper than T's per-token state writes
    block = chunk_attention(q35, dep, None, measured)
    cost = ChunkAttention(block["ns_per_token_kv"], ns_per_token=block["ns_per_token"])
    plain = ChunkAttention(block["ns_per_token_kv"])
    assert (cost.each_ms(np.array([4096]), np.zeros(1)) - plain.each_ms(np.array([4096]), np.zeros(1)))[0] == \
        pytest.approx(4096 * (measured[0] - as_tokens) / 1e6)
    assert measured_chunk_token(q35, dep, kernels="roofline") is None
    assert measured_chunk_token(q35, Deployment(get_gpu("H200"), gpus=8, ep=8, dtype="bf16", engine="vllm")) is None
    k3_dep = Deployment(get_gpu("H200"), gpus=8, ep=8, dtype="bf16", engine="sglang")
    assert measured_chunk_token(get_shape("kimi-k3"), k3_dep) is None
    assert "ns_per_token" not in chunk_attention(get_shape("qwen3-8b"), dep, None, measured)


@pytest.mark.slow
@needs_db
def test_check_says_what_a_prompt_token_costs_beyond_t(tmp_path):
    from hw_profile.estimate.engine_costs import engine_defaults
    from hw_profile.estimate.estimate import write_estimate_set
    from tests.simulator.test_config import ROOT, run_cli

    dep = Deployment(get_gpu("H200"), gpus=8, ep=8, dtype="bf16", engine="sglang", costs=engine_defaults("sglang"))
    table = tmp_path / "q35.csv"
    write_estimate_set(get_shape("qwen3.5-397b-a17b"), dep, table, ["mtp", "dspark"])
    own = ChunkAttention.from_meta(json.loads(table.with_suffix(".json").read_text()), "q35").ns_per_token
    res = run_cli("check", str(ROOT / "scenarios" / "peak.yaml"), "--set", f"hardware.table={table}",
                  "--set", "hardware.gpus_per_replica=8", "--set", "engine.max_running=64")
    assert res.returncode == 0, res.stderr
    assert f"and {own:+,.0f} ns per prompt token beyond T's price of it" in res.stdout
