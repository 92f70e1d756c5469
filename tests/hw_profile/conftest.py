"""Fixtures shared by the hw_profile tests: a tiny Qwen3 config.json that a CPU times in milliseconds."""

import json

import pytest

TINY_QWEN3 = {
    "model_type": "qwen3", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 768, "vocab_size": 8192,
    "tie_word_embeddings": True,
}


@pytest.fixture
def tiny_config(tmp_path):
    path = tmp_path / "tiny-qwen3.json"
    path.write_text(json.dumps(TINY_QWEN3))
    return path
