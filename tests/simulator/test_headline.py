"""A headline that does not mislead: flagged runs with hints, units in headers, the matched-throughput range's
span, --quick and --set recorded, overrides in their own folder."""

from __future__ import annotations

import json
import math
import os
import re

import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.cli import cli, default_out
from simulator.inputs.config import load_scenario
from simulator.outputs.summary import (
    build_summary,
    flag_hint,
    flag_lines,
    format_headline,
    headline_table,
    matched_gain_tips,
)
from simulator.runs.sweep import Sweep


def test_saturated_and_empty_runs_are_flagged_with_a_hint_in_the_terminal_and_the_report(scenario_file, tmp_path):
    # one replica of 8 requests cannot serve 400 requests/s: the open-loop queue grows
    path = scenario_file(systems=["dspark"], engine={"max_running": 8, "max_batch_tokens": 4096},
                         traffic={"kind": "poisson", "rate": 400.0})
    out = tmp_path / "o"
    res = CliRunner().invoke(cli, [str(path), "--quick", "--out", str(out), "--jobs", "1"])
    assert res.exit_code == 0, res.output
    assert "dspark !" in res.output
    assert f"! saturated at open (dspark): {flag_hint('saturated', ['open'], quick=True)}" in res.output
    summary = json.loads((out / "summary.json").read_text())
    assert "saturated" in {f["kind"] for f in summary["systems"]["dspark"]["flags"]}
    page = (out / "report.html").read_text()
    assert "Flagged runs" in page and "the queue was still growing" in page


def test_no_finished_requests_is_flagged_not_averaged(scenario_file, tmp_path):
    # outputs of 4000 tokens cannot finish in 2 simulated seconds
    path = scenario_file(workload={"prompt": 128, "output": 4000})
    scn = load_scenario(path)
    sweep = Sweep.plan(scn, tmp_path / "o", quick=True, seed=None, replicates=None)
    sweep.execute(jobs=1)
    runs = sweep.results()
    assert (runs["requests"] == 0).all()
    summary = build_summary(scn, runs)
    assert [f["kind"] for f in summary["systems"]["dspark"]["flags"]] == ["no_finished"]
    assert [line.split(":")[0] for line in flag_lines(summary)] == ["! no request finished at closed-8 (dspark)"]
    assert "a longer run (run.duration_s" in flag_lines(summary)[0]


def test_headers_carry_units_and_the_matched_range_says_what_it_spans(scenario_file, tmp_path):
    path = scenario_file(systems=["mtp-1", "dspark"], frontier={"concurrency": [2, 16, 64]},
                         sla={"tps_targets": [80.0, 120.0]})
    scn = load_scenario(path)
    sweep = Sweep.plan(scn, tmp_path / "o", quick=True, seed=None, replicates=None)
    sweep.execute(jobs=2)
    runs = sweep.results()
    summary = build_summary(scn, runs)
    table = format_headline(headline_table(summary))
    for col in table.columns[1:]:
        assert re.search(r"tok/s|\(s\)|gain vs mtp-1|share", col), col
    g = summary["systems"]["dspark"]["tps_gain_at_matched_throughput"]
    span = g["span"]
    thr = runs[runs["concurrency"].notna()].groupby(["policy", "concurrency"])["throughput_per_gpu"].mean()
    assert span[0] == max(thr["dspark"].min(), thr["mtp-1"].min())
    assert span[1] == min(thr["dspark"].max(), thr["mtp-1"].max())
    # one number to read, the median over the range; the range (and where it is read) behind it
    cell = table.loc[table["system"] == "dspark", "TPS gain vs mtp-1 at matched throughput (median)"].iloc[0]
    assert cell == f"{g['median']:+.0%}" and g["min"] <= g["median"] <= g["max"]
    tip = matched_gain_tips(summary)[list(summary["systems"]).index("dspark")]
    assert tip == f"from {g['min']:+.0%} to {g['max']:+.0%} over {g['from']:,.0f}-{g['to']:,.0f} tok/s/GPU, the " \
                  "throughput both frontiers cover"


