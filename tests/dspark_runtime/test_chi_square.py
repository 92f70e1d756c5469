"""The goodness-of-fit helper: agrees with scipy on plain counts, pools sparse cells, and treats impossible
tokens as a certain failure."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dspark_runtime.chi_square import goodness_of_fit, independence


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


def test_independence_matches_scipy_and_catches_dependence():
    table = np.array([[480, 520], [510, 490], [250, 250]])
    want = stats.chi2_contingency(table, correction=False).pvalue
    assert independence(table) == pytest.approx(want)
    assert independence(np.array([[1000, 0], [0, 1000]])) < 1e-6


def test_independence_pools_rows_with_tiny_expected_counts():
    # 6 failures among 200k trials: whichever token they fall on, no real evidence of dependence
    assert independence(np.array([[4, 20_000], [2, 180_000]])) == 1.0
    # a rare token that is always rejected while a common one never is: still evidence after pooling
    assert independence(np.array([[0, 5_000], [40, 0], [0, 5_000]])) < 1e-6
    # empty rows and a constant outcome carry no information
    assert independence(np.array([[0, 0], [0, 30], [0, 70]])) == 1.0
