"""Pareto frontiers of throughput per GPU against tokens/s per user, and what they say at SLA anchors.

Closed-loop load points trace, per system, a curve from few fast users to many slow ones. Its Pareto frontier
keeps the points no other point beats on both axes. At an SLA anchor (a TPS-per-user target) a system sustains
the throughput where its frontier crosses the anchor, interpolated linearly between the two frontier points that
bracket it. Nothing is extrapolated: a system whose frontier lies wholly below the anchor never reaches it, and
one whose frontier lies wholly above it was not swept to enough concurrency; both report no value (NaN).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       15: 2.131, 20: 2.086, 30: 2.042}


def t_quantile_95(dof: int) -> float:
    """Two-sided 95% Student-t quantile (table; 1.96 beyond 30 degrees of freedom)."""
    if dof <= 0:
        return float("nan")
    keys = sorted(k for k in T95 if k <= dof)
    return T95[keys[-1]] if dof <= 30 else 1.96


def mean_ci(values: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (NaN with one value)."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return float("nan"), float("nan")
    if len(v) == 1:
        return float(v[0]), float("nan")
    return float(v.mean()), float(t_quantile_95(len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))


def pareto_front(tps: np.ndarray, throughput: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (higher is better on both axes), by ascending TPS.

    A point is dominated when another is at least as good on both axes and better on one."""
    x = np.asarray(tps, dtype=float)
    y = np.asarray(throughput, dtype=float)
    ok = np.flatnonzero(~(np.isnan(x) | np.isnan(y)))
    # sweep from the fastest users down: keep a point when its throughput beats every faster point's
    order = ok[np.lexsort((-y[ok], -x[ok]))]
    keep, best = [], -np.inf
    for i in order:
        if y[i] > best:
            keep.append(i)
            best = y[i]
    return np.array(sorted(keep, key=lambda i: x[i]), dtype=np.int64)


def interpolate_at(xs: np.ndarray, ys: np.ndarray, x: float) -> float:
    """y at x along a polyline through (xs, ys) with ascending xs; NaN outside [xs[0], xs[-1]] (no extrapolation)."""
    xs = np.asarray(xs, dtype=float)
    ys = np.asarray(ys, dtype=float)
    if len(xs) == 0 or x < xs[0] or x > xs[-1]:
        return float("nan")
    return float(np.interp(x, xs, ys))


def anchor_status(tps: np.ndarray, throughput: np.ndarray, anchor: float) -> tuple[str, float]:
    """Where an anchor falls on a frontier: ("crossed", throughput there), ("unreachable", NaN) when even the
    fastest point is slower than the anchor, or ("above", the largest throughput swept) when every point is
    faster: the system sustains at least that much at the anchor, but how much more was not measured."""
    front = pareto_front(tps, throughput)
    t, y = np.asarray(tps, dtype=float)[front], np.asarray(throughput, dtype=float)[front]
    if len(t) == 0 or anchor > t[-1]:
        return "unreachable", float("nan")
    if anchor < t[0]:
        return "above", float(y[0])
    return "crossed", interpolate_at(t, y, anchor)


def throughput_at_anchor(tps: np.ndarray, throughput: np.ndarray, anchor: float) -> float:
    """The throughput where the frontier crosses the anchor; NaN when it does not (no extrapolation)."""
    status, value = anchor_status(tps, throughput, anchor)
    return value if status == "crossed" else float("nan")


def matched_throughput_gain(tps: np.ndarray, thr: np.ndarray, base_tps: np.ndarray, base_thr: np.ndarray) -> tuple[float, float]:
    """(min, max) of TPS_system / TPS_baseline - 1 at the baseline's frontier throughput levels where both
    frontiers reach (the paper's "X%-Y% faster per user at matched throughput")."""
    front = pareto_front(tps, thr)
    # along the system's frontier throughput falls as TPS rises: interpolate TPS in ascending throughput
    order = np.argsort(np.asarray(thr, dtype=float)[front])
    sys_thr = np.asarray(thr, dtype=float)[front][order]
    sys_tps = np.asarray(tps, dtype=float)[front][order]
    base = pareto_front(base_tps, base_thr)
    gains = []
    for level, base_speed in zip(np.asarray(base_thr)[base], np.asarray(base_tps)[base], strict=True):
        speed = interpolate_at(sys_thr, sys_tps, level)
        if not math.isnan(speed):
            gains.append(speed / base_speed - 1.0)
    return (float(min(gains)), float(max(gains))) if gains else (float("nan"), float("nan"))


