"""Nothing lost on failure: a command that fails (or is interrupted) leaves the results folder it writes as the
earlier run left it, whatever it had written before it failed; the run store keeps what finished."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simulator.cli import cli
from simulator.errors import UserError
from simulator.outputs.kept import kept_on_failure
from tests.conftest import H200_TABLE
from tests.simulator.test_plan import SMALL_PLAN


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every output file of a results folder (the run store aside) and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".runs" not in p.parts}


def test_kept_on_failure_puts_back_what_was_there_and_removes_what_was_added(tmp_path):
    out = tmp_path / "o"
    (out / ".runs").mkdir(parents=True)
    (out / "runs.csv").write_text("old runs")
    (out / "sub").mkdir()
    (out / "sub" / "a.json").write_text("old a")
    with pytest.raises(RuntimeError), kept_on_failure(out):
        (out / "runs.csv").write_text("new runs")
        (out / "sub" / "a.json").unlink()
        (out / "report.html").write_text("new report")
        (out / "new" / "deep").mkdir(parents=True)
        (out / "new" / "deep" / "x.csv").write_text("x")
        (out / ".runs" / "k.json").write_text("{}")  # a finished run: kept for the next command to resume
        raise RuntimeError("failed while writing")
    assert snapshot(out) == {"runs.csv": b"old runs", "sub/a.json": b"old a"}
    assert (out / ".runs" / "k.json").is_file() and not (out / "new").exists()
    assert sorted(p.name for p in out.iterdir()) == [".runs", "runs.csv", "sub"]  # no copy left aside
    with kept_on_failure(out):  # success: the new outputs stay
        (out / "runs.csv").write_text("newer")
    assert (out / "runs.csv").read_text() == "newer" and sorted(p.name for p in out.iterdir()) == [".runs", "runs.csv", "sub"]


def test_a_failed_simulate_leaves_the_earlier_outputs(scenario_file, tmp_path, crashy, monkeypatch):
    path = scenario_file(systems=["dspark"])
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, [str(path), "--quick", "--jobs", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    before = snapshot(out)
    assert {"runs.csv", "summary.json", "frontier.csv", "report.html"} <= set(before)
    # a plug-in that crashes mid-sweep: one line, exit 2 (through main), nothing replaced
    res = CliRunner().invoke(cli, [str(path), "--quick", "--jobs", "1", "--out", str(out), "--set",
                                   f"systems+={{name: mine, policy: '{crashy}'}}"])
    assert isinstance(res.exception, UserError) and snapshot(out) == before
    # a failure after runs.csv and summary.json were written: they come back as they were
    import simulator.outputs.report

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(simulator.outputs.report, "write_report", broken)
    res = CliRunner().invoke(cli, [str(path), "--quick", "--jobs", "1", "--out", str(out), "--set",
                                   "workload.output=40"])
    assert isinstance(res.exception, OSError) and snapshot(out) == before


@pytest.mark.slow
def test_a_failed_plan_leaves_the_earlier_outputs(scenario_file, tmp_path, crashy, monkeypatch):
    path = scenario_file(**{**SMALL_PLAN, "systems": ["mtp-1"]})
    out = tmp_path / "out"
    common = ["plan", str(path), "--quick", "--jobs", "1", "--out", str(out), "--max-gpus", "2", "--replicates", "1",
              "--rate-tolerance", "0.5", "--attainment", "0.5"]
    res = CliRunner().invoke(cli, common)
    assert res.exit_code == 0, res.output
    before = snapshot(out)
    assert {"plan.csv", "plan.json", "report.html"} <= set(before)
    res = CliRunner().invoke(cli, [*common, "--set", f"systems=[mtp-1, {{name: mine, policy: '{crashy}'}}]"])
    assert isinstance(res.exception, UserError) and "plug-in 'crashy_policy:Crashy'" in str(res.exception)
    assert snapshot(out) == before
    # plan.csv and plan.json written, then the report fails: the earlier pair comes back
    import simulator.cli

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(simulator.cli, "write_plan_report", broken)
    res = CliRunner().invoke(cli, [*common, "--attainment", "0.6"])
    assert isinstance(res.exception, OSError) and snapshot(out) == before


PROFILE = {"load": {"type": "constant", "stages": [{"rate": 4, "duration": 4}]},
           "data": {"type": "random", "input_distribution": {"min": 100, "max": 100, "mean": 100, "std_dev": 0},
                    "output_distribution": {"min": 20, "max": 20, "mean": 20, "std_dev": 0}},
           "server": {"type": "vllm", "ignore_eos": True}}


def test_a_failed_bench_leaves_the_earlier_scenario_beside_its_bench_csv(tmp_path, monkeypatch):
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["bench", str(profile), "--table", str(H200_TABLE), "--out", str(out)])
    assert res.exit_code == 0, res.output
    before = snapshot(out)
    assert set(before) == {"bench.csv", "scenario.yaml"}
    # a table that is not there: named by the flag, not by a path under the output folder
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["bench", str(profile), "--table", "nope.csv", "--out", str(out)])
    assert isinstance(res.exception, UserError)
    assert str(res.exception).startswith("--table nope.csv: step-time table not found") and str(out) not in str(
        res.exception)
    assert snapshot(out) == before
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1,2\n")
    res = CliRunner().invoke(cli, ["bench", str(profile), "--table", "bad.csv", "--out", str(out)])
    assert str(res.exception).startswith("--table bad.csv: ") and "missing column" in str(res.exception)
    assert snapshot(out) == before
    # a run that fails after the profile (another rate) was read: the earlier scenario.yaml still matches bench.csv
    import simulator.runs.bench

    def broken(*args, **kwargs):
        raise RuntimeError("the run failed")

    monkeypatch.setattr(simulator.runs.bench, "run_bench", broken)
    profile.write_text(yaml.safe_dump({**PROFILE, "load": {"type": "constant", "stages": [{"rate": 9, "duration": 4}]}}))
    res = CliRunner().invoke(cli, ["bench", str(profile), "--table", str(H200_TABLE), "--out", str(out)])
    assert isinstance(res.exception, RuntimeError) and snapshot(out) == before
    assert "rate: 4" in (out / "scenario.yaml").read_text()


def test_a_failed_break_even_leaves_the_earlier_csv(scenario_file, tmp_path, monkeypatch):
    path = scenario_file(systems=["static-5", "mtp-1"], drafter={"name": "dspark", "gamma": 5},
                         frontier={"concurrency": [4]})
    out = tmp_path / "out"
    out.mkdir()
    (out / "break_even.csv").write_text("system,concurrency\nstatic-5,4\n")  # an earlier search's
    before = snapshot(out)
    import simulator.runs.break_even

    def failing(search, pairs, jobs):
        yield from ()
        raise RuntimeError("a search failed")

    monkeypatch.setattr(simulator.runs.break_even, "run_search", failing)
    res = CliRunner().invoke(cli, ["break-even", str(path), "--quick", "--jobs", "1", "--out", str(out)])
    assert isinstance(res.exception, RuntimeError) and snapshot(out) == before
