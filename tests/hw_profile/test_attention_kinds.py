"""What a verified token's attention costs, by attention kind (docs/model.md, "By attention kind"): reads once per
request, compute over the context per verified token, and, under compressed sparse attention, reads of its own
that ride on B with the verified tokens."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hw_profile.estimate.estimate import Deployment, attention_work, chunk_attention, roofline_parts
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import get_shape


def deployment(gpus: int = 1, dtype: str = "bf16") -> Deployment:
    return Deployment(gpu=get_gpu("H200"), gpus=gpus, ep=1, dtype=dtype, parallel="tp", engine="vllm")


def test_dense_and_latent_attention_read_a_requests_kv_once_however_many_tokens_it_verifies():
    for model, gpus in (("qwen3-8b", 2), ("deepseek-v3", 8)):
        shape = get_shape(model)
        dep = deployment(gpus, "bf16" if model == "qwen3-8b" else "fp8")
        work = attention_work(shape, dep)
        per_kv, per_query_kv, per_query = work.per_kv, work.per_query_kv, work.per_query
        assert per_query == 0.0  # nothing per verified token beyond its compute over the context
        split = 1 if model == "deepseek-v3" else gpus  # a latent cache is whole on every tensor-parallel GPU
        assert per_kv == pytest.approx(shape.kv_read_bytes_per_token / split)
        assert per_query_kv == pytest.approx(shape.attn_flops_per_kv_token / gpus)
        k = np.array([1e6, 1e6])
        reads = roofline_parts(shape, dep, np.array([64.0, 512.0]), k, floors=False)["attention"]
        # at 1M context tokens over 64 requests the reads bound both: 8 tokens a request cost what 1 does
        assert per_kv / dep.bandwidth > 512 * per_query_kv / 64 / dep.peak(dep.dtype)
        assert reads[1] == pytest.approx(reads[0])


def test_a_verified_token_of_compressed_sparse_attention_reads_its_own_rows():
    shape = get_shape("deepseek-v4-flash")
    dep = deployment(4, "fp8")
    work = attention_work(shape, dep)
    per_kv, per_query = work.per_kv, work.per_query
    window_and_selected = 2.0 * shape.head_dim * (shape.csa_layers * shape.index_topk
                                                  + shape.layers * shape.sliding_window)
    assert shape.attn_read_bytes_per_query_token == window_and_selected
    assert per_query > 0 and per_kv < shape.kv_bytes_per_token  # per context token: only index keys and HCA rows
    b = np.array([64.0, 512.0])  # 64 requests verifying 1 and 8 tokens each
    k = np.full(2, 64 * 8192.0)
    parts = roofline_parts(shape, dep, b, k, floors=False)["attention"]
    # each of the 448 extra tokens reads its own selected rows and window: at least their bytes at full bandwidth
    assert parts[1] - parts[0] >= (b[1] - b[0]) * per_query / dep.bandwidth * 1e3 * (1 - 1e-9)


def test_a_verified_token_of_deepseek_sparse_attention_reads_its_own_selected_rows():
    """GLM-5.2 (DeepSeek sparse attention): per context token only the index keys are read, once per request; each
    verified token reads its own top-2,048 latent rows, so 448 more verified tokens cost at least their rows' bytes
    (the roofline assumes contexts longer than the top-k)."""
    shape = get_shape("glm-5.2")
    dep = deployment(4, "fp8")
    work = attention_work(shape, dep)
    per_kv, per_query = work.per_kv, work.per_query
    kv_scale = 1.0  # a bf16 cache, the engines' default
    assert per_kv == pytest.approx(2.0 * shape.layers * shape.index_head_dim * kv_scale)  # whole on every rank
    assert per_query == pytest.approx(2.0 * shape.layers * 2048 * (512 + 64) * kv_scale)
    b = np.array([64.0, 512.0])
    k = np.full(2, 64 * 8192.0)
    parts = roofline_parts(shape, dep, b, k, floors=False)["attention"]
    assert parts[1] - parts[0] >= (b[1] - b[0]) * per_query / dep.bandwidth * 1e3 * (1 - 1e-9)


def test_deepseek_sparse_attentions_indexer_is_whole_on_every_tensor_parallel_gpu():
    """The engines replicate DSA's indexer projections: on 4 GPUs each reads, multiplies and stores all 0.73B of
    GLM-5.2's, beside a quarter of the other weights; one GPU and models without an indexer are unchanged."""
    from hw_profile.kernels.roofline import stored_weight_bytes, stored_weight_bytes_per_gpu, weight_bytes

    glm, v3 = get_shape("glm-5.2"), get_shape("deepseek-v3")
    rep = glm.replicated_params
    assert rep == glm.layers * (2048 * 32 * 128 + 6144 * (128 + 32)) and v3.replicated_params == 0
    assert glm.dense_params_per_gpu(4) == pytest.approx((glm.dense_params - rep) / 4 + rep)
    assert glm.dense_params_per_gpu(1) == glm.dense_params and v3.dense_params_per_gpu(8) == v3.dense_params / 8
    assert stored_weight_bytes_per_gpu(glm, "fp8", 4) == pytest.approx((stored_weight_bytes(glm, "fp8") - rep) / 4
                                                                        + rep)
    # the roofline's GEMM family at a weight-bound size reads those bytes on each GPU
    dep = deployment(4, "fp8")
    gemm = roofline_parts(glm, dep, np.array([1.0]), np.array([0.0]), floors=False)["gemm"][0]
    assert gemm == pytest.approx((glm.dense_params_per_gpu(4) - glm.head_params / 4) / dep.bandwidth * 1e3)
    # against the same model without its indexer (plain MLA), each of 4 GPUs reads the whole indexer more
    plain = replace(glm, index_topk=0, index_heads=0, index_head_dim=0)
    assert plain.attention_kind == "mla" and plain.replicated_params == 0
    assert weight_bytes(glm, 1.0, "fp8", gpus=4) - weight_bytes(plain, 1.0, "fp8", gpus=4) == pytest.approx(rep)


