"""Pearson's chi-square goodness of fit of observed token counts against a target distribution."""

from __future__ import annotations

import numpy as np
from scipy import stats

# Below about 5 expected counts a cell's chi-square term is no longer close to its asymptotic law, so such cells
# are pooled into one.
MIN_EXPECTED = 5.0


def goodness_of_fit(counts: np.ndarray, probs: np.ndarray) -> float:
    """The p-value of `counts` (K,) being a multinomial sample of `probs` (K,).

    A count in a cell of probability 0 is impossible under the target: p-value 0. Cells expected below
    MIN_EXPECTED are pooled; with fewer than two cells left there is nothing to test and the p-value is 1.
    """
    counts = np.asarray(counts, dtype=float).ravel()
    probs = np.asarray(probs, dtype=float).ravel()
    if counts.shape != probs.shape:
        raise ValueError(f"counts {counts.shape} and probs {probs.shape} differ in shape")
    total = counts.sum()
    if total <= 0:
        raise ValueError("no observations")
    probs = probs / probs.sum()
    if np.any(counts[probs <= 0] > 0):
        return 0.0
    expected = total * probs
    small = expected < MIN_EXPECTED
    obs = counts[~small]
    exp = expected[~small]
    if small.any() and expected[small].sum() > 0:
        obs = np.append(obs, counts[small].sum())
        exp = np.append(exp, expected[small].sum())
    if len(obs) < 2:
        return 1.0
    return float(stats.chisquare(obs, exp).pvalue)
