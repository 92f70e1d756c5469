"""DSpark's schedulers: Algorithm 1 (synchronous greedy with early stop) and the asynchronous production variant."""

from __future__ import annotations

from collections import deque

import numpy as np

from simulator.core.policies.base import Policy, PolicyView, register
from simulator.core.policies.greedy import greedy_prefix_lengths, top_k_prefix_lengths


@register
class DSpark(Policy):
    """``dspark``: the global greedy on prefix survival, Theta = tau * SPS(B), stopping at the first step where
    Theta does not rise (paper 3.2.2). It needs this step's confidences before the verify launches, so it pays the
    scenario's scheduling stall."""

    name = "dspark"
    sync_stall = True

    def choose(self, view: PolicyView) -> np.ndarray:
        return greedy_prefix_lengths(view.confidence, view.sps, early_stop=True)


@register
class DSparkAsync(Policy):
    """``dspark-async`` (paper 5.2): admit the N_cap draft tokens with the highest fresh prefix survival, where
    N_cap comes from a global search (no early stop) on the confidences of ``lag`` steps earlier. The capacity is
    known before this step's drafts exist, so there is no stall and the search may cross SPS cliffs; the top-N_cap
    admission itself looks at nothing beyond rank. Until ``lag`` steps have passed, N_cap is 0."""

    name = "dspark-async"

    def __init__(self, lag: int = 2):
        if int(lag) != lag or lag < 1:
            raise ValueError(f"lag must be a positive integer, got {lag!r}")
        self.lag = int(lag)
        self._capacity: deque[int] = deque()

    def choose(self, view: PolicyView) -> np.ndarray:
        self._capacity.append(int(greedy_prefix_lengths(view.confidence, view.sps, early_stop=False).sum()))
        capacity = self._capacity.popleft() if len(self._capacity) > self.lag else 0
        return top_k_prefix_lengths(view.confidence, capacity)
