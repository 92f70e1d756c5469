"""The prefix scheduler against brute force, the paper's Appendix A numbers and its plain transcription
(tests/simulator/algorithm1.py), with the engine's StepCost and with any SPS callable."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw_profile.tables.cuda_graphs import CudaGraphs
from hw_profile.tables.step_table import StepTimeGrid, VerifyAttention
from simulator.core.forward import StepCost
from simulator.core.policies import greedy_prefix_lengths, top_k_prefix_lengths
from simulator.core.policies.candidate_order import descending_stable
from tests.simulator.algorithm1 import algorithm1_reference


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


@settings(max_examples=100, deadline=None)
@given(instances, st.integers(0, 2**32 - 1))
def test_global_search_is_optimal_on_the_engines_step_rate(inst, grid_seed):
    rows, gamma, seed = inst
    conf = np.random.default_rng(seed).uniform(0, 1, (rows, gamma))
    sps = random_step_rate(np.random.default_rng(grid_seed))
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


def random_confidence(rng: np.random.Generator, rows: int, gamma: int, kind: str) -> np.ndarray:
    """A step's confidences: spread, exact ties in a (c = 1, few distinct values), 0/1, or a differing far below a
    bucket's width (ordered by the sort's insertion pass)."""
    return {"uniform": lambda: rng.random((rows, gamma)) ** rng.uniform(0.1, 2),
            "ties": lambda: rng.choice([0.0, 0.5, 0.9, 1.0], (rows, gamma)),
            "0/1": lambda: (rng.random((rows, gamma)) < 0.7).astype(float),
            "near-ties": lambda: rng.choice([0.3, 0.6, 0.9], (rows, gamma)) * (1 - rng.integers(0, 5, (rows, gamma))
                                                                                * 2.0**-40)}[kind]()


def random_step_rate(rng: np.random.Generator, rows: int = 0) -> StepCost:
    """The engine's SPS on a random step-time grid: kinks, a falling last segment, 1 to 4 K rows (one lower than
    the next at some B, so that K beyond the last row meets the clamp), B and K inside, on and beyond the axes,
    prefill and fixed ms; for a step of ``rows`` requests, half the time a verification-attention correction
    (the table priced at 1, 2 or 4 tokens per request, reads or compute the larger); half the time captured CUDA
    graphs counting tokens or requests."""
    nb, nk = int(rng.integers(1, 8)), int(rng.integers(1, 5))
    b = np.sort(rng.choice(np.arange(1, 3000), nb, replace=False)).astype(float)
    k = np.sort(rng.choice(np.arange(0, 10**6), nk, replace=False)).astype(float)
    ms = np.cumsum(rng.random((nk, nb)) * 5, axis=1) + rng.random((nk, 1)) * 3 + np.arange(nk)[:, None]
    if nb >= 2 and rng.random() < 0.5:
        ms[:, -1] = ms[:, -2] - rng.random(nk)  # a falling last segment: extrapolated flat
    kv = float(rng.choice([rng.random() * 2e6, k[int(rng.integers(nk))]]))
    grid = StepTimeGrid(b, k, ms)
    if rows and rng.random() < 0.5:
        grid = replace(grid, verify=VerifyAttention(float(rng.choice([1.0, 2.0, 4.0])), float(rng.random() * 0.2),
                                                    float(rng.random() * 0.2),
                                                    ns_per_request=float(rng.choice([0.0, rng.random() * 5e4])),
                                                    **({"window": float(rng.integers(16, 4096)),
                                                        "windowed_share": float(rng.uniform(0.1, 1.0))}
                                                       if rng.random() < 0.5 else {})))
    if rng.random() < 0.5:  # captured CUDA graphs: a staircase, eager (with its floor) past the largest size
        sizes = np.unique(rng.integers(1, 600, int(rng.integers(1, 12))))
        grid = replace(grid, graphs=CudaGraphs(tuple(int(x) for x in sizes), str(rng.choice(["tokens", "requests"])),
                                               float(rng.random() * 20)))
    return StepCost(grid, kv, int(rng.integers(0, 50)), float(rng.random() * 3), rows,
                    float(rng.random() * rows * 3e4))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.integers(1, 300), st.integers(1, 9), st.integers(0, 2**32 - 1),
       st.sampled_from(["uniform", "ties", "0/1", "near-ties"]), st.booleans())
def test_matches_plain_transcription_of_algorithm_1(rows, gamma, seed, kind, early_stop):
    """The compiled walk against Algorithm 1 line by line, bit for bit in the lengths: with the engine's StepCost
    (priced inside the walk), with the same rate behind an arbitrary callable (tabulated, then walked), and with a
    jagged curve that no table could give."""
    rng = np.random.default_rng(seed)
    conf = random_confidence(rng, rows, gamma, kind)
    sps = random_step_rate(rng, rows)
    want = algorithm1_reference(conf.tolist(), lambda b: float(sps(np.array([b]))[0]), early_stop=early_stop)
    assert greedy_prefix_lengths(conf, sps, early_stop).tolist() == want
    assert greedy_prefix_lengths(conf, lambda b: sps(b), early_stop).tolist() == want
    curve = rng.uniform(0.2, 1.0, rows * (gamma + 1) + 1).cumsum()  # rising step time: falling SPS, with kinks
    jagged = lambda b: 1.0 / curve[np.asarray(b)]  # noqa: E731
    assert greedy_prefix_lengths(conf, jagged, early_stop).tolist() == algorithm1_reference(
        conf.tolist(), lambda b: float(jagged(b)), early_stop=early_stop)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300), st.integers(1, 9), st.integers(0, 2**32 - 1),
       st.sampled_from(["uniform", "ties", "0/1", "near-ties"]))
def test_top_k_takes_the_first_candidates_of_the_admission_order(rows, gamma, seed, kind):
    rng = np.random.default_rng(seed)
    conf = random_confidence(rng, rows, gamma, kind)
    capacity = int(rng.integers(0, rows * gamma + 2))
    a = np.cumprod(conf, axis=1).ravel()
    order = np.argsort(-a, kind="stable")[: min(capacity, int(np.count_nonzero(a)))]
    assert top_k_prefix_lengths(conf, capacity).tolist() == np.bincount(order // gamma, minlength=rows).tolist()


def test_step_rate_is_the_clocks_step_time():
    """What the policy prices is what the clock charges: T from the grid's lookup, plus prefill and fixed ms."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        sps = random_step_rate(rng, int(rng.integers(1, 300)))
        batch = np.arange(1, 4000, 37)
        expect = [1000.0 / (sps.grid.lookup(b + sps.prefill, sps.kv, sps.rows, sps.prefill > 0)
                            + sps.grid.verify_ms(b, sps.rows, sps.verify_kv) + sps.fixed_ms) for b in batch]
        assert sps(batch).tolist() == expect


