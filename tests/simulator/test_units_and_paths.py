"""SLA figures checked against plausible ranges with the unit in the error, and `--set` paths read from the
working directory."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from simulator.cli import cli
from simulator.errors import UserError
from simulator.inputs.config import load_scenario
from simulator.runs.plan import check_plausible
from tests.conftest import H200_TABLE
from tests.simulator.test_config import run_cli


@pytest.mark.slow
def test_a_per_user_speed_under_1_tok_s_is_refused_unless_forced(scenario_file):
    path = scenario_file(sla={"tps_targets": [80, 0.005]})
    res = run_cli("check", str(path))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert (f"{path}: sla.tps_targets[1]: expected a per-user speed of at least 1 tok/s/user, got 0.005 tok/s/user "
            "(set sla.force: true to keep it)") in res.stderr
    assert load_scenario(path, ["sla.force=true"]).model.sla.tps_targets == [80, 0.005]
    assert load_scenario(scenario_file(name="one", sla={"tps_targets": [1]})).model.sla.tps_targets == [1]


@pytest.mark.parametrize(("sla", "ttft", "expect"), [
    (0.5, 1.0, r"^--sla 0\.5: expected a per-user speed of at least 1 tok/s/user, got 0\.5 tok/s/user "
               r"\(--force to plan for it anyway\)$"),
    (None, 500.0, r"^--ttft-p99 500: expected a TTFT p99 limit of at most 60 seconds, got 500 s \(the flag is in "
                  r"seconds, not milliseconds; --force to plan for it anyway\)$"),
])
def test_plan_flags_out_of_range_are_refused_unless_forced(sla, ttft, expect):
    with pytest.raises(UserError, match=expect):
        check_plausible(sla, ttft, force=False)
    check_plausible(sla, ttft, force=True)
    check_plausible(1.0, 60.0, force=False)  # the edges are plausible


@pytest.mark.slow
def test_plan_refuses_a_500_second_ttft_before_running_anything(scenario_file, tmp_path):
    path = scenario_file(traffic={"kind": "poisson", "rate": 10.0}, frontier=None)
    res = run_cli("plan", str(path), "--ttft-p99", "500", "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "error: --ttft-p99 500: expected a TTFT p99 limit of at most 60 seconds" in res.stderr
    assert not (tmp_path / "out").exists()
    res = run_cli("plan", str(path), "--sla", "0.2", "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and "error: --sla 0.2: expected a per-user speed of at least 1 tok/s/user" in res.stderr


def test_set_paths_are_relative_to_the_working_directory(tmp_path, monkeypatch, scenario_file):
    scenario = scenario_file()  # in tmp_path
    work = tmp_path / "work"
    (work / "tables").mkdir(parents=True)
    shutil.copy(H200_TABLE, work / "tables" / "mine.csv")
    monkeypatch.chdir(work)
    scn = load_scenario(scenario, ["hardware.table=tables/mine.csv"])
    assert scn.resolve(scn.model.hardware.table) == work / "tables" / "mine.csv"
    # a mapping given whole: its path fields too
    scn = load_scenario(scenario, ["hardware={table: tables/mine.csv, replicas: 2}"])
    assert scn.resolve(scn.model.hardware.table) == work / "tables" / "mine.csv" and scn.model.hardware.replicas == 2
    # missing: the error names the path in the working directory, not the scenario's folder
    res = CliRunner().invoke(cli, ["check", str(scenario), "--set", "hardware.table=tables/none.csv"])
    assert isinstance(res.exception, UserError) and str(work / "tables" / "none.csv") in str(res.exception)
    # a library name and a built-in profile name keep their meaning; the scenario's own paths stay its folder's
    scn = load_scenario(scenario, ["hardware.table=hardware/h200-qwen3-8b-bf16.csv", "acceptance.profile=paper-qwen3-8b"])
    assert scn.resolve(scn.model.hardware.table).name == "h200-qwen3-8b-bf16.csv"
    assert scn.model.acceptance.profile == "paper-qwen3-8b"
    assert load_scenario(scenario, ["engine.max_running=8"]).model.hardware.table == str(H200_TABLE)
