"""Every table says how far to trust it (``expected_error``): an estimate records the documented errors of its
kind, which are the figures docs/sim-to-real.md prints; other kinds say what their kind implies."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from hw_profile.cli import cli
from hw_profile.estimate.accuracy import (
    DECODE_MAX_ERROR,
    DECODE_MEDIAN_ERROR,
    DECODE_WITHIN_30,
    SERVING_MAPE,
    SERVING_RUNS,
    estimate_expected_error,
)
from hw_profile.tables.sidecar import expected_error
from hw_profile.tables.step_table import StepTable
from tests.conftest import ROOT

HARDWARE = ROOT / "scenarios" / "hardware"
PAGE = (ROOT / "docs" / "sim-to-real.md").read_text().replace("\n", " ")


def test_the_documented_errors_are_the_ones_the_page_prints():
    within, of = DECODE_WITHIN_30
    assert (f"within 30% on {within} of {of} throughput points (median error {DECODE_MEDIAN_ERROR:.0%}, largest "
            f"{DECODE_MAX_ERROR:.0%})") in PAGE
    served = re.search(r"Whole runs vLLM served \((\d+)\), uncalibrated: MAPE e2e_mean ([\d.]+)%, .*? ttft_mean "
                       r"([\d.]+)%, .*? tpot_mean ([\d.]+)%", PAGE)
    assert int(served.group(1)) == SERVING_RUNS
    assert [float(served.group(i)) / 100 for i in (2, 3, 4)] == \
        pytest.approx([SERVING_MAPE["e2e"], SERVING_MAPE["ttft"], SERVING_MAPE["tpot"]])


def test_estimate_prints_one_line_of_accuracy_and_writes_it_in_the_sidecar(tmp_path):
    out = tmp_path / "t.csv"
    res = CliRunner().invoke(cli, ["estimate", "--model", "qwen3-8b", "--gpu", "H100", "--kernels", "roofline",
                                   "--drafters", "", "--max-kv-tokens", "65536", "--max-batch-tokens", "512",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if "expected accuracy" in line]
    meta = json.loads(out.with_suffix(".json").read_text())
    assert lines == [f"hw-profile: expected accuracy: {meta['expected_error']['summary']}; to do better: "
                     f"{meta['expected_error']['narrow_it']}"]
    assert meta["expected_error"] == estimate_expected_error(meta["inside_share"])
    assert meta["inside_share"] == 0.0 and "0% of points on measured kernels" in lines[0]  # roofline kernels only
    assert "note: " not in res.output and "more note(s) on how it was priced" in res.output
    verbose = CliRunner().invoke(cli, ["estimate", "--model", "qwen3-8b", "--gpu", "H100", "--kernels", "roofline",
                                       "--drafters", "", "--max-kv-tokens", "65536", "--max-batch-tokens", "512",
                                       "--out", str(out), "--notes"])
    assert [f"hw-profile: note: {n}" for n in meta["notes"]] == \
        [line for line in verbose.output.splitlines() if line.startswith("hw-profile: note: ")]


@pytest.mark.parametrize("name, kind, words", [
    ("h200-qwen3-8b-bf16-vllm.csv", "estimate", "within 30% on"),
    ("h200-qwen3-8b-bf16.csv", "roofline", "speed bound"),
    ("cpu-qwen3-0.6b.csv", "measured", "measured on"),
    ("paper-v4-flash-calibrated.csv", "calibrated", "residuals rms"),
])
def test_every_kind_of_bundled_table_says_how_far_to_trust_it(name, kind, words):
    error = expected_error(StepTable.read(HARDWARE / name).meta)
    assert error["kind"] == kind and words in error["summary"]
    assert ("step_median" in error) == (kind == "estimate")