def test_overrides_go_to_their_own_folder_and_are_recorded(scenario_file, tmp_path):
    path = scenario_file()
    assert default_out(path, ()) == os.path.join("results", path.stem) or str(default_out(path, ())) == f"results/{path.stem}"
    a = default_out(path, ("engine.max_running=32",))
    b = default_out(path, ("engine.max_running=48",))
    assert a != b and a.name.startswith(f"{path.stem}-set-") and a.parent.name == "results"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = CliRunner().invoke(cli, [str(path), "--quick", "--jobs", "1", "--set", "engine.max_running=32"])
    finally:
        os.chdir(cwd)
    assert res.exit_code == 0, res.output
    out = tmp_path / a
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overrides"] == ["engine.max_running=32"] and summary["quick"] is True
    assert not (tmp_path / "results" / path.stem).exists()  # the base scenario's folder is untouched
    assert "--set engine.max_running=32" in (out / "report.html").read_text()
    assert len(pd.read_csv(out / "runs.csv")) == 1


def test_a_baseline_whose_users_all_stalled_is_flagged_and_the_summary_and_report_are_written(scenario_file,
                                                                                              tmp_path):
    """The measured CPU recipe once crashed here: a baseline load point where no request got past its first
    token has speed 0, and the gain at matched throughput against it was infinite."""
    from simulator.inputs.hardware import load_target_table
    from simulator.outputs.report import write_report
    from simulator.outputs.summary import write_outputs

    path = scenario_file(systems=["mtp-1", "dspark"], frontier={"concurrency": [2, 8, 16]})
    scn = load_scenario(path)
    out = tmp_path / "o"
    sweep = Sweep.plan(scn, out, quick=True, seed=None, replicates=None)
    sweep.execute(jobs=1)
    runs = sweep.results()
    # the baseline's heaviest point as a run whose followed users all stalled at their first token
    hit = (runs["policy"] == "mtp-1") & (runs["concurrency"] == 16)
    runs.loc[hit, ["tps_per_user", "tps_per_user_p50", "tps_per_user_p10", "sla_attainment"]] = 0.0
    runs.loc[hit, "unfinished"] = runs.loc[hit, "requests"]
    # at the highest throughput swept, so that the system's curve reaches it
    runs.loc[hit, "throughput_per_gpu"] = runs["throughput_per_gpu"].max()
    summary, frontier = write_outputs(out, scn, runs)
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["systems"]["mtp-1"]["flags"][0]["kind"] == "no_finished"
    assert on_disk["systems"]["mtp-1"]["flags"][0]["load_points"] == ["closed-16"]
    gain = summary["systems"]["dspark"]["tps_gain_at_matched_throughput"]
    assert math.isfinite(gain["min"]) and math.isfinite(gain["max"])
    page = write_report(out / "report.html", scn, runs, frontier, summary, load_target_table(scn), None)
    assert "no request that arrived in the measurement window finished" in page.read_text()


@pytest.mark.slow
def test_terminal_tables_fit_120_columns_and_name_what_they_leave_to_the_report(scenario_file, tmp_path):
    from simulator.outputs.summary import fit_width, terminal_headline

    path = scenario_file(systems=["mtp-1", "threshold-0.7", "dspark"], frontier={"concurrency": [2, 16, 64]},
                         traffic={"kind": "poisson", "rate": 50.0}, sla={"tps_targets": [80.0, 120.0]})
    res = CliRunner().invoke(cli, [str(path), "--quick", "--out", str(tmp_path / "o"), "--jobs", "1"])
    assert res.exit_code == 0, res.output
    table = res.output.split("\n(--quick")[0]
    assert max(len(line) for line in table.splitlines()) <= 120
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    text = terminal_headline(summary)
    assert text in res.output and "@80 tok/s/GPU" in text and "threshold-0.7" in text
    wide = pd.DataFrame({"system": ["a"], **{f"column {i}": ["x" * 20] for i in range(8)}})
    fitted, dropped = fit_width(wide, 120)
    assert max(len(line) for line in fitted.splitlines()) <= 120
    assert dropped == [f"column {i}" for i in range(8 - len(dropped), 8)] and len(dropped) >= 3
    kept = [f"column {i}" for i in range(8 - len(dropped))]
    assert fit_width(wide[["system", *kept, dropped[0]]], 120)[1] == [dropped[0]]  # one more would not fit


