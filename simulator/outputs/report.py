"""The planner's report: one self-contained HTML file (plotly embedded once, no CDN) that opens offline.

Sections: the headline table; the Pareto frontiers with SLA anchors and open-loop operating points (the paper's
Figure 7); throughput and mean verification budget against concurrency (Figure 8); tau per domain and system;
open-loop behaviour over time; the step-time curve used; energy per token where the table records power.
"""

from __future__ import annotations

import datetime
import html
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from atomic_files import atomic_write_text
from hw_profile.tables.step_table import StepTable
from simulator.inputs.config import LoadedScenario
from simulator.outputs.html_table import TABLE_CSS, table_html
from simulator.outputs.summary import format_headline, headline_table, matched_gain_column, matched_gain_tips

# 24 distinguishable colours (plotly's Dark24): few collisions among the library's system names
SYSTEM_PALETTE = ["#2E91E5", "#E15F99", "#1CA71C", "#FB0D0D", "#DA16FF", "#222A2A", "#B68100", "#750D86",
                  "#EB663B", "#511CFB", "#00A08B", "#FB00D1", "#FC0080", "#B2828D", "#6C7C32", "#778AAE",
                  "#862A16", "#A777F1", "#620042", "#1616A7", "#DA60CA", "#6C4516", "#0D2A63", "#AF0038"]
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
# Marks each figure once plotly has drawn it (and counts its traces), and records script errors, so that a
# headless browser can check the page rendered.
POST_SCRIPT = ("var d=document.getElementById('{plot_id}');"
               "d.setAttribute('data-drawn', String(d.querySelectorAll('g.trace').length));")
ERROR_HOOK = ("<script>window.__reportErrors=[];function __reportError(m){window.__reportErrors.push(String(m));"
              "document.documentElement.setAttribute('data-js-errors',String(window.__reportErrors.length));}"
              "window.addEventListener('error',function(e){__reportError(e.message);});"
              "window.addEventListener('unhandledrejection',function(e){__reportError(e.reason);});</script>")


# the systems of the scenario library, each with a colour of its own
LIBRARY_SYSTEMS = ("mtp-1", "static-3", "static-5", "threshold-0.7", "batch-table", "goodput-k", "dspark",
                   "dspark-async", "ar", "static-1", "static-2", "static-4", "static-7", "threshold-0.5",
                   "dflash-static-3", "eagle3-static-3")


def colors(systems: list[str]) -> dict[str, str]:
    """A colour per system from its name, so that a system keeps its colour across reports whatever the other
    systems (by position, adding or removing one repainted the rest): the library's systems have their own
    (``LIBRARY_SYSTEMS``), any other takes the colour its name's hash picks among the rest of
    ``SYSTEM_PALETTE``, the next free one when that is taken in this report."""
    out: dict[str, str] = {}
    used: set[int] = set()
    for s in systems:
        if s in LIBRARY_SYSTEMS:
            out[s] = SYSTEM_PALETTE[LIBRARY_SYSTEMS.index(s)]
            used.add(LIBRARY_SYSTEMS.index(s))
    first, rest = len(LIBRARY_SYSTEMS), len(SYSTEM_PALETTE) - len(LIBRARY_SYSTEMS)
    for s in systems:
        if s in out:
            continue
        h = zlib.crc32(s.encode()) % rest
        # the next free colour after the hash's, cyclically; when all are taken, the hash's own (shared)
        i = next((first + (h + k) % rest for k in range(rest) if first + (h + k) % rest not in used), first + h)
        used.add(i)
        out[s] = SYSTEM_PALETTE[i]
    return out


