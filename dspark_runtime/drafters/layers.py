"""Transformer pieces the drafters share, written for Qwen3 parameter names (so DeepSpec checkpoints load):
RMSNorm, the SwiGLU MLP, rotary embeddings, and masked attention over keys that may include a padded cache."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Rotary(nn.Module):
    """cos/sin tables for absolute positions (the Qwen3 default RoPE, rotate-half convention)."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[..., None] * self.inv_freq  # (..., hd/2)
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, S, hd); cos/sin (B, S, hd)."""
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q (B, H, Q, hd), k/v (B, KVH, K, hd), mask (B, Q, K) bool (True = may attend) -> (B, Q, H * hd).
    Every query row must allow at least one key."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


class SharesTargetEmbeddings:
    """Mixin: the drafter's ``embed_tokens`` and ``lm_head`` are the target's, copied once and frozen."""

    def share_target_embeddings(self, target) -> None:
        with torch.no_grad():
            self.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
            self.lm_head.weight.copy_(target.get_output_embeddings().weight)
        self.embed_tokens.requires_grad_(False)
        self.lm_head.requires_grad_(False)
