"""What the plan tables and the report say, read as a planner reads them: headroom as the interval the verdict's
tie rule reads (so a tie and "less headroom" never contradict the figures beside them), headings that name only
their rows' statuses, tables in boxes with tooltips where a cell has more to say."""

from __future__ import annotations

import math
import re

import pandas as pd

from simulator.outputs.capacity_report import notes_html, report_plan, terminal_plan, unmet_lines
from simulator.outputs.html_table import LONG_CELL, table_html
from simulator.outputs.summary import HEADROOM_RULE, headroom_text
from simulator.outputs.verdicts import MET, UNMET, UNRESOLVED_STATUS, tied_at_best, verdict

NAN = float("nan")


def entry(name: str, gpus: int, lo: float, hi: float, status: str = MET, gpus_lo: int | None = None) -> dict:
    return {"system": name, "status": status, "gpus": gpus, "decode_gpus": gpus, "prefill_gpus": 0,
            "replicas": gpus, "prefill_replicas": None, "max_rate_per_replica": 10.0, "headroom": lo,
            "attainment": 0.995, "ttft_p99": 0.2, "tps_per_user_p10": 320.0, "throughput_per_gpu": 4000.0,
            "throughput_per_deployed_gpu": 4000.0, "cost_per_mtok": 0.07, "why_unmet": None if status == MET else
            f"at {gpus} decode GPUs: saturated", "seeds": 3, "attainment_lo": 0.99, "attainment_hi": 1.0,
            "headroom_lo": lo, "headroom_hi": hi, "gpus_lo": gpus if gpus_lo is None else gpus_lo, "search": []}


def plan_doc(*rows: dict) -> dict:
    return {"target": {"tps_per_user": 300, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 64,
                       "gpu_hour_cost_usd": 1.0, "rate_tolerance": 0.05},
            "traffic": {"kind": "poisson", "rate": 55.0}, "arrival_rate": 55.0, "baseline": None, "prefill": None,
            "gpus_per_replica": 1, "table": {"kind": "measured"}, "systems": {r["system"]: r for r in rows}}


def test_headroom_reads_as_the_interval_the_tie_rule_reads():
    assert headroom_text(0.24, 1.0, 0.05) == "+24..+100%"
    assert headroom_text(0.16, NAN, 0.05) == "+16..+22%"  # no clear failure above: the search's precision
    assert headroom_text(NAN, -0.5, 0.05) == "< -50%"  # unmet even at half the traffic
    assert headroom_text(0.30, 0.302, 0.05) == "+30%" and headroom_text(None, None, 0.05) == "-"


def test_a_tie_at_a_lower_bound_and_less_headroom_at_a_higher_one_agree_with_the_intervals_shown():
    """The case that read as a contradiction: static-5 at "+24%" tied with the best while goodput-k at "+30%"
    had "less headroom". As intervals the rule is visible: static-5's reaches the best's bound, goodput-k's
    ends below it."""
    doc = plan_doc(entry("dspark", 5, 0.41, 0.48), entry("static-5", 5, 0.24, 1.0), entry("goodput-k", 5, 0.30, 0.35))
    tied = [e["system"] for e in tied_at_best(list(doc["systems"].values()), 0.05)]
    assert tied == ["dspark", "static-5"]
    text = verdict(doc)
    assert "dspark and static-5 tie for the fewest GPUs" in text
    assert ("1 other system needs as many, with less headroom (its interval ends at or below the best's +41%: "
            "goodput-k +30..+35%)") in text
    table = terminal_plan(doc)
    rows = {line.split()[0]: line for line in table.splitlines()[1:4]}
    assert "+24..+100%" in rows["static-5"] and "+30..+35%" in rows["goodput-k"] and "+41..+48%" in rows["dspark"]
    assert " ".join(table.split()).count(" ".join(HEADROOM_RULE.split())) == 1  # the rule beside the figures
    # each interval's top against the best's bound says who ties, as the verdict does
    best = max(e["headroom"] for e in doc["systems"].values())
    for e in doc["systems"].values():
        top = float(headroom_text(e["headroom"], e["headroom_hi"], 0.05).split("..")[-1].rstrip("%")) / 100
        assert (e["system"] in tied) == (top > best or math.isclose(e["headroom"], best))


def test_headings_name_only_the_statuses_of_their_rows():
    doc = plan_doc(entry("threshold-0.7", 6, 0.1, 0.2, gpus_lo=5), entry("mtp-1", 64, NAN, -0.5, status=UNMET))
    page = notes_html(doc)
    red, rest = page.split("</ul>", 1)
    assert "Why unmet:" in red and "mtp-1" in red and "threshold-0.7" not in red  # its row says met
    assert "threshold-0.7 5-6" in rest and "class='meta'" in rest
    assert report_plan(doc).set_index("system").loc["threshold-0.7", "GPUs"] == "5-6"
    doc["systems"]["mtp-1"]["status"] = UNRESOLVED_STATUS
    assert "Why unresolved:" in notes_html(doc)
    doc["systems"]["threshold-0.7"]["gpus_lo"] = 6
    assert notes_html(doc).count("<li>") == 1 and len(unmet_lines(doc)) == 1
    doc["systems"]["mtp-1"].update(entry("mtp-1", 4, 0.1, 0.2))
    assert notes_html(doc) == ""  # all met and resolved: no heading at all


def test_tables_sit_in_their_boxes_with_long_cells_wrapping_and_tooltips_escaped():
    df = pd.DataFrame({"system": ["dspark"], "table": ["/a/very/long/path/to/a/step-time/table.csv"],
                       "gain": ["+38%"]})
    page = table_html(df, {(0, "gain"): "from -34% to +106% over 770-24,536 tok/s/GPU <'&'>"})
    assert page.startswith("<div class='table-box'><table class='headline'>") and page.endswith("</table></div>")
    cells = re.findall(r"<td([^>]*)>([^<]*)</td>", page)
    assert cells[0] == ("", "dspark") and cells[1][0] == " class='long'" and len(df["table"][0]) > LONG_CELL
    assert cells[2] == (" title='from -34% to +106% over 770-24,536 tok/s/GPU &lt;&#x27;&amp;&#x27;&gt;'", "+38%")


def test_the_frontier_chart_draws_interval_bars_only_where_there_are_intervals_and_names_every_marker():
    from simulator.outputs.report import colors, frontier_figure

    def frontier(ci: float) -> pd.DataFrame:
        return pd.DataFrame({"policy": ["a", "a", "a"], "concurrency": [2, 16, 64],
                             "tps_per_user": [300.0, 200.0, 210.0], "throughput_per_gpu": [1e3, 5e3, 4e3],
                             "tps_per_user_ci95": [ci] * 3, "throughput_per_gpu_ci95": [ci] * 3,
                             "on_frontier": [True, True, False]})

    runs = pd.DataFrame({"policy": ["a"], "concurrency": [2.0], "tps_per_user": [300.0],
                         "throughput_per_gpu": [1e3]})
    for ci, bars in ((NAN, False), (5.0, True)):  # one seed has no interval: no (zero-length) bars
        fig = frontier_figure(frontier(ci), runs, [250.0], colors(["a"]))
        points = next(t for t in fig.data if t.name == "a (load points)")
        assert (points.error_x.array is not None) == bars and points.showlegend is False
        legend = [t.name for t in fig.data if t.showlegend is not False]
        assert legend == ["a", "load point off the frontier" + (" (bars: 95% intervals)" if bars else "")]
