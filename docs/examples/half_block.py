"""The example policy of docs/adding-a-policy.md: verify the first half of every block."""

import numpy as np

from simulator import Policy, PolicyView


class HalfBlock(Policy):
    """Verify the first ``fraction`` of every block, whatever the confidences say."""

    reads_confidence = False  # so it can also replay traces recorded without confidences

    def __init__(self, fraction: float = 0.5):  # scenario `params` arrive as keyword arguments
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")  # reported as one line
        self.fraction = fraction

    def choose(self, view: PolicyView) -> np.ndarray:
        k = int(np.ceil(self.fraction * view.gamma))
        return np.minimum(k, view.max_lengths)  # l (R,) ints in 0..min(gamma, remaining - 1)
