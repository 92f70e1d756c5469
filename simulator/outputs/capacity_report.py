"""How a capacity plan reads (``simulate plan``'s plan.json): the plan table for a terminal and the report's
capacity section (the verdict, the plan table, the GPUs each system needs, prefill and decode stacked, and the
search's SLA attainment against decode GPUs), and the lines that say why a system is unmet."""

from __future__ import annotations

import html
import math
import textwrap

import pandas as pd
import plotly.graph_objects as go

from simulator.outputs.html_table import table_html
from simulator.outputs.summary import HEADROOM_RULE, TERMINAL_WIDTH, fit_width, fold, headroom_text
from simulator.outputs.verdicts import MET, UNRESOLVED_STATUS, engine_lines
from simulator.runs.plan import plan_table

HEADERS = {"system": "system", "status": "status", "gpus": "GPUs", "decode_gpus": "decode GPUs",
           "prefill_gpus": "prefill GPUs", "replicas": "replicas", "prefill_replicas": "prefill replicas",
           "max_rate_per_replica": "max req/s per replica", "headroom": "headroom",
           "attainment": "SLA attainment", "ttft_p99": "TTFT p99 (s)", "tps_per_user_p10": "TPS p10 (tok/s/user)",
           "throughput_per_gpu": "tok/s/decode GPU", "throughput_per_deployed_gpu": "tok/s/GPU (all)",
           "cost_per_mtok": "$/M output tok", "seeds": "seeds", "table_kind": "table"}
# shown within another column: the headroom and attainment as intervals, the GPUs as a range where unresolved;
# the table's expected error is one sentence for the whole plan, in its verdict and plan.csv, not a column
WITHIN = ("attainment_lo", "attainment_hi", "headroom_lo", "headroom_hi", "gpus_lo", "table_expected_error")


def unmet_lines(doc: dict) -> list[str]:
    """One line per unmet system (and an unmet prefill pool) saying why, then one per met system whose count
    is not resolved, for the terminal and the report."""
    lines = []
    pre = doc.get("prefill")
    if pre and pre.get("met") is False:
        lines.append(f"! prefill pool: no size up to {pre['replicas']} replica(s) meets the TTFT limit"
                     + (f" ({pre['why_unmet']})" if pre.get("why_unmet") else ""))
    for name, e in doc["systems"].items():
        if e["status"] == UNRESOLVED_STATUS:
            lines.append(f"! {name} unresolved: {e.get('why_unmet')}")
        elif e["status"] != MET:
            lines.append(f"! {name} unmet: {e.get('why_unmet') or 'the SLA fails at the largest size tried'}")
    return lines + range_lines(doc)


def binds_line(doc: dict) -> list[str]:
    """What limits each met system first as its traffic grows past the plan's (the knee its size is set by:
    per-user speed, TTFT p99, throughput, the KV pool), one line for all ([] when no met system has it)."""
    named = [f"{name} {e['binds']}" for name, e in doc["systems"].items() if e["status"] == MET and e.get("binds")]
    if not named:
        return []
    return fold(f"first limit as traffic grows (plan.csv binds, binds_why): {'; '.join(named)}")


def range_lines(doc: dict) -> list[str]:
    """One line for the met systems whose GPU count the seeds cannot pin down (a range in the table), each with
    its range ('' when none): one cause, one line."""
    ranged = {name: e for name, e in doc["systems"].items()
              if e["status"] == MET and e.get("gpus_lo") is not None and e["gpus_lo"] < e["gpus"]}
    if not ranged:
        return []
    seeds = max(e.get("seeds") or 1 for e in ranged.values())
    which = ", ".join(f"{name} {e['gpus_lo']}-{e['gpus']}" for name, e in ranged.items())
    return [f"! GPUs unresolvable at {seeds} seeds (attainment near the target at the smaller counts; --replicates "
            f"more to resolve): {which}"]


