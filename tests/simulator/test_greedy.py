"""The prefix scheduler against brute force, the paper's Appendix A numbers and its plain transcription."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.policies import algorithm1_reference, greedy_prefix_lengths, top_k_prefix_lengths


def theta(conf: np.ndarray, lengths: tuple[int, ...], sps) -> float:
    a = np.cumprod(conf, axis=1)
    tau = sum(1.0 + a[r, :k].sum() for r, k in enumerate(lengths))
    batch = sum(1 + k for k in lengths)
    return tau * float(sps(np.array([batch]))[0])


def brute_force_best(conf: np.ndarray, sps) -> float:
    rows, gamma = conf.shape
    return max(theta(conf, ls, sps) for ls in itertools.product(range(gamma + 1), repeat=rows))


def linear_step_sps(t0: float, t1: float):
    """SPS of a step time t0 + t1 * B: Theta = concave tau over an affine time is unimodal along the path."""
    return lambda b: 1.0 / (t0 + t1 * np.asarray(b, dtype=float))


def roofline_sps(t_mem: float, t_tok: float, launch: float):
    return lambda b: 1.0 / (launch + np.maximum(t_mem, t_tok * np.asarray(b, dtype=float)))


instances = st.tuples(
    st.integers(1, 3),  # R
    st.integers(1, 3),  # gamma
    st.integers(0, 2**32 - 1),  # seed
)


@settings(max_examples=150, deadline=None)
@given(instances, st.floats(0.05, 5.0), st.floats(0.001, 1.0))
def test_early_stop_reaches_exhaustive_optimum_when_theta_unimodal(inst, t0, t1):
    rows, gamma, seed = inst
    conf = np.random.default_rng(seed).uniform(0, 1, (rows, gamma))
    sps = linear_step_sps(t0, t1)
    got = greedy_prefix_lengths(conf, sps, early_stop=True)
    assert theta(conf, tuple(got), sps) == pytest.approx(brute_force_best(conf, sps), rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(instances, st.floats(0.1, 2.0), st.floats(0.01, 1.0), st.floats(0.0, 0.5))
def test_early_stop_optimal_on_roofline_curves(inst, t_mem, t_tok, launch):
    rows, gamma, seed = inst
    conf = np.random.default_rng(seed).uniform(0, 1, (rows, gamma))
    sps = roofline_sps(t_mem, t_tok, launch)
    got = greedy_prefix_lengths(conf, sps, early_stop=True)
    assert theta(conf, tuple(got), sps) == pytest.approx(brute_force_best(conf, sps), rel=1e-12)


@settings(max_examples=150, deadline=None)
@given(instances, st.integers(0, 2**32 - 1))
def test_global_search_is_optimal_for_any_sps_curve(inst, curve_seed):
    rows, gamma, seed = inst
    conf = np.random.default_rng(seed).uniform(0, 1, (rows, gamma))
    jagged = np.random.default_rng(curve_seed).uniform(0.1, 2.0, rows * (gamma + 1) + 1)
    sps = lambda b: jagged[np.asarray(b)]  # noqa: E731 - arbitrary, non-monotone curve
    got = greedy_prefix_lengths(conf, sps, early_stop=False)
    assert theta(conf, tuple(got), sps) == pytest.approx(brute_force_best(conf, sps), rel=1e-12)


def appendix_a_sps(b):
    return np.array([np.nan, 1.0, 0.5, 0.45])[np.asarray(b)]


def test_appendix_a_early_stop_takes_first_non_rise():
    # Theta0 = 1.0, Theta1 = 1.8 * 0.5 = 0.9 (a fall), Theta2 = 2.52 * 0.45 = 1.134 (higher, but never seen)
    conf = np.array([[0.8, 0.9]])
    assert greedy_prefix_lengths(conf, appendix_a_sps, early_stop=True).tolist() == [0]
    assert greedy_prefix_lengths(conf, appendix_a_sps, early_stop=False).tolist() == [2]
    # with c2 = 0 after token B the global search also declines: Theta2 = 1.8 * 0.45 = 0.81 < 1.0
    assert greedy_prefix_lengths(np.array([[0.8, 0.0]]), appendix_a_sps, early_stop=False).tolist() == [0]


def test_tie_break_is_row_then_position():
    conf = np.array([[1.0, 1.0], [1.0, 1.0]])  # every a = 1: order (0,1), (0,2), (1,1), (1,2)
    flat = lambda b: np.ones_like(np.asarray(b), dtype=float)  # noqa: E731
    # a capacity of 3 takes both of request 0 and the first of request 1
    assert top_k_prefix_lengths(conf, 3).tolist() == [2, 1]
    # Theta = tau * 1 rises with every admitted token
    assert greedy_prefix_lengths(conf, flat).tolist() == [2, 2]


def test_zero_confidence_positions_are_never_verified():
    conf = np.array([[0.9, 0.0, 0.9], [0.5, 0.5, 0.5]])
    flat = lambda b: np.ones_like(np.asarray(b), dtype=float)  # noqa: E731
    assert greedy_prefix_lengths(conf, flat, early_stop=False).tolist() == [1, 3]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8), st.integers(0, 2**32 - 1), st.booleans())
def test_matches_plain_transcription_of_algorithm_1(rows, gamma, seed, early_stop):
    rng = np.random.default_rng(seed)
    conf = rng.uniform(0, 1, (rows, gamma)) ** rng.uniform(0.1, 2)
    conf[rng.random((rows, gamma)) < 0.1] = 1.0  # exact ties in a
    curve = rng.uniform(0.2, 1.0, rows * (gamma + 1) + 1).cumsum()  # rising step time: falling SPS, with kinks
    sps = lambda b: 1.0 / curve[np.asarray(b)]  # noqa: E731
    got = greedy_prefix_lengths(conf, sps, early_stop=early_stop)
    want = algorithm1_reference(conf.tolist(), lambda b: float(sps(b)), early_stop=early_stop)
    assert got.tolist() == want


def test_rejects_malformed_confidence():
    flat = lambda b: np.ones_like(np.asarray(b), dtype=float)  # noqa: E731
    with pytest.raises(ValueError, match=r"\(R, gamma\)"):
        greedy_prefix_lengths(np.ones(3), flat)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        greedy_prefix_lengths(np.array([[0.5, np.nan]]), flat)
    assert greedy_prefix_lengths(np.zeros((0, 4)), flat).shape == (0,)


def random_step_rate(rng: np.random.Generator):
    """The engine's SPS on a random step-time grid: kinks, points below and above the axis, prefill, fixed ms."""
    from hw_profile.table import StepTimeGrid
    from simulator.policies.base import StepRate

    nb = int(rng.integers(1, 8))
    b = np.sort(rng.choice(np.arange(1, 3000), nb, replace=False)).astype(float)
    ms = np.cumsum(rng.random(nb) * 5) + rng.random() * 3
    grid = StepTimeGrid(b, np.array([0.0, 1e6]), np.vstack([ms, ms * 1.5]))
    return StepRate(grid, float(rng.random() * 2e6), int(rng.integers(0, 50)), float(rng.random() * 3))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 300), st.integers(1, 9), st.integers(0, 2**32 - 1),
       st.sampled_from(["uniform", "ties", "0/1", "near-ties"]))
