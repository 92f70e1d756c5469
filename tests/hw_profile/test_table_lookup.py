"""Step-time lookups: exact on grid points, linear between them, the documented fill and extrapolation; the one
rule behind the scalar lookup, the array lookup and the compiled walk along B, against a plain transcription."""

from __future__ import annotations

import bisect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw_profile.tables.step_table import StepTable, StepTimeGrid, k_rows, step_ms_at


def additive(b, k):
    return 1.0 + 0.01 * b + 0.002 * k + 0.5 * np.sqrt(b)


def test_values_agree_with_step_ms_everywhere():
    b_axis, k_axis = np.array([1, 4, 16, 64, 256]), np.array([0, 1000, 5000, 20000])
    bb, kk = np.meshgrid(b_axis, k_axis)
    grid = StepTimeGrid.from_points(bb.ravel(), kk.ravel(), additive(bb.ravel(), kk.ravel()))
    rng = np.random.default_rng(0)
    b = rng.uniform(0, 600, 300)
    k = rng.uniform(-100, 40000, 300)
    vec = grid.values(b, k)
    for i in range(300):
        assert vec[i] == pytest.approx(grid.step_ms(b[i], k[i]), rel=1e-12)
    # exact on grid points, linear between them in K
    assert grid.step_ms(16, 5000) == pytest.approx(additive(16, 5000))
    assert grid.step_ms(16, 3000) == pytest.approx((additive(16, 1000) + additive(16, 5000)) / 2)


def test_extrapolation_is_linear_and_never_falls():
    grid = StepTimeGrid.from_points(np.array([1, 2, 1, 2]), np.array([0, 0, 10, 10]), np.array([1.0, 2.0, 3.0, 2.5]))
    assert grid.step_ms(4, 0) == pytest.approx(4.0)  # slope 1 per token continues
    assert grid.step_ms(4, 10) == pytest.approx(2.5)  # a falling last segment extrapolates flat
    assert grid.step_ms(0.5, 0) == pytest.approx(1.0)  # clamped below the first point
    assert grid.step_ms(1, 20) == pytest.approx(5.0)  # K extrapolates along the last two rows


def test_non_rectangular_points_are_filled_along_the_additive_shape():
    # a profiler's grid: requests R x tokens per request t x context c gives B = R t, K = R c
    pts = {(r * t, r * c) for r in (1, 2, 4, 8, 16) for t in (1, 2, 4, 8) for c in (512, 4096)}
    b = np.array([p[0] for p in pts], dtype=float)
    k = np.array([p[1] for p in pts], dtype=float)
    grid = StepTimeGrid.from_points(b, k, additive(b, k))
    assert not np.isnan(grid.ms).any()
    # the additive truth is recovered exactly where rows are extended along f(B)
    assert grid.step_ms(128, 512) == pytest.approx(additive(128, 512), rel=1e-9)
    assert grid.step_ms(1, 65536) == pytest.approx(additive(1, 65536), rel=1e-9)


def test_unlinked_rows_continue_their_own_slope():
    b = np.array([1, 2, 16, 32], dtype=float)
    k = np.array([0, 0, 100, 100], dtype=float)
    grid = StepTimeGrid.from_points(b, k, np.array([1.0, 2.0, 10.0, 12.0]))
    assert grid.step_ms(16, 0) == pytest.approx(16.0)  # row K=0 keeps slope 1 per token
    assert grid.step_ms(1, 100) == pytest.approx(10.0)  # and never goes below its first point's value


def test_skipped_rows_are_ignored_and_round_trip_keeps_metadata(tmp_path):
    rows = [{"batch_tokens": b, "kv_tokens": 0, "status": "ok", "step_ms": float(b)} for b in (1, 2, 4)]
    rows.append({"batch_tokens": 8, "kv_tokens": 0, "status": "skipped: out of memory", "step_ms": np.nan})
    table = StepTable.from_points(rows, {"device": "test", "model_shape": {"layers": 2}})
    path = table.write(tmp_path / "t.csv")
    back = StepTable.read(path)
    assert back.meta == {"device": "test", "model_shape": {"layers": 2}, "schema_version": 2}
    assert len(back.points) == 4 and len(back.ok) == 3
    assert back.grid.step_ms(3, 0) == pytest.approx(3.0)


