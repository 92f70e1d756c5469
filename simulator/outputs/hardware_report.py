"""How a hardware comparison reads (``simulate plan --hardware``'s hardware.json): the ranked (hardware, system)
table for a terminal, the lines that say why a pair is unmet, the tables' error line, and the report's section
(the verdict, the error line, the options and their prices, the ranked table, the cost per million output tokens
per pair and the spend per hour per pool, both charts scaled to the pairs that met the SLA)."""

from __future__ import annotations

import html
import math
import textwrap

import pandas as pd
import plotly.graph_objects as go

from simulator.outputs.capacity_report import why_unmet_html
from simulator.outputs.html_table import table_html
from simulator.outputs.summary import HEADROOM_RULE, TERMINAL_WIDTH, fit_width, headroom_text
from simulator.outputs.table_error import error_between, typical_error
from simulator.outputs.verdicts import MET
from simulator.runs.hardware_choice import hardware_table

# one colour per hardware option (the systems keep theirs in the capacity sections of each option's report)
HARDWARE_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f"]
HEADERS = {"rank": "rank", "hardware": "hardware", "gpu": "GPU", "usd_per_gpu_hour": "$/GPU-hour",
           "system": "system", "status": "status", "gpus": "GPUs", "prefill_gpus": "prefill GPUs",
           "decode_gpus": "decode GPUs", "prefill_usd_per_hour": "prefill $/hour",
           "decode_usd_per_hour": "decode $/hour", "usd_per_hour": "$/hour",
           "output_tokens_per_s": "output tok/s", "cost_per_mtok": "$/M output tok", "headroom": "headroom",
           "attainment": "SLA attainment", "ttft_p99": "TTFT p99 (s)", "table_kind": "table",
           "vs_best": "vs best"}


# what the "vs best" column says (versus_text), for the terminal's legend and the report's text
VERSUS_RULE = ("vs best: the share of a met pair's spend per hour that the best pair saves; inside +/-E%: within "
               "the two tables' typical step-time error E, so not told apart")


def error_text(error: float | None, none: str = "-") -> str:
    return none if error is None else f"+/-{error:.0%}"


def error_line(doc: dict) -> str:
    """The comparison's error line: each option's table kind and typical step-time error, and what that makes of
    a difference in spend (``table_error.error_between``); options of one table share its error."""
    parts, errors = [], []
    for o in doc["options"]:
        error = typical_error(o.get("table_expected_error"))
        errors.append(error)
        kind = o.get("table_kind", "unknown")
        parts.append(f"{o['name']} {kind} {error_text(error, '(none stated)')}")
    if any(e is not None for e in errors):
        rule = ("pairs on different tables whose spend is closer than the larger of their two errors are not told "
                "apart; pairs on one table share its error")
    else:
        rule = "no table states one, so spends are compared as they are"
    return f"Tables' typical step-time error: {', '.join(parts)}; {rule}."


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def versus_text(doc: dict, r: dict) -> str:
    """A pair's spend against the best pair's, for its "vs best" cell: the share of it the best saves, and
    whether that is inside the two tables' typical step-time error (``table_error``); "-" for the best itself and
    for pairs not met (hardware.json documents from before these columns: "-" too)."""
    gap = r.get("apart_from_best")
    if _missing(gap):
        return "-"
    if gap <= 0:
        return "same spend"
    if r.get("told_apart_from_best") is False:  # a gap above none is inside an error (versus_best)
        options = {o["name"]: o for o in doc["options"]}
        best = next(p for p in doc["pairs"] if p["status"] == MET)
        error = error_between(options.get(best["hardware"], {}), options.get(r["hardware"], {}))
        return f"{gap:.0%}, inside {error_text(error)}"
    return f"{gap:.0%}"