def test_progress_is_printed_as_lines_when_stderr_is_not_a_terminal(scenario_file, tmp_path):
    import io

    from simulator.runs.progress import LineProgress, progress_bar

    stream = io.StringIO()
    bar = progress_bar("scn: runs", 3, stream, every_s=0.0)
    assert isinstance(bar, LineProgress)
    for _ in range(3):
        bar.update(1)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [f"scn: runs: {n}/3 runs done" for n in (1, 2, 3, 3)]
    quiet = io.StringIO()
    slow = progress_bar("scn: plan runs", None, quiet, every_s=3600.0)
    slow.update(5)
    slow.close()
    assert quiet.getvalue().startswith("scn: plan runs: 5 runs done, ")  # only the closing line


def test_a_system_keeps_its_colour_whatever_the_other_systems():
    from simulator.outputs.report import SYSTEM_PALETTE, colors

    peak = ["mtp-1", "static-3", "static-5", "threshold-0.7", "batch-table", "goodput-k", "dspark", "dspark-async"]
    full = colors(peak)
    assert len(set(full.values())) == len(peak)  # distinct within a report
    assert colors(["dspark", "mtp-1"]) == {"dspark": full["dspark"], "mtp-1": full["mtp-1"]}
    assert colors(["mtp-1", "dspark"]) == colors(["dspark", "mtp-1"])  # not by position
    assert colors(["dspark-async"])["dspark-async"] == full["dspark-async"]
    mine = colors(["my-policy", "dspark"])  # a researcher's system: a colour the library's do not use
    assert mine["my-policy"] not in full.values() and mine["my-policy"] == colors(["my-policy"])["my-policy"]
    many = colors([f"s{i}" for i in range(30)])  # more systems than colours: every one still gets one
    assert set(many.values()) <= set(SYSTEM_PALETTE)


def test_flags_say_each_cause_once_with_advice_that_fits_each_kind_of_load_point():
    def flagged(*points):
        return {"flags": [{"kind": "overloaded", "load_points": list(points)}]}

    summary = {"quick": False, "systems": {"a": flagged("closed-768"), "b": flagged("closed-768", "closed-384"),
                                           "c": {"flags": []}}}
    lines = flag_lines(summary)
    assert len(lines) == 1  # one cause, two systems, two points: one line
    assert lines[0].startswith("! overloaded at closed-384 (b); closed-768 (a, b): ")
    assert "Closed loop: fewer users (frontier.concurrency)" in lines[0] and "traffic.rate" not in lines[0]
    assert "--quick" not in lines[0]
    summary["systems"]["c"] = flagged("open")
    summary["systems"]["a"]["flags"].append({"kind": "beyond_table", "load_points": ["closed-768"]})
    summary["quick"] = True
    lines = flag_lines(summary)
    assert [line.split(" at ")[0] for line in lines] == ["! overloaded", "! beyond the step-time table"]
    assert lines[0].startswith("! overloaded at closed-384 (b); closed-768 (a, b); open (c): ")
    assert "closed loop: fewer users" in lines[0].lower() and "open loop: lower traffic.rate" in lines[0]
    assert "--quick runs are short" in lines[0] and "--quick" not in lines[1]  # a short run cannot cause it
    summary["systems"] = {"a": flagged("closed-768"), "b": flagged("closed-768")}
    assert flag_lines(summary)[0].startswith("! overloaded at closed-768 (every system): ")
