"""DSpark's sequential heads and confidence head.

Each sequential head adds a prefix-dependent bias B_k to the parallel backbone's base logits U_k (paper eq. 4).
Every class has its two paths side by side:
- ``block_bias``: teacher-forced, all gamma positions at once from the true previous tokens (training);
- ``step_bias``: one position from the token actually sampled before it (drafting, left to right).
They must agree when given the same previous tokens (tests/dspark_runtime/test_drafters.py).

Shapes: h (..., gamma, d) backbone hidden states (post final norm); prev (..., gamma) the token before each
position (the anchor for position 1).
"""

from __future__ import annotations

import torch
from torch import nn


class MarkovHead(nn.Module):
    """Vanilla: first-order low-rank transition B(x_{k-1}, .) = W1[x_{k-1}] W2 (paper eq. 5)."""

    head_type = "vanilla"

    def __init__(self, vocab_size: int, rank: int, hidden_size: int):
        super().__init__()
        self.rank = rank
        self.markov_w1 = nn.Embedding(vocab_size, rank)
        self.markov_w2 = nn.Linear(rank, vocab_size, bias=False)

    def prev_embed(self, prev: torch.Tensor) -> torch.Tensor:
        return self.markov_w1(prev)

    def _latent(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        return e

    # teacher-forced
    def block_bias(self, h: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        return self.markov_w2(self._latent(h, self.prev_embed(prev).to(h.dtype)))

    # step by step
    def init_state(self, h: torch.Tensor) -> torch.Tensor | None:
        return None

    def step_bias(self, state, h_k: torch.Tensor, prev_k: torch.Tensor):
        return self.markov_w2(self._latent(h_k, self.prev_embed(prev_k).to(h_k.dtype))), state


class GatedMarkovHead(MarkovHead):
    """Gated: B = W2(g * W1[x_{k-1}]), g = sigmoid(Lin([h_k; W1[x_{k-1}]]))."""

    head_type = "gated"

    def __init__(self, vocab_size: int, rank: int, hidden_size: int):
        super().__init__(vocab_size, rank, hidden_size)
        self.gate_proj = nn.Linear(hidden_size + rank, rank)

    def _latent(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.gate_proj(torch.cat([h, e], dim=-1))) * e


class RNNHead(MarkovHead):
    """RNN: a gated recurrent state over the whole in-block prefix (paper eq. 6), s_0 = 0.
    z = [s_{k-1}; W1[x_{k-1}]; h_k]; one linear map gives gate, candidate and output;
    s_k = sig(g) * s_{k-1} + (1 - sig(g)) * tanh(c); B_k = W2 tanh(o)."""

    head_type = "rnn"

    def __init__(self, vocab_size: int, rank: int, hidden_size: int):
        super().__init__(vocab_size, rank, hidden_size)
        self.joint_proj = nn.Linear(2 * rank + hidden_size, 3 * rank)

    def init_state(self, h: torch.Tensor) -> torch.Tensor:
        return h.new_zeros(*h.shape[:-2], self.rank)

    def step_bias(self, state, h_k, prev_k):
        z = torch.cat([state, self.prev_embed(prev_k).to(h_k.dtype), h_k], dim=-1)
        gate, cand, out = self.joint_proj(z).chunk(3, dim=-1)
        gate = torch.sigmoid(gate)
        state = gate * state + (1.0 - gate) * torch.tanh(cand)
        return self.markov_w2(torch.tanh(out)), state

    def block_bias(self, h, prev):
        # teacher-forced, but the recurrence is inherently sequential: unroll over the block
        state = self.init_state(h)
        out = []
        for k in range(h.shape[-2]):
            bias, state = self.step_bias(state, h[..., k, :], prev[..., k])
            out.append(bias)
        return torch.stack(out, dim=-2)


SEQUENTIAL_HEADS = {"vanilla": MarkovHead, "gated": GatedMarkovHead, "rnn": RNNHead}


class ConfidenceHead(nn.Module):
    """c_k = sigmoid(w . [h_k; W1[x_{k-1}]]) (paper eq. 7): the conditional probability that draft token k survives
    given tokens 1..k-1 did. Returns logits; the same expression serves both paths (it is per position)."""

    def __init__(self, hidden_size: int, markov_rank: int = 0):
        super().__init__()
        self.proj = nn.Linear(hidden_size + markov_rank, 1)

    def forward(self, h: torch.Tensor, prev_embed: torch.Tensor | None) -> torch.Tensor:
        x = h if prev_embed is None else torch.cat([h, prev_embed.to(h.dtype)], dim=-1)
        return self.proj(x).squeeze(-1).float()
