"""How a hardware comparison reads (``simulate plan --hardware``'s hardware.json): the ranked (hardware, system)
table for a terminal, the lines that say why a pair is unmet, and the report's section (the verdict, the
options and their prices, the ranked table, the cost per million output tokens per pair and the spend per hour
per pool)."""

from __future__ import annotations

import html
import math
import textwrap

import pandas as pd
import plotly.graph_objects as go

from simulator.outputs.capacity_report import why_unmet_html
from simulator.outputs.html_table import table_html
from simulator.outputs.summary import HEADROOM_RULE, TERMINAL_WIDTH, fit_width, headroom_text
from simulator.outputs.verdicts import MET
from simulator.runs.hardware_choice import hardware_table

# one colour per hardware option (the systems keep theirs in the capacity sections of each option's report)
HARDWARE_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f"]
HEADERS = {"rank": "rank", "hardware": "hardware", "gpu": "GPU", "usd_per_gpu_hour": "$/GPU-hour",
           "system": "system", "status": "status", "gpus": "GPUs", "prefill_gpus": "prefill GPUs",
           "decode_gpus": "decode GPUs", "prefill_usd_per_hour": "prefill $/hour",
           "decode_usd_per_hour": "decode $/hour", "usd_per_hour": "$/hour",
           "output_tokens_per_s": "output tok/s", "cost_per_mtok": "$/M output tok", "headroom": "headroom",
           "attainment": "SLA attainment", "ttft_p99": "TTFT p99 (s)", "table_kind": "table"}


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def format_pairs(doc: dict) -> pd.DataFrame:
    # why_unmet, a sentence: under the table (unmet_pair_lines); headroom_hi: within the headroom's interval
    df = hardware_table(doc).drop(columns=["why_unmet", "headroom_hi"])
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
        if isinstance(v, float):
            return f"{v:,.0f}"
        return str(v)

    return pd.DataFrame({HEADERS[c]: [fmt(c, v, i) for i, v in enumerate(df[c])] for c in df.columns})


def terminal_hardware(doc: dict) -> str:
    """The ranked pairs for a terminal, at most 120 columns: GPUs and spend as prefill + decode; the GPU type,
    output rate and TTFT left to hardware.csv and the report when they do not fit."""
    full = format_pairs(doc)
    rows = hardware_table(doc)
    df = pd.DataFrame({"#": full["rank"], "hardware": full["hardware"], "table": full["table"],
                       "system": full["system"], "status": full["status"], "$/GPU-h": full["$/GPU-hour"],
                       "GPUs": full["GPUs"]})
    if rows["prefill_gpus"].any():
        df["P+D"] = [f"{p}+{d}" for p, d in zip(full["prefill GPUs"], full["decode GPUs"], strict=True)]
        df["$/h P+D"] = [f"{p}+{d}" for p, d in zip(full["prefill $/hour"], full["decode $/hour"], strict=True)]
    for col, name in (("$/hour", "$/h"), ("$/M output tok", "$/Mtok"), ("headroom", "headroom"),
                      ("SLA attainment", "SLA att."), ("GPU", "GPU"), ("TTFT p99 (s)", "TTFT p99")):
        df[name] = full[col]
    text, dropped = fit_width(df)
    legend = HEADROOM_RULE.replace("at equal GPUs, systems", "at equal spend, pairs")
    if dropped:
        legend += f"; in hardware.csv and the report: {', '.join(dropped)}"
    return text + "\n" + textwrap.fill(f"({legend})", TERMINAL_WIDTH, break_on_hyphens=False)


def report_pairs(doc: dict) -> pd.DataFrame:
    """The ranked pairs as the report shows them, narrow enough for the page: with a prefill pool, GPUs and
    spend as totals with their prefill + decode split beside them, one column each."""
    full = format_pairs(doc)
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


def cost_figure(doc: dict) -> go.Figure:
    """Cost per million output tokens per (hardware, system): systems along x, one bar per hardware option;
    hatched where the pair does not meet the SLA (its cost is that of the largest size tried)."""
    fig = go.Figure()
    systems = list(dict.fromkeys(r["system"] for r in doc["pairs"]))
    for i, o in enumerate(doc["options"]):
        by_system = {r["system"]: r for r in doc["pairs"] if r["hardware"] == o["name"]}
        rows = [by_system.get(s) for s in systems]
        fig.add_trace(go.Bar(
            x=systems, y=[r["cost_per_mtok"] if r else None for r in rows],
            name=f"{o['name']} ({o['gpu']}, ${o['usd_per_gpu_hour']:g}/GPU-hour)",
            marker={"color": HARDWARE_PALETTE[i % len(HARDWARE_PALETTE)],
                    "pattern": {"shape": ["" if r and r["status"] == MET else "/" for r in rows]}},
            text=[f"#{r['rank']}" if r else "" for r in rows], textposition="outside",
            customdata=[[r["gpus"], r["usd_per_hour"], r["status"]] if r else [None, None, None] for r in rows],
            hovertemplate=(o["name"] + " %{x}: $%{y:.3f} per M output tokens, %{customdata[0]} GPUs, "
                           "$%{customdata[1]:,.2f}/hour (%{customdata[2]})<extra></extra>")))
    fig.update_layout(title="Cost per million output tokens at the SLA, per (hardware, system) (#: rank; hatched: "
                            "not met within the GPU limit)",
                      barmode="group", xaxis_title="system", yaxis_title="USD per million output tokens",
                      height=460, legend_title="hardware (assumed price)")
    return fig


def spend_figure(doc: dict) -> go.Figure:
    """Spend per hour at the SLA per pair, prefill and decode pools stacked, in rank order."""
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
    fig.update_layout(title="Spend per hour at the SLA, by pool (in rank order; hatched: not met)",
                      barmode="stack", xaxis_title="hardware: system", yaxis_title="USD per hour", height=460,
                      legend_title="pool")
    return fig


def hardware_html(doc: dict) -> str:
    """The section's text and tables (the report adds the figures, embedding plotly once)."""
    t = doc["target"]
    options = pd.DataFrame([{
        "hardware": o["name"], "GPU": o["gpu"], "table": o["table"],
        "$/GPU-hour (assumed)": f"{o['usd_per_gpu_hour']:.2f}",
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
<p class="meta">The capacity plan (at least {t['attainment']:.0%} of requests at or above {t['tps_per_user']:g}
tok/s/user, TTFT p99 within {t['ttft_p99_s']:g} s, at most {t['max_gpus']} GPUs) once per hardware option, each
on its own step-time table at its own price per GPU-hour (the prices are assumptions given on the command line,
not quotes). Pairs are ranked met first, by spend per hour at the SLA (every met deployment serves the same
traffic, so this orders the cost per million output tokens; equal spend by headroom); the spend is split into
the prefill and decode pools. {html.escape(HEADROOM_RULE[0].upper() + HEADROOM_RULE[1:].replace("at equal GPUs, systems", "at equal spend, pairs"))}. Each option's own plan and report are in its folder.</p>
{table_html(options)}
{''.join(notes)}
{table}"""
