"""The report's open-loop panels: counts and rates drawn from zero, whatever their smallest value."""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.outputs.report import open_loop_figure


def test_queue_and_other_counts_start_at_zero():
    t = np.linspace(0.5, 30, 60)
    series = {"time": list(t), "arrivals_per_s": [40.0] * 60, "sla_attainment": [0.97] * 60,
              "queued": list(0.5 + np.abs(np.sin(t))), "running": list(30 + np.sin(t)),
              "verify_budget": [3.2] * 60, "throughput_per_gpu": list(9000 + 50 * np.sin(t))}
    runs = pd.DataFrame([{"policy": "dspark", "concurrency": np.nan, "series": series}])
    fig = open_loop_figure(runs, {"dspark": "#000"}, 1.0)
    titles = [a.text for a in fig.layout.annotations]
    axes = {title: fig.layout[f"yaxis{i + 1 if i else ''}"] for i, title in enumerate(titles)}
    for title in ("Waiting requests (queue)", "Running requests", "Arrivals per second", "Throughput"):
        assert axes[title].rangemode == "tozero", title
    assert tuple(axes["SLA attainment of finishing requests"].range) == (0, 1)
    assert axes["Mean verification budget (1 + l)"].rangemode is None  # at least 1 token: fitted to its data
