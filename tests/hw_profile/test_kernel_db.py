"""hw_profile.kernels.database on a small kernel database written here in aiconfigurator-core's on-disk layout
(``<system>/<family>/<engine>/<version>/<table>.parquet``, latency in ms), and once on the real one when installed.

The written latencies are closed forms that multilinear interpolation reproduces exactly (affine in M, bilinear in
N x K; attention trilinear in heads, batch and KV), so every expected number below is computed by hand from them."""

import importlib.util
import shutil
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from hw_profile.errors import HwProfileError
from hw_profile.hardware.shapes import ModelShape, get_shape
from hw_profile.kernels import database as kernel_db
from hw_profile.kernels import ops
from hw_profile.kernels.database import MISSING_EXTRA, coverage, covers
from hw_profile.kernels.grid import Grid
from hw_profile.kernels.source import MeasuredKernels

# a dense GQA model small enough to tabulate every GEMM it needs
TINY = ModelShape("tiny", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=256)

MS, NS, KS = [1, 8, 64], [64, 128, 256], [32, 64, 128]
HEADS, BATCH, STEPS = [4, 16], [1, 4, 16], [1023, 4095]  # KV length = isl (1) + step: 1024 and 4096


def gemm_ms(m, n, k):
    return 0.004 + 2e-5 * m + 1e-8 * n * k


def attn_ms(h, b, kv):
    return 0.003 + 1e-6 * b * kv + 2e-7 * h * b * kv


def allreduce_ms(size):
    return 0.005 + 1e-8 * size


def bmm_ms(tokens):
    return 0.001 + 1e-5 * tokens


def moe_ms(tokens):
    return 0.01 + 1e-4 * tokens


def routed_ms(tokens):
    """A balanced ``moe_ms`` row as the estimate reads it for the tiny models' 4 experts, 2 a token: less what
    each expert that B random-routed tokens leave untouched costs on the rows (their rise from 1 token to E/k = 2,
    over the E - k = 2 experts it adds; ``ops.unbalanced_savings_ms``)."""
    t = np.asarray(tokens, dtype=float)
    per_expert = (moe_ms(2.0) - moe_ms(1.0)) / 2
    return moe_ms(t) - per_expert * (np.minimum(2 * t, 4) - 4 * (1 - 0.5 ** t))


# an MLA + MoE model of DeepSeek-V3's kind: 1 dense layer, then MoE layers with one shared expert
TINY_MLA = ModelShape("tiny-mla", layers=2, hidden=64, heads=4, kv_heads=4, head_dim=16, intermediate=128, vocab=256,
                      family="deepseek_v3", experts=4, experts_per_token=2, shared_experts=1, expert_intermediate=32,
                      dense_layers=1, kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=8, v_head_dim=16)


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)


def _gemm_rows(engine, floor_ms=None):
    rows = []
    for dtype in ("bfloat16", "fp8"):
        for m in MS:
            for n in NS:
                for k in KS:
                    lat = gemm_ms(m, n, k)
                    if floor_ms is not None and m == 1:
                        lat = max(lat, floor_ms)
                    rows.append(dict(framework=engine, version="x", device="NVIDIA H200", op_name="gemm",
                                     kernel_source="k", gemm_dtype=dtype, m=m, n=n, k=k, latency=lat))
    return rows


