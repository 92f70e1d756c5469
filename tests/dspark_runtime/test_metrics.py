"""Acceptance metrics by hand: tau (bonus included), conditional acceptance, prefix survival, clustered SE."""

from __future__ import annotations

import numpy as np
import pytest

from dspark_runtime.metrics import acceptance_metrics, clustered_se


def test_acceptance_metrics_by_hand():
    m = acceptance_metrics(np.array([0, 2, 1, 3]), 3)
    assert m["tau"] == pytest.approx(2.5)
    assert m["conditional_acceptance"] == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    assert m["prefix_survival"] == pytest.approx([3 / 4, 2 / 4, 1 / 4])
    assert m["reached"] == [4, 3, 2]
    assert m["tau"] == pytest.approx(1 + sum(m["prefix_survival"]))


def test_conditional_acceptance_undefined_where_never_reached():
    m = acceptance_metrics(np.array([0, 0, 1]), 3)
    assert m["conditional_acceptance"][:2] == pytest.approx([1 / 3, 0.0])
    assert np.isnan(m["conditional_acceptance"][2])


def test_clustered_standard_error():
    x = np.array([1.0, 3.0, 2.0, 6.0])
    d = x - x.mean()
    assert clustered_se(x, np.arange(4)) == pytest.approx(np.sqrt((d ** 2).sum()) / 4)
    # two clusters: their summed deviations
    assert clustered_se(x, np.array([0, 0, 1, 1])) == pytest.approx(np.sqrt(d[:2].sum() ** 2 + d[2:].sum() ** 2) / 4)
    assert clustered_se(x, np.zeros(4)) == pytest.approx(0.0)
