"""Pearson's chi-square tests: goodness of fit of token counts against a target distribution, and independence
of two categorical variables."""

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


def independence(table: np.ndarray) -> float:
    """The p-value of the rows and columns of a contingency table (counts; few columns, e.g. a binary outcome per
    token) being independent. Empty rows and columns carry no information and are dropped; rows expected below
    MIN_EXPECTED in some column are pooled, smallest first, until every cell is expected at MIN_EXPECTED or more
    (a handful of samples in one column would otherwise dominate the statistic). With fewer than two rows or
    columns left the p-value is 1."""
    t = np.asarray(table, dtype=float)
    t = t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]
    if t.shape[1] < 2:
        return 1.0
    rows = sorted(t, key=lambda row: row.sum())
    share = t.sum(axis=0) / t.sum()
    while len(rows) >= 2 and (rows[0].sum() * share).min() < MIN_EXPECTED:
        rows = sorted([rows[0] + rows[1], *rows[2:]], key=lambda row: row.sum())
    if len(rows) < 2:
        return 1.0
    return float(stats.chi2_contingency(np.array(rows), correction=False).pvalue)
