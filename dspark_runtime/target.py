"""The target model: a transformers Qwen3 causal LM, built for the tiny world or loaded from a local directory,
and ``TargetRunner``, which runs it batched over R requests with per-request KV caches.

``TargetRunner.forward`` is the model-level half of verification: one target forward over the anchor and drafted
tokens of every request (different context lengths, different numbers of tokens to verify), returning the
logits at every verified position and the hidden states the drafters read (the layers in ``layer_ids``). The
caller decides from the rejection sampling how many entries of each request to keep (``PaddedKVCache.commit``),
which is the rollback.

Feature convention (as in DeepSpec): layer id i is the output of decoder layer i (``hidden_states[i + 1]`` in
transformers), -1 the embedding output; the final layer is excluded because transformers returns it normalised.
"""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import torch

from simulator.errors import UserError

from .kvcache import PaddedKVCache


def qwen3_config(vocab_size: int, hidden_size: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                 intermediate_size: int, max_positions: int, special: dict[str, int]):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        max_position_embeddings=max_positions, tie_word_embeddings=True, rms_norm_eps=1e-6,
        pad_token_id=special["pad"], eos_token_id=special["eos"], bos_token_id=special["eos"],
    )


def save_target(model, tokenizer_file: Path, out_dir: Path) -> None:
    """An HF model directory (config.json, model.safetensors, tokenizer.json), replaced atomically."""
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    shutil.copy(tokenizer_file, tmp / "tokenizer.json")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)


def resolve_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if name not in table:
        raise UserError(f"--dtype: unknown dtype {name!r}; expected one of {sorted(table)}")
    return table[name]


def resolve_device(name: str) -> torch.device:
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device: {name!r} requested but torch sees no CUDA device")
    try:
        return torch.device(name)
    except RuntimeError as exc:
        raise UserError(f"--device: {name!r} is not a torch device ({exc})") from None


def load_target(path: str | Path, device: str | torch.device = "cpu", dtype: str | torch.dtype = "float32"):
    """A Qwen3 causal LM and its tokenizer from a local directory (never a hub download)."""
    from transformers import AutoModelForCausalLM

    from .tokenizer import load_tokenizer

    path = Path(path)
    cfg_file = path / "config.json"
    if not path.is_dir():
        raise UserError(f"{path}: target directory not found")
    if not cfg_file.is_file():
        raise UserError(f"{cfg_file}: not found; a target directory needs an HF config.json")
    model_type = json.loads(cfg_file.read_text()).get("model_type")
    if model_type != "qwen3":
        raise UserError(f"{cfg_file}: field model_type is {model_type!r}; expected 'qwen3'")
    if not any(path.glob("*.safetensors")):
        raise UserError(f"{path}: no *.safetensors weights in the target directory")
    device = resolve_device(str(device)) if not isinstance(device, torch.device) else device
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype), local_files_only=True)
    model.to(device).eval()
    if (path / "tokenizer.json").is_file():
        tokenizer = load_tokenizer(path)
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer


def feature_indices(layer_ids: list[int], num_layers: int, source: str = "target_layer_ids") -> list[int]:
    """Indices into transformers' hidden_states tuple for DeepSpec-style layer ids (validated)."""
    out = []
    for i in layer_ids:
        if not (i == -1 or 0 <= i <= num_layers - 2):
            raise UserError(f"{source}: layer id {i} out of range; expected -1 (embeddings) or 0..{num_layers - 2} "
                            f"(the final layer {num_layers - 1} is excluded) for a {num_layers}-layer target")
        out.append(i + 1)
    if out != sorted(set(out)):
        raise UserError(f"{source}: layer ids {layer_ids} must be strictly increasing")
    return out


def _cache_kwarg(model) -> str:
    """transformers renamed ``past_key_values`` to ``cache``; use whichever this version's forward prefers."""
    params = inspect.signature(model.model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class TargetRunner:
    """Batched forwards of a Qwen3 target over requests that each own a slice of a ``PaddedKVCache``."""

    def __init__(self, model, layer_ids: list[int]):
        self.model = model
        cfg = model.config
        self.config = cfg
        self.layer_ids = list(layer_ids)
        self.hidden_index = feature_indices(self.layer_ids, cfg.num_hidden_layers)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self._cache_kw = _cache_kwarg(model)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    def new_cache(self, rows: int, capacity: int) -> PaddedKVCache:
        cfg = self.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return PaddedKVCache(cfg.num_hidden_layers, rows, cfg.num_key_value_heads, capacity, head_dim,
                             self.device, self.dtype)

    @torch.no_grad()
    def forward(self, cache: PaddedKVCache, rows: torch.Tensor, tokens: torch.Tensor, counts: torch.Tensor,
                logits_at: torch.Tensor | None = None):
        """Run tokens (R', n) for requests ``rows`` on top of their cached context; row i has counts[i] real tokens
        (the rest is padding). Returns (logits (R', n, V) float32 -- or (R', V) at positions ``logits_at`` when
        given --, features (R', n, len(layer_ids) * hidden), new_keys, new_values) where new_* are per-layer
        (R', kv_heads, n, head_dim) tensors for ``cache.commit``."""
        from transformers import DynamicCache

        ks, vs, valid = cache.gather(rows)
        width = valid.shape[1]
        n = tokens.shape[1]
        new_valid = torch.arange(n, device=tokens.device)[None, :] < counts[:, None]
        mask = torch.cat([valid, new_valid], dim=1).long()
        positions = cache.lengths[rows][:, None] + torch.arange(n, device=tokens.device)[None, :]
        hf_cache = DynamicCache(ddp_cache_data=list(zip(ks, vs, strict=True))) if width else DynamicCache()
        out = self.model.model(input_ids=tokens, attention_mask=mask, position_ids=positions,
                               use_cache=True, output_hidden_states=True, **{self._cache_kw: hf_cache})
        hidden = out.last_hidden_state
        if logits_at is not None:
            hidden = hidden[torch.arange(hidden.shape[0], device=hidden.device), logits_at]
        logits = self.model.lm_head(hidden).float()
        features = torch.cat([out.hidden_states[i] for i in self.hidden_index], dim=-1)
        new_k = [layer.keys[:, :, width:] for layer in hf_cache.layers]
        new_v = [layer.values[:, :, width:] for layer in hf_cache.layers]
        return logits, features, new_k, new_v

    @torch.no_grad()
    def prefill(self, cache: PaddedKVCache, rows: torch.Tensor, prompts: list[list[int]]):
        """Prefill whole prompts (right-padded into one batch) and commit them; returns the last-position logits
        (R', V) and per-request prompt features (list of (len_i, F))."""
        counts = torch.tensor([len(p) for p in prompts], device=self.device)
        tokens = torch.zeros(len(prompts), int(counts.max()), dtype=torch.long, device=self.device)
        for i, p in enumerate(prompts):
            tokens[i, : len(p)] = torch.tensor(p, device=self.device)
        logits, feats, nk, nv = self.forward(cache, rows, tokens, counts, logits_at=counts - 1)
        cache.commit(rows, nk, nv, counts)
        return logits, [feats[i, : len(p)] for i, p in enumerate(prompts)]

    @torch.no_grad()
    def teacher_forced(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """One plain forward over whole sequences (training): logits (B, T, V) and features (B, T, F)."""
        out = self.model.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                               use_cache=False)
        logits = self.model.lm_head(out.last_hidden_state).float()
        features = torch.cat([out.hidden_states[i] for i in self.hidden_index], dim=-1)
        return logits, features
