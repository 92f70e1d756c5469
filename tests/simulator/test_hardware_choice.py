"""simulate plan --hardware: the cost arithmetic and the ranking against closed forms, a real two-option
comparison on a small scenario whose ranking follows the prices, and the one-line errors of bad options."""

from __future__ import annotations

import json
import math
import re
import sys

import pandas as pd
import pytest

from simulator.errors import UserError
from simulator.inputs.config import load_scenario
from simulator.outputs.hardware_report import terminal_hardware, unmet_pair_lines
from simulator.outputs.verdicts import hardware_verdict
from simulator.runs.hardware_choice import (
    HardwareOption,
    check_options,
    pair_row,
    parse_options,
    rank,
)
from simulator.runs.plan import MET, UNMET
from tests.conftest import H200_TABLE, ROOT
from tests.simulator.test_plan import small_plan_scenario

B200_TABLE = ROOT / "scenarios" / "hardware" / "b200-qwen3-8b-bf16.csv"


def entry(system, prefill, decode, tok_per_decode_gpu, status=MET, headroom=0.2, why=None):
    """A plan.json system entry with what the ranking reads."""
    return {"system": system, "status": status, "gpus": prefill + decode, "prefill_gpus": prefill,
            "decode_gpus": decode, "throughput_per_gpu": tok_per_decode_gpu, "headroom": headroom,
            "attainment": 0.995 if status == MET else 0.9, "ttft_p99": 0.4, "why_unmet": why}


def test_cost_per_million_tokens_and_per_pool_in_closed_form():
    h200 = HardwareOption("h200", H200_TABLE, 3.5, "H200")
    row = pair_row(h200, entry("dspark", 3, 2, 13_000.0))
    # 5 GPUs at $3.50 = $17.50/hour for 2 x 13,000 tok/s: 17.5 / (26,000 x 3600) x 1e6 = $0.18697 per M tokens
    assert row["usd_per_hour"] == pytest.approx(17.5)
    assert (row["prefill_usd_per_hour"], row["decode_usd_per_hour"]) == (pytest.approx(10.5), pytest.approx(7.0))
    assert row["output_tokens_per_s"] == pytest.approx(26_000.0)
    assert row["cost_per_mtok"] == pytest.approx(17.5 / (26_000 * 3600) * 1e6)
    assert row["cost_per_mtok"] == pytest.approx(0.186966, rel=1e-5)
    # no tokens: no cost per token (not a division by zero)
    assert math.isnan(pair_row(h200, entry("x", 0, 1, 0.0, status=UNMET))["cost_per_mtok"])


def test_ranking_puts_met_pairs_first_by_spend_then_headroom_then_unmet():
    h200, b200 = HardwareOption("h200", H200_TABLE, 3.5, "H200"), HardwareOption("b200", B200_TABLE, 5.5, "B200")
    rows = [pair_row(h200, entry("mtp-1", 3, 4, 9_000.0)),                 # 7 x 3.5 = 24.50
            pair_row(h200, entry("dspark", 3, 2, 13_000.0, headroom=0.1)),  # 5 x 3.5 = 17.50
            pair_row(h200, entry("static-5", 3, 2, 13_100.0, headroom=0.4)),  # 17.50, more headroom
            pair_row(b200, entry("dspark", 2, 1, 26_000.0)),                # 3 x 5.5 = 16.50
            pair_row(b200, entry("mtp-1", 2, 8, 3_000.0, status=UNMET, why="at 8 decode GPUs: saturated"))]
    ranked = rank(rows)
    assert [(r["rank"], r["hardware"], r["system"]) for r in ranked] == [
        (1, "b200", "dspark"), (2, "h200", "static-5"), (3, "h200", "dspark"), (4, "h200", "mtp-1"),
        (5, "b200", "mtp-1")]
    # equal spend and traffic: the measured cost per token differs only by the window's tokens; headroom decides
    assert ranked[1]["cost_per_mtok"] < ranked[2]["cost_per_mtok"]
    doc = {"target": {"tps_per_user": 200, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 64,
                      "rate_tolerance": 0.05},
           "traffic": {"kind": "poisson", "rate": 55.0}, "arrival_rate": 55.0, "seeds": [0], "baseline": "mtp-1",
           "options": [{"name": "h200", "usd_per_gpu_hour": 3.5}, {"name": "b200", "usd_per_gpu_hour": 5.5}],
           "pairs": ranked}
    text = hardware_verdict(doc)
    assert "the cheapest is dspark on b200: 3 B200 GPUs (2 prefill + 1 decode), $16.50/hour" in text
    # over the next hardware's best (static-5 on h200, $17.50/hour) and the baseline on b200 (unmet)
    # in spend for the same traffic: 1 - 16.50 / 17.50 = 6%
    assert "6% less ($1.00/hour for the same traffic) than the best on h200 (static-5: 5 H200 GPUs" in text
    assert "the baseline mtp-1 does not meet it on b200 within 64 GPUs" in text
    # the baseline at the winner's spend: as much, never a saving split out of the window's noise
    doc["pairs"] = [*ranked[:4], {**pair_row(b200, entry("mtp-1", 2, 1, 20_000.0, headroom=0.0)), "rank": 5}]
    assert ("the baseline on b200 (mtp-1: 3 B200 GPUs (2 prefill + 1 decode), $16.50/hour, $0.229 per million "
            "output tokens) costs as much, with +0% headroom") in hardware_verdict(doc)
    doc["pairs"] = ranked
    assert unmet_pair_lines(doc) == ["! b200 / mtp-1 unmet: at 8 decode GPUs: saturated"]
    assert max(len(line) for line in terminal_hardware(doc).splitlines()) <= 120


