"""Small exactly-known worlds for the losslessness audit, and drafting in them.

A world is a Markov target and a Markov drafter over a tiny vocabulary, seen from one fixed context: the target's
distribution of the first token is p_1, and of block position j+1 after draft token x_j it is P_j[x_j]; the
drafter proposes x_1 ~ q_1 and x_{j+1} ~ Q_j[x_j]. A Markov confidence head reports c_1 for the first position and
C_j[x_j] for position j+1: it reads the realised previous draft token, as DSpark's head does, which is exactly
what lets a scheduler that looks too far ahead select on the token it is about to verify (paper, Appendix A).

Every request-step of the audit starts from that same context, so the first token each request-step emits must be
distributed as p_1 whatever a lossless scheduler does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from simulator.errors import UserError


@dataclass(frozen=True)
class MarkovWorld:
    """A target, a drafter, a confidence head and an SPS curve (arrays are float64 numpy).

    p_first (V,), p_next (gamma, V, V): target at block position 1, and at position j+1 (j = 1..gamma, the last
        one the bonus position) after draft token x_j.
    q_first (V,), q_next (gamma-1, V, V): the drafter at position 1, and at position j+1 after x_j.
    c_first: confidence of position 1; c_next (gamma-1, V): confidence of position j+1 after x_j.
    requests: requests decoding together in each step (the scheduler sees them as one batch).
    sps: (requests * (gamma + 1) + 1,) steps per second indexed by total verified tokens B (index 0 unused).
    """

    p_first: np.ndarray
    p_next: np.ndarray
    q_first: np.ndarray
    q_next: np.ndarray
    c_first: float
    c_next: np.ndarray
    requests: int
    sps: np.ndarray

    @property
    def vocab(self) -> int:
        return len(self.p_first)

    @property
    def gamma(self) -> int:
        return self.p_next.shape[0]

    def sps_of(self, batch_tokens: np.ndarray) -> np.ndarray:
        return self.sps[np.asarray(batch_tokens, dtype=np.int64)]

    def describe(self) -> dict:
        return {"vocab": self.vocab, "gamma": self.gamma, "requests": self.requests}


def appendix_a() -> MarkovWorld:
    """The paper's Appendix A: vocabulary {A, B} = {0, 1}, one request, gamma = 2, target (0.7, 0.3) and draft
    (0.5, 0.5) at position 1 (so c_1 = 1 - TV = 0.8), c_2 = 0.9 after A and 0 after B, SPS(1..3) = 1.0, 0.5, 0.45.

    The paper leaves position 2's distributions open; they are chosen so the head is exactly calibrated there too:
    after A the target (0.7, 0.3) against the draft (0.8, 0.2) accepts with probability 0.9, after B the target
    (1, 0) against the draft (0, 1) never accepts. The bonus position is the target (0.7, 0.3)."""
    return MarkovWorld(
        p_first=np.array([0.7, 0.3]),
        p_next=np.array([[[0.7, 0.3], [1.0, 0.0]], [[0.7, 0.3], [0.7, 0.3]]]),
        q_first=np.array([0.5, 0.5]),
        q_next=np.array([[[0.8, 0.2], [0.0, 1.0]]]),
        c_first=0.8,
        c_next=np.array([[0.9, 0.0]]),
        requests=1,
        sps=np.array([np.nan, 1.0, 0.5, 0.45]),
    )


def random_world(seed: int) -> MarkovWorld:
    """A random world: vocabulary 2..6, gamma 2..4 (so that some confidence depends on a draft token), 1..3
    requests a step, Dirichlet target and drafter tables with some entries zeroed (supports differ, at least two
    tokens stay possible), c_1 in [0.4, 1), a head that reports 0 after about a third of the tokens and something
    in [0.5, 1) after the rest, and a strictly decreasing, jagged SPS curve (below)."""
    rng = np.random.default_rng([seed, 0xA0D17])
    vocab = int(rng.integers(2, 7))
    gamma = int(rng.integers(2, 5))
    requests = int(rng.integers(1, 4))
    c_first = float(rng.uniform(0.4, 1.0))

    def dists(*shape: int) -> np.ndarray:
        d = rng.dirichlet(np.full(vocab, 0.8), size=shape)
        sparse = rng.random(d.shape) < 0.15
        too_few = sparse.sum(axis=-1, keepdims=True) > vocab - 2
        sparse &= ~(too_few & (np.arange(vocab) < 2))  # such rows keep tokens 0 and 1
        d = np.where(sparse, 0.0, d)
        return d / d.sum(axis=-1, keepdims=True)

    # A staircase from B = R (every request's anchor): plateaus that cost a little (rate x 0.97-0.999 per token)
    # between cliffs (x 0.45-0.8) every 2..5 tokens, as wave quantisation makes them. The first admission meets a
    # cliff near its break-even, (R + c_1) SPS(R + 1) = R SPS(R), give or take 20%: there the early stop decides
    # whether anything is verified at all, and when it stops a search without it may look further (Appendix A).
    top = requests * (gamma + 1)
    factor = rng.uniform(0.97, 0.999, top - 1)  # factor[b - 1] = SPS(b + 1) / SPS(b)
    factor[requests - 1] = min(0.995, rng.uniform(0.8, 1.2) / (1.0 + c_first / requests))
    edge = requests - 1 + int(rng.integers(2, 6))
    while edge < top - 1:
        factor[edge] = rng.uniform(0.45, 0.8)
        edge += int(rng.integers(2, 6))
    sps = np.concatenate(([np.nan, 1.0], np.cumprod(factor)))
    c_next = np.where(rng.random((gamma - 1, vocab)) < 0.35, 0.0, rng.uniform(0.5, 1.0, (gamma - 1, vocab)))
    return MarkovWorld(
        p_first=dists(),
        p_next=dists(gamma, vocab),
        q_first=dists(),
        q_next=dists(gamma - 1, vocab),
        c_first=c_first,
        c_next=c_next,
        requests=requests,
        sps=sps,
    )


CASES = ("appendix-a", "random")


def make_world(case: str, seed: int) -> MarkovWorld:
    if case == "appendix-a":
        return appendix_a()
    if case == "random":
        return random_world(seed)
    raise UserError(f"--case: unknown case {case!r}; expected one of {', '.join(CASES)}")


@dataclass(frozen=True)
class DraftedBlocks:
    """N drafted blocks laid out for verify_block, with the confidences the head reported for them."""

    target_probs: torch.Tensor  # (N, gamma+1, V)
    draft_probs: torch.Tensor  # (N, gamma, V)
    tokens: torch.Tensor  # (N, gamma) long
    confidence: np.ndarray  # (N, gamma) float64


def draft_blocks(world: MarkovWorld, n: int, generator: torch.Generator) -> DraftedBlocks:
    """Sample n blocks x_1 ~ q_1, x_{j+1} ~ Q_j[x_j] (a loop over the gamma positions, each vectorised over the n
    blocks), and look up the target's distributions along each block and the head's confidences."""
    gamma, vocab = world.gamma, world.vocab
    q_first = torch.from_numpy(world.q_first)
    q_next = torch.from_numpy(world.q_next)
    p_next = torch.from_numpy(world.p_next)
    c_next = torch.from_numpy(world.c_next)

    tokens = torch.empty(n, gamma, dtype=torch.long)
    draft_probs = torch.empty(n, gamma, vocab, dtype=torch.float64)
    target_probs = torch.empty(n, gamma + 1, vocab, dtype=torch.float64)
    confidence = torch.empty(n, gamma, dtype=torch.float64)
    target_probs[:, 0] = torch.from_numpy(world.p_first)
    for j in range(gamma):
        if j == 0:
            draft_probs[:, 0] = q_first
            confidence[:, 0] = world.c_first
        else:
            prev = tokens[:, j - 1]
            draft_probs[:, j] = q_next[j - 1][prev]
            confidence[:, j] = c_next[j - 1][prev]
        tokens[:, j] = torch.multinomial(draft_probs[:, j], 1, generator=generator).squeeze(-1)
        target_probs[:, j + 1] = p_next[j][tokens[:, j]]
    return DraftedBlocks(target_probs, draft_probs, tokens, confidence.numpy())