def format_pairs(doc: dict) -> pd.DataFrame:
    # why_unmet, a sentence: under the table (unmet_pair_lines); headroom_hi: within the headroom's interval; the
    # comparison with the best pair: one "vs best" cell (versus_text), the tables' errors: error_line
    df = hardware_table(doc).drop(columns=["why_unmet", "headroom_hi", "table_error", "apart_from_best",
                                           "told_apart_from_best"])
    df.insert(df.columns.get_loc("usd_per_hour") + 1, "vs_best", [versus_text(doc, r) for r in doc["pairs"]])
    his = list(hardware_table(doc)["headroom_hi"])
    tol = doc["target"].get("rate_tolerance", 0.05)

    def fmt(col: str, v, i: int):
        if col == "headroom":
            return headroom_text(v, his[i], tol)
        if _missing(v):
            return "-"
        if col == "attainment":
            return f"{v:.1%}"
        if col in ("ttft_p99", "cost_per_mtok"):
            return f"{v:.3f}"
        if col.startswith("usd") or col.endswith("usd_per_hour"):
            return f"{v:,.2f}"
        if col == "status":
            return str(v).replace("_at_max_gpus", "")
        if col == "vs_best":
            return v
        if isinstance(v, float):
            return f"{v:,.0f}"
        return str(v)

    return pd.DataFrame({HEADERS[c]: [fmt(c, v, i) for i, v in enumerate(df[c])] for c in df.columns})


def terminal_hardware(doc: dict) -> str:
    """The ranked pairs for a terminal, at most 120 columns: GPUs and spend as prefill + decode; the GPU type,
    output rate and TTFT left to hardware.csv and the report when they do not fit; under them the legend and the
    tables' error line."""
    full = format_pairs(doc)
    rows = hardware_table(doc)
    df = pd.DataFrame({"#": full["rank"], "hardware": full["hardware"], "table": full["table"],
                       "system": full["system"], "status": full["status"], "$/GPU-h": full["$/GPU-hour"],
                       "GPUs": full["GPUs"]})
    if rows["prefill_gpus"].any():
        df["P+D"] = [f"{p}+{d}" for p, d in zip(full["prefill GPUs"], full["decode GPUs"], strict=True)]
        df["$/h P+D"] = [f"{p}+{d}" for p, d in zip(full["prefill $/hour"], full["decode $/hour"], strict=True)]
    for col, name in (("$/hour", "$/h"), ("vs best", "vs best"), ("$/M output tok", "$/Mtok"),
                      ("headroom", "headroom"), ("SLA attainment", "SLA att."), ("GPU", "GPU"),
                      ("TTFT p99 (s)", "TTFT p99")):
        df[name] = full[col]
    text, dropped = fit_width(df)
    legend = HEADROOM_RULE.replace("at equal GPUs, systems", "at equal spend, pairs") + "; " + VERSUS_RULE
    if dropped:
        legend += f"; in hardware.csv and the report: {', '.join(dropped)}"
    return "\n".join([text, textwrap.fill(f"({legend})", TERMINAL_WIDTH, break_on_hyphens=False),
                      textwrap.fill(error_line(doc), TERMINAL_WIDTH, break_on_hyphens=False)])


def report_pairs(doc: dict) -> pd.DataFrame:
    """The ranked pairs as the report shows them, narrow enough for the page: each table's kind stays in the
    options table above it (one per option, not one per pair); with a prefill pool, GPUs and spend as totals with
    their prefill + decode split beside them, one column each."""
    full = format_pairs(doc).drop(columns=[HEADERS["table_kind"]])
    if not hardware_table(doc)["prefill_gpus"].any():
        return full.drop(columns=["prefill GPUs", "decode GPUs", "prefill $/hour", "decode $/hour"])
    full["GPUs"] = [f"{t} ({p}+{d})" for t, p, d in zip(full["GPUs"], full["prefill GPUs"], full["decode GPUs"],
                                                          strict=True)]
    full["$/hour"] = [f"{t} ({p}+{d})" for t, p, d in zip(full["$/hour"], full["prefill $/hour"],
                                                           full["decode $/hour"], strict=True)]
    return full.drop(columns=["prefill GPUs", "decode GPUs", "prefill $/hour", "decode $/hour"]).rename(
        columns={"GPUs": "GPUs (prefill+decode)", "$/hour": "$/hour (prefill+decode)"})


