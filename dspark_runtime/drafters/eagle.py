"""The autoregressive baseline: a one-layer drafter in the spirit of Eagle3 (DeepSpec's ``Qwen3Eagle3Model``
parameter names).

Each entry at position j combines the fused target features of position j (or, while drafting, the drafter's own
output at the previous step) with the embedding of the token at j + 1: the layer input is
[RMSNorm(embed(x_{j+1})); RMSNorm(hidden_j)] (2d wide), attention is causal, and the output at j predicts x_{j+2}.
Drafting from an anchor at position p: the committed entries 0..p-1 (target features) give the first draft token;
each later step feeds back the drafter's output and the token it just drafted (gamma sequential steps).

Training unrolls those gamma steps over many anchors at once ("training-time test"): step 0 is one causal pass
over the whole sequence; step s >= 1 at anchor p is a query at position p - 1 + s that attends to the step-0 keys
of positions <= p - 1 and to the keys of its own steps 1..s, exactly the keys drafting sees. Tokens are teacher
forced (the true x_{p+s}), hidden states are the drafter's own, as at drafting time.
"""

from __future__ import annotations

import torch
from torch import nn

from simulator.errors import UserError

from ..kvcache import PaddedKVCache
from ..sampling import sample_tokens
from .config import DrafterConfig
from .dspark import BlockAttention, Proposal
from .layers import MLP, RMSNorm, Rotary, SharesTargetEmbeddings, attend


class EagleLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        d = cfg.hidden_size
        self.self_attn = BlockAttention(cfg, in_dim=2 * d)
        self.mlp = MLP(d, cfg.intermediate_size)
        self.hidden_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.input_layernorm = RMSNorm(d, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, emb, hid, cos, sin, past_k, past_v, mask):
        """emb/hid (B, Q, d); past_k/v (B, KVH, P, hd); mask (B, Q, P + Q). Returns (out, k, v) with this call's
        own keys/values (B, KVH, Q, hd)."""
        x = torch.cat([self.input_layernorm(emb), self.hidden_norm(hid)], dim=-1)
        q = self.self_attn.query(x, cos, sin)
        k, v = self.self_attn.kv(x, cos, sin)
        att = attend(q, torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2), mask)
        out = hid + self.self_attn.o_proj(att)
        out = out + self.mlp(self.post_attention_layernorm(out))
        return out, k, v


class EagleContext:
    """Drafting state of R requests: committed keys/values and the output at each request's last entry."""

    def __init__(self, cache: PaddedKVCache, hidden: torch.Tensor):
        self.cache = cache
        self.last_hidden = hidden  # (R, d)

    @property
    def lengths(self) -> torch.Tensor:
        return self.cache.lengths


