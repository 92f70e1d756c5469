"""The HTML view is self-contained (plotly inlined, nothing fetched) and compares two tables."""

import numpy as np
import pytest

from hw_profile.kernels.roofline import analytic_table
from hw_profile.tables.step_table import StepTable
from hw_profile.view.show import write_view


def _measured():
    rows = []
    for ctx in (128, 1024):
        for r in (1, 2, 4):
            for t in (1, 2):
                ms = 4.0 + 0.01 * r * t + 1e-4 * r * ctx
                rows.append(dict(batch_tokens=r * t, kv_tokens=r * ctx, requests=r, context=ctx, status="ok",
                                 step_ms=ms, step_ms_p10=ms * 0.98, step_ms_p90=ms * 1.05, repeats=10,
                                 throttled=(r == 4), throttle_reasons="sw_power_cap" if r == 4 else ""))
    return StepTable.from_points(rows, {"name": "measured-h200", "kind": "measured", "device": "NVIDIA H200"})


def test_view_is_self_contained_and_compares(tmp_path):
    analytic = analytic_table("qwen3-8b", "H200", b_axis=np.arange(1, 17), k_axis=[0, 1024, 4096], name="roofline")
    out = write_view([_measured(), analytic], tmp_path / "view.html")
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert "<script src=" not in text  # plotly is inlined, not loaded from a CDN
    assert len(text) > 1_000_000 and "Plotly.newPlot" in text
    assert text.count("Plotly.newPlot") == 2  # SPS(B) and the ratio
    assert "context 128, 1 tok" in text and "measured-h200" in text and "roofline" in text
    assert "median" in text  # the ratio summary line


def test_view_of_one_analytic_table(tmp_path):
    t = analytic_table("deepseek-v3", "B200", dtype="fp8", gpus=8, b_axis=[1, 8, 64], k_axis=[0, 4096])
    text = write_view([t], tmp_path / "a.html").read_text()
    assert text.count("Plotly.newPlot") == 1 and "K = 4,096" in text


def test_compare_ratios(tmp_path, capsys):
    from hw_profile.cli import main
    from hw_profile.view.compare import ratio_frame

    measured = _measured()
    analytic = analytic_table("qwen3-8b", "H200", b_axis=np.arange(1, 17), k_axis=[0, 1024, 4096], name="roofline")
    frame = ratio_frame(measured, analytic)
    assert len(frame) == 12 and frame["throttled"].sum() == 4
    expected = measured.ok["step_ms"].to_numpy() / np.array(
        [analytic.grid.step_ms(b, k) for b, k in zip(measured.ok["batch_tokens"], measured.ok["kv_tokens"],
                                                      strict=True)])
    assert sorted(frame["ratio"]) == pytest.approx(sorted(expected))
    assert np.allclose(ratio_frame(analytic, analytic)["ratio"], 1.0)
    a, b = measured.write(tmp_path / "m.csv"), analytic.write(tmp_path / "a.csv")
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(a), str(b), "--csv", str(tmp_path / "r.csv")])
        raise SystemExit(0)
    out = capsys.readouterr().out
    assert exc.value.code in (0, None) and "over 12 points: median" in out and "context 1024: B=1:" in out
    assert (tmp_path / "r.csv").is_file()
