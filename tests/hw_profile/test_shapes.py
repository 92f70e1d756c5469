"""Model shapes: parameter counts and KV bytes against the public configs, computed by hand."""

import json
from dataclasses import replace

import pytest

from hw_profile.errors import HwProfileError
from hw_profile.hardware.shapes import (
    ATTENTION_KINDS,
    SHAPES,
    ModelShape,
    dense_gemms,
    drafter_shape,
    get_shape,
    shape_from_config,
    with_layers,
)

DEEPSEEK_V3_CONFIG = {  # the fields of deepseek-ai/DeepSeek-V3's config.json that a shape reads
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
    "n_routed_experts": 256, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "vocab_size": 129280,
    "tie_word_embeddings": False,
}


def test_dense_qwen3_8b_counts_by_hand():
    s = get_shape("qwen3-8b")
    attn = 4096 * 32 * 128 * 2 + 2 * 4096 * 8 * 128
    mlp = 3 * 4096 * 12288
    assert s.matmul_params == 36 * (attn + mlp) + 4096 * 151936
    assert s.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2
    assert s.attn_flops_per_kv_token == 4 * 36 * 32 * 128
    # the sidecar form of a dense Qwen3 shape is what it always was (no MoE/MLA keys)
    assert set(s.to_dict()) == {"name", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate",
                                "vocab", "tie_embeddings", "lm_head"}
    assert ModelShape(**s.to_dict()) == s  # the sidecar form holds the whole shape


def test_deepseek_v3_is_671b_total_37b_active():
    s = get_shape("deepseek-v3")
    assert s.is_moe and s.attention_kind == "mla"
    assert s.total_params == pytest.approx(671e9, rel=0.005)
    # active: 37B with the embedding (the model card's figure), 36.6B of it matmul work
    assert s.matmul_params + s.hidden * s.vocab == pytest.approx(37.5e9, rel=0.01)
    # MLA caches the 512-wide latent and the 64-wide rotary key, per layer, in 2 bytes
    assert s.kv_bytes_per_token == 61 * (512 + 64) * 2
    # absorbed attention: 128 heads x (4 x 512 + 2 x 64) per layer
    assert s.attn_flops_per_kv_token == 61 * 128 * (4 * 512 + 2 * 64)
    assert ModelShape(**s.to_dict()) == s  # the sidecar form holds the whole shape