@pytest.fixture
def db(tmp_path):
    """H200 with vllm 0.24.0 (GEMM with a 0.18 ms floor at M = 1 in fp8, attention (an fp8 cache at half the bf16
    cache's time), all-reduce) and sglang 0.5.14 (GEMM only: the reference the floor is checked against)."""
    base = tmp_path / "data"
    sysdir = base / "h200_sxm"
    vllm_rows = [r for r in _gemm_rows("VLLM", floor_ms=0.18) if r["gemm_dtype"] == "fp8"]
    vllm_rows += [r for r in _gemm_rows("VLLM") if r["gemm_dtype"] == "bfloat16"]
    _write(sysdir / "gemm/vllm/0.24.0/gemm_perf.parquet", vllm_rows)
    _write(sysdir / "gemm/sglang/0.5.14/gemm_perf.parquet", _gemm_rows("SGLang"))
    attn = []
    for kvh in (1, 2):
        for h in HEADS:
            for b in BATCH:
                for s in STEPS:
                    attn.append(dict(framework="VLLM", version="0.24.0", device="NVIDIA H200",
                                     op_name="generation_attention", kernel_source="fa3", batch_size=b, isl=1,
                                     num_heads=h // (2 // kvh), num_key_value_heads=kvh, head_dim=16, beam_width=1,
                                     attn_dtype="bfloat16", kv_cache_dtype="bfloat16", step=s, window_size=0,
                                     latency=attn_ms(h // (2 // kvh), b, s + 1)))
    attn += [{**row, "kv_cache_dtype": "fp8", "latency": row["latency"] / 2} for row in attn]
    _write(sysdir / "attention/vllm/0.24.0/generation_attention_perf.parquet", attn)
    ar = [dict(framework="vLLM", version="0.24.0", device="NVIDIA H200", op_name="all_reduce",
               kernel_source="vLLM_custom_graph", allreduce_dtype="bfloat16", num_gpus=2, message_size=size,
               latency=allreduce_ms(size), backend="vllm_graph") for size in (64, 1024, 16384)]
    _write(sysdir / "comm/vllm/0.24.0/custom_allreduce_perf.parquet", ar)
    mla = [dict(framework="VLLM", version="0.24.0", device="NVIDIA H200", op_name="mla_generation",
                kernel_source="flashmla", mla_dtype="bfloat16", kv_cache_dtype="bfloat16", num_heads=h, batch_size=b,
                isl=1, tp_size=1, step=s, latency=attn_ms(h, b, s + 1)) for h in HEADS for b in BATCH for s in STEPS]
    _write(sysdir / "mla/vllm/0.24.0/generation_mla_perf.parquet", mla)
    bmm = [dict(framework="VLLM", version="0.24.0", device="NVIDIA H200", op_name=op, kernel_source="torch_bmm",
                bmm_dtype="bfloat16", num_tokens=t, num_heads=4, latency=bmm_ms(t))
           for op in ("mla_gen_pre", "mla_gen_post") for t in (1, 64)]
    _write(sysdir / "mla_bmm/vllm/0.24.0/mla_bmm_perf.parquet", bmm)
    moe = [dict(framework="VLLM", version="0.24.0", device="NVIDIA H200", op_name="moe", kernel_source="triton",
                moe_dtype="bfloat16", num_tokens=t, hidden_size=64, inter_size=32, topk=2, num_experts=4,
                moe_tp_size=1, moe_ep_size=1, distribution=dist, latency=moe_ms(t) * (1 if dist == "balanced" else 2))
           for t in (1, 16, 256) for dist in ("balanced", "power_law_1.01")]
    _write(sysdir / "moe/vllm/0.24.0/moe_perf.parquet", moe)
    return base


def _step(db, tokens, requests, context, dtype="bf16", gpus=1, shape=TINY):
    return ops.step_times(shape, "H200", "vllm", dtype, gpus, None, np.asarray(tokens, float),
                          np.asarray(requests, float), np.asarray(context, float), data_dir=db)


def _gemm_total(m, gpus=1):
    """Every GEMM of TINY (per GPU), by hand: qkv, o, gate_up, down per layer."""
    s, tp = TINY, gpus
    per_layer = (gemm_ms(m, (s.heads // tp + 2 * max(1, s.kv_heads // tp)) * s.head_dim, s.hidden)
                 + gemm_ms(m, s.hidden, s.heads * s.head_dim // tp)
                 + gemm_ms(m, 2 * s.intermediate // tp, s.hidden) + gemm_ms(m, s.hidden, s.intermediate // tp))
    return s.layers * per_layer


def test_coverage_and_covers(db):
    assert coverage(db) == [("H200", "vllm", "0.24.0")]  # sglang has GEMMs but no attention: not covered
    assert covers("h200", "VLLM", db) and not covers("H200", "sglang", db) and not covers("B200", "vllm", db)


def test_grid_returns_measured_values_and_hand_computed_ones_between():
    frame = pd.DataFrame([dict(m=m, n=n, k=k, latency=gemm_ms(m, n, k)) for m in MS for n in NS for k in KS])
    grid = Grid.from_frame(frame, ["m", "n", "k"])
    m, n, k = np.meshgrid(MS, NS, KS, indexing="ij")
    val, inside = grid.lookup(m.ravel(), n.ravel(), k.ravel())
    np.testing.assert_allclose(val, gemm_ms(m.ravel(), n.ravel(), k.ravel()), rtol=1e-12)
    assert inside.all()
    # halfway between M = 8 and 64 and N = 128 and 256 at K = 128: the average of the four written corners
    corners = [gemm_ms(a, b, 128) for a in (8, 64) for b in (128, 256)]
    val, inside = grid.lookup(36, 192, 128)
    assert val == pytest.approx(sum(corners) / 4, rel=1e-12) and inside.all()


def test_grid_flags_extrapolation_and_unmeasured_cells():
    frame = pd.DataFrame([dict(b=b, kv=kv, latency=attn_ms(4, b, kv)) for b in (1, 4, 16) for kv in (1024, 4096)
                          if not (b == 16 and kv == 4096)])  # the triangle the collector leaves
    grid = Grid.from_frame(frame, ["b", "kv"])
    val, inside = grid.lookup([4, 4, 32, 16, 4], [4096, 8192, 1024, 4096, 2048])
    assert list(inside) == [True, False, False, False, True]
    # beyond the last point: the line through the last two (attn_ms is linear in each axis, so exact)
    assert val[1] == pytest.approx(attn_ms(4, 4, 8192), rel=1e-9)
    assert val[2] == pytest.approx(attn_ms(4, 32, 1024), rel=1e-9)
    # the missing corner is filled along KV from its two measured neighbours
    assert val[3] == pytest.approx(attn_ms(4, 16, 4096), rel=1e-9)


def test_past_the_edge_a_kernel_is_never_faster_than_at_the_edge():
    """A last segment that slopes down (a kernel switching its tiling) is not continued toward zero: the edge's
    value is held, along any axis, while one that slopes up still continues its line."""
    heads = (8, 32, 64, 96)
    ms = {8: 1.0, 32: 2.0, 64: 3.0, 96: 2.5}  # the 96-head kernel is faster than the 64-head one, as measured
    frame = pd.DataFrame([dict(h=h, b=b, latency=ms[h] * b) for h in heads for b in (1, 4)])
    grid = Grid.from_frame(frame, ["h", "b"])
    val, inside = grid.lookup([96, 128, 256, 128, 48], [1, 1, 1, 8, 1])
    assert list(inside) == [True, False, False, False, True]
    assert val[0] == val[1] == val[2] == pytest.approx(2.5)  # the line through 64 and 96: 2.0 at 128 heads, 0 at 256
    assert val[3] == pytest.approx(2.5 * 8)  # past both edges: the batch axis still continues its rising line
    assert val[4] == pytest.approx(2.5)  # inside, measured data as they are
    rising = Grid.from_frame(frame.assign(latency=frame["h"] * frame["b"]), ["h", "b"])
    assert rising.lookup(128, 1)[0] == pytest.approx(128.0)


def test_step_is_the_sum_of_written_kernels(db):
    r = _step(db, [1, 4], [1, 4], [4096, 1024])
    assert r.inside.all()
    np.testing.assert_allclose(r.parts["gemm"], [_gemm_total(1), _gemm_total(4)], rtol=1e-9)
    np.testing.assert_allclose(r.parts["attention"], [TINY.layers * attn_ms(4, 1, 4096),
                                                      TINY.layers * attn_ms(4, 4, 1024)], rtol=1e-9)
    np.testing.assert_allclose(r.parts["lm_head"], [gemm_ms(1, 256, 64), gemm_ms(4, 256, 64)], rtol=1e-9)
    assert not r.parts["comm"].any()  # one GPU: no all-reduce
    np.testing.assert_allclose(r.ms, sum(r.parts.values()))
    assert "data" in r.source and "h200_sxm / vllm 0.24.0" in r.source


def test_q_tokens_per_request_share_one_read_of_the_kv(db):
    """(a): 16 tokens from 4 requests (q = 4) over 4096 KV cost the kernel for 4 sequences with 4 x 4 query heads,
    the written row (heads 16, batch 4, step 4095), not 16 one-query sequences (heads 4, batch 16)."""
    r = _step(db, [16], [4], [4096])
    assert r.parts["attention"][0] == pytest.approx(TINY.layers * attn_ms(16, 4, 4096), rel=1e-12)
    per_token = TINY.layers * attn_ms(4, 16, 4096)  # what pricing qR sequences would give
    assert r.parts["attention"][0] < per_token
    assert r.inside.all()
    assert any(n.startswith("(a)") for n in r.notes)


def test_an_fp8_cache_reads_the_engines_fp8_cache_rows(db):
    """A deployment's fp8 KV cache (``--kv-dtype fp8``) prices attention from the engine's fp8-cache rows, the
    default from its bf16 ones; an engine table without fp8 rows (this MLA table) keeps bf16 and says so."""
    plain = _step(db, [4], [4], [1024])
    fp8 = _step(db, [4], [4], [1024], shape=replace(TINY, kv_dtype="fp8"))
    assert plain.parts["attention"][0] == pytest.approx(TINY.layers * attn_ms(4, 4, 1024), rel=1e-12)
    assert fp8.parts["attention"][0] == pytest.approx(plain.parts["attention"][0] / 2, rel=1e-12)
    np.testing.assert_allclose(fp8.parts["gemm"], plain.parts["gemm"])
    mla = _step(db, [4], [4], [1024], shape=replace(TINY_MLA, kv_dtype="fp8"))
    assert mla.parts["attention"][0] == pytest.approx(_step(db, [4], [4], [1024], shape=TINY_MLA).parts["attention"][0])
    assert any("no fp8-cache attention rows" in n for n in mla.notes)


def test_outside_measured_data_is_extrapolated_and_flagged(db):
    r = _step(db, [1, 32, 1], [1, 32, 1], [4096, 1024, 16384])
    assert list(r.inside) == [True, False, False]
    assert r.parts["attention"][2] == pytest.approx(TINY.layers * attn_ms(4, 1, 16384), rel=1e-9)
    assert r.parts["attention"][1] == pytest.approx(TINY.layers * attn_ms(4, 32, 1024), rel=1e-9)
    assert any(n.startswith("(b)") and "decode attention" in n for n in r.notes)


def test_gemm_floor_is_replaced_by_the_other_engines_data(db):
    """(c): vllm's fp8 GEMMs sit on a 0.18 ms floor at M = 1; sglang's data for the same shapes replaces them."""
    r = _step(db, [1, 8], [1, 8], [1024, 1024], dtype="fp8")
    np.testing.assert_allclose(r.parts["gemm"], [_gemm_total(1), _gemm_total(8)], rtol=1e-9)
    floored = 0.18 * 4 * TINY.layers
    assert r.parts["gemm"][0] < floored / 10
    note = next(n for n in r.notes if n.startswith("(c)"))
    assert "sglang 0.5.14" in note and "9 of 27" in note  # the M = 1 cells (3 N x 3 K) of the 27 written
    # bf16 has no floor: nothing replaced, and the note says so
    r16 = _step(db, [1], [1], [1024])
    assert any(n.startswith("(c) No implausible") for n in r16.notes)


def test_mla_moe_step_is_the_sum_of_written_kernels(db):
    """16 tokens from 4 requests over 1024 KV: MLA decode at 4 sequences with 4 x 4 heads (the one latent KV read
    once per request), its projections and absorption matmuls at 16 tokens, the MoE kernel at 16 tokens."""
    s = TINY_MLA
    r = _step(db, [16], [4], [1024], shape=s)
    assert r.inside.all()
    assert r.parts["attention"][0] == pytest.approx(s.layers * attn_ms(16, 4, 1024), rel=1e-12)
    m = 16
    attn_gemms = gemm_ms(m, 32 + 32 + 8, 64) + gemm_ms(m, 4 * 24, 32) + gemm_ms(m, 64, 4 * 16)
    dense_mlp = gemm_ms(m, 2 * 128, 64) + gemm_ms(m, 64, 128)
    shared = gemm_ms(m, 2 * 32, 64) + gemm_ms(m, 64, 32)
    expected = s.layers * attn_gemms + 1 * dense_mlp + 1 * shared + s.layers * 2 * bmm_ms(m)
    assert r.parts["gemm"][0] == pytest.approx(expected, rel=1e-9)
    assert r.parts["moe"][0] == pytest.approx(1 * routed_ms(16), rel=1e-12)  # balanced routing rows
    assert r.parts["lm_head"][0] == pytest.approx(gemm_ms(m, 256, 64), rel=1e-12)
    assert any("balanced routing" in n for n in r.notes)


# DeepSeek-V4's kind: 1 window-only, 1 CSA and 1 HCA layer, fp4 experts, window 8, CSA ratio 4 x top-16 = 64
TINY_V4 = ModelShape("tiny-v4-flash", layers=3, hidden=64, heads=4, kv_heads=1, head_dim=16, intermediate=0,
                     vocab=256, family="deepseek_v4", experts=4, experts_per_token=2, shared_experts=1,
                     expert_intermediate=32, q_lora_rank=32, sliding_window=8, csa_layers=1, hca_layers=1,
                     csa_ratio=4, hca_ratio=128, index_heads=2, index_head_dim=8, index_topk=16, o_lora_rank=16,
                     o_groups=2, expert_dtype="fp4")


def csa_ms(b, kv):
    return 0.02 + 1e-5 * b + 1e-7 * b * kv


def hca_ms(b, kv):
    return 0.01 + 2e-5 * b + 3e-8 * b * kv


@pytest.fixture
def db_v4(db):
    sysdir = db / "h200_sxm"
    for kind, fn, ratio in (("csa", csa_ms, 4), ("hca", hca_ms, 128)):
        rows = [dict(framework="VLLM", version="0.24.0", device="NVIDIA H200", op_name=f"dsv4_{kind}_generation_module",
                     kernel_source="FLASHMLA_SPARSE_DSV4", model=m, architecture="DeepseekV4ForCausalLM",
                     mla_dtype="bfloat16", kv_cache_dtype="fp8", gemm_type="fp8_block", num_heads=4, batch_size=b,
                     isl=1, tp_size=1, step=kv - 1, compress_ratio=ratio,
                     latency=fn(b, kv) * (1 if "Flash" in m else 3))
                for m in ("sgl-project/DeepSeek-V4-Flash-FP8", "deepseek-ai/DeepSeek-V4-Pro")
                for b in (1, 4, 16) for kv in (8, 64, 1024, 4096)]
        _write(sysdir / f"sparse_attention/vllm/0.24.0/dsv4_{kind}_generation_module_perf.parquet", rows)
    mhc = [dict(framework="VLLM", version="0.24.0", device="NVIDIA H200", op_name=op, kernel_source=f"mhc_{op}",
                architecture="DeepseekV4ForCausalLM", num_tokens=t, num_sites=2, hc_mult=4, hidden_size=64,
                sinkhorn_iters=20, latency=0.002 + 1e-6 * t) for op in ("pre", "post") for t in (1, 64)]
    _write(sysdir / "mhc/vllm/0.24.0/mhc_module_perf.parquet", mhc)
    moe = pd.read_parquet(sysdir / "moe/vllm/0.24.0/moe_perf.parquet")
    moe.loc[moe["moe_dtype"] == "bfloat16", "moe_dtype"] = "w4a8_mxfp4_mxfp8"
    moe.to_parquet(sysdir / "moe/vllm/0.24.0/moe_perf.parquet")
    return db


def test_v4_context_growth_is_read_once_per_request(db_v4):
    """16 tokens from 4 requests over 4096: each module at 16 tokens over the context where a query's own reads
    saturate (CSA 4 x 16 = 64, HCA the window 8), plus the growth beyond it at 4 requests; the window-only layer is
    priced as HCA; experts from the fp4 (MXFP4 x FP8) rows; one mHC pre and post per layer."""
    s = TINY_V4
    r = _step(db_v4, [16], [4], [4096], shape=s)  # bf16 shared experts: the written GEMMs
    assert r.inside.all()
    csa = csa_ms(16, 64) + csa_ms(4, 4096) - csa_ms(4, 64)
    hca = hca_ms(16, 8) + hca_ms(4, 4096) - hca_ms(4, 8)
    assert r.parts["attention"][0] == pytest.approx(1 * csa + 2 * hca, rel=1e-9)
    assert r.parts["attention"][0] < 1 * csa_ms(16, 4096) + 2 * hca_ms(16, 4096)  # what 16 sequences would cost
    assert r.parts["moe"][0] == pytest.approx(3 * routed_ms(16), rel=1e-12)  # every V4 layer is an MoE layer
    assert r.parts["mhc"][0] == pytest.approx(3 * 2 * (0.002 + 1e-6 * 16), rel=1e-12)
    shared = gemm_ms(16, 2 * 32, 64) + gemm_ms(16, 64, 32)  # the attention projections are inside the modules
    assert r.parts["gemm"][0] == pytest.approx(3 * shared, rel=1e-9)


def test_v4_without_fp4_experts_is_one_line(db_v4):
    """The issue's (d): V4's fp4 experts need fp4 MoE rows (none on Hopper in the real database)."""
    path = db_v4 / "h200_sxm/moe/vllm/0.24.0/moe_perf.parquet"
    moe = pd.read_parquet(path)
    moe.assign(moe_dtype="fp8_block").to_parquet(path)
    with pytest.raises(HwProfileError) as exc:
        _step(db_v4, [1], [1], [64], shape=TINY_V4)
    assert "\n" not in str(exc.value) and "no fp4 expert data" in str(exc.value) and "fp8_block" in str(exc.value)


# DeepSeek sparse attention: TINY_MLA plus an indexer of 2 x 8 selecting the top 16 context tokens
TINY_DSA = replace(TINY_MLA, name="tiny-dsa", family="deepseek_v32", index_heads=2, index_head_dim=8, index_topk=16)


def dsa_ms(b, kv):
    return 0.015 + 3e-5 * b + 2e-7 * b * kv


@pytest.fixture
def db_dsa(db):
    """The DSA decode module for DeepSeek-V3.2 (as written) and GLM-5 (twice as slow: another model's rows)."""
    rows = [dict(framework="VLLM", version="0.24.0", device="NVIDIA H200", op_name="dsa_generation_module",
                 kernel_source="FLASHMLA_SPARSE", model=m, architecture="x", mla_dtype="bfloat16",
                 kv_cache_dtype="bfloat16", gemm_type="bfloat16", num_heads=4, batch_size=b, isl=1, tp_size=1,
                 step=kv - 1, latency=dsa_ms(b, kv) * (2 if "GLM" in m else 1))
            for m in ("deepseek-ai/DeepSeek-V3.2", "zai-org/GLM-5") for b in (1, 4, 16) for kv in (8, 16, 1024, 4096)]
    _write(db / "h200_sxm/sparse_attention/vllm/0.24.0/dsa_generation_module_perf.parquet", rows)
    return db


def test_dsa_query_tokens_read_their_own_top_k_and_share_the_indexer_scan(db_dsa):
    """16 tokens from 4 requests over 4096: the module at 16 tokens over the top-k's 16 context tokens, plus its
    growth from 16 to 4096 at 4 requests; the attention projections and the indexer's are inside the module (only
    the dense MLP and the shared expert stay GEMMs). Under the top-k, every query token pays its whole context."""
    s = TINY_DSA
    r = _step(db_dsa, [16, 16], [4, 4], [4096, 8], shape=s)
    assert r.inside.all()
    long = dsa_ms(16, 16) + dsa_ms(4, 4096) - dsa_ms(4, 16)
    assert r.parts["attention"][0] == pytest.approx(s.layers * long, rel=1e-9)
    assert r.parts["attention"][1] == pytest.approx(s.layers * dsa_ms(16, 8), rel=1e-9)
    assert r.parts["attention"][0] < s.layers * dsa_ms(16, 4096)  # what 16 one-token sequences would cost
    m = 16
    dense_mlp = gemm_ms(m, 2 * 128, 64) + gemm_ms(m, 64, 128)
    shared = gemm_ms(m, 2 * 32, 64) + gemm_ms(m, 64, 32)
    assert r.parts["gemm"][0] == pytest.approx(1 * dense_mlp + 1 * shared, rel=1e-9)
    assert any("DeepSeek-V3.2" in n and "top 16 rows" in n for n in r.notes)
    glm = _step(db_dsa, [16], [4], [4096], shape=replace(s, family="glm_moe_dsa"))
    assert glm.parts["attention"][0] == pytest.approx(2 * s.layers * long, rel=1e-9)  # GLM-5's own rows


def test_dsa_without_its_module_is_one_line(db):
    with pytest.raises(HwProfileError) as exc:
        _step(db, [1], [1], [64], shape=TINY_DSA)
    assert "\n" not in str(exc.value) and "no DeepSeek sparse attention decode module data" in str(exc.value)


def test_a_windowed_layer_is_looked_up_at_its_window(db):
    """TINY with its first layer windowed at 1,024 tokens (every second layer global): over 4,096 context tokens
    the global layer's attention is the kernel's at 4,096, the windowed one's at 1,024; under the window both
    read the whole context."""
    s = replace(TINY, name="tiny-sw", sliding_window=1024, sliding_pattern=2)
    r = _step(db, [4, 4], [4, 4], [4096, 1024], shape=s)
    assert r.inside.all()
    np.testing.assert_allclose(r.parts["attention"], [attn_ms(4, 4, 4096) + attn_ms(4, 4, 1024),
                                                      2 * attn_ms(4, 4, 1024)], rtol=1e-9)


def test_gemm_floor_without_another_engine_falls_back_to_the_roofline(tmp_path):
    """(c) where no other engine measured the dtype: a floored cell is held against the GEMM's H200 roofline (at the
    roofline model's efficiencies, never under GEMM_MIN_MS) and replaced by it."""
    base = tmp_path / "data"
    _write(base / "h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet",
           [r for r in _gemm_rows("VLLM", floor_ms=0.18) if r["gemm_dtype"] == "fp8"])
    gg = kernel_db.gemm_grid(base, "h200_sxm", "vllm", "0.24.0", "fp8")
    assert "roofline" in gg.note and "9 of 27" in gg.note
    val, _ = gg.grid.lookup(np.array([1, 8]), np.array([256, 256]), np.array([128, 128]))
    # M = 1, N = 256, K = 128 in fp8: 33 KB of weights, far under the kernel floor, so GEMM_MIN_MS
    assert val[0] == pytest.approx(kernel_db.GEMM_MIN_MS)
    assert val[1] == pytest.approx(gemm_ms(8, 256, 128), rel=1e-12)  # not floored: kept
    # a big GEMM's roofline is its weight read: M = 64, N = K = 8192 in fp8 is 67 MB at 0.8 x 4.8 TB/s
    roof = kernel_db._roofline_grid("h200_sxm", "fp8", np.meshgrid([64.0], [8192.0], [8192.0], indexing="ij"))
    expected = (64 * 8192 + 8192 * 8192 + 64 * 8192 * 2) / (0.8 * 4.8e12) * 1e3  # fp8 in, bf16 out
    assert roof.item() == pytest.approx(max(expected, 2 * 64 * 8192**2 / (0.6 * 1978.9e12) * 1e3), rel=1e-9)


def test_tensor_parallel_step_adds_two_all_reduces_per_layer(db):
    r = _step(db, [4], [4], [1024], gpus=2)
    assert r.parts["comm"][0] == pytest.approx(2 * TINY.layers * allreduce_ms(4 * TINY.hidden), rel=1e-9)
    np.testing.assert_allclose(r.parts["gemm"], [_gemm_total(4, gpus=2)], rtol=1e-9)
    # 2 local heads over 1 KV head: the kv_heads = 1 rows
    assert r.parts["attention"][0] == pytest.approx(TINY.layers * attn_ms(2, 4, 1024), rel=1e-9)


def test_errors_are_one_line(db, monkeypatch):
    with pytest.raises(HwProfileError) as exc:
        ops.step_times(TINY, "B200", "vllm", "bf16", 1, None, np.ones(1), np.ones(1), np.ones(1), data_dir=db)
    assert "\n" not in str(exc.value) and "H200/vllm 0.24.0" in str(exc.value)
    monkeypatch.setattr(kernel_db, "PACKAGE", "aiconfigurator_core_absent_for_this_test")
    with pytest.raises(HwProfileError) as exc:
        coverage()
    assert str(exc.value) == MISSING_EXTRA
    with pytest.raises(HwProfileError, match="optional extra"):
        ops.step_times(TINY, "H200", "vllm", "bf16", 1, None, np.ones(1), np.ones(1), np.ones(1))
    assert covers("H200", "vllm") is False  # a caller may fall back to another source
    with pytest.raises(HwProfileError, match="tokens >= requests"):
        _step(db, [2], [4], [10])
    with pytest.raises(HwProfileError) as exc:  # a head layout the table does not hold
        _step(db, [1], [1], [10], shape=ModelShape("odd", layers=1, hidden=64, heads=8, kv_heads=8, head_dim=16,
                                                   intermediate=128, vocab=256))
    assert "\n" not in str(exc.value) and "num_key_value_heads=8" in str(exc.value)


def wide_ms(tokens):
    return 0.02 + 5e-5 * tokens


DISPATCH_US, COMBINE_US = (lambda t: 10.0 + 0.5 * t), (lambda t: 12.0 + 1.0 * t)


@pytest.fixture
def db_wide(db):
    """SGLang on the H200 with data-parallel attention over DeepEP: MLA rows (so sglang is covered), the fused MoE
    kernel at ep 1, 2 and 4 (sglang 0.5.14), DeepEP's expert kernel at ep 4 only, uniform and skewed (0.5.10), and
    DeepEP's low-latency exchange: over 1 and 2 nodes for 8 experts in 0.5.6.post2, over 1 node for 4 in 0.5.12.
    No all-reduce data: data-parallel attention has none to price."""
    sysdir = db / "h200_sxm"
    mla = pd.read_parquet(sysdir / "mla/vllm/0.24.0/generation_mla_perf.parquet")
    _write(sysdir / "mla/sglang/0.5.14/generation_mla_perf.parquet", mla.to_dict("records"))
    base = dict(framework="SGLang", device="NVIDIA H200", hidden_size=64, inter_size=32, topk=2, num_experts=4,
                moe_tp_size=1)
    fused = [dict(base, version="0.5.14", op_name="moe", kernel_source="sglang_fused_moe_triton", moe_dtype="bfloat16",
                  num_tokens=t, moe_ep_size=ep, distribution="balanced", latency=moe_ms(t))
             for ep in (1, 2, 4) for t in (1, 16, 256)]
    _write(sysdir / "moe/sglang/0.5.14/moe_perf.parquet", fused)
    wide = [dict(base, version="0.5.10", op_name="moe_generation", kernel_source="deepepmoe", moe_dtype="bfloat16",
                 num_tokens=t, moe_ep_size=4, distribution=dist, latency=wide_ms(t) * (1 if dist == "uniform" else 3))
            for t in (4, 64, 1024) for dist in ("power_law_1.2", "uniform")]
    _write(sysdir / "moe/sglang/0.5.10/wideep_generation_moe_perf.parquet", wide)
    for version, nodes, experts in (("0.5.6.post2", (1, 2), 8), ("0.5.12", (1,), 4)):
        rows = [dict(framework="sglang", version=version, device="NVIDIA H200", op_name="ll", kernel_source="deepep",
                     node_num=n, hidden_size=64, num_token=t, num_topk=2, num_experts=experts,
                     dispatch_avg_t_us=DISPATCH_US(t) * n, combine_avg_t_us=COMBINE_US(t) * n,
                     dispatch_bandwidth_gbps=1.0, combine_bandwidth_gbps=1.0)
                for n in nodes for t in (2, 4, 8, 32)]
        _write(sysdir / f"comm/sglang/{version}/wideep_deepep_ll_perf.parquet", rows)
    return db


def test_sglangs_deepep_expert_kernel_prices_the_group_where_measured(db_wide):
    """Uniform routing rows of DeepEP's expert kernel (not the skewed ones), from the older version that has the
    table, at the group's tokens; the fused kernel where the expert kernel has no rows for the group."""
    s, tokens = TINY_MLA, np.array([16.0, 100.0])
    wide = ops.moe_times(s, "H200", "sglang", "bf16", 4, tokens, wide_ep=True, data_dir=db_wide)
    np.testing.assert_allclose(wide.parts["moe"], (s.layers - s.dense_layers) * wide_ms(tokens), rtol=1e-12)
    assert wide.inside.all() and any("0.5.10" in n for n in wide.notes)
    fused = ops.moe_times(s, "H200", "sglang", "bf16", 4, tokens, data_dir=db_wide)
    np.testing.assert_allclose(fused.parts["moe"], routed_ms(tokens), rtol=1e-12)
    fallback = ops.moe_times(s, "H200", "sglang", "bf16", 2, tokens, wide_ep=True, data_dir=db_wide)
    np.testing.assert_allclose(fallback.parts["moe"], routed_ms(tokens), rtol=1e-12)
    assert any("no wideep_generation_moe_perf rows" in n for n in fallback.notes)


def test_an_expert_parallel_size_the_database_lacks_takes_the_nearest_at_the_same_tokens_per_rank(db_wide):
    """EP8 (and EP3), measured by neither expert kernel: the DeepEP kernel's EP4 rows at the same tokens per rank
    (tokens x 4 / ep), with a note; an exact size is preferred even from the fused kernel (EP2)."""
    s, tokens = TINY_MLA, np.array([16.0, 100.0])
    layers = s.layers - s.dense_layers
    for ep in (8, 3):
        r = ops.moe_times(s, "H200", "sglang", "bf16", ep, tokens, wide_ep=True, data_dir=db_wide)
        np.testing.assert_allclose(r.parts["moe"], layers * wide_ms(tokens * 4 / ep), rtol=1e-12)
        assert any(f"no rows at ep {ep}; those at ep 4" in n for n in r.notes)
        assert not any("price them instead" in n for n in r.notes)  # the exact attempt's note is dropped
    exact = ops.moe_times(s, "H200", "sglang", "bf16", 2, tokens, wide_ep=True, data_dir=db_wide)
    np.testing.assert_allclose(exact.parts["moe"], routed_ms(tokens), rtol=1e-12)
    assert not any("no rows at ep" in n for n in exact.notes)


def test_deepeps_measured_exchange_by_node_count(db_wide):
    """EP16 is two 8-GPU nodes: only 0.5.6.post2 measured two, for 8 experts (the nearest to the shape's 4). Each
    layer's dispatch and combine interpolate in the rank's tokens, and below the fewest measured tokens hold the
    first point's time rather than continue the line down."""
    s = TINY_MLA
    ex = ops.exchange_times(s, "H200", "sglang", 16, np.array([3.0, 20.0, 1.0]), data_dir=db_wide)
    moe_layers = s.layers - s.dense_layers
    np.testing.assert_allclose(ex.parts["dispatch"], moe_layers * 2 * DISPATCH_US(np.array([3.0, 20.0, 2.0])) * 1e-3)
    np.testing.assert_allclose(ex.parts["combine"], moe_layers * 2 * COMBINE_US(np.array([3.0, 20.0, 2.0])) * 1e-3)
    np.testing.assert_allclose(ex.ms, ex.parts["dispatch"] + ex.parts["combine"])
    assert list(ex.inside) == [True, True, False]
    assert any("for 8 are used" in n for n in ex.notes) and any("0.5.6.post2" in n for n in ex.notes)
    one = ops.exchange_times(s, "H200", "sglang", 8, np.array([8.0]), data_dir=db_wide)
    assert one.ms[0] == pytest.approx(moe_layers * (DISPATCH_US(8) + COMBINE_US(8)) * 1e-3)  # 0.5.12: 4 experts
    assert not any("are used" in n for n in one.notes)
    for ep in (4, 12, 24):  # not whole 8-GPU nodes, or three nodes (not measured)
        assert ops.exchange_times(s, "H200", "sglang", ep, np.array([8.0]), data_dir=db_wide) is None
    assert ops.exchange_times(s, "H200", "vllm", 16, np.array([8.0]), data_dir=db_wide) is None


def test_a_rack_scale_nvlink_part_keeps_its_exchange_off_the_measured_nodes(db_wide):
    """The DeepEP rows time 8-GPU nodes over RDMA; a part whose NVLink domain spans a rack (``nvlink_domain`` 72: the
    GB200) exchanges over NVLink instead, so the same rows under its system folder price nothing."""
    shutil.copytree(db_wide / "h200_sxm", db_wide / "gb200")
    tokens = np.array([8.0])
    assert ops.exchange_times(TINY_MLA, "H200", "sglang", 16, tokens, data_dir=db_wide) is not None
    assert ops.exchange_times(TINY_MLA, "GB200", "sglang", 16, tokens, data_dir=db_wide) is None


def test_data_parallel_attention_takes_the_group_at_its_busiest_ranks_load(db_wide):
    """Under dp the rank's own step prices attention and the dense part on one GPU; the experts come from the
    group's DeepEP kernel at ep x the tokens x the busiest rank's load (the kernel's time at that load, not its time
    at the mean times the load), with no all-reduce for the group (the database has none for 4 GPUs here, and none
    is needed)."""
    from hw_profile.estimate.engine_costs import engine_defaults, imbalance_factor
    from hw_profile.estimate.estimate import Deployment, kernel_times
    from hw_profile.hardware.gpus import get_gpu

    src = MeasuredKernels(data_dir=db_wide)
    dep = Deployment(get_gpu("H200"), gpus=4, ep=4, dtype="bf16", parallel="dp", engine="sglang",
                     costs=engine_defaults("sglang"))
    b = np.array([4.0, 64.0])
    kt = kernel_times(src, TINY_MLA, dep, b, b, np.full(b.shape, 1024.0))
    busiest = imbalance_factor(b * 4 * TINY_MLA.experts_per_token, 4, dep.costs)
    assert (busiest > 1).all()
    np.testing.assert_allclose(kt.parts["moe"], wide_ms(b * 4 * busiest), rtol=1e-12)
    own = ops.step_times(TINY_MLA, "H200", "sglang", "bf16", 1, 1, b, b, np.full(b.shape, 1024.0), data_dir=db_wide)
    np.testing.assert_allclose(kt.parts["attention"], own.parts["attention"])
    assert not any("tp 1 x ep 1" in n for n in kt.notes)  # the one-GPU step's own MoE line is dropped


def test_tensor_parallel_experts_also_take_the_busiest_ranks_load_in_tokens(db_wide):
    """TP4 with the experts over EP4: the fused MoE kernel at B x the busiest rank's load, not its time at B times
    that load (the written kernel is affine in tokens, so the two differ by its fixed part)."""
    from hw_profile.estimate.engine_costs import engine_defaults, imbalance_factor
    from hw_profile.estimate.estimate import Deployment, kernel_times
    from hw_profile.hardware.gpus import get_gpu

    ar = [dict(framework="SGLang", version="0.5.14", device="NVIDIA H200", op_name="all_reduce",
               kernel_source="sglang_custom", allreduce_dtype="bfloat16", num_gpus=4, message_size=size,
               latency=allreduce_ms(size)) for size in (64, 1024, 16384)]
    _write(db_wide / "h200_sxm/comm/sglang/0.5.14/custom_allreduce_perf.parquet", ar)
    src = MeasuredKernels(data_dir=db_wide)
    dep = Deployment(get_gpu("H200"), gpus=4, ep=4, dtype="bf16", parallel="tp", engine="sglang",
                     costs=engine_defaults("sglang"))
    b = np.array([4.0, 64.0])
    shape = replace(TINY_MLA, name="tiny-mla-16", heads=16)  # 4 heads a GPU: the written MLA rows' count
    kt = kernel_times(src, shape, dep, b, b, np.full(b.shape, 1024.0))
    busiest = imbalance_factor(b * shape.experts_per_token, 4, dep.costs)
    np.testing.assert_allclose(kt.parts["moe"], routed_ms(b * busiest), rtol=1e-12)
    assert not np.allclose(kt.parts["moe"], moe_ms(b) * busiest)
    assert kt.parts["comm"][0] > 0  # the tensor-parallel step keeps its all-reduces


def test_the_shared_experts_alone_from_the_gemm_table(db_wide):
    """What a single-batch layer hides its dispatch under, measured: the shared expert's two GEMMs in every MoE
    layer, and nothing for a dense model."""
    from hw_profile.kernels.ops import SHARED_EXPERT_GEMMS

    m = np.array([1.0, 8.0, 64.0])
    r = ops.gemm_times(TINY_MLA, "H200", "sglang", "bf16", 1, m, SHARED_EXPERT_GEMMS, data_dir=db_wide)
    moe_layers = TINY_MLA.layers - TINY_MLA.dense_layers
    np.testing.assert_allclose(r.ms, moe_layers * (gemm_ms(m, 2 * 32, 64) + gemm_ms(m, 64, 32)), rtol=1e-12)
    dense = ops.gemm_times(TINY, "H200", "sglang", "bf16", 1, m, SHARED_EXPERT_GEMMS, data_dir=db_wide)
    np.testing.assert_array_equal(dense.ms, np.zeros(3))


def test_a_sibling_passes_its_measured_excess_to_a_gpu_the_database_lacks(db):
    """--sibling: a GPU with the sibling's very datasheet gets the sibling's measured kernels exactly; one with half
    its memory bandwidth gets them plus the difference of the two rooflines, family by family."""
    from hw_profile.estimate.engine_costs import engine_defaults
    from hw_profile.estimate.estimate import Deployment, roofline_parts, sibling_parts
    from hw_profile.hardware.gpus import get_gpu

    src = MeasuredKernels(data_dir=db)
    h200 = get_gpu("H200")
    b = np.array([1.0, 8.0, 16.0])
    k = b * 1024
    dep = Deployment(replace(h200, name="H200-twin"), gpus=1, ep=1, dtype="bf16", parallel="tp", engine="vllm",
                     costs=engine_defaults("vllm"))
    twin, kt = sibling_parts(TINY, dep, h200, src, b, k)
    for family in ("gemm", "attention", "lm_head"):
        np.testing.assert_allclose(twin[family], kt.parts[family], rtol=1e-12)
    half = replace(dep, gpu=replace(h200, name="H200-half", hbm_tb_s=h200.hbm_tb_s / 2))
    slow, _ = sibling_parts(TINY, half, h200, src, b, k)
    theirs, ours = (roofline_parts(TINY, d, b, k, floors=False) for d in (replace(dep, gpu=h200), half))
    np.testing.assert_allclose(slow["attention"] - kt.parts["attention"], ours["attention"] - theirs["attention"],
                               rtol=1e-9)
    assert (ours["attention"] > theirs["attention"]).all()  # the slower part pays more than the sibling measured


def test_measured_kernels_and_the_roofline_name_a_steps_parts_alike(db_wide):
    """One vocabulary (``hw_profile.kernels.families``): an estimate's parts carry the same names whether the
    measured kernels or the kernel-level roofline priced them, dense or MoE, and each is a family or an engine
    part."""
    from hw_profile.estimate.engine_costs import engine_defaults
    from hw_profile.estimate.estimate import Deployment, estimate_points
    from hw_profile.hardware.gpus import get_gpu
    from hw_profile.kernels.families import ENGINE_PARTS, KERNEL_FAMILIES

    b = np.array([1.0, 8.0])
    for shape, engine in ((TINY, "vllm"), (TINY_MLA, "sglang")):
        dep = Deployment(get_gpu("H200"), engine=engine, costs=engine_defaults(engine))
        measured = estimate_points(shape, dep, b, b * 1024, source=MeasuredKernels(data_dir=db_wide))
        roofline = estimate_points(shape, dep, b, b * 1024, kernels="roofline")
        assert set(measured.source) == {"kernels"}, measured.notes
        assert set(measured.parts) == set(roofline.parts) <= {*KERNEL_FAMILIES, *ENGINE_PARTS}
        assert ("moe" in measured.parts) == shape.is_moe


HAS_AIC = importlib.util.find_spec("aiconfigurator_core") is not None


@pytest.mark.skipif(not HAS_AIC, reason="aiconfigurator-core (the optional 'kernels' extra) is not installed")
def test_real_database_prices_a_sane_qwen3_8b_decode_step():
    shape = get_shape("qwen3-8b")
    b = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256], float)
    r = ops.step_times(shape, "H200", "vllm", "bf16", 1, None, b, b, np.full(b.shape, 4096.0))
    # B = 1 is weight-bandwidth bound: every bf16 matmul weight read once at 4.8 TB/s
    memory_ms = shape.matmul_params * 2 / 4.8e12 * 1e3
    assert memory_ms < r.ms[0] < 2 * memory_ms
    assert (np.diff(r.ms) > 0).all()
    assert r.inside[:8].all() and not r.inside[8]  # batch 256 x 4096 KV lies past the measured triangle
    assert r.source.startswith("aiconfigurator-core 0.12")


def test_more_kv_heads_than_measured_are_looked_up_as_more_requests_of_fewer_heads(db):
    """A layout with more KV heads than the database measured (multi-head attention, Llama-2-7B's 32) is the same
    work as more requests of fewer heads: 4 requests of 4 KV heads (8 query heads) over 4096 tokens are the measured
    kernel for 8 requests of 2 KV heads (4 query heads), not the roofline."""
    wide = ModelShape("tiny-wide-kv", layers=2, hidden=128, heads=8, kv_heads=4, head_dim=16, intermediate=128,
                      vocab=256)
    r = _step(db, [4], [4], [4096], shape=wide)
    assert r.parts["attention"][0] == pytest.approx(wide.layers * attn_ms(4, 8, 4096), rel=1e-12)
    assert any("looked up as 2x the requests of 2 KV heads (4 query heads)" in n for n in r.notes)
    # with a layout the database lacks either way, the lookup still names what is missing
    odd = replace(wide, heads=12, kv_heads=3, hidden=192)
    with pytest.raises(HwProfileError, match="num_key_value_heads=3"):
        _step(db, [4], [4], [4096], shape=odd)
