"""The DSpark drafter (and DFlash, the same model without sequential and confidence heads).

Parallel stage: target features from several layers are concatenated, projected and normalised
(H_ctx = RMSNorm(W_c [H_l1; ...; H_lm]), paper eq. 2) and injected as extra keys and values into every drafter layer
(eq. 3). The block [anchor, mask x (gamma - 1)] sits at positions p..p+gamma-1 (p = the anchor's position) and
attends non-causally to itself and to the context features of positions < p. Position k of the block predicts the
token at p + k + 1, so gamma input tokens give gamma draft logits (the paper's "anchor as first prediction").
Sequential stage: a head adds B_k from the previous token (heads.py). Embeddings and LM head are the target's,
frozen.

Two paths, side by side:
- ``forward_train``: teacher-forced, many blocks per sequence in one pass (training);
- ``add_context`` + ``propose``: per-request context caches, one block per request, tokens sampled left to right.
For the same prefix tokens their logits and confidences are equal (tests/dspark_runtime/test_drafters.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..kvcache import PaddedKVCache
from ..sampling import sample_tokens
from .config import DrafterConfig
from .heads import SEQUENTIAL_HEADS, ConfidenceHead
from .layers import MLP, RMSNorm, Rotary, SharesTargetEmbeddings, apply_rotary, attend


@dataclass
class Proposal:
    """One drafted block per request: tokens (R, gamma), logits (R, gamma, V) float32 (after the sequential head),
    confidence logits (R, gamma) float32 or None (a drafter without a confidence head)."""

    tokens: torch.Tensor
    logits: torch.Tensor
    confidence_logits: torch.Tensor | None


class BlockAttention(nn.Module):
    def __init__(self, cfg: DrafterConfig, in_dim: int | None = None):
        super().__init__()
        d, hd = cfg.hidden_size, cfg.head_dim
        in_dim = in_dim or d
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, hd
        self.q_proj = nn.Linear(in_dim, self.heads * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(in_dim, self.kv_heads * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(in_dim, self.kv_heads * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.heads * hd, d, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (normed, rotated) and values (B, KVH, S, hd) of inputs x (B, S, in_dim) at the positions of cos/sin."""
        b, s, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, s, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        return apply_rotary(k, cos, sin), v

    def query(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, s, self.heads, self.head_dim)).transpose(1, 2)
        return apply_rotary(q, cos, sin)


class BlockLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.self_attn = BlockAttention(cfg)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        """x (B, Q, d) block tokens; ctx_k/ctx_v (B, KVH, C, hd) injected context; mask (B, Q, C + Q)."""
        h = self.input_layernorm(x)
        q = self.self_attn.query(h, cos, sin)
        k, v = self.self_attn.kv(h, cos, sin)
        att = attend(q, torch.cat([ctx_k, k], dim=2), torch.cat([ctx_v, v], dim=2), mask)
        x = x + self.self_attn.o_proj(att)
        return x + self.mlp(self.post_attention_layernorm(x))


