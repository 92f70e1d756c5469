"""Outputs that never mislead about their tables: a hardware comparison's spends closer than the tables' typical
step-time error read "not told apart" (verdict, hardware.csv, terminal, report), its charts are scaled to the
pairs that met the SLA, and the commands that price with a table name its kind first."""

from __future__ import annotations

import html

import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.cli import cli, table_lines
from simulator.inputs.config import load_scenario
from simulator.outputs.hardware_report import (
    cost_figure,
    error_line,
    hardware_html,
    spend_figure,
    terminal_hardware,
)
from simulator.outputs.table_error import apart, error_between, table_line, typical_error
from simulator.outputs.verdicts import hardware_verdict
from simulator.runs.hardware_choice import (
    HARDWARE_COLUMNS,
    HardwareOption,
    hardware_table,
    pair_row,
    rank,
    versus_best,
)
from simulator.runs.plan import UNMET
from tests.conftest import H200_TABLE, ROOT
from tests.simulator.test_hardware_choice import B200_TABLE, entry

ESTIMATE = {"kind": "estimate", "step_median": 0.21, "summary": "an estimate: median error 21%"}
H200_ESTIMATE = ROOT / "scenarios" / "hardware" / "h200-qwen3-8b-bf16-vllm.csv"


def comparison(b200_gpus: int, h200_gpus: int, h200_error: dict | None = ESTIMATE, h200_table=H200_TABLE,
               unmet: dict | None = None) -> dict:
    """A two-option hardware.json: dspark on b200 at $6.00 a GPU-hour against dspark on h200 at $2.00, each a
    one-pool deployment (decode only), so the spends are 6 x and 2 x the GPU counts."""
    b200 = HardwareOption("b200", B200_TABLE, 6.0, "B200")
    h200 = HardwareOption("h200", h200_table, 2.0, "H200")
    options = [{"name": o.name, "gpu": o.gpu, "table": str(o.table), "usd_per_gpu_hour": o.usd_per_gpu_hour,
                "table_kind": (err or {}).get("kind", "unknown"), "table_expected_error": err,
                "plan": f"hardware/{o.name}/plan.json", "prefill": None}
               for o, err in ((b200, ESTIMATE), (h200, h200_error))]
    rows = [{**pair_row(b200, entry("dspark", 0, b200_gpus, 9_000.0)), "table_kind": "estimate"},
            {**pair_row(h200, entry("dspark", 0, h200_gpus, 3_000.0)), "table_kind": options[1]["table_kind"]}]
    if unmet is not None:
        rows.append({**pair_row(h200, unmet), "table_kind": options[1]["table_kind"]})
    doc = {"target": {"tps_per_user": 200, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 64,
                      "rate_tolerance": 0.05},
           "traffic": {"kind": "poisson", "rate": 38.0}, "arrival_rate": 38.0, "seeds": [0], "baseline": "dspark",
           "options": options, "pairs": versus_best(rank(rows), options)}
    doc["verdict"] = hardware_verdict(doc)
    return doc


def test_a_saving_inside_the_tables_error_is_not_told_apart():
    # 3 B200s at $6 = $18/hour against 10 H200s at $2 = $20/hour: 1 - 18/20 = 10% apart, inside 21%
    close = comparison(3, 10)
    assert apart(18.0, 20.0) == pytest.approx(0.10)
    assert "the cheapest is dspark on b200: 3 B200 GPUs, $18.00/hour" in close["verdict"]
    assert ("the best on h200 (dspark: 10 H200 GPUs, $20.00/hour, $0.185 per million output tokens) is not told "
            "apart (10% apart, inside the tables' +/-21% error)") in close["verdict"]
    assert "less" not in close["verdict"]
    # 3 B200s against 15 H200s, $30/hour: 40% apart, beyond the error: a saving
    far = comparison(3, 15)
    assert "40% less ($12.00/hour for the same traffic) than the best on h200" in far["verdict"]
    assert "not told apart" not in far["verdict"]
    # hardware.csv says the same per pair
    for doc, gap, told in ((close, 0.10, False), (far, 0.40, True)):
        table = hardware_table(doc)
        assert list(table.columns) == HARDWARE_COLUMNS
        best, other = table.iloc[0], table.iloc[1]
        assert best["hardware"] == "b200" and best["table_error"] == pytest.approx(0.21)
        assert pd.isna(best["apart_from_best"]) and pd.isna(best["told_apart_from_best"])
        assert other["apart_from_best"] == pytest.approx(gap) and other["told_apart_from_best"] is told