def why_unmet_html(lines: list[str], statuses: list[str] | None = None) -> str:
    """The ``!`` lines of what is not met, under a heading naming what they are ('' when none): "Why unmet",
    "Why unresolved" or both, from the statuses of the rows they explain."""
    if not lines:
        return ""
    kinds = [k for k in ("unmet", "unresolved") if any(str(st).startswith(k) for st in statuses or ["unmet"])]
    heading = f"Why {' or '.join(kinds or ['not met'])}:"
    return (f"<p class='warn'>{heading}</p><ul class='warn'>"
            + "".join(f"<li>{html.escape(u[2:])}</li>" for u in lines) + "</ul>")


def notes_html(doc: dict) -> str:
    """The report's notes on a plan's rows: why each unmet or unresolved system is (red, under a heading that
    names only those rows' statuses), then the met systems whose count is a range (not red: they meet), then what
    limits each met system first as its traffic grows."""
    ranges = range_lines(doc)
    short = [u for u in unmet_lines(doc) if u not in ranges]
    statuses = [e["status"] for e in doc["systems"].values() if e["status"] != MET]
    if doc.get("prefill") and doc["prefill"].get("met") is False:
        statuses.append("unmet")
    out = why_unmet_html(short, statuses)
    if ranges:
        out += ("<p class='meta'>Met, at a count the seeds cannot pin down:</p><ul class='meta'>"
                + "".join(f"<li>{html.escape(u[2:])}</li>" for u in ranges) + "</ul>")
    binds = [(name, e) for name, e in doc["systems"].items() if e["status"] == MET and e.get("binds")]
    if binds:
        out += ("<p class='meta'>What limits each met system first as its traffic grows:</p><ul class='meta'>"
                + "".join(f"<li>{html.escape(name)}: {html.escape(e['binds'])} ({html.escape(e['binds_why'] or '')})"
                          "</li>" for name, e in binds) + "</ul>")
    return out


def format_plan(doc: dict) -> pd.DataFrame:
    """The plan table as text: plan.csv's columns, with the headroom and the attainment as their intervals and
    the GPUs as a range where the seeds leave one open (the columns those come from are in plan.csv)."""
    # why_unmet: a sentence, printed under the table (unmet_lines); engine_pick: the engine line names it; binds:
    # under the table too (binds_line)
    df = plan_table(doc).drop(columns=["why_unmet", "engine_pick", "binds", "binds_why"])
    if doc.get("prefill") is None:
        df = df.drop(columns=["decode_gpus", "prefill_gpus", "prefill_replicas"])
    tol = doc["target"].get("rate_tolerance", 0.05)
    cap = doc["target"]["max_gpus"]

    def fmt(col: str, v, r: dict):
        if col == "headroom":
            return headroom_text(r["headroom_lo"], r["headroom_hi"], tol)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        if col == "gpus" and v > cap:  # what it needs (a fleet probe's count, or both pools together), not a size run
            return f"{v:.0f} > {cap}"
        if col == "gpus" and not _missing(r["gpus_lo"]) and r["gpus_lo"] < v:
            return f"{r['gpus_lo']:.0f}-{v:.0f}"
        if col == "attainment":
            lo, hi = r["attainment_lo"], r["attainment_hi"]
            # a fleet plan's interval is its probe's prediction, not this figure's (plan.csv has both)
            plain = _missing(lo) or _missing(hi) or r["seeds"] <= 1 or "fleet" in doc
            return f"{v:.1%}" if plain else f"{v:.1%} ({lo:.1%}-{hi:.1%})"
        if col in ("ttft_p99", "cost_per_mtok"):
            return f"{v:.3f}"
        if col == "max_rate_per_replica":
            return f"{v:.1f}"
        if col == "status":
            return str(v).replace("_at_max_gpus", "")
        if isinstance(v, float):
            return f"{v:,.0f}"
        return str(v)

    records = df.to_dict("records")
    return pd.DataFrame({HEADERS[c]: [fmt(c, r[c], r) for r in records] for c in df.columns if c not in WITHIN})


