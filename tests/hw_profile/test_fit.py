"""The monotone fit: isotonic regression by hand, 2-D projection properties, and the smooth table file."""

import numpy as np
import pytest

from hw_profile.kernels.roofline import analytic_table
from hw_profile.tables.fit import fit_file, isotonic, monotone_grid, smooth_path
from hw_profile.tables.step_table import StepTable, StepTimeGrid


def is_monotone(grid: StepTimeGrid, rtol: float = 1e-9) -> bool:
    """T never falls along B or along K (to rounding)."""
    ms = grid.ms
    tol = rtol * max(float(np.abs(ms).max()), 1e-12)
    return bool((np.diff(ms, axis=1) >= -tol).all() and (np.diff(ms, axis=0) >= -tol).all())


def test_isotonic_by_hand():
    assert isotonic([1, 3, 2, 4]) == pytest.approx([1, 2.5, 2.5, 4])
    assert isotonic([5, 4, 3, 2, 1]) == pytest.approx([3] * 5)
    assert isotonic([1, 3, 2], [1, 1, 3]) == pytest.approx([1, 2.25, 2.25])  # weighted pool
    assert isotonic([1, 2, 3]) == pytest.approx([1, 2, 3])


def test_grid_projection_is_monotone_and_least_squares():
    rng = np.random.default_rng(3)
    base = np.add.outer(np.linspace(0, 3, 7), np.linspace(0, 5, 9))  # monotone truth
    noisy = base + rng.normal(0, 0.4, base.shape)
    w = rng.uniform(0.5, 2.0, base.shape)
    fitted = monotone_grid(noisy, w)
    assert (np.diff(fitted, axis=0) >= 0).all() and (np.diff(fitted, axis=1) >= 0).all()
    # constants lie in both cones, so the projection keeps the weighted mean
    assert np.sum(w * fitted) == pytest.approx(np.sum(w * noisy), rel=1e-6)
    # closer to the data than another monotone grid (the running maxima), and closer to the truth than the data
    crude = np.maximum.accumulate(np.maximum.accumulate(noisy, axis=1), axis=0)
    assert np.sum(w * (fitted - noisy) ** 2) < np.sum(w * (crude - noisy) ** 2)
    assert np.abs(fitted - base).mean() < np.abs(noisy - base).mean()
    # one row: the 1-D isotonic regression
    row = np.array([[1.0, 3.0, 2.0, 4.0]])
    assert monotone_grid(row)[0] == pytest.approx([1, 2.5, 2.5, 4])
    # a monotone grid is left as it is
    assert monotone_grid(base) == pytest.approx(base)


def test_fit_file_writes_a_monotone_smooth_table(tmp_path):
    rows = []
    rng = np.random.default_rng(0)
    for ctx in (64, 256):
        for r in (1, 2, 4, 8):
            for t in (1, 2, 4):
                true = 5 + 0.2 * r * t + 0.002 * r * ctx
                ms = true * (1 + rng.normal(0, 0.08))
                rows.append(dict(batch_tokens=r * t, kv_tokens=r * ctx, requests=r, context=ctx, status="ok",
                                 step_ms=ms, step_ms_p10=ms * 0.95, step_ms_p90=ms * 1.1, repeats=9))
    rows.append(dict(batch_tokens=32, kv_tokens=8 * 100000, requests=8, context=100000, status="skipped: too big"))
    raw = StepTable.from_points(rows, {"kind": "measured", "device": "cpu", "command": "hw-profile sps ...",
                                       "note": "busy machine"})
    path = raw.write(tmp_path / "cpu.csv")
    assert not is_monotone(StepTable.read(path).grid)  # the noise makes it jagged
    _, out = fit_file(path)
    assert out == smooth_path(path) == tmp_path / "cpu.smooth.csv"
    assert (tmp_path / "cpu.smooth.json").is_file()
    back = StepTable.read(out)
    assert is_monotone(back.grid)
    assert back.meta["device"] == "cpu" and back.meta["smoothed"]["from"] == "cpu.csv"
    # the sidecar says it is a fit: its kind, and the measured table's command and note kept as the source's
    assert back.meta["kind"] == "smoothed" and "command" not in back.meta and "note" not in back.meta
    assert back.meta["smoothed"]["from_kind"] == "measured"
    assert back.meta["smoothed"]["from_command"] == "hw-profile sps ..."
    assert back.meta["smoothed"]["from_note"] == "busy machine"
    assert back.meta["smoothed"]["measured_cells"] <= 24
    assert (back.points["status"] != "ok").sum() == 1  # the skipped row is kept for the record
    # measured cells keep their point's columns (the first point where two share a cell: B = 8, K = 512 is both
    # 8 requests x 1 token at context 64 and 2 x 4 at 256); p10/p90 move with the median
    cell = back.ok[(back.ok["batch_tokens"] == 8) & (back.ok["kv_tokens"] == 8 * 64)].iloc[0]
    assert cell["requests"] == 8 and cell["repeats"] == 9
    assert cell["step_ms_p90"] - cell["step_ms"] == pytest.approx(
        raw.ok[(raw.ok["batch_tokens"] == 8) & (raw.ok["kv_tokens"] == 512)]["step_ms"].iloc[0] * 0.1, rel=1e-3)
    # the fit stays close to the measurements (noise is 8%)
    assert back.meta["smoothed"]["mean_change_pct_measured"] < 10


def test_analytic_table_is_already_monotone(tmp_path):
    t = analytic_table("qwen3-8b", "H200", b_axis=[1, 8, 64, 512, 4096], k_axis=[0, 4096, 65536])
    path = t.write(tmp_path / "a.csv")
    smooth, _ = fit_file(path)
    assert smooth.grid.ms == pytest.approx(t.grid.ms, rel=1e-5)
    assert smooth.meta["smoothed"]["max_change_pct_measured"] < 1e-3
