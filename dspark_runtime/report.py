"""Self-contained plotly HTML figures of an evaluation: reliability diagrams (raw and STS-calibrated prefix
survival per position, as the paper's Figure 6) and conditional acceptance by position (Figure 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from atomic_files import atomic_write_text
from simulator.core.calibration import reliability


def reliability_html(path: Path, title: str, panels: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                     positions: list[int]) -> None:
    """panels: row label -> (raw (N, gamma), calibrated (N, gamma), accepted (N,)); one column per position."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = list(panels)
    fig = make_subplots(rows=len(rows), cols=len(positions), shared_xaxes=True, shared_yaxes=True,
                        subplot_titles=[f"{r} - position {k}" for r in rows for k in positions],
                        horizontal_spacing=0.02, vertical_spacing=0.06)
    for i, row in enumerate(rows, start=1):
        raw, cal, acc = panels[row]
        for j, k in enumerate(positions, start=1):
            outcome = acc >= k
            for name, conf, color in (("raw", raw, "#d62728"), ("STS-calibrated", cal, "#1f77b4")):
                a = np.cumprod(conf, axis=1)[:, k - 1]
                rel = reliability(a, outcome)
                ok = rel["count"] > 0
                fig.add_trace(go.Scatter(x=rel["confidence"][ok], y=rel["observed"][ok], mode="lines+markers",
                                         name=name, line={"color": color}, legendgroup=name,
                                         showlegend=(i == 1 and j == 1),
                                         customdata=rel["count"][ok],
                                         hovertemplate="predicted %{x:.3f}<br>observed %{y:.3f}<br>n=%{customdata}"),
                              row=i, col=j)
            fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dot", "color": "gray"},
                                     showlegend=False, hoverinfo="skip"), row=i, col=j)
    fig.update_layout(title=title, height=280 * len(rows) + 120, width=260 * len(positions) + 120)
    fig.update_xaxes(range=[0, 1], title_text="predicted prefix survival", row=len(rows))
    fig.update_yaxes(range=[0, 1], title_text="observed", col=1)
    atomic_write_text(path, fig.to_html(include_plotlyjs=True, full_html=True))


def acceptance_html(path: Path, title: str, curves: dict[str, dict[str, list[float]]]) -> None:
    """curves: domain -> drafter -> conditional acceptance by position."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    domains = list(curves)
    fig = make_subplots(rows=1, cols=len(domains), subplot_titles=domains)
    palette = {"dspark": "#1f77b4", "dflash": "#ff7f0e", "eagle3": "#2ca02c", "dspark-gated": "#9467bd",
               "dspark-rnn": "#8c564b"}
    for j, dom in enumerate(domains, start=1):
        for drafter, ys in curves[dom].items():
            fig.add_trace(go.Scatter(x=list(range(1, len(ys) + 1)), y=ys, mode="lines+markers", name=drafter,
                                     legendgroup=drafter, showlegend=j == 1,
                                     line={"color": palette.get(drafter)}), row=1, col=j)
    fig.update_xaxes(title_text="draft position")
    fig.update_yaxes(title_text="conditional acceptance", col=1)
    fig.update_layout(title=title, height=420, width=380 * len(domains) + 100)
    atomic_write_text(path, fig.to_html(include_plotlyjs=True, full_html=True))


def markdown_summary(results: dict) -> str:
    """The evaluation's headline tables in Markdown: tau per domain, conditional acceptance by position,
    confidence ECE before and after STS (mean over positions, and per position)."""
    drafters = results["drafters"]
    domains = [d for d in ("math", "code", "chat", "all") if any(d in r["domains"] for r in drafters.values())]
    lines = ["### tau (accepted length per step, bonus included; +- one standard error, clustered by request)", "",
             "| drafter | " + " | ".join(domains) + " | blocks |", "|---" * (len(domains) + 2) + "|"]
    for name, r in drafters.items():
        taus = [f"{r['domains'][d]['tau']:.3f} +- {r['domains'][d]['tau_se']:.3f}" if d in r["domains"] else ""
                for d in domains]
        blocks = sum(r["domains"][d]["blocks"] for d in domains if d in r["domains"] and d != "all")
        lines.append(f"| {name} | " + " | ".join(taus) + f" | {blocks} |")
    lines += ["", "### Conditional acceptance by draft position", ""]
    gamma = max(r["gamma"] for r in drafters.values())
    lines += ["| domain | drafter | " + " | ".join(str(k) for k in range(1, gamma + 1)) + " |",
              "|---" * (gamma + 2) + "|"]
    for d in domains:
        for name, r in drafters.items():
            if d in r["domains"]:
                cond = r["domains"][d]["conditional_acceptance"]
                lines.append(f"| {d} | {name} | " + " | ".join("" if c != c else f"{c:.3f}" for c in cond) + " |")
    with_conf = {n: r for n, r in drafters.items() if "ece_raw" in next(iter(r["domains"].values()), {})}
    if with_conf:
        lines += ["", "### Confidence head: ECE of prefix survival (20 bins), raw -> STS-calibrated", "",
                  "| drafter | domain | mean ECE raw | mean ECE STS | mean AUROC | per position (raw -> STS) |",
                  "|---|---|---|---|---|---|"]
        for name, r in with_conf.items():
            for d in domains:
                m = r["domains"].get(d)
                if not m:
                    continue
                per = ", ".join(f"{a:.3f}->{b:.3f}" for a, b in zip(m["ece_raw"], m["ece_calibrated"], strict=True))
                lines.append(f"| {name} | {d} | {m['ece_raw_mean']:.4f} | {m['ece_calibrated_mean']:.4f} | "
                             f"{m['auroc_mean']:.3f} | {per} |")
    return "\n".join(lines) + "\n"
