"""Drafter checkpoints in the public DeepSpec format: the parameter names and config keys DeepSpec uses, a round
trip that reproduces the drafter exactly, sharded weights, and one-line errors that name the file and the field."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from dspark_runtime.checkpoints import load_drafter, save_drafter
from dspark_runtime.drafters import EAGLE3_ARCH, build_drafter
from simulator.errors import UserError

from .conftest import randomize, small_config

# Names as in DeepSpec's Qwen3DSparkModel state dict (deepspec/modeling/dspark/...), layer 0 shown.
DSPARK_NAMES = {
    "embed_tokens.weight", "fc.weight", "hidden_norm.weight", "norm.weight", "lm_head.weight",
    "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight",
    "layers.0.self_attn.o_proj.weight", "layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight",
    "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
    "layers.0.input_layernorm.weight", "layers.0.post_attention_layernorm.weight",
    "markov_head.markov_w1.weight", "markov_head.markov_w2.weight",
    "confidence_head.proj.weight", "confidence_head.proj.bias",
}
HEAD_NAMES = {"gated": {"markov_head.gate_proj.weight", "markov_head.gate_proj.bias"},
              "rnn": {"markov_head.joint_proj.weight", "markov_head.joint_proj.bias"}}
CONFIG_KEYS = {"block_size", "mask_token_id", "target_layer_ids", "markov_rank", "markov_head_type",
               "enable_confidence_head", "confidence_head_with_markov", "num_target_layers", "num_hidden_layers",
               "hidden_size", "vocab_size", "architectures"}


def draft_logits(model):
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(5, 40, (1, 20), generator=gen)
    feats = torch.randn(1, 20, 64, generator=gen)
    with torch.no_grad():
        return model.forward_train(ids, feats, torch.tensor([[6, 12]]), torch.ones(1, 2, dtype=torch.bool))


@pytest.mark.parametrize("head", ["vanilla", "gated", "rnn"])
def test_round_trip_in_deepspec_format(tmp_path, head):
    model = randomize(build_drafter(small_config(head=head)))
    save_drafter(model, tmp_path / "ckpt", calibration={"temperatures": [1.0, 1.5, 2.0, 0.5]})
    names = set(load_file(tmp_path / "ckpt" / "model.safetensors"))
    assert names == DSPARK_NAMES | HEAD_NAMES.get(head, set()) | {n.replace("layers.0", "layers.1") for n in
                                                                   DSPARK_NAMES if n.startswith("layers.0")}
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert CONFIG_KEYS <= set(cfg)
    assert cfg["architectures"] == ["Qwen3DSparkModel"] and cfg["markov_head_type"] == head
    loaded, cal = load_drafter(tmp_path / "ckpt")
    assert cal["temperatures"] == [1.0, 1.5, 2.0, 0.5]
    a, ca = draft_logits(model)
    b, cb = draft_logits(loaded)
    assert torch.equal(a, b) and torch.equal(ca, cb)


def test_dflash_and_eagle_round_trip(tmp_path):
    for cfg in (small_config(head=None), small_config(arch=EAGLE3_ARCH, head=None)):
        model = randomize(build_drafter(cfg))
        save_drafter(model, tmp_path / cfg.kind)
        saved = json.loads((tmp_path / cfg.kind / "config.json").read_text())
        if cfg.kind == "dflash":
            assert saved["markov_rank"] == 0 and saved["enable_confidence_head"] is False
            assert not any(k.startswith(("markov_head", "confidence_head"))
                           for k in load_file(tmp_path / cfg.kind / "model.safetensors"))
        else:
            assert saved["architectures"] == ["Qwen3Eagle3Model"] and saved["ttt_length"] == cfg.block_size
        loaded, cal = load_drafter(tmp_path / cfg.kind)
        assert cal is None and loaded.config.kind == cfg.kind
        assert torch.equal(draft_logits(model)[0], draft_logits(loaded)[0])


def test_sharded_checkpoint_without_shared_weights_loads_with_a_target(tmp_path, smoke_models):
    """A release may shard its weights and omit the target's embeddings / LM head; they come from the target."""
    target, _, _ = smoke_models
    cfg = small_config()
    cfg.vocab_size, cfg.hidden_size = target.config.vocab_size, target.config.hidden_size
    cfg.num_attention_heads, cfg.num_key_value_heads = target.config.num_attention_heads, target.config.num_key_value_heads
    cfg.head_dim, cfg.num_target_layers, cfg.target_layer_ids = target.config.head_dim, target.config.num_hidden_layers, [0]
    model = randomize(build_drafter(cfg))
    save_drafter(model, tmp_path / "c")
    state = load_file(tmp_path / "c" / "model.safetensors")
    (tmp_path / "c" / "model.safetensors").unlink()
    keys = sorted(k for k in state if k not in ("embed_tokens.weight", "lm_head.weight"))
    half = len(keys) // 2
    save_file({k: state[k] for k in keys[:half]}, str(tmp_path / "c" / "model-00001-of-00002.safetensors"))
    save_file({k: state[k] for k in keys[half:]}, str(tmp_path / "c" / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {k: f"model-0000{1 if i < half else 2}-of-00002.safetensors" for i, k in enumerate(keys)}}
    (tmp_path / "c" / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(UserError, match="missing"):
        load_drafter(tmp_path / "c")  # without a target the shared weights are missing
    loaded, _ = load_drafter(tmp_path / "c", target=target)
    assert torch.equal(loaded.lm_head.weight, target.get_output_embeddings().weight)
    assert torch.equal(loaded.fc.weight, model.fc.weight)


def test_errors_name_file_and_field(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_drafter(tmp_path / "nope")
    model = build_drafter(small_config())
    save_drafter(model, tmp_path / "c")
    cfg_file = tmp_path / "c" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    bad = dict(cfg, markov_head_type="lstm")
    cfg_file.write_text(json.dumps(bad))
    with pytest.raises(UserError, match=r"c/config.json: field markov_head_type is 'lstm'; expected one of"):
        load_drafter(tmp_path / "c")
    del cfg["block_size"]
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=r"c/config.json: missing field block_size"):
        load_drafter(tmp_path / "c")
    cfg["block_size"] = 4
    cfg["markov_rank"] = 9  # the weights were saved with rank 6
    cfg_file.write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=r"weight \S+ has shape .*; config.json implies"):
        load_drafter(tmp_path / "c")


def test_incompatible_target_is_named(tmp_path, smoke_models):
    target, _, _ = smoke_models
    save_drafter(build_drafter(small_config()), tmp_path / "c")
    with pytest.raises(UserError, match=r"config.json: field vocab_size is 40; the target has 320"):
        load_drafter(tmp_path / "c", target=target)