def report_plan(doc: dict) -> pd.DataFrame:
    """The plan table as the report shows it, narrow enough for the page: the replica counts left out where they
    equal the GPU counts (one GPU per replica, said above the table)."""
    df = format_plan(doc)
    pre = doc.get("prefill")
    if doc["gpus_per_replica"] == 1:
        df = df.drop(columns=["replicas"])
    if pre is not None and pre["gpus_per_replica"] == 1:
        df = df.drop(columns=["prefill replicas"])
    return df


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def terminal_plan(doc: dict) -> str:
    """The plan table for a terminal, at most 120 columns: GPUs as prefill + decode, the replica counts and
    TPS p10 left to plan.csv and the report; under it the tie rule the verdict reads the headroom by."""
    full = format_plan(doc)
    df = pd.DataFrame({"system": full["system"], "status": full["status"], "GPUs": full["GPUs"]})
    if doc.get("prefill") is not None:
        df["P+D"] = [f"{p}+{d}" for p, d in zip(full["prefill GPUs"], full["decode GPUs"], strict=True)]
    df["req/s/replica"] = full["max req/s per replica"]
    for col in ("headroom", "SLA attainment", "TTFT p99 (s)", "tok/s/GPU (all)", "$/M output tok"):
        df[col] = full[col]
    df["SLA attainment"] = df["SLA attainment"].str.split(" (", regex=False).str[0]  # its interval: in the report
    text, dropped = fit_width(df)
    legend = HEADROOM_RULE + "; a GPU range: unresolvable at these seeds"
    cap = doc["target"]["max_gpus"]
    if any(e["gpus"] > cap for e in doc["systems"].values()):
        legend += f"; N > {cap}: it needs N GPUs, above --max-gpus {cap}, so unmet"
    if dropped:
        legend += f"; in plan.csv and the report: {', '.join(dropped)}"
    return text + "\n" + textwrap.fill(f"({legend})", TERMINAL_WIDTH, break_on_hyphens=False)


def gpus_figure(doc: dict, col: dict[str, str]) -> go.Figure:
    """GPUs per system, prefill and decode stacked. The axis is scaled to the systems that met the SLA: one that
    never met shows the largest size tried (often --max-gpus, many times any met count), which would squash the
    comparison; its bar stops at the top, labelled with its count "off scale"."""
    systems = list(doc["systems"])
    rows = [doc["systems"][s] for s in systems]
    met = [r["gpus"] for r in rows if r["status"] == MET]
    every = [r["gpus"] for r in rows] + [1]
    top = max(every) * 1.15
    if met and max(every) > max(met) * 1.15:
        top = max(met) * 1.25  # room under the top for an off-scale bar's label
    fig = go.Figure()
    fig.add_trace(go.Bar(x=systems, y=[r["decode_gpus"] for r in rows], name="decode GPUs",
                         marker={"color": [col.get(s, "#1f77b4") for s in systems],
                                 "pattern": {"shape": ["" if r["status"] == MET else "/" for r in rows]}},
                         hovertemplate="%{x}: %{y} decode GPUs<extra></extra>"))
    if any(r["prefill_gpus"] for r in rows):
        fig.add_trace(go.Bar(x=systems, y=[r["prefill_gpus"] for r in rows], name="prefill GPUs",
                             marker={"color": "#bbbbbb"}, hovertemplate="%{x}: %{y} prefill GPUs<extra></extra>"))
    off = [r["gpus"] > top for r in rows]
    fig.add_trace(go.Scatter(
        x=systems, y=[top if o else r["gpus"] for r, o in zip(rows, off, strict=True)], mode="text",
        showlegend=False, textposition=["bottom center" if o else "top center" for o in off],
        text=[(f"{r['gpus']}" if r["status"] == MET else f"{r['gpus']}: {r['status'].split('_')[0]}")
              + (" (off scale)" if o else "") for r, o in zip(rows, off, strict=True)],
        hoverinfo="skip"))
    base = doc["systems"].get(doc.get("baseline") or "")
    if base is not None and base["status"] == MET:
        fig.add_hline(y=base["gpus"], line={"dash": "dash", "color": "#555"},
                      annotation_text=f"{html.escape(base['system'])}: {base['gpus']} GPUs",
                      annotation_position="top right")
    fig.update_layout(title="GPUs needed at the SLA (hatched: not met, or not resolved, at the largest size tried)",
                      barmode="stack", xaxis_title="system",
                      yaxis_title="GPUs" + (" (scaled to the met systems)" if any(off) else ""), yaxis_range=[0, top],
                      height=440, legend_title="pool")
    return fig


