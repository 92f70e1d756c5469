"""The expected-experts formula against hand values and a Monte Carlo of uniform top-k routing."""

import numpy as np
import pytest

from hw_profile.hardware.moe import expected_distinct_experts, routed_weight_params
from hw_profile.hardware.shapes import get_shape


def test_formula_hand_values():
    e = expected_distinct_experts(np.array([0, 1, 2, 32, 10_000]), 256, 8)
    assert e[0] == 0
    assert e[1] == pytest.approx(8.0)  # one token: its own k experts
    assert e[2] == pytest.approx(256 * (1 - (248 / 256) ** 2))  # = 8 + 8 * 248/256
    assert e[2] == pytest.approx(8 + 8 * 248 / 256)
    assert e[3] == pytest.approx(163.31, abs=0.01)
    assert e[4] == pytest.approx(256.0)
    assert np.all(np.diff(e) >= 0)
    # expert parallelism: each of 8 groups holds 32 experts and sees an eighth of the distinct ones
    assert expected_distinct_experts(32, 256, 8, ep=8) == pytest.approx(163.31 / 8, abs=0.01)


def test_formula_matches_monte_carlo():
    rng = np.random.default_rng(0)
    experts, k, tokens, trials = 64, 4, 12, 4000
    # each token picks k distinct experts uniformly: argsort of random keys gives a uniform k-subset
    picks = np.argsort(rng.random((trials, tokens, experts)), axis=-1)[..., :k]
    touched = np.zeros((trials, experts), dtype=bool)
    np.put_along_axis(touched, picks.reshape(trials, -1), True, axis=1)
    assert touched.sum(1).mean() == pytest.approx(expected_distinct_experts(tokens, experts, k), rel=0.01)


def test_routed_weights_per_gpu():
    ds = get_shape("deepseek-v3")
    one = routed_weight_params(ds, 1.0)
    assert one == pytest.approx(58 * 8 * 3 * 7168 * 2048)
    # 8 GPUs, one expert group each: a GPU reads an eighth of the distinct experts, whole
    assert routed_weight_params(ds, 1.0, gpus=8) == pytest.approx(one / 8)
    # 8 GPUs, pure tensor parallel over experts (ep=1): every touched expert, an eighth of each
    assert routed_weight_params(ds, 1.0, gpus=8, ep=1) == pytest.approx(one / 8)
    assert routed_weight_params(get_shape("qwen3-8b"), 64.0) == 0