class DSparkDrafter(SharesTargetEmbeddings, nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.config = cfg
        d, v = cfg.hidden_size, cfg.vocab_size
        self.gamma = cfg.block_size
        self.embed_tokens = nn.Embedding(v, d)
        self.layers = nn.ModuleList(BlockLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(d, cfg.rms_norm_eps)
        self.fc = nn.Linear(len(cfg.target_layer_ids) * d, d, bias=False)
        self.hidden_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(d, v, bias=False)
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta)
        self.markov_head = (SEQUENTIAL_HEADS[cfg.markov_head_type](v, cfg.markov_rank, d)
                            if cfg.markov_rank > 0 else None)
        self.confidence_head = None
        if cfg.enable_confidence_head:
            self.confidence_head = ConfidenceHead(d, cfg.markov_rank if cfg.confidence_head_with_markov else 0)

    # ------------------------------------------------------------------------------------------------ shared

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        return self.hidden_norm(self.fc(features.to(self.fc.weight.dtype)))

    def backbone(self, ids, positions, ctx_kv, mask) -> torch.Tensor:
        """Block hidden states (B, Q, d), after the final norm."""
        x = self.embed_tokens(ids)
        cos, sin = self.rotary(positions, x.dtype)
        for layer, (ck, cv) in zip(self.layers, ctx_kv, strict=True):
            x = layer(x, cos, sin, ck, cv, mask)
        return self.norm(x)

    def _prev_embed(self, prev: torch.Tensor):
        if self.confidence_head is None or not self.config.confidence_head_with_markov:
            return None
        return self.markov_head.prev_embed(prev)

    # ------------------------------------------------------------------------------ teacher-forced block path

    def block_logits(self, h: torch.Tensor, prev: torch.Tensor):
        """Teacher-forced sequential stage: h (..., gamma, d), prev (..., gamma) = [anchor, x_1 .. x_{gamma-1}].
        Returns logits (..., gamma, V) float32 and confidence logits (..., gamma) or None."""
        logits = self.lm_head(h)
        if self.markov_head is not None:
            logits = logits + self.markov_head.block_bias(h, prev)
        conf = self.confidence_head(h, self._prev_embed(prev)) if self.confidence_head is not None else None
        return logits.float(), conf

    def forward_train(self, input_ids: torch.Tensor, features: torch.Tensor, anchors: torch.Tensor,
                      keep: torch.Tensor):
        """input_ids (B, T), features (B, T, F) of the target at every position, anchors (B, nb) positions
        (keep (B, nb) False for padding anchors). Returns logits (B, nb, gamma, V) for tokens at anchor+1..+gamma
        and confidence logits (B, nb, gamma) or None."""
        b, t = input_ids.shape
        nb, g = anchors.shape[1], self.gamma
        dev = input_ids.device
        offs = torch.arange(g, device=dev)
        ids = torch.full((b, nb, g), self.config.mask_token_id, dtype=torch.long, device=dev)
        ids[:, :, 0] = torch.gather(input_ids, 1, anchors)
        positions = (anchors[:, :, None] + offs).reshape(b, nb * g)
        # block q of block i sees context j < anchor_i and the keys of its own block
        q_block = torch.arange(nb * g, device=dev) // g
        ctx_ok = torch.arange(t, device=dev)[None, None, :] < anchors.repeat_interleave(g, dim=1)[:, :, None]
        ctx_ok = ctx_ok & keep.repeat_interleave(g, dim=1)[:, :, None]
        blk_ok = (q_block[:, None] == q_block[None, :]).expand(b, -1, -1)
        mask = torch.cat([ctx_ok, blk_ok], dim=2)
        ctx = self.fuse(features)
        cos, sin = self.rotary(torch.arange(t, device=dev).expand(b, t), ctx.dtype)
        ctx_kv = [layer.self_attn.kv(ctx, cos, sin) for layer in self.layers]
        h = self.backbone(ids.reshape(b, nb * g), positions, ctx_kv, mask).reshape(b, nb, g, -1)
        label_pos = (anchors[:, :, None] + offs).clamp(max=t - 1)  # token before position k: x_{p+k}
        prev = torch.gather(input_ids[:, None, :].expand(b, nb, t), 2, label_pos)
        return self.block_logits(h, prev)

    # ------------------------------------------------------------------------------------ step-by-step path

    def sample_block(self, h: torch.Tensor, anchors: torch.Tensor, temperature: float,
                     generator: torch.Generator | None = None, forced: torch.Tensor | None = None) -> Proposal:
        """Draft left to right: h (R, gamma, d); position k's bias and confidence use the token sampled at k-1
        (the anchor for k = 1). ``forced`` (R, gamma) replaces sampling (tests compare with the teacher-forced path)."""
        base = self.lm_head(h)
        head = self.markov_head
        state = head.init_state(h) if head is not None else None
        prev = anchors
        tokens, logits, confs = [], [], []
        for k in range(self.gamma):
            step = base[:, k]
            if head is not None:
                bias, state = head.step_bias(state, h[:, k], prev)
                step = step + bias
            if self.confidence_head is not None:
                confs.append(self.confidence_head(h[:, k], self._prev_embed(prev)))
            tok = forced[:, k] if forced is not None else sample_tokens(step, temperature, generator)
            tokens.append(tok)
            logits.append(step.float())
            prev = tok
        conf = torch.stack(confs, dim=1) if confs else None
        return Proposal(torch.stack(tokens, dim=1), torch.stack(logits, dim=1), conf)

    def new_context(self, rows: int, capacity: int) -> PaddedKVCache:
        w = self.fc.weight
        return PaddedKVCache(len(self.layers), rows, self.config.num_key_value_heads, capacity,
                             self.config.head_dim, w.device, w.dtype)

    @torch.no_grad()
    def add_context(self, cache: PaddedKVCache, rows: torch.Tensor, features: torch.Tensor,
                    tokens_after: torch.Tensor | None, counts: torch.Tensor) -> None:
        """Append target features (R', n, F) of newly verified positions (counts[i] real) to the requests'
        context. ``tokens_after`` is unused here (the autoregressive drafter needs it)."""
        ctx = self.fuse(features)
        pos = cache.lengths[rows][:, None] + torch.arange(ctx.shape[1], device=ctx.device)
        cos, sin = self.rotary(pos, ctx.dtype)
        kvs = [layer.self_attn.kv(ctx, cos, sin) for layer in self.layers]
        cache.commit(rows, [k for k, _ in kvs], [v for _, v in kvs], counts)

    @torch.no_grad()
    def propose(self, cache: PaddedKVCache, rows: torch.Tensor, anchors: torch.Tensor, temperature: float,
                generator: torch.Generator | None = None, forced: torch.Tensor | None = None) -> Proposal:
        """One block per request: the anchor sits at the request's next position p = its context length."""
        r, g = anchors.shape[0], self.gamma
        dev = anchors.device
        ids = torch.full((r, g), self.config.mask_token_id, dtype=torch.long, device=dev)
        ids[:, 0] = anchors
        positions = cache.lengths[rows][:, None] + torch.arange(g, device=dev)
        ks, vs, valid = cache.gather(rows)
        mask = torch.cat([valid[:, None, :].expand(r, g, -1), torch.ones(r, g, g, dtype=torch.bool, device=dev)], 2)
        h = self.backbone(ids, positions, list(zip(ks, vs, strict=True)), mask)
        return self.sample_block(h, anchors, temperature, generator, forced)