def test_a_real_comparison_ranks_by_price_shares_the_store_and_writes_its_report(scenario_file, tmp_path):
    """The same table at two prices: the same plans, the cheaper option first; the dearer option's plan comes
    from the run store (its runs differ only in the price, which no run depends on)."""
    from click.testing import CliRunner

    from simulator.cli import cli

    path = small_plan_scenario(scenario_file, systems=["mtp-1"])
    out = tmp_path / "o"
    res = CliRunner().invoke(cli, ["plan", str(path), "--quick", "--replicates", "1", "--jobs", "2", "--out", str(out),
                                   "--attainment", "0.9", "--max-gpus", "4", "--rate-tolerance", "0.5",
                                   "--hardware", f"h200={H200_TABLE}:3.5", "--hardware", f"h200-at-7={H200_TABLE}:7"])
    assert res.exit_code == 0, res.output
    # the first lines name each option's table and what kind of step times it holds, each folded at the terminal's
    # 120 columns where the checkout's path makes it longer (the path never split)
    import textwrap

    first = [f"hardware 1/2: h200 (H200, {H200_TABLE}, $3.50/GPU-hour), roofline: a roofline speed bound, not a "
             "forecast",
             f"hardware 2/2: h200-at-7 (H200, {H200_TABLE}, $7.00/GPU-hour), roofline: a roofline speed bound, not a "
             "forecast"]
    assert res.stdout.startswith("".join(textwrap.fill(line, 120, subsequent_indent="  ", break_long_words=False,
                                                       break_on_hyphens=False) + "\n" for line in first))
    table = pd.read_csv(out / "hardware.csv")
    assert list(table["hardware"]) == ["h200", "h200-at-7"] and list(table["rank"]) == [1, 2]
    assert table["usd_per_hour"].tolist() == pytest.approx([3.5 * table["gpus"][0], 7 * table["gpus"][1]])
    doc = json.loads((out / "hardware.json").read_text())
    plans = {}
    for name, price in (("h200", 3.5), ("h200-at-7", 7)):
        plans[name] = json.loads((out / "hardware" / name / "plan.json").read_text())
        assert plans[name]["target"]["gpu_hour_cost_usd"] == price
        assert "hardware.table=" in plans[name]["overrides"][-1]
    cheap, dear = (plans[n]["systems"]["mtp-1"] for n in ("h200", "h200-at-7"))
    assert cheap["status"] == dear["status"] == MET and cheap["gpus"] == dear["gpus"]
    assert dear["cost_per_mtok"] == pytest.approx(2 * cheap["cost_per_mtok"])
    assert doc["pairs"][0]["cost_per_mtok"] == pytest.approx(cheap["cost_per_mtok"])
    assert plans["h200"]["runs_executed"] > 0 and plans["h200-at-7"]["runs_executed"] == 0
    assert doc["runs_executed"] == plans["h200"]["runs_executed"]
    assert "the cheapest is mtp-1 on h200" in doc["verdict"] and "50% less ($" in doc["verdict"]
    # one table at two prices: its error is shared, so the price tells them apart; a roofline states no error
    told = table["told_apart_from_best"].tolist()
    assert pd.isna(told[0]) and told[1] is True and table["apart_from_best"][1] == pytest.approx(0.5)
    assert ("Tables' typical step-time error: h200 roofline (none stated), h200-at-7 roofline (none stated); no "
            "table states one") in " ".join(res.stdout.split())
    # the bundled table is a roofline bound: said in hardware.csv, plan.csv and both verdicts
    assert set(table["table_kind"]) == {"roofline"}
    assert set(pd.read_csv(out / "hardware" / "h200" / "plan.csv")["table_kind"]) == {"roofline"}
    assert doc["verdict"].endswith("h200, h200-at-7 are speed bounds (a roofline table: real steps are slower, so its "
                                   "GPU counts are lower bounds).")
    assert "a roofline speed bound, not a forecast: real steps are slower" in plans["h200"]["verdict"]
    page = (out / "report.html").read_text()
    assert "Which hardware" in page and "Cost per million output tokens at the SLA" in page
    assert f"h200-at-7: {H200_TABLE}" in page  # the header names the tables compared
    assert doc["verdict"] in res.output
    lines = res.output.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("#")):][:3]
    assert "h200-at-7" in table[2] and max(len(line) for line in table) <= 120