def test_rejects_malformed_confidence():
    flat = lambda b: np.ones_like(np.asarray(b), dtype=float)  # noqa: E731
    sps = random_step_rate(np.random.default_rng(0))
    for rate in (flat, sps):
        with pytest.raises(ValueError, match=r"\(R, gamma\)"):
            greedy_prefix_lengths(np.ones(3), rate)
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            greedy_prefix_lengths(np.array([[0.5, np.nan]]), rate)
        assert greedy_prefix_lengths(np.zeros((0, 4)), rate).shape == (0,)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        top_k_prefix_lengths(np.array([[1.5, 0.5]]), 1)


@given(st.integers(0, 5000), st.sampled_from(["uniform", "ties", "ones", "tiny", "survival", "weak"]),
       st.integers(0, 2**32 - 1))
@settings(max_examples=80, deadline=None)
def test_candidate_sort_is_numpys_stable_descending_order(m, kind, seed):
    """The bucketed sort against numpy's stable argsort on the shapes a step's survivals take: spread, many exact
    ties, values of exactly 1 (the top bucket), values far below one bucket's width, cumulative products of a
    good drafter's confidences (buckets of value) and of a weak one's over long blocks (buckets of the key)."""
    rng = np.random.default_rng(seed)
    a = {"uniform": lambda: 1.0 - rng.random(m),
         "ties": lambda: rng.choice([0.25, 0.5, 0.9, 1.0], m),
         "ones": lambda: np.where(rng.random(m) < 0.3, 1.0, 1.0 - rng.random(m)),
         "tiny": lambda: (1.0 - rng.random(m)) * 10.0 ** rng.integers(-300, -3, m),
         "survival": lambda: np.cumprod(0.5 + 0.5 * rng.random((m, 7)), axis=1).ravel()[:m],
         "weak": lambda: np.cumprod(1.0 - rng.random((m, 16)), axis=1).ravel()[:m]}[kind]()
    assert np.array_equal(descending_stable(a), np.argsort(-a, kind="stable"))


@pytest.mark.parametrize(("rows", "gamma"), [(256, 7), (600, 12)])
def test_candidate_sort_stays_exact_and_linear_when_confidences_agree_to_many_digits(rows, gamma):
    """Confidences equal to 1e-9: the value buckets leave almost everything tied, the insertion pass gives up past
    its budget and a radix sort on every bit orders them; the order is still numpy's stable one."""
    rng = np.random.default_rng(rows)
    conf = 0.9 + rng.random((rows, gamma)) * 1e-9
    a = np.cumprod(conf, axis=1).ravel()
    assert np.array_equal(descending_stable(a), np.argsort(-a, kind="stable"))
    sps = random_step_rate(rng)
    for early_stop in (True, False):
        want = algorithm1_reference(conf.tolist(), lambda b: float(sps(np.array([b]))[0]), early_stop=early_stop)
        assert greedy_prefix_lengths(conf, sps, early_stop).tolist() == want


def test_the_walk_forgets_its_cache_when_a_kernel_it_compiles_in_changes(tmp_path):
    """numba would serve _walk compiled from an old step_table.py or candidate_order.py: a changed digest of the three
    sources empties _walk's cache (and records the new digest); an unchanged one keeps it
    (simulator/core/kernel_cache.py, the one guard)."""
    import hw_profile.tables.step_table as step_table
    from simulator.core.kernel_cache import guard_cached_kernel
    from simulator.core.policies import candidate_order, greedy

    cache = greedy._walk._cache
    if not cache._cache_path:
        pytest.skip("numba caching is off")
    greedy_prefix_lengths(np.full((2, 3), 0.5), lambda b: 1.0 / b)  # compiled (or loaded) and cached
    stamp = Path(cache._cache_path) / "simulator.core.policies.greedy._walk.sources"
    digest = stamp.read_text()
    assert cache._cache_file._load_index() != {}
    guard_cached_kernel(greedy._walk, step_table, candidate_order)  # nothing changed: the cache stays
    assert cache._cache_file._load_index() != {}
    index = Path(cache._cache_file._index_path)
    kept = index.read_bytes()
    try:
        stamp.write_text("an edit to hw_profile/tables/step_table.py")
        guard_cached_kernel(greedy._walk, step_table, candidate_order)
        assert cache._cache_file._load_index() == {} and stamp.read_text() == digest
    finally:
        index.write_bytes(kept)  # the compiled walk is still right for this code: later processes load it