def unmet_pair_lines(doc: dict) -> list[str]:
    """One line per pair that is not met (and per option whose prefill pool is unmet), saying why."""
    lines = []
    for o in doc["options"]:
        pre = o.get("prefill")
        if pre and pre.get("met") is False:
            lines.append(f"! {o['name']}: prefill pool: no size up to {pre['replicas']} replica(s) meets the TTFT "
                         "limit" + (f" ({pre['why_unmet']})" if pre.get("why_unmet") else ""))
    for r in doc["pairs"]:
        if r["status"] != MET:
            lines.append(f"! {r['hardware']} / {r['system']} {r['status'].replace('_at_max_gpus', '')}: "
                         f"{r.get('why_unmet') or 'the SLA fails at the largest size tried'}")
    return lines


def _label(r: dict) -> str:
    return f"{r['hardware']}: {r['system']}"


# the value axis of a chart reaches this far above the largest figure of a met pair (room for its label)
SCALE_ROOM = 1.25


def met_scale(rows: list[dict], value) -> float | None:
    """The top of a chart's value axis: ``SCALE_ROOM`` above the largest ``value(row)`` of a met pair. A pair
    never met shows its figure at the largest size tried, often many times any met one's, and would otherwise set
    the scale and squash the comparison that matters; None where no pair met (the axis then fits them all)."""
    met = [value(r) for r in rows if r["status"] == MET and not _missing(value(r)) and value(r) > 0]
    return max(met) * SCALE_ROOM if met else None


def cost_figure(doc: dict) -> go.Figure:
    """Cost per million output tokens per (hardware, system): systems along x, one bar per hardware option;
    hatched where the pair does not meet the SLA (its cost is that of the largest size tried). The axis is scaled
    to the met pairs (``met_scale``): a bar beyond it stops at its top, labelled with its figure "off scale"."""
    fig = go.Figure()
    systems = list(dict.fromkeys(r["system"] for r in doc["pairs"]))
    top = met_scale(doc["pairs"], lambda r: r["cost_per_mtok"])
    for i, o in enumerate(doc["options"]):
        by_system = {r["system"]: r for r in doc["pairs"] if r["hardware"] == o["name"]}
        rows = [by_system.get(s) for s in systems]
        costs = [None if r is None or _missing(r["cost_per_mtok"]) else r["cost_per_mtok"] for r in rows]
        cut = [top is not None and c is not None and c > top for c in costs]
        fig.add_trace(go.Bar(
            x=systems, y=[top if off else c for c, off in zip(costs, cut, strict=True)],
            name=f"{o['name']} ({o['gpu']}, ${o['usd_per_gpu_hour']:g}/GPU-hour)",
            marker={"color": HARDWARE_PALETTE[i % len(HARDWARE_PALETTE)],
                    "pattern": {"shape": ["" if r and r["status"] == MET else "/" for r in rows]}},
            text=[(f"#{r['rank']} off scale: ${c:.3f}" if off else f"#{r['rank']}") if r else ""
                  for r, c, off in zip(rows, costs, cut, strict=True)],
            textposition=["inside" if off else "outside" for off in cut],
            customdata=[[r["gpus"], r["usd_per_hour"], r["status"], c] if r else [None, None, None, None]
                        for r, c in zip(rows, costs, strict=True)],
            hovertemplate=(o["name"] + " %{x}: $%{customdata[3]:.3f} per M output tokens, %{customdata[0]} GPUs, "
                           "$%{customdata[1]:,.2f}/hour (%{customdata[2]})<extra></extra>")))
    fig.update_layout(title="Cost per million output tokens at the SLA, per (hardware, system) (#: rank; hatched: "
                            "not met within the GPU limit)",
                      barmode="group", xaxis_title="system",
                      yaxis_title="USD per million output tokens" + (" (scaled to the met pairs)" if top else ""),
                      height=460, legend_title="hardware (assumed price)")
    if top is not None:
        fig.update_yaxes(range=[0, top])
    return fig


