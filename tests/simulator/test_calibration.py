"""ECE, AUROC and Sequential Temperature Scaling against hand computation and brute force."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.core.calibration import (
    auroc,
    brier,
    confidence_report,
    ece,
    logit,
    sigmoid,
    sts_apply,
    sts_fit,
)


def test_ece_by_hand():
    # bin [0.1,0.15): conf 0.1, outcomes {1, 0} -> |0.1-0.5| ; bin [0.9, 0.95): conf 0.9 x2, outcomes {1,1} -> 0.1
    conf = np.array([0.1, 0.1, 0.9, 0.9])
    out = np.array([1, 0, 1, 1])
    assert ece(conf, out, bins=20) == pytest.approx((2 * 0.4 + 2 * 0.1) / 4)
    assert ece(np.array([1.0, 0.0]), np.array([1, 0])) == 0.0  # edges fall in the end bins


def test_auroc_against_pair_counting():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 5, 200).astype(float)  # many ties
    y = rng.random(200) < 0.4
    pos, neg = s[y], s[~y]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert auroc(s, y) == pytest.approx(pairs / (len(pos) * len(neg)))
    assert np.isnan(auroc(s, np.ones(200, bool)))


def test_brier_by_hand():
    assert brier(np.array([0.2, 0.9]), np.array([0, 1])) == pytest.approx((0.04 + 0.01) / 2)


def test_sts_lowers_ece_of_cumulative_product_on_miscalibrated_set():
    rng = np.random.default_rng(7)
    n, gamma = 40_000, 5
    true_p = sigmoid(rng.normal(1.5, 1.5, (n, gamma)))
    accept = rng.random((n, gamma)) < true_p
    accepted = np.where(accept.all(1), gamma, accept.argmin(1))
    raw = sigmoid(logit(true_p) * 2.0)  # overconfident: logits sharpened by 2
    half = n // 2
    temps = sts_fit(raw[:half], accepted[:half])
    assert np.all(temps > 1.4)  # it undoes the sharpening
    before = confidence_report(raw[half:], accepted[half:])
    after = confidence_report(sts_apply(raw[half:], temps), accepted[half:])
    for k in range(gamma):
        assert after["ece"][k] < before["ece"][k]
        assert after["ece"][k] < 0.02
        assert after["auroc"][k] == pytest.approx(before["auroc"][k])  # order-preserving