def test_equal_spend_ties_when_a_headroom_interval_reaches_the_best_bound():
    b200 = HardwareOption("b200", B200_TABLE, 5.5, "B200")

    def row(system, headroom, headroom_hi):
        return {**pair_row(b200, entry(system, 2, 1, 26_000.0, headroom=headroom)), "headroom_hi": headroom_hi}

    pairs = rank([row("static-3", 0.35, 0.70), row("dspark-async", 0.61, 0.69), row("batch-table", 0.24, 0.30),
                  row("mtp-1", 0.0, float("nan"))])
    doc = {"target": {"tps_per_user": 200, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 8,
                      "rate_tolerance": 0.05},
           "traffic": {"kind": "poisson", "rate": 55.0}, "arrival_rate": 55.0, "seeds": [0, 1, 2], "baseline": "mtp-1",
           "options": [{"name": "b200", "usd_per_gpu_hour": 5.5}], "pairs": pairs}
    text = hardware_verdict(doc)
    # static-3's interval (+35% to +70%) reaches dspark-async's bound (+61%); batch-table's (to +30%) does not
    assert ("the cheapest is dspark-async and static-3 (tied: the same spend, each one's headroom interval reaching "
            "the best's bound at the search's 5% precision and 3 seeds) on b200") in text
    assert "+35% to +61% headroom" in text
    assert "the baseline on b200 (mtp-1: 3 B200 GPUs (2 prefill + 1 decode), $16.50/hour" in text


@pytest.mark.parametrize("spec, expected", [
    ("h200", "expected NAME=TABLE.csv:USD_PER_GPU_HOUR"),
    (f"h200={H200_TABLE}", "no price; expected NAME=TABLE.csv:USD_PER_GPU_HOUR"),
    (f"h200={H200_TABLE}:cheap", "price 'cheap' is not a number of USD per GPU-hour"),
    (f"h200={H200_TABLE}:0", "expected a positive number of USD per GPU-hour"),
    ("h200=no/such/table.csv:3.5", "table no/such/table.csv does not exist; expected a step-time table CSV"),
    (f"../x={H200_TABLE}:3.5", "names a folder: letters, digits"),
])
def test_bad_hardware_specs_say_what_was_expected(spec, expected):
    with pytest.raises(UserError, match=r"^--hardware ") as exc:
        parse_options([spec])
    assert expected in str(exc.value) and "\n" not in str(exc.value)


