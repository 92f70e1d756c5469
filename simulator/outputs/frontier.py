"""Pareto frontiers of throughput per GPU against tokens/s per user, and what they say at SLA anchors.

Closed-loop load points trace, per system, a curve from few fast users to many slow ones. Its Pareto frontier
keeps the points no other point beats on both axes. At an SLA anchor (a TPS-per-user target) a system sustains
the throughput where its frontier crosses the anchor, interpolated linearly between the two frontier points that
bracket it. Nothing is extrapolated: a system none of whose points is that fast never reaches it, and one all of
whose swept points (not only the frontier's) are faster was not swept to enough concurrency; both report no value
(NaN). A system swept past the anchor whose frontier still lies wholly above it peaked before: its peak is the
value (``anchor_status``).
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
    """Where an anchor falls among a system's swept points:

    - ("unreachable", NaN): no point is as fast as the anchor;
    - ("above", the largest throughput swept): every swept point, on the frontier or not, is faster than the
      anchor: the system sustains at least that much there, but how much more was not measured;
    - ("crossed", throughput there): the frontier spans the anchor, interpolated between the two frontier points
      that bracket it;
    - ("peaked", the frontier's largest throughput): some swept point is slower than the anchor, but only a
      dominated one: loading the system past its peak lost throughput as well as speed, so the best it sustains
      at the anchor is its peak, a measured value."""
    x, y = np.asarray(tps, dtype=float), np.asarray(throughput, dtype=float)
    front = pareto_front(x, y)
    t, f = x[front], y[front]
    if len(t) == 0 or anchor > t[-1]:
        return "unreachable", float("nan")
    if anchor >= t[0]:
        return "crossed", interpolate_at(t, f, anchor)
    if np.nanmin(x) > anchor:
        return "above", float(f[0])
    return "peaked", float(f[0])


def frontier_curve(tps: np.ndarray, thr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A frontier as TPS per user against throughput, in ascending throughput (along it, speed falls as
    throughput rises, so this is a function)."""
    front = pareto_front(tps, thr)
    y, x = np.asarray(thr, dtype=float)[front], np.asarray(tps, dtype=float)[front]
    order = np.argsort(y)
    return y[order], x[order]


MEDIAN_GRID = 1001  # even throughput levels the median is read at: a 0.1% step of the shared range


def matched_throughput_gain(tps: np.ndarray, thr: np.ndarray, base_tps: np.ndarray,
                            base_thr: np.ndarray) -> dict[str, float]:
    """TPS_system / TPS_baseline - 1 at equal throughput, over the whole throughput range both frontiers span
    (the paper's "X%-Y% faster per user at matched throughput"): its min and max, its median over that range
    (the one number to read: half the range, in tok/s/GPU, gains more), and the range (``from``, ``to``,
    tokens/s/GPU). Both frontiers are piecewise linear in throughput, so on each piece between consecutive
    breakpoints of either the ratio is a linear fraction, monotone: its extremes lie at the breakpoints, which is
    where they are found; the median is read off an even grid over the range. NaN where the ranges do not
    overlap.

    A point where no user got past the first token (speed 0) is no operating point to compare at: against a
    baseline at speed 0 the ratio has no value (it would be infinite), so such points are left out of both
    curves (the run is flagged ``no_finished`` in the headline)."""
    tps, thr, base_tps, base_thr = (np.asarray(a, dtype=float) for a in (tps, thr, base_tps, base_thr))
    moving, base_moving = ~(tps <= 0), ~(base_tps <= 0)
    sy, sx = frontier_curve(tps[moving], thr[moving])
    by, bx = frontier_curve(base_tps[base_moving], base_thr[base_moving])
    nan = {"min": float("nan"), "max": float("nan"), "median": float("nan"), "from": float("nan"), "to": float("nan")}
    if len(sy) == 0 or len(by) == 0:
        return nan
    lo, hi = max(sy[0], by[0]), min(sy[-1], by[-1])
    if lo > hi:
        return nan
    levels = np.unique(np.concatenate([[lo, hi], sy[(sy >= lo) & (sy <= hi)], by[(by >= lo) & (by <= hi)]]))
    gain = np.interp(levels, sy, sx) / np.interp(levels, by, bx) - 1.0
    even = np.linspace(lo, hi, MEDIAN_GRID)
    median = float(np.median(np.interp(even, sy, sx) / np.interp(even, by, bx) - 1.0))
    return {"min": float(gain.min()), "max": float(gain.max()), "median": median, "from": float(lo), "to": float(hi)}


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
            if "unreachable" in statuses:
                entry["anchors"][_anchor_key(a)] = {"status": "unreachable", "throughput_per_gpu": float("nan")}
            elif "above" in statuses:  # above the anchor at the largest load swept in some seed: a lower bound
                entry["anchors"][_anchor_key(a)] = {"status": "above", "throughput_per_gpu": float("nan"),
                                                    "at_least": float(np.nanmin(vals))}
            else:
                mean, ci = mean_ci(vals)
                status = "crossed" if all(st == "crossed" for st in statuses) else "peaked"
                entry["anchors"][_anchor_key(a)] = {"status": status, "throughput_per_gpu": mean, "ci95": ci}
        out[system] = entry
    if baseline in out:
        for system in systems:
            for a in anchors:
                mine = out[system]["anchors"][_anchor_key(a)]["throughput_per_gpu"]
                base = out[baseline]["anchors"][_anchor_key(a)]["throughput_per_gpu"]
                gain = mine / base - 1.0 if (base > 0 and not math.isnan(mine)) else float("nan")
                out[system]["anchors"][_anchor_key(a)]["gain_vs_baseline"] = gain
            out[system]["tps_gain_at_matched_throughput"] = matched_throughput_gain(*curves[system],
                                                                                    *curves[baseline])
    return out


def _anchor_key(a: float) -> str:
    return f"{a:g}"


def default_baseline(systems: list[str], configured: str | None) -> str | None:
    if configured:
        return configured
    return "mtp-1" if "mtp-1" in systems else (systems[0] if systems else None)
