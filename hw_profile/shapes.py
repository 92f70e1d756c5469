"""Model shapes: what the roofline and the profiler need to know of a transformer (no weights).

Numbers are the public configs of each model (config.json on the model's card). ``drafter_shape`` derives the
generic transformer a drafter is timed as: some layers of the target's width, plus the (shared) LM head.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    lm_head: bool = True  # a drafter without its own head call (none) sets False

    @property
    def attn_params_per_layer(self) -> int:
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        return q + kv + o

    @property
    def mlp_params_per_layer(self) -> int:
        return 3 * self.hidden * self.intermediate  # gate, up, down (SwiGLU)

    @property
    def matmul_params(self) -> int:
        """Parameters every new token multiplies through (the embedding lookup is not a matmul)."""
        head = self.hidden * self.vocab if self.lm_head else 0
        return self.layers * (self.attn_params_per_layer + self.mlp_params_per_layer) + head

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes of K and V cache per context token, all layers, in 2-byte precision."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * 2.0

    def to_dict(self) -> dict:
        return asdict(self)


SHAPES: dict[str, ModelShape] = {
    "qwen3-4b": ModelShape("qwen3-4b", layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128,
                           intermediate=9728, vocab=151936, tie_embeddings=True),
    "qwen3-8b": ModelShape("qwen3-8b", layers=36, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                           intermediate=12288, vocab=151936),
    "qwen3-14b": ModelShape("qwen3-14b", layers=40, hidden=5120, heads=40, kv_heads=8, head_dim=128,
                            intermediate=17408, vocab=151936),
}


def get_shape(name_or_path: str | Path) -> ModelShape:
    """A built-in shape by name, or one read from a transformers config.json."""
    key = str(name_or_path)
    if key in SHAPES:
        return SHAPES[key]
    path = Path(key)
    if path.suffix == ".json" and path.is_file():
        return shape_from_config(json.loads(path.read_text()), name=path.stem)
    raise KeyError(f"unknown model shape {key!r}; built-in shapes: {', '.join(sorted(SHAPES))}, or a config.json path")


def shape_from_config(cfg: dict, name: str = "custom") -> ModelShape:
    """Read the fields a transformers (Qwen3/Llama-style) config uses."""
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        return ModelShape(
            name=str(cfg.get("_name_or_path") or cfg.get("model_type") or name),
            layers=int(cfg["num_hidden_layers"]),
            hidden=hidden,
            heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads", heads)),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate=int(cfg["intermediate_size"]),
            vocab=int(cfg["vocab_size"]),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        )
    except KeyError as exc:
        raise KeyError(f"config lacks {exc.args[0]!r}, which a model shape needs") from None


def drafter_shape(target: ModelShape, layers: int, vocab: int | None = None, name: str | None = None) -> ModelShape:
    """A generic transformer of the target's width with ``layers`` layers (a drafter's backbone) and an LM head
    over ``vocab`` tokens (the target's unless the drafter keeps a reduced vocabulary, as Eagle3 does)."""
    return replace(target, name=name or f"{target.name}-drafter-{layers}l", layers=layers, vocab=vocab or target.vocab)