def rule(ba: list[float], ka: list[float], ms: list[list[float]], b: float, k: float) -> float:
    """The documented rule, written out plainly: along B in the two K rows around K, then across them."""

    def along(row: list[float]) -> float:
        if len(ba) == 1 or b <= ba[0]:
            return row[0]  # clamped below the first B
        if b >= ba[-1]:  # the last segment continued, never downwards
            return row[-1] + max((row[-1] - row[-2]) / (ba[-1] - ba[-2]), 0.0) * (b - ba[-1])
        i = bisect.bisect_right(ba, b)
        return row[i - 1] + (row[i] - row[i - 1]) * ((b - ba[i - 1]) / (ba[i] - ba[i - 1]))

    if len(ka) == 1 or k <= ka[0]:
        return along(ms[0])
    j = min(max(bisect.bisect_left(ka, k), 1), len(ka) - 1)
    w = (k - ka[j - 1]) / (ka[j] - ka[j - 1])
    lo, hi = along(ms[j - 1]), along(ms[j])
    if w > 1.0:  # beyond the last row: the last two rows' rise continued, never downwards
        return hi + max(hi - lo, 0.0) * (w - 1.0)
    return lo + (hi - lo) * w


def random_grid(rng: np.random.Generator) -> StepTimeGrid:
    """1 to 6 B points and 1 to 4 K rows; rows may cross (a row faster than the one below it at some B) and a row
    may fall at its end, so that both clamps are met."""
    nb, nk = int(rng.integers(1, 7)), int(rng.integers(1, 5))
    b = np.sort(rng.choice(np.arange(1, 600), nb, replace=False)).astype(float)
    k = np.sort(rng.choice(np.arange(0, 50_000), nk, replace=False)).astype(float)
    ms = rng.uniform(0.5, 10.0, (nk, nb))
    return StepTimeGrid(b, k, ms)


def probes(rng: np.random.Generator, axis: np.ndarray, n: int) -> np.ndarray:
    """Points on the axis, between them, below the first and past the last (integers and not)."""
    span = axis[-1] - axis[0] + 1.0
    pool = np.concatenate([axis, axis + 0.5, axis - 1.0, [axis[0] - span, axis[-1] + span, axis[-1] + 2.5 * span]])
    return np.where(rng.random(n) < 0.5, rng.choice(pool, n), rng.uniform(axis[0] - span, axis[-1] + 3 * span, n))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_scalar_array_and_walk_lookups_are_one_rule(seed):
    """lookup, values and the compiled walk along rising B (a segment hint carried from one B to the next) give
    the plain rule's numbers exactly, on grid points, between them, at the K-blend edges (K on a row, just off it,
    below the first row) and past the grid's ends in B and K (extrapolation, clamps)."""
    rng = np.random.default_rng(seed)
    grid = random_grid(rng)
    ba, ka, ms = grid.b_axis.tolist(), grid.k_axis.tolist(), grid.ms.tolist()
    b, k = probes(rng, grid.b_axis, 60), probes(rng, grid.k_axis, 60)
    want = [rule(ba, ka, ms, bi, ki) for bi, ki in zip(b, k, strict=True)]
    assert [grid.lookup(bi, ki) for bi, ki in zip(b, k, strict=True)] == want
    assert grid.values(b, k).tolist() == want
    for kv in k[:8]:
        rising = np.sort(b)
        lo, hi, w = k_rows(grid.k_axis, kv)
        seg, walked = 0, []
        for bi in rising:
            t, seg = step_ms_at(grid.b_axis, grid.ms, lo, hi, w, bi, seg)
            walked.append(t)
        assert walked == [rule(ba, ka, ms, bi, kv) for bi in rising]
        assert grid.curve(kv)(rising).tolist() == walked


def test_lookup_by_hand_at_the_edges():
    grid = StepTimeGrid(np.array([1.0, 3.0]), np.array([0.0, 10.0, 20.0]),
                        np.array([[1.0, 2.0], [3.0, 5.0], [2.0, 7.0]]))
    assert grid.lookup(3, 10) == 5.0  # on a point
    assert grid.lookup(2, 15) == pytest.approx((4.0 + 4.5) / 2)  # between rows and points
    assert grid.lookup(1, 30) == 2.0  # past the last row where it is lower than the one before: flat in K
    assert grid.lookup(3, 30) == pytest.approx(9.0)  # past the last row where it rises: 7 + (7 - 5)
    assert grid.lookup(5, -5) == pytest.approx(3.0)  # below the first row: that row, continued in B
    assert grid.lookup(0, 0) == 1.0  # below the first B: clamped
