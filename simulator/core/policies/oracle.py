"""The upper bound: a scheduler that knows which draft tokens the target will accept."""

from __future__ import annotations

import numpy as np

from simulator.core.policies.base import Policy, PolicyView, register
from simulator.core.policies.greedy import greedy_prefix_lengths


@register
class Oracle(Policy):
    """``oracle``: the global search (no early stop) on realised outcomes, a = 1 up to the first rejection and 0
    after. It never verifies a token that will be rejected and picks the batch size that maximises real emitted
    tokens per second. Not realisable; it bounds what any confidence-based scheduler can reach."""

    name = "oracle"
    reads_confidence = False
    needs_outcome = True

    def choose(self, view: PolicyView) -> np.ndarray:
        ok = np.minimum(view.outcome, view.max_lengths)
        realised = (np.arange(view.gamma)[None, :] < ok[:, None]).astype(float)
        return greedy_prefix_lengths(realised, view.sps, early_stop=False)
