"""The example policy of docs/adding-a-policy.md: verify the first half of every block."""

import numpy as np

from simulator.policies import Policy, PolicyView


class HalfBlock(Policy):
    def __init__(self, fraction: float = 0.5):
        self.fraction = fraction

    def choose(self, view: PolicyView) -> np.ndarray:
        k = int(np.ceil(self.fraction * view.gamma))
        return np.minimum(k, view.max_lengths)
