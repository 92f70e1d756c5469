"""How a day plan reads (``simulate plan --per-segment``'s day_plan.json): the terminal summary (GPU-hours and
USD per day per system, the saving over the baseline) and the report's section (the verdict, that table and
the GPUs each system needs against the time of day, as step lines)."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from simulator.outputs.html_table import table_html
from simulator.outputs.summary import fit_width
from simulator.outputs.verdicts import MET_AT_HIGHER_RATE, engine_lines

NOTE_STATUS = {MET_AT_HIGHER_RATE: "sized at the next higher rate: every smaller count failed at this one"}


def day_summary(doc: dict) -> pd.DataFrame:
    """One row per system: GPU-hours and USD per day, the saving over the baseline, the fleet's range."""
    base = doc.get("baseline")
    rows = []
    for name, e in doc["systems"].items():
        lower = "" if not e["unmet_segments"] else ">="  # unmet somewhere: it needs more than this
        row = {"system": name, "GPU-h/day": f"{lower}{e['gpu_hours_per_day']:,.0f}",
               "USD/day": f"{lower}{e['usd_per_day']:,.0f}"}
        if base in doc["systems"]:
            share = e.get("saving_share")
            row[f"saved vs {base}"] = ("-" if name == base else
                                       f"{e['saving_gpu_hours_per_day']:+,.0f} GPU-h ({share:+.0%})"
                                       if share is not None else "-")
            row["USD saved"] = "-" if name == base else f"{e['saving_usd_per_day']:+,.0f}"
        row["GPUs min-peak"] = f"{e['fewest_gpus']}-{e['peak_gpus']}"
        row["peak-sized GPU-h/day"] = f"{e['static_gpu_hours_per_day']:,.0f}"
        row["unmet segments"] = len(e["unmet_segments"])
        rows.append(row)
    return pd.DataFrame(rows)


def terminal_day(doc: dict) -> str:
    """The day summary for a terminal, at most 120 columns; the per-segment plan is in day_plan.csv."""
    text, dropped = fit_width(day_summary(doc))
    t = doc["target"]
    notes = [f"(USD at ${t['gpu_hour_cost_usd']:g}/GPU-hour; per segment in day_plan.csv"
             + (f"; not shown here: {', '.join(dropped)}" if dropped else "") + ")"]
    if abs(doc["days_per_span"] - 1) > 1e-9:
        notes.append(f"(the traffic spans {doc['span_s'] / 3600:g} h: per day is that span repeated "
                     f"{1 / doc['days_per_span']:.3g} times)")
    return text + "\n" + "\n".join(notes)


def unmet_day_lines(doc: dict, show: int = 3) -> list[str]:
    """One line per system unmet in some segment: how many, and why in the first ``show`` (day_plan.json has
    them all)."""
    lines = []
    for name, e in doc["systems"].items():
        if e["unmet_segments"]:
            why = e["why_unmet"][:show] + ([f"{len(e['why_unmet']) - show} more"] if len(e["why_unmet"]) > show else [])
            lines.append(f"! {name}: SLA unmet in {len(e['unmet_segments'])} segment(s) ({'; '.join(why)})")
    return lines


def day_figure(doc: dict, col: dict[str, str]) -> go.Figure:
    """GPUs needed against the time of day per system, as step lines (each segment's fleet holds until the
    next), in hours from the start of the day (a trace: of the recording)."""
    rows = pd.DataFrame(doc["rows"])
    fig = go.Figure()
    groups = list(rows.groupby("system", sort=False))
    for i, (system, g) in enumerate(groups):
        g = g.sort_values("start")
        x = [*(g["start"] / 3600), (g["start"].iloc[-1] + g["duration"].iloc[-1]) / 3600]
        # systems often need the same count: a small offset each keeps coinciding lines visible (hover: exact)
        dy = (i - (len(groups) - 1) / 2) * 0.04
        y = [n + dy for n in (*g["gpus"], g["gpus"].iloc[-1])]
        text = [f"{s} ({r:,.1f} req/s): {n} GPUs ({st})" for s, r, n, st in
                zip(g["segment"], g["rate"], g["gpus"], g["status"], strict=True)]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line={"shape": "hv", "color": col.get(system)},
                                 name=system, text=[*text, text[-1]],
                                 hovertemplate="%{text}<extra>" + html.escape(system) + "</extra>"))
    seg = pd.DataFrame(doc["segments"])
    fig.add_trace(go.Scatter(x=[*(seg["start"] / 3600), (seg["start"].iloc[-1] + seg["duration"].iloc[-1]) / 3600],
                             y=[*seg["rate"], seg["rate"].iloc[-1]], mode="lines", yaxis="y2", name="requests/s",
                             line={"shape": "hv", "dash": "dot", "color": "#999"},
                             hovertemplate="%{y:,.1f} requests/s<extra>traffic</extra>"))
    fig.update_layout(title="GPUs needed at the SLA through the day (prefill + decode; lines offset slightly where "
                            "they coincide; dotted: the traffic)",
                      xaxis_title="time of day (hours)", yaxis_title="GPUs", yaxis_rangemode="tozero",
                      yaxis2={"title": "requests/s", "overlaying": "y", "side": "right", "rangemode": "tozero",
                              "showgrid": False},
                      xaxis={"dtick": 2 if doc["span_s"] > 6 * 3600 else None},
                      height=500, legend={"title": "system", "orientation": "h", "y": -0.2})
    return fig


def day_html(doc: dict) -> str:
    """The section's text and table (the figure is added by the report, which embeds plotly once)."""
    t = doc["target"]
    notes = []
    if doc.get("quick"):
        notes.append("<p class='warn'>Planned on quick runs (--quick): do not plan on these numbers.</p>")
    unmet = unmet_day_lines(doc)
    if unmet:
        notes.append("<ul class='warn'>" + "".join(f"<li>{html.escape(u[2:])}</li>" for u in unmet) + "</ul>")
    table = table_html(day_summary(doc))
    span = ("a day" if abs(doc["days_per_span"] - 1) < 1e-9
            else f"a day (the traffic's {doc['span_s'] / 3600:g} h span repeated)")
    lines = engine_lines(doc)
    engine = (f"<p>{html.escape(lines[0])}</p><ul>" + "".join(f"<li>{html.escape(u.strip())}</li>" for u in lines[1:])
              + "</ul>") if lines else ""
    return f"""<p><strong>{html.escape(doc['verdict'])}</strong></p>
{engine}
<p class="meta">Each segment of the traffic planned as stationary Poisson traffic at its mean rate, on
{doc['segment_run_s']:g}-second runs, {len(doc['seeds'])} seed(s) each: the fewest GPUs at which at least
{t['attainment']:.0%} of requests reach {t['tps_per_user']:g} tok/s/user with TTFT p99 within {t['ttft_p99_s']:g} s
(the fleet an autoscaler would run in that segment). GPU-hours over {span}: GPUs x each segment's length in the
scenario's real time; USD at ${t['gpu_hour_cost_usd']:g} per GPU-hour. Not modelled: the autoscaler's lag and the
transitions between segments. Peak-sized: the peak's fleet kept all day.</p>
{''.join(notes)}
{table}"""
