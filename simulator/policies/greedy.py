"""DSpark's hardware-aware prefix scheduler (paper, Algorithm 1), vectorised over the batch.

Candidates are the draft positions (r, j) with prefix survival a[r, j] = prod_{i<=j} c[r, i] > 0, taken in the order
(-a, r, j). Because a is non-increasing along j and ties keep j ascending, every prefix of that order assigns each
request a contiguous prefix, so "the first n candidates" is a valid verification plan for every n. Taking n of
them gives B = R + n tokens and expected emitted tokens tau = R + (sum of their a), and the objective is
Theta(n) = tau * SPS(B).

- early_stop=True (Algorithm 1): admit candidates while Theta rises strictly; stop at the first non-rise. The
  decision to admit position j never looks at a candidate after it, which is what keeps it lossless (Appendix A).
- early_stop=False (the retrospective "global" search): the first n that maximises Theta. For a fixed B the best
  plan is the top B - R candidates, so this is the exact optimum over all length vectors, for any SPS curve.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

SPS = Callable[[np.ndarray], np.ndarray]


def _survival(confidence: np.ndarray) -> np.ndarray:
    c = np.asarray(confidence, dtype=float)
    if c.ndim != 2:
        raise ValueError(f"confidence must be (R, gamma), got shape {c.shape}")
    if c.size and not (c.min() >= 0.0 and c.max() <= 1.0):  # also rejects NaN
        raise ValueError("confidence must lie in [0, 1]")
    return np.cumprod(c, axis=1).ravel()


def admission_order(confidence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices r * gamma + j of the positive-survival candidates in (-a, r, j) order, and their a."""
    a = _survival(confidence)
    order = _stable_descending(a)[: int(np.count_nonzero(a))]  # a >= 0: the positives sort first
    return order, a[order]


def _stable_descending(a: np.ndarray) -> np.ndarray:
    # Non-negative doubles order like their bit patterns read as int64, and a stable integer argsort is faster
    # than a float one; stability keeps equal a in ascending index, i.e. (r, j), order.
    return np.argsort(-a.view(np.int64), kind="stable")


def greedy_prefix_lengths(confidence: np.ndarray, sps: SPS, early_stop: bool = True) -> np.ndarray:
    """Per-request verification lengths l (R,) maximising Theta = tau * SPS(B).

    confidence: (R, gamma) conditional confidences in [0, 1]; 0 where a position must not be verified.
    sps: callable from an int array of total verification tokens B (anchors included, so B starts at R) to steps
         per second.
    """
    c = np.asarray(confidence, dtype=float)
    order, gains = admission_order(c)
    rows, gamma = c.shape
    if rows == 0 or len(order) == 0:
        return np.zeros(rows, dtype=np.int64)
    if early_stop:
        stop = _early_stop(rows, order, gains, sps)
        take = len(order) if stop is None else stop
    else:
        tau = rows + np.concatenate(([0.0], np.cumsum(gains)))
        theta = tau * np.asarray(sps(np.arange(rows, rows + len(order) + 1)), dtype=float)
        take = int(np.argmax(theta))  # first maximum: a later tie is no strict rise
    return np.bincount(order[:take] // gamma, minlength=rows).astype(np.int64)


def _early_stop(rows: int, order: np.ndarray, gains: np.ndarray, sps: SPS) -> int | None:
    """How many candidates Algorithm 1 admits along this order, or None when Theta rises through all of them.
    Walks the path in growing chunks: under load the stop comes early and most candidates are never priced. Each
    chunk prices n = start..stop (n = start repeats the previous chunk's last point, or is n = 0)."""
    start, tau0, chunk = 0, float(rows), max(2 * rows, 64)
    while start < len(order):
        stop = min(start + chunk, len(order))
        tau = np.empty(stop - start + 1)
        tau[0] = tau0
        np.cumsum(gains[start:stop], out=tau[1:])
        tau[1:] += tau0
        theta = tau * np.asarray(sps(np.arange(rows + start, rows + stop + 1)), dtype=float)
        falls = np.flatnonzero(theta[1:] <= theta[:-1])
        if len(falls):
            return start + int(falls[0])
        start, tau0, chunk = stop, float(tau[-1]), 4 * chunk
    return None


def top_k_prefix_lengths(confidence: np.ndarray, capacity: int) -> np.ndarray:
    """The first ``capacity`` candidates of the admission order, as per-request lengths (dspark-async)."""
    c = np.asarray(confidence, dtype=float)
    rows, gamma = c.shape
    if rows == 0 or gamma == 0 or capacity <= 0:
        return np.zeros(rows, dtype=np.int64)
    order, _ = admission_order(c)
    return np.bincount(order[:capacity] // gamma, minlength=rows).astype(np.int64)


def algorithm1_reference(confidence: list[list[float]], sps: Callable[[int], float], early_stop: bool = True) -> list[int]:
    """A plain-Python transcription of Algorithm 1, line by line, kept as the ground truth for tests and as the
    baseline the benchmark measures the vectorised version against."""
    rows = len(confidence)
    cands = []
    for r in range(rows):
        a = 1.0
        for j, c in enumerate(confidence[r], start=1):
            a *= c
            if a > 0.0:
                cands.append((-a, r, j))
    cands.sort()
    lengths = [0] * rows
    best = [0] * rows
    batch = rows
    tau = float(rows)
    theta_best = rows * sps(rows)
    for neg_a, r, j in cands:
        lengths[r] = j
        batch += 1
        tau += -neg_a
        theta = tau * sps(batch)
        if theta > theta_best:
            theta_best = theta
            best = list(lengths)
        elif early_stop:
            break
    return best
