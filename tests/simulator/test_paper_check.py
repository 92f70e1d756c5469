"""The predicted-against-published report, on result files written here."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from benchmarks.paper_check import REFERENCE, main, report


def write_results(folder, dspark_thr, scenario="paper-v4-flash", anchors=(80, 120), gains=(0.5, 9.0)):
    folder.mkdir()
    rows = []
    for c, thr in ((16, 1845.0), (128, 10443.0)):
        rows.append({"policy": "mtp-1", "concurrency": c, "throughput_per_gpu": thr, "tps_per_user": thr / c,
                     "mean_verify_budget": 2.0, "tau": 1.87})
        rows.append({"policy": "dspark-async", "concurrency": c, "throughput_per_gpu": thr * 1.4,
                     "tps_per_user": thr * 1.4 / c, "mean_verify_budget": 4.5, "tau": 3.9})
    pd.DataFrame(rows).to_csv(folder / "frontier.csv", index=False)
    lo, hi = (str(a) for a in anchors)
    dspark = {lo: {"status": "crossed", "throughput_per_gpu": dspark_thr[0], "gain_vs_baseline": gains[0]},
              hi: {"status": "crossed", "throughput_per_gpu": dspark_thr[1], "gain_vs_baseline": gains[1]}}
    summary = {"scenario": scenario, "baseline": "mtp-1", "systems": {
        "mtp-1": {"anchors": {lo: {"throughput_per_gpu": 10000.0}, hi: {"throughput_per_gpu": 1100.0}}},
        "dspark-async": {"anchors": dspark, "tps_gain_at_matched_throughput": {"min": 0.2, "max": 0.9}}}}
    (folder / "summary.json").write_text(json.dumps(summary))


def test_report_sets_predictions_beside_the_papers_gains(tmp_path):
    ref = pd.read_csv(REFERENCE)
    fig7 = ref[(ref.figure == "fig7") & (ref.model == "v4-flash")].sort_values("x")
    base120 = float(np.interp(120, fig7.x.to_numpy(), fig7.y.to_numpy()))
    write_results(tmp_path / "flash", (15000.0, 2 * base120))
    text = report([tmp_path / "flash"])
    assert "| paper (measured in production) | +51% | +661% | +60%..+85% |" in text
    assert "| predicted: dspark-async | +50% | +900% | +20%..+90% |" in text
    # against Figure 7's own MTP-1 line at 120 tok/s/user: twice its throughput is +100%
    line = next(x for x in text.splitlines() if x.startswith("| predicted dspark-async against Figure 7"))
    assert line.split("|")[3].strip() == "+100%"


def test_each_scenario_is_set_beside_its_own_published_gains(tmp_path):
    """Two result folders in one report: each section takes its scenario's anchors, published gains and
    Figure 7 line (the pro model's at 35 and 50 tok/s/user), not the first one's."""
    write_results(tmp_path / "flash", (15000.0, 9000.0))
    write_results(tmp_path / "pro", (5000.0, 2500.0), scenario="paper-v4-pro", anchors=(35, 50), gains=(0.3, 2.0))
    flash, pro = report([tmp_path / "flash", tmp_path / "pro"]).split("### paper-v4-pro")
    assert "| | gain @35 tok/s/user | gain @50 tok/s/user | TPS gain at matched throughput |" in pro
    assert "| paper (measured in production) | +52% | +406% | +57%..+78% |" in pro
    assert "| predicted: dspark-async | +30% | +200% | +20%..+90% |" in pro
    assert "@35" not in flash and "@80" not in pro
    ref = pd.read_csv(REFERENCE)
    fig7 = ref[(ref.figure == "fig7") & (ref.model == "v4-pro")].sort_values("x")
    base50 = float(np.interp(50, fig7.x.to_numpy(), fig7.y.to_numpy()))
    line = next(x for x in pro.splitlines() if x.startswith("| predicted dspark-async against Figure 7"))
    assert line.split("|")[3].strip() == f"{(2500.0 / base50 - 1) * 100:+.0f}%"


def test_missing_results_are_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "summary.json" in err


@pytest.mark.parametrize("anchor", [80, 120])
def test_figure7_line_is_read_not_extrapolated(anchor):
    from benchmarks.paper_check import _interp, _line

    x, y = _line(pd.read_csv(REFERENCE), "fig7", "v4-flash")
    assert _interp(x, y, anchor) > 0
    assert _interp(x, y, 500.0) != _interp(x, y, 500.0)  # NaN beyond the line
