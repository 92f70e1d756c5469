"""MiniMax-M3's layout (docs/model.md, "By attention kind"): GQA whose sparse layers attend only to the blocks a
lightning indexer selects for each query (``block-sparse``), after three leading layers that attend in full."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from hw_profile.errors import HwProfileError
from hw_profile.estimate.estimate import Deployment, roofline_parts
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.shapes import drafter_shape, get_shape

LAYERS, DENSE = 60, 3
TEXT_CONFIG = {  # the fields of MiniMax-M3's config.json (its text_config) that a shape reads
    "model_type": "minimax_m3", "hidden_size": 6144, "num_hidden_layers": LAYERS, "num_attention_heads": 64,
    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 200064, "tie_word_embeddings": False,
    "intermediate_size": 3072, "dense_intermediate_size": 12288, "shared_intermediate_size": 3072,
    "num_local_experts": 128, "num_experts_per_tok": 4, "n_shared_experts": 1,
    "moe_layer_freq": [0] * DENSE + [1] * (LAYERS - DENSE),
    "sparse_attention_config": {"use_sparse_attention": True, "sparse_index_dim": 128, "sparse_num_index_heads": 4,
                                "sparse_topk_blocks": 16, "sparse_block_size": 128,
                                "sparse_attention_freq": [0] * DENSE + [1] * (LAYERS - DENSE)},
}


def test_its_config_json_reads_as_the_builtin(tmp_path):
    m3 = get_shape("minimax-m3")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "minimax_m3_vl", "text_config": TEXT_CONFIG}))
    assert get_shape(path) == replace(m3, name="config")
    assert (m3.attention_kind, m3.sparse_attention_layers, m3.index_topk) == ("block-sparse", 57, 16 * 128)
    assert (m3.dense_layers, m3.moe_layers, m3.intermediate, m3.expert_intermediate) == (3, 57, 12288, 3072)


def test_its_weights_counted_layer_by_layer():
    """Every stored weight, enumerated per layer (GQA projections everywhere, the indexer's 4 query heads and one key
    of 128 in the 57 sparse layers, a dense MLP in the first 3, 128 routed + 1 shared expert in the others)."""
    m3 = get_shape("minimax-m3")
    h = 6144
    gqa = h * 64 * 128 + 2 * h * 4 * 128 + 64 * 128 * h
    indexer = h * 5 * 128
    expert = 3 * h * 3072
    stored = (60 * gqa + 57 * indexer + 3 * 3 * h * 12288 + 57 * (129 * expert + h * 128)
              + 2 * h * 200064)
    active = stored - 57 * (128 - 4) * expert - h * 200064  # 4 experts a token; the embedding is a lookup
    assert m3.total_params == pytest.approx(stored, abs=60) and m3.matmul_params == pytest.approx(active, abs=60)
    assert (round(stored / 1e9), round(active / 1e9, 1)) == (426, 24.7)


def test_a_sparse_layer_reads_its_index_keys_per_context_token_and_its_selected_tokens_per_query():
    """Per context token: the 3 full layers' K and V and the 57 sparse layers' index keys; per query token: the 2,048
    selected tokens' K and V of every sparse layer, and the attention over them; the cache holds all layers' K and V
    and the index keys."""
    m3 = get_shape("minimax-m3")
    kv = 2 * 4 * 128  # K and V values a token and layer
    assert m3.kv_bytes_per_token == 2.0 * (60 * kv + 57 * 128)
    assert m3.kv_read_bytes_per_token == 2.0 * (3 * kv + 57 * 128)
    assert m3.attn_read_bytes_per_query_token == 2.0 * 57 * 2048 * kv
    assert m3.attn_flops_per_query_token == 4.0 * 57 * 64 * 128 * 2048
    assert m3.attn_flops_per_kv_token == 4.0 * 3 * 64 * 128 + 57 * 2.0 * 4 * 128
    # what grows with the context: the same model attending in full reads 60 layers' K and V a context token
    full = replace(m3, index_block=0, index_topk=0, index_heads=0, index_head_dim=0, full_layers=0)
    dep = Deployment(gpu=get_gpu("H200"), gpus=1, ep=1, dtype="bf16", parallel="tp", engine="vllm")
    b, k = np.array([64.0, 64.0]), np.array([64 * 16384.0, 64 * 65536.0])
    grow = np.diff(roofline_parts(m3, dep, b, k, floors=False)["attention"])[0]
    grow_full = np.diff(roofline_parts(full, dep, b, k, floors=False)["attention"])[0]
    assert grow == pytest.approx(grow_full * m3.kv_read_bytes_per_token / full.kv_read_bytes_per_token)


def test_it_is_priced_on_the_roofline_and_its_drafter_attends_in_full():
    from hw_profile.kernels.ops import step_times

    with pytest.raises(HwProfileError, match="MiniMax sparse attention"):
        step_times(get_shape("minimax-m3"), "H200", "vllm", "fp8", 8, 8, [1], [1], [1024])
    mtp = drafter_shape(get_shape("minimax-m3"), 1)
    one_layer_kv = 2.0 * 2 * 4 * 128
    assert (mtp.attention_kind, mtp.sparse_attention_layers, mtp.kv_read_bytes_per_token) == ("gqa", 0, one_layer_kv)