def frontier_figure(frontier: pd.DataFrame, runs: pd.DataFrame, anchors: list[float], col: dict[str, str]) -> go.Figure:
    fig = go.Figure()
    # one seed has no interval: no bars then (zero-length bars drew their caps as unexplained "+" marks)
    intervals = bool(frontier["tps_per_user_ci95"].notna().any() or frontier["throughput_per_gpu_ci95"].notna().any())
    for system, g in frontier.groupby("policy", sort=False):
        bars = ({"error_x": {"type": "data", "array": g["tps_per_user_ci95"].fillna(0)},
                 "error_y": {"type": "data", "array": g["throughput_per_gpu_ci95"].fillna(0)}} if intervals else {})
        fig.add_trace(go.Scatter(
            x=g["tps_per_user"], y=g["throughput_per_gpu"], mode="markers", name=f"{system} (load points)",
            legendgroup=system, showlegend=False, marker={"color": col[system], "size": 7, "opacity": 0.45}, **bars,
            customdata=g["concurrency"], hovertemplate="%{customdata} users<br>%{x:.1f} tok/s/user<br>%{y:,.0f} tok/s/GPU"))
        front = g[g["on_frontier"]].sort_values("tps_per_user")
        fig.add_trace(go.Scatter(x=front["tps_per_user"], y=front["throughput_per_gpu"], mode="lines+markers",
                                 name=system, legendgroup=system, line={"color": col[system], "width": 2.5},
                                 marker={"color": col[system], "size": 8}))
    # the faint markers' own legend entry (each system's colour is its line's); drawn off the axes
    fig.add_trace(go.Scatter(
        x=[None], y=[None], mode="markers",
        name="load point off the frontier" + (" (bars: 95% intervals)" if intervals else ""), marker={"color": "#888", "size": 7, "opacity": 0.45}, hoverinfo="skip"))
    opened = runs[runs["concurrency"].isna()]
    if len(opened):
        pts = opened.groupby("policy", sort=False)[["tps_per_user", "throughput_per_gpu"]].mean()
        fig.add_trace(go.Scatter(
            x=pts["tps_per_user"], y=pts["throughput_per_gpu"], mode="markers", name="open-loop operating point",
            marker={"symbol": "star", "size": 15, "color": [col[s] for s in pts.index], "line": {"width": 1, "color": "black"}},
            text=pts.index, hovertemplate="%{text} under the scenario's traffic<br>%{x:.1f} tok/s/user<br>%{y:,.0f} tok/s/GPU"))
    for i, a in enumerate(sorted(anchors)):  # each label on its own height, so close anchors never overlap
        fig.add_vline(x=a, line={"dash": "dash", "color": "#555"})
        fig.add_annotation(x=a, y=1.0 - 0.07 * i, xref="x", yref="paper", text=f"SLA {a:g} tok/s/user",
                           showarrow=False, xanchor="left", yanchor="top", xshift=4, bgcolor="rgba(255,255,255,0.8)")
    fig.update_layout(title="Throughput per GPU against tokens/s per user (Pareto frontiers, closed-loop sweep)",
                      xaxis_title="TPS per user (tok/s/user)", yaxis_title="throughput (tok/s/GPU)",
                      legend_title="system", height=520)
    return fig


def load_figure(frontier: pd.DataFrame, col: dict[str, str]) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Throughput against concurrency",
                                                        "Mean verification budget (1 + l) against concurrency"))
    for system, g in frontier.groupby("policy", sort=False):
        fig.add_trace(go.Scatter(x=g["concurrency"], y=g["throughput_per_gpu"], mode="lines+markers", name=system,
                                 legendgroup=system, line={"color": col[system]}), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["concurrency"], y=g["mean_verify_budget"], mode="lines+markers", name=system,
                                 legendgroup=system, showlegend=False, line={"color": col[system]}), row=1, col=2)
    fig.update_xaxes(title_text="concurrent requests", type="log")
    fig.update_yaxes(title_text="throughput (tok/s/GPU)", row=1, col=1)
    fig.update_yaxes(title_text="verified tokens per request-step", row=1, col=2)
    fig.update_layout(title="Load-adaptive throughput and verification budget", height=460, legend_title="system")
    return fig


def tau_figure(runs: pd.DataFrame, col: dict[str, str]) -> go.Figure | None:
    if "tau_by_mix" not in runs.columns:
        return None
    fig = go.Figure()
    for system, g in runs.groupby("policy", sort=False):
        per = pd.DataFrame(list(g["tau_by_mix"])).mean()
        fig.add_trace(go.Bar(x=list(per.index), y=per.to_numpy(), name=system, marker_color=col[system]))
    fig.update_layout(title="tau (emitted tokens per request-step) per workload domain, all load points averaged",
                      barmode="group", xaxis_title="domain / benchmark", yaxis_title="tau (tokens)",
                      legend_title="system", height=420)
    return fig


