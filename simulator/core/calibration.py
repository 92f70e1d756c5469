"""Confidence quality and calibration, in numpy: ECE, AUROC, Brier, and Sequential Temperature Scaling (STS).

Conventions. A block of gamma draft tokens has per-position conditional confidences c (N, gamma) and an outcome
``accepted`` (N,) = number of leading draft tokens accepted (0..gamma). Prefix survival a_k = prod_{i<=k} c_i
predicts the event accepted >= k. STS (paper 3.2.1) fits, left to right, one temperature per position,
c_k -> sigmoid(logit(c_k) / T_k), by a 1-D grid search minimising the ECE of a_k with earlier positions frozen.
Temperature scaling keeps the order of confidences at each position, so AUROC is unchanged.

The runtime (torch) uses these same functions on its evaluation outputs, so there is one definition of each metric.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-6
DEFAULT_TEMPERATURES = np.concatenate([np.linspace(0.25, 1.0, 31), np.linspace(1.025, 4.0, 120)])


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free


def ece(confidence: np.ndarray, outcome: np.ndarray, bins: int = 20) -> float:
    """Expected calibration error with equal-width bins: sum over bins of |mean conf - mean outcome| x share."""
    conf = np.asarray(confidence, dtype=float).ravel()
    out = np.asarray(outcome, dtype=float).ravel()
    if conf.size == 0:
        return float("nan")
    idx = np.minimum((conf * bins).astype(np.int64), bins - 1)
    gap = np.bincount(idx, weights=conf, minlength=bins) - np.bincount(idx, weights=out, minlength=bins)
    return float(np.abs(gap).sum() / conf.size)


def reliability(confidence: np.ndarray, outcome: np.ndarray, bins: int = 20) -> dict[str, np.ndarray]:
    """Per-bin mean confidence, observed rate and count (bins with no sample are NaN, count 0)."""
    conf = np.asarray(confidence, dtype=float).ravel()
    out = np.asarray(outcome, dtype=float).ravel()
    idx = np.minimum((conf * bins).astype(np.int64), bins - 1)
    count = np.bincount(idx, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(idx, weights=conf, minlength=bins) / count
        rate = np.bincount(idx, weights=out, minlength=bins) / count
    return {"bin_lo": np.arange(bins) / bins, "confidence": mean_conf, "observed": rate, "count": count}


def auroc(score: np.ndarray, label: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties); NaN when one class is absent."""
    s = np.asarray(score, dtype=float).ravel()
    y = np.asarray(label, dtype=bool).ravel()
    pos = int(y.sum())
    neg = y.size - pos
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    ranks = np.empty(s.size)
    # average ranks over runs of equal scores
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], s.size]
    avg = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def brier(confidence: np.ndarray, outcome: np.ndarray) -> float:
    c = np.asarray(confidence, dtype=float).ravel()
    o = np.asarray(outcome, dtype=float).ravel()
    return float(np.mean((c - o) ** 2)) if c.size else float("nan")


def survival_outcomes(accepted: np.ndarray, gamma: int) -> np.ndarray:
    """(N, gamma) booleans: accepted >= k for k = 1..gamma."""
    return np.asarray(accepted)[:, None] >= np.arange(1, gamma + 1)[None, :]


def sts_fit(confidence: np.ndarray, accepted: np.ndarray, temperatures: np.ndarray = DEFAULT_TEMPERATURES,
            bins: int = 20) -> np.ndarray:
    """Per-position temperatures (gamma,) fitted left to right on a held-out set (see module docstring)."""
    c = np.asarray(confidence, dtype=float)
    n, gamma = c.shape
    survived = survival_outcomes(accepted, gamma)
    z = logit(c)
    temps = np.ones(gamma)
    prefix = np.ones(n)
    for k in range(gamma):
        # every candidate temperature at once: (T, N) cumulative products
        cand = prefix[None, :] * sigmoid(z[None, :, k] / temperatures[:, None])
        errs = [ece(row, survived[:, k], bins) for row in cand]
        best = int(np.argmin(errs))
        temps[k] = temperatures[best]
        prefix = cand[best]
    return temps


def sts_apply(confidence: np.ndarray, temperatures: np.ndarray) -> np.ndarray:
    return sigmoid(logit(np.asarray(confidence, dtype=float)) / np.asarray(temperatures)[None, :])


def confidence_report(confidence: np.ndarray, accepted: np.ndarray, bins: int = 20) -> dict[str, list[float]]:
    """Per position k: ECE of prefix survival a_k against accepted >= k (all blocks), AUROC and Brier of the
    conditional c_k against acceptance of k among the blocks that reached k."""
    c = np.asarray(confidence, dtype=float)
    acc = np.asarray(accepted)
    gamma = c.shape[1]
    a = np.cumprod(c, axis=1)
    survived = survival_outcomes(acc, gamma)
    out: dict[str, list[float]] = {"ece": [], "auroc": [], "brier": [], "reached": []}
    for k in range(gamma):
        reached = acc >= k
        out["ece"].append(ece(a[:, k], survived[:, k], bins))
        out["auroc"].append(auroc(c[reached, k], survived[reached, k]))
        out["brier"].append(brier(c[reached, k], survived[reached, k]))
        out["reached"].append(int(reached.sum()))
    return out
