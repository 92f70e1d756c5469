"""One table against another at the first table's own points (``hw-profile compare``, and the view's ratio plot):
typically measured against analytic, T_measured / T_analytic at the same (B, K)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hw_profile.tables.step_table import StepTable, throttled_flags


def ratio_frame(first: StepTable, second: StepTable) -> pd.DataFrame:
    """Per ok point of ``first``: B, K, R, context, both step times and their ratio, sorted by context then B."""
    ok = first.ok
    b = ok["batch_tokens"].to_numpy(float)
    k = ok["kv_tokens"].to_numpy(float)
    other = second.grid.values(b, k)
    frame = pd.DataFrame({
        "context": ok["context"].to_numpy(float),
        "requests": ok["requests"].to_numpy(float),
        "batch_tokens": b,
        "kv_tokens": k,
        "step_ms": ok["step_ms"].to_numpy(float),
        "other_ms": other,
    })
    frame["ratio"] = frame["step_ms"] / frame["other_ms"]
    frame["throttled"] = throttled_flags(ok["throttled"])
    return frame.sort_values(["context", "batch_tokens", "kv_tokens"], na_position="first").reset_index(drop=True)


def summary_lines(frame: pd.DataFrame, first: str, second: str) -> list[str]:
    r = frame["ratio"].to_numpy(float)
    lines = [f"T({first}) / T({second}) over {len(r)} points: median {np.median(r):.3f}, "
             f"p10 {np.percentile(r, 10):.3f}, p90 {np.percentile(r, 90):.3f}, "
             f"range {r.min():.3f} to {r.max():.3f}; throttled points: {int(frame['throttled'].sum())}"]
    for ctx, g in frame.groupby("context", dropna=False):
        label = "all" if pd.isna(ctx) else f"context {int(ctx)}"
        by_b = g.groupby("batch_tokens")["ratio"].median()
        cells = ", ".join(f"B={int(bb)}: {v:.2f}" for bb, v in by_b.items())
        lines.append(f"  {label}: {cells}")
    return lines