def test_the_error_is_the_larger_of_two_tables_and_none_within_one_table():
    est, wider = {"table": "a.csv", "table_expected_error": ESTIMATE}, {
        "table": "b.csv", "table_expected_error": {**ESTIMATE, "step_median": 0.3}}
    measured = {"table": "c.csv", "table_expected_error": {"kind": "measured", "summary": "measured on H200"}}
    assert error_between(est, wider) == pytest.approx(0.3)
    assert error_between(est, measured) == pytest.approx(0.21)  # the one that states it
    assert error_between(measured, {**measured, "table": "d.csv"}) is None
    assert error_between(est, {**est, "usd_per_gpu_hour": 9.0}) is None  # one table at two prices: shared
    assert typical_error(None) is None and typical_error({"step_median": 0.21}) == pytest.approx(0.21)
    # the same table at two prices 10% apart: the price is exact, so a saving
    same = comparison(3, 10, h200_table=B200_TABLE)
    assert "10% less ($2.00/hour for the same traffic)" in same["verdict"]
    assert hardware_table(same).iloc[1]["told_apart_from_best"] is True
    # tables that state no error (measured both): compared as they are
    measured_both = comparison(3, 10, h200_error={"kind": "measured", "summary": "measured"})
    measured_both["options"][0]["table_expected_error"] = {"kind": "measured", "summary": "measured"}
    assert "no table states one, so spends are compared as they are" in error_line(measured_both)


def test_the_terminal_and_the_report_carry_the_error_line_and_the_verdict():
    doc = comparison(3, 10, h200_error={"kind": "measured", "summary": "measured on H200"})
    line = error_line(doc)
    assert line == ("Tables' typical step-time error: b200 estimate +/-21%, h200 measured (none stated); pairs on "
                    "different tables whose spend is closer than the larger of their two errors are not told apart; "
                    "pairs on one table share its error.")
    text = terminal_hardware(doc)
    assert "10%, inside +/-21%" in text and "not told" in text and "apart; pairs on one table share" in text
    assert max(len(row) for row in text.splitlines()) <= 120
    page = hardware_html(doc)
    assert html.escape(line) in page and "is not told apart (10% apart, inside the tables&#x27; +/-21% error)" in page
    assert "<td>+/-21%</td>" in page  # the options table's typical error per option


def test_charts_are_scaled_to_the_pairs_that_met_the_sla():
    """An h200 pair never met at 67 GPUs ($134.00/hour; 134 / (67 x 223.8 x 3600) x 10^6 = $2.482 per M tokens)
    beside met ones at $18 and $20 an hour: the axes end a quarter above the met pairs, the unmet bar is cut at
    the top and labelled with its figure."""
    doc = comparison(3, 10, unmet=entry("mtp-1", 0, 67, 223.8, status=UNMET, why="saturated"))
    unmet = doc["pairs"][-1]
    assert unmet["usd_per_hour"] == pytest.approx(134.0) and unmet["cost_per_mtok"] == pytest.approx(2.48237, 1e-5)
    spend = spend_figure(doc)
    assert tuple(spend.layout.yaxis.range) == pytest.approx((0, 20.0 * 1.25))
    assert [a.text for a in spend.layout.annotations] == ["off scale: $134.00/h"]
    assert spend.layout.yaxis.title.text == "USD per hour (scaled to the met pairs)"
    cost = cost_figure(doc)
    met_costs = [r["cost_per_mtok"] for r in doc["pairs"][:2]]
    assert tuple(cost.layout.yaxis.range) == pytest.approx((0, max(met_costs) * 1.25))
    h200 = next(t for t in cost.data if t.name.startswith("h200"))
    assert list(h200.x) == ["dspark", "mtp-1"] and h200.y[1] == pytest.approx(max(met_costs) * 1.25)
    assert h200.text[1] == "#3 off scale: $2.482" and h200.customdata[1][3] == pytest.approx(unmet["cost_per_mtok"])
    # nothing met: nothing to scale to, the axis fits every bar
    none_met = {**doc, "pairs": [{**r, "status": UNMET} for r in doc["pairs"]]}
    assert spend_figure(none_met).layout.yaxis.range is None and cost_figure(none_met).layout.yaxis.range is None