def test_a_duplicate_name_and_ambiguous_scenario_tables_are_refused(scenario_file):
    twice = "--hardware: the name 'a' is given twice; expected one name per option"
    with pytest.raises(UserError, match=re.escape(twice)):
        parse_options([f"a={H200_TABLE}:1", f"a={B200_TABLE}:2"])
    # a prefill pool priced by the scenario's own table: stay there or follow the option? not ours to guess
    path = small_plan_scenario(scenario_file, hardware={"table": str(H200_TABLE), "prefill_table": str(H200_TABLE)},
                               engine={"max_running": 32, "prefill": "disaggregated"})
    kept = "hardware.prefill_table: names a table of the scenario's own hardware"
    with pytest.raises(UserError, match=re.escape(kept)):
        check_options(load_scenario(path), parse_options([f"b200={B200_TABLE}:5.5"]))


def test_cli_refuses_a_bad_option_in_one_line_before_any_run(scenario_file, tmp_path, monkeypatch, capsys):
    from simulator.cli import main

    path = small_plan_scenario(scenario_file, systems=["mtp-1"])
    base = ["simulate", "plan", str(path), "--quick", "--out", str(tmp_path / "o"),
            "--hardware", f"h200={H200_TABLE}:3.5"]
    for extra, line in ((["--hardware", "b200=missing.csv:5"],
                         "error: --hardware 'b200=missing.csv:5': table missing.csv does not exist; expected a "
                         "step-time table CSV (e.g. scenarios/hardware/*.csv)"),
                        (["--gpu-hour-cost", "2"],
                         "error: --gpu-hour-cost: each --hardware option names its own price; expected one or the "
                         "other")):
        monkeypatch.setattr(sys, "argv", [*base, *extra])
        with pytest.raises(SystemExit) as exc:
            main()
        assert exc.value.code == 2
        assert capsys.readouterr().err.strip() == line
    assert not (tmp_path / "o").exists()


@pytest.mark.browser
def test_the_report_section_draws_in_a_browser(tmp_path):
    """The comparison's page alone (no sweep, no single plan): its figures drawn by plotly, no script error."""
    from simulator.inputs.hardware import load_target_table
    from simulator.outputs.report import write_report
    from simulator.runs.hardware_choice import shown_scenario
    from tests.simulator.test_report_browser import render

    h200, b200 = HardwareOption("h200", H200_TABLE, 3.5, "H200"), HardwareOption("b200", B200_TABLE, 5.5, "B200")
    pairs = rank([pair_row(h200, entry("mtp-1", 3, 3, 9_000.0)), pair_row(h200, entry("dspark", 3, 2, 13_000.0)),
                  pair_row(b200, entry("mtp-1", 2, 1, 26_000.0)),
                  pair_row(b200, entry("dspark", 2, 8, 3_000.0, status=UNMET, why="at 8 decode GPUs: saturated"))])
    doc = {"target": {"tps_per_user": 200, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 8,
                      "rate_tolerance": 0.05},
           "traffic": {"kind": "poisson", "rate": 55.0}, "arrival_rate": 55.0, "seeds": [0], "baseline": "mtp-1",
           "quick": True, "pairs": pairs,
           "options": [{"name": o.name, "gpu": o.gpu, "table": str(o.table), "usd_per_gpu_hour": o.usd_per_gpu_hour,
                        "plan": f"hardware/{o.name}/plan.json", "prefill": {"replicas": 3, "met": True}}
                       for o in (h200, b200)]}
    doc["verdict"] = hardware_verdict(doc)
    scn = load_scenario(ROOT / "scenarios" / "peak.yaml")
    page = write_report(tmp_path / "report.html", shown_scenario(scn, [h200, b200]), None, None, None,
                        load_target_table(scn), hardware=doc)
    text = page.read_text()
    assert text.count('class="plotly-graph-div"') == 2 and "! b200 / dspark" not in text
    assert "b200 / dspark unmet: at 8 decode GPUs: saturated" in text
    dom = render(page, tmp_path)
    assert 'data-js-errors="' not in dom
    counts = re.findall(r'data-drawn="(\d+)"', dom)
    assert len(counts) == 2 and all(int(c) > 0 for c in counts), counts


