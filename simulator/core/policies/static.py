"""Fixed-length policies: plain decoding and static k (MTP-1 is the MTP drafter with static-1)."""

from __future__ import annotations

import numpy as np

from simulator.core.policies.base import Policy, PolicyView, register


@register
class NoSpeculation(Policy):
    """``ar``: verify no draft token; every step emits one target token per request."""

    name = "ar"
    reads_confidence = False

    def choose(self, view: PolicyView) -> np.ndarray:
        return np.zeros(view.remaining.shape[0], dtype=np.int64)


@register
class StaticK(Policy):
    """``static-k``: verify the first k draft tokens of every request (vLLM ``num_speculative_tokens``)."""

    name = "static"
    reads_confidence = False
    positional = "k"

    def __init__(self, k: int):
        if int(k) != k or k < 0:
            raise ValueError(f"k must be a non-negative integer, got {k!r}")
        self.k = int(k)

    def choose(self, view: PolicyView) -> np.ndarray:
        return np.minimum(self.k, view.max_lengths)
