"""The quantile-table normal sampler against the normal distribution."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from simulator.core.acceptance.normal_table import LEVELS, quantiles


def standard_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Draws as the profile source's kernel makes them: a random 16-bit index into the quantiles."""
    return quantiles().take(rng.integers(0, LEVELS, shape, dtype=np.uint16))


def test_table_is_the_stratified_quantiles():
    q = quantiles()
    assert len(q) == 65536 and np.all(np.diff(q) > 0)
    assert q[32768] == -q[32767] > 0  # symmetric around 0
    assert q[-1] == abs(q[0]) and 4.3 < q[-1] < 4.33
    assert abs(q.mean()) < 1e-12 and 1 - 3e-5 < q.var() < 1.0


def test_draws_are_normal():
    z = standard_normal(np.random.default_rng(0), (400, 500)).ravel()
    assert abs(z.mean()) < 4 / math.sqrt(z.size)
    assert abs(z.var() - 1.0) < 0.01
    assert stats.kstest(z, "norm").pvalue > 0.01
    # a tail probability, as the latent model uses it: P(z > 2)
    assert abs((z > 2).mean() - stats.norm.sf(2)) < 4 * math.sqrt(stats.norm.sf(2) / z.size)
