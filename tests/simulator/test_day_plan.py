"""simulate plan --per-segment: GPU-hours per day in closed form, the per-segment search against brute force, a
small real day plan (fewest GPUs per segment, monotone in the rate, equal rates sharing runs, resumable), a
trace cut into segments, and one-line errors for traffic without segments."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import UserError
from simulator.inputs.config import load_scenario
from simulator.outputs.day_report import terminal_day
from simulator.outputs.verdicts import day_verdict
from simulator.runs.backends import Backend
from simulator.runs.day_plan import (
    MET_AT_HIGHER_RATE,
    DayPlanner,
    day_totals,
    segments_of,
    settle,
)
from simulator.runs.plan import MET, UNMET, Candidate, Target
from tests.conftest import BASE, ROOT, merge

SMALL_DAY = {
    "systems": ["mtp-1", "dspark"],
    "engine": {"max_running": 32, "max_batch_tokens": 4096},
    "workload": {"prompt": 128, "output": 48},
    "frontier": None,
    # a 5-hour pattern, compressed 1200x: 20 requests/s twice (3 h), the peak 250, a shoulder of 120
    "traffic": {"kind": "poisson", "time_scale": 1200,
                "segments": [{"duration_s": 3600, "rate": 20.0}, {"duration_s": 3600, "rate": 250.0},
                             {"duration_s": 7200, "rate": 20.0}, {"duration_s": 3600, "rate": 120.0}]},
    "sla": {"tps_targets": [100.0], "baseline": "mtp-1"},
    "run": {"duration_s": 6.0, "warmup_s": 1.0, "quick_duration_s": 3.0, "quick_warmup_s": 0.5},
}
TARGET = Target(tps=100.0, attainment=0.9, ttft_p99=1.0, max_gpus=16, rate_tolerance=0.2)


def write(path, **fields):
    path.write_text(yaml.safe_dump(merge(BASE, {**SMALL_DAY, **fields})))
    return path


def row(segment, duration, gpus, system="a", status=MET):
    return {"segment": segment, "duration": duration, "gpus": gpus, "system": system, "status": status}


# --- arithmetic -----------------------------------------------------------------------------------------------

def test_gpu_hours_per_day_and_the_saving_are_gpus_times_real_hours():
    # a day of 24 hourly segments: 2 GPUs for 8 hours and 4 for 16 against a baseline of 5 all day
    rows = [row(f"{h:02d}:00", 3600, 2 if h < 8 else 4) for h in range(24)]
    rows += [row(f"{h:02d}:00", 3600, 5, system="base") for h in range(24)]
    out = day_totals(rows, 86400, 2.5, "base")
    a, base = out["a"], out["base"]
    assert a["gpu_hours_per_day"] == pytest.approx(2 * 8 + 4 * 16)  # 80
    assert a["usd_per_day"] == pytest.approx(80 * 2.5)
    assert base["gpu_hours_per_day"] == pytest.approx(120)
    assert a["saving_gpu_hours_per_day"] == pytest.approx(40) and a["saving_usd_per_day"] == pytest.approx(100)
    assert a["saving_share"] == pytest.approx(1 / 3) and base["saving_gpu_hours_per_day"] == 0
    assert (a["fewest_gpus"], a["peak_gpus"], a["static_gpu_hours_per_day"]) == (2, 4, 96)


def test_a_span_shorter_than_a_day_is_repeated_and_unmet_segments_are_named():
    # 90 minutes: 1 GPU for an hour, 3 for half an hour = 2.5 GPU-hours, 16 times a day
    rows = [row("00:00", 3600, 1), row("01:00", 1800, 3, status=UNMET)]
    rows[1]["why_unmet"] = "at 3 decode GPUs: saturated"
    a = day_totals(rows, 5400, 1.0, None)["a"]
    assert a["gpu_hours"] == pytest.approx(2.5) and a["gpu_hours_per_day"] == pytest.approx(2.5 * 16)
    assert a["unmet_segments"] == ["01:00"] and a["why_unmet"] == ["01:00: at 3 decode GPUs: saturated"]
    assert "saving_share" not in a  # no baseline


def test_the_day_verdict_names_the_fewest_gpu_hours_the_saving_and_ties():
    def doc_of(gpus_by_system, statuses=None):
        rows = [{**row(f"{h:02d}:00", 3600, g(h), system=name), "status": (statuses or {}).get((name, h), MET)}
                for name, g in gpus_by_system.items() for h in range(24)]
        return {"target": {"tps_per_user": 200, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 64,
                           "gpu_hour_cost_usd": 3.0},
                "scenario": "tide", "span_s": 86400.0, "days_per_span": 1.0, "baseline": "mtp-1",
                "segments": [{"rate": 5.0 + h} for h in range(24)],
                "systems": day_totals(rows, 86400.0, 3.0, "mtp-1")}

    day = {"mtp-1": lambda h: 4 if h >= 8 else 2, "dspark": lambda h: 3 if h >= 8 else 2}
    text = day_verdict(doc_of(day))
    assert text.startswith("Over a day of tide (24 segments, 5.0-28.0 requests/s) with 99% of requests")
    # dspark: 2 x 8 + 3 x 16 = 64 GPU-hours; mtp-1: 2 x 8 + 4 x 16 = 80
    assert "dspark needs the fewest GPU-hours: 64 per day ($192 at $3/GPU-hour; 2-3 GPUs through the day" in text
    assert "that is 16 GPU-hours ($48, 20%) a day fewer than mtp-1's 80" in text
    day["static-3"] = day["dspark"]
    assert "dspark and static-3 tie for the fewest GPU-hours: 64 per day" in day_verdict(doc_of(day))
    unmet = doc_of(day, {("mtp-1", 19): UNMET})
    assert "the baseline mtp-1 does not meet it in 1 segment(s)" in day_verdict(unmet)


# --- the per-segment search -----------------------------------------------------------------------------------

def run_settle(start, ceiling, ceiling_met, meets):
    probed = []

    def probe(n):
        probed.append(n)
        ok = yield Candidate(None, n)
        return ok

    search = settle(probe, start, ceiling, ceiling_met)
    try:
        search.send(None)
        while True:
            search.send(meets(probed[-1]))
    except StopIteration as stop:
        return stop.value, probed


@settings(max_examples=300, deadline=None)
@given(need=st.integers(1, 40), start=st.integers(1, 40), ceiling=st.integers(1, 40))
def test_settle_finds_the_fewest_that_meets_from_any_start_and_never_exceeds_the_ceiling(need, start, ceiling):
    (n, status), probed = run_settle(start, ceiling, True, lambda k: k >= need)
    assert n <= ceiling and max(probed) <= ceiling
    if need <= ceiling:
        assert n == need
        # the ceiling met at a higher rate: it is taken without a run when everything below it fails
        assert status == (MET if need < ceiling or ceiling in probed else MET_AT_HIGHER_RATE)
    else:  # fails here even at the ceiling, which met at a higher rate: the monotone answer
        assert (n, status) == (ceiling, MET_AT_HIGHER_RATE)
    assert len(probed) <= 2 + 2 * max(ceiling, 1).bit_length()


def test_settle_from_the_implied_count_confirms_it_with_one_or_two_runs():
    assert run_settle(3, 8, True, lambda k: k >= 3) == ((3, MET), [3, 2])
    assert run_settle(3, 8, True, lambda k: k >= 4) == ((4, MET), [3, 4])
    assert run_settle(1, 8, True, lambda k: True) == ((1, MET), [1])
    # a ceiling unmet at a higher rate is run, and unmet when it fails here too
    assert run_settle(2, 4, False, lambda k: False) == ((4, UNMET), [2, 4])


# --- a real day plan ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def day(tmp_path_factory):
    folder = tmp_path_factory.mktemp("day")
    path = write(folder / "tide.yaml")
    planner = DayPlanner(load_scenario(path), folder / "o", TARGET, Backend("local", 2), quick=True)
    return path, folder / "o", planner.run()


@pytest.mark.slow
def test_a_small_day_plan_sizes_each_segment_and_sums_gpu_hours(day):
    doc = day[2]
    rows = pd.DataFrame(doc["rows"])
    assert list(rows["segment"].unique()) == ["00:00", "01:00", "02:00", "04:00"]
    assert set(rows["system"]) == {"mtp-1", "dspark"}
    for (rate, system), g in rows.groupby(["rate", "system"]):
        assert g["status"].isin([MET, MET_AT_HIGHER_RATE]).all(), g
        n = int(g["decode_gpus"].iloc[0])
        if rate == 250.0:  # the peak: the ordinary plan's search (below)
            continue
        searched = next(e for e in doc["rates"] if e["rate"] == rate)["search"][system]
        tried = {t["replicas"]: t["met"] for t in searched}
        assert tried.get(n, True)  # the count chosen met at this rate (or met at a higher one)
        if n > 1:
            assert tried[n - 1] is False  # one fewer failed: the fewest
    peak = doc["peak_plan"]["systems"]
    for system in ("mtp-1", "dspark"):
        at_peak = rows[(rows["system"] == system) & (rows["rate"] == 250.0)]
        assert int(at_peak["gpus"].iloc[0]) == peak[system]["gpus"]  # the peak is the ordinary plan's answer
        mine = rows[rows["system"] == system]
        hours = (mine["gpus"] * mine["duration"]).sum() / 3600
        assert doc["systems"][system]["gpu_hours_per_day"] == pytest.approx(hours * 86400 / (5 * 3600))
    # equal rates share their plan: the two 20 requests/s segments are one entry and equal rows
    assert [e["rate"] for e in doc["rates"]] == [250.0, 120.0, 20.0]  # from the peak down
    low = rows[rows["rate"] == 20.0]
    assert (low.groupby("system")["gpus"].nunique() == 1).all()
    assert "fewest GPU-hours" in doc["verdict"]


@pytest.mark.slow
def test_a_higher_rate_segment_never_gets_fewer_gpus(day):
    rows = pd.DataFrame(day[2]["rows"])
    for _, g in rows.groupby("system"):
        by_rate = g.groupby("rate")["gpus"].max().sort_index()
        assert by_rate.is_monotonic_increasing, by_rate
        assert by_rate.iloc[-1] > by_rate.iloc[0]  # the tide needs a bigger fleet at its peak than at night


@pytest.mark.slow
def test_the_day_plan_resumes_from_the_store_and_the_cli_writes_its_outputs(day):
    from click.testing import CliRunner

    from simulator.cli import cli

    path, out, doc = day
    again = DayPlanner(load_scenario(path), out, TARGET, Backend("local", 2), quick=True)
    assert again.run()["rows"] == doc["rows"] and again.planner.runs == 0
    res = CliRunner().invoke(cli, ["plan", str(path), "--per-segment", "--quick", "--out", str(out), "--jobs", "1",
                                   "--attainment", "0.9", "--max-gpus", "16", "--rate-tolerance", "0.2",
                                   "--replicates", "1", "--gpu-hour-cost", "2"])
    assert res.exit_code == 0, res.output
    assert "GPU-h/day" in res.output and "fewest GPU-hours" in res.output
    assert max(len(line) for line in terminal_day(json.loads((out / "day_plan.json").read_text())).splitlines()) <= 120
    csv = pd.read_csv(out / "day_plan.csv")
    assert list(csv.columns[:9]) == ["segment", "start", "duration", "rate", "system", "gpus", "decode_gpus",
                                     "prefill_gpus", "status"]
    js = json.loads((out / "day_plan.json").read_text())
    assert js["target"]["gpu_hour_cost_usd"] == 2
    for e in js["systems"].values():
        assert e["usd_per_day"] == pytest.approx(2 * e["gpu_hours_per_day"])
    page = (out / "report.html").read_text()
    assert "GPUs needed at the SLA through the day" in page and "Day plan" in page


# --- traces and errors ----------------------------------------------------------------------------------------

def azure_trace(path, seconds):
    """An Azure-format trace with one request at each of ``seconds`` (from a fixed start)."""
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for s in seconds:
        lines.append(f"2023-11-16 18:{int(s) // 60:02d}:{s % 60:06.3f},128,48")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_a_trace_is_cut_into_segments_of_its_own_timeline(tmp_path):
    # 0-600 s: a request every 10 s; 600-1200 s: every 2 s (the last at 1198 ends the recording)
    seconds = [*range(0, 600, 10), *range(600, 1200, 2)]
    azure_trace(tmp_path / "t.csv", seconds)
    path = write(tmp_path / "trace.yaml", traffic={"kind": "trace", "trace": "t.csv", "rate_scale": 100.0},
                 systems=["mtp-1"])
    segs = segments_of(load_scenario(path), segment_s=600)
    assert [s.label for s in segs] == ["00:00", "00:10"]
    assert [s.duration_s for s in segs] == [pytest.approx(599), pytest.approx(599)]  # the span cut in two
    # arrivals in each piece / its length, x rate_scale (the replay's rate)
    assert segs[0].rate == pytest.approx(60 / 599 * 100) and segs[1].rate == pytest.approx(300 / 599 * 100)
    # a small day plan of it: the busier half needs at least as many GPUs
    planner = DayPlanner(load_scenario(path), tmp_path / "o", TARGET, Backend("local", 2), quick=True,
                         segment_s=600, replicates=1)
    doc = planner.run()
    rows = pd.DataFrame(doc["rows"])
    assert list(rows["segment"]) == ["00:00", "00:10"] and rows["gpus"].is_monotonic_increasing
    assert doc["days_per_span"] == pytest.approx(1198 / 86400)


@pytest.mark.slow
def test_traffic_without_segments_is_refused_in_one_line(tmp_path):
    constant = write(tmp_path / "flat.yaml", traffic={"kind": "poisson", "rate": 40.0})
    with pytest.raises(UserError, match=r"traffic.segments: --per-segment .* one constant rate \(40 requests/s\)"):
        segments_of(load_scenario(constant))
    with pytest.raises(UserError, match="--segment-s cuts a replayed trace"):
        segments_of(load_scenario(write(tmp_path / "tide.yaml")), segment_s=600)
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "plan", str(constant), "--per-segment",
                           "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "traffic.segments" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.browser
def test_the_day_plan_section_draws_in_a_browser(day, tmp_path):
    import re

    from simulator.inputs.hardware import load_target_table
    from simulator.outputs.report import write_report
    from tests.simulator.test_report_browser import render

    path, _, doc = day
    scn = load_scenario(path)
    page = write_report(tmp_path / "report.html", scn, None, None, None, load_target_table(scn), None, doc)
    dom = render(page, tmp_path)
    assert 'data-js-errors="' not in dom
    counts = [int(a or b) for a, b in re.findall(
        r'class="plotly-graph-div[^"]*"[^>]*data-drawn="(\d+)"|data-drawn="(\d+)"[^>]*class="plotly-graph-div', dom)]
    assert counts == [len(doc["systems"]) + 1]  # a step line per system and the traffic's