@pytest.mark.parametrize("extra, message", [
    (["--per-segment"], "--hardware and --per-segment: a day plan runs on the scenario's hardware; "
                        "expected one or the other"),
    (["--probe-replicas", "1"], "--probe-replicas plans one fleet on the scenario's hardware; expected it "
                                "without --hardware and --per-segment"),
    (["--gpu-hour-cost", "2"], "--gpu-hour-cost: each --hardware option names its own price; expected one "
                               "or the other"),
])
def test_plan_modes_that_do_not_combine_are_refused_in_one_line(scenario_file, tmp_path, extra, message):
    from click.testing import CliRunner

    from simulator.cli import cli

    path = small_plan_scenario(scenario_file, systems=["mtp-1"])
    res = CliRunner().invoke(cli, ["plan", str(path), "--quick", "--out", str(tmp_path / "o"),
                                   "--hardware", f"h200={H200_TABLE}:3.5", *extra])
    # the command's entry point prints a UserError as one line "error: ...", exit 2 (test_config)
    assert isinstance(res.exception, UserError) and str(res.exception) == message, res.output
    assert not (tmp_path / "o" / ".runs").exists()  # refused before any run


def test_a_bound_ranks_after_the_forecasts_it_is_compared_with():
    """A roofline option's pairs come after every estimate's, however cheap they look (its counts are lower
    bounds); among bounds alone the ordinary order holds."""
    h200, b200 = HardwareOption("h200", H200_TABLE, 3.5, "H200"), HardwareOption("b200", B200_TABLE, 5.5, "B200")
    rows = [{**pair_row(h200, entry("dspark", 1, 1, 26_000.0)), "table_kind": "roofline"},   # $7.00: cheapest
            {**pair_row(b200, entry("dspark", 2, 1, 26_000.0)), "table_kind": "estimate"},   # $16.50
            {**pair_row(b200, entry("mtp-1", 2, 8, 3_000.0, status=UNMET)), "table_kind": "estimate"}]
    assert [(r["hardware"], r["system"]) for r in rank(rows)] == [("b200", "dspark"), ("b200", "mtp-1"),
                                                                   ("h200", "dspark")]
    # asked for (--rank-bounds-together): one ranking by cost, the bound's cheap pair first
    assert [(r["hardware"], r["system"]) for r in rank(rows, bounds_apart=False)] == [
        ("h200", "dspark"), ("b200", "dspark"), ("b200", "mtp-1")]
    bounds = [{**r, "table_kind": "roofline"} for r in rows]
    assert [(r["hardware"], r["system"]) for r in rank(bounds)] == [("h200", "dspark"), ("b200", "dspark"),
                                                                     ("b200", "mtp-1")]


def test_a_comparison_that_mixes_a_bound_with_estimates_says_so():
    from hw_profile.tables.sidecar import table_kind
    from simulator.outputs.verdicts import kinds_caveat

    assert [table_kind(m) for m in ({"kind": "analytic"}, {"kind": "estimate"}, {"kind": "calibrated-estimate"},
                                    {"kind": "smoothed", "smoothed": {"from_kind": "measured"}}, {})] == [
        "roofline", "estimate", "calibrated", "measured", "unknown"]
    doc = {"options": [{"name": "h200-roofline", "table_kind": "roofline"}, {"name": "h200-est", "table_kind": "estimate"},
                       {"name": "b300-est", "table_kind": "estimate"}]}
    assert kinds_caveat(doc) == (" h200-roofline is a speed bound (a roofline table: real steps are slower, so its "
                                 "GPU counts are lower bounds); not comparable with the estimate table(s) of the "
                                 "others; ranked after the others.")
    assert kinds_caveat({"options": [{"name": "a", "table_kind": "estimate"}]}) == ""
    # an estimate priced from a datasheet alone beside one on measured kernels: not an even comparison
    thin = {"options": [{"name": "mi300x", "table_kind": "estimate", "table_expected_error": {"inside_share": 0.0}},
                        {"name": "h200", "table_kind": "estimate", "table_expected_error": {"inside_share": 0.51}}]}
    assert kinds_caveat(thin) == (" The estimate of mi300x (0%) prices few of its points from measured kernels (the "
                                  "kernel roofline the rest), against h200 (51%): a roofline is too fast at low load, "
                                  "so that comparison favours it; measure or calibrate it (hw-profile calibrate "
                                  "--prior) before choosing it.")
    # every option as thin as the others: nothing to set apart
    even = {"options": [{**o, "table_expected_error": {"inside_share": 0.0}} for o in thin["options"]]}
    assert kinds_caveat(even) == ""
