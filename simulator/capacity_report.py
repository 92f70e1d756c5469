"""The report's capacity section (from ``simulate plan``'s plan.json): the verdict, the plan table, the GPUs each
system needs (prefill and decode stacked) and the search's SLA attainment against decode GPUs."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from simulator.plan import MET, format_plan, unmet_lines


def gpus_figure(doc: dict, col: dict[str, str]) -> go.Figure:
    systems = list(doc["systems"])
    rows = [doc["systems"][s] for s in systems]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=systems, y=[r["decode_gpus"] for r in rows], name="decode GPUs",
                         marker={"color": [col.get(s, "#1f77b4") for s in systems],
                                 "pattern": {"shape": ["" if r["status"] == MET else "/" for r in rows]}},
                         hovertemplate="%{x}: %{y} decode GPUs<extra></extra>"))
    if any(r["prefill_gpus"] for r in rows):
        fig.add_trace(go.Bar(x=systems, y=[r["prefill_gpus"] for r in rows], name="prefill GPUs",
                             marker={"color": "#bbbbbb"}, hovertemplate="%{x}: %{y} prefill GPUs<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=systems, y=[r["gpus"] for r in rows], mode="text", showlegend=False, textposition="top center",
        text=[f"{r['gpus']}" if r["status"] == MET else f"{r['gpus']}: {r['status'].split('_')[0]}" for r in rows],
        hoverinfo="skip"))
    base = doc["systems"].get(doc.get("baseline") or "")
    if base is not None and base["status"] == MET:
        fig.add_hline(y=base["gpus"], line={"dash": "dash", "color": "#555"},
                      annotation_text=f"{html.escape(base['system'])}: {base['gpus']} GPUs",
                      annotation_position="top right")
    top = max([r["gpus"] for r in rows] + [1])
    fig.update_layout(title="GPUs needed at the SLA (hatched: not met, or not resolved, at the largest size tried)",
                      barmode="stack", xaxis_title="system", yaxis_title="GPUs", yaxis_range=[0, top * 1.15],
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
    unmet = unmet_lines(doc)
    if unmet:
        notes.append("<p class='warn'>Why unmet:</p><ul>" + "".join(f"<li>{html.escape(u[2:])}</li>" for u in unmet)
                     + "</ul>")
    table = format_plan(doc).to_html(index=False, classes="headline", border=0, escape=True)
    return f"""<p><strong>{html.escape(doc['verdict'])}</strong></p>
<p class="meta">Per system, the fewest GPUs at which the scenario's open-loop traffic meets the SLA: at least
{t['attainment']:.0%} of requests at or above {t['tps_per_user']:g} tok/s/user, TTFT p99 within {t['ttft_p99_s']:g} s,
not saturated or overloaded (exponential-then-bisection search over replicas, at most {t['max_gpus']} GPUs). Max req/s per
replica: the most traffic the chosen size sustains at the SLA, per replica; headroom: how much more traffic than
the scenario's that is. Cost per million output tokens at ${t['gpu_hour_cost_usd']:g} per GPU-hour, all GPUs
counted.{pool}</p>
{''.join(notes)}
{table}"""
