"""Step-time lookups: exact on grid points, linear between them, the documented fill and extrapolation."""

from __future__ import annotations

import numpy as np
import pytest

from hw_profile.table import StepTable, StepTimeGrid


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
    assert back.meta == {"device": "test", "model_shape": {"layers": 2}}
    assert len(back.points) == 4 and len(back.ok) == 3
    assert back.grid.step_ms(3, 0) == pytest.approx(3.0)


def test_scalar_lookup_matches_vectorised():
    b_axis, k_axis = np.array([1, 4, 16, 64, 256]), np.array([0, 1000, 5000, 20000])
    bb, kk = np.meshgrid(b_axis, k_axis)
    grid = StepTimeGrid.from_points(bb.ravel(), kk.ravel(), additive(bb.ravel(), kk.ravel()))
    rng = np.random.default_rng(1)
    for b, k in zip(rng.uniform(0, 600, 200), rng.uniform(-100, 40000, 200), strict=True):
        assert grid.lookup(b, k) == pytest.approx(grid.step_ms(b, k), rel=1e-12)