def test_a_windowed_layer_reads_at_most_its_window_of_each_request():
    """Gemma 3 (40 of 48 layers see the last 1,024 tokens): 8 requests verifying 2 tokens each (16 tokens, the
    table's q) over 8 x 512 context tokens read all of it in every layer; over 8 x 32,768 the 40 windowed layers read
    8 x 1,024, so the step reads 8/48 of the context plus 40/48 of eight windows."""
    shape = get_shape("gemma3-12b")
    dep = deployment(1, "bf16")
    work = attention_work(shape, dep)
    per_kv, per_query_kv = work.per_kv, work.per_query_kv
    b = np.array([16.0, 16.0])
    k = np.array([8 * 512.0, 8 * 32768.0])
    got = roofline_parts(shape, dep, b, k, floors=False)["attention"]
    attended = np.array([8 * 512.0, 8 * 32768.0 * 8 / 48 + 8 * 1024.0 * 40 / 48])
    want = np.maximum(attended * per_kv / dep.bandwidth, 2 * attended * per_query_kv / dep.peak("bf16")) * 1e3
    assert got == pytest.approx(want, rel=1e-12)
    full = roofline_parts(get_shape("qwen3-8b"), dep, b, k, floors=False)["attention"]
    assert full[1] / full[0] == pytest.approx(64.0)  # without windows the same step reads 64x the context


def test_a_prompt_chunk_of_a_windowed_model_is_priced_with_its_window():
    """The estimate's prefill block tells the simulator which share of the chunk attention is windowed: 40 of
    Gemma 3's 48 layers at 1,024 tokens; a model without windows writes no window."""
    block = chunk_attention(get_shape("gemma3-12b"), deployment())
    assert (block["window"], block["windowed_share"]) == (1024, 40 / 48)
    assert "window" not in chunk_attention(get_shape("qwen3-8b"), deployment())


def test_a_gated_deltanet_hybrid_caches_only_its_full_layers_and_pays_its_states_per_token():
    """Qwen3-Next: 12 full GQA layers of 48 cache keys and values; each of the 36 linear layers holds a 32 x 128 x
    128 state and a 4-wide convolution's last 3 inputs per request, read once a step and written by every query
    token."""
    qn = get_shape("qwen3-next-80b-a3b")
    assert (qn.attention_kind, qn.full_attention_layers, qn.linear_attention_layers) == ("gated-deltanet", 12, 36)
    assert qn.kv_bytes_per_token == 2 * 12 * 2 * 256 * 2.0
    state = 2.0 * 36 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128))
    assert qn.state_bytes_per_request == state
    assert qn.attn_read_bytes_per_query_token == state and qn.attn_read_bytes_per_request == state
    assert qn.attn_flops_per_query_token == 36 * (6.0 * 32 * 128 * 128 + 2 * 4 * (2 * 16 * 128 + 32 * 128))
    assert qn.attn_flops_per_kv_token == 4.0 * 12 * 16 * 256
    # the roofline's attention: what grows with the context is a quarter of the same model attending in full
    full = replace(qn, linear_interval=0)
    dep = deployment(1, "bf16")
    b, k = np.array([64.0, 64.0]), np.array([64 * 1024.0, 64 * 8192.0])
    grow = np.diff(roofline_parts(qn, dep, b, k, floors=False)["attention"])[0]
    grow_full = np.diff(roofline_parts(full, dep, b, k, floors=False)["attention"])[0]
    assert grow == pytest.approx(grow_full / 4)
    # and a step of more tokens pays their states' traffic: 64 more tokens at least 64 x the state's bytes
    more = roofline_parts(qn, dep, np.array([64.0, 128.0]), np.array([0.0, 0.0]), floors=False)["attention"]
    assert more[1] - more[0] >= 64 * state / dep.bandwidth * 1e3 * (1 - 1e-9)


