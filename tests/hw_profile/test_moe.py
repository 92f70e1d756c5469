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


def test_a_balanced_measurement_read_at_random_routing():
    """A kernel bound by its weights, measured under balanced routing, costs a + s x min(B k, E) (every assignment
    its own expert until all are covered); B tokens routed at random touch E (1 - (1 - k/E)^B) experts, so the
    lookup takes off s for each expert they leave untouched: nothing at one token or once all are touched."""
    import pandas as pd

    from hw_profile.kernels.grid import Grid
    from hw_profile.kernels.ops import unbalanced_savings_ms

    shape = get_shape("gpt-oss-120b")  # 128 experts, 4 a token
    e, k, a, s = shape.experts, shape.experts_per_token, 0.05, 0.005
    b = np.array([1.0, 2, 4, 8, 16, 32, 48, 64, 128, 256, 1024])
    grid = Grid.from_frame(pd.DataFrame({"num_tokens": b, "latency": a + s * np.minimum(b * k, e)}), ["num_tokens"])
    got = unbalanced_savings_ms(grid, shape, b)
    want = s * (np.minimum(b * k, e) - expected_distinct_experts(b, e, k))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert got[0] == pytest.approx(0.0, abs=1e-12) and got[-1] < 1e-6
    # 8 tokens: 28.7 of the 32 experts a balanced batch reads; 40 tokens: 92 of all 128
    assert unbalanced_savings_ms(grid, shape, np.array([8.0]))[0] == pytest.approx(s * (32 - 28.71), rel=2e-3)
    assert unbalanced_savings_ms(grid, shape, np.array([40.0]))[0] == pytest.approx(s * (128 - 92.0), rel=2e-3)
    # a kernel whose rows do not rise (bound by something else) saves nothing
    flat = Grid.from_frame(pd.DataFrame({"num_tokens": b, "latency": np.full(b.shape, a)}), ["num_tokens"])
    assert not unbalanced_savings_ms(flat, shape, b).any()
