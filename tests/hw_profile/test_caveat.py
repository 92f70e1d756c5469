"""Analytic tables say what they are, a roofline speed bound and not a forecast: in the sidecar and wherever the
table is shown (hw-profile analytic/show/compare, simulate check)."""

from __future__ import annotations

import json

import pytest

from hw_profile.cli import main
from hw_profile.tables.sidecar import table_caveat
from hw_profile.tables.step_table import StepTable
from tests.conftest import ROOT
from tests.simulator.test_config import run_cli


def hw(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
        raise SystemExit(0)
    assert not exc.value.code
    return capsys.readouterr()


def test_analytic_sidecar_and_views_say_bound(tmp_path, capsys):
    a, m = tmp_path / "a.csv", tmp_path / "m.csv"
    err = hw(["analytic", "--gpu", "H200", "--model", "qwen3-8b", "--max-batch-tokens", "512", "--out", str(a)],
             capsys).err
    assert "speed bound, not a forecast" in err
    caveat = json.loads(a.with_suffix(".json").read_text())["caveat"]
    assert caveat["kind"] == "roofline-bound" and caveat["text"].startswith("a speed bound, not a forecast")
    hw(["fit", str(a)], capsys)
    assert table_caveat(StepTable.read(tmp_path / "a.smooth.csv").meta) == caveat
    measured = StepTable.read(ROOT / "scenarios" / "hardware" / "cpu-qwen3-0.6b.csv")
    assert table_caveat(measured.meta) is None
    measured.write(m)
    out = hw(["compare", str(a), str(m)], capsys).out
    assert out.count("is roofline-bound: a speed bound") == 1
    hw(["show", str(a), str(m), "--out", str(tmp_path / "v.html")], capsys)
    assert (tmp_path / "v.html").read_text().count("<b>roofline-bound</b>") == 1


def test_bundled_analytic_tables_written_before_the_caveat_get_it():
    for name in ("h200-qwen3-8b-bf16.csv", "h800-deepseek-v4-flash-ep64-fp8.csv"):
        meta = json.loads((ROOT / "scenarios" / "hardware" / name).with_suffix(".json").read_text())
        meta.pop("caveat", None)
        assert table_caveat(meta)["kind"] == "roofline-bound"
    assert table_caveat({"kind": "calibrated"}) is None
    assert table_caveat({"kind": "smoothed", "smoothed": {"from_kind": "analytic"}})["kind"] == "roofline-bound"


@pytest.mark.slow
def test_simulate_check_names_a_bound_table():
    res = run_cli("check", str(ROOT / "scenarios" / "tiny-world-trace.yaml"))
    assert res.returncode == 0 and "hardware table is roofline-bound: a speed bound, not a forecast" in res.stdout
    res = run_cli("check", str(ROOT / "scenarios" / "peak.yaml"))  # the library plans on a forecast
    assert res.returncode == 0 and "roofline-bound" not in res.stdout
    res = run_cli("check", str(ROOT / "scenarios" / "cpu-qwen3-0.6b.yaml"))
    assert res.returncode == 0 and "roofline-bound" not in res.stdout