def test_the_table_line_names_the_kind_and_the_error(scenario_file):
    assert table_line("t.csv", "estimate", ESTIMATE) == (
        "step-time table: t.csv, estimate: an estimate (measured kernels or a kernel roofline, plus the engine's "
        "costs); typical step-time error +/-21%")
    assert table_line("t.csv", "roofline", {"kind": "roofline", "summary": "a bound"}) == (
        "step-time table: t.csv, roofline: a roofline speed bound, not a forecast")
    scn = load_scenario(scenario_file(hardware={"table": str(H200_ESTIMATE)}))
    assert table_lines(scn) == [f"step-time table: {H200_ESTIMATE}, estimate: an estimate (measured kernels or a "
                                "kernel roofline, plus the engine's costs); typical step-time error +/-21%"]


def test_bench_run_and_plan_name_the_table_kind_first(scenario_file, tmp_path):
    import textwrap

    from tests.simulator.test_bench import RANDOM, write

    # folded at the terminal's 120 columns where the checkout's path makes it longer, the path never split
    bound = textwrap.fill(f"step-time table: {H200_TABLE}, roofline: a roofline speed bound, not a forecast", 120,
                          subsequent_indent="  ", break_long_words=False, break_on_hyphens=False) + "\n"
    profile = write(tmp_path, RANDOM)
    res = CliRunner().invoke(cli, ["bench", str(profile), "--table", str(H200_TABLE), "--drain-s", "20",
                                   "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(bound)
    path = scenario_file(hardware={"table": str(H200_TABLE)})
    # a run and a plan that stop at their first check of the systems (an unknown policy): the table line came
    # first, on stdout, and the mistake is still one line on stderr
    res = CliRunner().invoke(cli, [str(path), "--quick", "--out", str(tmp_path / "r"), "--set", "systems=[nosuch]"])
    assert res.exit_code != 0 and res.stdout.startswith(bound), res.output
    assert "unknown policy 'nosuch'" in str(res.exception) and res.stderr == ""
    res = CliRunner().invoke(cli, ["plan", str(path), "--quick", "--out", str(tmp_path / "p"), "--replicates", "1",
                                   "--max-gpus", "1", "--set", "systems=[nosuch]"])
    assert res.stdout.startswith(bound), res.output


def test_the_plans_gpu_chart_is_scaled_to_the_systems_that_met():
    """A plan whose mtp-1 never met at --max-gpus 64 beside systems met at 4 and 6 GPUs: the axis ends a quarter
    above 6, mtp-1's label sits under the top and says it is off scale; without it the old scale (15% above the
    largest) holds."""
    from simulator.outputs.capacity_report import gpus_figure

    def system(name, gpus, status="met"):
        return {"system": name, "status": status, "gpus": gpus, "decode_gpus": gpus, "prefill_gpus": 0}

    doc = {"systems": {"dspark": system("dspark", 4), "static-3": system("static-3", 6),
                       "mtp-1": system("mtp-1", 64, UNMET)}, "baseline": "dspark"}
    fig = gpus_figure(doc, {})
    assert tuple(fig.layout.yaxis.range) == pytest.approx((0, 6 * 1.25))
    labels = next(t for t in fig.data if t.type == "scatter")
    assert list(labels.text) == ["4", "6", "64: unmet (off scale)"]
    assert list(labels.y) == pytest.approx([4, 6, 7.5]) and labels.textposition[2] == "bottom center"
    assert fig.layout.yaxis.title.text == "GPUs (scaled to the met systems)"
    doc["systems"]["mtp-1"] = system("mtp-1", 6, UNMET)
    assert tuple(gpus_figure(doc, {}).layout.yaxis.range) == pytest.approx((0, 6 * 1.15))
