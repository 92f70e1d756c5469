"""The goodness-of-fit helper: agrees with scipy on plain counts, pools sparse cells, and treats impossible
tokens as a certain failure."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dspark_runtime.chi_square import goodness_of_fit


def test_plain_counts_match_scipy():
    counts = np.array([690, 310])
    assert goodness_of_fit(counts, np.array([0.7, 0.3])) == pytest.approx(stats.chisquare(counts, [700, 300]).pvalue)


def test_sparse_cells_are_pooled():
    counts = np.array([500, 497, 2, 1])
    probs = np.array([0.5, 0.497, 0.002, 0.001])
    want = stats.chisquare([500, 497, 3], [500, 497, 3]).pvalue
    assert goodness_of_fit(counts, probs) == pytest.approx(want)


def test_count_in_an_impossible_cell_fails_and_bias_is_caught():
    assert goodness_of_fit(np.array([10, 0, 1]), np.array([0.5, 0.5, 0.0])) == 0.0
    assert goodness_of_fit(np.array([8500, 1500]), np.array([0.7, 0.3])) < 1e-6


def test_bad_input():
    with pytest.raises(ValueError):
        goodness_of_fit(np.array([1, 2]), np.array([1.0]))
    with pytest.raises(ValueError):
        goodness_of_fit(np.array([0, 0]), np.array([0.5, 0.5]))