def open_loop_figure(runs: pd.DataFrame, col: dict[str, str], time_scale: float) -> go.Figure | None:
    opened = runs[runs["concurrency"].isna()]
    if opened.empty or "series" not in opened.columns:
        return None
    panels = [("arrivals_per_s", "Arrivals per second", "requests/s"),
              ("sla_attainment", "SLA attainment of finishing requests", "share of requests"),
              ("queued", "Waiting requests (queue)", "requests"),
              ("running", "Running requests", "requests"),
              ("verify_budget", "Mean verification budget (1 + l)", "tokens per request-step"),
              ("throughput_per_gpu", "Throughput", "tok/s/GPU")]
    fig = make_subplots(rows=3, cols=2, shared_xaxes=True, vertical_spacing=0.09,
                        subplot_titles=[p[1] for p in panels])
    hours = time_scale > 1
    for system, g in opened.groupby("policy", sort=False):
        s = g.iloc[0]["series"]  # the first seed's run
        t = np.array(s["time"], dtype=float) * (time_scale / 3600.0 if hours else 1.0)
        for i, (key, _, unit) in enumerate(panels):
            r, c = divmod(i, 2)
            fig.add_trace(go.Scatter(x=t, y=s[key], mode="lines", name=system, legendgroup=system,
                                     showlegend=i == 1, line={"color": col[system]}), row=r + 1, col=c + 1)
            fig.update_yaxes(title_text=unit, row=r + 1, col=c + 1)
    fig.update_yaxes(range=[0, 1], row=1, col=2)  # SLA attainment: a share, always on 0-1
    # counts and rates from zero: an axis fitted to the data started the queue at 0.5, a queue that looked never
    # empty
    for i, (key, _, _) in enumerate(panels):
        if key in ("arrivals_per_s", "queued", "running", "throughput_per_gpu"):
            fig.update_yaxes(rangemode="tozero", row=i // 2 + 1, col=i % 2 + 1)
    fig.update_xaxes(title_text="tide time (hours)" if hours else "simulated time (s)", row=3)
    fig.update_layout(title="Open-loop traffic over time (first seed)", height=780, legend_title="system")
    return fig


def step_time_figure(table: StepTable, kv_points: list[float]) -> go.Figure:
    grid = table.grid
    top = min(grid.b_axis[-1], 8192)
    b = np.unique(np.round(np.geomspace(1, top, 80)))
    title = f"Step-time table used: {html.escape(table.label())}"
    if grid.graphs is not None:  # each captured size and the next token: the stairs show as steps
        sizes = np.asarray(grid.graphs.sizes, dtype=float)
        b = np.unique(np.concatenate([b, sizes, sizes + 1]))
        b = b[b <= top]
        title += (f" (a staircase: {len(sizes)} captured CUDA-graph sizes in {grid.graphs.counts} up to "
                  f"{grid.graphs.largest}, eager past it)")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Target step time T(B, K)", "Steps per second SPS(B)"))
    for i, k in enumerate(kv_points):
        ms = grid.curve(k)(b)
        name = f"K = {k:,.0f} KV tokens"
        fig.add_trace(go.Scatter(x=b, y=ms, mode="lines", name=name, legendgroup=name, line={"color": PALETTE[i]}), row=1, col=1)
        fig.add_trace(go.Scatter(x=b, y=1000.0 / ms, mode="lines", name=name, legendgroup=name, showlegend=False,
                                 line={"color": PALETTE[i]}), row=1, col=2)
    fig.update_xaxes(title_text="tokens in the forward (B)", type="log")
    fig.update_yaxes(title_text="milliseconds", row=1, col=1)
    fig.update_yaxes(title_text="steps per second", row=1, col=2)
    fig.update_layout(title=title, height=440, legend_title="KV read")
    return fig


def energy_figure(frontier_runs: pd.DataFrame, col: dict[str, str]) -> go.Figure | None:
    if "joules_per_token" not in frontier_runs.columns or frontier_runs["joules_per_token"].isna().all():
        return None
    closed = frontier_runs[frontier_runs["concurrency"].notna()]
    if closed.empty or closed["joules_per_token"].isna().all():  # open loop only: nothing to draw
        return None
    fig = go.Figure()
    for system, g in closed.groupby("policy", sort=False):
        m = g.groupby("concurrency")["joules_per_token"].mean()
        fig.add_trace(go.Scatter(x=m.index, y=m.to_numpy(), mode="lines+markers", name=system, line={"color": col[system]}))
    fig.update_layout(title="Energy per output token (from the table's power model)", xaxis_title="concurrent requests",
                      yaxis_title="joules per token", xaxis_type="log", height=420, legend_title="system")
    return fig


def headline_html(summary: dict) -> str:
    df = format_headline(headline_table(summary))
    col = matched_gain_column(summary.get("baseline"))
    tips = {(i, col): t for i, t in enumerate(matched_gain_tips(summary)) if t is not None} if col in df.columns else {}
    return table_html(df, tips)


def write_report(path: Path, scn: LoadedScenario, runs: pd.DataFrame | None, frontier: pd.DataFrame | None,
                 summary: dict | None, table: StepTable, capacity: dict | None = None,
                 day_plan: dict | None = None, hardware: dict | None = None) -> Path:
    """The whole report; ``runs`` None (no sweep stored yet) gives the plan's own section alone: the capacity
    section, the day plan's (``simulate plan --per-segment``) or the comparison of hardware options
    (``simulate plan --hardware``)."""
    m = scn.model
    if runs is not None:
        systems = list(dict.fromkeys(runs["policy"]))
    elif capacity is not None or day_plan is not None:
        systems = list((capacity if capacity is not None else day_plan)["systems"])
    else:
        systems = list(dict.fromkeys(r["system"] for r in hardware["pairs"]))
    col = colors(systems)
    figures: list[tuple[str, go.Figure | str | None]] = []
    if day_plan is not None:
        from simulator.outputs.day_report import day_figure, day_html

        figures += [("Day plan", day_html(day_plan)), ("", day_figure(day_plan, col))]
    if hardware is not None:
        from simulator.outputs.hardware_report import cost_figure, hardware_html, spend_figure

        figures += [("Which hardware", hardware_html(hardware)), ("", cost_figure(hardware)),
                    ("", spend_figure(hardware))]
    if capacity is not None:
        from simulator.outputs.capacity_report import capacity_html, gpus_figure, search_figure

        figures += [("Capacity", capacity_html(capacity)), ("", gpus_figure(capacity, col)),
                    ("", search_figure(capacity, col))]
    if runs is None:
        return _page(path, scn, figures, None, None, table)
    if not frontier.empty:
        figures.append(("Frontiers", frontier_figure(frontier, runs, list(m.sla.tps_targets), col)))
        figures.append(("Load", load_figure(frontier, col)))
    figures.append(("Domains", tau_figure(runs, col)))
    if m.traffic is not None:
        figures.append(("Traffic", open_loop_figure(runs, col, m.traffic.time_scale if m.traffic.segments else 1.0)))
    kv = runs["mean_kv_tokens"].to_numpy(dtype=float)
    kv_points = sorted({0.0, float(np.round(np.nanmedian(kv), -3)), float(np.round(np.nanmax(kv), -3))})
    figures.append(("Hardware", step_time_figure(table, kv_points)))
    figures.append(("Energy", energy_figure(runs, col)))
    return _page(path, scn, figures, summary, runs, table)


def seeds_phrase(seeds: list[int]) -> str:
    """How many seeds each load point ran, when a sweep is shown (a capacity section alone has none)."""
    if not seeds:
        return ""
    return f"{len(seeds)} seed(s) per point{' (95% intervals shown)' if len(seeds) > 1 else ''}; "


def override_changes(scn: LoadedScenario) -> list[str]:
    """Each ``--set`` with what it changed (the file's value, the value used), so a reader of the scenario's
    own description (written for the file as it is) sees what differs."""
    import yaml

    from simulator.inputs.config import parse_override

    try:
        doc = yaml.safe_load(Path(scn.path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        doc = {}
    out = []
    for text in scn.overrides:
        keys, value, append = parse_override(text)
        node = doc
        for k in keys:
            if isinstance(node, dict):
                node = node.get(k)
            elif isinstance(node, list) and k.lstrip("-").isdigit() and -len(node) <= int(k) < len(node):
                node = node[int(k)]
            else:
                node = None
        field = ".".join(keys)
        if append:
            out.append(f"--set {text} ({field}: {value!r} appended)")
        else:
            out.append(f"--set {text} ({field}: {'unset' if node is None else repr(node)} in the file, {value!r} here)")
    return out


def _page(path: Path, scn: LoadedScenario, figures: list, summary: dict | None, runs: pd.DataFrame | None,
          table: StepTable) -> Path:
    m = scn.model
    parts = []
    first = True
    for title, fig in figures:
        if fig is None:
            continue
        parts.append("<section>" + (f"<h2>{html.escape(title)}</h2>" if title else ""))
        if isinstance(fig, str):
            parts.append(fig)
        else:
            parts.append(fig.to_html(full_html=False, include_plotlyjs=first, post_script=POST_SCRIPT,
                                     config={"displaylogo": False, "responsive": True}))
            first = False
        parts.append("</section>")
    seeds = summary["seeds"] if summary else []
    baseline = summary["baseline"] if summary else m.sla.baseline
    notes = []
    if summary and summary["quick"]:
        notes.append("<p class='warn'>Quick runs (--quick): short simulations for smoke use; do not plan on these numbers.</p>")
    if scn.overrides:
        notes.append("<p class='warn'>Run with overrides of the scenario file (its description above is the "
                     "file's): " + html.escape("; ".join(override_changes(scn))) + ".</p>")
    if summary:
        from simulator.outputs.summary import flag_lines

        flags = flag_lines(summary)
        if flags:
            notes.append("<div class='warn'><p>Flagged runs (marked ! in the table): do not plan on these numbers "
                         "without reading why.</p><ul>" + "".join(f"<li>{html.escape(f[2:])}</li>" for f in flags)
                         + "</ul></div>")
    if summary is None:
        notes.append("<p class='meta'>The sweep's sections (headline, frontiers, traffic) appear once "
                     f"<code>simulate {html.escape(str(scn.path))}</code> has run into this folder.</p>")
    headline = "" if summary is None else f"""<h2>Headline</h2>
<p class="meta">Left: each system under the scenario's open-loop traffic. Right: throughput each sustains where its
frontier crosses an SLA anchor ("-" where it never reaches the anchor; "&gt;=X" where even its largest swept load
stays faster than the anchor, so it sustains at least X), the gain over {html.escape(str(baseline))}, and the
median per-user speed-up at matched throughput over the range of throughput both frontiers cover (point at it
for its range).</p>
{headline_html(summary)}"""
    name = scn.name + (f" with {len(scn.overrides)} override{'s' if len(scn.overrides) > 1 else ''}"
                       if scn.overrides else "")
    body = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dspark-sim: {html.escape(name)}</title>
{ERROR_HOOK}
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1320px; color: #222; }}
{TABLE_CSS}.meta {{ color: #555; font-size: 0.9em; }} .warn {{ color: #b00; }}
</style></head><body>
<h1>dspark-sim report: {html.escape(name)}</h1>
<p>{html.escape(m.description)}</p>
<p class="meta">Hardware table {html.escape(m.hardware.table)} ({html.escape(table.label())}); {m.hardware.replicas} replica(s) x {m.hardware.gpus_per_replica} GPU(s);
acceptance {html.escape(m.acceptance.source)} {html.escape(m.acceptance.profile if m.acceptance.source == 'profile' else (m.acceptance.trace or ''))};
SLA anchors {', '.join(f'{a:g}' for a in m.sla.tps_targets)} tok/s/user (attainment against {m.sla.tps_targets[0]:g}); baseline {html.escape(str(baseline))};
{seeds_phrase(seeds)}generated {datetime.datetime.now().isoformat(timespec='seconds')}.</p>
{''.join(notes)}
{headline}
{''.join(parts)}
</body></html>
"""
    return atomic_write_text(path, body)