def test_compiled_walk_equals_numpy_path_bit_for_bit(rows, gamma, seed, kind):
    """With the engine's StepRate the greedy runs compiled (bucketed sort, SPS priced in the kernel); any other
    callable takes the numpy path (argsort, SPS priced in chunks). Both must give the same lengths, ties, early
    stops and chunk-boundary rounding included. "near-ties" differ far below a bucket's width, so their order is
    settled by the kernel's insertion pass."""
    from simulator.policies.greedy import admission_order

    rng = np.random.default_rng(seed)
    conf = {"uniform": lambda: rng.random((rows, gamma)) ** rng.uniform(0.1, 2),
            "ties": lambda: rng.choice([0.0, 0.5, 0.9, 1.0], (rows, gamma)),
            "0/1": lambda: (rng.random((rows, gamma)) < 0.7).astype(float),
            "near-ties": lambda: rng.choice([0.3, 0.6, 0.9], (rows, gamma)) * (1 - rng.integers(0, 5, (rows, gamma))
                                                                                * 2.0**-40)}[kind]()
    sps = random_step_rate(rng)
    as_callable = lambda b: sps(b)  # noqa: E731  (not a StepRate: the numpy path)
    for early_stop in (True, False):
        compiled = greedy_prefix_lengths(conf, sps, early_stop)
        assert np.array_equal(compiled, greedy_prefix_lengths(conf, as_callable, early_stop)), early_stop
    capacity = int(rng.integers(0, rows * gamma + 2))
    order, _ = admission_order(conf)
    assert top_k_prefix_lengths(conf, capacity).tolist() == np.bincount(order[:capacity] // gamma, minlength=rows).tolist()


def test_compiled_walk_rejects_malformed_confidence():
    sps = random_step_rate(np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        greedy_prefix_lengths(np.array([[0.5, np.nan]]), sps)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        top_k_prefix_lengths(np.array([[1.5, 0.5]]), 1)
    assert greedy_prefix_lengths(np.zeros((0, 4)), sps).shape == (0,)


@given(st.integers(1, 5000), st.sampled_from(["uniform", "ties", "ones", "tiny", "survival", "weak"]),
       st.integers(0, 2**32 - 1))
@settings(max_examples=80, deadline=None)
def test_candidate_sort_is_numpys_stable_descending_order(m, kind, seed):
    """The bucketed sort against numpy's stable argsort on the shapes a step's survivals take: spread, many exact
    ties, values of exactly 1 (the top bucket), values far below one bucket's width, cumulative products of a
    good drafter's confidences (buckets of value) and of a weak one's over long blocks (buckets of the key)."""
    from simulator.policies.greedy import _descending_stable

    rng = np.random.default_rng(seed)
    a = {"uniform": lambda: 1.0 - rng.random(m),
         "ties": lambda: rng.choice([0.25, 0.5, 0.9, 1.0], m),
         "ones": lambda: np.where(rng.random(m) < 0.3, 1.0, 1.0 - rng.random(m)),
         "tiny": lambda: (1.0 - rng.random(m)) * 10.0 ** rng.integers(-300, -3, m),
         "survival": lambda: np.cumprod(0.5 + 0.5 * rng.random((m, 7)), axis=1).ravel()[:m],
         "weak": lambda: np.cumprod(1.0 - rng.random((m, 16)), axis=1).ravel()[:m]}[kind]()
    assert np.array_equal(_descending_stable(a), np.argsort(-a, kind="stable"))


@pytest.mark.parametrize(("rows", "gamma"), [(256, 7), (600, 12)])
def test_candidate_sort_stays_exact_and_linear_when_confidences_agree_to_many_digits(rows, gamma):
    """Confidences equal to 1e-9: the value buckets leave almost everything tied, the insertion pass gives up past
    its budget and a radix sort on every bit orders them; the order is still numpy's stable one."""
    from simulator.policies.greedy import _descending_stable

    rng = np.random.default_rng(rows)
    conf = 0.9 + rng.random((rows, gamma)) * 1e-9
    a = np.cumprod(conf, axis=1).ravel()
    assert np.array_equal(_descending_stable(a), np.argsort(-a, kind="stable"))
    sps = random_step_rate(rng)
    for early_stop in (True, False):
        assert np.array_equal(greedy_prefix_lengths(conf, sps, early_stop),
                              greedy_prefix_lengths(conf, lambda b: sps(b), early_stop))
