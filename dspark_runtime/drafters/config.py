"""Drafter configuration in the public DeepSpec checkpoint vocabulary, validated with errors that name the file and
the field.

A DeepSpec drafter's config.json is the target's Qwen3 config with the drafter's own layer count plus the keys
below. ``architectures`` says which drafter: ``Qwen3DSparkModel`` (DSpark; DFlash is the same model with
``markov_rank`` 0 and no confidence head) or ``Qwen3Eagle3Model`` (the autoregressive baseline, ``ttt_length``
draft steps).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from simulator.errors import UserError

DSPARK_ARCH = "Qwen3DSparkModel"
EAGLE3_ARCH = "Qwen3Eagle3Model"
MARKOV_HEAD_TYPES = ("vanilla", "gated", "rnn")


@dataclass
class DrafterConfig:
    architecture: str  # DSPARK_ARCH or EAGLE3_ARCH
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int  # the drafter's own layers
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_target_layers: int
    target_layer_ids: list[int]
    block_size: int  # gamma: draft tokens per block (Eagle3: ttt_length)
    mask_token_id: int = 0
    markov_rank: int = 0
    markov_head_type: str | None = None
    enable_confidence_head: bool = False
    confidence_head_with_markov: bool = False
    num_anchors: int = 16
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    attention_bias: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # other keys of a loaded config.json, written back as is

    @property
    def is_eagle(self) -> bool:
        return self.architecture == EAGLE3_ARCH

    @property
    def gamma(self) -> int:
        return self.block_size

    @property
    def kind(self) -> str:
        """The name the evaluation and the trace use: eagle3, dflash, dspark, dspark-gated, dspark-rnn."""
        if self.is_eagle:
            return "eagle3"
        if self.markov_rank == 0:
            return "dflash" if not self.enable_confidence_head else "dflash-conf"
        return "dspark" if self.markov_head_type == "vanilla" else f"dspark-{self.markov_head_type}"

    def validate(self, source: str) -> None:
        def bad(field_name: str, expected: str, value: Any) -> UserError:
            return UserError(f"{source}: field {field_name} is {value!r}; expected {expected}")

        if self.architecture not in (DSPARK_ARCH, EAGLE3_ARCH):
            raise bad("architectures", f"[{DSPARK_ARCH!r}] or [{EAGLE3_ARCH!r}]", self.architecture)
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "head_dim", "num_target_layers", "block_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise bad(name, "a positive integer", value)
        if self.num_attention_heads % self.num_key_value_heads:
            raise bad("num_key_value_heads", f"a divisor of num_attention_heads={self.num_attention_heads}",
                      self.num_key_value_heads)
        ids = self.target_layer_ids
        if (not isinstance(ids, list) or not ids or any(not isinstance(i, int) for i in ids)
                or ids != sorted(set(ids)) or ids[0] < -1 or ids[-1] > self.num_target_layers - 2):
            raise bad("target_layer_ids", f"a non-empty strictly increasing list of ints in -1..{self.num_target_layers - 2}"
                      " (-1 = embeddings; the final target layer is excluded)", ids)
        if self.is_eagle:
            return
        if not isinstance(self.mask_token_id, int) or not 0 <= self.mask_token_id < self.vocab_size:
            raise bad("mask_token_id", f"a token id in 0..{self.vocab_size - 1}", self.mask_token_id)
        if not isinstance(self.markov_rank, int) or self.markov_rank < 0:
            raise bad("markov_rank", "an integer >= 0 (0 = no sequential head, i.e. DFlash)", self.markov_rank)
        if self.markov_rank > 0 and self.markov_head_type not in MARKOV_HEAD_TYPES:
            raise bad("markov_head_type", f"one of {list(MARKOV_HEAD_TYPES)} when markov_rank > 0", self.markov_head_type)
        if self.enable_confidence_head and self.confidence_head_with_markov and self.markov_rank == 0:
            raise bad("confidence_head_with_markov", "false when markov_rank is 0 (no Markov embedding W1)", True)

    # ------------------------------------------------------------------------------------------ config.json

    def to_hf_dict(self) -> dict[str, Any]:
        d = dict(self.extra)
        d.update({
            "architectures": [self.architecture], "model_type": "qwen3", "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers, "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "num_target_layers": self.num_target_layers, "target_layer_ids": list(self.target_layer_ids),
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings, "attention_bias": self.attention_bias,
            "hidden_act": "silu", "tie_word_embeddings": False,
            "layer_types": ["full_attention"] * self.num_hidden_layers,
        })
        if self.is_eagle:
            d.update({"ttt_length": self.block_size, "draft_num_hidden_layers": self.num_hidden_layers})
        else:
            d.update({"block_size": self.block_size, "mask_token_id": self.mask_token_id,
                      "num_anchors": self.num_anchors, "markov_rank": self.markov_rank,
                      "enable_confidence_head": self.enable_confidence_head})
            if self.markov_rank > 0:
                d["markov_head_type"] = self.markov_head_type
            if self.enable_confidence_head:
                d["confidence_head_with_markov"] = self.confidence_head_with_markov
        return d

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str) -> DrafterConfig:
        def need(key: str) -> Any:
            if key not in d:
                raise UserError(f"{source}: missing field {key}")
            return d[key]

        archs = need("architectures")
        if not isinstance(archs, list) or len(archs) != 1:
            raise UserError(f"{source}: field architectures is {archs!r}; expected [{DSPARK_ARCH!r}] or [{EAGLE3_ARCH!r}]")
        arch = archs[0]
        rope = d.get("rope_theta")
        if rope is None and isinstance(d.get("rope_parameters"), dict):
            rope = d["rope_parameters"].get("rope_theta")
        heads = need("num_attention_heads")
        known = {
            "architecture": arch, "vocab_size": need("vocab_size"), "hidden_size": need("hidden_size"),
            "intermediate_size": need("intermediate_size"), "num_hidden_layers": need("num_hidden_layers"),
            "num_attention_heads": heads, "num_key_value_heads": d.get("num_key_value_heads", heads),
            "head_dim": d.get("head_dim") or need("hidden_size") // heads,
            "num_target_layers": need("num_target_layers"), "target_layer_ids": need("target_layer_ids"),
            "rms_norm_eps": float(d.get("rms_norm_eps", 1e-6)), "rope_theta": float(rope or 10000.0),
            "max_position_embeddings": int(d.get("max_position_embeddings", 4096)),
            "attention_bias": bool(d.get("attention_bias", False)),
        }
        if arch == EAGLE3_ARCH:
            known["block_size"] = need("ttt_length")
        elif arch == DSPARK_ARCH:
            known.update({
                "block_size": need("block_size"), "mask_token_id": need("mask_token_id"),
                "markov_rank": need("markov_rank"), "num_anchors": int(d.get("num_anchors", 16)),
                "enable_confidence_head": need("enable_confidence_head"),
            })
            if not isinstance(known["enable_confidence_head"], bool):
                raise UserError(f"{source}: field enable_confidence_head is {known['enable_confidence_head']!r}; "
                                "expected true or false")
            if isinstance(known["markov_rank"], int) and known["markov_rank"] > 0:
                known["markov_head_type"] = need("markov_head_type")
            if known["enable_confidence_head"]:
                known["confidence_head_with_markov"] = bool(need("confidence_head_with_markov"))
        used = set(known) | {"architectures", "rope_parameters", "ttt_length"}
        extra = {k: v for k, v in d.items() if k not in used}
        cfg = cls(**known, extra=extra)
        cfg.validate(source)
        return cfg

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
