"""The predicted-against-published report, on result files written here."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from simulator.paper_check import PUBLISHED, REFERENCE, main, report


def write_results(folder, dspark_thr):
    folder.mkdir()
    rows = []
    for c, thr in ((16, 1845.0), (128, 10443.0)):
        rows.append({"policy": "mtp-1", "concurrency": c, "throughput_per_gpu": thr, "tps_per_user": thr / c,
                     "mean_verify_budget": 2.0, "tau": 1.87})
        rows.append({"policy": "dspark-async", "concurrency": c, "throughput_per_gpu": thr * 1.4,
                     "tps_per_user": thr * 1.4 / c, "mean_verify_budget": 4.5, "tau": 3.9})
    pd.DataFrame(rows).to_csv(folder / "frontier.csv", index=False)
    anchors = {"80": {"status": "crossed", "throughput_per_gpu": dspark_thr[0], "gain_vs_baseline": 0.5},
               "120": {"status": "crossed", "throughput_per_gpu": dspark_thr[1], "gain_vs_baseline": 9.0}}
    summary = {"scenario": "paper-v4-flash", "baseline": "mtp-1", "systems": {
        "mtp-1": {"anchors": {"80": {"throughput_per_gpu": 10000.0}, "120": {"throughput_per_gpu": 1100.0}}},
        "dspark-async": {"anchors": anchors, "tps_gain_at_matched_throughput": {"min": 0.2, "max": 0.9}}}}
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
    assert PUBLISHED["paper-v4-pro"]["anchors"] == {35: 0.52, 50: 4.06}


def test_missing_results_are_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "summary.json" in err


@pytest.mark.parametrize("anchor", [80, 120])
def test_figure7_line_is_read_not_extrapolated(anchor):
    from simulator.paper_check import _interp, _line

    x, y = _line(pd.read_csv(REFERENCE), "fig7", "v4-flash")
    assert _interp(x, y, anchor) > 0
    assert _interp(x, y, 500.0) != _interp(x, y, 500.0)  # NaN beyond the line
