"""The library's forecast tables (scenarios/hardware/*-vllm.csv) are what `hw-profile estimate` writes today: the
command each sidecar records, run again, gives the same step times and the same facts, so the library cannot drift
from the code that prices a step."""

from __future__ import annotations

import importlib.util
import json
import shlex

import pytest
from click.testing import CliRunner

from hw_profile.cli import cli
from tests.conftest import ROOT

HARDWARE = ROOT / "scenarios" / "hardware"
FORECASTS = sorted(p for p in HARDWARE.glob("*-vllm.csv"))
# what says when and where a table was written, not what it holds
WHEN_AND_WHERE = {"date", "host", "python", "command"}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                                 reason="the kernel database (dspark-sim[kernels]) is not installed")]


def test_the_library_ships_forecasts_for_the_h200_and_the_b200():
    assert [p.name for p in FORECASTS] == ["b200-qwen3-8b-bf16-vllm.csv", "h200-qwen3-8b-bf16-vllm.csv"]


@pytest.mark.parametrize("table", FORECASTS, ids=lambda p: p.stem)
def test_the_recorded_command_writes_the_bundled_table_again(table, tmp_path):
    meta = json.loads(table.with_suffix(".json").read_text())
    assert meta["kind"] == "estimate"
    args = shlex.split(meta["command"])
    assert args[:2] == ["hw-profile", "estimate"]
    out = args.index("--out") + 1
    args[out] = str(tmp_path / table.name)
    res = CliRunner().invoke(cli, args[1:])
    assert res.exit_code == 0, res.output
    written = [table.name, *(d["table"] for d in meta["drafter_tables"].values())]
    for name in written:
        assert (tmp_path / name).read_text() == (HARDWARE / name).read_text(), name
        new, old = (json.loads((d / name).with_suffix(".json").read_text()) for d in (tmp_path, HARDWARE))
        assert {k: v for k, v in new.items() if k not in WHEN_AND_WHERE} == \
               {k: v for k, v in old.items() if k not in WHEN_AND_WHERE}, name