def frontier_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Closed-loop points averaged over seeds (means and 95% half-widths), with each system's frontier marked."""
    closed = runs[runs["concurrency"].notna()]
    rows = []
    for (system, conc), g in closed.groupby(["policy", "concurrency"], sort=False):
        row = {"policy": system, "concurrency": int(conc), "seeds": len(g)}
        for col in ("tps_per_user", "throughput_per_gpu", "tps_per_user_p10", "mean_verify_budget", "tau",
                    "ttft_p99", "sla_attainment"):
            row[col], row[f"{col}_ci95"] = mean_ci(g[col].to_numpy(dtype=float))
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["on_frontier"] = False
    for _, g in table.groupby("policy", sort=False):
        front = pareto_front(g["tps_per_user"].to_numpy(), g["throughput_per_gpu"].to_numpy())
        table.loc[g.index[front], "on_frontier"] = True
    return table.sort_values(["policy", "concurrency"], key=_system_order(table)).reset_index(drop=True)


def _system_order(table: pd.DataFrame):
    order = {s: i for i, s in enumerate(dict.fromkeys(table["policy"]))}
    return lambda col: col.map(order) if col.name == "policy" else col


def anchors_summary(runs: pd.DataFrame, anchors: list[float], baseline: str | None) -> dict:
    """Per system and anchor: throughput at the anchor (mean over seeds, 95% half-width), gain over the baseline;
    and the TPS gain at matched throughput."""
    closed = runs[runs["concurrency"].notna()]
    systems = list(dict.fromkeys(closed["policy"]))
    per_seed: dict[str, dict[float, list[tuple[str, float]]]] = {s: {a: [] for a in anchors} for s in systems}
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for system in systems:
        mine = closed[closed["policy"] == system]
        for _, g in mine.groupby("seed"):
            for a in anchors:
                per_seed[system][a].append(anchor_status(g["tps_per_user"].to_numpy(), g["throughput_per_gpu"].to_numpy(), a))
        means = mine.groupby("concurrency")[["tps_per_user", "throughput_per_gpu"]].mean()
        curves[system] = (means["tps_per_user"].to_numpy(), means["throughput_per_gpu"].to_numpy())
    out: dict = {}
    for system in systems:
        entry: dict = {"anchors": {}}
        for a in anchors:
            statuses = [st for st, _ in per_seed[system][a]]
            vals = np.array([v for _, v in per_seed[system][a]], dtype=float)
            if all(st == "crossed" for st in statuses):
                mean, ci = mean_ci(vals)
                entry["anchors"][_anchor_key(a)] = {"status": "crossed", "throughput_per_gpu": mean, "ci95": ci}
            elif "unreachable" in statuses:
                entry["anchors"][_anchor_key(a)] = {"status": "unreachable", "throughput_per_gpu": float("nan")}
            else:  # above the anchor at the largest load swept in some seed: a lower bound, not a value
                entry["anchors"][_anchor_key(a)] = {"status": "above", "throughput_per_gpu": float("nan"),
                                                    "at_least": float(np.nanmin(vals))}
        out[system] = entry
    if baseline in out:
        for system in systems:
            for a in anchors:
                mine = out[system]["anchors"][_anchor_key(a)]["throughput_per_gpu"]
                base = out[baseline]["anchors"][_anchor_key(a)]["throughput_per_gpu"]
                gain = mine / base - 1.0 if (base > 0 and not math.isnan(mine)) else float("nan")
                out[system]["anchors"][_anchor_key(a)]["gain_vs_baseline"] = gain
            lo, hi = matched_throughput_gain(*curves[system], *curves[baseline])
            out[system]["tps_gain_at_matched_throughput"] = {"min": lo, "max": hi}
    return out


def _anchor_key(a: float) -> str:
    return f"{a:g}"


def default_baseline(systems: list[str], configured: str | None) -> str | None:
    if configured:
        return configured
    return "mtp-1" if "mtp-1" in systems else (systems[0] if systems else None)