def spend_figure(doc: dict) -> go.Figure:
    """Spend per hour at the SLA per pair, prefill and decode pools stacked, in rank order; the axis scaled to the
    met pairs (``met_scale``), a pair beyond it cut at its top and labelled with its spend "off scale"."""
    rows = doc["pairs"]
    labels = [_label(r) for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[r["decode_usd_per_hour"] for r in rows], name="decode pool",
                         marker={"color": "#1f77b4", "pattern": {"shape": ["" if r["status"] == MET else "/"
                                                                           for r in rows]}},
                         customdata=[r["decode_gpus"] for r in rows],
                         hovertemplate="%{x}: decode $%{y:,.2f}/hour (%{customdata} GPUs)<extra></extra>"))
    if any(r["prefill_gpus"] for r in rows):
        fig.add_trace(go.Bar(x=labels, y=[r["prefill_usd_per_hour"] for r in rows], name="prefill pool",
                             marker={"color": "#bbbbbb"}, customdata=[r["prefill_gpus"] for r in rows],
                             hovertemplate="%{x}: prefill $%{y:,.2f}/hour (%{customdata} GPUs)<extra></extra>"))
    top = met_scale(rows, lambda r: r["usd_per_hour"])
    fig.update_layout(title="Spend per hour at the SLA, by pool (in rank order; hatched: not met)",
                      barmode="stack", xaxis_title="hardware: system",
                      yaxis_title="USD per hour" + (" (scaled to the met pairs)" if top else ""), height=460,
                      legend_title="pool")
    if top is not None:
        fig.update_yaxes(range=[0, top])
        for label, r in zip(labels, rows, strict=True):
            if r["usd_per_hour"] > top:
                fig.add_annotation(x=label, y=top, yanchor="top", showarrow=False, textangle=-90,
                                   text=f"off scale: ${r['usd_per_hour']:,.2f}/h", font={"color": "#b00"},
                                   bgcolor="white")
    return fig


def hardware_html(doc: dict) -> str:
    """The section's text and tables (the report adds the figures, embedding plotly once)."""
    t = doc["target"]
    options = pd.DataFrame([{
        "hardware": o["name"], "GPU": o["gpu"], "table": o["table"],
        "$/GPU-hour (assumed)": f"{o['usd_per_gpu_hour']:.2f}", "table kind": o.get("table_kind", "unknown"),
        "typical error": error_text(typical_error(o.get("table_expected_error"))),
        "prefill replicas": "-" if not o.get("prefill") else (
            f"{o['prefill']['replicas']}" + ("" if o["prefill"]["met"] else " (unmet)")),
        "plan": o["plan"]} for o in doc["options"]])
    notes = []
    if doc.get("quick"):
        notes.append("<p class='warn'>Planned on quick runs (--quick): do not plan on these numbers.</p>")
    notes.append(why_unmet_html(unmet_pair_lines(doc), [r["status"] for r in doc["pairs"] if r["status"] != MET]
                                + ["unmet" for o in doc["options"] if (o.get("prefill") or {}).get("met") is False]))
    table = table_html(report_pairs(doc))
    return f"""<p><strong>{html.escape(doc['verdict'])}</strong></p>
<p>{html.escape(error_line(doc))}</p>
<p class="meta">The capacity plan (at least {t['attainment']:.0%} of requests at or above {t['tps_per_user']:g}
tok/s/user, TTFT p99 within {t['ttft_p99_s']:g} s, at most {t['max_gpus']} GPUs) once per hardware option, each
on its own step-time table at its own price per GPU-hour (the prices are assumptions given on the command line,
not quotes). Pairs are ranked met first, by spend per hour at the SLA (every met deployment serves the same
traffic, so this orders the cost per million output tokens; equal spend by headroom); the spend is split into
the prefill and decode pools. {html.escape(HEADROOM_RULE[0].upper() + HEADROOM_RULE[1:].replace("at equal GPUs, systems", "at equal spend, pairs"))}. {html.escape(VERSUS_RULE[0].upper() + VERSUS_RULE[1:])}. Each option's own plan and report are in its folder.</p>
{table_html(options)}
{''.join(notes)}
{table}"""
