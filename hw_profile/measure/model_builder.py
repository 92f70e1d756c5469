"""Build a real transformers model of a given shape with random weights, and drive its KV cache, for timing.

Random weights suffice: a forward's time does not depend on the values (no sparsity, no early exit), only on the
shapes and the kernels. The model is the transformers implementation of the shape's family (``Qwen3ForCausalLM``,
``Gemma3ForCausalLM``, ``DeepseekV3ForCausalLM``, or whatever a config.json names), built from a config with the
shape's numbers, so what is timed is the reference implementation of that architecture, not a stand-in.

The cache is transformers' ``StaticCache``: preallocated, updated in place, so that repeating one verification step
neither grows it nor copies it (a dynamic cache concatenates, an O(context) copy per step that serving engines with
paged KV do not pay). Its first ``context`` slots are filled with random values and its write position is put back
to ``context`` after every forward, so every repeat is the same step: R requests, t new tokens each, reading a cache
of ``context`` tokens. Transformers has changed its cache API across versions (``cache=`` and a cumulative-length
tensor in 5.x, ``past_key_values=`` and ``cache_position`` before); the helpers here handle both.

torch and transformers are imported inside the functions: ``hw_profile`` itself imports without them.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from dataclasses import dataclass
from typing import Any

from hw_profile.errors import HwProfileError
from hw_profile.hardware.shapes import ModelShape

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def torch_dtype(name: str):
    import torch

    return getattr(torch, TORCH_DTYPES[name])


def transformers_config(shape: ModelShape, base: dict | None = None, max_positions: int = 32768):
    """A transformers config with the shape's numbers. ``base``: the config.json the shape came from, kept as is
    (rope settings, norms, activations) apart from the layer count and the fields a layer cut implies."""
    from transformers import AutoConfig

    if base is not None:
        cfg = {k: v for k, v in base.items() if k not in ("architectures", "auto_map", "quantization_config")}
        cfg["num_hidden_layers"] = shape.layers
        if "first_k_dense_replace" in cfg:
            cfg["first_k_dense_replace"] = shape.dense_layers if shape.is_moe else shape.layers
        if isinstance(cfg.get("layer_types"), list):
            cfg["layer_types"] = cfg["layer_types"][: shape.layers]
        if isinstance(cfg.get("mlp_only_layers"), list):
            cfg["mlp_only_layers"] = [i for i in cfg["mlp_only_layers"] if i < shape.layers]
        cfg["max_position_embeddings"] = max(int(cfg.get("max_position_embeddings") or 0), max_positions)
        family = cfg.pop("model_type", shape.family)
        return AutoConfig.for_model(family, **cfg)

    common = dict(
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.intermediate,
        vocab_size=shape.vocab,
        tie_word_embeddings=shape.tie_embeddings,
        max_position_embeddings=max_positions,
    )
    if shape.family == "deepseek_v3":
        return AutoConfig.for_model(
            "deepseek_v3",
            **common,
            qk_nope_head_dim=shape.head_dim,
            qk_rope_head_dim=shape.qk_rope_head_dim,
            v_head_dim=shape.v_head_dim,
            kv_lora_rank=shape.kv_lora_rank,
            q_lora_rank=shape.q_lora_rank or None,
            n_routed_experts=shape.experts or 8,
            num_experts_per_tok=shape.experts_per_token or 1,
            n_shared_experts=shape.shared_experts or 1,
            moe_intermediate_size=shape.expert_intermediate or shape.intermediate,
            # a dense cut (a drafter of an MoE target) makes every layer dense
            first_k_dense_replace=shape.dense_layers if shape.is_moe else shape.layers,
            # DeepSeek-V3 routes within 4 of 8 expert groups; other expert counts route freely
            n_group=8 if shape.experts == 256 else 1,
            topk_group=4 if shape.experts == 256 else 1,
        )
    if shape.family in ("gemma3_text", "gemma3"):
        pattern = shape.sliding_pattern or 1
        layer_types = [
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(shape.layers)
        ]
        return AutoConfig.for_model(
            "gemma3_text",
            **common,
            head_dim=shape.head_dim,
            query_pre_attn_scalar=shape.head_dim,
            sliding_window=shape.sliding_window or 4096,
            layer_types=layer_types,
        )
    if shape.family == "llama":
        return AutoConfig.for_model("llama", **common, head_dim=shape.head_dim)
    if shape.family != "qwen3":
        raise HwProfileError(
            f"--model {shape.name}: no built-in transformers recipe for family {shape.family!r}; "
            "pass the model's config.json instead"
        )
    return AutoConfig.for_model("qwen3", **common, head_dim=shape.head_dim)


# Attention kernels a profile may ask for. "sdpa" is transformers' default: torch's scaled_dot_product_attention,
# which for more than one query token per request with a cache mask expands grouped K/V heads to every query head
# (repeat_kv, a copy of the cache per layer). "sdpa-gqa" keeps the K/V heads grouped (transformers'
# TRANSFORMERS_SDPA_FORCE_GQA switch, torch's enable_gqa) where the torch backend supports it. Serving engines use
# paged FlashAttention/FlashInfer-style kernels that never expand K/V; "flash_attention_2" (needs the flash-attn
# package) is the closest transformers has.
ATTENTION = ("sdpa", "sdpa-gqa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")


def build_model(shape: ModelShape, dtype: str, device: str, base: dict | None = None, max_positions: int = 32768,
                seed: int = 0, attention: str = "sdpa"):
    """An eval-mode causal LM of the shape with random weights, created directly on ``device``."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = transformers_config(shape, base, max_positions=max_positions)
    torch.manual_seed(seed)
    implementation = "sdpa" if attention == "sdpa-gqa" else attention
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype(dtype), attn_implementation=implementation)
    except (ImportError, ValueError) as exc:
        if implementation == "sdpa":
            raise
        raise HwProfileError(f"--attn {attention}: not usable here ({str(exc).splitlines()[0][:200]})") from None
    return model.eval()