class EagleDrafter(SharesTargetEmbeddings, nn.Module):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        if cfg.num_hidden_layers != 1:
            raise UserError(f"drafter config: field num_hidden_layers is {cfg.num_hidden_layers}; the autoregressive "
                            "baseline supports exactly 1 layer (cached entries must not depend on later tokens)")
        self.config = cfg
        d, v = cfg.hidden_size, cfg.vocab_size
        self.gamma = cfg.block_size
        self.embed_tokens = nn.Embedding(v, d)
        self.fc = nn.Linear(len(cfg.target_layer_ids) * d, d, bias=False)
        self.layers = nn.ModuleList([EagleLayer(cfg)])
        self.norm = RMSNorm(d, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(d, v, bias=False)
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta)
        self.confidence_head = None
        self.markov_head = None

    @property
    def layer(self) -> EagleLayer:
        return self.layers[0]

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(h)).float()

    # ------------------------------------------------------------------------------ teacher-forced block path

    def forward_train(self, input_ids, features, anchors, keep):
        """Same contract as DSparkDrafter.forward_train (no confidence head: returns (logits, None))."""
        b, t = input_ids.shape
        nb, g = anchors.shape[1], self.gamma
        dev = input_ids.device
        hid0 = self.fc(features.to(self.fc.weight.dtype))
        nxt = torch.cat([input_ids[:, 1:], input_ids[:, -1:]], dim=1)  # x_{j+1}; the last entry is never used
        pos0 = torch.arange(t, device=dev).expand(b, t)
        cos, sin = self.rotary(pos0, hid0.dtype)
        empty = hid0.new_zeros(b, self.config.num_key_value_heads, 0, self.config.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool, device=dev).tril().expand(b, t, t)
        out0, k0, v0 = self.layer(self.embed_tokens(nxt), hid0, cos, sin, empty, empty, causal)
        last = (anchors - 1).clamp(min=0)  # entry p - 1 predicts the first draft token x_{p+1}
        h = torch.gather(out0, 1, last[:, :, None].expand(b, nb, out0.shape[-1]))  # (B, nb, d)
        steps = [self.logits(h)]
        ctx_ok = torch.arange(t, device=dev)[None, None, :] <= last[:, :, None]  # (B, nb, T)
        ctx_ok = ctx_ok | ~keep[:, :, None]  # padding anchors: any keys, their loss is masked
        own = torch.eye(nb, dtype=torch.bool, device=dev).expand(b, nb, nb)
        ks, vs = [k0], [v0]
        for s in range(1, g):
            tok = torch.gather(input_ids, 1, (anchors + s).clamp(max=t - 1))
            cos, sin = self.rotary(last + s, h.dtype)
            mask = torch.cat([ctx_ok] + [own] * s, dim=2)
            h, k, v = self.layer(self.embed_tokens(tok), h, cos, sin, torch.cat(ks, 2), torch.cat(vs, 2), mask)
            ks.append(k)
            vs.append(v)
            steps.append(self.logits(h))
        return torch.stack(steps, dim=2), None

    # ------------------------------------------------------------------------------------ step-by-step path

    def new_context(self, rows: int, capacity: int) -> EagleContext:
        w = self.fc.weight
        cache = PaddedKVCache(1, rows, self.config.num_key_value_heads, capacity, self.config.head_dim,
                              w.device, w.dtype)
        return EagleContext(cache, torch.zeros(rows, self.config.hidden_size, device=w.device, dtype=w.dtype))

    @torch.no_grad()
    def add_context(self, ctx: EagleContext, rows, features, tokens_after, counts) -> None:
        """Commit entries (features of position j, token at j + 1) for the newly verified positions."""
        cache = ctx.cache
        r, n = tokens_after.shape
        dev = tokens_after.device
        ks, vs, valid = cache.gather(rows)
        pos = cache.lengths[rows][:, None] + torch.arange(n, device=dev)
        cos, sin = self.rotary(pos, self.fc.weight.dtype)
        causal = torch.ones(n, n, dtype=torch.bool, device=dev).tril().expand(r, n, n)
        mask = torch.cat([valid[:, None, :].expand(r, n, -1), causal], dim=2)
        out, k, v = self.layer(self.embed_tokens(tokens_after), self.fc(features.to(self.fc.weight.dtype)),
                               cos, sin, ks[0], vs[0], mask)
        cache.commit(rows, [k], [v], counts)
        ctx.last_hidden[rows] = out[torch.arange(r, device=dev), counts - 1]

    @torch.no_grad()
    def propose(self, ctx: EagleContext, rows, anchors, temperature, generator=None, forced=None) -> Proposal:
        cache = ctx.cache
        r = anchors.shape[0]
        ks, vs, valid = cache.gather(rows)
        k_all, v_all = ks[0], vs[0]
        h = ctx.last_hidden[rows][:, None]  # (R, 1, d), the output of entry p - 1
        pos = cache.lengths[rows][:, None] - 1  # p - 1
        ok = valid[:, None, :]
        tokens, logits = [], []
        for s in range(self.gamma):
            if s > 0:
                cos, sin = self.rotary(pos + s, h.dtype)
                mask = torch.cat([ok, torch.ones(r, 1, 1, dtype=torch.bool, device=h.device)], dim=2)
                h, k, v = self.layer(self.embed_tokens(tokens[-1][:, None]), h, cos, sin, k_all, v_all, mask)
                k_all, v_all = torch.cat([k_all, k], 2), torch.cat([v_all, v], 2)
                ok = mask
            step = self.logits(h[:, 0])
            tok = forced[:, s] if forced is not None else sample_tokens(step, temperature, generator)
            tokens.append(tok)
            logits.append(step)
        return Proposal(torch.stack(tokens, dim=1), torch.stack(logits, dim=1), None)
