"""A self-contained HTML view of step-time tables (``hw-profile show``): plotly embedded, works offline.

1. SPS(B) = 1000 / step_ms. For a measured table, one line per (context, tokens per request) over the requests R,
   with the p10-p90 spread as error bars and throttled points marked; for a table without a context column
   (analytic), one line per K row (a handful spread over the K axis).
2. With a second table: its SPS at the first table's own (B, K) points, dashed, on the same axes, and the ratio
   T_first / T_second over B per context (measured against analytic when the second is analytic).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from atomic_files import atomic_write_text
from hw_profile.tables.sidecar import table_caveat
from hw_profile.tables.step_table import StepTable, throttled_flags
from hw_profile.view.compare import ratio_frame

_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22"]


def _series(table: StepTable, max_rows: int = 6) -> list[tuple[str, pd.DataFrame]]:
    """(label, points sorted by B) for each line of the SPS plot."""
    ok = table.ok.copy()
    has_context = ok["context"].notna().all() and ok["requests"].notna().all()
    out = []
    if has_context:
        ok["tpr"] = (ok["batch_tokens"] / ok["requests"]).round().astype(int)
        for (ctx, tpr), g in ok.groupby(["context", "tpr"], sort=True):
            out.append((f"context {int(ctx)}, {tpr} tok/req", g.sort_values("batch_tokens")))
        return out
    ks = np.unique(ok["kv_tokens"].to_numpy(float))
    picks = ks[np.unique(np.linspace(0, len(ks) - 1, min(max_rows, len(ks))).round().astype(int))]
    for k in picks:
        g = ok[ok["kv_tokens"] == k].sort_values("batch_tokens")
        out.append((f"K = {int(k):,}", g))
    return out


def sps_figure(first: StepTable, second: StepTable | None = None):
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, (label, g) in enumerate(_series(first)):
        color = _PALETTE[i % len(_PALETTE)]
        b = g["batch_tokens"].to_numpy(float)
        ms = g["step_ms"].to_numpy(float)
        sps = 1000.0 / ms
        p10 = pd.to_numeric(g["step_ms_p10"], errors="coerce").to_numpy(float)
        p90 = pd.to_numeric(g["step_ms_p90"], errors="coerce").to_numpy(float)
        error = None
        if np.isfinite(p10).all() and np.isfinite(p90).all() and (p10 != p90).any():
            error = dict(type="data", symmetric=False, array=1000.0 / p10 - sps, arrayminus=sps - 1000.0 / p90,
                         thickness=1)
        throttled = throttled_flags(g["throttled"])
        fig.add_trace(go.Scatter(
            x=b, y=sps, mode="lines+markers", name=f"{first.label()}: {label}", line=dict(color=color),
            marker=dict(symbol=np.where(throttled, "x", "circle"), size=np.where(throttled, 11, 6)),
            error_y=error,
            customdata=np.stack([g["kv_tokens"].to_numpy(float), ms], axis=-1),
            hovertemplate="B=%{x}<br>K=%{customdata[0]:,}<br>%{customdata[1]:.3f} ms<br>SPS %{y:.1f}<extra></extra>",
        ))
        if second is not None:
            other = second.grid.values(b, g["kv_tokens"].to_numpy(float))
            fig.add_trace(go.Scatter(
                x=b, y=1000.0 / other, mode="lines", name=f"{second.label()}: {label}",
                line=dict(color=color, dash="dash"),
                hovertemplate="B=%{x}<br>SPS %{y:.1f}<extra>" + html.escape(second.label()) + "</extra>",
            ))
    fig.update_layout(title="Steps per second SPS(B) = 1000 / T(B, K)", xaxis_title="batch tokens B",
                      yaxis_title="steps per second", template="plotly_white", height=560)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig


def ratio_figure(first: StepTable, second: StepTable):
    import plotly.graph_objects as go

    frame = ratio_frame(first, second)
    fig = go.Figure()
    groups = frame.groupby("context", dropna=False) if frame["context"].notna().all() else [(None, frame)]
    for i, (ctx, g) in enumerate(groups):
        label = "all points" if ctx is None or pd.isna(ctx) else f"context {int(ctx)}"
        fig.add_trace(go.Scatter(
            x=g["batch_tokens"], y=g["ratio"], mode="markers", name=label,
            marker=dict(color=_PALETTE[i % len(_PALETTE)], symbol=np.where(g["throttled"], "x", "circle")),
            customdata=np.stack([g["kv_tokens"], g["step_ms"], g["other_ms"]], axis=-1),
            hovertemplate="B=%{x}<br>K=%{customdata[0]:,}<br>%{customdata[1]:.3f} ms vs %{customdata[2]:.3f} ms"
                          "<br>ratio %{y:.3f}<extra></extra>",
        ))
        med = g.groupby("batch_tokens")["ratio"].median()
        fig.add_trace(go.Scatter(x=med.index, y=med.to_numpy(), mode="lines", showlegend=False,
                                 line=dict(color=_PALETTE[i % len(_PALETTE)]), hoverinfo="skip"))
    fig.add_hline(y=1.0, line=dict(color="#444", dash="dot"))
    fig.update_layout(title=f"T({html.escape(first.label())}) / T({html.escape(second.label())}) at the same (B, K)",
                      xaxis_title="batch tokens B", yaxis_title="step-time ratio", template="plotly_white",
                      height=480)
    fig.update_xaxes(type="log")
    return fig, frame["ratio"].to_numpy(float)


def _summary(table: StepTable) -> str:
    m = table.meta
    keys = ("kind", "device", "cpu_model", "driver", "cuda", "torch", "dtype", "model", "layers_override",
            "drafter_layers", "gpus", "timer", "date", "command", "note", "interrupted")
    lines = {k: m[k] for k in keys if k in m}
    if isinstance(m.get("telemetry"), dict):
        lines["telemetry"] = m["telemetry"].get("telemetry")
    if isinstance(m.get("model_shape"), dict):
        lines["model_shape"] = m["model_shape"].get("name")
    pts = table.points
    lines["points"] = f"{int((pts['status'] == 'ok').sum())} ok, {int((pts['status'] != 'ok').sum())} skipped"
    if "throttled" in pts:
        lines["throttled points"] = int(throttled_flags(pts["throttled"]).sum())
    return html.escape(json.dumps(lines, indent=1, default=str))


def _caveat(table: StepTable) -> str:
    caveat = table_caveat(table.meta)
    if caveat is None:
        return ""
    return f"<p class=\"caveat\"><b>{html.escape(str(caveat['kind']))}</b>: {html.escape(str(caveat['text']))}.</p>"


def write_view(tables: list[StepTable], out: str | Path) -> Path:
    """Write the view of one table, or of the first against the second."""
    import plotly.io as pio

    first = tables[0]
    second = tables[1] if len(tables) > 1 else None
    parts = [pio.to_html(sps_figure(first, second), include_plotlyjs=True, full_html=False)]
    ratio_note = ""
    if second is not None:
        fig, ratios = ratio_figure(first, second)
        parts.append(pio.to_html(fig, include_plotlyjs=False, full_html=False))
        if ratios.size:
            ratio_note = (f"<p>T({html.escape(first.label())}) / T({html.escape(second.label())}): median "
                          f"{np.median(ratios):.3f}, range {ratios.min():.3f} to {ratios.max():.3f} over "
                          f"{ratios.size} points.</p>")
    title = " vs ".join(html.escape(t.label()) for t in tables)
    summaries = "".join(f"<h3>{html.escape(t.label())}</h3>{_caveat(t)}<pre>{_summary(t)}</pre>" for t in tables)
    doc = (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>step time: {title}</title>"
        "<style>body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}"
        "pre{background:#f6f6f6;padding:.6em;font-size:12px;overflow-x:auto}</style></head><body>"
        f"<h1>Step time: {title}</h1>{ratio_note}{''.join(parts)}{summaries}</body></html>\n"
    )
    return atomic_write_text(out, doc)