def search_figure(doc: dict, col: dict[str, str]) -> go.Figure:
    t = doc["target"]
    gpr = doc["gpus_per_replica"]
    fig = go.Figure()
    for system, e in doc["systems"].items():
        pts = sorted({(tr["replicas"], tr["attainment"]) for tr in e["search"]
                      if tr["phase"] == "decode" and tr["attainment"] is not None})
        if not pts:
            continue
        fig.add_trace(go.Scatter(x=[p[0] * gpr for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                 name=system, line={"color": col.get(system)},
                                 hovertemplate=system + ": %{x} decode GPUs, attainment %{y:.1%}<extra></extra>"))
    fig.add_hline(y=t["attainment"], line={"dash": "dash", "color": "#b00"},
                  annotation_text=f"target {t['attainment']:.0%}", annotation_position="bottom right")
    fig.update_layout(title=f"Search: share of requests at >= {t['tps_per_user']:g} tok/s/user against decode GPUs "
                            "(saturated or overloaded runs fail whatever their share)",
                      xaxis_title="decode GPUs", xaxis_type="log", yaxis_title="SLA attainment (share of requests)",
                      yaxis_range=[0, 1], height=420, legend_title="system")
    return fig


def capacity_html(doc: dict) -> str:
    """The section's text and table (figures are added by the report, which embeds plotly once)."""
    t = doc["target"]
    pre = doc.get("prefill")
    pool = ""
    if pre:
        pool = (f" Prefill is disaggregated: the prefill pool is sized once for every system against the TTFT "
                f"limit ({pre['replicas']} replica(s) of {pre['gpus_per_replica']} GPU(s)); P:D is prefill GPUs to "
                "decode GPUs.")
    notes = []
    if doc.get("quick"):
        notes.append("<p class='warn'>Planned on quick runs (--quick): do not plan on these numbers.</p>")
    if doc.get("overrides"):
        notes.append("<p class='meta'>Overrides: " + html.escape(" ".join(f"--set {s}" for s in doc["overrides"]))
                     + "</p>")
    notes.append(notes_html(doc))
    table = table_html(report_plan(doc))
    engine = "".join(f"<p>{html.escape(line)}</p>" for line in engine_lines(doc))
    return f"""<p><strong>{html.escape(doc['verdict'])}</strong></p>
{engine}
<p class="meta">Per system, the fewest GPUs at which the scenario's open-loop traffic meets the SLA: at least
{t['attainment']:.0%} of requests at or above {t['tps_per_user']:g} tok/s/user, TTFT p99 within {t['ttft_p99_s']:g} s,
not saturated or overloaded (exponential-then-bisection search over replicas, at most {t['max_gpus']} GPUs a pool; a
count shown as N &gt; {t['max_gpus']} is what a system needs, above that limit, so unmet). Max req/s per
replica: the most traffic the chosen size sustains at the SLA, per replica. {html.escape(HEADROOM_RULE[0].upper() + HEADROOM_RULE[1:])}
(at the search's {t.get('rate_tolerance', 0.05):.0%} precision). SLA attainment: its 95% interval over the seeds in
brackets; GPUs: a range where the seeds cannot resolve the count. Cost per million output tokens at ${t['gpu_hour_cost_usd']:g} per GPU-hour, all GPUs
counted.{pool}</p>
{''.join(notes)}
{table}"""