@contextlib.contextmanager
def force_sdpa_gqa(active: bool):
    """While active, transformers' SDPA path keeps grouped K/V heads (no repeat_kv); the variable is restored after."""
    var = "TRANSFORMERS_SDPA_FORCE_GQA"
    saved = os.environ.get(var)
    if active:
        os.environ[var] = "1"
    try:
        yield
    finally:
        if active:
            if saved is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = saved


def implementation_info(model, moe: bool = False) -> dict:
    """Which transformers code paths ran: the timing belongs to them (an eager MoE loop is not a grouped GEMM)."""
    import transformers

    cfg = model.config
    info = {
        "model_class": type(model).__name__,
        "transformers": transformers.__version__,
        "attn_implementation": getattr(cfg, "_attn_implementation", None),
    }
    experts = getattr(cfg, "_experts_implementation", None)
    if moe and experts:
        info["experts_implementation"] = experts
    return info


@dataclass
class StepInputs:
    """Everything one repeated verification step needs: R requests x t tokens after ``context`` cached tokens."""

    model: Any
    cache: Any
    context: int
    kwargs: dict

    def forward(self):
        out = self.model(**self.kwargs)
        set_cache_length(self.cache, self.context)  # the same step again next time
        return out.logits


def new_static_cache(model, requests: int, max_len: int):
    """A StaticCache for ``requests`` sequences of up to ``max_len`` tokens, across transformers versions."""
    from transformers import StaticCache

    params = inspect.signature(StaticCache.__init__).parameters
    kwargs: dict = {"config": model.config, "max_cache_len": max_len}
    if "max_batch_size" in params:  # transformers < 4.56
        kwargs["max_batch_size"] = requests
    if "device" in params:
        kwargs["device"] = model.device
    if "dtype" in params:
        kwargs["dtype"] = model.dtype
    return StaticCache(**kwargs)


def cache_tensors(cache) -> list:
    """The key and value tensors of every layer (allocated ones only)."""
    if hasattr(cache, "layers"):
        out = []
        for layer in cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name, None)
                if t is not None and hasattr(t, "numel"):
                    out.append(t)
        return out
    return [*getattr(cache, "key_cache", []), *getattr(cache, "value_cache", [])]


def set_cache_length(cache, length: int) -> None:
    """Put the cache's write position at ``length`` (transformers 5.x keeps it in the cache; older versions take a
    ``cache_position`` argument instead and need nothing here). Device-side and in place, so it can be captured in
    a CUDA graph."""
    for layer in getattr(cache, "layers", []):
        cum = getattr(layer, "cumulative_length", None)
        if cum is not None and hasattr(cum, "fill_"):
            cum.fill_(length)
        if hasattr(layer, "cumulative_length_int"):
            layer.cumulative_length_int = length


def forward_kwargs(model, cache, input_ids, context: int) -> dict:
    import torch

    requests, tokens = input_ids.shape
    params = inspect.signature(model.forward).parameters
    positions = torch.arange(context, context + tokens, device=input_ids.device)
    kwargs = {
        "input_ids": input_ids,
        "position_ids": positions.unsqueeze(0).expand(requests, tokens).contiguous(),
        "use_cache": True,
        ("cache" if "cache" in params else "past_key_values"): cache,
    }
    if "cache_position" in params:
        kwargs["cache_position"] = positions
    return kwargs


def prepare_cache(model, requests: int, context: int, max_tokens: int, seed: int = 0):
    """A static cache for ``requests`` sequences holding ``context`` random tokens, room for ``max_tokens`` more.

    The first forward (``max_tokens`` tokens at position 0) makes transformers allocate every layer's tensors; they
    are then filled with random values and the write position is set to ``context``."""
    import torch

    cache = new_static_cache(model, requests, context + max_tokens)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (requests, max_tokens), generator=gen).to(model.device)
    with torch.inference_mode():
        model(**forward_kwargs(model, cache, ids, 0))
        for t in cache_tensors(cache):
            t.normal_()
        # inside inference mode: transformers may create the position tensor in the forward, as an inference tensor
        set_cache_length(cache, context)
    return cache


def step_inputs(model, cache, requests: int, context: int, tokens: int, seed: int = 0) -> StepInputs:
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed + 7919 * tokens)
    ids = torch.randint(0, model.config.vocab_size, (requests, tokens), generator=gen).to(model.device)
    return StepInputs(model=model, cache=cache, context=context, kwargs=forward_kwargs(model, cache, ids, context))