def test_shape_from_deepseek_config_matches_builtin(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    s = get_shape(str(path))
    builtin = SHAPES["deepseek-v3"]
    for field in ("layers", "experts", "experts_per_token", "shared_experts", "expert_intermediate", "dense_layers",
                  "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "head_dim", "family"):
        assert getattr(s, field) == getattr(builtin, field), field
    assert s.total_params == builtin.total_params


def test_gemma_alias_and_sliding_window():
    s = get_shape("gemma4-12b")
    assert s.name == "gemma3-12b" and s.family == "gemma3_text"
    assert s.sliding_window == 1024 and s.sliding_pattern == 6
    assert s.total_params == pytest.approx(11.8e9, rel=0.02)  # 12B with the vision tower, which is not here
    cfg = {"model_type": "gemma3_text", "hidden_size": 3840, "num_attention_heads": 16, "num_key_value_heads": 8,
           "head_dim": 256, "num_hidden_layers": 48, "intermediate_size": 15360, "vocab_size": 262208,
           "sliding_window": 1024, "sliding_window_pattern": 6, "tie_word_embeddings": True}
    assert shape_from_config({"text_config": cfg}).sliding_pattern == 6


def test_each_attention_kind_and_what_the_step_models_read_of_it():
    """``attention_kind`` names every library shape's attention, and what a kind means is the shape's to say: a
    latent or compressed cache is one copy on every tensor-parallel rank (and its model ships fp8, but for Kimi-K3's
    linear hybrid), a per-head cache
    splits by KV head; Gemma's sliding windows are priced as full attention (every layer's K and V per token)."""
    kinds = {name: s.attention_kind for name, s in SHAPES.items()}
    assert {kinds["qwen3-8b"], kinds["qwen3-30b-a3b"], kinds["gemma3-12b"], kinds["deepseek-v3"], kinds["kimi-k2"],
            kinds["deepseek-v4-pro"]} == {"gqa", "sliding-window", "mla", "compressed-sparse"}
    assert (kinds["gemma3-12b"], kinds["kimi-k2"], kinds["deepseek-v4-flash"]) == ("sliding-window", "mla",
                                                                                  "compressed-sparse")
    assert kinds["glm-5.2"] == kinds["deepseek-v3.2"] == "dsa"
    mha = ModelShape("llama-2-7b", layers=32, hidden=4096, heads=32, kv_heads=32, head_dim=128, intermediate=11008,
                     vocab=32000)
    assert mha.attention_kind == "mha" and set(kinds.values()) | {"mha"} == set(ATTENTION_KINDS)
    for name, s in SHAPES.items():
        latent = s.attention_kind in ("mla", "dsa", "compressed-sparse", "linear-mla")
        fp8 = latent and s.attention_kind != "linear-mla"  # Kimi-K3 ships bf16 beside its MXFP4 experts
        assert (s.latent_kv, s.checkpoint_dtype) == (latent, "fp8" if fp8 else "bf16"), name
        facts = s.kv_cache_facts(2.0, 8, 8)
        per_head = s.kv_bytes_per_token * max(s.kv_heads // 8, 1) / s.kv_heads
        assert facts["kv_bytes_per_token_per_gpu"] == (s.kv_bytes_per_token if latent else per_head), name
    gemma = get_shape("gemma3-12b")
    assert gemma.kv_bytes_per_token == 2 * 48 * 8 * 256 * 2 == gemma.kv_read_bytes_per_token
    assert gemma.attn_flops_per_kv_token == 4 * 48 * 16 * 256 and gemma.attn_read_bytes_per_query_token == 0


def test_deepseek_sparse_attention_reads_index_keys_per_context_token_and_selected_rows_per_query_token():
    """DeepSeek-V3.2 is V3 plus an indexer (64 x 128, top 2,048) in every layer: its cache adds the 128-wide index
    key; per context token a step reads only index keys and scores them (2 x 64 x 128 a layer); each query token reads
    and attends its 2,048 selected latent rows, MLA's absorbed work over them."""
    v3, v32 = get_shape("deepseek-v3"), get_shape("deepseek-v3.2")
    assert v32.kv_bytes_per_token == v3.kv_bytes_per_token + 61 * 128 * 2
    assert v32.kv_read_bytes_per_token == 61 * 128 * 2
    assert v32.attn_flops_per_kv_token == 61 * 2 * 64 * 128
    assert v32.attn_read_bytes_per_query_token == 61 * 2048 * (512 + 64) * 2
    assert v32.attn_flops_per_query_token == 61 * 128 * (4 * 512 + 2 * 64) * 2048
    # the indexer's projections: index queries from the 1536-wide query latent, the key and head weights from hidden
    indexer = 1536 * 64 * 128 + 7168 * (128 + 64)
    assert v32.attn_params_per_layer == v3.attn_params_per_layer + indexer
    assert v32.total_params - v3.total_params == 61 * indexer
    # its projections and indexer are inside the measured DSA module: no attention GEMMs of their own
    assert {name for name, *_ in dense_gemms(v32, 8)} == {"gate_up", "down", "shared gate_up", "shared down"}
    cfg = {**DEEPSEEK_V3_CONFIG, "model_type": "deepseek_v32", "index_topk": 2048, "index_n_heads": 64,
           "index_head_dim": 128}
    assert shape_from_config(cfg, "deepseek-v3.2") == replace(v32, name="deepseek-v3.2")


def test_layers_override_and_moe_drafter_of_moe():
    ds = get_shape("deepseek-v3")
    cut = with_layers(ds, 4)
    assert (cut.layers, cut.dense_layers, cut.moe_layers) == (4, 3, 1)
    assert with_layers(ds, 2).dense_layers == 2
    with pytest.raises(HwProfileError, match="--layers"):
        with_layers(ds, 0)
    d = drafter_shape(ds, 1)  # one MoE layer, as DeepSeek's MTP module is
    assert d.is_moe and d.layers == 1 and d.attention_kind == "mla" and (d.dense_layers, d.moe_layers) == (0, 1)
    moe_block = (d.shared_experts + d.experts_per_token) * d.expert_params + d.hidden * d.experts
    assert d.matmul_params == d.attn_params_per_layer + moe_block + d.hidden * d.vocab
    q = drafter_shape(get_shape("qwen3-8b"), 2)
    assert q.matmul_params == 2 * (q.attn_params_per_layer + q.mlp_params_per_layer) + 4096 * 151936


def test_unknown_shape_names_the_choices():
    with pytest.raises(KeyError, match="qwen3-8b"):
        get_shape("llama-9b")


@pytest.mark.parametrize("name, total, active", [
    ("qwen3-30b-a3b", 30.5e9, 3.3e9),  # the model cards' totals and activated parameters
    ("qwen3-235b-a22b", 235e9, 22e9),
    ("kimi-k2", 1.0e12, 32e9),
    ("glm-5.2", 744e9, 40e9),  # GLM-5's announced size; GLM-5.2 keeps its architecture (the pinned config)
])
def test_moe_builtins_match_their_cards(name, total, active):
    s = get_shape(name)
    assert s.total_params == pytest.approx(total, rel=0.03)
    # the cards count the embedding among activated parameters; matmul_params leaves it out
    assert s.matmul_params + s.vocab * s.hidden == pytest.approx(active, rel=0.05)


@pytest.mark.parametrize("name, total, active", [
    ("llama-3.1-8b", 8.03e9, None),  # the model cards' sizes
    ("llama-3.3-70b", 70.6e9, None),
    ("qwen3-32b", 32.8e9, None),
    ("gpt-oss-120b", 116.83e9, 5.13e9),  # OpenAI's card counts the unembedding as active, not the embedding
    ("gpt-oss-20b", 20.91e9, 3.61e9),
])
def test_deployed_builtins_match_their_cards(name, total, active):
    s = get_shape(name)
    assert s.total_params == pytest.approx(total, rel=0.005)
    if active is not None:
        assert s.matmul_params == pytest.approx(active, rel=0.01)
    if name.startswith("gpt-oss"):  # alternating 128-token windows, experts stored in MXFP4
        assert (s.attention_kind, s.windowed_layers * 2, s.expert_dtype) == ("sliding-window", s.layers, "fp4")


def test_a_gpt_oss_config_reads_as_the_builtin():
    """gpt-oss's config.json: experts under num_local_experts at intermediate_size, windows from layer_types
    (sliding first), and MXFP4 experts from its quantization_config."""
    cfg = {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
           "num_local_experts": 128, "num_experts_per_tok": 4, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 64, "sliding_window": 128, "vocab_size": 201088, "tie_word_embeddings": False,
           "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(36)],
           "quantization_config": {"quant_method": "mxfp4"}}
    assert shape_from_config(cfg, name="gpt-oss-120b") == get_shape("gpt-oss-120b")
    del cfg["quantization_config"]
    assert shape_from_config(cfg, name="gpt-oss-120b").expert_dtype == ""


def test_qwen3_next_is_80b_and_its_config_reads_as_the_builtin():
    """The card's 80B total; a config.json reads the hybrid from full_attention_interval or from layer_types, and
    its shared expert from shared_expert_intermediate_size."""
    qn = get_shape("qwen3-next-80b-a3b")
    assert qn.total_params == pytest.approx(80e9, rel=0.01)
    cfg = {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "intermediate_size": 5120,
           "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936,
           "linear_num_value_heads": 32, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10,
           "shared_expert_intermediate_size": 512, "moe_intermediate_size": 512, "full_attention_interval": 4}
    assert shape_from_config(cfg, name="qwen3-next-80b-a3b") == qn
    del cfg["full_attention_interval"]
    cfg["layer_types"] = ["linear_attention"] * 3 + ["full_attention"]
    cfg["layer_types"] *= 12
    assert shape_from_config(cfg, name="qwen3-next-80b-a3b") == qn
    # a hybrid's drafter layers attend in full, with no state of their own
    assert drafter_shape(qn, 1).attention_kind == "gqa"


def test_qwen35_397b_is_397b_with_17b_active_and_its_config_reads_as_the_builtin():
    """The name's 397B stored and 17B active (matmuls and the embedding row; 1% and 3%); its text config.json (the
    multimodal config's text_config) reads as the built-in; a request's states are twice Qwen3-Next's a layer (64
    value heads to 32) over 45 linear layers."""
    q35 = get_shape("qwen3.5-397b-a17b")
    assert q35.total_params == pytest.approx(397e9, rel=0.01)
    assert q35.matmul_params + q35.hidden * q35.vocab == pytest.approx(17e9, rel=0.03)  # 17.3B: the name rounds
    text = {"hidden_size": 4096, "num_hidden_layers": 60, "intermediate_size": 1024, "num_attention_heads": 32,
            "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320, "linear_num_value_heads": 64,
            "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10,
            "shared_expert_intermediate_size": 1024, "moe_intermediate_size": 1024, "full_attention_interval": 4,
            "tie_word_embeddings": False}
    cfg = {"model_type": "qwen3_5_moe", "text_config": {"model_type": "qwen3_5_moe_text", **text}}
    assert shape_from_config(cfg, name="qwen3.5-397b-a17b") == q35
    qn = get_shape("qwen3-next-80b-a3b")
    per_layer = (q35.state_bytes_per_request / q35.linear_attention_layers,
                 qn.state_bytes_per_request / qn.linear_attention_layers)
    assert (q35.linear_attention_layers, per_layer[0] > 1.9 * per_layer[1]) == (45, True)