def test_a_gated_deltanet_request_reads_its_states_once_however_many_tokens_it_verifies():
    """At the q tokens a request the estimate's table assumes, a step of B tokens over no context reads B / q
    requests' states and writes B tokens' (by hand, bound by the slower of its bytes and the delta rule's
    FLOPs); the plain roofline, whose K axis carries no request count, prices every token as its own request (a
    read and a write each), and so does the estimate at one token a request."""
    from hw_profile.kernels.roofline import attention_bytes_flops

    qn = get_shape("qwen3-next-80b-a3b")
    states = {}
    for q in (1.0, 2.0, 8.0):
        dep = replace(deployment(2, "bf16"), costs=replace(deployment(2, "bf16").costs, verify_tokens_per_request=q))
        work = attention_work(qn, dep)
        assert work.per_query == work.per_request == qn.state_bytes_per_request / 2  # split with the heads
        b = np.array([64.0, 512.0])
        bytes_ = b * work.per_query + b / q * work.per_request
        flops = qn.attn_flops_per_query_token * b / 2
        by_hand = np.maximum(bytes_ / dep.bandwidth, flops / dep.peak("bf16")) * 1e3
        got = roofline_parts(qn, dep, b, np.zeros(2), floors=False)["attention"]
        np.testing.assert_allclose(got, by_hand, rtol=1e-12)
        states[q] = bytes_
        if q == 1.0:
            one_each = attention_bytes_flops(qn, b, np.zeros(2), "bf16")[0] / 2  # all GPUs' bytes, per GPU
            np.testing.assert_allclose(bytes_, one_each, rtol=1e-12)
    # eight tokens a request move 9/16 of the states' bytes one token a request would
    np.testing.assert_allclose(states[8.0] / states[1.0], 9 / 16, rtol=1e-12)


def test_a_gated_deltanet_drafter_attends_in_full_and_its_states_take_kv_room():
    from hw_profile.hardware.shapes import drafter_shape
    from hw_profile.tables.sidecar import MemoryFacts, memory_fields

    qn = get_shape("qwen3-next-80b-a3b")
    mtp = drafter_shape(qn, 1)
    assert (mtp.attention_kind, mtp.full_attention_layers, mtp.state_bytes_per_request) == ("gqa", 1, 0.0)

    def facts_of(shape):
        f = memory_fields(shape, "bf16", head_split=1, gpus=1, weight_bytes_per_gpu=20e9, device_memory_gb=141.0)
        return MemoryFacts(141.0, 20e9, qn.kv_bytes_per_token, f["activation_bytes_per_batch_token"],
                           f["logits_bytes_per_request"], f["state_bytes_per_request"])

    facts = facts_of(qn)
    one, many = (facts.kv_capacity(max_running=r, max_batch_tokens=256) for r in (1, 257))
    plain = facts_of(replace(qn, linear_interval=0))
    # 256 more running requests take their states out of the pool (beyond what the activation peak takes)
    lost_to_states = 256 * qn.state_bytes_per_request / qn.kv_bytes_per_token
    other = (plain.kv_capacity(max_running=1, max_batch_tokens=256)
             - plain.kv_capacity(max_running=257, max_batch_tokens=256))
    assert one - many == pytest.approx(lost_to_states + other, abs=2)


def test_a_kv_head_shared_by_several_tensor_parallel_gpus_is_read_whole_on_each():
    """Qwen3-235B's 4 KV heads over 8 GPUs: each GPU holds one KV head (engines replicate it over the two GPUs that
    share it), so it reads a quarter of the cache per context token, not an eighth, as its KV room says; over 4 GPUs a
    quarter too, over 2 a half."""
    shape = get_shape("qwen3-235b-a22b")
    for gpus, share in ((2, 2), (4, 4), (8, 4)):
        work = attention_work(shape, deployment(gpus))
        assert work.per_kv == pytest.approx(shape.kv_bytes_per_token / share)
        assert work.per_kv == pytest.approx(shape.kv_cache_facts(2.0, gpus, gpus)["kv_bytes_per_token_per_gpu"])
        assert work.per_query_kv == pytest.approx(shape.attn_flops_per_kv_token / gpus)  # query heads do split
