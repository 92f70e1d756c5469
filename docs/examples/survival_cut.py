"""The second example policy of docs/adding-a-policy.md: cut each block where prefix survival gets too low."""

import numpy as np

from simulator import Policy, PolicyView


class SurvivalCut(Policy):
    """Verify each request's draft tokens while their prefix survival (the product of the conditional
    confidences up to that token: the chance the target accepts all of them) stays at or above ``min_survival``."""

    sync_stall = True  # it reads this step's confidences, so the verify waits for them: the engine charges the stall

    def __init__(self, min_survival: float = 0.5):
        if not 0.0 < min_survival <= 1.0:
            raise ValueError(f"min_survival must be in (0, 1], got {min_survival!r}")
        self.min_survival = min_survival

    def choose(self, view: PolicyView) -> np.ndarray:
        survival = np.cumprod(view.confidence, axis=1)  # (R, gamma), non-increasing along each row
        keep = (survival >= self.min_survival).sum(axis=1)  # so the count is the length of the kept prefix
        return np.minimum(keep, view.max_lengths)
