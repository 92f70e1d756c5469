"""The table format: round trip with metadata, and the lookup's interpolation against hand values."""

import json

import numpy as np
import pandas as pd
import pytest

from hw_profile.tables.step_table import COLUMNS, StepTable, StepTimeGrid, TableError, sidecar_path


def _measured_rows():
    rows = []
    for ctx in (128, 512):
        for r in (1, 2, 4):
            for t in (1, 4):
                rows.append(dict(batch_tokens=r * t, kv_tokens=r * ctx, requests=r, context=ctx, status="ok",
                                 step_ms=2.0 + 0.1 * r * t + 0.001 * r * ctx, step_ms_p10=1.9, step_ms_p90=2.5,
                                 repeats=10, throttled=(r == 4 and t == 4), throttle_reasons="sw_power_cap"
                                 if (r == 4 and t == 4) else "", sm_clock_mhz=1755.0, power_w=450.5, energy_j=1.25))
    rows.append(dict(batch_tokens=4096, kv_tokens=4 * 1_000_000, requests=4, context=1_000_000,
                     status="skipped: needs ~80.00 GiB, 70.00 GiB usable", repeats=0))
    return rows


def test_round_trip_keeps_rows_and_metadata(tmp_path):
    meta = {"kind": "measured", "device": "NVIDIA H200", "dtype": "bf16", "model_shape": {"name": "qwen3-8b"},
            "telemetry": {"telemetry": "nvml", "driver": "570.1"}, "command": "hw-profile sps ..."}
    t = StepTable.from_points(_measured_rows(), meta)
    path = t.write(tmp_path / "h200.csv")
    assert sidecar_path(path).name == "h200.json"
    back = StepTable.read(path)
    assert list(back.points.columns) == COLUMNS
    assert {k: back.meta[k] for k in meta} == meta and back.meta["schema_version"] == 2
    assert back.meta["gpu"]["name"] == "H200"  # written at the schema: the datasheet its device names, recorded once
    assert len(back.points) == 13 and len(back.ok) == 12
    assert back.points.iloc[-1]["status"].startswith("skipped: needs")
    pd.testing.assert_series_equal(back.ok["step_ms"].reset_index(drop=True),
                                   t.ok["step_ms"].reset_index(drop=True), rtol=1e-5)
    thr = back.ok[back.ok["throttled"].astype(str) == "True"]
    assert len(thr) == 2 and (thr["throttle_reasons"] == "sw_power_cap").all()
    assert (back.ok["energy_j"] == 1.25).all()
    assert json.loads(sidecar_path(path).read_text())["device"] == "NVIDIA H200"


def test_read_errors_name_the_file_and_field(tmp_path):
    with pytest.raises(TableError, match="not found"):
        StepTable.read(tmp_path / "none.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("batch_tokens,kv_tokens,status,step_ms\n1,0,ok,-3\n")
    with pytest.raises(TableError, match=r"bad.csv: line 2: column step_ms"):
        StepTable.read(bad)
    missing = tmp_path / "missing.csv"
    missing.write_text("batch_tokens,status\n1,ok\n")
    with pytest.raises(TableError, match="missing column"):
        StepTable.read(missing)


def test_interpolation_by_hand():
    # T = 1 + B/10 + K/1000 on a rectangular grid: the lookup is exact inside, linear outside
    b = np.array([1, 2, 4, 8] * 3, float)
    k = np.repeat([0.0, 1000.0, 3000.0], 4)
    g = StepTimeGrid.from_points(b, k, 1 + b / 10 + k / 1000)
    assert g.step_ms(3, 0) == pytest.approx(1.3)
    assert g.step_ms(6, 2000) == pytest.approx(1 + 0.6 + 2.0)
    assert g.step_ms(16, 0) == pytest.approx(1 + 1.6)  # beyond the last B: the last segment's slope
    assert g.step_ms(4, 5000) == pytest.approx(1 + 0.4 + 5.0)  # beyond the last K: linear
    assert g.step_ms(0.5, 0) == pytest.approx(1.1)  # below the first B: clamped
    curve = g.curve(1000)
    assert curve(np.array([1, 2, 4, 8])) == pytest.approx(1 + np.array([1, 2, 4, 8]) / 10 + 1.0)


def test_non_rectangular_measured_grid_is_filled_monotone():
    t = StepTable.from_points(_measured_rows())
    g = t.grid
    assert not np.isnan(g.ms).any()
    # each measured point is returned exactly
    for _, row in t.ok.iterrows():
        assert g.step_ms(row["batch_tokens"], row["kv_tokens"]) == pytest.approx(row["step_ms"])
    assert (np.diff(g.ms, axis=1) >= -1e-12).all()  # filled along B never falls
