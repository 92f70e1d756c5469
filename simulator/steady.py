"""Is the measurement window in steady state? Warm-up detection from the run itself (docs/model.md, "Warm-up").

A run starts empty (open loop) or with every user arriving at once (closed loop), so the running batch and the KV
cache fill over the first request lifetimes; at high concurrency that takes longer than a fixed warm-up allows.
The state of the engine is read from the step log as two series over equal time bins of [0, end]: the running
requests and the KV tokens in use, each summed over replicas. The warm-up of each series is found with MSER
(the marginal standard error rule: truncate the d first bins that minimise the squared error of the remaining
mean, sum (x - mean)^2 / (n - d)^2, over d <= n/2); the run's settle time is the later of the two.

The window is steady when the settle time lies inside the warm-up used, the truncation did not run into the
n/2 limit (the series keeps drifting), and the window's two halves agree on both series within ``TOLERANCE``.
"""

from __future__ import annotations

import numpy as np

BINS = 100
TOLERANCE = 0.05  # relative difference of the window's half-means above which the window is drifting


def state_series(steps: dict[str, np.ndarray], end: float, replicas: int, bins: int = BINS) -> tuple[np.ndarray, ...]:
    """(bin edges, running requests, KV tokens in use) over [0, end]: each replica's steps ending in a bin,
    averaged with their durations as weights, times the replicas (bins without a step hold 0)."""
    edges = np.linspace(0.0, end, bins + 1)
    keep = steps["end"] <= end
    b = np.clip(np.searchsorted(edges, steps["end"][keep], side="right") - 1, 0, bins - 1)
    w = steps["step_ms"][keep]
    weight = np.bincount(b, weights=w, minlength=bins)

    def mean(col: str) -> np.ndarray:
        total = np.bincount(b, weights=w * steps[col][keep], minlength=bins)
        return np.divide(total, weight, out=np.zeros(bins), where=weight > 0) * replicas

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


def settle_time(steps: dict[str, np.ndarray], end: float, replicas: int, bins: int = BINS) -> float:
    """When the engine's state settles, in seconds (the later MSER cut of the two series)."""
    edges, running, kv = state_series(steps, end, replicas, bins)
    return float(edges[max(mser(running), mser(kv))])


def choose_warmup(steps: dict[str, np.ndarray], end: float, replicas: int, configured: float, adjust: bool,
                  bins: int = BINS) -> tuple[float, bool]:
    """(warm-up to use, whether [warm-up, end] is steady). With ``adjust`` the warm-up grows to the settle time
    when that is longer than the configured one and within the run's first half; without (traffic that varies by
    design: a tide, a trace) the configured warm-up is kept and only checked."""
    edges, running, kv = state_series(steps, end, replicas, bins)
    cut = max(mser(running), mser(kv))
    settle = float(edges[cut])
    warmup = max(configured, settle) if adjust and cut < bins // 2 else configured
    if cut >= bins // 2 or settle > warmup + 1e-9:
        return warmup, False
    window = np.flatnonzero(edges[1:] > warmup)
    half = len(window) // 2
    if half == 0:
        return warmup, False
    for x in (running, kv):
        a, b = x[window[:half]].mean(), x[window[half:]].mean()
        if abs(b - a) > TOLERANCE * max(a, b, 1e-9):
            return warmup, False
    return warmup, True
