"""Is the measurement window in steady state? Warm-up detection from the run itself (docs/model.md, "Metrics").

A run starts empty (open loop) or with every user arriving at once (closed loop), so the running batch and the KV
cache fill over the first request lifetimes; at high concurrency that takes longer than a fixed warm-up allows.
The state of the engine is read from the step log as two series over equal time bins of [0, end]: the running
requests and the KV tokens in use, each summed over replicas. The warm-up of each series is found with MSER
(the marginal standard error rule: truncate the d first bins that minimise the squared error of the remaining
mean, sum (x - mean)^2 / (n - d)^2, over d <= n/2); the run's settle time is the later of the two.

The window is steady when the settle time lies inside the warm-up used and neither series drifts across it:
its two halves differ by more than ``TOLERANCE`` and by more than three standard errors (``drifting``). A
truncation at the n/2 limit (MSER finds no end to the transient, or long slow swings) moves nothing; the drift
test then decides.
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


def drifting(x: np.ndarray, tolerance: float = TOLERANCE, z: float = 3.0, batches: int = 10) -> bool:
    """Do the two halves of ``x`` differ materially (by more than ``tolerance`` of the larger) and significantly
    (by more than ``z`` standard errors)? The noise is read from the successive differences of ``batches`` batch
    means (von Neumann), which a trend does not inflate the way a plain standard deviation would."""
    x = np.asarray(x, dtype=float)
    half = len(x) // 2
    if half == 0:
        return False
    a, b = x[:half].mean(), x[half:].mean()
    if abs(b - a) <= tolerance * max(abs(a), abs(b), 1e-9):
        return False
    means = np.array([c.mean() for c in np.array_split(x, min(batches, len(x)))])
    noise = np.sqrt(np.mean(np.diff(means) ** 2) / 2) if len(means) > 1 else 0.0
    se = noise * np.sqrt(2.0 / (len(means) / 2))  # difference of two means of len(means)/2 batches each
    return abs(b - a) > z * se


def choose_warmup(steps: dict[str, np.ndarray], end: float, replicas: int, configured: float, adjust: bool,
                  bins: int = BINS) -> tuple[float, bool]:
    """(warm-up to use, whether [warm-up, end] is steady). With ``adjust`` the warm-up grows to the settle time
    when that is longer than the configured one and within the run's first half; without (traffic that varies by
    design: a tide, a trace) the configured warm-up is kept and only checked. A cut at the n/2 limit moves
    nothing; the drift test on the window then decides."""
    edges, running, kv = state_series(steps, end, replicas, bins)
    cuts = [c for c in (mser(running), mser(kv)) if c < bins // 2]
    settle = float(edges[max(cuts)]) if cuts else 0.0
    warmup = max(configured, settle) if adjust else configured
    window = np.flatnonzero(edges[1:] > warmup)
    if settle > warmup + 1e-9 or len(window) < 2:
        return warmup, False
    return warmup, not any(drifting(x[window]) for x in (running, kv))
