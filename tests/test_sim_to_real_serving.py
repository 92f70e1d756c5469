"""benchmarks/sim_to_real_serving.py: one real vLLM run predicted end to end, and the page prints it as the
benchmark does (the page's table rows are the benchmark's output)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.heavy
def test_one_run_is_predicted_as_the_page_says(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("sim_to_real_serving", ROOT / "benchmarks" / "sim_to_real_serving.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sim_to_real_serving", module)
    spec.loader.exec_module(module)
    module.main(["--runs", "codellama-34b-tp2-codegen"])
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| codellama-34b-tp2-codegen")]
    assert len(rows) == 3  # two stages and the whole run
    page = (ROOT / "docs" / "sim-to-real.md").read_text().splitlines()
    assert [r for r in rows if r not in page] == []
    # the whole run within 10% on E2E, uncalibrated, and not overloaded (vLLM served it)
    whole = rows[-1].split("|")
    assert abs(float(whole[5].strip().rstrip("%"))) <= 10
    assert whole[-3].strip() == "no / no"
    calibrated = [float(x.strip().rstrip("%")) for x in whole[-2].split("/")]  # on its own lightest stage
    assert len(calibrated) == 3 and max(map(abs, calibrated)) <= 10
