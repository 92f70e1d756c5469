"""Is the measurement window in steady state? Warm-up detection from the run itself (docs/model.md, "Metrics").

A run starts empty (open loop) or with every user arriving at once (closed loop), so the running batch and the KV
cache fill over the first request lifetimes; at high concurrency that takes longer than a fixed warm-up allows.
The state of the engine is read from the step log as two series over equal time bins of [0, end]: the running
requests and the KV tokens in use, each summed over replicas. The warm-up of each series is found with MSER
(the marginal standard error rule: truncate the d first bins that minimise the squared error of the remaining
mean, sum (x - mean)^2 / (n - d)^2, over d <= n/2); the run's settle time is the later of the two.

The window is steady when the settle time lies inside the warm-up used and neither series drifts across it:
a line fitted to it rises or falls by more than ``TOLERANCE`` of its level over the window, and its slope is
more than three standard errors from zero (``drifting``). A
truncation at the n/2 limit (MSER finds no end to the transient, or long slow swings) moves nothing; the drift
test then decides.
"""

from __future__ import annotations

import numpy as np

BINS = 100
TOLERANCE = 0.05  # relative rise (or fall) of a series across the window above which the window is drifting


def state_series(steps: dict[str, np.ndarray], end: float, replicas: int, bins: int = BINS) -> tuple[np.ndarray, ...]:
    """(bin edges, running requests, KV tokens in use) over [0, end]: each replica's steps ending in a bin,
    averaged with their durations as weights, times the replicas. A bin in which no step ends but one runs
    (steps longer than a bin: a large batch in a short run) holds that step's state; a bin no step touches
    (an idle engine) holds 0; bins after the last step logged hold NaN (a step may be under way: the run
    is read at the window's end, before its drain). Read as 0, the long steps of a full batch made a run look like noise around a
    low level, and its KV cache, still filling, passed as steady."""
    edges = np.linspace(0.0, end, bins + 1)
    keep = steps["end"] <= end
    w = steps["step_ms"][keep]
    b = np.clip(np.searchsorted(edges, steps["end"][keep], side="right") - 1, 0, bins - 1)
    weight = np.bincount(b, weights=w, minlength=bins)
    empty = np.flatnonzero(weight <= 0)
    # the first step (of the whole run: the last bins' may end after ``end``) ending after an empty bin
    # starts, and whether it had started by the bin's end
    order = np.argsort(steps["end"], kind="stable")
    nxt = np.searchsorted(steps["end"][order], edges[empty], side="right")
    inside = nxt < len(order)
    nxt = order[np.minimum(nxt, len(order) - 1)] if len(order) else nxt
    if len(order):
        inside &= steps["end"][nxt] - steps["step_ms"][nxt] * 1e-3 <= edges[empty + 1]

    def mean(col: str) -> np.ndarray:
        total = np.bincount(b, weights=w * steps[col][keep], minlength=bins)
        out = np.divide(total, weight, out=np.zeros(bins), where=weight > 0)
        if len(order):
            out[empty[inside]] = steps[col][nxt[inside]]
            # after the last step logged, a step may be running whose state is not known yet: no value
            out[edges[:-1] >= steps["end"].max()] = np.nan
        return out * replicas

    return edges, mean("running"), mean("kv_used")


def mser(x: np.ndarray) -> int:
    """MSER truncation point: the number of leading values to drop (0..len(x)//2)."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n < 4:
        return 0
    # suffix sums give every candidate's squared error in one pass
    s1 = np.cumsum(x[::-1])[::-1]
    s2 = np.cumsum((x * x)[::-1])[::-1]
    d = np.arange(n // 2 + 1)
    m = n - d
    sse = s2[d] - s1[d] ** 2 / m
    return int(np.argmin(sse / m**2))


def drifting(x: np.ndarray, tolerance: float = TOLERANCE, z: float = 3.0, batches: int = 10) -> bool:
    """Does ``x`` still trend across the window, materially (the fitted line rises or falls by more than
    ``tolerance`` of the mean level over the window) and significantly (its slope is more than ``z`` standard
    errors from zero)? The line is fitted to ``batches`` batch means; the noise is read from the successive
    differences of the detrended batch means (von Neumann), which neither the trend nor slow drift inflates.

    The rise over the whole window, not the difference of its halves: a cache still filling at a steady pace
    changes its half-means by only half its rise, so a KV cache that grew 9.5% across a window (768 users,
    quick run) passed a 5% test on halves as steady."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return False
    means = np.array([c.mean() for c in np.array_split(x, min(batches, len(x)))])
    k = len(means)
    t = np.arange(k) - (k - 1) / 2
    sxx = float((t * t).sum())
    slope = float((t * (means - means.mean())).sum() / sxx)
    level = max(abs(float(x.mean())), 1e-9)
    if abs(slope) * k <= tolerance * level:
        return False
    noise = np.sqrt(np.mean((np.diff(means) - slope) ** 2) / 2) if k > 2 else 0.0
    return abs(slope) > z * noise / np.sqrt(sxx)


def choose_warmup(steps: dict[str, np.ndarray], end: float, replicas: int, configured: float, adjust: bool,
                  bins: int = BINS) -> tuple[float, bool]:
    """(warm-up to use, whether [warm-up, end] is steady). With ``adjust`` the warm-up grows to the settle time
    when that is longer than the configured one and within the run's first half; without (traffic that varies by
    design: a tide, a trace) the configured warm-up is kept and only checked. A cut at the n/2 limit moves
    nothing; the drift test on the window then decides."""
    edges, running, kv = state_series(steps, end, replicas, bins)
    known = int(np.flatnonzero(~np.isnan(running))[-1]) + 1 if (~np.isnan(running)).any() else 0
    edges, running, kv = edges[:known + 1], running[:known], kv[:known]
    cuts = [c for c in (mser(running), mser(kv)) if c < known // 2]
    settle = float(edges[max(cuts)]) if cuts else 0.0
    warmup = max(configured, settle) if adjust else configured
    window = np.flatnonzero(edges[1:] > warmup)
    if settle > warmup + 1e-9 or len(window) < 2:
        return warmup, False
    return warmup, not any(drifting(x[window]) for x in (running, kv))
